"""FlashAttention's forward on Hopper in Gluon (lesson 12): ``attention_forward(q, k, v, causal)``, on an
H100/H200 (sm_90) only.

Q once by TMA, K and V by TMA into a ring of shared-memory stages guarded by mbarriers, S = Q K^T and
O += P V on asynchronous warpgroup MMAs (``wgmma``), the online softmax of lesson 05 in registers between
them (Dao 2023; Shah et al. 2024, FlashAttention-3, for the Hopper schedule). Causal or not. Four rungs,
each a kernel:

- ``attention_fwd_kernel``, pipelined: the kernel's own warps issue the loads a few blocks ahead;
- ``attention_ws_kernel``, warp-specialized: a producer warp issues every load, the consumer warpgroups
  only wait on the barriers they need;
- ``attention_overlap_kernel``, overlapped: the softmax of a block beside the next block's S, with K and V
  in rings of their own (FlashAttention-3's intra-warpgroup pipelining, section 3.2);
- ``attention_pingpong_kernel``, ping-pong: two consumer warpgroups on two query tiles, one's softmax
  during the other's GEMMs, in turns passed by mbarriers (FlashAttention-3, section 3.1).

The overlapped and ping-pong rungs also take grouped-query heads (k and v with fewer heads than q).

Shapes: q (B, Hq, N, D), k and v (B, Hkv, N, D), one length N for queries and keys; D 64 or 128; fp16 or
bf16. N must be a multiple of the query rows a program takes (BLOCK_M, twice that for ping-pong) and of
BLOCK_N: TMA reads a head's rows from one 2-D view of all heads, so a ragged tail would read and write
the next head's rows. ``shape_problem`` says, without tensors, whether a rung takes a shape.

Public names: the four kernels and ``acc_layout``; ``CONFIG`` (128-row query tiles, two warpgroups),
``PP_CONFIG`` (the ping-pong rung's 64 rows a warpgroup), ``LIBRARY_CONFIG`` (the same, persistent: the
kernel library's at short lengths), ``config_for(kernel)``; ``RUNGS``, (name,
kernel, config) of each rung in ladder order; ``GQA_KERNELS``; ``DTYPES``, ``HEAD_DIMS``;
``descriptors(q, k, v, o, config)`` (no checks, so that ``research/hopper/compile_check.py`` builds them
from CPU tensors) and ``launch_plan(...)``, a launch's grid, arguments and constexprs; ``shape_problem(...)``, ``check_inputs(...)``; ``attention_forward`` and ``reference``.

``attention_forward`` returns o, and with ``return_lse=True`` (the ping-pong rung only) each row's
log-sum-exp too, as lesson 06's forward does. It checks its
inputs and says what is wrong: ValueError for a non-tensor, a tensor not on a CUDA device, a dtype other
than fp16/bf16, shapes that do not match or that the rung does not take; RuntimeError where the GPU is not
a Hopper one or kernels run in Triton's interpreter, which runs no Gluon. Non-contiguous inputs are
copied first.

Importing this module needs no GPU (Triton 3.6 or 3.7): kernels compile on their first launch.
"""
from __future__ import annotations

import torch
import triton.profiler.language as pl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_init,
    warpgroup_mma_wait,
)

from .._checks import ConfigSpec, boolean, integer, power_of_two, real
from .gluon_matmul import GL_DTYPES, check_device, check_tensor, shared_layout

__all__ = ["attention_forward", "descriptors", "launch_plan", "shape_problem", "check_inputs", "reference", "config_for", "CONFIG",
           "PP_CONFIG", "LIBRARY_CONFIG", "RUNGS", "GQA_KERNELS", "DTYPES", "HEAD_DIMS", "attention_fwd_kernel", "attention_ws_kernel",
           "attention_overlap_kernel", "attention_pingpong_kernel", "acc_layout", "pingpong_consumer",
           "pingpong_producer", "pingpong_softmax"]

#: log2(e): exp(x) is exp2(x * LOG2E), and the kernels take exp2
LOG2E = 1.4426950408889634


@gluon.constexpr_function
def acc_layout(BLOCK_M, width, num_warps):
    """A wgmma accumulator of BLOCK_M rows and ``width`` columns: warps stacked along M, 16 rows each."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, width, 16])


@gluon.jit
def _softmax_pv(s_acc, acc, m_i, l_i, v_buf, i, start_m, qk_scale, CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr,
                BLOCK_N: gl.constexpr, D: gl.constexpr, num_warps: gl.constexpr):
    """One key block after its S landed: the causal mask, the online softmax of lesson 05 (new running
    max, rescale what was summed, add this block), and P V issued on an asynchronous wgmma."""
    s_layout: gl.constexpr = acc_layout(BLOCK_M, BLOCK_N, num_warps)
    o_layout: gl.constexpr = acc_layout(BLOCK_M, D, num_warps)
    if CAUSAL:  # a query sees the keys up to its own position
        rows = start_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
        cols = i * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        s_acc = gl.where(cols[None, :] <= rows[:, None], s_acc, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s_acc, axis=1) * qk_scale)
    p = gl.exp2(s_acc * qk_scale - m_new[:, None])
    alpha = gl.exp2(m_i - m_new)
    l_i = l_i * alpha + gl.sum(p, axis=1)
    acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
    p_op = gl.convert_layout(p.to(v_buf.dtype), gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2))
    acc = warpgroup_mma(p_op, v_buf, acc, is_async=True)
    return acc, m_new, l_i


@gluon.jit
def _store_o(acc, l_i, o_desc, o_smem, row, BLOCK_M: gl.constexpr, D: gl.constexpr, num_warps: gl.constexpr):
    """O = acc / l, out through shared memory by TMA (the last P V waited for first)."""
    o_layout: gl.constexpr = acc_layout(BLOCK_M, D, num_warps)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
    out = acc / gl.convert_layout(l_i, gl.SliceLayout(1, o_layout))[:, None]
    o_smem.store(out.to(o_desc.dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(o_desc, [row, 0], o_smem)
    tma.store_wait(pendings=0)


@gluon.jit
def attention_fwd_kernel(q_desc, k_desc, v_desc, o_desc, N, sm_scale, CAUSAL: gl.constexpr, STAGES: gl.constexpr,
                         num_warps: gl.constexpr):
    """The first rung, pipelined: program (m, b * H + h) computes query rows m * BLOCK_M on of head (b, h).
    q_desc, o_desc: TMA descriptors of q and o as (B * H * N, D), blocks of BLOCK_M rows; k_desc, v_desc:
    of k and v, blocks of BLOCK_N rows; N: tokens a head; sm_scale: the softmax scale; STAGES: K/V blocks
    in shared memory at once; num_warps: the program's warps (16 query rows each)."""
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[0]
    D: gl.constexpr = q_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
    dtype: gl.constexpr = q_desc.dtype
    s_layout: gl.constexpr = acc_layout(BLOCK_M, BLOCK_N, num_warps)
    o_layout: gl.constexpr = acc_layout(BLOCK_M, D, num_warps)

    start_m = gl.program_id(0) * BLOCK_M
    row0 = gl.program_id(1) * N  # this (batch, head)'s first row in the 2-D views (B * H * N, D)

    q_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, D], q_desc.layout)
    k_ring = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, D], k_desc.layout)
    v_ring = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, D], v_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    landed = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for s in gl.static_range(STAGES):
        mbarrier.init(landed.index(s), count=1)

    mbarrier.expect(q_bar, q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [row0 + start_m, 0], q_bar, q_smem)
    kv_bytes: gl.constexpr = k_desc.block_type.nbytes + v_desc.block_type.nbytes
    # causal: key blocks wholly after this query block's last row are skipped, the diagonal one masked
    steps = gl.minimum(N, start_m + BLOCK_M) // BLOCK_N if CAUSAL else N // BLOCK_N
    for s in gl.static_range(STAGES - 1):  # the first K/V blocks in flight before any math
        if s < steps:
            mbarrier.expect(landed.index(s), kv_bytes)
            tma.async_copy_global_to_shared(k_desc, [row0 + s * BLOCK_N, 0], landed.index(s), k_ring.index(s))
            tma.async_copy_global_to_shared(v_desc, [row0 + s * BLOCK_N, 0], landed.index(s), v_ring.index(s))

    m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, layout=gl.SliceLayout(1, s_layout))
    l_i = gl.full([BLOCK_M], 0.0, gl.float32, layout=gl.SliceLayout(1, s_layout))
    # O's accumulator is carried from step to step as an in-flight wgmma's (its P V overlaps the next S)
    acc = warpgroup_mma_init(gl.zeros((BLOCK_M, D), dtype=gl.float32, layout=o_layout))
    qk_scale = sm_scale * 1.4426950408889634  # exp2 of scores times log2(e)
    mbarrier.wait(q_bar, phase=0)

    for i in range(steps):
        cur = i % STAGES
        mbarrier.wait(landed.index(cur), phase=(i // STAGES) & 1)
        s_acc = gl.zeros((BLOCK_M, BLOCK_N), dtype=gl.float32, layout=s_layout)
        s_acc = warpgroup_mma(q_smem, k_ring.index(cur).permute((1, 0)), s_acc, use_acc=False, is_async=True)
        # the previous block's P V (still in flight) read the stage the next load goes to: wait for both
        s_acc, acc = warpgroup_mma_wait(num_outstanding=0, deps=(s_acc, acc))
        nxt = i + STAGES - 1
        if nxt < steps:
            t = nxt % STAGES
            mbarrier.expect(landed.index(t), kv_bytes)
            tma.async_copy_global_to_shared(k_desc, [row0 + nxt * BLOCK_N, 0], landed.index(t), k_ring.index(t))
            tma.async_copy_global_to_shared(v_desc, [row0 + nxt * BLOCK_N, 0], landed.index(t), v_ring.index(t))
        acc, m_i, l_i = _softmax_pv(s_acc, acc, m_i, l_i, v_ring.index(cur), i, start_m, qk_scale, CAUSAL, BLOCK_M,
                                    BLOCK_N, D, num_warps)
    mbarrier.invalidate(q_bar)
    for s in gl.static_range(STAGES):
        mbarrier.invalidate(landed.index(s))

    o_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, D], o_desc.layout)
    _store_o(acc, l_i, o_desc, o_smem, row0 + start_m, BLOCK_M, D, num_warps)


# ---- the next rung: a producer warp for Q, K and V, the consumer warpgroups for the math ----
@gluon.jit
def _kv_steps(N, start_m, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr):
    """Key blocks a query block reads: all of them, or (causal) up to and including its diagonal one."""
    if CAUSAL:
        return gl.minimum(N, start_m + BLOCK_M) // BLOCK_N
    return N // BLOCK_N


@gluon.jit
def _attn_load_partition(q_desc, k_desc, v_desc, q_smem, k_ring, v_ring, q_bar, ready, empty, N,
                         CAUSAL: gl.constexpr, STAGES: gl.constexpr):
    """One warp: Q once, then each K/V block into the next stage once the consumers have freed it."""
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
    kv_bytes: gl.constexpr = k_desc.block_type.nbytes + v_desc.block_type.nbytes
    start_m = gl.program_id(0) * BLOCK_M
    row0 = gl.program_id(1) * N
    mbarrier.expect(q_bar, q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [row0 + start_m, 0], q_bar, q_smem)
    for i in range(_kv_steps(N, start_m, BLOCK_M, BLOCK_N, CAUSAL)):
        st = i % STAGES
        mbarrier.wait(empty.index(st), ((i // STAGES) & 1) ^ 1)  # a fresh barrier passes parity 1
        mbarrier.expect(ready.index(st), kv_bytes)
        tma.async_copy_global_to_shared(k_desc, [row0 + i * BLOCK_N, 0], ready.index(st), k_ring.index(st))
        tma.async_copy_global_to_shared(v_desc, [row0 + i * BLOCK_N, 0], ready.index(st), v_ring.index(st))


@gluon.jit
def _attn_mma_partition(o_desc, q_smem, k_ring, v_ring, o_smem, q_bar, ready, empty, N, sm_scale,
                        CAUSAL: gl.constexpr, STAGES: gl.constexpr, num_warps: gl.constexpr):
    """The kernel's own warps: S, the online softmax and P V as in ``attention_fwd_kernel``; a stage goes
    back to the producer once the P V that read its V is done."""
    BLOCK_M: gl.constexpr = o_desc.block_type.shape[0]
    D: gl.constexpr = o_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = k_ring.type.shape[1]
    s_layout: gl.constexpr = acc_layout(BLOCK_M, BLOCK_N, num_warps)
    o_layout: gl.constexpr = acc_layout(BLOCK_M, D, num_warps)
    start_m = gl.program_id(0) * BLOCK_M
    row0 = gl.program_id(1) * N
    m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, layout=gl.SliceLayout(1, s_layout))
    l_i = gl.full([BLOCK_M], 0.0, gl.float32, layout=gl.SliceLayout(1, s_layout))
    acc = warpgroup_mma_init(gl.zeros((BLOCK_M, D), dtype=gl.float32, layout=o_layout))
    qk_scale = sm_scale * 1.4426950408889634
    mbarrier.wait(q_bar, phase=0)
    for i in range(_kv_steps(N, start_m, BLOCK_M, BLOCK_N, CAUSAL)):
        cur = i % STAGES
        mbarrier.wait(ready.index(cur), phase=(i // STAGES) & 1)
        s_acc = gl.zeros((BLOCK_M, BLOCK_N), dtype=gl.float32, layout=s_layout)
        s_acc = warpgroup_mma(q_smem, k_ring.index(cur).permute((1, 0)), s_acc, use_acc=False, is_async=True)
        s_acc, acc = warpgroup_mma_wait(num_outstanding=0, deps=(s_acc, acc))
        mbarrier.arrive(empty.index((i + STAGES - 1) % STAGES), count=1, pred=i > 0)  # block i-1's P V is done
        acc, m_i, l_i = _softmax_pv(s_acc, acc, m_i, l_i, v_ring.index(cur), i, start_m, qk_scale, CAUSAL, BLOCK_M,
                                    BLOCK_N, D, num_warps)
    _store_o(acc, l_i, o_desc, o_smem, row0 + start_m, BLOCK_M, D, num_warps)


@gluon.jit
def attention_ws_kernel(q_desc, k_desc, v_desc, o_desc, N, sm_scale, CAUSAL: gl.constexpr, STAGES: gl.constexpr,
                        num_warps: gl.constexpr):
    """``attention_fwd_kernel`` warp-specialized: a producer warp issues every TMA load, so the consumer
    warpgroups never wait on an address or a barrier they do not need."""
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[0]
    D: gl.constexpr = q_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
    dtype: gl.constexpr = q_desc.dtype
    q_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, D], q_desc.layout)
    k_ring = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, D], k_desc.layout)
    v_ring = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, D], v_desc.layout)
    o_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, D], o_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=1)
    gl.warp_specialize([
        (_attn_mma_partition, (o_desc, q_smem, k_ring, v_ring, o_smem, q_bar, ready, empty, N, sm_scale, CAUSAL,
                               STAGES, num_warps)),
        (_attn_load_partition, (q_desc, k_desc, v_desc, q_smem, k_ring, v_ring, q_bar, ready, empty, N, CAUSAL,
                                STAGES)),
    ], [1], [24])
    mbarrier.invalidate(q_bar)
    for s in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(s))
        mbarrier.invalidate(empty.index(s))


# ---- the next rung: the softmax of block i overlapped with the S of block i + 1 (FlashAttention-3's
# intra-warpgroup pipelining, Shah et al. 2024, section 3.2) ----
@gluon.jit
def _attn_load_kv_partition(q_desc, k_desc, v_desc, q_smem, k_ring, v_ring, q_bar, k_ready, k_empty, v_ready,
                            v_empty, N, CAUSAL: gl.constexpr, STAGES: gl.constexpr, GROUP: gl.constexpr):
    """One warp: Q once, then K and V each into its own ring: a K slot comes back as soon as its S is done,
    a V slot once its P V is, so the next S never waits on the P V still reading the V beside it. ``GROUP``
    query heads share a K/V head (grouped-query attention: program (b, h) reads K/V head h // GROUP)."""
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
    start_m = gl.program_id(0) * BLOCK_M
    mbarrier.expect(q_bar, q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [gl.program_id(1) * N + start_m, 0], q_bar, q_smem)
    row0 = gl.program_id(1) // GROUP * N  # (b * Hq + h) // GROUP is b * Hkv + h // GROUP
    steps = _kv_steps(N, start_m, BLOCK_M, BLOCK_N, CAUSAL)
    # K runs a block ahead of V: S(i + 1) is issued before P V(i)
    mbarrier.expect(k_ready.index(0), k_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(k_desc, [row0, 0], k_ready.index(0), k_ring.index(0))
    for i in range(steps):
        if i + 1 < steps:
            st = (i + 1) % STAGES
            mbarrier.wait(k_empty.index(st), (((i + 1) // STAGES) & 1) ^ 1)  # a fresh barrier passes parity 1
            mbarrier.expect(k_ready.index(st), k_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(k_desc, [row0 + (i + 1) * BLOCK_N, 0], k_ready.index(st), k_ring.index(st))
        st = i % STAGES
        mbarrier.wait(v_empty.index(st), ((i // STAGES) & 1) ^ 1)
        mbarrier.expect(v_ready.index(st), v_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(v_desc, [row0 + i * BLOCK_N, 0], v_ready.index(st), v_ring.index(st))


@gluon.jit
def _attn_mma_overlap_partition(o_desc, q_smem, k_ring, v_ring, o_smem, q_bar, k_ready, k_empty, v_ready, v_empty,
                                N, sm_scale, CAUSAL: gl.constexpr, STAGES: gl.constexpr, num_warps: gl.constexpr):
    """S of block i + 1 goes to the tensor cores before the softmax of block i, which runs meanwhile; one
    ``warpgroup_mma_wait(1)`` after P V(i) is issued means S(i + 1) is done (wgmma groups complete in the
    order they were committed). P V(i - 1) is waited for before S(i + 1) is issued, not after: with O's
    rescale reading its accumulator while S(i + 1) was in flight, ptxas serialized every wgmma of the
    kernel (its warning C7514)."""
    BLOCK_M: gl.constexpr = o_desc.block_type.shape[0]
    D: gl.constexpr = o_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = k_ring.type.shape[1]
    s_layout: gl.constexpr = acc_layout(BLOCK_M, BLOCK_N, num_warps)
    o_layout: gl.constexpr = acc_layout(BLOCK_M, D, num_warps)
    start_m = gl.program_id(0) * BLOCK_M
    row0 = gl.program_id(1) * N
    steps = _kv_steps(N, start_m, BLOCK_M, BLOCK_N, CAUSAL)
    m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, layout=gl.SliceLayout(1, s_layout))
    l_i = gl.full([BLOCK_M], 0.0, gl.float32, layout=gl.SliceLayout(1, s_layout))
    acc = warpgroup_mma_init(gl.zeros((BLOCK_M, D), dtype=gl.float32, layout=o_layout))
    s_zero = gl.zeros((BLOCK_M, BLOCK_N), dtype=gl.float32, layout=s_layout)
    qk_scale = sm_scale * 1.4426950408889634
    mbarrier.wait(q_bar, phase=0)
    mbarrier.wait(k_ready.index(0), phase=0)
    s_acc = warpgroup_mma(q_smem, k_ring.index(0).permute((1, 0)), s_zero, use_acc=False, is_async=True)
    s_acc = warpgroup_mma_wait(num_outstanding=0, deps=(s_acc,))
    mbarrier.arrive(k_empty.index(0), count=1)
    for i in range(steps - 1):  # every block but the last, whose S has no next one to overlap
        cur = i % STAGES
        nxt = (i + 1) % STAGES
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))  # P V(i - 1) done: O may be rescaled
        mbarrier.wait(k_ready.index(nxt), phase=((i + 1) // STAGES) & 1)
        s_next = warpgroup_mma(q_smem, k_ring.index(nxt).permute((1, 0)), s_zero, use_acc=False, is_async=True)
        mbarrier.arrive(v_empty.index((i + STAGES - 1) % STAGES), count=1, pred=i > 0)
        mbarrier.wait(v_ready.index(cur), phase=(i // STAGES) & 1)
        acc, m_i, l_i = _softmax_pv(s_acc, acc, m_i, l_i, v_ring.index(cur), i, start_m, qk_scale, CAUSAL, BLOCK_M,
                                    BLOCK_N, D, num_warps)
        s_acc = warpgroup_mma_wait(num_outstanding=1, deps=(s_next,))  # S(i + 1) done, P V(i) in flight
        mbarrier.arrive(k_empty.index(nxt), count=1)
    last = steps - 1
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
    mbarrier.wait(v_ready.index(last % STAGES), phase=(last // STAGES) & 1)
    acc, m_i, l_i = _softmax_pv(s_acc, acc, m_i, l_i, v_ring.index(last % STAGES), last, start_m, qk_scale, CAUSAL,
                                BLOCK_M, BLOCK_N, D, num_warps)
    _store_o(acc, l_i, o_desc, o_smem, row0 + start_m, BLOCK_M, D, num_warps)


@gluon.jit
def attention_overlap_kernel(q_desc, k_desc, v_desc, o_desc, N, sm_scale, CAUSAL: gl.constexpr,
                             STAGES: gl.constexpr, num_warps: gl.constexpr, GROUP: gl.constexpr = 1):
    """``attention_ws_kernel`` with the softmax of each block overlapped with the next block's S, and K and
    V in rings of their own (``_attn_mma_overlap_partition``)."""
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[0]
    D: gl.constexpr = q_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
    dtype: gl.constexpr = q_desc.dtype
    q_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, D], q_desc.layout)
    k_ring = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, D], k_desc.layout)
    v_ring = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, D], v_desc.layout)
    o_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, D], o_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for s in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(s), count=1)
        mbarrier.init(k_empty.index(s), count=1)
        mbarrier.init(v_ready.index(s), count=1)
        mbarrier.init(v_empty.index(s), count=1)
    gl.warp_specialize([
        (_attn_mma_overlap_partition, (o_desc, q_smem, k_ring, v_ring, o_smem, q_bar, k_ready, k_empty, v_ready,
                                       v_empty, N, sm_scale, CAUSAL, STAGES, num_warps)),
        (_attn_load_kv_partition, (q_desc, k_desc, v_desc, q_smem, k_ring, v_ring, q_bar, k_ready, k_empty, v_ready,
                                   v_empty, N, CAUSAL, STAGES, GROUP)),
    ], [1], [24])
    mbarrier.invalidate(q_bar)
    for s in gl.static_range(STAGES):
        mbarrier.invalidate(k_ready.index(s))
        mbarrier.invalidate(k_empty.index(s))
        mbarrier.invalidate(v_ready.index(s))
        mbarrier.invalidate(v_empty.index(s))


# ---- the next rung: two consumer warpgroups in ping-pong (FlashAttention-3, section 3.1): each its own 64
# query rows; one issues its two GEMMs while the other runs its softmax, in turns passed by mbarriers ----
@gluon.jit
def _pingpong_tile_m(BLOCK_M: gl.constexpr, REVERSE: gl.constexpr):
    """The first query row of this program's two tiles: program m takes rows ``m * 2 * BLOCK_M`` on, or with
    ``REVERSE`` the m-th pair from the end. Causal, a later tile reads more key blocks (up to its diagonal),
    and the GPU hands out programs about in the order of their index, axis 0 fastest: reversed, each head's
    heaviest tiles start first and its lightest fill the gaps the others leave, so the last wave is short
    (longest-processing-time first, as FlashAttention-3's causal tile scheduler hands out its tiles and as
    the Triton forward of ``attention_forward.py`` orders its query blocks). One helper for both
    partitions, so that the producer loads the tiles the consumers compute."""
    m = gl.program_id(0)
    if REVERSE:
        m = gl.num_programs(0) - 1 - m
    return m * (2 * BLOCK_M)


@gluon.jit
def _pingpong_range(desc, N, BLOCK_M: gl.constexpr, PERSISTENT: gl.constexpr):
    """``(tiles, tiles_m, heads)``: how many tiles this program takes, the query tile pairs a head and the
    (batch, head) count (from ``desc``, a 2-D view of all heads' rows). ``PERSISTENT``: the tiles are dealt
    out in rounds of one a program (``_pingpong_tile``), so a program takes one in each round the tiles fill
    for it; else one tile, where the grid places it."""
    tiles_m = N // (2 * BLOCK_M)
    if PERSISTENT:
        heads = desc.shape[0] // N
        total = tiles_m * heads
        rounds = total // gl.num_programs(0)  # full rounds; the last one, partial, takes ``rem`` programs
        rem = total % gl.num_programs(0)
        seat = gl.program_id(0)  # this program's place in that last round, dealt as _pingpong_tile deals
        if rounds % 2 == 1:
            seat = gl.num_programs(0) - 1 - seat
        return rounds + (seat < rem).to(gl.int32), tiles_m, heads
    return 1, tiles_m, 1


@gluon.jit
def _pingpong_tile(r, tiles_m, heads, BLOCK_M: gl.constexpr, CAUSAL: gl.constexpr, REVERSE: gl.constexpr,
                   PERSISTENT: gl.constexpr):
    """``(first query row, (batch, head) index)`` of this program's tile in round r. ``PERSISTENT``: causal,
    the tiles are ranked heaviest first (every head's last pair of query tiles, then the pairs before:
    longest-processing-time first, as FlashAttention-3's causal scheduler), not causal head by head; round r
    deals the next num_programs of them, to programs 0, 1, ... in even rounds and back from the last program
    in odd ones, so that the program that got a round's heaviest tile gets the next round's lightest and
    the sums even out (a fixed deal, where FlashAttention-3 counts tiles out with an atomic). Else the grid's:
    ``_pingpong_tile_m`` and the program's column."""
    if PERSISTENT:
        seat = gl.program_id(0)
        if r % 2 == 1:
            seat = gl.num_programs(0) - 1 - seat
        u = r * gl.num_programs(0) + seat
        if CAUSAL:
            return (tiles_m - 1 - u // heads) * (2 * BLOCK_M), u % heads
        return (u % tiles_m) * (2 * BLOCK_M), u // tiles_m
    return _pingpong_tile_m(BLOCK_M, REVERSE), gl.program_id(1)


@gluon.jit
def pingpong_softmax(s_acc, m_i, l_i, i, start_m, qk_scale, CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr,
                     BLOCK_N: gl.constexpr, D: gl.constexpr, dtype: gl.constexpr, num_warps: gl.constexpr,
                     MASK_ALL: gl.constexpr = False):
    """The online softmax of one key block: P as the next P V's register operand, the new max and sum, and
    alpha (what O must be rescaled by) in O's row layout. Causal: only the blocks that reach past this
    warpgroup's first row are masked (the others lie wholly left of the diagonal); ``MASK_ALL`` masks every
    block, as the rung first did (two iotas, a compare and a select a score: 3-14% of its time when causal, measured
    by ``research/hopper/pingpong_probe.py``)."""
    s_layout: gl.constexpr = acc_layout(BLOCK_M, BLOCK_N, num_warps)
    o_layout: gl.constexpr = acc_layout(BLOCK_M, D, num_warps)
    if CAUSAL:
        if MASK_ALL or (i + 1) * BLOCK_N > start_m:
            rows = start_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
            cols = i * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
            s_acc = gl.where(cols[None, :] <= rows[:, None], s_acc, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s_acc, axis=1) * qk_scale)
    p = gl.exp2(s_acc * qk_scale - m_new[:, None])
    alpha = gl.exp2(m_i - m_new)
    l_i = l_i * alpha + gl.sum(p, axis=1)
    p_op = gl.convert_layout(p.to(dtype), gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2))
    return p_op, m_new, l_i, gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))


@gluon.jit
def pingpong_consumer(o_desc, q_smem, k_ring, v_ring, o_smem, q_bar, q_empty, k_ready, k_empty, v_ready, v_empty,
                      turn_mine, turn_other, N, sm_scale, LSE, WG: gl.constexpr, CAUSAL: gl.constexpr,
                      STAGES: gl.constexpr, num_warps: gl.constexpr, MASK_ALL: gl.constexpr = False,
                      REVERSE: gl.constexpr = False, PERSISTENT: gl.constexpr = False, EARLY: gl.constexpr = False):
    """One warpgroup, rows ``WG * BLOCK_M`` on of the program's two query tiles. Turn t: wait for it, issue
    S(t) and P V(t - 1), pass it on, wait for both, then the softmax of block t while the other warpgroup's
    GEMMs run. Every wgmma is waited for before its accumulator is read (ptxas would serialize them).
    ``LSE``: where each row's log-sum-exp goes (natural log, fp32, (B, Hq, N)), what a backward needs.
    ``PERSISTENT``: tile after tile (``_pingpong_range``), the ring's slots, the turns and Q's barrier
    counted on across tiles, Q freed (``q_empty``) once its last S is done, so that the producer loads the
    next tile's Q and first K while this one's last P V and output run.
    ``EARLY``: the softmax of block i starts once S(i) is done, while P V(i - 1) still runs (wgmma groups
    retire in order, S being issued first); O is rescaled after P V(i - 1) is waited for. The P that P V(i - 1)
    reads from registers while it runs is named in that wait (``deps``); that no instruction writes those
    registers before it is what ``research/hopper/wgmma_races.py`` checks in the SASS."""
    BLOCK_M: gl.constexpr = o_desc.block_type.shape[0]
    D: gl.constexpr = o_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = k_ring.type.shape[1]
    dtype: gl.constexpr = o_desc.dtype
    s_layout: gl.constexpr = acc_layout(BLOCK_M, BLOCK_N, num_warps)
    o_layout: gl.constexpr = acc_layout(BLOCK_M, D, num_warps)
    s_zero = gl.zeros((BLOCK_M, BLOCK_N), dtype=gl.float32, layout=s_layout)
    qk_scale = sm_scale * 1.4426950408889634
    tiles, tiles_m, heads = _pingpong_range(o_desc, N, BLOCK_M, PERSISTENT)
    pos = 0  # K/V blocks taken so far: the ring's slot and phase
    turn = 0  # this warpgroup's turns so far: S(0), each S(i) with P V(i - 1), the last P V (steps + 1 a tile)
    done = 0  # tiles done: Q's phase
    for r in range(tiles):
        tile_m, bh = _pingpong_tile(r, tiles_m, heads, BLOCK_M, CAUSAL, REVERSE, PERSISTENT)
        start_m = tile_m + WG * BLOCK_M
        steps = _kv_steps(N, tile_m, 2 * BLOCK_M, BLOCK_N, CAUSAL)  # both warpgroups walk the same key blocks
        m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, layout=gl.SliceLayout(1, s_layout))
        l_i = gl.full([BLOCK_M], 0.0, gl.float32, layout=gl.SliceLayout(1, s_layout))
        acc = gl.zeros((BLOCK_M, D), dtype=gl.float32, layout=o_layout)
        mbarrier.wait(q_bar, phase=done & 1)
        mbarrier.wait(k_ready.index(pos % STAGES), phase=(pos // STAGES) & 1)
        if WG == 1 or turn > 0:  # warpgroup 0 takes its very first turn without waiting; every other turn
            mbarrier.wait(turn_mine, phase=(turn - 1 + WG) & 1)  # follows the other warpgroup's
        s_acc = warpgroup_mma(q_smem, k_ring.index(pos % STAGES).permute((1, 0)), s_zero, use_acc=False,
                              is_async=True)
        mbarrier.arrive(turn_other, count=1)
        s_acc = warpgroup_mma_wait(num_outstanding=0, deps=(s_acc,))
        mbarrier.arrive(k_empty.index(pos % STAGES), count=1)
        p_op, m_i, l_i, alpha = pingpong_softmax(s_acc, m_i, l_i, 0, start_m, qk_scale, CAUSAL, BLOCK_M, BLOCK_N,
                                                 D, dtype, num_warps, MASK_ALL)
        for i in range(1, steps):  # each phase a proton scope: what the intra-kernel profiler draws
            cur = (pos + i) % STAGES
            prev = (pos + i - 1) % STAGES
            with pl.scope("wait"):
                mbarrier.wait(k_ready.index(cur), phase=((pos + i) // STAGES) & 1)
                mbarrier.wait(v_ready.index(prev), phase=((pos + i - 1) // STAGES) & 1)
                mbarrier.wait(turn_mine, phase=(turn + i - 1 + WG) & 1)
            with pl.scope("mma"):
                s_acc = warpgroup_mma(q_smem, k_ring.index(cur).permute((1, 0)), s_zero, use_acc=False,
                                      is_async=True)
                acc = warpgroup_mma(p_op, v_ring.index(prev), acc, is_async=True)
                mbarrier.arrive(turn_other, count=1)
                if EARLY:
                    s_acc = warpgroup_mma_wait(num_outstanding=1, deps=(s_acc,))  # S(i) done, P V(i - 1) runs
                else:
                    s_acc, acc = warpgroup_mma_wait(num_outstanding=0, deps=(s_acc, acc))
            mbarrier.arrive(k_empty.index(cur), count=1)
            if EARLY:
                p_prev = p_op
                with pl.scope("softmax"):
                    p_op, m_i, l_i, alpha = pingpong_softmax(s_acc, m_i, l_i, i, start_m, qk_scale, CAUSAL,
                                                             BLOCK_M, BLOCK_N, D, dtype, num_warps, MASK_ALL)
                acc, p_prev = warpgroup_mma_wait(num_outstanding=0, deps=(acc, p_prev))
                mbarrier.arrive(v_empty.index(prev), count=1)
                acc = acc * alpha[:, None]
            else:
                mbarrier.arrive(v_empty.index(prev), count=1)
                with pl.scope("softmax"):
                    p_op, m_i, l_i, alpha = pingpong_softmax(s_acc, m_i, l_i, i, start_m, qk_scale, CAUSAL,
                                                             BLOCK_M, BLOCK_N, D, dtype, num_warps, MASK_ALL)
                    acc = acc * alpha[:, None]
        mbarrier.arrive(q_empty, count=1)  # every S of this tile is done: the producer may load the next Q
        last = pos + steps - 1
        mbarrier.wait(v_ready.index(last % STAGES), phase=(last // STAGES) & 1)
        mbarrier.wait(turn_mine, phase=(turn + steps - 1 + WG) & 1)
        acc = warpgroup_mma(p_op, v_ring.index(last % STAGES), acc, is_async=True)
        mbarrier.arrive(turn_other, count=1)
        rows = start_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))  # m_i is in log2 units:
        gl.store(LSE + bh.to(gl.int64) * N + rows, (m_i + gl.log2(l_i)) * 0.6931471805599453)  # ln
        _store_o(acc, l_i, o_desc, o_smem, bh * N + start_m, BLOCK_M, D, num_warps)  # waits for the P V
        mbarrier.arrive(v_empty.index(last % STAGES), count=1)
        pos += steps
        turn += steps + 1
        done += 1


@gluon.jit
def pingpong_producer(q_desc, k_desc, v_desc, q_smem0, q_smem1, k_ring, v_ring, q_bar, q_empty, k_ready, k_empty,
                      v_ready, v_empty, N, CAUSAL: gl.constexpr, STAGES: gl.constexpr, GROUP: gl.constexpr,
                      REVERSE: gl.constexpr = False, PERSISTENT: gl.constexpr = False):
    """One warp: both query tiles (once both warpgroups are done with the last ones), then K and V, each slot
    refilled once both warpgroups have freed it; ``PERSISTENT``, tile after tile."""
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
    tiles, tiles_m, heads = _pingpong_range(q_desc, N, BLOCK_M, PERSISTENT)
    pos = 0
    done = 0
    for r in range(tiles):
        tile_m, bh = _pingpong_tile(r, tiles_m, heads, BLOCK_M, CAUSAL, REVERSE, PERSISTENT)
        q_row = bh * N + tile_m
        mbarrier.wait(q_empty, (done & 1) ^ 1)  # a fresh barrier passes parity 1
        mbarrier.expect(q_bar, 2 * q_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(q_desc, [q_row, 0], q_bar, q_smem0)
        tma.async_copy_global_to_shared(q_desc, [q_row + BLOCK_M, 0], q_bar, q_smem1)
        row0 = bh // GROUP * N
        steps = _kv_steps(N, tile_m, 2 * BLOCK_M, BLOCK_N, CAUSAL)
        for i in range(steps):
            st = (pos + i) % STAGES
            parity = (((pos + i) // STAGES) & 1) ^ 1
            mbarrier.wait(k_empty.index(st), parity)
            mbarrier.expect(k_ready.index(st), k_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(k_desc, [row0 + i * BLOCK_N, 0], k_ready.index(st), k_ring.index(st))
            mbarrier.wait(v_empty.index(st), parity)
            mbarrier.expect(v_ready.index(st), v_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(v_desc, [row0 + i * BLOCK_N, 0], v_ready.index(st), v_ring.index(st))
        pos += steps
        done += 1


@gluon.jit
def attention_pingpong_kernel(q_desc, k_desc, v_desc, o_desc, N, sm_scale, LSE, CAUSAL: gl.constexpr,
                              STAGES: gl.constexpr, num_warps: gl.constexpr, GROUP: gl.constexpr = 1,
                              MASK_ALL: gl.constexpr = False, REVERSE: gl.constexpr = False,
                              PERSISTENT: gl.constexpr = False, EARLY: gl.constexpr = False):
    """Two query tiles of BLOCK_M rows a program, one a consumer warpgroup (the kernel's 4 warps and a
    worker of 4), and a producer warp (``pingpong_consumer``, ``pingpong_producer``). ``MASK_ALL``: with
    ``CAUSAL``, mask every key block rather than only those that cross the diagonal. ``REVERSE``: program
    m takes a head's m-th pair of tiles from the end, the heaviest first when causal (``_pingpong_tile_m``).
    ``PERSISTENT``: a grid of one program an SM (``launch_plan``), each taking tile after tile. ``EARLY``: each
    softmax starts under its warpgroup's own last P V (``pingpong_consumer``).
    ``LSE``: a pointer to (B, Hq, N) fp32 for each row's log-sum-exp."""
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[0]
    D: gl.constexpr = q_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
    dtype: gl.constexpr = q_desc.dtype
    q_smem0 = gl.allocate_shared_memory(dtype, [BLOCK_M, D], q_desc.layout)
    q_smem1 = gl.allocate_shared_memory(dtype, [BLOCK_M, D], q_desc.layout)
    k_ring = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, D], k_desc.layout)
    v_ring = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, D], v_desc.layout)
    o_smem0 = gl.allocate_shared_memory(dtype, [BLOCK_M, D], o_desc.layout)
    o_smem1 = gl.allocate_shared_memory(dtype, [BLOCK_M, D], o_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    q_empty = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    turns = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    mbarrier.init(q_empty, count=2)  # both warpgroups read Q to the tile's last S
    mbarrier.init(turns.index(0), count=1)
    mbarrier.init(turns.index(1), count=1)
    for s in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(s), count=1)
        mbarrier.init(k_empty.index(s), count=2)  # both warpgroups read each K and V block
        mbarrier.init(v_ready.index(s), count=1)
        mbarrier.init(v_empty.index(s), count=2)
    gl.warp_specialize([
        (pingpong_consumer, (o_desc, q_smem0, k_ring, v_ring, o_smem0, q_bar, q_empty, k_ready, k_empty, v_ready,
                             v_empty, turns.index(0), turns.index(1), N, sm_scale, LSE, 0, CAUSAL, STAGES, num_warps,
                             MASK_ALL, REVERSE, PERSISTENT, EARLY)),
        (pingpong_consumer, (o_desc, q_smem1, k_ring, v_ring, o_smem1, q_bar, q_empty, k_ready, k_empty, v_ready,
                             v_empty, turns.index(1), turns.index(0), N, sm_scale, LSE, 1, CAUSAL, STAGES, num_warps,
                             MASK_ALL, REVERSE, PERSISTENT, EARLY)),
        (pingpong_producer, (q_desc, k_desc, v_desc, q_smem0, q_smem1, k_ring, v_ring, q_bar, q_empty, k_ready,
                             k_empty, v_ready, v_empty, N, CAUSAL, STAGES, GROUP, REVERSE, PERSISTENT)),
    ], [4, 1], [232, 24])
    mbarrier.invalidate(q_bar)
    mbarrier.invalidate(q_empty)
    mbarrier.invalidate(turns.index(0))
    mbarrier.invalidate(turns.index(1))
    for s in gl.static_range(STAGES):
        mbarrier.invalidate(k_ready.index(s))
        mbarrier.invalidate(k_empty.index(s))
        mbarrier.invalidate(v_ready.index(s))
        mbarrier.invalidate(v_empty.index(s))



#: The tile of the pipelined, warp-specialized and overlapped rungs: 128 query rows (two warpgroups of 4
#: warps, 16 rows a warp), key blocks of 128, 2 stages.
CONFIG = dict(BLOCK_M=128, BLOCK_N=128, STAGES=2, num_warps=8)
#: The ping-pong rung's tile: 64 query rows a warpgroup, two a program (``attention_forward`` launches
#: N / 128 programs a head for it).
PP_CONFIG = dict(BLOCK_M=64, BLOCK_N=128, STAGES=2, num_warps=4)
#: The ping-pong rung as the kernel library launches it for short tiles (``kernels.attention.pingpong_config``):
#: persistent, one program an SM taking tile after tile, so that each tile's first loads run under the last
#: one's final block (``research/README.md`` has the A/B against a program a tile).
LIBRARY_CONFIG = dict(PP_CONFIG, PERSISTENT=True)
#: (name, kernel, config) of each rung, in the ladder's order.
RUNGS = (("pipelined", attention_fwd_kernel, CONFIG), ("warp-specialized", attention_ws_kernel, CONFIG),
         ("overlapped", attention_overlap_kernel, CONFIG), ("ping-pong", attention_pingpong_kernel, PP_CONFIG))
#: The rungs that take grouped-query heads (a ``GROUP`` of query heads reading one K/V head).
GQA_KERNELS = (attention_overlap_kernel, attention_pingpong_kernel)
#: The dtypes of q, k, v and o.
DTYPES = (torch.float16, torch.bfloat16)
#: The head dims the kernels are built and checked for (a wgmma's N is D for P V; D 256 would not fit
#: the stages in shared memory).
HEAD_DIMS = (64, 128)

#: What a config takes: the query rows a warp's wgmma takes (16) times the warps, key blocks of 16 to
#: 256 (a wgmma's N), at least 2 stages (one landing while one is read).
_CONFIG = ConfigSpec({"BLOCK_M": (power_of_two, 16, 256), "BLOCK_N": (power_of_two, 16, 256),
                      "STAGES": (integer, 2, 8), "num_warps": (power_of_two, 4, 8),
                      "MASK_ALL": (boolean, 0, 1), "REVERSE": (boolean, 0, 1),  # the ping-pong rung's only
                      "PERSISTENT": (boolean, 0, 1), "EARLY": (boolean, 0, 1)},
                     required=("BLOCK_M", "BLOCK_N", "STAGES", "num_warps"))


def config_for(kernel) -> dict:
    """The config ``kernel`` runs with by default: ``PP_CONFIG`` for the ping-pong rung, else ``CONFIG``."""
    return PP_CONFIG if kernel is attention_pingpong_kernel else CONFIG


def _rung_name(kernel) -> str:
    return next((name for name, k, _ in RUNGS if k is kernel), getattr(kernel, "__name__", repr(kernel)))


def shape_problem(B, Hq, Hkv, N, D, dtype, kernel=None, config=None) -> str | None:
    """Why ``kernel`` (default: the warp-specialized rung) cannot take q (B, Hq, N, D) and k, v (B, Hkv, N, D)
    of ``dtype`` with ``config`` (default: ``config_for(kernel)``), or None where it can: no tensors needed
    (a benchmark leaves out the rungs that do not take a shape)."""
    kernel = attention_ws_kernel if kernel is None else kernel
    if all(kernel is not k for _, k, _ in RUNGS):
        return f"kernel {kernel!r} is none of this module's rungs ({', '.join(n for n, _, _ in RUNGS)})"
    cfg = _CONFIG(config_for(kernel) if config is None else config, "config")
    name = _rung_name(kernel)
    if dtype not in DTYPES:
        return f"dtype {dtype}: the Gluon attention takes float16 or bfloat16"
    if D not in HEAD_DIMS:
        return f"D = {D}: the Gluon attention takes head dims {' or '.join(map(str, HEAD_DIMS))}"
    if Hkv < 1 or Hq % Hkv:
        return f"{Hq} query heads and {Hkv} K/V heads: the query heads must be a multiple of the K/V heads"
    if Hkv != Hq and kernel not in GQA_KERNELS:
        return (f"{Hq} query heads read {Hkv} K/V heads: the {name} rung takes one K/V head a query head; the "
                f"{' and '.join(_rung_name(k) for k in GQA_KERNELS)} rungs take grouped-query heads")
    if cfg["BLOCK_M"] % (16 * cfg["num_warps"]):
        return (f"config BLOCK_M = {cfg['BLOCK_M']} with {cfg['num_warps']} warps: each warp's wgmma takes 16 "
                "query rows, so BLOCK_M must be a multiple of 16 * num_warps")
    rows = cfg["BLOCK_M"] * (2 if kernel is attention_pingpong_kernel else 1)  # query rows a program
    if N % rows or N % cfg["BLOCK_N"]:
        return (f"N = {N}: the {name} rung takes N a multiple of {rows} (query rows a program) and of "
                f"{cfg['BLOCK_N']} (BLOCK_N), since TMA reads every head from one 2-D view; pad the sequence")
    if B * Hq > 65535:
        return f"B * Hq = {B * Hq}: one program column a head, at most 65535 (CUDA's grid limit)"
    return None


def check_inputs(q, k, v, causal=False, sm_scale=None, kernel=None, config=None):
    """``(causal, sm_scale)`` checked, the arguments first, then where they are: ValueError naming the tensor
    and what is wrong, or RuntimeError for a GPU (or a mode) that cannot run the kernels."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(t, name, 4)
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            raise ValueError(f"q has dtype {q.dtype} but {name} has {t.dtype}; cast one with .to(...)")
    B, Hq, N, D = q.shape
    if k.shape != v.shape:
        raise ValueError(f"k is {tuple(k.shape)} but v is {tuple(v.shape)}; they must match")
    if (k.shape[0], k.shape[2], k.shape[3]) != (B, N, D):
        raise ValueError(f"q is {tuple(q.shape)} and k is {tuple(k.shape)}: they must share B, N and D, as "
                         "(B, Hq, N, D) and (B, Hkv, N, D)")
    problem = shape_problem(B, Hq, k.shape[1], N, D, q.dtype, kernel, config)
    if problem:
        raise ValueError(problem)
    causal = boolean("causal", causal)
    sm_scale = D ** -0.5 if sm_scale is None else real("sm_scale", sm_scale)
    for name, t in (("k", k), ("v", v)):
        if t.device != q.device:
            raise ValueError(f"q is on {q.device} but {name} is on {t.device}; put them on one device")
    check_device(q, "q")
    return causal, sm_scale


def descriptors(q, k, v, o, config=CONFIG):
    """Gluon tensor descriptors of q, k, v, o (B, H, N, D), contiguous, as 2-D views (B * H * N, D): Q's and
    O's blocks of BLOCK_M rows, K's and V's of BLOCK_N. No checks (``check_inputs`` is the launcher's)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    dt = GL_DTYPES[q.dtype]
    D = q.shape[-1]

    def desc(t, rows):
        t2 = t.reshape(-1, D)
        return TensorDescriptor(t2, list(t2.shape), list(t2.stride()), [rows, D], shared_layout((rows, D), dt))
    return desc(q, config["BLOCK_M"]), desc(k, config["BLOCK_N"]), desc(v, config["BLOCK_N"]), desc(o, config["BLOCK_M"])


def attention_forward(q, k, v, causal=False, sm_scale=None, kernel=None, config=None, return_lse=False):
    """``softmax(q k^T * sm_scale) v`` (causal: each query sees the keys up to its own position) on
    ``kernel``, one of the four rungs (default: the warp-specialized one), with ``config`` (default:
    ``config_for(kernel)``). q (B, Hq, N, D), k and v (B, Hkv, N, D); returns o, q's shape and dtype.
    ``sm_scale`` defaults to D ** -0.5. ``return_lse`` (the ping-pong rung only): ``(o, lse)``, lse each
    row's log-sum-exp (B, Hq, N) fp32 in natural log, as lesson 06's forward returns for the backward."""
    kernel = attention_ws_kernel if kernel is None else kernel
    cfg = _CONFIG(config_for(kernel) if config is None else config, "config")
    if boolean("return_lse", return_lse) and kernel is not attention_pingpong_kernel:
        raise ValueError(f"return_lse: only the ping-pong rung writes the log-sum-exp, not the {_rung_name(kernel)} one")
    causal, sm_scale = check_inputs(q, k, v, causal, sm_scale, kernel, cfg)
    B, H, N, D = q.shape
    q, k, v = (t.contiguous() for t in (q, k, v))
    o = torch.empty_like(q)
    grid, args, meta = launch_plan(q, k, v, o, causal, sm_scale, kernel, cfg)
    lse = None
    if kernel is attention_pingpong_kernel:  # it always writes it: a few bytes a row
        lse = torch.empty((B, H, N), device=q.device, dtype=torch.float32)
        args += (lse,)
    kernel[grid](*args, **meta)
    return (o, lse) if return_lse else o


def launch_plan(q, k, v, o, causal, sm_scale, kernel, config) -> tuple[tuple, tuple, dict]:
    """``(grid, arguments, constexprs)`` of a launch of ``kernel`` with a checked ``config`` on contiguous q, k,
    v and o, no checks: the descriptors, N and the scale (the ping-pong rung's ``LSE`` pointer goes after them),
    and its constexprs and launch options. ``attention_forward`` launches it, and so does the kernel library's
    lean entry of the ping-pong rung (``kernels.attention``)."""
    B, H, N, _ = q.shape
    meta = {key: val for key, val in config.items() if not key.startswith("BLOCK")}
    meta["CAUSAL"] = causal
    if k.shape[1] != H:  # grouped-query heads: program (b, h) reads K/V head h // GROUP
        meta["GROUP"] = H // k.shape[1]
    rows = config["BLOCK_M"] * (2 if kernel is attention_pingpong_kernel else 1)  # query rows a program
    grid = (N // rows, B * H)
    if config.get("PERSISTENT"):  # one program an SM (registers hold one), each taking tile after tile;
        # CPU tensors (a compile without a GPU): a program a tile, as no launch follows
        sms = torch.cuda.get_device_properties(q.device).multi_processor_count if q.is_cuda else N // rows * B * H
        grid = (min(N // rows * B * H, sms), 1)
    return grid, (*descriptors(q, k, v, o, config), N, sm_scale), meta


def reference(q, k, v, causal=False, sm_scale=None):
    """The same attention in fp32 by torch (grouped-query heads repeated), rounded to q's dtype."""
    group = q.shape[1] // k.shape[1]
    k, v = (t.float().repeat_interleave(group, dim=1) for t in (k, v))
    o = torch.nn.functional.scaled_dot_product_attention(q.float(), k, v, is_causal=bool(causal), scale=sm_scale)
    return o.to(q.dtype)
