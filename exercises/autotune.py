# Exercise generated from solutions/autotune.py by `make exercises`. Fill in the parts marked TODO.
# Your edits are safe: the generator never overwrites a file you have changed.
# Check your work: `tkcourse check autotune` in a shell, or tkcourse.check.run("autotune") in a notebook.
"""Lesson 04: autotuning the matmul: a config space, and pruning it before anything compiles.

Every config in a space costs a compile (about a second) and a benchmark, so drop the ones that
cannot win before paying for them. A config's shared memory, for a pipelined matmul that keeps
``num_stages`` tiles of A and of B in flight, is about
``(BLOCK_M * BLOCK_K + BLOCK_K * BLOCK_N) * dtype_bytes * num_stages`` bytes: over the GPU's limit
(227 KiB a block on an H100/H200) the kernel fails to launch with ``OutOfResources``. A tile much
larger than the problem (BLOCK_M = 256 when M = 16) only computes masked-off zeros.

Config keys: BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M (constexprs of the kernel) and num_warps,
num_stages (launch options).
"""

import itertools

import triton

from exercises._checks import integer

CONSTEXPRS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")  # kernel arguments; the rest are launch options
_SIZED = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_stages")  # the keys the shared memory estimate reads


def _check_config(config, where: str = "config") -> None:
    """TypeError/ValueError naming the key when ``config`` lacks a key the estimates read, or holds a non-int."""
    if not isinstance(config, dict):
        raise TypeError(f"{where} must be a dict with keys {', '.join(_SIZED)}, got {type(config).__name__} {config!r}")
    missing = [k for k in _SIZED if k not in config]
    if missing:
        raise ValueError(f"{where} lacks {', '.join(missing)} (it has {', '.join(map(str, config))})")
    for k in _SIZED:
        integer(f"{where}[{k!r}]", config[k], 1)


def config_space() -> list[dict]:
    """A matmul config space of at least 60 configs (dicts with the six keys above)."""
    # TODO: your code here
    # Build a list of dicts, one per combination (itertools.product), with keys
    # BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages; at least 60 of them.
    # Include a small BLOCK_M (16) for skinny problems and tiles up to 256 for big ones.
    return []


def next_pow2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    n = integer("n", n, -(1 << 62))  # 2.5 is refused: int(2.5) would round it down
    return 1 << max(0, int(n) - 1).bit_length()


def shared_memory_bytes(config: dict, dtype_bytes: int = 2) -> int:
    """Estimated shared memory of one config: ``num_stages`` tiles of A and of B."""
    _check_config(config)
    dtype_bytes = integer("dtype_bytes", dtype_bytes, 1, 8)
    # TODO: your code here
    # (BLOCK_M * BLOCK_K + BLOCK_K * BLOCK_N) elements, dtype_bytes each, num_stages copies
    return 0


def prune(configs: list[dict], M: int, N: int, K: int, dtype_bytes: int = 2,
          smem_limit: int = 227 * 1024) -> list[dict]:
    """The configs worth compiling for an M x K by K x N matmul, in their original order.

    Drops a config whose shared memory (``shared_memory_bytes``) exceeds ``smem_limit``, and one
    whose tile is absurdly larger than the problem: BLOCK_M > max(16, next_pow2(M)), and the same
    for BLOCK_N against N and BLOCK_K against K (16: ``tl.dot``'s K side needs 16, and the course keeps M and N
    there too: Triton would pad them).
    """
    M, N, K = (integer(name, v, 1) for name, v in (("M", M), ("N", N), ("K", K)))
    dtype_bytes = integer("dtype_bytes", dtype_bytes, 1, 8)
    smem_limit = integer("smem_limit", smem_limit, 1)
    if isinstance(configs, dict) or not hasattr(configs, "__iter__"):
        raise TypeError(f"configs must be a list of config dicts, got {type(configs).__name__}")
    configs = list(configs)
    for i, c in enumerate(configs):
        _check_config(c, f"configs[{i}]")
    # TODO: your code here
    # Keep a config only if both hold:
    #   its shared memory (your shared_memory_bytes) fits in smem_limit
    #   no tile side is larger than the problem needs: each of BLOCK_M, BLOCK_N, BLOCK_K at most its
    #   dimension rounded up to a power of two (next_pow2), or at most 16 where that is smaller (16 always fits)
    # Return the kept configs in their original order.
    return list(configs)


# ------------------------------------------------------------------------------------------
# The same rules for @triton.autotune, which works with triton.Config objects.
# ------------------------------------------------------------------------------------------


def to_triton_configs(configs: list[dict]) -> list:
    """``triton.Config`` objects for ``@triton.autotune`` from config dicts."""
    return [triton.Config({k: c[k] for k in CONSTEXPRS if k in c}, num_warps=c["num_warps"],
                          num_stages=c["num_stages"]) for c in configs]


def _as_dict(cfg) -> dict:
    return {**cfg.kwargs, "num_warps": cfg.num_warps, "num_stages": cfg.num_stages}


def early_config_prune(configs, named_args, **kwargs):
    """For ``@triton.autotune(..., prune_configs_by={"early_config_prune": early_config_prune})``.

    Triton calls it with the ``triton.Config`` list and the kernel's arguments by name; it needs
    arguments named ``M``, ``N`` and ``K``, and takes the element size from the first tensor.
    Keeps at least one config (the one with the least shared memory) so the autotuner always has
    something to run.
    """
    try:
        M, N, K = (int(named_args[k]) for k in ("M", "N", "K"))
    except KeyError as e:
        raise KeyError(f"early_config_prune needs kernel arguments named M, N and K; got {sorted(named_args)}") from e
    dtype_bytes = next((v.element_size() for v in named_args.values() if hasattr(v, "element_size")), 2)
    dicts = [_as_dict(c) for c in configs]
    keep = prune(dicts, M, N, K, dtype_bytes=dtype_bytes, smem_limit=kwargs.get("smem_limit", 227 * 1024))
    kept = [c for c, d in zip(configs, dicts) if d in keep]
    if not kept:
        kept = [min(configs, key=lambda c: shared_memory_bytes(_as_dict(c), dtype_bytes))]
    return kept
