# Generated from solutions/_attention_dq.py by `make exercises`: a verbatim copy that the exercises import.
# Nothing to fill in here.
"""Lesson 07's given kernels: Δ = rowsum(dO ∘ O) and dQ, the parts of the backward you do not write.

``attn_bwd_preprocess`` computes Δ (read O and dO once, write one fp32 number a row);
``attn_bwd_dq`` is a program per Q block looping over the K/V blocks: with P recomputed from the
forward's ``lse``, ``dQ = scale · (P ∘ (dO Vᵀ − Δ)) K``. The kernel you write,
``attn_bwd_dkdv`` in ``flash_attention_backward.py``, is its mirror image: a program per K/V block
looping over the Q blocks. Causal attention skips the blocks wholly above the diagonal and masks
only the diagonal; the kernels work in base 2 (exp(x) = exp2(x · log2 e)).

A helper module: ``make exercises`` (``tkcourse.stubs``) copies it verbatim into
``exercises/_attention_dq.py``, so the exercise runs the same given kernels without importing
``solutions/``. It imports only triton.
"""

import triton
import triton.language as tl


@triton.jit
def attn_bwd_preprocess(
    O,  # pointer to the forward's output o, contiguous (B, H, N, D)
    DO,  # pointer to the incoming gradient dO, same layout
    Delta,  # pointer to Δ, fp32 (B, H, N): written here
    N,  # number of tokens
    HEAD_DIM: tl.constexpr,  # D
    BLOCK_M: tl.constexpr,  # rows per program
):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    bh = tl.program_id(1).to(tl.int64)
    offs = bh * N * HEAD_DIM + offs_m[:, None] * HEAD_DIM + tl.arange(0, HEAD_DIM)[None, :]
    o = tl.load(O + offs, mask=offs_m[:, None] < N, other=0.0).to(tl.float32)
    do = tl.load(DO + offs, mask=offs_m[:, None] < N, other=0.0).to(tl.float32)
    tl.store(Delta + bh * N + offs_m, tl.sum(o * do, axis=1), mask=offs_m < N)  # Δ_i = Σ_d dO_id · O_id


@triton.jit
def attn_bwd_dq_loop(
    dq,  # fp32 accumulator (BLOCK_M, HEAD_DIM) of this program's queries
    q, do,  # this program's Q and dO blocks
    lse2, delta,  # this program's lse (base 2) and Δ, (BLOCK_M,)
    desc_k, desc_v,  # tensor descriptors of this head's K and V, blocks of (BLOCK_N, HEAD_DIM)
    offs_m,  # this program's query rows
    lo, hi,  # key rows [lo, hi) to visit; lo is a multiple of BLOCK_N
    N,  # number of tokens
    qk_scale,  # sm_scale · log2(e)
    BLOCK_N: tl.constexpr,  # keys per loop step
    MASK: tl.constexpr,  # mask keys >= N (and, if CAUSAL, keys after the query)
    CAUSAL: tl.constexpr,  # causal attention
):
    offs_n = tl.arange(0, BLOCK_N)
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        k = desc_k.load([start_n, 0])
        v = desc_v.load([start_n, 0])
        p = tl.math.exp2(tl.dot(q, k.T) * qk_scale - lse2[:, None])
        if MASK:
            keep = (start_n + offs_n)[None, :] < N
            if CAUSAL:
                keep = keep & (offs_m[:, None] >= (start_n + offs_n)[None, :])
            p = tl.where(keep, p, 0.0)
        dp = tl.dot(do, v.T)  # dP = dO Vᵀ
        ds = p * (dp - delta[:, None])  # dS = P ∘ (dP − Δ)
        dq += tl.dot(ds.to(k.dtype), k)  # dQ += dS K
    return dq


@triton.jit
def attn_bwd_dq(
    Q,  # pointer to q, contiguous (B, H, N, D), 16-byte aligned
    K,  # pointer to k, same layout
    V,  # pointer to v, same layout
    DO,  # pointer to dO, same layout
    DQ,  # pointer to dQ (written), same layout
    LSE,  # pointer to the forward's lse (natural log), fp32 (B, H, N)
    Delta,  # pointer to Δ, fp32 (B, H, N)
    N,  # number of tokens
    sm_scale,  # softmax scale
    HEAD_DIM: tl.constexpr,  # D
    CAUSAL: tl.constexpr,  # causal attention
    BLOCK_M: tl.constexpr,  # queries per program (a multiple of BLOCK_N when causal)
    BLOCK_N: tl.constexpr,  # keys per loop step
):
    if CAUSAL:
        tl.static_assert(BLOCK_M % BLOCK_N == 0, "causal dQ needs BLOCK_M to be a multiple of BLOCK_N")
    pid = tl.program_id(0)
    if CAUSAL:  # heaviest query blocks (most keys) first
        pid = tl.num_programs(0) - 1 - pid
    start_m = pid * BLOCK_M
    bh = tl.program_id(1).to(tl.int64)
    head = bh * N * HEAD_DIM
    desc_q = tl.make_tensor_descriptor(Q + head, [N, HEAD_DIM], [HEAD_DIM, 1], [BLOCK_M, HEAD_DIM])
    desc_do = tl.make_tensor_descriptor(DO + head, [N, HEAD_DIM], [HEAD_DIM, 1], [BLOCK_M, HEAD_DIM])
    desc_dq = tl.make_tensor_descriptor(DQ + head, [N, HEAD_DIM], [HEAD_DIM, 1], [BLOCK_M, HEAD_DIM])
    desc_k = tl.make_tensor_descriptor(K + head, [N, HEAD_DIM], [HEAD_DIM, 1], [BLOCK_N, HEAD_DIM])
    desc_v = tl.make_tensor_descriptor(V + head, [N, HEAD_DIM], [HEAD_DIM, 1], [BLOCK_N, HEAD_DIM])
    offs_m = start_m + tl.arange(0, BLOCK_M)
    q = desc_q.load([start_m, 0])
    do = desc_do.load([start_m, 0])
    lse2 = tl.load(LSE + bh * N + offs_m, mask=offs_m < N, other=0.0) * 1.4426950408889634
    delta = tl.load(Delta + bh * N + offs_m, mask=offs_m < N, other=0.0)
    dq = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    qk_scale = sm_scale * 1.4426950408889634

    if CAUSAL:  # keys left of the diagonal without a mask, then the diagonal masked
        dq = attn_bwd_dq_loop(dq, q, do, lse2, delta, desc_k, desc_v, offs_m, 0, start_m, N, qk_scale,
                               BLOCK_N, False, CAUSAL)
        dq = attn_bwd_dq_loop(dq, q, do, lse2, delta, desc_k, desc_v, offs_m, start_m,
                               tl.minimum(start_m + BLOCK_M, N), N, qk_scale, BLOCK_N, True, CAUSAL)
    else:  # full key blocks without a mask, then the last, partial one (if any) masked
        n_full = (N // BLOCK_N) * BLOCK_N
        dq = attn_bwd_dq_loop(dq, q, do, lse2, delta, desc_k, desc_v, offs_m, 0, n_full, N, qk_scale,
                               BLOCK_N, False, CAUSAL)
        dq = attn_bwd_dq_loop(dq, q, do, lse2, delta, desc_k, desc_v, offs_m, n_full, N, N, qk_scale,
                               BLOCK_N, True, CAUSAL)
    desc_dq.store([start_m, 0], (dq * sm_scale).to(DQ.dtype.element_ty))
