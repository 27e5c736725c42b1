"""A Hopper matmul in Gluon (lesson 12): ``matmul(a, b)`` and ``matmul_ws(a, b)``, ``C = A @ B`` for fp16 or
bf16 A (M, K) and B (K, N), on an H100/H200 (sm_90) only.

Gluon is Triton's lower-level dialect: the kernel, not the compiler, picks each tensor's layout, allocates
shared memory, issues the TMA copies and waits on the barriers. Two rungs of a ladder:

- ``matmul_kernel`` (``matmul``): one program per (BLOCK_M, BLOCK_N) tile of C. TMA loads into a ring of
  shared-memory stages, each guarded by an mbarrier, and asynchronous warpgroup MMAs (``wgmma``) that
  overlap the next stages' loads (Triton's Gluon tutorials, "TMA" and "WGMMA", describe each instruction;
  the pipeline is the one of FlashAttention-3's producer, without its warp specialization, Shah et al.
  2024).
- ``matmul_ws_kernel`` (``matmul_ws``): persistent (one program an SM walking tiles) and warp-specialized
  (a producer warp issues the loads, the consumer warpgroups the wgmma, two barriers a stage between
  them), so the loads of the next tile are in flight while this tile's C goes out.

The pipelined schedule::

    prologue: issue the TMA loads of K steps 0 .. STAGES-2, each into its stage, arriving on its barrier
    step i:   wait for stage i % STAGES to land; issue the wgmma of step i (async); wait until at most
              one wgmma is in flight (so step i-1's stage is free); issue the loads of step i+STAGES-1
              into that stage
    epilogue: wait for the last wgmma; C's tile goes registers -> shared memory -> global by TMA

Public names: the kernels and their helpers (``mma_layout``, ``tile_offsets``, ``store_tile``), ``CONFIG`` and
``WS_CONFIG`` (their tiles), ``DTYPES``, ``descriptors(a, b, c, config)`` (the Gluon tensor descriptors a
launch passes; no checks, so that ``research/hopper/compile_check.py`` builds them from CPU tensors),
``check_inputs(a, b)`` (the launchers' checks) and ``reference(a, b)``; and what
``gluon_attention`` shares: ``GL_DTYPES``, ``shared_layout``, ``check_tensor``, ``check_device``.

The launchers check their inputs and say what is wrong: ValueError for a non-tensor, a tensor not on a
CUDA device, a dtype other than fp16/bf16, shapes that do not chain, rows not 16-byte aligned (TMA
reads rows whose stride is a multiple of 16 bytes: K and N multiples of 8); RuntimeError where the GPU is
not a Hopper one (wgmma is sm_90's) or kernels run in Triton's interpreter, which runs no Gluon. M, N
and K need not be multiples of the tiles: TMA reads zeros past the edges and clips the stores.
Non-contiguous inputs are copied first.

Importing this module needs no GPU (Triton 3.6 or 3.7): kernels compile on their first launch.
"""

from __future__ import annotations

import functools

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

from tkcourse.mode import INTERPRET

from .._checks import ConfigSpec, integer, power_of_two
from .._occupancy import device_properties

__all__ = ["matmul", "matmul_ws", "descriptors", "check_inputs", "reference", "CONFIG", "WS_CONFIG", "DTYPES",
           "matmul_kernel", "matmul_ws_kernel", "mma_layout", "tile_offsets", "store_tile", "GL_DTYPES", "shared_layout",
           "check_tensor", "check_device"]


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
def matmul_kernel(a_desc,  # TMA descriptor of A (M, K), blocks (BLOCK_M, BLOCK_K)
                  b_desc,  # TMA descriptor of B (K, N), blocks (BLOCK_K, BLOCK_N)
                  c_desc,  # TMA descriptor of C (M, N), blocks (BLOCK_M, BLOCK_N): the tile shape
                  K,  # the reduction length
                  STAGES: gl.constexpr,  # shared-memory stages in the ring (K steps in flight)
                  GROUP_M: gl.constexpr,  # tile rows that walk the columns together (L2 reuse of B)
                  num_warps: gl.constexpr):  # warps of the program: one or two warpgroups
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

    store_tile(acc, c_desc, off_m, off_n)


@gluon.jit
def store_tile(acc, c_desc, off_m, off_n):
    """A program's epilogue: the fp32 tile ``acc`` in C's dtype into a shared-memory tile, then out to C at
    ``(off_m, off_n)`` by TMA (which clips what lies past C's edges), waited for."""
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
def matmul_ws_kernel(a_desc,  # TMA descriptor of A (M, K), blocks (BLOCK_M, BLOCK_K)
                     b_desc,  # TMA descriptor of B (K, N), blocks (BLOCK_K, BLOCK_N)
                     c_desc,  # TMA descriptor of C (M, N), blocks (BLOCK_M, BLOCK_N)
                     K,  # the reduction length
                     STAGES: gl.constexpr,  # stages of the ring the producer fills and the consumers free
                     GROUP_M: gl.constexpr,  # tile rows that walk the columns together (L2 reuse of B)
                     num_warps: gl.constexpr):  # the consumers' warps (the producer is one more warp)
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
    # worker warps and their register budget, both given: Triton 3.6 requires the second list (3.7 makes
    # it optional)
    gl.warp_specialize([
        (_mma_partition, (a_ring, b_ring, ready, empty, c_desc, c_smem, K, GROUP_M, STAGES, num_warps)),
        (_load_partition, (a_desc, b_desc, a_ring, b_ring, ready, empty, K, GROUP_M, STAGES)),
    ], [1], [24])
    for s in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(s))
        mbarrier.invalidate(empty.index(s))


#: The pipelined kernel's tile: 128x256 of C, 64-deep K steps, 4 stages (192 kB of shared memory),
#: two warpgroups.
CONFIG = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, STAGES=4, GROUP_M=8, num_warps=8)
#: The warp-specialized kernel's: the same tile, 3 stages, as C's tile needs shared memory too (208 kB).
WS_CONFIG = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, STAGES=3, GROUP_M=8, num_warps=8)
#: The dtypes of A, B and C (C takes A's).
DTYPES = (torch.float16, torch.bfloat16)
#: Gluon's name of each torch dtype the kernels take.
GL_DTYPES = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16}

#: What a config takes: a tile of C at least a warpgroup's 64 rows, K steps of at least 16 (one wgmma's
#: depth), at least 2 stages (one landing while one is read), one or two warpgroups.
_CONFIG = ConfigSpec({"BLOCK_M": (power_of_two, 64, 256), "BLOCK_N": (power_of_two, 16, 256),
                      "BLOCK_K": (power_of_two, 16, 128), "STAGES": (integer, 2, 8), "GROUP_M": (integer, 1, 64),
                      "num_warps": (power_of_two, 4, 8)},
                     required=("BLOCK_M", "BLOCK_N", "BLOCK_K", "STAGES", "GROUP_M", "num_warps"))


@functools.lru_cache(maxsize=None)
def shared_layout(block: tuple, dtype):
    """The swizzled shared-memory layout a TMA copy and a wgmma both read, for a ``block`` of ``dtype``
    (Gluon's); kept, as every launch asks for the same few."""
    return gl.NVMMASharedLayout.get_default_for(list(block), dtype)


def descriptors(a, b, c, config=CONFIG):
    """Gluon tensor descriptors of A (M, K), B (K, N) and C (M, N), row-major, with the config's blocks.
    No checks (``check_inputs`` is the launchers'): CPU tensors give descriptors a compile can read."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    try:
        dt = GL_DTYPES[a.dtype]
    except KeyError:
        raise ValueError(f"A has dtype {a.dtype}; the Gluon matmul takes float16 or bfloat16") from None
    bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]

    def desc(t, block):
        return TensorDescriptor(t, list(t.shape), list(t.stride()), block, shared_layout(tuple(block), dt))
    return desc(a, [bm, bk]), desc(b, [bk, bn]), desc(c, [bm, bn])


def check_tensor(t, name: str, ndim: int) -> None:
    """ValueError unless ``t`` is a non-empty ``ndim``-D fp16/bf16 tensor (its device: ``check_device``)."""
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {tuple(t.shape)}")
    if t.numel() == 0:
        raise ValueError(f"{name} is empty (shape {tuple(t.shape)})")
    if t.dtype not in DTYPES:
        raise ValueError(f"{name} has dtype {t.dtype}; the Gluon kernels take float16 or bfloat16")


def check_device(t: torch.Tensor, name: str) -> None:
    """ValueError unless ``t`` is on a CUDA device; RuntimeError unless that GPU runs wgmma (sm_90) and
    kernels compile (not Triton's interpreter)."""
    if t.device.type != "cuda":
        raise ValueError(f"{name} is on {t.device}; the Gluon kernels run on a Hopper GPU (sm_90): "
                         "move it with .cuda()")
    if INTERPRET:
        raise RuntimeError("the Gluon kernels of lesson 12 do not run in Triton's interpreter "
                           "(TRITON_INTERPRET=1); they need a Hopper GPU, sm_90 (H100, H200)")
    props = device_properties(t.device.index if t.device.index is not None else torch.cuda.current_device())
    if props.major != 9:
        raise RuntimeError(f"{name} is on {props.name} (sm_{props.major}{props.minor}); the Gluon kernels of "
                           "lesson 12 use Hopper's wgmma and need an sm_90 GPU (H100, H200)")


def check_inputs(a, b) -> None:
    """What the launchers check before anything reaches Triton, the arguments first, then where they are:
    ValueError naming the tensor and the problem, or RuntimeError for a GPU (or a mode) that cannot run
    the kernels."""
    check_tensor(a, "a", 2)
    check_tensor(b, "b", 2)
    if b.dtype != a.dtype:
        raise ValueError(f"a has dtype {a.dtype} but b has {b.dtype}; cast one with .to(...)")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"a is {tuple(a.shape)} and b is {tuple(b.shape)}: a's columns (K) must equal b's rows")
    K, N = a.shape[1], b.shape[1]
    if K % 8 or N % 8:
        raise ValueError(f"K = {K} and N = {N}: TMA reads rows whose stride is a multiple of 16 bytes, so both "
                         "must be multiples of 8 (pad the matrices)")
    if b.device != a.device:
        raise ValueError(f"a is on {a.device} but b is on {b.device}; put both on one device")
    check_device(a, "a")


def _prepare(t: torch.Tensor, name: str) -> torch.Tensor:
    t = t.contiguous()
    if t.data_ptr() % 16:
        raise ValueError(f"{name} starts at an address that is not 16-byte aligned (a view at an odd offset); "
                         "TMA needs 16: pass .clone()")
    return t


def _launch(kernel, a, b, config, programs=None):
    cfg = _CONFIG(config, "config")
    check_inputs(a, b)
    a, b = _prepare(a, "a"), _prepare(b, "b")
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    tiles = triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"])
    meta = {k: v for k, v in cfg.items() if not k.startswith("BLOCK")}
    grid = (tiles if programs is None else min(tiles, programs),)
    kernel[grid](*descriptors(a, b, c, cfg), K, **meta)
    return c


def matmul(a, b, config=CONFIG):
    """``a @ b`` on the pipelined kernel (one program a tile of C): a (M, K), b (K, N), fp16 or bf16."""
    return _launch(matmul_kernel, a, b, config)


def matmul_ws(a, b, config=WS_CONFIG, programs=None):
    """``a @ b`` on the persistent, warp-specialized kernel: ``programs`` programs (default: the SM count),
    each walking tiles of C."""
    if programs is not None:
        programs = integer("programs", programs, 1)
    elif isinstance(a, torch.Tensor) and a.device.type == "cuda":
        programs = device_properties(a.device.index if a.device.index is not None
                                     else torch.cuda.current_device()).multi_processor_count
    return _launch(matmul_ws_kernel, a, b, config, programs)


def reference(a, b):
    """``a @ b`` in fp32, rounded to a's dtype: what the kernels compute (fp32 accumulation)."""
    return (a.float() @ b.float()).to(a.dtype)
