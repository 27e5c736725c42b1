# Exercise generated from solutions/hopper.py by `make exercises`. Fill in the parts marked TODO.
# Your edits are safe: the generator never overwrites a file you have changed.
# Check your work: `tkcourse check hopper` in a shell, or tkcourse.check.run("hopper") in a notebook.
"""Lesson 12: a persistent matmul ``C = A @ B`` whose tiles the TMA unit loads and stores.

Lesson 03 launched one program per (BLOCK_M, BLOCK_N) tile of C. Here the grid is as large as the GPU
(one program per SM, ``num_programs``) and each program walks tiles: program ``p`` takes tiles ``p``,
``p + P``, ``p + 2P``, ... of the grouped order (lesson 03) until none are left. What that buys on a
Hopper GPU:

* no launch of a program per tile: the prologue (filling the pipeline) and the epilogue (storing C)
  of one tile can overlap the next tile's loads in the same program, and the compiler's warp
  specialization (``WARP_SPECIALIZE``: a producer warp issuing loads, consumer warpgroups doing the
  MMAs, Triton's ``tl.range(..., warp_specialize=True)``) is meant to keep the tensor cores fed across
  tiles (on the H200 it has not yet paid here: ``WS_CONFIG`` ran slower than ``CONFIG``);
* the tiles a wave of programs works on at one time are neighbours in the grouped order, so they
  share their A and B strips in L2.

The loads and the store go through tensor descriptors (``triton.tools.tensor_descriptor``): the
descriptor names the whole matrix, its strides and the block, and ``desc.load([row, col])`` asks the
TMA (tensor memory accelerator) for one block at that element offset. Rows and columns past the
matrix read as zeros and are not written on a store, so the kernel has no masks at all. What the TMA
asks in return: the innermost stride is 1 and the other strides and the base are 16-byte aligned;
``matmul`` copies an input that is not so into one that is.

FLOPs ``2 * M * N * K``; bytes at least ``(M*K + K*N + M*N) * element_size``. Products are summed in
fp32, C is returned in the inputs' dtype (fp32 on a GPU: TF32 tensor cores, as lesson 03).

Further reading: Triton's tutorial 09 (persistent matmul, descriptors and warp specialization);
NVIDIA's CUTLASS "persistent" and "ping-pong" kernel schedules for Hopper.
"""

import torch
import triton
import triton.language as tl

from tkcourse.mode import INTERPRET

from exercises._checks import ConfigSpec, boolean, integer, power_of_two, validate
from exercises._occupancy import sm_count


@triton.jit
def grouped_tile(tile, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """(pid_m, pid_n) of C's ``tile`` in lesson 03's grouped order: GROUP_M tile rows at a time, column by
    column, so tiles next to each other in the order share A's rows or B's columns."""
    tiles_per_group = GROUP_M * num_pid_n
    first_pid_m = (tile // tiles_per_group) * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)  # the last group may be shorter
    pid_m = first_pid_m + (tile % tiles_per_group) % group_size_m
    pid_n = (tile % tiles_per_group) // group_size_m
    return pid_m, pid_n


@triton.jit
def persistent_matmul_kernel(
    a_desc,  # tensor descriptor of A (M, K), blocks of (BLOCK_M, BLOCK_K)
    b_desc,  # tensor descriptor of B (K, N), blocks of (BLOCK_K, BLOCK_N)
    c_desc,  # tensor descriptor of C (M, N), blocks of (BLOCK_M, BLOCK_N)
    M, N, K,  # problem size
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,  # C's tile and the K step
    GROUP_M: tl.constexpr,  # tile rows per group in the grouped order (``grouped_tile``)
    NUM_PROGRAMS: tl.constexpr,  # the grid: how many programs share the tiles
    WARP_SPECIALIZE: tl.constexpr,  # let the compiler split the tile loop into producer and consumers
):
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    k_steps = tl.cdiv(K, BLOCK_K)
    # TODO: your code here
    # 1. the tile loop: for tile in tl.range(start, stop, step, warp_specialize=WARP_SPECIALIZE), where
    #    this program starts at its own id and steps over the other programs' tiles, until num_tiles
    # 2. pid_m, pid_n = grouped_tile(tile, num_pid_m, num_pid_n, GROUP_M)
    # 3. the K loop of lesson 03, with no pointers and no masks: an fp32 accumulator for this tile,
    #    a = a_desc.load([row, col]) and b = b_desc.load([row, col]) (offsets in elements), tl.dot
    # 4. c_desc.store([row, col], acc in C's dtype): c_desc.dtype
    pass


#: Keys of a launch config; ``matmul(a, b, config=...)`` takes these (``WARP_SPECIALIZE`` may be left out).
CONFIG_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages")

#: On a GPU: 128x256 tiles of C in K steps of 64, two consumer warpgroups (8 warps), three stages.
CONFIG = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3, WARP_SPECIALIZE=False)
#: The compiler's warp specialization (a producer warp feeds the consumers), with tiles and stages of its own:
#: 128x128 tiles of C (half of CONFIG's BLOCK_N) and four stages.
WS_CONFIG = dict(CONFIG, BLOCK_N=128, num_stages=4, WARP_SPECIALIZE=True)
#: fp32 inputs (TF32 tensor cores) on a GPU: blocks of 4-byte values, so half as many fit in shared memory.
FP32_CONFIG = dict(CONFIG, BLOCK_N=128, BLOCK_K=32)
#: In the interpreter: small tiles, so that each program walks several of them.
INTERPRETER_CONFIG = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=2, num_warps=4, num_stages=2,
                          WARP_SPECIALIZE=False)
#: Programs in the interpreter (a GPU gets one per SM): fewer than the tiles of any but the smallest C.
INTERPRETER_PROGRAMS = 3

_CONFIG = ConfigSpec({"BLOCK_M": (power_of_two, 16, 256), "BLOCK_N": (power_of_two, 16, 256),
                      "BLOCK_K": (power_of_two, 16, 256), "GROUP_M": (integer, 1, 256),
                      "num_warps": (power_of_two, 1, 32), "num_stages": (integer, 1, 8),
                      "WARP_SPECIALIZE": (boolean, 0, 1)}, required=CONFIG_KEYS,
                     defaults={"WARP_SPECIALIZE": False})


def tma_ready(t: torch.Tensor) -> torch.Tensor:
    """``t`` (2-D) as the TMA takes it: row-major, its row stride and base 16-byte aligned. ``t`` itself
    where it already is; else a copy whose rows are padded to 16 bytes (a view of the first columns)."""
    size = t.element_size()
    if t.stride(1) == 1 and (t.stride(0) * size) % 16 == 0 and t.data_ptr() % 16 == 0:
        return t
    out = empty_tma(t.shape[0], t.shape[1], t.dtype, t.device)
    out.copy_(t)
    return out


def empty_tma(rows: int, cols: int, dtype, device) -> torch.Tensor:
    """An uninitialised (rows, cols) tensor whose row stride is a multiple of 16 bytes."""
    per_16 = 16 // torch.empty((), dtype=dtype).element_size()
    padded = triton.cdiv(cols, per_16) * per_16
    return torch.empty((rows, padded), dtype=dtype, device=device)[:, :cols]


def descriptors(a, b, c, config: dict):
    """Host-made tensor descriptors of A, B and C with the blocks of ``config``."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
    return [TensorDescriptor(t, list(t.shape), [t.stride(0), 1], block)
            for t, block in ((a, [bm, bk]), (b, [bk, bn]), (c, [bm, bn]))]


def num_programs(tiles: int, device) -> int:
    """The persistent grid: one program per SM on a GPU (``INTERPRETER_PROGRAMS`` in the interpreter),
    never more than there are tiles."""
    return max(1, min(tiles, INTERPRETER_PROGRAMS if INTERPRET else sm_count(device.index)))


def matmul(a: torch.Tensor, b: torch.Tensor, config: dict | None = None, programs: int | None = None) -> torch.Tensor:
    """``a @ b`` for a (M, K) and b (K, N) of one dtype: an (M, N) tensor in that dtype (its rows may be
    padded to 16 bytes, as the TMA needs: a view of a slightly wider tensor).

    ``config``: the keys of ``CONFIG_KEYS`` and optionally ``WARP_SPECIALIZE``; ``None``: ``CONFIG`` on a
    GPU (``FP32_CONFIG`` for fp32), ``INTERPRETER_CONFIG`` in the interpreter. ``programs``: the grid
    (default ``num_programs``).
    """
    validate(a, b, names=["a", "b"], ndim=2)
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"inner dimensions differ: a is {tuple(a.shape)} and b is {tuple(b.shape)}; "
                         "a's columns must equal b's rows (transpose one of them?)")
    if config is None:
        config = INTERPRETER_CONFIG if INTERPRET else FP32_CONFIG if a.dtype == torch.float32 else CONFIG
    cfg = _CONFIG(config, "config")
    M, K = a.shape
    N = b.shape[1]
    tiles = triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"])
    grid = num_programs(tiles, a.device) if programs is None else integer("programs", programs, 1)
    a, b = tma_ready(a), tma_ready(b)
    c = empty_tma(M, N, a.dtype, a.device)
    meta = {k: cfg[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "WARP_SPECIALIZE")}
    persistent_matmul_kernel[(grid,)](*descriptors(a, b, c, cfg), M, N, K, **meta, NUM_PROGRAMS=grid,
                                      num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    return c


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """What ``matmul`` must return (computed in fp32, returned in the inputs' dtype)."""
    return (a.float() @ b.float()).to(a.dtype)
