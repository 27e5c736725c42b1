"""FlashAttention backward (lesson 07), from correct to fast: autotuned, and the trainable layer.

The kernels are the lesson's (``flash_attention_backward.py``), unchanged; what this step adds is
``triton.autotune`` over ``DKDV_CONFIGS`` and ``DQ_CONFIGS`` on a GPU (keyed on N, D, causal and the
dtype), pruned to configs whose fp32 accumulators fit in registers. ``attention`` is the trainable
layer made of the tuned forward (``attention_forward.py``) and this backward: the reference's fast
path on a GPU, which the benchmarks (``benchmarks/flash_attention.py``) and the recorded H200
figures measure behind a lean launch (``attention.py``). Compiled for sm_90 with triton 3.9, every
config below fits without register spills except those the prune drops: fp32 accumulators of more
than MAX_ACC_REGS registers per thread (e.g. dK/dV with BLOCK_N=128, D=128, 4 warps). Configs that
need more shared memory than the GPU has fail at launch; autotune skips them.
"""

import torch
import triton
import triton.language as tl

from tkcourse.mode import INTERPRET

from .._checks import validate
from ..flash_attention_autograd import trainable
from ..flash_attention_backward import (  # noqa: F401
    attn_bwd_dkdv,
    attn_bwd_dq,
    check_inputs,
    checked_config,
    compute_delta,
    reference,
    reference_backward,
)
from . import attention_forward as forward

#: dK/dV kernel: BLOCK_N keys per program (kept on chip), BLOCK_M queries per step.
DKDV_CONFIGS = [
    triton.Config({"BLOCK_N": bn, "BLOCK_M": bm}, num_warps=w, num_stages=s)
    for bn, bm, w in [(64, 32, 4), (64, 64, 4), (128, 32, 4), (128, 32, 8), (128, 64, 8)]
    for s in (2, 3)
]
#: dQ kernel: BLOCK_M queries per program (kept on chip), BLOCK_N keys per step.
DQ_CONFIGS = [
    triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
    for bm, bn, w in [(64, 32, 4), (64, 64, 4), (128, 32, 4), (128, 32, 8), (128, 64, 8), (128, 128, 8)]
    for s in (2, 3)
]
#: Prune limit: fp32 accumulator registers per thread (dK and dV: 2·BLOCK_N·D, dQ: BLOCK_M·D values).
MAX_ACC_REGS = 128
#: Fixed configs in the interpreter (no autotune there).
INTERPRET_DKDV_CONFIG = {"BLOCK_N": 64, "BLOCK_M": 32}
INTERPRET_DQ_CONFIG = {"BLOCK_M": 64, "BLOCK_N": 32}
#: Below this many tokens a GPU launch takes these fixed configs instead of autotuning (compiling
#: every config for each (D, causal, dtype) costs more than small problems ever run).
AUTOTUNE_MIN_N = 512
SMALL_N_DKDV_CONFIG = {"BLOCK_N": 64, "BLOCK_M": 32, "num_warps": 4, "num_stages": 2}
SMALL_N_DQ_CONFIG = {"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2}
#: Elements a program of ``attn_bwd_dq_cast``.
CAST_BLOCK = 1024


@triton.jit
def attn_bwd_dq_cast(DQ32, DQ, numel, sm_scale, BLOCK: tl.constexpr):
    """dQ = sm_scale · (an fp32 sum), in the inputs' dtype: the last step of a backward that adds dQ's shares
    by atomics into fp32 (``gluon_attention_backward.py``)."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(DQ32 + offs, mask=offs < numel)
    tl.store(DQ + offs, (x * sm_scale).to(DQ.dtype.element_ty), mask=offs < numel)


def _prune(configs, named_args, kwargs, rows, cols, n_acc):
    """Keep configs whose program tile (``rows``) fits N and whose accumulators fit in registers;
    causal attention needs ``rows`` to be a multiple of ``cols`` (whole steps on the diagonal)."""
    a = {**named_args, **kwargs}

    def keep(c):
        r, k = c.kwargs[rows], c.kwargs[cols]
        return (r <= max(a["N"], 64) and (not a["CAUSAL"] or r % k == 0)
                and n_acc * r * a["HEAD_DIM"] / (32 * c.num_warps) <= MAX_ACC_REGS)

    return [c for c in configs if keep(c)] or configs[:1]


def _prune_dkdv(configs, named_args, **kwargs):
    return _prune(configs, named_args, kwargs, "BLOCK_N", "BLOCK_M", 2)


def _prune_dq(configs, named_args, **kwargs):
    return _prune(configs, named_args, kwargs, "BLOCK_M", "BLOCK_N", 1)


dkdv_autotuned = dq_autotuned = None
if not INTERPRET:  # autotune times kernels on a GPU; the interpreter cannot
    dkdv_autotuned = triton.autotune(DKDV_CONFIGS, key=["N", "HEAD_DIM", "CAUSAL"],
                                      prune_configs_by={"early_config_prune": _prune_dkdv})(attn_bwd_dkdv)
    dq_autotuned = triton.autotune(DQ_CONFIGS, key=["N", "HEAD_DIM", "CAUSAL"],
                                    prune_configs_by={"early_config_prune": _prune_dq})(attn_bwd_dq)


def attention_backward(do, q, k, v, o, lse, causal=False, sm_scale=None, dkdv_config=None, dq_config=None):
    """``(dq, dk, dv)`` as the lesson's ``attention_backward``, autotuned on a GPU for N >= AUTOTUNE_MIN_N.

    ``dkdv_config`` / ``dq_config`` ({BLOCK_M, BLOCK_N, num_warps, num_stages}) launch exactly that
    config instead of autotuning (GPU) or the fixed interpreter config. q, do, o of (B, Hq, N_Q, D) and
    k, v of (B, Hkv, N_KV, D) (grouped-query heads, N_Q != N_KV) take ``gqa_backward``.
    """
    if forward.grouped(q, k, v):
        return gqa_backward(do, q, k, v, o, lse, causal, sm_scale, dkdv_config, dq_config)
    (do, q, k, v, o, lse), causal, sm_scale, dkdv_config, dq_config = check_inputs(
        do, q, k, v, o, lse, causal, sm_scale, dkdv_config, dq_config)
    B, H, N, D = q.shape
    delta = compute_delta(o, do, lse)  # Δ = rowsum(dO ∘ O), fp32 (B, H, N)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    args = dict(N=N, sm_scale=sm_scale, HEAD_DIM=D, CAUSAL=causal)

    small = N < AUTOTUNE_MIN_N  # a fixed config: tuning small problems costs more than they run
    if dkdv_config is None and dkdv_autotuned is not None and not small:
        grid = lambda meta: (triton.cdiv(N, meta["BLOCK_N"]), B * H)
        dkdv_autotuned[grid](q, k, v, do, dk, dv, lse, delta, **args)
    else:
        cfg = checked_config(dkdv_config if dkdv_config is not None else INTERPRET_DKDV_CONFIG if INTERPRET
                      else SMALL_N_DKDV_CONFIG, "dkdv_config")
        attn_bwd_dkdv[(triton.cdiv(N, cfg["BLOCK_N"]), B * H)](q, k, v, do, dk, dv, lse, delta, **args, **cfg)

    if dq_config is None and dq_autotuned is not None and not small:
        grid = lambda meta: (triton.cdiv(N, meta["BLOCK_M"]), B * H)
        dq_autotuned[grid](q, k, v, do, dq, lse, delta, **args)
    else:
        cfg = checked_config(dq_config if dq_config is not None else INTERPRET_DQ_CONFIG if INTERPRET
                      else SMALL_N_DQ_CONFIG, "dq_config")
        attn_bwd_dq[(triton.cdiv(N, cfg["BLOCK_M"]), B * H)](q, k, v, do, dq, lse, delta, **args, **cfg)
    return dq, dk, dv


# ---- grouped-query heads and a query shorter than its keys ------------------------------------
# The shapes of ``attention_forward.attn_fwd_gqa``: q, do, o (B, Hq, N_Q, D), k, v (B, Hkv, N_KV, D),
# query head h reading KV head h // GROUP, the causal mask aligned to the end (query i sees keys
# j <= i + N_KV - N_Q). dK and dV of a KV head are sums over its GROUP query heads: a dK/dV program
# keeps its K/V block on chip and loops over every query head of the group in turn, so each K/V block
# is read once per group and the sum is made in registers, with no atomics and no (B, Hq, N_KV, D)
# buffer to reduce afterwards (FlashAttention-2's GQA backward writes dK, dV per query head and sums
# them; Dao, 2023). The price: B·Hkv·⌈N_KV/BLOCK_N⌉ programs, GROUP times fewer than the heads', which
# fill a GPU less well at small batch and MQA. dQ is per query head, a program per (query block, query
# head), the GROUP heads of a KV head next to each other in the grid so that their K/V reads meet in L2.
# These kernels read through pointers with masks (rows past N_Q, keys past N_KV), not descriptors:
# a query block may end inside a head, and one loop visits several heads' rows.


@triton.jit
def _gqa_dkdv_loop(
    dk, dv,  # fp32 accumulators (BLOCK_N, HEAD_DIM) of this program's keys
    k, v,  # this program's K and V blocks
    Q, DO,  # pointers to this query head's q and dO, (N_Q, D)
    LSE, Delta,  # pointers to this query head's lse (natural log) and Δ, fp32 (N_Q,)
    offs_n, offs_d,  # this program's key rows, and arange(HEAD_DIM)
    lo, hi,  # the query rows [lo, hi) to visit
    N_Q,  # queries per head
    shift,  # N_KV - N_Q: query i sees keys j <= i + shift
    qk_scale,  # sm_scale · log2(e)
    HEAD_DIM: tl.constexpr,  # D
    BLOCK_M: tl.constexpr,  # queries per loop step
    MASK: tl.constexpr,  # causal mask (the blocks on the diagonal)
):
    for start_m in range(lo, hi, BLOCK_M):
        offs_m = start_m + tl.arange(0, BLOCK_M)
        row = offs_m < N_Q  # rows past N_Q load as zeros: pT = 1 times dO = 0, and dPᵀ − Δ = 0
        ptrs = offs_m[:, None] * HEAD_DIM + offs_d[None, :]
        q = tl.load(Q + ptrs, mask=row[:, None], other=0.0)
        do = tl.load(DO + ptrs, mask=row[:, None], other=0.0)
        lse2 = tl.load(LSE + offs_m, mask=row, other=0.0) * 1.4426950408889634
        delta = tl.load(Delta + offs_m, mask=row, other=0.0)
        pT = tl.math.exp2(tl.dot(k, q.T) * qk_scale - lse2[None, :])
        if MASK:
            pT = tl.where((offs_m + shift)[None, :] >= offs_n[:, None], pT, 0.0)
        dv += tl.dot(pT.to(do.dtype), do)
        dpT = tl.dot(v, do.T)
        dsT = pT * (dpT - delta[None, :])
        dk += tl.dot(dsT.to(q.dtype), q)
    return dk, dv


@triton.jit
def attn_bwd_dkdv_gqa(
    Q,  # pointer to q, contiguous (B, Hq, N_Q, D)
    K,  # pointer to k, contiguous (B, Hkv, N_KV, D)
    V,  # pointer to v, as K
    DO,  # pointer to dO, as Q
    DK,  # pointer to dK (written), as K: the sum over the KV head's query heads
    DV,  # pointer to dV (written), as K
    LSE,  # pointer to the forward's lse (natural log), fp32 (B, Hq, N_Q)
    Delta,  # pointer to Δ, fp32 (B, Hq, N_Q)
    N_Q,  # queries per head
    N_KV,  # keys per head
    GROUP,  # query heads per KV head
    sm_scale,  # softmax scale
    HEAD_DIM: tl.constexpr,  # D
    CAUSAL: tl.constexpr,  # causal, aligned to the end
    BLOCK_M: tl.constexpr,  # queries per loop step
    BLOCK_N: tl.constexpr,  # keys per program
):
    start_n = tl.program_id(0) * BLOCK_N
    bkv = tl.program_id(1).to(tl.int64)  # (batch, KV head)
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    kv = bkv * N_KV * HEAD_DIM + offs_n[:, None] * HEAD_DIM + offs_d[None, :]
    key = (offs_n < N_KV)[:, None]
    k = tl.load(K + kv, mask=key, other=0.0)  # K and V stay on chip for the whole group
    v = tl.load(V + kv, mask=key, other=0.0)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    qk_scale = sm_scale * 1.4426950408889634
    shift = N_KV - N_Q
    # causal: queries before start_n - shift see none of these keys; from the first multiple of BLOCK_M
    # at or past start_n + BLOCK_N - 1 - shift, all of them (no mask); between, the diagonal (masked)
    lo = (tl.maximum(start_n - shift, 0) // BLOCK_M) * BLOCK_M
    mid = lo + tl.cdiv(tl.maximum(start_n + BLOCK_N - 1 - shift - lo, 0), BLOCK_M) * BLOCK_M
    for g in range(GROUP):
        bh = bkv * GROUP + g  # (batch, query head)
        q_head = bh * N_Q * HEAD_DIM
        if CAUSAL:
            dk, dv = _gqa_dkdv_loop(dk, dv, k, v, Q + q_head, DO + q_head, LSE + bh * N_Q, Delta + bh * N_Q,
                                    offs_n, offs_d, lo, tl.minimum(mid, N_Q), N_Q, shift, qk_scale,
                                    HEAD_DIM, BLOCK_M, True)
            dk, dv = _gqa_dkdv_loop(dk, dv, k, v, Q + q_head, DO + q_head, LSE + bh * N_Q, Delta + bh * N_Q,
                                    offs_n, offs_d, mid, N_Q, N_Q, shift, qk_scale, HEAD_DIM, BLOCK_M, False)
        else:
            dk, dv = _gqa_dkdv_loop(dk, dv, k, v, Q + q_head, DO + q_head, LSE + bh * N_Q, Delta + bh * N_Q,
                                    offs_n, offs_d, 0, N_Q, N_Q, shift, qk_scale, HEAD_DIM, BLOCK_M, False)
    dk *= sm_scale
    tl.store(DK + kv, dk.to(DK.dtype.element_ty), mask=key)
    tl.store(DV + kv, dv.to(DV.dtype.element_ty), mask=key)


@triton.jit
def _gqa_dq_loop(
    dq,  # fp32 accumulator (BLOCK_M, HEAD_DIM) of this program's queries
    q, do,  # this program's Q and dO blocks
    lse2, delta,  # this program's lse (base 2) and Δ, (BLOCK_M,)
    K, V,  # pointers to this KV head's k and v, (N_KV, D)
    offs_m, offs_d,  # this program's query rows, and arange(HEAD_DIM)
    lo, hi,  # key rows [lo, hi) to visit
    N_KV,  # keys per head
    shift,  # N_KV - N_Q
    qk_scale,  # sm_scale · log2(e)
    HEAD_DIM: tl.constexpr,  # D
    BLOCK_N: tl.constexpr,  # keys per loop step
    MASK: tl.constexpr,  # mask keys >= N_KV (and, if CAUSAL, keys after the query's diagonal)
    CAUSAL: tl.constexpr,  # causal attention
):
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        ptrs = offs_n[:, None] * HEAD_DIM + offs_d[None, :]
        k = tl.load(K + ptrs, mask=(offs_n < N_KV)[:, None], other=0.0)
        v = tl.load(V + ptrs, mask=(offs_n < N_KV)[:, None], other=0.0)
        p = tl.math.exp2(tl.dot(q, k.T) * qk_scale - lse2[:, None])
        if MASK:
            keep = offs_n[None, :] < N_KV
            if CAUSAL:
                keep = keep & ((offs_m + shift)[:, None] >= offs_n[None, :])
            p = tl.where(keep, p, 0.0)
        dp = tl.dot(do, v.T)
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k)
    return dq


@triton.jit
def attn_bwd_dq_gqa(
    Q,  # pointer to q, contiguous (B, Hq, N_Q, D)
    K,  # pointer to k, contiguous (B, Hkv, N_KV, D)
    V,  # pointer to v, as K
    DO,  # pointer to dO, as Q
    DQ,  # pointer to dQ (written), as Q
    LSE,  # pointer to the forward's lse (natural log), fp32 (B, Hq, N_Q)
    Delta,  # pointer to Δ, fp32 (B, Hq, N_Q)
    N_Q,  # queries per head
    N_KV,  # keys per head
    GROUP,  # query heads per KV head
    sm_scale,  # softmax scale
    HEAD_DIM: tl.constexpr,  # D
    CAUSAL: tl.constexpr,  # causal, aligned to the end
    BLOCK_M: tl.constexpr,  # queries per program
    BLOCK_N: tl.constexpr,  # keys per loop step
):
    pid = tl.program_id(0)
    if CAUSAL:  # heaviest query blocks first
        pid = tl.num_programs(0) - 1 - pid
    start_m = pid * BLOCK_M
    bh = tl.program_id(1).to(tl.int64)  # (batch, query head); its KV head is bh // GROUP
    kv_head = (bh // GROUP) * N_KV * HEAD_DIM
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    row = offs_m < N_Q
    ptrs = bh * N_Q * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :]
    q = tl.load(Q + ptrs, mask=row[:, None], other=0.0)
    do = tl.load(DO + ptrs, mask=row[:, None], other=0.0)
    lse2 = tl.load(LSE + bh * N_Q + offs_m, mask=row, other=0.0) * 1.4426950408889634
    delta = tl.load(Delta + bh * N_Q + offs_m, mask=row, other=0.0)
    dq = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    qk_scale = sm_scale * 1.4426950408889634
    shift = N_KV - N_Q
    if CAUSAL:  # keys up to the first row's diagonal without a mask, then up to the last row's masked
        diag = ((start_m + shift + 1) // BLOCK_N) * BLOCK_N
        dq = _gqa_dq_loop(dq, q, do, lse2, delta, K + kv_head, V + kv_head, offs_m, offs_d, 0, diag, N_KV, shift,
                          qk_scale, HEAD_DIM, BLOCK_N, False, CAUSAL)
        dq = _gqa_dq_loop(dq, q, do, lse2, delta, K + kv_head, V + kv_head, offs_m, offs_d, diag,
                          tl.minimum(start_m + BLOCK_M + shift, N_KV), N_KV, shift, qk_scale, HEAD_DIM, BLOCK_N,
                          True, CAUSAL)
    else:  # full key blocks without a mask, then the last, partial one masked
        n_full = (N_KV // BLOCK_N) * BLOCK_N
        dq = _gqa_dq_loop(dq, q, do, lse2, delta, K + kv_head, V + kv_head, offs_m, offs_d, 0, n_full, N_KV, shift,
                          qk_scale, HEAD_DIM, BLOCK_N, False, CAUSAL)
        dq = _gqa_dq_loop(dq, q, do, lse2, delta, K + kv_head, V + kv_head, offs_m, offs_d, n_full, N_KV, N_KV,
                          shift, qk_scale, HEAD_DIM, BLOCK_N, True, CAUSAL)
    tl.store(DQ + ptrs, (dq * sm_scale).to(DQ.dtype.element_ty), mask=row[:, None])


def _gqa_prune(configs, named_args, kwargs, rows, n_acc):
    """``_prune`` for the grouped kernels: the program tile (``rows``: BLOCK_N of keys for dK/dV, BLOCK_M
    of queries for dQ) fits its sequence and the accumulators fit in registers. Any block shapes are
    correct: the causal ranges need no multiple."""
    a = {**named_args, **kwargs}
    n = a["N_KV"] if rows == "BLOCK_N" else a["N_Q"]
    keep = [c for c in configs if c.kwargs[rows] <= max(n, 64)
            and n_acc * c.kwargs[rows] * a["HEAD_DIM"] / (32 * c.num_warps) <= MAX_ACC_REGS]
    return keep or configs[:1]


dkdv_gqa_autotuned = dq_gqa_autotuned = None
if not INTERPRET:
    dkdv_gqa_autotuned = triton.autotune(
        DKDV_CONFIGS, key=["N_Q", "N_KV", "GROUP", "HEAD_DIM", "CAUSAL"],
        prune_configs_by={"early_config_prune": lambda c, a, **k: _gqa_prune(c, a, k, "BLOCK_N", 2)})(attn_bwd_dkdv_gqa)
    dq_gqa_autotuned = triton.autotune(
        DQ_CONFIGS, key=["N_Q", "N_KV", "GROUP", "HEAD_DIM", "CAUSAL"],
        prune_configs_by={"early_config_prune": lambda c, a, **k: _gqa_prune(c, a, k, "BLOCK_M", 1)})(attn_bwd_dq_gqa)


def check_gqa_backward(do, q, k, v, o, lse, causal, sm_scale, dkdv_config, dq_config):
    """``check_inputs`` for the grouped shapes: q, do, o (B, Hq, N_Q, D), k, v (B, Hkv, N_KV, D), lse
    (B, Hq, N_Q) fp32; ``(tensors, causal, sm_scale, dkdv_config, dq_config)``, the tensors prepared."""
    sm_scale, causal = forward.check_gqa_inputs(q, k, v, causal, sm_scale)
    validate(do, q, o, names=["do", "q", "o"], ndim=4, same_shape=True)
    validate(lse, names=["lse"], ndim=3, dtypes=(torch.float32,))
    if tuple(lse.shape) != tuple(q.shape[:3]) or lse.device != q.device:
        raise ValueError(f"lse must be the forward's fp32 log-sum-exp of shape {tuple(q.shape[:3])} on {q.device}, "
                         f"got shape {tuple(lse.shape)} on {lse.device}")
    if dkdv_config is not None:
        dkdv_config = checked_config(dkdv_config, "dkdv_config")
    if dq_config is not None:
        dq_config = checked_config(dq_config, "dq_config")
    return [forward.prepare(t) for t in (do, q, k, v, o, lse)], causal, sm_scale, dkdv_config, dq_config


def gqa_backward(do, q, k, v, o, lse, causal=False, sm_scale=None, dkdv_config=None, dq_config=None):
    """``(dq, dk, dv)`` for q, do, o of (B, Hq, N_Q, D) and k, v of (B, Hkv, N_KV, D): dk and dv summed over
    each KV head's query heads, the causal mask aligned to the end (as ``attention_forward``'s)."""
    (do, q, k, v, o, lse), causal, sm_scale, dkdv_config, dq_config = check_gqa_backward(
        do, q, k, v, o, lse, causal, sm_scale, dkdv_config, dq_config)
    B, Hq, Nq, D = q.shape
    Hkv, Nk = k.shape[1:3]
    group = Hq // Hkv
    delta = compute_delta(o, do, lse)  # Δ = rowsum(dO ∘ O) of each query head, (B, Hq, N_Q)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    args = (Nq, Nk, group, sm_scale)
    meta = dict(HEAD_DIM=D, CAUSAL=causal)
    small = max(Nq, Nk) < AUTOTUNE_MIN_N
    if dkdv_config is None and dkdv_gqa_autotuned is not None and not small:
        dkdv_gqa_autotuned[lambda m: (triton.cdiv(Nk, m["BLOCK_N"]), B * Hkv)](q, k, v, do, dk, dv, lse, delta,
                                                                               *args, **meta)
    else:
        cfg = checked_config(dkdv_config if dkdv_config is not None else INTERPRET_DKDV_CONFIG if INTERPRET
                             else SMALL_N_DKDV_CONFIG, "dkdv_config")
        attn_bwd_dkdv_gqa[(triton.cdiv(Nk, cfg["BLOCK_N"]), B * Hkv)](q, k, v, do, dk, dv, lse, delta, *args,
                                                                     **meta, **cfg)
    if dq_config is None and dq_gqa_autotuned is not None and not small:
        dq_gqa_autotuned[lambda m: (triton.cdiv(Nq, m["BLOCK_M"]), B * Hq)](q, k, v, do, dq, lse, delta, *args, **meta)
    else:
        cfg = checked_config(dq_config if dq_config is not None else INTERPRET_DQ_CONFIG if INTERPRET
                             else SMALL_N_DQ_CONFIG, "dq_config")
        attn_bwd_dq_gqa[(triton.cdiv(Nq, cfg["BLOCK_M"]), B * Hq)](q, k, v, do, dq, lse, delta, *args, **meta, **cfg)
    return dq, dk, dv


#: The trainable layer: ``attention(q, k, v, causal=False, sm_scale=None, config=None, impl="auto")``,
#: the tuned forward (``impl`` and ``config`` as in ``attention_forward.attention_forward``) and
#: the autotuned backward.
attention = trainable(forward.attention_forward, attention_backward)
