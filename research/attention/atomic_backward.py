"""FlashAttention backward in one pass: dK and dV kept on chip, dQ added into fp32 by atomics. A research
prototype: right at every shape checked, and slower on the H200 than lesson 07's two kernels, which the
kernel library keeps (``atomic_probe.py`` times it; ``research/README.md`` has the runs).

Lesson 07's backward runs two kernels over the same blocks: one keeps a K/V block and loops over the
queries for dK and dV, the other keeps a Q block and loops over the keys for dQ. Both recompute
S = Q Kᵀ and dP = dO Vᵀ, so they multiply 14·B·H·N²·D FLOPs where the gradient needs 10. FlashAttention-2
(Dao, 2023, algorithm 2) computes dQ in the dK/dV loop instead: each step has dS already, and adds its
key block's share dS K to a dQ kept in fp32 in global memory. Five matmuls a step instead of seven, at
the price of the adds: ``BLOCK_M x D`` fp32 values a step, which on Hopper go as one TMA reduction
(``cp.reduce.async.bulk``, FlashAttention-3's way; Shah et al., 2024) and elsewhere as atomic adds from
every thread (``TMA_REDUCE=False``, the interpreter's path).

- One kernel for every shape the library's forward takes: q, do, o (B, Hq, N_Q, D), k, v (B, Hkv, N_KV, D),
  Hq a multiple of Hkv (a program keeps its K/V block and loops over the GROUP query heads that read it,
  summing their dK and dV in registers), the causal mask aligned to the end (query i sees keys
  j <= i + N_KV - N_Q). Equal shapes are GROUP 1.
- Lesson 07's preprocess computes Δ = rowsum(dO ∘ O), the fp32 dQ starts at zero, and ``attention_backward.attn_bwd_dq_cast``
  scales it and casts it to the inputs' dtype.
- The programs of a head start their query loops at different blocks (``STAGGER``), so that they do not
  all add into the same rows of dQ at once.
- dQ is not bitwise repeatable: the adds come in a different order from call to call.
"""

import torch
import triton
import triton.language as tl

from solutions.flash_attention_backward import checked_config, compute_delta, tma_scratch
from solutions.kernels import attention_backward as fbt
from tkcourse.mode import INTERPRET

#: The autotuned kernel's configs (GPU only): BLOCK_N keys a program (dK and dV on chip), BLOCK_M queries
#: a step, pruned to accumulators that fit in registers (``MAX_ACC_REGS``).
CONFIGS = [
    triton.Config({"BLOCK_N": bn, "BLOCK_M": bm}, num_warps=w, num_stages=s)
    for bn, bm, w in [(64, 64, 4), (128, 32, 8), (128, 64, 8), (128, 128, 8)]
    for s in (2, 3)
]
#: fp32 accumulator registers a thread the prune allows (dK and dV: 2·BLOCK_N·D values over the threads).
MAX_ACC_REGS = 128
#: The interpreter's config, and the config below ``AUTOTUNE_MIN_N`` tokens on a GPU.
INTERPRET_CONFIG = {"BLOCK_N": 32, "BLOCK_M": 16}
SMALL_N_CONFIG = {"BLOCK_N": 64, "BLOCK_M": 32, "num_warps": 4, "num_stages": 2}
AUTOTUNE_MIN_N = 512
#: dQ's adds as one TMA reduction a step (Hopper; the interpreter has none) or atomics from every thread.
TMA_REDUCE = not INTERPRET


@triton.jit
def _atomic_loop(
    dk, dv,  # fp32 accumulators (BLOCK_N, HEAD_DIM) of this program's keys
    k, v,  # this program's K and V blocks
    desc_q, desc_do, desc_dq,  # descriptors of this query head's q, dO and fp32 dQ, blocks (BLOCK_M, HEAD_DIM)
    DQ,  # pointer to this query head's fp32 dQ, (N_Q, D): the atomics' path
    LSE, Delta,  # pointers to this query head's lse (natural log) and Δ, fp32 (N_Q,)
    offs_n,  # this program's key rows
    lo, steps,  # the query blocks to visit: lo, lo + BLOCK_M, ... (``steps`` of them)
    first,  # the step this program starts at (then round to the others)
    N_Q,  # queries a head
    shift,  # N_KV - N_Q: query i sees keys j <= i + shift
    qk_scale,  # sm_scale · log2(e)
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    MASK: tl.constexpr,  # the causal mask (the blocks on the diagonal)
    TMA_REDUCE: tl.constexpr,
):
    offs_d = tl.arange(0, HEAD_DIM)
    for j in range(steps):
        start_m = lo + ((j + first) % steps) * BLOCK_M
        offs_m = start_m + tl.arange(0, BLOCK_M)
        # rows past N_Q load as zeros: pT = 1 times dO = 0, and dPᵀ − Δ = 0, so they add nothing
        q = desc_q.load([start_m, 0])
        do = desc_do.load([start_m, 0])
        lse2 = tl.load(LSE + offs_m, mask=offs_m < N_Q, other=0.0) * 1.4426950408889634
        delta = tl.load(Delta + offs_m, mask=offs_m < N_Q, other=0.0)
        pT = tl.math.exp2(tl.dot(k, q.T) * qk_scale - lse2[None, :])
        if MASK:
            pT = tl.where((offs_m + shift)[None, :] >= offs_n[:, None], pT, 0.0)
        dv += tl.dot(pT.to(do.dtype), do)  # dV += Pᵀ dO
        dpT = tl.dot(v, do.T)  # dPᵀ = V dOᵀ
        dsT = (pT * (dpT - delta[None, :])).to(q.dtype)  # dSᵀ = Pᵀ ∘ (dPᵀ − Δ)
        dk += tl.dot(dsT, q)  # dK += dSᵀ Q
        dq = tl.dot(tl.trans(dsT), k)  # this key block's share of dQ = dS K (keys past N_KV are zeros)
        if TMA_REDUCE:  # one bulk reduction into global memory; rows past N_Q are clipped
            desc_dq.atomic_add([start_m, 0], dq)
        else:
            tl.atomic_add(DQ + offs_m[:, None] * HEAD_DIM + offs_d[None, :], dq, mask=(offs_m < N_Q)[:, None],
                          sem="relaxed")
    return dk, dv


@triton.jit
def attn_bwd_atomic(
    Q,  # pointer to q, contiguous (B, Hq, N_Q, D), 16-byte aligned
    K,  # pointer to k, contiguous (B, Hkv, N_KV, D)
    V,  # pointer to v, as K
    DO,  # pointer to dO, as Q
    DK,  # pointer to dK (written), as K: the sum over the KV head's query heads
    DV,  # pointer to dV (written), as K
    DQ,  # pointer to dQ's fp32 accumulator (B, Hq, N_Q, D), zeroed: dQ / sm_scale is added into it
    LSE,  # pointer to the forward's lse (natural log), fp32 (B, Hq, N_Q)
    Delta,  # pointer to Δ, fp32 (B, Hq, N_Q)
    N_Q,  # queries a head
    N_KV,  # keys a head
    GROUP,  # query heads a KV head
    sm_scale,  # softmax scale
    HEAD_DIM: tl.constexpr,  # D
    CAUSAL: tl.constexpr,  # causal, aligned to the end
    BLOCK_M: tl.constexpr,  # queries a step
    BLOCK_N: tl.constexpr,  # keys a program
    TMA_REDUCE: tl.constexpr,  # dQ's adds by TMA reductions (Hopper) or by atomics
    STAGGER: tl.constexpr = True,  # start each program's query loop at its own block
):
    pid = tl.program_id(0)
    start_n = pid * BLOCK_N
    bkv = tl.program_id(1).to(tl.int64)  # (batch, KV head)
    kv_head = bkv * N_KV * HEAD_DIM
    desc_k = tl.make_tensor_descriptor(K + kv_head, [N_KV, HEAD_DIM], [HEAD_DIM, 1], [BLOCK_N, HEAD_DIM])
    desc_v = tl.make_tensor_descriptor(V + kv_head, [N_KV, HEAD_DIM], [HEAD_DIM, 1], [BLOCK_N, HEAD_DIM])
    k = desc_k.load([start_n, 0])  # K and V stay on chip for the whole group; keys past N_KV are zeros
    v = desc_v.load([start_n, 0])
    offs_n = start_n + tl.arange(0, BLOCK_N)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    qk_scale = sm_scale * 1.4426950408889634
    shift = N_KV - N_Q
    # causal: queries before start_n - shift see none of these keys; from ``mid`` on, all of them (no mask)
    lo = 0
    mid = 0
    if CAUSAL:
        lo = (tl.maximum(start_n - shift, 0) // BLOCK_M) * BLOCK_M
        mid = tl.minimum(lo + tl.cdiv(tl.maximum(start_n + BLOCK_N - 1 - shift - lo, 0), BLOCK_M) * BLOCK_M, N_Q)
    full = tl.cdiv(N_Q - mid, BLOCK_M)  # the unmasked query blocks
    first = 0
    if STAGGER:
        first = pid
    for g in range(GROUP):
        bh = bkv * GROUP + g  # (batch, query head)
        q_head = bh * N_Q * HEAD_DIM
        desc_q = tl.make_tensor_descriptor(Q + q_head, [N_Q, HEAD_DIM], [HEAD_DIM, 1], [BLOCK_M, HEAD_DIM])
        desc_do = tl.make_tensor_descriptor(DO + q_head, [N_Q, HEAD_DIM], [HEAD_DIM, 1], [BLOCK_M, HEAD_DIM])
        desc_dq = tl.make_tensor_descriptor(DQ + q_head, [N_Q, HEAD_DIM], [HEAD_DIM, 1], [BLOCK_M, HEAD_DIM])
        if CAUSAL:
            dk, dv = _atomic_loop(dk, dv, k, v, desc_q, desc_do, desc_dq, DQ + q_head, LSE + bh * N_Q,
                                  Delta + bh * N_Q, offs_n, lo, tl.cdiv(mid - lo, BLOCK_M), 0, N_Q, shift, qk_scale,
                                  HEAD_DIM, BLOCK_M, True, TMA_REDUCE)
        dk, dv = _atomic_loop(dk, dv, k, v, desc_q, desc_do, desc_dq, DQ + q_head, LSE + bh * N_Q, Delta + bh * N_Q,
                              offs_n, mid, full, first, N_Q, shift, qk_scale, HEAD_DIM, BLOCK_M, False, TMA_REDUCE)
    desc_dk = tl.make_tensor_descriptor(DK + kv_head, [N_KV, HEAD_DIM], [HEAD_DIM, 1], [BLOCK_N, HEAD_DIM])
    desc_dv = tl.make_tensor_descriptor(DV + kv_head, [N_KV, HEAD_DIM], [HEAD_DIM, 1], [BLOCK_N, HEAD_DIM])
    desc_dk.store([start_n, 0], (dk * sm_scale).to(DK.dtype.element_ty))  # rows past N_KV are clipped
    desc_dv.store([start_n, 0], dv.to(DV.dtype.element_ty))


def _prune(configs, named_args, **kwargs):
    """Configs whose key tile fits the sequence and whose dK, dV accumulators fit in registers."""
    a = {**named_args, **kwargs}
    keep = [c for c in configs if c.kwargs["BLOCK_N"] <= max(a["N_KV"], 64)
            and 2 * c.kwargs["BLOCK_N"] * a["HEAD_DIM"] / (32 * c.num_warps) <= MAX_ACC_REGS]
    return keep or configs[:1]


def _zero_dq(nargs):
    """Autotune's reset between timed runs: the adds accumulate into dQ."""
    nargs["DQ"].zero_()


atomic_autotuned = None
if not INTERPRET:
    atomic_autotuned = triton.autotune(CONFIGS, key=["N_Q", "N_KV", "GROUP", "HEAD_DIM", "CAUSAL"],
                                       prune_configs_by={"early_config_prune": _prune},
                                       reset_to_zero=["DQ"])(attn_bwd_atomic)


def attention_backward(do, q, k, v, o, lse, causal=False, sm_scale=None, config=None, tma_reduce=None, stagger=True):
    """``(dq, dk, dv)`` in one pass over the blocks, dQ added by atomics (not bitwise repeatable).

    q, do, o: (B, Hq, N_Q, D); k, v: (B, Hkv, N_KV, D), Hq a multiple of Hkv (dk and dv summed over each
    KV head's query heads); ``lse`` the forward's fp32 log-sum-exp (B, Hq, N_Q); the causal mask aligned to
    the end. ``config`` ({BLOCK_M, BLOCK_N, num_warps, num_stages}) launches exactly that config (its errors
    name it ``dkdv_config``, as the two-pass backward's checks do). ``tma_reduce`` (default ``TMA_REDUCE``)
    and ``stagger``: the kernel's ``TMA_REDUCE`` and ``STAGGER``, the variants ``atomic_probe.py`` times.
    """
    (do, q, k, v, o, lse), causal, sm_scale, config, _ = fbt.check_gqa_backward(do, q, k, v, o, lse, causal,
                                                                              sm_scale, config, None)
    B, Hq, Nq, D = q.shape
    Hkv, Nk = k.shape[1:3]
    if not INTERPRET:
        triton.set_allocator(tma_scratch)  # descriptors made in the kernel
    delta = compute_delta(o, do, lse)  # Δ = rowsum(dO ∘ O), lesson 07's preprocess
    dq32 = torch.zeros(q.shape, device=q.device, dtype=torch.float32)
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    args = (q, k, v, do, dk, dv, dq32, lse, delta, Nq, Nk, Hq // Hkv, sm_scale)
    meta = dict(HEAD_DIM=D, CAUSAL=causal, TMA_REDUCE=TMA_REDUCE if tma_reduce is None else bool(tma_reduce),
                STAGGER=bool(stagger))
    if config is None and atomic_autotuned is not None and max(Nq, Nk) >= AUTOTUNE_MIN_N:
        atomic_autotuned[lambda m: (triton.cdiv(Nk, m["BLOCK_N"]), B * Hkv)](*args, **meta)
    else:
        cfg = config or checked_config(INTERPRET_CONFIG if INTERPRET else SMALL_N_CONFIG, "config")
        attn_bwd_atomic[(triton.cdiv(Nk, cfg["BLOCK_N"]), B * Hkv)](*args, **meta, **cfg)
    dq = torch.empty_like(q)
    fbt.attn_bwd_dq_cast[(triton.cdiv(dq.numel(), fbt.CAST_BLOCK),)](dq32, dq, dq.numel(), sm_scale,
                                                                     BLOCK=fbt.CAST_BLOCK)
    return dq, dk, dv
