"""FlashAttention's backward on Hopper in Gluon, in one pass: ``attention_backward(do, q, k, v, o, lse,
causal)`` on an H100/H200 (sm_90) only. The kernel library's backward (``solutions.kernels.attention``)
takes it where it takes the shape (``shape_problem``); elsewhere lesson 07's two Triton kernels.

Why: lesson 07's backward runs two kernels that both recompute S = Q K^T and dP = dO V^T, seven matmuls'
worth where five are needed. Here one kernel does the five, on FlashAttention-3's schedule (Shah et al.
2024, section 3 and appendix B): warp specialization, wgmma, dK and dV accumulated in the registers of the
MMA warpgroups, dQ added into an fp32 buffer.

The math (P recomputed from the forward's log-sum-exp, everything transposed so that a key block's rows
are wgmma's M):

    S^T  = K_w Q_i^T               P^T  = exp2(S^T * scale * log2(e) - lse_i * log2(e))   (causal: 0 where key > query)
    dP^T = V_w dO_i^T              dS^T = P^T * (dP^T - Δ_i),  Δ = rowsum(dO ∘ O)
    dV_w += P^T dO_i               dK_w += dS^T Q_i           (P^T and dS^T as wgmma's register operand)
    dQ_i += dS_i K                 (both warpgroups' dS^T through shared memory, added by atomics)

A program takes a key block of ``BLOCK_N`` = 128 keys of one (batch, head) and walks the query blocks
of ``BLOCK_M`` = 64 (causal: only those at or after the key block's diagonal, the first two masked; not
causal: all, each program of a head starting at its own block, ``STAGGER``, so that their dQ adds spread):

- **a producer warp** (``_bwd_producer``) loads K and V once, then Q_i, dO_i, lse_i and Δ_i of each step by
  TMA into a ring of ``STAGES`` slots (ready / empty mbarriers; empty counts both warpgroups). lse and Δ
  go through shared memory rather than ``gl.load``: held in registers along S^T's columns (16 values a
  thread each) they pushed D 128 into spills.
- **two consumer warpgroups** (``_bwd_consumer``: the kernel's 4 warps and a worker of 4, 232 registers
  by ``setmaxnreg``, the producer 24), each owning 64 of the keys (wgmma's M = 64) and its own dK_w and
  dV_w in registers (64 x D fp32 each: 128 registers a thread at D 128). A step of warpgroup w:

  1. S^T and dP^T on two wgmma (A = K_w, V_w from shared memory; B = the slot's Q, dO permuted), both
     waited for;
  2. P^T (lse_i from the slot), masked on the diagonal steps; dV_w += P^T dO issued (P^T: register operand);
  3. dS^T (Δ_i from the slot); dK_w += dS^T Q issued (register operand);
  4. dS^T's 64 rows into the shared dS buffer of the step's parity, once that buffer's last dQ wgmma is
     done (mbarrier ``ds_empty``), then fence, the warpgroup's barrier and one arrive on ``ds_full``
     (count 2: both warpgroups);
  5. wait for dV_w's and dK_w's wgmma (they ran beside steps 3 and 4), free the slot;
  6. on its steps (j % 2 == w) **dQ**: wait on ``ds_full``, then dQ_i's share of this key block, dS_i K
     (wgmma, A = the dS buffer permuted to [BLOCK_M, BLOCK_N] from shared memory, B = K's shared memory,
     K = 128 keys), in chunks of 64 columns of D (a 64 x 64 fp32 accumulator, 32 registers; at D 128 K's
     shared memory is sliced along D at its 128-byte swizzle boundary), each waited for and added into
     a zeroed fp32 dQ in global memory with relaxed ``gl.atomic_add`` (ptxas makes them
     ``REDG.E.ADD.F32x2``); after the last chunk, ``ds_empty``. Gluon's Hopper ``tma`` module has no
     reduction in Triton 3.6, where FlashAttention-3 uses ``cp.reduce.async.bulk``.
- Finally dK_w * sm_scale and dV_w go out through shared memory by TMA, and
  ``attention_backward.attn_bwd_dq_cast`` casts dQ * sm_scale to the inputs' dtype.

Register-operand rule (``research/hopper/wgmma_races.py``; ``gluon_int4.py``): a wgmma reads its register
operand while it runs, so both wgmma that take P^T or dS^T from registers are waited for (step 5) before
anything else of the step; every accumulator is waited for before it is read (ptxas's C7514 otherwise
serializes every wgmma of the kernel). Schedules tried and left: dK_w still in flight across the dQ wgmma
(step 5 after step 6) was a register too many at D 128, and ptxas serialized every wgmma of the kernel for
want of registers (its C7512); S^T alone before dP^T gained nothing.
``python research/hopper/compile_check.py --backward`` compiles it for sm_90a on a machine without a GPU
and reports shared memory, registers, spills, serialized wgmma and register-operand races.

Shapes taken: MHA only (q, k, v, o, do all (B, H, N, D)), fp16 or bf16, D 64 or 128, N a multiple of
``BLOCK_N`` (128), causal or not (the mask aligned at the diagonal: key j <= query i). ``shape_problem``
says why a shape is refused. dQ is not bitwise repeatable (the adds come in any order): the library keeps
lesson 07's kernels when ``torch.use_deterministic_algorithms(True)`` is set.

Names: ``attention_bwd_kernel``, ``attention_backward``, ``shape_problem``, ``descriptors``, ``CONFIG``,
``DTYPES``, ``HEAD_DIMS``. Importing this module needs no GPU: the kernel compiles on its first launch.
"""
from __future__ import annotations

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from ..flash_attention_backward import compute_delta
from .attention_backward import CAST_BLOCK, attn_bwd_dq_cast
from .gluon_matmul import GL_DTYPES, check_device, check_tensor, shared_layout

__all__ = ["attention_bwd_kernel", "attention_backward", "check_inputs", "launch_plan", "shape_problem", "descriptors",
           "CONFIG", "DTYPES", "HEAD_DIMS"]

#: A barrier of one partition's threads: ``gl.barrier`` from Triton 3.7, ``gl.thread_barrier`` in 3.6.
_cta_barrier = gl.barrier if hasattr(gl, "barrier") else gl.thread_barrier

#: The tile: 128 keys a program (two warpgroups of 64, wgmma's M), 64 queries a step, 2 slots of Q and dO,
#: 4 warps a consumer warpgroup; ``STAGGER``: non-causal programs of a head start their query walk at
#: different blocks so that their dQ adds do not all hit the same rows at once (as atomic_backward's).
CONFIG = dict(BLOCK_M=64, BLOCK_N=128, STAGES=2, num_warps=4, STAGGER=True)
DTYPES = (torch.float16, torch.bfloat16)
HEAD_DIMS = (64, 128)
#: Columns of D a dQ wgmma takes: a 64 x 64 fp32 accumulator (32 registers a thread) at a time.
DQ_CHUNK = gl.constexpr(64)


@gluon.constexpr_function
def _acc_layout(M, width, num_warps):
    """A wgmma accumulator of M rows and ``width`` columns, warps stacked along M (as gluon_attention's)."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, width, 16])


@gluon.jit
def _query_start(j, steps, start_n, CAUSAL: gl.constexpr, STAGGER: gl.constexpr, BLOCK_M: gl.constexpr):
    """The first query row of step j of this program (both partitions call it, so the producer loads the
    blocks the consumers compute). Causal: the blocks from the key block's diagonal on, in order; else all
    of them, from block ``program_id(0)`` on with ``STAGGER`` (round to the start)."""
    if CAUSAL:
        return start_n + j * BLOCK_M
    if STAGGER:
        return ((j + gl.program_id(0)) % steps) * BLOCK_M
    return j * BLOCK_M


@gluon.jit
def _query_steps(N, start_n, CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr):
    """Query blocks a key block sees: causal, those at or after its diagonal; else all."""
    if CAUSAL:
        return (N - start_n) // BLOCK_M
    return N // BLOCK_M


@gluon.jit
def _bwd_producer(q_desc, k_desc, v_desc, do_desc, lse_desc, delta_desc, q_ring, do_ring, lse_ring, delta_ring,
                  k_smem, v_smem, kv_bar, ready, empty, N, CAUSAL: gl.constexpr, STAGGER: gl.constexpr,
                  STAGES: gl.constexpr):
    """One warp: K and V of the program once, then Q_i, dO_i, lse_i and Δ_i of each step into the next slot
    once both warpgroups have freed it (lse and Δ by TMA too: in shared memory they cost the consumers no
    registers until the line that reads them, as FlashAttention-3 keeps them)."""
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
    start_n = gl.program_id(0) * BLOCK_N
    row0 = gl.program_id(1) * N  # this (batch, head)'s first row in the 2-D views (B * H * N, D)
    mbarrier.expect(kv_bar, k_desc.block_type.nbytes + v_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(k_desc, [row0 + start_n, 0], kv_bar, k_smem)
    tma.async_copy_global_to_shared(v_desc, [row0 + start_n, 0], kv_bar, v_smem)
    step_bytes: gl.constexpr = (q_desc.block_type.nbytes + do_desc.block_type.nbytes + lse_desc.block_type.nbytes
                                + delta_desc.block_type.nbytes)
    steps = _query_steps(N, start_n, CAUSAL, BLOCK_M)
    for j in range(steps):
        st = j % STAGES
        mbarrier.wait(empty.index(st), ((j // STAGES) & 1) ^ 1)  # a fresh barrier passes parity 1
        start_m = _query_start(j, steps, start_n, CAUSAL, STAGGER, BLOCK_M)
        mbarrier.expect(ready.index(st), step_bytes)
        tma.async_copy_global_to_shared(q_desc, [row0 + start_m, 0], ready.index(st), q_ring.index(st))
        tma.async_copy_global_to_shared(do_desc, [row0 + start_m, 0], ready.index(st), do_ring.index(st))
        tma.async_copy_global_to_shared(lse_desc, [row0 + start_m], ready.index(st), lse_ring.index(st))
        tma.async_copy_global_to_shared(delta_desc, [row0 + start_m], ready.index(st), delta_ring.index(st))


@gluon.jit
def _bwd_consumer(q_ring, do_ring, lse_ring, delta_ring, k_smem, v_smem, ds_smem, out_smem, kv_bar, ready, empty,
                  ds_full, ds_empty, dk_desc, dv_desc, DQ, N, sm_scale, WG: gl.constexpr, CAUSAL: gl.constexpr,
                  STAGGER: gl.constexpr, STAGES: gl.constexpr, num_warps: gl.constexpr):
    """One warpgroup: keys ``WG * 64`` on of the program's key block. A step: S^T and dP^T on two wgmma,
    P^T and dS^T in registers, dV_w += P^T dO and dK_w += dS^T Q on two more (register operands), dS^T into
    the shared dS buffer; on every other step (its parity) dQ_i's share dS K from that buffer, added into
    global memory by atomics. At the end dK_w * sm_scale and dV_w out by TMA."""
    BLOCK_M: gl.constexpr = q_ring.type.shape[1]
    D: gl.constexpr = q_ring.type.shape[2]
    BLOCK_N: gl.constexpr = k_smem.type.shape[0]
    ROWS: gl.constexpr = BLOCK_N // 2  # this warpgroup's keys: wgmma's M
    CHUNK: gl.constexpr = DQ_CHUNK if D > DQ_CHUNK else D
    dtype: gl.constexpr = q_ring.dtype
    s_layout: gl.constexpr = _acc_layout(ROWS, BLOCK_M, num_warps)  # S^T, dP^T: [keys, queries]
    o_layout: gl.constexpr = _acc_layout(ROWS, D, num_warps)  # dK_w, dV_w: [keys, D]
    q_layout: gl.constexpr = _acc_layout(BLOCK_M, CHUNK, num_warps)  # a chunk of dQ_i: [queries, D chunk]
    op_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)

    start_n = gl.program_id(0) * BLOCK_N
    bh = gl.program_id(1)
    head = bh.to(gl.int64) * N  # this head's first row
    steps = _query_steps(N, start_n, CAUSAL, BLOCK_M)
    k_w = k_smem.slice(WG * ROWS, ROWS, dim=0)
    v_w = v_smem.slice(WG * ROWS, ROWS, dim=0)
    keys = start_n + WG * ROWS + gl.arange(0, ROWS, layout=gl.SliceLayout(1, s_layout))
    q_cols = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, s_layout))
    dq_rows = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, q_layout))
    dq_cols = gl.arange(0, CHUNK, layout=gl.SliceLayout(0, q_layout))
    s_zero = gl.zeros((ROWS, BLOCK_M), dtype=gl.float32, layout=s_layout)
    dq_zero = gl.zeros((BLOCK_M, CHUNK), dtype=gl.float32, layout=q_layout)
    dk = gl.zeros((ROWS, D), dtype=gl.float32, layout=o_layout)
    dv = gl.zeros((ROWS, D), dtype=gl.float32, layout=o_layout)
    qk_scale = sm_scale * 1.4426950408889634  # exp2 of scores times log2(e)

    mbarrier.wait(kv_bar, phase=0)
    for j in range(steps):
        st = j % STAGES
        buf = j % 2
        start_m = _query_start(j, steps, start_n, CAUSAL, STAGGER, BLOCK_M)
        mbarrier.wait(ready.index(st), phase=(j // STAGES) & 1)
        q_buf = q_ring.index(st)
        do_buf = do_ring.index(st)
        s_acc = warpgroup_mma(k_w, q_buf.permute((1, 0)), s_zero, use_acc=False, is_async=True)  # S^T = K_w Q^T
        dp_acc = warpgroup_mma(v_w, do_buf.permute((1, 0)), s_zero, use_acc=False, is_async=True)  # dP^T = V_w dO^T
        s_acc, dp_acc = warpgroup_mma_wait(num_outstanding=0, deps=(s_acc, dp_acc))  # both read below
        lse2 = lse_ring.index(st).load(gl.SliceLayout(0, s_layout)) * 1.4426950408889634  # lse in base 2
        p = gl.exp2(s_acc * qk_scale - lse2[None, :])
        if CAUSAL:  # only the key block's first BLOCK_N // BLOCK_M query blocks cross the diagonal
            if start_m < start_n + BLOCK_N:
                p = gl.where((start_m + q_cols)[None, :] >= keys[:, None], p, 0.0)
        p_op = gl.convert_layout(p.to(dtype), op_layout)
        dv = warpgroup_mma(p_op, do_buf, dv, is_async=True)  # dV_w += P^T dO, in flight beside dS^T's math
        delta = delta_ring.index(st).load(gl.SliceLayout(0, s_layout))
        ds = (p * (dp_acc - delta[None, :])).to(dtype)  # dS^T = P^T (dP^T - Δ)
        ds_op = gl.convert_layout(ds, op_layout)
        dk = warpgroup_mma(ds_op, q_buf, dk, is_async=True)  # dK_w += dS^T Q (sm_scale once, at the end)
        # dS^T into the shared buffer once its last dQ wgmma (two steps ago) is done
        mbarrier.wait(ds_empty.index(buf), ((j // 2) & 1) ^ 1)  # a fresh barrier passes parity 1
        ds_smem.index(buf).slice(WG * ROWS, ROWS, dim=0).store(ds)
        fence_async_shared()  # this thread's stores seen by the async proxy (the wgmma that reads them)
        _cta_barrier()  # ... and every thread of the warpgroup done before its one arrive
        mbarrier.arrive(ds_full.index(buf), count=1)
        # dV_w's and dK_w's wgmma done before dQ's: P^T's and dS^T's registers may be reused (naming them in
        # deps changed nothing ptxas reported; the wait's place is what counts), and at D 128 dK_w in flight beside dQ's
        # accumulators was a register too many: ptxas serialized every wgmma of the kernel (C7512)
        dk, dv, ds_op, p_op = warpgroup_mma_wait(num_outstanding=0, deps=(dk, dv, ds_op, p_op))
        mbarrier.arrive(empty.index(st), count=1)  # every read of this slot's Q, dO, lse and Δ is done
        if j % 2 == WG:  # this warpgroup's turn for dQ_i += dS_i K
            mbarrier.wait(ds_full.index(buf), phase=(j // 2) & 1)
            ds_t = ds_smem.index(buf).permute((1, 0))  # [queries, keys]
            dq_ptrs = DQ + (head + start_m + dq_rows)[:, None] * D + dq_cols[None, :]
            for c in gl.static_range(D // CHUNK):
                dq = warpgroup_mma(ds_t, k_smem.slice(c * CHUNK, CHUNK, dim=1), dq_zero, use_acc=False,
                                   is_async=True)
                dq = warpgroup_mma_wait(num_outstanding=0, deps=(dq,))  # all of this warpgroup's wgmma done
                if c == D // CHUNK - 1:
                    mbarrier.arrive(ds_empty.index(buf), count=1)  # the buffer may be written again
                gl.atomic_add(dq_ptrs + c * CHUNK, dq, sem="relaxed")

    out = out_smem.index(WG)
    row = bh * N + start_n + WG * ROWS
    out.store(dv.to(dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(dv_desc, [row, 0], out)
    tma.store_wait(pendings=0)
    out.store((dk * sm_scale).to(dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(dk_desc, [row, 0], out)
    tma.store_wait(pendings=0)


@gluon.jit
def attention_bwd_kernel(q_desc, k_desc, v_desc, do_desc, dk_desc, dv_desc, lse_desc, delta_desc, DQ, N, sm_scale,
                         CAUSAL: gl.constexpr, STAGES: gl.constexpr, STAGGER: gl.constexpr, num_warps: gl.constexpr):
    """Program (n, b * H + h): keys n * BLOCK_N on of head (b, h). q_desc, do_desc: TMA descriptors of q and
    dO as (B * H * N, D), blocks of BLOCK_M rows; k_desc, v_desc: of k and v, blocks of BLOCK_N rows;
    dk_desc, dv_desc: of dK and dV, blocks of BLOCK_N // 2 rows (a warpgroup's); lse_desc, delta_desc: 1-D
    descriptors (B * H * N,) of the forward's log-sum-exp (natural log) and of rowsum(dO ∘ O), fp32, blocks
    of BLOCK_M. DQ: fp32 (B, H, N, D), zeroed, into which dS K is added (dQ / sm_scale). Two consumer warpgroups (the kernel's ``num_warps`` = 4 and a
    worker of 4) and a producer warp."""
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[0]
    D: gl.constexpr = q_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
    dtype: gl.constexpr = q_desc.dtype
    ds_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, BLOCK_M], dtype)
    q_ring = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, D], q_desc.layout)
    do_ring = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, D], do_desc.layout)
    lse_ring = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK_M], lse_desc.layout)
    delta_ring = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK_M], delta_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, D], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, D], v_desc.layout)
    ds_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_N, BLOCK_M], ds_layout)
    out_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_N // 2, D], dk_desc.layout)
    kv_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    ds_full = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    ds_empty = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    mbarrier.init(kv_bar, count=1)
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=2)  # both warpgroups read each slot
    for b in gl.static_range(2):
        mbarrier.init(ds_full.index(b), count=2)  # both warpgroups write their rows of dS^T
        mbarrier.init(ds_empty.index(b), count=1)  # the one warpgroup whose dQ read it
    gl.warp_specialize([
        (_bwd_consumer, (q_ring, do_ring, lse_ring, delta_ring, k_smem, v_smem, ds_smem, out_smem, kv_bar, ready,
                         empty, ds_full, ds_empty, dk_desc, dv_desc, DQ, N, sm_scale, 0, CAUSAL, STAGGER, STAGES,
                         num_warps)),
        (_bwd_consumer, (q_ring, do_ring, lse_ring, delta_ring, k_smem, v_smem, ds_smem, out_smem, kv_bar, ready,
                         empty, ds_full, ds_empty, dk_desc, dv_desc, DQ, N, sm_scale, 1, CAUSAL, STAGGER, STAGES,
                         num_warps)),
        (_bwd_producer, (q_desc, k_desc, v_desc, do_desc, lse_desc, delta_desc, q_ring, do_ring, lse_ring,
                         delta_ring, k_smem, v_smem, kv_bar, ready, empty, N, CAUSAL, STAGGER, STAGES)),
    ], [4, 1], [232, 24])
    mbarrier.invalidate(kv_bar)
    for s in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(s))
        mbarrier.invalidate(empty.index(s))
    for b in gl.static_range(2):
        mbarrier.invalidate(ds_full.index(b))
        mbarrier.invalidate(ds_empty.index(b))


# ---- host side ----
def shape_problem(B, H, Hkv, N, D, dtype, config=None) -> str | None:
    """Why the kernel cannot take q, do, o (B, H, N, D) and k, v (B, Hkv, N, D) of ``dtype`` with ``config``
    (default ``CONFIG``), or None where it can: no tensors needed."""
    cfg = _config(config)
    if dtype not in DTYPES:
        return f"dtype {dtype}: the Gluon backward takes float16 or bfloat16"
    if D not in HEAD_DIMS:
        return f"D = {D}: the Gluon backward takes head dims {' or '.join(map(str, HEAD_DIMS))}"
    if Hkv != H:
        return f"{H} query heads and {Hkv} K/V heads: the Gluon backward takes MHA only (as many K/V heads as query heads)"
    if N % cfg["BLOCK_N"] or N % cfg["BLOCK_M"]:
        return (f"N = {N}: the Gluon backward takes N a multiple of {cfg['BLOCK_N']} (BLOCK_N, keys a program) and "
                f"of {cfg['BLOCK_M']} (BLOCK_M), since TMA reads every head from one 2-D view; pad the sequence")
    if B * H > 65535:
        return f"B * H = {B * H}: one program column a head, at most 65535 (CUDA's grid limit)"
    return None


def _config(config) -> dict:
    """``config`` (default ``CONFIG``) checked: the tile is fixed by the kernel's structure (two warpgroups of
    64 keys, 64-row dQ wgmma), only ``STAGES`` and ``STAGGER`` may change."""
    if not isinstance(config, (dict, type(None))):
        raise ValueError(f"config must be a dict like {CONFIG}, got {type(config).__name__}")
    cfg = dict(CONFIG) if config is None else dict(config)
    unknown = set(cfg) - set(CONFIG)
    if unknown:
        raise ValueError(f"config: unknown keys {sorted(unknown)}; it takes {sorted(CONFIG)}")
    cfg = dict(CONFIG, **cfg)
    for key in ("BLOCK_M", "BLOCK_N", "num_warps"):
        if cfg[key] != CONFIG[key]:
            raise ValueError(f"config {key} = {cfg[key]!r}: this kernel is built for {key} = {CONFIG[key]} only "
                             "(two warpgroups of 64 keys, 64 queries a step)")
    if type(cfg["STAGES"]) is not int or not 2 <= cfg["STAGES"] <= 4:
        raise ValueError(f"config STAGES = {cfg['STAGES']!r}: an int from 2 to 4")
    if cfg["STAGGER"] not in (True, False):
        raise ValueError(f"config STAGGER = {cfg['STAGGER']!r}: True or False")
    return cfg


def descriptors(q, k, v, do, dk, dv, lse, delta, config=CONFIG):
    """Gluon tensor descriptors of q, k, v, dO, dK, dV (B, H, N, D), contiguous, as 2-D views (B * H * N, D):
    q's and dO's blocks of BLOCK_M rows, k's and v's of BLOCK_N, dK's and dV's of BLOCK_N // 2 (a warpgroup's
    keys). No checks (CPU tensors give descriptors a compile can read)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    dt = GL_DTYPES[q.dtype]
    D = q.shape[-1]

    def desc(t, rows):
        t2 = t.reshape(-1, D)
        return TensorDescriptor(t2, list(t2.shape), list(t2.stride()), [rows, D], shared_layout((rows, D), dt))
    def row_desc(t, rows):  # fp32 (B, H, N) as one row of B * H * N, blocks of ``rows``
        t1 = t.reshape(-1)
        return TensorDescriptor(t1, [t1.numel()], [1], [rows],
                                gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=1))
    bm, bn = config["BLOCK_M"], config["BLOCK_N"]
    return (desc(q, bm), desc(k, bn), desc(v, bn), desc(do, bm), desc(dk, bn // 2), desc(dv, bn // 2),
            row_desc(lse, bm), row_desc(delta, bm))


def check_inputs(do, q, k, v, o, lse, causal=False, sm_scale=None, config=None):
    """``(causal, sm_scale, config)`` checked, the arguments first, then where they are: ValueError naming the
    argument, RuntimeError for a GPU (or a mode) that cannot run the kernel."""
    for name, t in (("do", do), ("q", q), ("k", k), ("v", v), ("o", o)):
        check_tensor(t, name, 4)
    for name, t in (("do", do), ("k", k), ("v", v), ("o", o)):
        if t.dtype != q.dtype:
            raise ValueError(f"q has dtype {q.dtype} but {name} has {t.dtype}; cast one with .to(...)")
    for name, t in (("do", do), ("o", o)):
        if t.shape != q.shape:
            raise ValueError(f"q is {tuple(q.shape)} but {name} is {tuple(t.shape)}; they must match")
    if k.shape != v.shape:
        raise ValueError(f"k is {tuple(k.shape)} but v is {tuple(v.shape)}; they must match")
    if (k.shape[0], k.shape[2], k.shape[3]) != (q.shape[0], q.shape[2], q.shape[3]):
        raise ValueError(f"q is {tuple(q.shape)} and k is {tuple(k.shape)}: they must share B, N and D")
    if not isinstance(lse, torch.Tensor) or lse.dtype != torch.float32 or tuple(lse.shape) != tuple(q.shape[:3]):
        got = f"{tuple(lse.shape)} {lse.dtype}" if isinstance(lse, torch.Tensor) else type(lse).__name__
        raise ValueError(f"lse must be the forward's fp32 log-sum-exp of shape {tuple(q.shape[:3])}, got {got}")
    cfg = _config(config)
    B, H, N, D = q.shape
    problem = shape_problem(B, H, k.shape[1], N, D, q.dtype, cfg)
    if problem:
        raise ValueError(problem)
    if causal not in (True, False):
        raise ValueError(f"causal must be True or False, got {causal!r}")
    if sm_scale is None:
        sm_scale = D ** -0.5
    elif isinstance(sm_scale, bool) or not isinstance(sm_scale, (int, float)) or not sm_scale == sm_scale:
        raise ValueError(f"sm_scale must be a finite number, got {sm_scale!r}")
    for name, t in (("do", do), ("k", k), ("v", v), ("o", o), ("lse", lse)):
        if t.device != q.device:
            raise ValueError(f"q is on {q.device} but {name} is on {t.device}; put them on one device")
    check_device(q, "q")
    return bool(causal), float(sm_scale), cfg


def attention_backward(do, q, k, v, o, lse, causal=False, sm_scale=None, config=None):
    """``(dq, dk, dv)`` of FlashAttention, one pass over the blocks on the Gluon kernel, dQ added by atomics
    (not bitwise repeatable). q, k, v, o, do: (B, H, N, D), one dtype
    (fp16/bf16); ``lse``: the forward's natural-log log-sum-exp, fp32 (B, H, N). ``sm_scale`` defaults to
    1/sqrt(D). ``config``: ``CONFIG``'s keys (only ``STAGES`` and ``STAGGER`` may differ)."""
    causal, sm_scale, cfg = check_inputs(do, q, k, v, o, lse, causal, sm_scale, config)
    do, q, k, v, o, lse = (t.contiguous() for t in (do, q, k, v, o, lse))
    delta = compute_delta(o, do, lse)  # Δ = rowsum(dO ∘ O), lesson 07's preprocess
    dq32 = torch.zeros(q.shape, device=q.device, dtype=torch.float32)
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    grid, args, meta = launch_plan(q, k, v, do, dk, dv, lse, delta, dq32, causal, sm_scale, cfg)
    attention_bwd_kernel[grid](*args, **meta)
    dq = torch.empty_like(q)
    attn_bwd_dq_cast[(triton.cdiv(dq.numel(), CAST_BLOCK),)](dq32, dq, dq.numel(), sm_scale, BLOCK=CAST_BLOCK)
    return dq, dk, dv


def launch_plan(q, k, v, do, dk, dv, lse, delta, dq32, causal, sm_scale, config=CONFIG) -> tuple[tuple, tuple, dict]:
    """``(grid, args, meta)`` of ``attention_bwd_kernel`` for checked, contiguous inputs (``check_inputs``):
    ``attention_bwd_kernel[grid](*args, **meta)``, as ``attention_backward`` launches it and the kernel
    library's lean path launches it once. ``args``: the eight descriptors, ``dq32``, N and ``sm_scale``."""
    B, H, N, _ = q.shape
    meta = dict(CAUSAL=causal, STAGES=config["STAGES"], STAGGER=config["STAGGER"], num_warps=config["num_warps"])
    args = (*descriptors(q, k, v, do, dk, dv, lse, delta, config), dq32, N, sm_scale)
    return (N // config["BLOCK_N"], B * H), args, meta
