"""Weight-only int4 matmul at prefill sizes on Hopper (H100/H200), in Gluon: lesson 10's product with lesson
12's tools, the kernel ``kernels.int4_matmul`` routes x of ``MIN_M`` + 1 to ``MAX_M`` rows to on those GPUs
(``ROUTE``).

At a prefill's hundred rows the product is bound by the tensor cores, not the weight's bytes, and each
step's 16-bit tile has to be made from the int4 bytes first. Triton's kernel waits for each step's
``wgmma`` before it dequantizes the next step, so the two take turns (``research/README.md``, "M 128").
Here the schedule is the kernel's own, as in the mixed-input GEMMs of Marlin and Machete (Frantar et al.
2024, Wilkinson et al. 2024):

- **The weight as wgmma's left operand, from registers.** ``y.T = W @ x.T``: a program's BLOCK_N weight
  rows (64 a warpgroup, wgmma's M) by BLOCK_M rows of x (wgmma's N). Each step's bytes go from shared
  memory into the registers of the operand and are dequantized there (the library's ``DEQ`` 3 PTX: a
  ``lop3`` and a packed subtraction for two values); the tensor cores read only x from shared memory,
  and no 16-bit tile is stored and read back.
- **Two warpgroups in ping-pong** (``int4_pingpong_kernel``, FlashAttention-3's schedule, as lesson 12's
  attention): a producer warp loads each step by TMA into a ring of ``STAGES``, and each consumer
  warpgroup dequantizes its 64 rows' bytes while the other's MMAs run, their wgmma issued in turns passed
  by mbarriers. A warpgroup waits for its own MMAs before it dequantizes its next step: a wgmma reads its
  register operand while it runs, and ptxas puts the next step's operand in the same registers (a wait
  that left them in flight gave wrong sums on the H200). ``int4_wgmma_kernel`` is the rung before: its two
  warpgroups dequantize at the same time, then both wait on the tensor cores.
- **Split-K in one wave.** A layer of 4096 or 8192 outputs makes 32 or 64 tiles of 128 rows, too few for
  132 SMs: K is split over up to 8 programs, as many as keep every program in one wave
  (``split_for``). Two programs add their fp32 partials into a zeroed tile by atomics (the last to count
  in writes y and zeroes the tile again); more park their partials and the last adds them in order, so
  that a call gives the same bits every time (atomic adds of three or more partials would not).

On the H200 the ping-pong kernel is the faster of the two, and faster than the library's Triton kernel from a
few dozen rows of x up; with the dequantization taken out the same tile runs faster still, so the
dequantization is not yet wholly hidden (``research/README.md``, "The int4 ping-pong on the H200", has the
figures and what was tried). ``PERMUTE_K`` (x's columns permuted so a thread's bytes are one 16-byte load),
``DEQ`` 1 (Gluon's own ops), ``ATOMIC`` False (serial split-K at any split) and ``TIMING`` are switches that
``research/int4/gluon_probe.py`` measures beside the defaults (``PERMUTE_K`` and ``TIMING``: the rung before).

Names: ``matmul``, ``int4_wgmma_kernel``, ``int4_pingpong_kernel``, ``kernel_for``, ``split_for``, ``takes``,
``launch``, ``CONFIG``, ``ROUTE``, ``MIN_M``, ``MAX_M``, ``permute_k``. Importing needs no GPU.
"""

from __future__ import annotations

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait

from .. import int4_matmul as lesson
from . import int4_ptx
from .gluon_matmul import GL_DTYPES, check_device, shared_layout

__all__ = ["matmul", "int4_wgmma_kernel", "int4_pingpong_kernel", "kernel_for", "split_for", "takes", "launch",
           "descriptors", "CONFIG", "ROUTE", "MIN_M", "MAX_M", "permute_k", "forget"]

#: A barrier of the program's threads: ``gl.barrier`` from Triton 3.7, ``gl.thread_barrier`` in 3.6.
_cta_barrier = gl.barrier if hasattr(gl, "barrier") else gl.thread_barrier


@gluon.jit
def _nibble(b, SHIFT: gl.constexpr, dtype: gl.constexpr):
    """The signed 4-bit values at bit ``SHIFT`` of the int8 tensor ``b`` as ``dtype`` (-8 .. 7, exact): the
    nibble ``v`` XOR 8 in the mantissa of 1024 + (v ^ 8) (fp16) or 128 + (v ^ 8) (bf16), less 1032 or 136."""
    v = (b.to(gl.int16) >> SHIFT) & 0xF
    if dtype == gl.float16:
        out = (v ^ 0x6408).to(gl.float16, bitcast=True) - 1032.0
    else:
        out = (v ^ 0x4308).to(gl.bfloat16, bitcast=True) - 136.0
    return out


_ASM16 = int4_ptx.DEQ3_ASM_FP16
_ASM_BF16 = int4_ptx.DEQ3_ASM_BF16
_CON16 = int4_ptx.DEQ3_CONSTRAINTS_FP16
_CON_BF16 = int4_ptx.DEQ3_CONSTRAINTS_BF16


@gluon.jit
def _dequant3(b, dtype: gl.constexpr):
    """The low and high values of the int8 tensor ``b`` as ``dtype``, unscaled (-8 .. 7): the library's
    ``DEQ`` 3 PTX (``kernels.int4_matmul``), four bytes a 32-bit word, in ``b``'s layout."""
    lay: gl.constexpr = b.type.layout
    if dtype == gl.float16:
        m = gl.full(b.shape, 0x64086408, gl.int32, layout=lay)
        one16 = gl.full(b.shape, 0x2C002C00, gl.int32, layout=lay)  # 1/16 in both halves
        neg72 = gl.full(b.shape, 0xD480D480 - (1 << 32), gl.int32, layout=lay)  # -72 in both halves
        lo, hi = gl.inline_asm_elementwise(_ASM16, _CON16, [b, m, one16, neg72], (gl.float16, gl.float16),
                                           is_pure=True, pack=4)
    else:
        m = gl.full(b.shape, 0x43084308, gl.int32, layout=lay)
        lo, hi = gl.inline_asm_elementwise(_ASM_BF16, _CON_BF16, [b, m], (gl.bfloat16, gl.bfloat16),
                                           is_pure=True, pack=4)
    return lo, hi


@gluon.constexpr_function
def _permuted_bytes(BLOCK_N, BLOCK_K):
    """A shared layout of a (BLOCK_N, 64) byte tile stored row-major with no swizzle, read in wgmma's operand
    order: logical column k = 16 j + 8 h + 2 q + e (j the 16-wide slice, q the thread of its quad, h and e
    the halves of its registers) lies at byte 16 q + 4 j + 2 h + e of its row, so each thread's 16 bytes of a
    row are one 16-byte load. x's columns are permuted to match (``permute_k``)."""
    assert BLOCK_K == 64, "PERMUTE_K takes 64 bytes a step"
    rows = [[1 << i, 0] for i in range(BLOCK_N.bit_length() - 1)]
    return gl.SharedLinearLayout(offset_bases=[[0, 1], [0, 8], [0, 16], [0, 32], [0, 2], [0, 4]] + rows)


def permute_k(x2):
    """x (M, K) with the columns of each 64-wide block in the order ``_permuted_bytes`` reads the weight's
    bytes: column 16 j + 8 h + 2 q + e takes x's column 16 q + 4 j + 2 h + e."""
    M, K = x2.shape
    return x2.view(M, K // 64, 4, 4, 2, 2).permute(0, 1, 3, 4, 2, 5).reshape(M, K)


@gluon.jit
def _operands(b, s_lo, s_hi, DEQ: gl.constexpr, dtype: gl.constexpr):
    """The two wgmma left operands of a step's bytes ``b``: the low and the high values (``DEQ`` 3: the PTX,
    else Gluon's ops), each times its row's scale for the step (``s_lo``, ``s_hi``, in ``b``'s row layout)."""
    if DEQ == 3:
        f_lo, f_hi = _dequant3(b, dtype)
    else:
        f_lo = _nibble(b, 0, dtype)
        f_hi = _nibble(b, 4, dtype)
    return f_lo * s_lo[:, None], f_hi * s_hi[:, None]


@gluon.jit
def _split_store(acc, acc_l: gl.constexpr, y_ptr, ws_ptr, count_ptr, sub, split, M, N, off_m, row0, stride_ym,
                 ROWS: gl.constexpr, BLOCK_M: gl.constexpr, SPLIT_K: gl.constexpr, ATOMIC: gl.constexpr,
                 dtype: gl.constexpr):
    """The epilogue of ``sub``, a block of ``ROWS`` weight rows from ``row0`` by BLOCK_M rows of x: y[m, n] =
    acc[n, m], or with ``SPLIT_K`` > 1 this split's fp32 partial added to the block's others (atomic adds
    into a zeroed tile with ``ATOMIC``, else parked and added in order by the last to count in)."""
    ns = row0 + gl.arange(0, ROWS, layout=gl.SliceLayout(1, acc_l))
    ms = off_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, acc_l))
    y_ptrs = y_ptr + ms[None, :].to(gl.int64) * stride_ym + ns[:, None]
    y_mask = (ms < M)[None, :] & (ns < N)[:, None]
    if SPLIT_K == 1:
        gl.store(y_ptrs, acc.to(dtype), mask=y_mask)
    elif ATOMIC:  # each split adds its partial into an fp32 tile (zero between launches); the last to count
        # in reads the sum, writes y and zeroes the tile: every split's adds run at once, where serial split-K
        # left one program reading SPLIT_K partials at the end
        cell = gl.arange(0, ROWS, layout=gl.SliceLayout(1, acc_l))[:, None] * BLOCK_M + \
            gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, acc_l))[None, :]
        ws_tile = ws_ptr + sub.to(gl.int64) * (BLOCK_M * ROWS) + cell
        gl.atomic_add(ws_tile, acc, sem="relaxed", scope="gpu")
        _cta_barrier()
        done = gl.atomic_add(count_ptr + sub, 1, sem="acq_rel", scope="gpu")
        if done == SPLIT_K - 1:
            total = gl.load(ws_tile, cache_modifier=".cg")
            gl.store(y_ptrs, total.to(dtype), mask=y_mask)
            gl.store(ws_tile, gl.zeros_like(acc), cache_modifier=".cg")
            gl.atomic_xchg(count_ptr + sub, 0)
    else:  # serial split-K, as ``kernels.int4_matmul``: park the partial, count in, the last adds them all
        cell = gl.arange(0, ROWS, layout=gl.SliceLayout(1, acc_l))[:, None] * BLOCK_M + \
            gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, acc_l))[None, :]
        ws_tile = ws_ptr + sub.to(gl.int64) * (SPLIT_K * BLOCK_M * ROWS) + cell
        gl.store(ws_tile + split * (BLOCK_M * ROWS), acc, cache_modifier=".cg")
        _cta_barrier()
        done = gl.atomic_add(count_ptr + sub, 1, sem="acq_rel", scope="gpu")
        if done == SPLIT_K - 1:
            total = gl.load(ws_tile, cache_modifier=".cg")
            for s in gl.static_range(1, SPLIT_K):
                total += gl.load(ws_tile + s * (BLOCK_M * ROWS), cache_modifier=".cg")
            gl.store(y_ptrs, total.to(dtype), mask=y_mask)
            gl.atomic_xchg(count_ptr + sub, 0)


@gluon.jit
def _program_steps(K, BLOCK_K: gl.constexpr, SPLIT_K: gl.constexpr):
    """(tile, split, first step, steps of this program, all steps, K/2) of this program."""
    pid = gl.program_id(0)
    half = K // 2
    steps = half // BLOCK_K
    per_split = gl.cdiv(steps, SPLIT_K)
    first = (pid % SPLIT_K) * per_split
    return pid // SPLIT_K, pid % SPLIT_K, first, gl.minimum(steps - first, per_split), steps, half


@gluon.jit
def int4_wgmma_kernel(x_desc,  # x (M, K), blocks (BLOCK_M, BLOCK_K)
                       w_desc,  # packed (N, K/2) as int8, blocks (BLOCK_N, BLOCK_K)
                       s_ptr,  # scales (N, K / GROUP)
                       y_ptr, ws_ptr, count_ptr,  # y (M, N); SPLIT_K > 1: fp32 partial tiles, a counter a tile
                       M, N, K, stride_sn, stride_ym,
                       GROUP: gl.constexpr, STAGES: gl.constexpr, SPLIT_K: gl.constexpr,
                       num_warps: gl.constexpr, ATOMIC: gl.constexpr = True,
                       DEQ: gl.constexpr = 3, PERMUTE_K: gl.constexpr = False,
                       TIMING: gl.constexpr = 0):  # probes: 1 the first step's tile reused (no loads of the bytes,
    # no dequantization after it: wrong values)
    """``y.T = W @ x.T`` a tile at a time: BLOCK_N rows of the weight (64 a warpgroup, wgmma's M) by BLOCK_M
    rows of x (wgmma's N). Each step's bytes go from shared memory straight into the registers of wgmma's
    left operand, are dequantized there (no store of a 16-bit tile to shared memory and no read of it back:
    the tensor cores read only x from shared memory), and the step's two wgmma (low nibbles against x's low
    K half, high against the high half) run once both warpgroups have dequantized: the tensor cores and the
    dequantization take turns, which ``int4_pingpong_kernel`` overlaps. ``SPLIT_K`` programs share a tile's
    K, and the last to finish adds their fp32 partials."""
    BLOCK_M: gl.constexpr = x_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = x_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = w_desc.block_type.shape[0]
    dtype: gl.constexpr = x_desc.dtype
    tile, split, first, count, steps, half = _program_steps(K, BLOCK_K, SPLIT_K)
    gl.assume(count > 0)  # the launcher's split leaves every program a step or more
    n_n = gl.cdiv(N, BLOCK_N)
    off_m = (tile // n_n) * BLOCK_M
    off_n = (tile % n_n) * BLOCK_N

    x_lo = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, BLOCK_K], x_desc.layout)
    x_hi = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, BLOCK_K], x_desc.layout)
    w_ring = gl.allocate_shared_memory(w_desc.dtype, [STAGES, BLOCK_N, BLOCK_K], w_desc.layout)
    landed = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(landed.index(s), count=1)
    step_bytes: gl.constexpr = 2 * x_desc.block_type.nbytes + w_desc.block_type.nbytes
    for s in gl.static_range(STAGES - 1):
        if s < count:
            k0 = (first + s) * BLOCK_K
            mbarrier.expect(landed.index(s), step_bytes)
            tma.async_copy_global_to_shared(x_desc, [off_m, k0], landed.index(s), x_lo.index(s))
            tma.async_copy_global_to_shared(x_desc, [off_m, half + k0], landed.index(s), x_hi.index(s))
            tma.async_copy_global_to_shared(w_desc, [off_n, k0], landed.index(s), w_ring.index(s))

    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                      instr_shape=[16, BLOCK_M, 16])
    a_l: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_l, k_width=2)
    if PERMUTE_K:  # the bytes a thread's wgmma operand needs lie together in shared memory
        w_perm_l: gl.constexpr = _permuted_bytes(BLOCK_N, BLOCK_K)
    rows = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, a_l))
    s_row = s_ptr + gl.where(rows < N, rows, 0) * stride_sn
    acc = gl.zeros((BLOCK_N, BLOCK_M), dtype=gl.float32, layout=acc_l)
    s_lo_next = gl.load(s_row + (first * BLOCK_K) // GROUP)
    s_hi_next = gl.load(s_row + (half + first * BLOCK_K) // GROUP)
    if TIMING == 1:
        mbarrier.wait(landed.index(0), phase=0)
        b0 = w_ring.index(0).load(a_l)
        a_lo = _nibble(b0, 0, dtype) * s_lo_next.to(dtype)[:, None]
        a_hi = _nibble(b0, 4, dtype) * s_hi_next.to(dtype)[:, None]
    for j in range(count):
        i = first + j
        cur = j % STAGES
        s_lo = s_lo_next.to(dtype)
        s_hi = s_hi_next.to(dtype)
        k1 = gl.minimum(i + 1, steps - 1) * BLOCK_K
        s_lo_next = gl.load(s_row + k1 // GROUP)
        s_hi_next = gl.load(s_row + (half + k1) // GROUP)
        mbarrier.wait(landed.index(cur), phase=(j // STAGES) & 1)
        if TIMING != 1:
            if PERMUTE_K:
                b = w_ring.index(cur)._reinterpret(gl.int8, [BLOCK_N, BLOCK_K], w_perm_l).load(a_l)
            else:
                b = w_ring.index(cur).load(a_l)
            a_lo, a_hi = _operands(b, s_lo, s_hi, DEQ, dtype)
        acc = warpgroup_mma(a_lo, x_lo.index(cur).permute((1, 0)), acc, is_async=True)
        acc = warpgroup_mma(a_hi, x_hi.index(cur).permute((1, 0)), acc, is_async=True)
        # every MMA of the step done before the next step's bytes are dequantized: a wgmma reads its left
        # operand's registers while it runs, and ptxas writes the next step's operand into the same registers
        # (leaving this step's MMAs in flight gave wrong sums on the H200, different from call to call)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        _cta_barrier()  # ... in both warpgroups: its stage may be written again
        nxt = j + STAGES - 1
        if nxt < count:
            t = nxt % STAGES
            k0 = (first + nxt) * BLOCK_K
            mbarrier.expect(landed.index(t), step_bytes)
            tma.async_copy_global_to_shared(x_desc, [off_m, k0], landed.index(t), x_lo.index(t))
            tma.async_copy_global_to_shared(x_desc, [off_m, half + k0], landed.index(t), x_hi.index(t))
            tma.async_copy_global_to_shared(w_desc, [off_n, k0], landed.index(t), w_ring.index(t))
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
    for s in gl.static_range(STAGES):
        mbarrier.invalidate(landed.index(s))

    _split_store(acc, acc_l, y_ptr, ws_ptr, count_ptr, tile, split, M, N, off_m, off_n, stride_ym, BLOCK_N, BLOCK_M,
                 SPLIT_K, ATOMIC, dtype)


# ---- the routed rung: two warpgroups in ping-pong, as lesson 12's attention ----
@gluon.jit
def _pp_producer(x_desc, w_desc, x_lo, x_hi, w_ring, ready, empty, N, K, SPLIT_K: gl.constexpr,
                 STAGES: gl.constexpr):
    """One warp: each step's x halves and weight bytes by TMA, a stage refilled once both warpgroups freed it."""
    BLOCK_M: gl.constexpr = x_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = x_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = w_desc.block_type.shape[0]
    tile, split, first, count, steps, half = _program_steps(K, BLOCK_K, SPLIT_K)
    n_n = gl.cdiv(N, BLOCK_N)
    off_m = (tile // n_n) * BLOCK_M
    off_n = (tile % n_n) * BLOCK_N
    step_bytes: gl.constexpr = 2 * x_desc.block_type.nbytes + w_desc.block_type.nbytes
    for j in range(count):
        st = j % STAGES
        mbarrier.wait(empty.index(st), ((j // STAGES) & 1) ^ 1)  # a fresh barrier passes parity 1
        k0 = (first + j) * BLOCK_K
        mbarrier.expect(ready.index(st), step_bytes)
        tma.async_copy_global_to_shared(x_desc, [off_m, k0], ready.index(st), x_lo.index(st))
        tma.async_copy_global_to_shared(x_desc, [off_m, half + k0], ready.index(st), x_hi.index(st))
        tma.async_copy_global_to_shared(w_desc, [off_n, k0], ready.index(st), w_ring.index(st))


@gluon.jit
def _pp_consumer(x_lo, x_hi, w_ring, ready, empty, turn_mine, turn_other, s_ptr, y_ptr, ws_ptr, count_ptr, M, N,
                 K, stride_sn, stride_ym, WG: gl.constexpr, GROUP: gl.constexpr, STAGES: gl.constexpr,
                 SPLIT_K: gl.constexpr, ATOMIC: gl.constexpr, DEQ: gl.constexpr, num_warps: gl.constexpr):
    """One warpgroup, the program's weight rows ``WG * 64`` on. A step: wait for its bytes, dequantize them
    (the other warpgroup's MMAs run meanwhile), wait for the turn, issue the step's two wgmma, pass the
    turn, wait for them and free the stage."""
    BLOCK_M: gl.constexpr = x_lo.type.shape[1]
    BLOCK_K: gl.constexpr = x_lo.type.shape[2]
    BLOCK_N: gl.constexpr = w_ring.type.shape[1]
    ROWS: gl.constexpr = BLOCK_N // 2
    dtype: gl.constexpr = x_lo.dtype
    tile, split, first, count, steps, half = _program_steps(K, BLOCK_K, SPLIT_K)
    gl.assume(count > 0)  # the launcher's split leaves every program a step (no zeroed path for ptxas to serialize)
    n_n = gl.cdiv(N, BLOCK_N)
    off_m = (tile // n_n) * BLOCK_M
    row0 = (tile % n_n) * BLOCK_N + WG * ROWS
    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                      instr_shape=[16, BLOCK_M, 16])
    a_l: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_l, k_width=2)
    rows = row0 + gl.arange(0, ROWS, layout=gl.SliceLayout(1, a_l))
    s_row = s_ptr + gl.where(rows < N, rows, 0) * stride_sn
    acc = gl.zeros((ROWS, BLOCK_M), dtype=gl.float32, layout=acc_l)
    for j in range(count):
        cur = j % STAGES
        k0 = (first + j) * BLOCK_K
        s_lo = gl.load(s_row + k0 // GROUP).to(dtype)
        s_hi = gl.load(s_row + (half + k0) // GROUP).to(dtype)
        mbarrier.wait(ready.index(cur), phase=(j // STAGES) & 1)
        b = w_ring.index(cur).slice(WG * ROWS, ROWS, dim=0).load(a_l)
        a_lo, a_hi = _operands(b, s_lo, s_hi, DEQ, dtype)
        if WG == 0:  # warpgroup 0 takes turn 0 without waiting; turn j of warpgroup 1 follows warpgroup 0's
            if j > 0:
                mbarrier.wait(turn_mine, phase=(j - 1) & 1)
        else:
            mbarrier.wait(turn_mine, phase=j & 1)
        acc = warpgroup_mma(a_lo, x_lo.index(cur).permute((1, 0)), acc, is_async=True)
        acc = warpgroup_mma(a_hi, x_hi.index(cur).permute((1, 0)), acc, is_async=True)
        mbarrier.arrive(turn_other, count=1)
        # this step's MMAs done before the next step's bytes are dequantized: a wgmma reads its left operand's
        # registers while it runs, and ptxas writes the next step's operand into the same registers (seen on the
        # H200 with the wait leaving this step's two in flight: wrong sums, different from call to call). The
        # tensor cores meanwhile run the other warpgroup's MMAs: that is the ping-pong.
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        mbarrier.arrive(empty.index(cur), count=1)
    _split_store(acc, acc_l, y_ptr, ws_ptr, count_ptr, 2 * tile + WG, split, M, N, off_m, row0, stride_ym, ROWS,
                 BLOCK_M, SPLIT_K, ATOMIC, dtype)


@gluon.jit
def int4_pingpong_kernel(x_desc, w_desc, s_ptr, y_ptr, ws_ptr, count_ptr, M, N, K, stride_sn, stride_ym,
                         GROUP: gl.constexpr, STAGES: gl.constexpr, SPLIT_K: gl.constexpr, num_warps: gl.constexpr,
                         ATOMIC: gl.constexpr = True, DEQ: gl.constexpr = 3):
    """``int4_wgmma_kernel``'s product with its two warpgroups in ping-pong (FlashAttention-3, section 3.1;
    lesson 12's attention): a producer warp loads each step by TMA, and each consumer warpgroup (64 weight
    rows) dequantizes its bytes while the other's MMAs run, their wgmma issued in turns passed by mbarriers,
    so the tensor cores see the two warpgroups' MMAs back to back. Where ``int4_wgmma_kernel``'s two
    warpgroups dequantize at the same time and then both wait on the tensor cores. Launched with
    ``num_warps`` 4 (the first consumer; the second and the producer are workers); its split-K counts a
    block of 64 rows at a time (``launch`` gives it two counters a tile). ``CONFIG``'s ``PINGPONG``."""
    BLOCK_M: gl.constexpr = x_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = x_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = w_desc.block_type.shape[0]
    dtype: gl.constexpr = x_desc.dtype
    x_lo = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, BLOCK_K], x_desc.layout)
    x_hi = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, BLOCK_K], x_desc.layout)
    w_ring = gl.allocate_shared_memory(w_desc.dtype, [STAGES, BLOCK_N, BLOCK_K], w_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    turns = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=2)  # both warpgroups read each stage
    mbarrier.init(turns.index(0), count=1)
    mbarrier.init(turns.index(1), count=1)
    gl.warp_specialize([
        (_pp_consumer, (x_lo, x_hi, w_ring, ready, empty, turns.index(0), turns.index(1), s_ptr, y_ptr, ws_ptr,
                        count_ptr, M, N, K, stride_sn, stride_ym, 0, GROUP, STAGES, SPLIT_K, ATOMIC, DEQ, num_warps)),
        (_pp_consumer, (x_lo, x_hi, w_ring, ready, empty, turns.index(1), turns.index(0), s_ptr, y_ptr, ws_ptr,
                        count_ptr, M, N, K, stride_sn, stride_ym, 1, GROUP, STAGES, SPLIT_K, ATOMIC, DEQ, num_warps)),
        (_pp_producer, (x_desc, w_desc, x_lo, x_hi, w_ring, ready, empty, N, K, SPLIT_K, STAGES)),
    ], [4, 1], [232, 24])
    for s in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(s))
        mbarrier.invalidate(empty.index(s))
    mbarrier.invalidate(turns.index(0))
    mbarrier.invalidate(turns.index(1))


#: The tile: 128 weight rows (two warpgroups), 128 rows of x, 64 bytes of each weight row a step (64 values
#: of each K half), 4 stages; ``SPLIT_K`` 0: chosen by ``split_for``; ``PINGPONG``: the ping-pong kernel
#: (False: ``int4_wgmma_kernel``, 8 warps).
CONFIG = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, STAGES=4, SPLIT_K=0, num_warps=8, PINGPONG=True)
#: ``kernels.int4_matmul`` routes here on Hopper GPUs for x of more than ``MIN_M`` and at most ``MAX_M`` rows:
#: where the ping-pong kernel was measured faster than the Triton kernel (a 128-row tile of x, so fewer rows
#: take as long as 128): at 48 to 2048 rows, not at 24 or 32 (``research/int4/logs/gluon_probe_tenth.log``
#: to ``_twelfth``); above 2048 not measured. From ``int4_matmul.DENSE_MIN_M`` rows on, ``int4_matmul`` hands the
#: product to cuBLAS on the dequantized weight before it asks here.
ROUTE = True
MIN_M, MAX_M = 32, 2048


def split_for(M, N, K, config=CONFIG, sms=132):
    """The split of K for ``SPLIT_K`` 0: the largest power of two (at most 8) that keeps the programs within
    one wave, one an SM (``tiles * split <= sms``), each with 4 steps or more. A second, partial wave costs
    more than the split's adds (at 8192 x 8192: split 2, 128 programs, 50.9 us; split 4, 256, 62.1 us)."""
    tiles = triton.cdiv(M, config["BLOCK_M"]) * triton.cdiv(N, config["BLOCK_N"])
    steps = (K // 2) // config["BLOCK_K"]
    split = 1
    while tiles * split * 2 <= sms and split < 8 and steps // (2 * split) >= 4:
        split *= 2
    return split


def takes(x, packed, scales, group_size) -> bool:
    """Whether ``kernels.int4_matmul`` sends this call here: a Hopper GPU, ``ROUTE``, x of ``MIN_M`` < M <=
    ``MAX_M`` rows in fp16 or bf16, K/2 and the group a multiple of the 64-byte step, addresses the TMA can
    read (16-byte aligned, contiguous rows). The arguments are checked already."""
    if not ROUTE or x.device.type != "cuda" or x.dtype not in GL_DTYPES:
        return False
    K = x.shape[-1]
    M = x.numel() // K if K else 0
    bk = CONFIG["BLOCK_K"]
    return (MIN_M < M <= MAX_M and (K // 2) % bk == 0 and group_size % bk == 0 and x.stride(-1) == 1
            and x.data_ptr() % 16 == 0 and packed.data_ptr() % 16 == 0 and packed.is_contiguous()
            and scales.is_contiguous() and torch.cuda.get_device_capability(x.device) == (9, 0))


_WS: dict = {}


def _workspace(blocks, block_cells, device, split, atomic):
    """The fp32 tiles of ``blocks`` output blocks of ``block_cells`` values (zero between launches for the
    atomic split; ``split`` of them a block for the serial one) and a counter a block, kept a device."""
    cells = block_cells * blocks * (1 if atomic else split) if split > 1 else 1
    key = (device, atomic)  # the atomic tiles must start at zero: never shared with serial partials
    ws = _WS.get(key)
    if ws is None or ws[0].numel() < cells or ws[1].numel() < blocks:
        ws = _WS[key] = (torch.zeros(cells, dtype=torch.float32, device=device),
                         torch.zeros(max(blocks, 1), dtype=torch.int32, device=device))
    return ws

def descriptors(x2, w, config=CONFIG):
    """Gluon tensor descriptors of x (M, K) and the packed weight as int8 (N, K/2), the blocks of ``config``
    (``PERMUTE_K``: the weight's tile with no swizzle, read through ``_permuted_bytes``)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
    dt = GL_DTYPES[x2.dtype]
    if config.get("PERMUTE_K", False):
        w_layout = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=8, rank=2)
    else:
        w_layout = shared_layout((bn, bk), gl.int8)
    return (TensorDescriptor(x2, list(x2.shape), list(x2.stride()), [bm, bk], shared_layout((bm, bk), dt)),
            TensorDescriptor(w, list(w.shape), list(w.stride()), [bn, bk], w_layout))


def launch(x2, w, scales, y, group_size, config=CONFIG, timing=0, sms=None):
    """``(grid, args, static, meta)`` of a launch on x2 (M, K) contiguous rows, the packed weight as int8,
    the scales and y (M, N): ``args`` the tensors (x2 and w where the kernel takes their descriptors), then
    the scales, y and the workspace; ``static`` the sizes; ``meta`` the constexprs. No checks."""
    M, K = x2.shape
    N = w.shape[0]
    bk = config["BLOCK_K"]
    sms = sms or torch.cuda.get_device_properties(x2.device).multi_processor_count
    split = config["SPLIT_K"] or split_for(M, N, K, config, sms)
    steps = (K // 2) // bk
    split = max(1, min(split, steps))
    while split > 1 and (split - 1) * triton.cdiv(steps, split) >= steps:  # every program a step or more
        split -= 1
    tiles = triton.cdiv(M, config["BLOCK_M"]) * triton.cdiv(N, config["BLOCK_N"])
    # atomic adds only where their order cannot change the sum (two partials: 0 + a + b = 0 + b + a), so a
    # call gives the same bits every time; more partials are added in order by the last program (serial)
    atomic = config.get("ATOMIC", True) and split <= 2
    pingpong = config.get("PINGPONG", False)
    blocks = 2 * tiles if pingpong else tiles  # the ping-pong rung counts each warpgroup's 64 rows apart
    ws, counts = _workspace(blocks, tiles * config["BLOCK_M"] * config["BLOCK_N"] // blocks, x2.device, split,
                            atomic)
    meta = dict(GROUP=group_size, STAGES=config["STAGES"], SPLIT_K=split, ATOMIC=atomic, DEQ=config.get("DEQ", 3))
    if pingpong:  # the first consumer's 4 warps; the second consumer and the producer are workers
        meta["num_warps"] = 4
    else:
        meta.update(num_warps=config["num_warps"], PERMUTE_K=config.get("PERMUTE_K", False), TIMING=timing)
    return (tiles * split,), (x2, w, scales, y, ws, counts), (M, N, K, scales.stride(0), y.stride(0)), meta


def kernel_for(config=CONFIG):
    """The kernel ``config`` runs: ``int4_pingpong_kernel`` with ``PINGPONG``, else ``int4_wgmma_kernel``."""
    return int4_pingpong_kernel if config.get("PINGPONG", False) else int4_wgmma_kernel


def matmul(x, packed, scales, group_size=128, config=CONFIG, timing=0):
    """``x @ dequantize(packed, scales, group_size).T`` as ``solutions.int4_matmul.matmul`` (its checks, its
    result), on this kernel through ``kernel[grid]`` each call: for probes and tests (``kernels.int4_matmul``
    launches it leanly). ValueError for a K or group size the 64-byte step cannot take; RuntimeError off
    Hopper. ``timing``: the kernel's ``TIMING``, for probes (wrong values)."""
    N, K, group_size = lesson.check_args(x, packed, scales, group_size)
    bk = config["BLOCK_K"]
    if (K // 2) % bk or group_size % bk:
        raise ValueError(f"K = {K} and group_size = {group_size}: this kernel steps {bk} bytes of each weight row at "
                         f"a time, so K/2 and group_size must be multiples of {bk}")
    check_device(x, "x")
    x2 = x.reshape(-1, K).contiguous()
    if config.get("PERMUTE_K", False):
        x2 = permute_k(x2)
    y = torch.empty((x2.shape[0], N), dtype=x.dtype, device=x.device)
    grid, args, static, meta = launch(x2, packed.contiguous().view(torch.int8), scales.contiguous(), y, group_size,
                                      config, timing)
    kernel_for(config)[grid](*descriptors(args[0], args[1], config), *args[2:], *static, **meta)
    return y.reshape(*x.shape[:-1], N)


def forget():
    """Drop the kept workspaces."""
    _WS.clear()
