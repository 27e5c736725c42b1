"""A Hopper matmul in Gluon, the first kernel of the Hopper lesson's ladder: TMA loads into a ring of
shared-memory stages, each guarded by an mbarrier, and asynchronous warpgroup MMAs (``wgmma``) that
overlap the next stages' loads. Not yet warp-specialized nor persistent (the next rungs).

    python research/hopper/gluon_matmul.py check   # on an H100/H200: C = A @ B against torch, then times it
                                                   # against cuBLAS at 4096^3 and 8192^3, fp16 and bf16
    python research/hopper/compile_check.py        # on any machine: compiles it for sm_90a (no GPU)

The schedule, one program per (BLOCK_M, BLOCK_N) tile of C (Triton's Gluon tutorials, "TMA" and
"WGMMA", describe each instruction; the pipeline is the one of FlashAttention-3's producer, without
its warp specialization, Shah et al. 2024). ``matmul_ws_kernel`` is the second rung: persistent (one
program an SM walking tiles) and warp-specialized (a producer warp issues the loads, the consumer
warpgroups the wgmma, two barriers a stage between them):

    prologue: issue the TMA loads of K steps 0 .. STAGES-2, each into its stage, arriving on its barrier
    step i:   wait for stage i % STAGES to land; issue the wgmma of step i (async); wait until at most
              one wgmma is in flight (so step i-1's stage is free); issue the loads of step i+STAGES-1
              into that stage
    epilogue: wait for the last wgmma; C's tile goes registers -> shared memory -> global by TMA
"""
from __future__ import annotations

import sys

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


@gluon.constexpr_function
def mma_layout(BLOCK_M, BLOCK_N, num_warps):
    """The accumulator's layout: warps stacked along M, 16 rows each, in warpgroups of 4 (a wgmma is 64
    rows); what remains along N; the instruction as wide in N as each warp's share of the tile (<= 256)."""
    along_m = max(4, min(num_warps, BLOCK_M // 16) // 4 * 4)
    along_n = num_warps // along_m
    n = min(256, BLOCK_N // along_n)
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[along_m, along_n], instr_shape=[16, n, 16])


@gluon.jit
def tile_offsets(tile, M, N, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, GROUP_M: gl.constexpr):
    """(row, column) of C's ``tile`` in the grouped order of lesson 03: GROUP_M tile rows share their B
    tiles in L2."""
    n_m = gl.cdiv(M, BLOCK_M)
    n_n = gl.cdiv(N, BLOCK_N)
    first_m = (tile // (GROUP_M * n_n)) * GROUP_M
    rows = gl.minimum(n_m - first_m, GROUP_M)
    in_group = tile % (GROUP_M * n_n)
    return (first_m + in_group % rows) * BLOCK_M, (in_group // rows) * BLOCK_N


@gluon.jit
def matmul_kernel(a_desc, b_desc, c_desc, K, STAGES: gl.constexpr, GROUP_M: gl.constexpr,
                  num_warps: gl.constexpr):
    BLOCK_M: gl.constexpr = c_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = c_desc.block_type.shape[1]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    M = c_desc.shape[0]
    N = c_desc.shape[1]
    off_m, off_n = tile_offsets(gl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)

    a_ring = gl.allocate_shared_memory(a_desc.dtype, [STAGES, BLOCK_M, BLOCK_K], a_desc.layout)
    b_ring = gl.allocate_shared_memory(b_desc.dtype, [STAGES, BLOCK_K, BLOCK_N], b_desc.layout)
    landed = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(landed.index(s), count=1)
    steps = gl.cdiv(K, BLOCK_K)
    step_bytes: gl.constexpr = a_desc.block_type.nbytes + b_desc.block_type.nbytes
    for s in gl.static_range(STAGES - 1):  # the prologue's loads (a load past K is TMA-masked to zeros)
        mbarrier.expect(landed.index(s), step_bytes)
        tma.async_copy_global_to_shared(a_desc, [off_m, s * BLOCK_K], landed.index(s), a_ring.index(s))
        tma.async_copy_global_to_shared(b_desc, [s * BLOCK_K, off_n], landed.index(s), b_ring.index(s))

    acc = gl.zeros((BLOCK_M, BLOCK_N), dtype=gl.float32, layout=mma_layout(BLOCK_M, BLOCK_N, num_warps))
    for i in range(steps):
        cur = i % STAGES
        mbarrier.wait(landed.index(cur), phase=(i // STAGES) & 1)
        acc = warpgroup_mma(a_ring.index(cur), b_ring.index(cur), acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc,))  # step i-1's wgmma is done: its stage is free
        nxt = i + STAGES - 1
        if nxt < steps:
            t = nxt % STAGES
            mbarrier.expect(landed.index(t), step_bytes)
            tma.async_copy_global_to_shared(a_desc, [off_m, nxt * BLOCK_K], landed.index(t), a_ring.index(t))
            tma.async_copy_global_to_shared(b_desc, [nxt * BLOCK_K, off_n], landed.index(t), b_ring.index(t))
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
    for s in gl.static_range(STAGES):
        mbarrier.invalidate(landed.index(s))

    c_smem = gl.allocate_shared_memory(c_desc.dtype, c_desc.block_type.shape, c_desc.layout)
    c_smem.store(acc.to(c_desc.dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(c_desc, [off_m, off_n], c_smem)
    tma.store_wait(pendings=0)


# ---- the second rung: persistent and warp-specialized (a producer warp, two consumer warpgroups) ----
@gluon.jit
def _load_partition(a_desc, b_desc, a_ring, b_ring, ready, empty, K, GROUP_M: gl.constexpr,
                    STAGES: gl.constexpr):
    """The producer, one warp: for each tile of this program, each K step, wait until the consumers have
    freed the next stage (``empty``), then issue its two TMA loads, which arrive on ``ready``."""
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[1]
    step_bytes: gl.constexpr = a_desc.block_type.nbytes + b_desc.block_type.nbytes
    M = a_desc.shape[0]
    N = b_desc.shape[1]
    n_tiles = gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N)
    steps = gl.cdiv(K, BLOCK_K)
    c = 0  # K steps issued so far by this program, over all its tiles: stage c % STAGES, use c // STAGES
    for tile in range(gl.program_id(0), n_tiles, gl.num_programs(0)):
        off_m, off_n = tile_offsets(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        for j in range(steps):
            st = c % STAGES
            # a stage's first use waits on parity 1, which a fresh barrier counts as completed
            mbarrier.wait(empty.index(st), ((c // STAGES) & 1) ^ 1)
            mbarrier.expect(ready.index(st), step_bytes)
            tma.async_copy_global_to_shared(a_desc, [off_m, j * BLOCK_K], ready.index(st), a_ring.index(st))
            tma.async_copy_global_to_shared(b_desc, [j * BLOCK_K, off_n], ready.index(st), b_ring.index(st))
            c += 1


@gluon.jit
def _mma_partition(a_ring, b_ring, ready, empty, c_desc, c_smem, K, GROUP_M: gl.constexpr, STAGES: gl.constexpr,
                   num_warps: gl.constexpr):
    """The consumers, the kernel's own warps: wgmma on each stage once it has landed, with one wgmma in
    flight; a stage is handed back to the producer once the wgmma that read it is done. Each tile's C
    goes out by TMA while the next tile's loads are already in flight."""
    BLOCK_M: gl.constexpr = c_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = c_desc.block_type.shape[1]
    BLOCK_K: gl.constexpr = a_ring.type.shape[2]
    M = c_desc.shape[0]
    N = c_desc.shape[1]
    n_tiles = gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N)
    steps = gl.cdiv(K, BLOCK_K)
    layout: gl.constexpr = mma_layout(BLOCK_M, BLOCK_N, num_warps)
    c = 0
    for tile in range(gl.program_id(0), n_tiles, gl.num_programs(0)):
        off_m, off_n = tile_offsets(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = gl.zeros((BLOCK_M, BLOCK_N), dtype=gl.float32, layout=layout)
        for j in range(steps):
            st = c % STAGES
            mbarrier.wait(ready.index(st), (c // STAGES) & 1)
            acc = warpgroup_mma(a_ring.index(st), b_ring.index(st), acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc,))
            # the wgmma of the step before is done: its stage goes back to the producer
            mbarrier.arrive(empty.index((c + STAGES - 1) % STAGES), count=1, pred=j > 0)
            c += 1
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        mbarrier.arrive(empty.index((c + STAGES - 1) % STAGES), count=1)
        tma.store_wait(pendings=0)  # the previous tile's C has left c_smem
        c_smem.store(acc.to(c_desc.dtype))
        fence_async_shared()
        tma.async_copy_shared_to_global(c_desc, [off_m, off_n], c_smem)
    tma.store_wait(pendings=0)


@gluon.jit
def matmul_ws_kernel(a_desc, b_desc, c_desc, K, STAGES: gl.constexpr, GROUP_M: gl.constexpr,
                     num_warps: gl.constexpr):
    """One program an SM, walking tiles ``program_id, program_id + programs, ...``; a producer warp and
    the consumer warpgroups share a ring of STAGES stages through two barriers a stage."""
    BLOCK_M: gl.constexpr = c_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = c_desc.block_type.shape[1]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    a_ring = gl.allocate_shared_memory(a_desc.dtype, [STAGES, BLOCK_M, BLOCK_K], a_desc.layout)
    b_ring = gl.allocate_shared_memory(b_desc.dtype, [STAGES, BLOCK_K, BLOCK_N], b_desc.layout)
    c_smem = gl.allocate_shared_memory(c_desc.dtype, c_desc.block_type.shape, c_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=1)
    gl.warp_specialize([
        (_mma_partition, (a_ring, b_ring, ready, empty, c_desc, c_smem, K, GROUP_M, STAGES, num_warps)),
        (_load_partition, (a_desc, b_desc, a_ring, b_ring, ready, empty, K, GROUP_M, STAGES)),
    ], [1], [24])
    for s in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(s))
        mbarrier.invalidate(empty.index(s))


CONFIG = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, STAGES=4, GROUP_M=8, num_warps=8)
WS_CONFIG = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, STAGES=3, GROUP_M=8, num_warps=8)  # 3 stages + C: 208 kB


def descriptors(a, b, c, cfg=CONFIG):
    """Gluon tensor descriptors of A (M, K), B (K, N) and C (M, N), row-major, with the config's blocks."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    dt = {"torch.float16": gl.float16, "torch.bfloat16": gl.bfloat16}[str(a.dtype)]
    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]

    def desc(t, block):
        return TensorDescriptor(t, list(t.shape), list(t.stride()), block,
                                gl.NVMMASharedLayout.get_default_for(block, dt))
    return desc(a, [bm, bk]), desc(b, [bk, bn]), desc(c, [bm, bn])


def matmul(a, b, cfg=CONFIG):
    import torch

    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    meta = {k: v for k, v in cfg.items() if not k.startswith("BLOCK")}
    grid = (triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"]),)
    matmul_kernel[grid](*descriptors(a, b, c, cfg), K, **meta)
    return c


def matmul_ws(a, b, cfg=WS_CONFIG, programs=None):
    """``a @ b`` on the persistent, warp-specialized kernel: ``programs`` programs (the SM count)."""
    import torch

    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    tiles = triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"])
    programs = programs or torch.cuda.get_device_properties(a.device).multi_processor_count
    meta = {k: v for k, v in cfg.items() if not k.startswith("BLOCK")}
    matmul_ws_kernel[(min(tiles, programs),)](*descriptors(a, b, c, cfg), K, **meta)
    return c


def check():
    import torch

    for dtype in (torch.float16, torch.bfloat16):
        for M, N, K in ((256, 512, 192), (1000, 1000, 1000), (4096, 4096, 4096), (8192, 8192, 8192)):
            a = torch.randn(M, K, device="cuda", dtype=dtype)
            b = torch.randn(K, N, device="cuda", dtype=dtype)
            ref = (a.float() @ b.float())
            tc = triton.testing.do_bench(lambda: a @ b) if M >= 4096 else None
            for name, fn in (("pipelined", matmul), ("persistent, warp-specialized", matmul_ws)):
                try:
                    c = fn(a, b)
                    err = ((c.float() - ref).abs().max() / ref.abs().max()).item()
                    line = f"{name:29s} {str(dtype)[6:]:9s} {M}x{N}x{K}: rel err {err:.1e} {'OK' if err < 1e-2 else 'WRONG'}"
                    if tc is not None:
                        t = triton.testing.do_bench(lambda: fn(a, b))
                        line += f"; {2 * M * N * K / t / 1e9:.0f} TFLOP/s, cuBLAS {2 * M * N * K / tc / 1e9:.0f}: {tc / t:.2f}x"
                except Exception as e:  # a rung that fails to build or run: say so, try the next
                    line = f"{name:29s} {str(dtype)[6:]:9s} {M}x{N}x{K}: {type(e).__name__}: {str(e)[:200]}"
                print(line, flush=True)


if __name__ == "__main__" and sys.argv[1:] == ["check"]:
    check()
