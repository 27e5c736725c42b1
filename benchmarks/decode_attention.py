"""Benchmark cases of lesson 09, part 2: decode attention over a paged KV cache, against a copy and SDPA.

fp16, D = 128, Hq = 32, Hkv = 8 (G = 4), page_size 16 and 64, 256k cached tokens in all (``TOKENS``):
B 32 at 8192, B 8 at 32768, and ``mixed``: 32 sequences whose lengths run evenly from 1024 to
15360 (``mixed_lengths``), in one batch. Pages are shuffled in the pool (``paged_cache``), so the
block table is a real permutation. Then, at page_size 16 only, the shapes where the batch alone leaves
SMs idle or programs short (``SPREAD_SHAPES``): one sequence of 4096 and of 32768 tokens, and 64
sequences of 1024.

Bytes of a row: the K and V bytes read (2 · L · Hkv · D · 2 for L cached tokens), plus q and out.
Providers: ``triton`` (``solutions.kernels.decode_attention``: the tuned plan behind a lean launch),
``copy`` (a device copy of the K cache: read + written = the KV bytes; replayed from a CUDA graph, by a
copy kernel: ``tkcourse.bench.copy_case``), and ``sdpa``:
``F.scaled_dot_product_attention(q[:, :, None], k, v, enable_gqa=True)`` on the same cache laid out
contiguously (B, Hkv, N, D). SDPA has no lengths argument, so it runs at the uniform shapes only; at
``mixed`` the copy is the peer.
"""

from __future__ import annotations

import torch

from tkcourse.bench import Case, copy_case

TOKENS, HQ, HKV, D = 262144, 32, 8, 128
PAGE_SIZES = (16, 64)


def mixed_lengths(B: int = 32, lo: int = 1024, hi: int = 15360) -> list[int]:
    """B lengths evenly spaced from lo to hi (for the defaults: 256k tokens in all)."""
    return [lo + (hi - lo) * i // (B - 1) for i in range(B)]


SHAPES = {"B32-N8192": [8192] * 32, "B8-N32768": [32768] * 8, "mixed": mixed_lengths()}
SPREAD_SHAPES = {"B1-N4096": [4096], "B1-N32768": [32768], "B64-N1024": [1024] * 64}
SPREAD_PAGE_SIZE = 16


def paged_cache(lens, page_size, Hq=HQ, Hkv=HKV, D=D, dtype=torch.float16, device="cuda", seed=0):
    """(q, k_cache, v_cache, seq_lens, block_table) for sequences of ``lens`` tokens: exactly the
    pages they need, shuffled in the pool (a seeded permutation), so logical page p of a sequence
    lies anywhere."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    pages = [-(-n // page_size) for n in lens]
    max_pages, num_pages = max(pages), sum(pages)
    perm = torch.randperm(num_pages, generator=g).to(torch.int32)
    table = torch.zeros(len(lens), max_pages, dtype=torch.int32)
    start = 0
    for b, n in enumerate(pages):
        table[b, :n] = perm[start:start + n]
        start += n
    k = torch.randn(num_pages, page_size, Hkv, D, dtype=dtype, device=device)
    v = torch.randn(num_pages, page_size, Hkv, D, dtype=dtype, device=device)
    q = torch.randn(len(lens), Hq, D, dtype=dtype, device=device)
    seq_lens = torch.tensor(lens, dtype=torch.int32, device=device)
    return q, k, v, seq_lens, table.to(device)


def contiguous_cache(k_cache, seq_lens, block_table):
    """The paged cache laid out as (B, Hkv, N, D), N = the longest sequence (uniform lengths: no padding)."""
    page_size, Hkv, Dk = k_cache.shape[1:]
    n = int(seq_lens.max())
    pages = block_table[:, : -(-n // page_size)].long()
    return k_cache[pages].reshape(pages.shape[0], -1, Hkv, Dk)[:, :n].transpose(1, 2).contiguous()


def kv_bytes(k_cache, seq_lens) -> int:
    """Bytes of K and V that decode reads: every cached token of every sequence, once."""
    return 2 * int(seq_lens.sum()) * k_cache.shape[2] * k_cache.shape[3] * k_cache.element_size()


def sdpa(q, k, v):
    """SDPA's GQA decode: q (B, Hq, D) as a query of length 1 against k, v (B, Hkv, N, D)."""
    return torch.nn.functional.scaled_dot_product_attention(q[:, :, None], k, v, enable_gqa=True)[:, :, 0]


def shape_cases(name, lens, page_size, decode=None, device="cuda"):
    """One shape's cases: ``decode`` (default: the tuned plan behind a lean launch) as triton, the copy and (uniform
    lengths) SDPA; bytes = the KV bytes read, plus q and out."""
    if decode is None:
        from solutions.kernels.decode_attention import decode_attention as decode
    q, k, v, seq_lens, table = paged_cache(lens, page_size, device=device)
    moved = kv_bytes(k, seq_lens) + 2 * q.numel() * q.element_size()
    shape = f"{name}-P{page_size}"
    yield Case("decode_attention", "triton", shape, "float16", lambda: decode(q, k, v, seq_lens, table), bytes=moved)
    dst = torch.empty_like(k)
    yield copy_case("decode_attention", shape, "float16", k, dst)
    if len(set(lens)) == 1:
        kc, vc = contiguous_cache(k, seq_lens, table), contiguous_cache(v, seq_lens, table)
        yield Case("decode_attention", "sdpa", shape, "float16", lambda: sdpa(q, kc, vc), bytes=moved)


def cases(decode=None):
    for page_size in PAGE_SIZES:
        for name, lens in SHAPES.items():
            yield from shape_cases(name, lens, page_size, decode)
    for name, lens in SPREAD_SHAPES.items():
        yield from shape_cases(name, lens, SPREAD_PAGE_SIZE, decode)
