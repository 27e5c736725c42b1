"""Lesson 07: FlashAttention backward: dQ, dK, dV from dO, recomputing P instead of storing it.

With S = scale · Q Kᵀ (masked when causal), P = softmax(S) = exp(S − lse), O = P V:

    dV = Pᵀ dO        dP = dO Vᵀ        dS = P ∘ (dP − Δ),  Δ = rowsum(dO ∘ O)
    dQ = scale · dS K                   dK = scale · dSᵀ Q

P is recomputed block by block from Q, K and the forward's saved ``lse`` (natural log, fp32,
(B, H, N)), so the extra memory is O(N): Δ (fp32, (B, H, N)) and nothing of size N².
The kernels work in base 2: exp(x) = exp2(x · log2 e), so P = exp2(scale·log2(e) · q·k − lse·log2(e)).

Three kernels: ``attn_bwd_preprocess`` (Δ), ``attn_bwd_dkdv`` (a program per K/V block looping
over the query blocks: the one you write) and ``attn_bwd_dq`` (a program per Q block looping over
the K/V blocks); the two given ones live in ``_attention_dq.py``, beside this file. Causal attention skips the blocks wholly above the diagonal and masks the diagonal.
Here each kernel runs with one fixed config; ``solutions/kernels/attention_backward.py``
autotunes the same kernels (``attn_bwd_dkdv``, ``attn_bwd_dq``; with ``attn_bwd_preprocess``,
``check_inputs``, ``checked_config``, ``compute_delta``, ``prepare`` and ``tma_scratch`` from
here), and ``solutions/flash_attention_autograd.py`` joins lesson 06's forward and this backward
into one trainable ``attention``.

Traffic (minimum): read Q, K, V, O, dO (5·B·H·N·D elements) and lse, write dQ, dK, dV (3·B·H·N·D):
16·B·H·N·D bytes in fp16 (+ 12·B·H·N bytes for lse and Δ). Each kernel re-reads what it loops over.
FLOPs, counted as usual: 2.5x the forward, 10·B·H·N²·D (half when causal); these kernels compute
QKᵀ and dO Vᵀ twice (once for dK/dV, once for dQ), 14·B·H·N²·D in all.
"""

import math

import torch
import triton
import triton.language as tl

from tkcourse.mode import INTERPRET

from ._attention_dq import attn_bwd_dq, attn_bwd_dq_loop, attn_bwd_preprocess  # noqa: F401 (given kernels)
from ._checks import ConfigSpec, boolean, integer, power_of_two, real, validate

HEAD_DIMS = (16, 32, 64, 128)


@triton.jit
def attn_bwd_dkdv_loop(
    dk, dv,  # fp32 accumulators (BLOCK_N, HEAD_DIM) of this program's keys
    k, v,  # this program's K and V blocks, (BLOCK_N, HEAD_DIM)
    desc_q, desc_do,  # tensor descriptors of this head's Q and dO, blocks of (BLOCK_M, HEAD_DIM)
    LSE,  # pointer to this head's lse (natural log), fp32 (N,)
    Delta,  # pointer to this head's Δ = rowsum(dO ∘ O), fp32 (N,)
    offs_n,  # this program's key rows, (BLOCK_N,)
    lo, hi,  # the query rows [lo, hi) to visit; lo is a multiple of BLOCK_M
    N,  # number of tokens
    qk_scale,  # sm_scale · log2(e)
    BLOCK_M: tl.constexpr,  # queries per loop step
    MASK: tl.constexpr,  # causal mask (the diagonal blocks)
):
    ### BEGIN SOLUTION
    for start_m in range(lo, hi, BLOCK_M):
        offs_m = start_m + tl.arange(0, BLOCK_M)
        # rows past N load as zeros (q, dO from the descriptors; lse, Δ with other=0), so they add
        # nothing below: pT = exp2(0) = 1 multiplies dO = 0, and dpT − Δ = 0
        q = desc_q.load([start_m, 0])
        do = desc_do.load([start_m, 0])
        lse2 = tl.load(LSE + offs_m, mask=offs_m < N, other=0.0) * 1.4426950408889634  # lse in base 2
        delta = tl.load(Delta + offs_m, mask=offs_m < N, other=0.0)
        # Pᵀ recomputed: pT[j, i] = exp(scale · k_j·q_i − lse_i), keys along the first axis
        pT = tl.math.exp2(tl.dot(k, q.T) * qk_scale - lse2[None, :])
        if MASK:  # the diagonal: query i only sees keys j <= i
            pT = tl.where(offs_m[None, :] >= offs_n[:, None], pT, 0.0)
        dv += tl.dot(pT.to(do.dtype), do)  # dV += Pᵀ dO
        dpT = tl.dot(v, do.T)  # dPᵀ = V dOᵀ
        dsT = pT * (dpT - delta[None, :])  # dSᵀ = Pᵀ ∘ (dPᵀ − Δ)
        dk += tl.dot(dsT.to(q.dtype), q)  # dK += dSᵀ Q (sm_scale is applied once, at the end)
    ### STUB
    # for start_m in range(lo, hi, BLOCK_M):
    #   1. offs_m = start_m + arange(BLOCK_M); load q and do with desc_q.load([start_m, 0]) / desc_do
    #   2. load lse and Δ of these rows (mask offs_m < N, other=0); lse2 = lse * log2(e)
    #   3. Pᵀ (keys x queries), in base 2: K Qᵀ scaled by qk_scale, less each query's lse2, through exp2
    #   4. if MASK: zero Pᵀ where the query comes before the key
    #   5. dV += Pᵀ dO (a tensor-core product: its operands in dO's dtype)
    #   6. dPᵀ = V dOᵀ; dSᵀ = Pᵀ ∘ (dPᵀ − Δ), Δ a value per query (Δ is not optional)
    #   7. dK += dSᵀ Q (operands in q's dtype; no sm_scale here: once, in the kernel)
    ### END SOLUTION
    return dk, dv


@triton.jit
def attn_bwd_dkdv(
    Q,  # pointer to q, contiguous (B, H, N, D), 16-byte aligned
    K,  # pointer to k, same layout
    V,  # pointer to v, same layout
    DO,  # pointer to dO, same layout
    DK,  # pointer to dK (written), same layout
    DV,  # pointer to dV (written), same layout
    LSE,  # pointer to the forward's lse (natural log), fp32 (B, H, N)
    Delta,  # pointer to Δ, fp32 (B, H, N)
    N,  # number of tokens
    sm_scale,  # softmax scale
    HEAD_DIM: tl.constexpr,  # D
    CAUSAL: tl.constexpr,  # causal attention
    BLOCK_M: tl.constexpr,  # queries per loop step
    BLOCK_N: tl.constexpr,  # keys per program (a multiple of BLOCK_M when causal)
):
    if CAUSAL:
        tl.static_assert(BLOCK_N % BLOCK_M == 0, "causal dK/dV needs BLOCK_N to be a multiple of BLOCK_M")
    start_n = tl.program_id(0) * BLOCK_N  # this program's first key
    bh = tl.program_id(1).to(tl.int64)
    head = bh * N * HEAD_DIM
    # one descriptor per head, of shape (N, D): a partial block loads zeros past row N, a store stops there
    desc_q = tl.make_tensor_descriptor(Q + head, [N, HEAD_DIM], [HEAD_DIM, 1], [BLOCK_M, HEAD_DIM])
    desc_do = tl.make_tensor_descriptor(DO + head, [N, HEAD_DIM], [HEAD_DIM, 1], [BLOCK_M, HEAD_DIM])
    desc_k = tl.make_tensor_descriptor(K + head, [N, HEAD_DIM], [HEAD_DIM, 1], [BLOCK_N, HEAD_DIM])
    desc_v = tl.make_tensor_descriptor(V + head, [N, HEAD_DIM], [HEAD_DIM, 1], [BLOCK_N, HEAD_DIM])
    desc_dk = tl.make_tensor_descriptor(DK + head, [N, HEAD_DIM], [HEAD_DIM, 1], [BLOCK_N, HEAD_DIM])
    desc_dv = tl.make_tensor_descriptor(DV + head, [N, HEAD_DIM], [HEAD_DIM, 1], [BLOCK_N, HEAD_DIM])
    LSE += bh * N
    Delta += bh * N
    offs_n = start_n + tl.arange(0, BLOCK_N)
    k = desc_k.load([start_n, 0])  # K and V stay on chip for the whole loop
    v = desc_v.load([start_n, 0])
    dk = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    qk_scale = sm_scale * 1.4426950408889634  # fold log2(e) into the scale: exp(x) = exp2(x · log2 e)

    ### BEGIN SOLUTION
    if CAUSAL:
        # queries before start_n never see these keys: skip them. The BLOCK_N // BLOCK_M query blocks
        # on the diagonal are masked; every query block below the diagonal sees all of these keys.
        dk, dv = attn_bwd_dkdv_loop(dk, dv, k, v, desc_q, desc_do, LSE, Delta, offs_n,
                                     start_n, tl.minimum(start_n + BLOCK_N, N), N, qk_scale, BLOCK_M, True)
        dk, dv = attn_bwd_dkdv_loop(dk, dv, k, v, desc_q, desc_do, LSE, Delta, offs_n,
                                     start_n + BLOCK_N, N, N, qk_scale, BLOCK_M, False)
    else:
        dk, dv = attn_bwd_dkdv_loop(dk, dv, k, v, desc_q, desc_do, LSE, Delta, offs_n,
                                     0, N, N, qk_scale, BLOCK_M, False)
    dk *= sm_scale  # dS is the gradient of the scaled scores: the scale, once
    ### STUB
    # non-causal: one attn_bwd_dkdv_loop over the query rows [0, N), MASK=False
    # causal: no query before start_n sees these keys. Loop over [start_n, min(start_n + BLOCK_N, N))
    #   with MASK=True (the diagonal), then over [start_n + BLOCK_N, N) with MASK=False
    # then multiply dk by sm_scale (once)
    ### END SOLUTION
    desc_dk.store([start_n, 0], dk.to(DK.dtype.element_ty))
    desc_dv.store([start_n, 0], dv.to(DV.dtype.element_ty))


def tma_scratch(size: int, alignment: int, stream):
    """Global memory for tensor descriptors made inside kernels (``tl.make_tensor_descriptor``)."""
    return torch.empty(size, device="cuda", dtype=torch.int8)


def prepare(t: torch.Tensor) -> torch.Tensor:
    """Contiguous and 16-byte aligned (tensor descriptors need both)."""
    t = t.contiguous()
    return t if t.data_ptr() % 16 == 0 else t.clone()


#: What ``dkdv_config`` and ``dq_config`` take: blocks of 16 to 256 rows (``tl.dot`` needs a K side of 16,
#: and the course keeps M and N there too (Triton would pad them); a power of two for
#: ``tl.arange``), 1 to 32 warps, 1 to 8 stages.
_CONFIG = ConfigSpec({"BLOCK_M": (power_of_two, 16, 256), "BLOCK_N": (power_of_two, 16, 256),
                      "num_warps": (power_of_two, 1, 32), "num_stages": (integer, 1, 8)},
                     required=("BLOCK_M", "BLOCK_N"), defaults={"num_warps": 4, "num_stages": 2})


#: The configs without ``dkdv_config=`` / ``dq_config=``: a program keeps 64 rows on chip and steps
#: 32 at a time (the step divides the tile, as causal attention needs), small enough for 4 warps at
#: D = 128 without register spills, and quick in the interpreter.
DKDV_CONFIG = {"BLOCK_N": 64, "BLOCK_M": 32}
DQ_CONFIG = {"BLOCK_M": 64, "BLOCK_N": 32}
#: Rows of Δ per preprocess program (a light, memory-bound pass).
PREPROCESS_BLOCK = 128


def checked_config(config, name, causal=False, rows="BLOCK_M", cols="BLOCK_N"):
    """``config`` checked (TypeError/ValueError naming the key), with num_warps and num_stages filled in.

    Causal: a program's ``rows`` (the tile it keeps on chip) must be a multiple of ``cols`` (its loop
    step), so that the diagonal is whole steps; with powers of two, ``rows >= cols``.
    """
    cfg = _CONFIG(config, name)
    if causal and cfg[rows] % cfg[cols]:
        raise ValueError(f"causal attention needs {name}[{rows!r}] to be a multiple of {name}[{cols!r}], "
                         f"got {rows}={cfg[rows]} and {cols}={cfg[cols]}")
    return cfg


def check_inputs(do, q, k, v, o, lse, causal, sm_scale, dkdv_config, dq_config):
    """The arguments of ``attention_backward`` checked (an error names the argument) and prepared:
    ``(tensors, causal, sm_scale, dkdv_config, dq_config)``, the tensors contiguous and aligned."""
    validate(do, q, k, v, o, names=["do", "q", "k", "v", "o"], ndim=4, same_shape=True)
    B, H, N, D = q.shape
    validate(lse, names=["lse"], ndim=3, dtypes=(torch.float32,))
    if tuple(lse.shape) != (B, H, N) or lse.device != q.device:
        raise ValueError(f"lse must be the forward's fp32 log-sum-exp of shape {(B, H, N)} on {q.device}, "
                         f"got shape {tuple(lse.shape)} on {lse.device}")
    if D not in HEAD_DIMS:
        raise ValueError(f"head dimension D = {D} is not supported; use one of {HEAD_DIMS}")
    sm_scale = 1.0 / math.sqrt(D) if sm_scale is None else real("sm_scale", sm_scale)
    causal = boolean("causal", causal)
    if dkdv_config is not None:  # before any work: a bad key or value names itself
        dkdv_config = checked_config(dkdv_config, "dkdv_config", causal, rows="BLOCK_N", cols="BLOCK_M")
    if dq_config is not None:
        dq_config = checked_config(dq_config, "dq_config", causal)
    tensors = [prepare(t) for t in (do, q, k, v, o, lse)]
    if not INTERPRET:
        triton.set_allocator(tma_scratch)  # here: autograd runs the backward in its own thread
    return tensors, causal, sm_scale, dkdv_config, dq_config


def compute_delta(o, do, lse):
    """Δ = rowsum(dO ∘ O), fp32 (B, H, N): read O and dO once, write one number a row."""
    B, H, N, D = o.shape
    delta = torch.empty_like(lse)
    attn_bwd_preprocess[(triton.cdiv(N, PREPROCESS_BLOCK), B * H)](o, do, delta, N, HEAD_DIM=D,
                                                                     BLOCK_M=PREPROCESS_BLOCK)
    return delta


def attention_backward(do, q, k, v, o, lse, causal=False, sm_scale=None, dkdv_config=None, dq_config=None):
    """``(dq, dk, dv)`` of FlashAttention, given the gradient ``do`` of its output ``o``.

    q, k, v, o, do: (B, H, N, D), one dtype; ``lse``: the forward's natural-log log-sum-exp, fp32
    (B, H, N). ``sm_scale`` defaults to 1/sqrt(D). ``dkdv_config`` / ``dq_config`` ({BLOCK_M, BLOCK_N,
    num_warps, num_stages}) launch that config instead of ``DKDV_CONFIG`` / ``DQ_CONFIG``.
    """
    (do, q, k, v, o, lse), causal, sm_scale, dkdv_config, dq_config = check_inputs(
        do, q, k, v, o, lse, causal, sm_scale, dkdv_config, dq_config)
    B, H, N, D = q.shape
    delta = compute_delta(o, do, lse)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    args = dict(N=N, sm_scale=sm_scale, HEAD_DIM=D, CAUSAL=causal)
    cfg = checked_config(DKDV_CONFIG if dkdv_config is None else dkdv_config, "dkdv_config")
    attn_bwd_dkdv[(triton.cdiv(N, cfg["BLOCK_N"]), B * H)](q, k, v, do, dk, dv, lse, delta, **args, **cfg)
    cfg = checked_config(DQ_CONFIG if dq_config is None else dq_config, "dq_config")
    attn_bwd_dq[(triton.cdiv(N, cfg["BLOCK_M"]), B * H)](q, k, v, do, dq, lse, delta, **args, **cfg)
    return dq, dk, dv


def reference(q, k, v, causal=False, sm_scale=None):
    """Attention's output in plain torch (float64-capable); ``torch.autograd`` gives the reference
    gradients: ``torch.autograd.grad(reference(q, k, v), (q, k, v), do)``."""
    D, N = q.shape[-1], q.shape[-2]
    scale = 1.0 / math.sqrt(D) if sm_scale is None else sm_scale
    s = (q @ k.transpose(-2, -1)) * scale
    if causal:
        s = s.masked_fill(torch.ones(N, N, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def reference_backward(do, q, k, v, causal=False, sm_scale=None):
    """``(dq, dk, dv)`` by autograd through ``reference`` (use float64 inputs for a tight check)."""
    q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
    with torch.enable_grad():
        o = reference(q, k, v, causal, sm_scale)
        return torch.autograd.grad(o, (q, k, v), do)
