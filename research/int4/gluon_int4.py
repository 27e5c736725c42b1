"""A research prototype, not in the kernel library: weight-only int4 matmul at prefill sizes on Hopper, in
Gluon (lesson 10's product, lesson 12's tools): ``matmul(x, packed, scales, group_size=128)`` as
``solutions.int4_matmul.matmul``, for x of 64 rows and more on an H100/H200 (sm_90) only. Its first H200
runs (``gluon_probe.py``, ``logs/gluon_probe_first.log``): right everywhere, and no faster than the Triton
kernel it was to replace (``research/README.md`` says what it found and what is left).

At a prefill's hundred rows the product is no longer bound by the weight's bytes but by the tensor cores,
and the 16-bit tile each step multiplies has to be made first: unpacked, sign-corrected and scaled from
the int4 bytes. Triton's kernel (``kernels.int4_matmul``) does this too, but its compiler waits for each
step's ``wgmma`` before the next step's dequantization begins, so the two take turns
(``research/README.md``, "M 128"). Here the kernel says the schedule itself, as the mixed-input GEMMs of
Marlin and Machete do on Hopper (Frantar et al. 2024; Wilkinson et al. 2024):

    prologue: the TMA loads of steps 0 .. STAGES-2 (the weight's bytes and x's two K halves) into a ring
    step i:   wait for stage i; load its bytes into registers and dequantize them (the bit trick of
              ``kernels.int4_matmul``, the group's scale applied) into one of two shared-memory tiles,
              while the MMAs of step i-1 still run; the two wgmma of step i (x's low K half by the low
              nibbles, the high half by the high ones), asynchronous; wait until only they are in
              flight; refill the stage of step i-1
    epilogue: C's tile from registers to shared memory to global by TMA

Two warpgroups (8 warps) share each dequantized tile, so a barrier of the program's threads sits between
its stores and the wgmma that read it, and another between the wait and the next store into a tile the
other warpgroup may still be reading.

Names: ``int4_wgmma_kernel``, ``matmul``, ``descriptors``, ``CONFIG``. Importing needs no GPU.
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

from solutions import int4_matmul as lesson
from solutions.kernels.gluon_matmul import GL_DTYPES, check_device, mma_layout, shared_layout, store_tile

__all__ = ["matmul", "int4_wgmma_kernel", "descriptors", "CONFIG"]

#: A barrier of the program's threads: ``gl.barrier`` from Triton 3.7, ``gl.thread_barrier`` in 3.6.
_cta_barrier = gl.barrier if hasattr(gl, "barrier") else gl.thread_barrier

#: The tile: BLOCK_M rows of x by BLOCK_N rows of the weight, BLOCK_K bytes of each weight row a step
#: (BLOCK_K values of each K half), STAGES in the ring, two warpgroups.
CONFIG = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, STAGES=3, num_warps=8)


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


@gluon.jit
def int4_wgmma_kernel(x_desc,  # x (M, K), blocks (BLOCK_M, BLOCK_K)
                      w_desc,  # packed (N, K/2) as int8, blocks (BLOCK_N, BLOCK_K)
                      y_desc,  # y (M, N), blocks (BLOCK_M, BLOCK_N)
                      s_ptr,  # scales (N, K / GROUP), x's dtype or fp32
                      stride_sn,  # the scales' row stride
                      K,
                      GROUP: gl.constexpr,  # group_size, a multiple of BLOCK_K
                      STAGES: gl.constexpr,
                      num_warps: gl.constexpr,
                      TIMING_ONLY: gl.constexpr = False):  # probes: dequantize steps 0 and 1 only (wrong values)
    BLOCK_M: gl.constexpr = y_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = y_desc.block_type.shape[1]
    BLOCK_K: gl.constexpr = w_desc.block_type.shape[1]
    dtype: gl.constexpr = x_desc.dtype
    N = y_desc.shape[1]
    n_n = gl.cdiv(N, BLOCK_N)
    off_m = (gl.program_id(0) // n_n) * BLOCK_M
    off_n = (gl.program_id(0) % n_n) * BLOCK_N
    half = K // 2
    steps = half // BLOCK_K
    # at least one step (the launcher's checks): with no path around the loop, no zeroed accumulator
    # is placed between the loop's wgmma and the last wait, where ptxas would serialize every wgmma
    gl.assume(steps > 0)

    x_lo = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, BLOCK_K], x_desc.layout)
    x_hi = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, BLOCK_K], x_desc.layout)
    w_ring = gl.allocate_shared_memory(w_desc.dtype, [STAGES, BLOCK_N, BLOCK_K], w_desc.layout)
    deq_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, BLOCK_K], dtype)
    lo_tile = gl.allocate_shared_memory(dtype, [2, BLOCK_N, BLOCK_K], deq_layout)
    hi_tile = gl.allocate_shared_memory(dtype, [2, BLOCK_N, BLOCK_K], deq_layout)
    landed = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(landed.index(s), count=1)
    step_bytes: gl.constexpr = 2 * x_desc.block_type.nbytes + w_desc.block_type.nbytes
    for s in gl.static_range(STAGES - 1):
        mbarrier.expect(landed.index(s), step_bytes)
        tma.async_copy_global_to_shared(x_desc, [off_m, s * BLOCK_K], landed.index(s), x_lo.index(s))
        tma.async_copy_global_to_shared(x_desc, [off_m, half + s * BLOCK_K], landed.index(s), x_hi.index(s))
        tma.async_copy_global_to_shared(w_desc, [off_n, s * BLOCK_K], landed.index(s), w_ring.index(s))

    # the bytes in registers: 16 a thread along a row, rows over the threads and warps
    blocked: gl.constexpr = gl.BlockedLayout([1, 16], [32 * 16 // BLOCK_K, BLOCK_K // 16], [num_warps, 1], [1, 0])
    rows = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, blocked))
    s_row = s_ptr + gl.where(rows < N, rows, 0) * stride_sn
    acc = gl.zeros((BLOCK_M, BLOCK_N), dtype=gl.float32, layout=mma_layout(BLOCK_M, BLOCK_N, num_warps))
    # one scale a row and K half a step (a step lies in one group), loaded a step ahead
    s_lo_next = gl.load(s_row)
    s_hi_next = gl.load(s_row + half // GROUP)
    for i in range(steps):
        cur = i % STAGES
        buf = i % 2
        s_lo = s_lo_next.to(dtype)
        s_hi = s_hi_next.to(dtype)
        k1 = gl.minimum(i + 1, steps - 1) * BLOCK_K
        s_lo_next = gl.load(s_row + k1 // GROUP)
        s_hi_next = gl.load(s_row + (half + k1) // GROUP)
        mbarrier.wait(landed.index(cur), phase=(i // STAGES) & 1)
        if (not TIMING_ONLY) or i < 2:
            b = w_ring.index(cur).load(blocked)
            lo_tile.index(buf).store(_nibble(b, 0, dtype) * s_lo[:, None])
            hi_tile.index(buf).store(_nibble(b, 4, dtype) * s_hi[:, None])
        fence_async_shared()
        _cta_barrier()  # both warpgroups' stores are in before either's wgmma reads the tiles
        acc = warpgroup_mma(x_lo.index(cur), lo_tile.index(buf).permute((1, 0)), acc, is_async=True)
        acc = warpgroup_mma(x_hi.index(cur), hi_tile.index(buf).permute((1, 0)), acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=2, deps=(acc,))  # step i-1's two are done
        _cta_barrier()  # ... in both warpgroups: its stage and its tiles may be written again
        nxt = i + STAGES - 1
        if nxt < steps:
            t = nxt % STAGES
            mbarrier.expect(landed.index(t), step_bytes)
            tma.async_copy_global_to_shared(x_desc, [off_m, nxt * BLOCK_K], landed.index(t), x_lo.index(t))
            tma.async_copy_global_to_shared(x_desc, [off_m, half + nxt * BLOCK_K], landed.index(t), x_hi.index(t))
            tma.async_copy_global_to_shared(w_desc, [off_n, nxt * BLOCK_K], landed.index(t), w_ring.index(t))
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
    for s in gl.static_range(STAGES):
        mbarrier.invalidate(landed.index(s))

    store_tile(acc, y_desc, off_m, off_n)


def descriptors(x, packed, y, config=CONFIG):
    """Gluon tensor descriptors of x (M, K), the packed weight as int8 (N, K/2) and y (M, N). No checks: CPU
    tensors give descriptors a compile can read."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
    w = packed.view(torch.int8)

    def desc(t, block, dt):
        return TensorDescriptor(t, list(t.shape), list(t.stride()), block, shared_layout(tuple(block), dt))
    dt = GL_DTYPES[x.dtype]
    return desc(x, [bm, bk], dt), desc(w, [bn, bk], gl.int8), desc(y, [bm, bn], dt)


def matmul(x, packed, scales, group_size=128, config=CONFIG, timing_only=False):
    """``x @ dequantize(packed, scales, group_size).T`` as ``solutions.int4_matmul.matmul``; x 2-D or more,
    its rows flattened. ValueError for what the lesson's checks refuse and for a K or group size the tile
    cannot step through (K/2 and group_size multiples of ``BLOCK_K``); RuntimeError off Hopper.
    ``timing_only`` (probes): the kernel dequantizes its first two steps only, so its values are wrong and its
    time is the loop's without the dequantization."""
    N, K, group_size = lesson.check_args(x, packed, scales, group_size)
    bk = config["BLOCK_K"]
    if (K // 2) % bk or group_size % bk:
        raise ValueError(f"K = {K} and group_size = {group_size}: this kernel steps {bk} bytes of each weight row at "
                         f"a time, so K/2 and group_size must be multiples of {bk}")
    check_device(x, "x")
    x2 = x.reshape(-1, K).contiguous()
    y = torch.empty((x2.shape[0], N), dtype=x.dtype, device=x.device)
    scales = scales.contiguous()
    tiles = triton.cdiv(x2.shape[0], config["BLOCK_M"]) * triton.cdiv(N, config["BLOCK_N"])
    int4_wgmma_kernel[(tiles,)](*descriptors(x2, packed.contiguous(), y, config), scales, scales.stride(0), K,
                                GROUP=group_size, STAGES=config["STAGES"], num_warps=config["num_warps"],
                                TIMING_ONLY=timing_only)
    return y.reshape(*x.shape[:-1], N)
