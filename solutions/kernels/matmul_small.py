"""Matmul (lesson 03) for problems too small to fill the GPU with the lesson's tiles (split-K), and
with TMA loads (``matmul_tma_kernel``) where host-made descriptors are cheap.

At 1024³ the lesson's 128x256 tiles make 32 programs for an H200's 132 SMs; 64x128 tiles make 128,
each walking the whole K = 1024. Split-K (as in CUTLASS's "serial split-K") also splits K over
``SPLIT_K`` programs per tile: each sums its share of K, writes its fp32 partial tile to a
workspace, and counts itself in on the tile's counter; the last one to arrive adds the partials
and writes C. Nobody waits, so any order the GPU runs the programs in is fine, and the last
program resets the counter to 0, so the counters are zeroed once, when the workspace is made.

On triton 3.6 the lean path takes ``matmul_tma_kernel`` for products up to ``TMA_MAX_MNK``: the
lesson's loop, its tiles fetched by the TMA unit from host-made descriptors, which a direct entry
encodes once an address (``lean._DirectDescriptors``). In CUDA graphs on the H200 it gave
0.93-0.99x cuBLAS at 1024³ and 2048³, where the pointer kernel's best tile gave 0.91x
(``research/launch/host_breakdown.py``, part T).

The workspace belongs to one (device, stream): kernels on one stream run in order, so two
matmuls never share a counter at the same time (a CUDA graph captured on its own stream gets its
own). ``SPLIT_K = 1`` is the lesson's kernel exactly (no workspace traffic).

Configs: up to 640³ and 1280³, one config each, the fastest of 18 (split-K among them) in CUDA
graphs on the H200 at 512³ and 1024³, fp16 and bf16 alike (``research/launch/tune_probe.py``):
timed by the autotuner, configs this close in time were picked by noise. Split-K did not win there
(the K loop at 1024 is short); it stays a candidate at 2048³, where the autotuner picks.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from tkcourse.mode import INTERPRET


@triton.jit
def _grouped_tile(tile, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """(row, column) of C's tile number ``tile`` in lesson 03's grouped order: GROUP_M tile rows at a
    time, column by column, so that programs running together share the blocks they read in L2."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pids_per_group = GROUP_M * num_pid_n
    first_pid_m = (tile // pids_per_group) * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    return first_pid_m + (tile % pids_per_group) % group_size_m, (tile % pids_per_group) // group_size_m


@triton.jit
def matmul_split_k_kernel(
    a_ptr, b_ptr, c_ptr,  # A (M, K), B (K, N), C (M, N), any strides
    ws_ptr,  # fp32 workspace: SPLIT_K partial (BLOCK_M, BLOCK_N) tiles per tile of C
    count_ptr,  # int32 per tile of C: programs of the tile done so far (0 between launches)
    M, N, K,  # problem size
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,  # elements between neighbours
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,  # tile of C, K step
    GROUP_M: tl.constexpr,  # tile rows per group in the grouped order (lesson 03)
    SPLIT_K: tl.constexpr,  # programs per tile of C, each over 1/SPLIT_K of the K steps
    PDL: tl.constexpr = False,  # launched with programmatic dependent launch (``lean.pdl_meta``)
):
    if PDL:
        gdc_wait()  # A may be the previous kernel's output, and C's memory what it still reads
    pid = tl.program_id(axis=0)
    tile = pid // SPLIT_K
    split = pid % SPLIT_K
    pid_m, pid_n = _grouped_tile(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)

    k_steps = tl.cdiv(K, BLOCK_K)
    per_split = tl.cdiv(k_steps, SPLIT_K)
    k_first = split * per_split
    k_last = tl.minimum(k_first + per_split, k_steps)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = k_first * BLOCK_K + tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(k_first, k_last):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (tl.arange(0, BLOCK_K)[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(tl.arange(0, BLOCK_K)[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    if PDL:
        gdc_launch_dependents()  # the loop is done: the next kernel may get onto the SMs
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    c_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    if SPLIT_K == 1:
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)
    else:
        cell = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
        ws_tile = ws_ptr + tile.to(tl.int64) * (SPLIT_K * BLOCK_M * BLOCK_N) + cell
        tl.store(ws_tile + split * (BLOCK_M * BLOCK_N), acc, cache_modifier=".cg")  # to L2, not L1
        tl.debug_barrier()  # every thread's partial is written before the count says so
        done = tl.atomic_add(count_ptr + tile, 1, sem="acq_rel")  # release our partial, see the others'
        if done == SPLIT_K - 1:  # the last program of the tile: add the partials, write C
            total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for s in tl.static_range(SPLIT_K):
                total += tl.load(ws_tile + s * (BLOCK_M * BLOCK_N), cache_modifier=".cg")
            tl.store(c_ptrs, total.to(c_ptr.dtype.element_ty), mask=c_mask)
            tl.atomic_xchg(count_ptr + tile, 0)  # ready for the next launch


@triton.jit
def matmul_tma_kernel(
    a_desc, b_desc, c_desc,  # tensor descriptors of A (M, K), B (K, N), C (M, N), each row-major
    M, N, K,  # problem size
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,  # tile of C, K step
    GROUP_M: tl.constexpr,  # tile rows per group in the grouped order (lesson 03)
    PDL: tl.constexpr = False,  # launched with programmatic dependent launch (see below)
):
    """The lesson's tile loop with its loads and store made by the TMA unit (Hopper's tensor memory
    accelerator): a descriptor names the whole matrix and the block, and one thread asks for a tile,
    which arrives in shared memory, out-of-range rows and columns read as zeros. No addresses and no
    masks in registers, so a small tile's few K steps spend their time in ``tl.dot``.

    ``PDL``: the kernel is launched with programmatic dependent launch (``launch_pdl=True``), so the
    GPU may start its programs while the kernel before it on the stream is still finishing. Each
    program then waits (``gdc_wait``) until that kernel is done and its writes are visible before it
    touches memory: A and B may be that kernel's output, and C's memory may be what it still reads.
    What overlaps is the launch itself: getting the programs onto the SMs. ``gdc_launch_dependents``
    lets the next kernel, if it is launched the same way, do the same with this one's tail."""
    pid_m, pid_n = _grouped_tile(tl.program_id(axis=0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if PDL:
        gdc_wait()
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])
        b = b_desc.load([k * BLOCK_K, pid_n * BLOCK_N])
        acc = tl.dot(a, b, acc)
    if PDL:
        gdc_launch_dependents()
    c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_desc.dtype))


def tma_ok(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether A and B suit ``matmul_tma_kernel``: row-major, 16-byte aligned bases and row strides."""
    size = a.element_size()
    return all(t.stride(1) == 1 and (t.stride(0) * size) % 16 == 0 and t.data_ptr() % 16 == 0 for t in (a, b))


def tma_descriptors(a, b, c, meta):
    """Host-made descriptors of A, B and C with the blocks of ``meta`` (a config's constexprs)."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    bm, bn, bk = meta["BLOCK_M"], meta["BLOCK_N"], meta["BLOCK_K"]
    return [TensorDescriptor(t, list(t.shape), [t.stride(0), 1], block)
            for t, block in ((a, [bm, bk]), (b, [bk, bn]), (c, [bm, bn]))]


def matmul_tma(a: torch.Tensor, b: torch.Tensor, config: dict) -> torch.Tensor:
    """``a @ b`` with ``matmul_tma_kernel`` and one config (``FIXED_CONFIG``'s keys, SPLIT_K left out),
    through ``kernel[grid]``; A and B must pass ``tma_ok``. For probes and tests."""
    if not tma_ok(a, b):
        raise ValueError("matmul_tma needs row-major A and B with 16-byte aligned bases and row strides")
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    cfg = {k: v for k, v in config.items() if k != "SPLIT_K"}
    descs = tma_descriptors(a, b, c, cfg)
    grid = (triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"]),)
    matmul_tma_kernel[grid](*descs, M, N, K, **cfg)
    return c


#: TMA tiles by problem size (M·N·K up to the bound), for the lean path where host-made descriptors
#: are cheap (``lean._DirectDescriptors``): the fastest in CUDA graphs on the H200
#: (``research/launch/host_breakdown.py``, part T). Up to 1280^3, 7 stages: all 16 K steps of a
#: 1024^3 tile but the last few are in flight at once (``research/launch/pdl_probe.py``, part M).
TMA_CONFIGS = {
    640**3: dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=128, GROUP_M=8, num_warps=4, num_stages=3),
    1280**3: dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=4, num_stages=7),
    2560**3: dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3),
}
TMA_MAX_MNK = max(TMA_CONFIGS)


def tma_config(mnk: int) -> dict:
    """The TMA config for a product of ``mnk`` multiply-adds (at most TMA_MAX_MNK)."""
    return dict(TMA_CONFIGS[min(bound for bound in TMA_CONFIGS if mnk <= bound)])


def _config(bm, bn, bk, split, warps, stages, group=8):
    return triton.Config(dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=group, SPLIT_K=split),
                         num_warps=warps, num_stages=stages)


#: Candidates by problem size (M·N·K up to the bound): the probe's best single configs at 512³,
#: 1024³ and 2048³ fp16/bf16, plus split-K versions that give 128-256 programs at 512³ and 1024³.
SMALL_CONFIGS = {
    640**3: [_config(64, 64, 128, 1, 4, 3)],
    1280**3: [_config(64, 128, 64, 1, 4, 5)],
    2560**3: [_config(128, 256, 64, 1, 8, 3), _config(128, 128, 64, 1, 4, 3), _config(128, 128, 64, 1, 8, 3),
              _config(128, 256, 64, 2, 8, 3)],
}
SMALL_MAX_MNK = max(SMALL_CONFIGS)
#: Below this M·N·K: one fixed config (tuning costs more than such a product ever runs).
TUNE_MIN_MNK = 256**3
FIXED_CONFIG = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=8, SPLIT_K=1, num_warps=4, num_stages=3)
#: Decode-sized products (up to ``DECODE_MAX_M`` rows, as a model's decode step makes them): tiles 16
#: rows tall, the least an MMA takes, where the configs above waste most of a 64- or 128-row tile on a
#: one-row A, and split-K planned so that the programs fill the SMs twice over (``decode_config``). Used
#: when ``matmul.MATMUL_DECODE`` is on; the tile is the best of 12 on average over the 8B model's
#: projections at 1 and 8 rows on the H200 (``research/llm/matmul_decode_probe.py``, log
#: ``research/llm/logs/matmul_decode_second.log``).
DECODE_MAX_M = 16
DECODE_CONFIG = dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, GROUP_M=1, num_warps=4, num_stages=3)
DECODE_MAX_SPLIT = 16


def decode_config(M: int, N: int, K: int, sms: int, config: dict | None = None) -> dict:
    """``DECODE_CONFIG`` (or ``config``) with ``SPLIT_K``: doubled while the programs number fewer than
    twice ``sms`` and each split keeps at least 4 K steps (a pipeline's depth), up to ``DECODE_MAX_SPLIT``."""
    cfg = dict(DECODE_CONFIG if config is None else config)
    tiles = triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"])
    steps = triton.cdiv(K, cfg["BLOCK_K"])
    split = 1
    while split < DECODE_MAX_SPLIT and tiles * split < 2 * sms and steps // (2 * split) >= 4:
        split *= 2
    cfg["SPLIT_K"] = split
    return cfg


#: The largest SPLIT_K and the smallest tile of any config: what the workspace is sized for (a decode
#: config's 16-row tiles split 16 ways need no more: 16 x 16 rows <= 2 x 256; a test checks it).
MAX_SPLIT_K = max(c.kwargs["SPLIT_K"] for cs in SMALL_CONFIGS.values() for c in cs)
MIN_TILE = 16


def _prune(configs, named_args, **kwargs):
    mnk = named_args["M"] * named_args["N"] * named_args["K"]
    for bound in sorted(SMALL_CONFIGS):
        if mnk <= bound:
            return list(SMALL_CONFIGS[bound])
    return list(SMALL_CONFIGS[SMALL_MAX_MNK])


_ALL = [c for cs in SMALL_CONFIGS.values() for c in cs]
matmul_small_autotuned = None
if not INTERPRET:
    matmul_small_autotuned = triton.autotune(configs=_ALL, key=["M", "N", "K"],
                                              prune_configs_by={"early_config_prune": _prune})(matmul_split_k_kernel)

_WORKSPACE: dict = {}  # (device, stream) -> (fp32 partials, int32 counters), grown as needed


def workspace(M: int, N: int, device, stream=0):
    """The (partials, counters) of this device and stream, big enough for any config at (M, N)."""
    tiles = triton.cdiv(M, MIN_TILE) * triton.cdiv(N, MIN_TILE)
    cells = MAX_SPLIT_K * (triton.cdiv(M, 256) * 256) * (triton.cdiv(N, 256) * 256)
    key = (device, stream)
    ws = _WORKSPACE.get(key)
    if ws is None or ws[0].numel() < cells or ws[1].numel() < tiles:
        ws = (torch.empty(cells, dtype=torch.float32, device=device), torch.zeros(tiles, dtype=torch.int32, device=device))
        _WORKSPACE[key] = ws
    return ws


def grid(meta):
    """Programs: a tile of C each, times SPLIT_K."""
    return (triton.cdiv(meta["M"], meta["BLOCK_M"]) * triton.cdiv(meta["N"], meta["BLOCK_N"]) * meta["SPLIT_K"],)


def matmul(a: torch.Tensor, b: torch.Tensor, config: dict) -> torch.Tensor:
    """``a @ b`` with this module's kernel and one given config (keys of ``FIXED_CONFIG``), through
    ``kernel[grid]``: what the tests run in the interpreter. Inputs as the lesson's (checked there)."""
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    ws, counts = workspace(M, N, a.device)
    meta = dict(config, M=M, N=N)
    matmul_split_k_kernel[grid(meta)](a, b, c, ws, counts, M, N, K, a.stride(0), a.stride(1), b.stride(0),
                                       b.stride(1), c.stride(0), c.stride(1), **config)
    return c
