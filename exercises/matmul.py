# Exercise generated from solutions/matmul.py by `make exercises`. Fill in the parts marked TODO.
# Your edits are safe: the generator never overwrites a file you have changed.
# Check your work: `tkcourse check matmul` in a shell, or tkcourse.check.run("matmul") in a notebook.
"""Lesson 03: tiled matmul ``C = A @ B``, one (BLOCK_M, BLOCK_N) tile of C per program.

A is (M, K), B is (K, N), C is (M, N); any strides (a transposed view is read in place).
FLOPs: ``2 * M * N * K``. Traffic at least: read A and B once, write C once,
``(M*K + K*N + M*N) * element_size`` bytes; each program actually reads a (BLOCK_M, K) strip of A
and a (K, BLOCK_N) strip of B, and the grouped program order makes neighbours share them in L2.

Precision: products are summed in fp32, C is returned in the inputs' dtype. For fp32 inputs on a
GPU, ``tl.dot`` uses TF32 tensor cores by default (10-bit mantissa: ~1e-3 relative error, like
``torch.backends.cuda.matmul.allow_tf32 = True``); in the interpreter it is exact fp32. Graders pick
their tolerances by mode.

Used by the fast path (``solutions/kernels/matmul.py``, the same kernel behind a lean launch): ``matmul_autotuned``,
``check_config`` and ``DEFAULT_INTERPRETER_CONFIG``, and ``matmul`` for the calls it does not take.
"""

import torch
import triton
import triton.language as tl

from tkcourse.mode import INTERPRET

from exercises._checks import ConfigSpec, integer, power_of_two, validate


@triton.jit
def matmul_kernel(
    a_ptr,  # pointer to A[0, 0]
    b_ptr,  # pointer to B[0, 0]
    c_ptr,  # pointer to C[0, 0]
    M,  # rows of A and C
    N,  # columns of B and C
    K,  # columns of A, rows of B: the length of each dot product
    stride_am,  # elements between A[i, k] and A[i + 1, k]
    stride_ak,  # elements between A[i, k] and A[i, k + 1]
    stride_bk,  # elements between B[k, j] and B[k + 1, j]
    stride_bn,  # elements between B[k, j] and B[k, j + 1]
    stride_cm,  # elements between C[i, j] and C[i + 1, j]
    stride_cn,  # elements between C[i, j] and C[i, j + 1]
    BLOCK_M: tl.constexpr,  # rows of the C tile a program computes
    BLOCK_N: tl.constexpr,  # columns of the C tile a program computes
    BLOCK_K: tl.constexpr,  # width of the A and B slices multiplied per loop step
    GROUP_M: tl.constexpr,  # tile rows per group in the grouped program order
):
    # TODO: your code here
    # 1. grouped order: from pid, num_pid_m = tl.cdiv(M, BLOCK_M), num_pid_n = tl.cdiv(N, BLOCK_N)
    #    and GROUP_M work out this program's tile (pid_m, pid_n); the last group may be shorter
    # 2. offs_m, offs_n: the tile's rows and columns; offs_k = tl.arange(0, BLOCK_K)
    # 3. pointers to the first (BLOCK_M, BLOCK_K) slice of A and (BLOCK_K, BLOCK_N) slice of B (use the strides)
    # 4. acc = fp32 zeros (BLOCK_M, BLOCK_N); loop over tl.cdiv(K, BLOCK_K) slices:
    #    load both with masks on every edge (other=0.0), acc = tl.dot(a, b, acc), step the pointers along K
    # 5. store acc in C's dtype (c_ptr.dtype.element_ty), masked to rows < M and columns < N
    pass


#: Keys of a launch config; ``matmul(a, b, config=...)`` takes exactly these.
CONFIG_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages")

#: What the autotuner tries on a GPU: Triton tutorial 03's CUDA list plus larger Hopper tiles
#: (BLOCK_K=64, 8 warps = two warpgroups for wgmma). Configs whose pipeline does not fit in
#: shared memory for the dtype at hand are pruned before benchmarking (see ``shared_memory_bytes``).
CONFIGS = [
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3),
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=4),
    # the fastest config of the recorded H200 sweep at 4096^3 fp16 (tkcourse/data/sweeps/), added after it
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=32, GROUP_M=8, num_warps=8, num_stages=4),
    dict(BLOCK_M=256, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3),
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=4),
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=4, num_stages=4),
    dict(BLOCK_M=64, BLOCK_N=256, BLOCK_K=32, GROUP_M=8, num_warps=4, num_stages=4),
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=32, GROUP_M=8, num_warps=4, num_stages=4),
    dict(BLOCK_M=128, BLOCK_N=64, BLOCK_K=32, GROUP_M=8, num_warps=4, num_stages=4),
    dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=32, GROUP_M=8, num_warps=4, num_stages=4),
    dict(BLOCK_M=128, BLOCK_N=32, BLOCK_K=32, GROUP_M=8, num_warps=4, num_stages=4),
    dict(BLOCK_M=64, BLOCK_N=32, BLOCK_K=32, GROUP_M=8, num_warps=2, num_stages=5),
    dict(BLOCK_M=32, BLOCK_N=64, BLOCK_K=32, GROUP_M=8, num_warps=2, num_stages=5),
]

#: The one config used in the interpreter (no autotuning there): small tiles keep it quick.
DEFAULT_INTERPRETER_CONFIG = dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUP_M=4, num_warps=4, num_stages=2)

#: Shared memory one SM of an H100/H200 gives one program (227 KiB).
_H100_SHARED_MEMORY = 232_448


def shared_memory_bytes(config: dict, dtype_bytes: int) -> int:
    """Estimated shared memory of a config: num_stages buffers of an A and a B slice.

    ``(BLOCK_M*BLOCK_K + BLOCK_K*BLOCK_N) * dtype_bytes * num_stages``. The compiler's real figure
    differs a little (it may keep one stage fewer, and adds scratch for the epilogue), so treat it
    as a filter for configs that cannot fit, not an exact count.
    """
    c = config
    return (c["BLOCK_M"] * c["BLOCK_K"] + c["BLOCK_K"] * c["BLOCK_N"]) * dtype_bytes * c["num_stages"]


def _shared_memory_limit() -> int:
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return getattr(props, "shared_memory_per_block_optin", _H100_SHARED_MEMORY)


def _prune(configs, named_args, **kwargs):
    """Drop configs whose pipeline cannot fit in shared memory for this dtype (autotuner hook)."""
    dtype_bytes = named_args["a_ptr"].element_size()
    limit = _shared_memory_limit()
    fits = [c for c in configs if shared_memory_bytes({**c.kwargs, "num_stages": c.num_stages}, dtype_bytes) <= limit]
    return fits or configs[-1:]


def _triton_config(c: dict) -> triton.Config:
    meta = {k: c[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")}
    return triton.Config(meta, num_warps=c["num_warps"], num_stages=c["num_stages"])


# The same kernel, autotuned over CONFIGS on a GPU (the interpreter cannot time kernels, so it
# never calls this one). The best config is remembered per (M, N, K) and dtype.
matmul_autotuned = triton.autotune(
    configs=[_triton_config(c) for c in CONFIGS],
    key=["M", "N", "K"],
    prune_configs_by={"early_config_prune": _prune},
)(matmul_kernel)


#: Smaller problems take SMALL_CONFIG on a GPU instead of autotuning: tuning compiles and times
#: every config for each new (M, N, K), which costs more than a small product ever runs.
AUTOTUNE_MIN_MNK = 256**3
SMALL_CONFIG = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=8, num_warps=4, num_stages=3)


#: What each key of a config takes: tiles of 16 to 512 (``tl.dot`` needs a K side of 16, and the course keeps M
#: and N there too (Triton would pad them); a power of two for
#: ``tl.arange``), groups of 1 to 256 tile rows, 1 to 32 warps (1024 threads), 1 to 8
#: pipeline stages. A tile that does not fit in shared memory still fails at launch, with Triton's error.
_CONFIG = ConfigSpec({"BLOCK_M": (power_of_two, 16, 512), "BLOCK_N": (power_of_two, 16, 512),
                      "BLOCK_K": (power_of_two, 16, 512), "GROUP_M": (integer, 1, 256),
                      "num_warps": (power_of_two, 1, 32), "num_stages": (integer, 1, 8)}, required=CONFIG_KEYS)


def check_config(config: dict) -> dict:
    """``config`` checked (TypeError/ValueError naming the key), as a new dict of plain ints."""
    return _CONFIG(config, "config")


def matmul(a: torch.Tensor, b: torch.Tensor, config: dict | None = None) -> torch.Tensor:
    """``a @ b`` for a (M, K) and b (K, N) of one dtype; returns a new contiguous (M, N) tensor.

    ``config``: a dict with the keys of ``CONFIG_KEYS``, launched exactly as given (a failing
    config raises Triton's error, e.g. out of shared memory). ``None``: autotuned over ``CONFIGS``
    on a GPU, ``DEFAULT_INTERPRETER_CONFIG`` in the interpreter.
    """
    validate(a, b, names=["a", "b"], ndim=2)
    if a.shape[1] != b.shape[0]:
        raise ValueError(
            f"inner dimensions differ: a is {tuple(a.shape)} and b is {tuple(b.shape)}; "
            "a's columns must equal b's rows (transpose one of them?)"
        )
    for name, t in (("a", a), ("b", b)):
        if sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride())) >= 2**31:
            raise ValueError(f"{name} spans 2**31 elements or more; this kernel's offsets are 32-bit")
    if config is not None:
        config = check_config(config)
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    args = (a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    # TODO: your code here
    # grid(meta): a 1-tuple, the number of (BLOCK_M, BLOCK_N) tiles that cover C (triton.cdiv twice)
    grid = None

    if config is None and not INTERPRET and M * N * K >= AUTOTUNE_MIN_MNK:
        matmul_autotuned[grid](*args)
    else:
        matmul_kernel[grid](*args, **(config or (DEFAULT_INTERPRETER_CONFIG if INTERPRET else SMALL_CONFIG)))
    return c


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """What ``matmul`` must return (computed in fp32, returned in the inputs' dtype)."""
    return (a.float() @ b.float()).to(a.dtype)
