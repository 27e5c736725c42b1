"""L2 reuse in a tiled matmul: the program order the kernel computes and an LRU cache over its tile loads."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

__all__ = ["program_order", "matmul_tile_loads", "L2Result", "simulate_l2"]


def program_order(M_tiles: int, N_tiles: int, GROUP_M: int = 1) -> list[tuple[int, int]]:
    """``(pid_m, pid_n)`` of each program id, computed as the matmul kernel does (Triton tutorial 03).

    ``GROUP_M = 1`` is row-major order; larger groups walk ``GROUP_M`` rows of C tiles column by column,
    so programs launched together share A row-tiles and B column-tiles.
    """
    if M_tiles < 1 or N_tiles < 1 or GROUP_M < 1:
        raise ValueError("M_tiles, N_tiles and GROUP_M must be >= 1")
    order = []
    num_pid_in_group = GROUP_M * N_tiles
    for pid in range(M_tiles * N_tiles):
        group_id = pid // num_pid_in_group
        first_pid_m = group_id * GROUP_M
        group_size_m = min(M_tiles - first_pid_m, GROUP_M)
        pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
        pid_n = (pid % num_pid_in_group) // group_size_m
        order.append((pid_m, pid_n))
    return order


def matmul_tile_loads(M: int, N: int, K: int, BLOCK_M: int, BLOCK_N: int, BLOCK_K: int, GROUP_M: int = 1,
                      itemsize: int = 2, concurrent: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """The tile loads of a tiled matmul in launch order, as ``(keys, nbytes)`` arrays.

    Each program loads, per K step, its A row-tile ``(pid_m, k)`` then its B column-tile ``(k, pid_n)``.
    ``concurrent`` programs run together (a wave, e.g. one per SM) and step through K in lockstep, so their
    loads interleave. Keys: A tile ``(m, k)`` is ``m * K_tiles + k``; B tile ``(k, n)`` is
    ``M_tiles * K_tiles + k * N_tiles + n``. Partial tiles at the edges have fewer bytes.
    """
    cdiv = lambda a, b: -(-a // b)
    mt, nt, kt = cdiv(M, BLOCK_M), cdiv(N, BLOCK_N), cdiv(K, BLOCK_K)
    ext = lambda i, B, L: np.minimum(B, L - i * B)
    order = np.array(program_order(mt, nt, GROUP_M), dtype=np.int64)
    c = max(1, int(concurrent))
    waves = -(-len(order) // c)
    pad = np.full((waves * c - len(order), 2), -1, dtype=np.int64)  # the last wave may be partial
    order = np.concatenate([order, pad]).reshape(waves, 1, c, 2)
    pm, pn, ks = order[..., 0], order[..., 1], np.arange(kt, dtype=np.int64)[None, :, None]
    valid = np.broadcast_to(pm >= 0, (waves, kt, c))
    a_key, b_key = pm * kt + ks, mt * kt + ks * nt + pn
    a_size = ext(pm, BLOCK_M, M) * ext(ks, BLOCK_K, K) * itemsize
    b_size = ext(ks, BLOCK_K, K) * ext(pn, BLOCK_N, N) * itemsize
    keep = np.stack([valid, valid], axis=-1).reshape(-1)
    keys = np.stack(np.broadcast_arrays(a_key, b_key), axis=-1).reshape(-1)[keep]
    sizes = np.stack(np.broadcast_arrays(a_size, b_size), axis=-1).reshape(-1)[keep]
    return keys, sizes


@dataclass
class L2Result:
    """What one simulated launch asked of the cache and how much of it reached HBM."""

    cache_bytes: int
    GROUP_M: int
    hits: int
    misses: int
    requested_bytes: int  # bytes of all tile loads (what a kernel with no cache would read from HBM)
    hbm_bytes: int  # bytes of the loads that missed
    minimum_bytes: int  # A and B read once each

    @property
    def hit_rate(self) -> float:
        return self.hits / max(1, self.hits + self.misses)

    @property
    def excess(self) -> float:
        """HBM bytes over the minimum (1.0: every byte of A and B read exactly once)."""
        return self.hbm_bytes / max(1, self.minimum_bytes)


def simulate_l2(M: int, N: int, K: int, BLOCK_M: int = 128, BLOCK_N: int = 128, BLOCK_K: int = 64,
                GROUP_M: int = 1, cache_bytes: int = 50 * 2**20, itemsize: int = 2, concurrent: int = 1,
                loads=None) -> L2Result:
    """An LRU cache of ``cache_bytes`` over the matmul's A/B tile loads in launch order (C stores not counted).

    A deliberately simple model: whole tiles are the cache lines, one cache for the chip, no prefetch. The
    H200's L2 is 50 MB (in two partitions; this model has one), with 132 SMs (``concurrent=132`` at one program per SM).
    ``loads``: an explicit sequence of ``(key, bytes)`` instead of the matmul's (for worked examples).
    """
    if loads is None:
        keys, sizes = matmul_tile_loads(M, N, K, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, itemsize, concurrent)
    else:
        loads = list(loads)
        keys = [k for k, _ in loads]
        sizes = np.array([b for _, b in loads], dtype=np.int64)
    hits, requested, hbm = _lru(keys if isinstance(keys, list) else keys.tolist(), sizes, int(cache_bytes))
    misses = len(sizes) - hits
    return L2Result(cache_bytes, GROUP_M, hits, misses, requested, hbm, (M * K + K * N) * itemsize)


def _lru(keys: list, sizes: np.ndarray, cache_bytes: int) -> tuple[int, int, int]:
    """Hits, requested bytes and missed bytes of an LRU cache of ``cache_bytes`` over the loads."""
    cache: OrderedDict = OrderedDict()
    hits = hbm = 0
    requested = int(sizes.sum())
    if sizes.size and (sizes == sizes[0]).all():  # equal tiles: count-based LRU, the fast path
        size, cap = int(sizes[0]), int(cache_bytes // max(int(sizes[0]), 1))
        for key in keys:
            if key in cache:
                hits += 1
                cache.move_to_end(key)
            else:
                hbm += size
                if cap:
                    cache[key] = None
                    if len(cache) > cap:
                        cache.popitem(last=False)
        return hits, requested, hbm
    used = 0
    for key, nbytes in zip(keys, sizes.tolist()):
        if key in cache:
            hits += 1
            cache.move_to_end(key)
            continue
        hbm += nbytes
        if nbytes > cache_bytes:
            continue  # larger than the cache: streams through
        while used + nbytes > cache_bytes:
            _, b = cache.popitem(last=False)
            used -= b
        cache[key] = nbytes
        used += nbytes
    return hits, requested, hbm
