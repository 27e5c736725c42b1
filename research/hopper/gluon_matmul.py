"""A Hopper matmul in Gluon, the first kernel of the Hopper lesson's ladder: TMA loads into a ring of
shared-memory stages, each guarded by an mbarrier, and asynchronous warpgroup MMAs (``wgmma``) that
overlap the next stages' loads. Not yet warp-specialized nor persistent (the next rungs).

    python research/hopper/gluon_matmul.py check   # on an H100/H200: C = A @ B against torch, then times it
                                                   # against cuBLAS at 4096^3 and 8192^3, fp16 and bf16
    python research/hopper/compile_check.py        # on any machine: compiles it for sm_90a (no GPU)

The schedule, one program per (BLOCK_M, BLOCK_N) tile of C (Triton's Gluon tutorials, "TMA" and
"WGMMA", describe each instruction; the pipeline is the one of FlashAttention-3's producer, without
its warp specialization, Shah et al. 2024):

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
def matmul_kernel(a_desc, b_desc, c_desc, K, STAGES: gl.constexpr, GROUP_M: gl.constexpr,
                  num_warps: gl.constexpr):
    BLOCK_M: gl.constexpr = c_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = c_desc.block_type.shape[1]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    M = c_desc.shape[0]
    N = c_desc.shape[1]
    # grouped tile order (lesson 03): GROUP_M tile rows share their B tiles in L2
    pid = gl.program_id(0)
    n_m = gl.cdiv(M, BLOCK_M)
    n_n = gl.cdiv(N, BLOCK_N)
    group = pid // (GROUP_M * n_n)
    first_m = group * GROUP_M
    rows = gl.minimum(n_m - first_m, GROUP_M)
    off_m = (first_m + (pid % (GROUP_M * n_n)) % rows) * BLOCK_M
    off_n = ((pid % (GROUP_M * n_n)) // rows) * BLOCK_N

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


CONFIG = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, STAGES=4, GROUP_M=8, num_warps=8)


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


def check():
    import torch

    for dtype in (torch.float16, torch.bfloat16):
        for M, N, K in ((256, 512, 192), (1000, 1000, 1000), (4096, 4096, 4096), (8192, 8192, 8192)):
            a = torch.randn(M, K, device="cuda", dtype=dtype)
            b = torch.randn(K, N, device="cuda", dtype=dtype)
            c = matmul(a, b)
            ref = (a.float() @ b.float())
            err = ((c.float() - ref).abs().max() / ref.abs().max()).item()
            line = f"{str(dtype)[6:]:9s} {M}x{N}x{K}: rel err {err:.1e} {'OK' if err < 1e-2 else 'WRONG'}"
            if M >= 4096:
                t = triton.testing.do_bench(lambda: matmul(a, b))
                tc = triton.testing.do_bench(lambda: a @ b)
                line += f"; {2 * M * N * K / t / 1e9:.0f} TFLOP/s, cuBLAS {2 * M * N * K / tc / 1e9:.0f}: {tc / t:.2f}x"
            print(line, flush=True)


if __name__ == "__main__" and sys.argv[1:] == ["check"]:
    check()
