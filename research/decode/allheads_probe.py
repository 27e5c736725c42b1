"""Decode at a few long sequences with one program reading every KV head of its pages: whole pages streamed
in order, where the library's programs (one a KV head) each read a 256-byte row out of every 2 kB.

    PYTHONPATH=$PWD python3 research/decode/allheads_probe.py [OUT] [--shapes B1-N32768,B1-N4096] [--check]

Why: in the pool's layout (pages, page size, Hkv, D) one token's K for all 8 KV heads is 2 kB, and the
library's split kernel gives each (sequence, KV head) its own programs, so a program reads 256 bytes of
every 2 kB while seven other programs read the rest at other times. At B 1 x 32768 every plan measured
(``spread_probe.py``, ``stages_probe.py``) lies within 0.72-0.77 of a copy, where a kernel that reads
the same bytes contiguously gets 0.85. Here a program takes a share of the sequence's pages for every
head: a step reads ``PAGES`` whole pages (``PAGES · page size · Hkv`` rows of D, contiguous within a
page), its scores ``q (Hq, D) · rowsᵀ`` masked to each query head's own KV head (``h // GROUP``), the
online softmax per query head, and the library's combine (``decode_merge``) after it. It computes Hkv
times the products it needs; decode has compute to spare.

``--check`` runs it against the library in Triton's interpreter at small sizes (no GPU needed). On a
GPU: each point checked against SDPA, then timed in a CUDA graph under the table's zeroing flush beside
the copy kernel, SDPA and the library, printed as fractions of the copy; ``OUT/allheads_probe.json``.
"""

import argparse
import itertools
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
# isort: off
import tkcourse  # noqa: E402, F401  (first: the mode, before triton is imported)
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
# isort: on

import points as sweep  # noqa: E402  (this folder's shared sweep loop)

from benchmarks import decode_attention as bench  # noqa: E402
from solutions.kernels import decode_attention as fast  # noqa: E402

LOG2E = 1.4426950408889634
BUDGET_S = 110


@triton.jit
def split_all_heads(Q, K, V, SEQ_LENS, BLOCK_TABLE, M, L, ACC, num_pages, max_pages, qk_scale, splits,
                    HQ: tl.constexpr, HQ_PAD: tl.constexpr, HKV: tl.constexpr, HEAD_DIM: tl.constexpr,
                    PAGE_SIZE: tl.constexpr, PAGES: tl.constexpr):
    """Program (b, split): every query head of sequence b over this split's share of its pages, ``PAGES`` whole
    pages a step; partials (m, l, acc) per query head, as the library's split kernel stores them."""
    b = tl.program_id(0)
    split = tl.program_id(1)
    GROUP: tl.constexpr = HQ // HKV
    ROWS: tl.constexpr = PAGES * PAGE_SIZE * HKV  # (token, head) rows a step, in the pool's order
    STEP: tl.constexpr = PAGES * PAGE_SIZE  # tokens a step
    h = tl.arange(0, HQ_PAD)
    d = tl.arange(0, HEAD_DIM)
    r = tl.arange(0, ROWS)
    r_tok, r_head = r // HKV, r % HKV
    mine = (h[:, None] // GROUP) == r_head[None, :]  # query head h reads KV head h // GROUP only
    seq_len = tl.load(SEQ_LENS + b)
    n = tl.minimum(tl.maximum(seq_len, 0), max_pages * PAGE_SIZE)
    per = tl.cdiv(tl.cdiv(n, STEP), splits) * STEP
    start = split * per
    end = tl.minimum(start + per, n)
    q = tl.load(Q + (b * HQ + h)[:, None] * HEAD_DIM + d[None, :], mask=h[:, None] < HQ, other=0.0)
    m_i = tl.full([HQ_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([HQ_PAD], tl.float32)
    acc = tl.zeros([HQ_PAD, HEAD_DIM], tl.float32)
    row0 = b.to(tl.int64) * max_pages
    for t in range(start, end, STEP):
        pos = t + r_tok
        valid = pos < end
        page = tl.load(BLOCK_TABLE + row0 + pos // PAGE_SIZE, mask=valid, other=0)
        page = tl.minimum(tl.maximum(page, 0), num_pages - 1)
        row = (page.to(tl.int64) * PAGE_SIZE + pos % PAGE_SIZE) * HKV + r_head
        k = tl.load(K + row[:, None] * HEAD_DIM + d[None, :], mask=valid[:, None], other=0.0)
        v = tl.load(V + row[:, None] * HEAD_DIM + d[None, :], mask=valid[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k)) * qk_scale  # (HQ_PAD, ROWS): every head's scores, kept where mine
        s = tl.where(mine & valid[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # padded heads: no NaN from -inf - -inf
        alpha = tl.exp2(m_i - m_safe)
        p = tl.exp2(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    part = (b * HQ + h) * splits + split
    tl.store(M + part, m_i, mask=h < HQ)
    tl.store(L + part, l_i, mask=h < HQ)
    tl.store(ACC + part[:, None] * HEAD_DIM + d[None, :], acc, mask=h[:, None] < HQ)


def all_heads_fn(q, k, v, seq_lens, table, splits, pages=1, num_warps=4, num_stages=3):
    """A callable running this file's split kernel and the library's combine; its output tensor."""
    B, Hq, D = q.shape
    _, page_size, Hkv, _ = k.shape
    n = B * Hq * splits
    ws = torch.empty(n * (D + 2), device=q.device, dtype=torch.float32)
    acc, m, l = ws[: n * D], ws[n * D: n * D + n], ws[n * D + n:]
    out = torch.empty_like(q)
    block_s = max(1, min(triton.next_power_of_2(splits), 4096 // D))
    scale = D ** -0.5 * LOG2E

    def run():
        split_all_heads[(B, splits)](q, k, v, seq_lens, table, m, l, acc, k.shape[0], table.shape[1], scale, splits,
                                     HQ=Hq, HQ_PAD=max(16, triton.next_power_of_2(Hq)), HKV=Hkv, HEAD_DIM=D,
                                     PAGE_SIZE=page_size, PAGES=pages, num_warps=num_warps, num_stages=num_stages)
        fast.decode_merge[(B * Hq,)](m, l, acc, out, splits, HEAD_DIM=D, BLOCK_S=block_s, num_warps=4)
        return out
    return run


def check():
    """Against the library in the interpreter: lengths that end inside a page and a step, empty splits."""
    worst = 0.0
    for lens, page_size, pages, splits in (([37, 100], 16, 1, 3), ([64], 16, 2, 2), ([5, 70, 33], 16, 2, 4),
                                           ([100], 8, 1, 16)):
        q, k, v, seq_lens, table = bench.paged_cache(lens, page_size, Hq=8, Hkv=2, D=64, dtype=torch.float32,
                                                     device="cpu")
        ref = fast.decode_attention(q, k, v, seq_lens, table)
        got = all_heads_fn(q, k, v, seq_lens, table, splits, pages)()
        err = (got - ref).abs().max().item()
        worst = max(worst, err)
        print(f"lens {lens} page {page_size} pages/step {pages} splits {splits}: max |diff| {err:.1e}")
    print("ok" if worst < 1e-4 else "MISMATCH")
    return 0 if worst < 1e-4 else 1


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", default=None)
    ap.add_argument("--shapes", default="B1-N32768,B1-N4096")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    if args.check:
        return check()
    if not torch.cuda.is_available():
        print("needs a GPU for times (--check runs in the interpreter)")
        return 0
    t0 = time.time()
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, "page 16", flush=True)
    rows = []
    for name in args.shapes.split(","):
        (q, k, v, seq_lens, table), ref, base = sweep.shape(name, rows)
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        B = len(sweep.LENS[name])
        grid = itertools.product((1, 2), sorted({sms // B, 2 * sms // B, 64 // B or 1, 128 // B or 1}), (4, 8), (3, 5))
        for pages, splits, warps, stages in grid:
            if time.time() - t0 > BUDGET_S:
                print("budget spent", flush=True)
                break
            fn = all_heads_fn(q, k, v, seq_lens, table, splits, pages, warps, stages)
            sweep.measure(fn, ref, dict(pages=pages, splits=splits, warps=warps, stages=stages), name, base["copy"],
                          base["sdpa"], rows)
    sweep.finish(rows, args.out, "allheads_probe", args.shapes.split(","), ("pages", "splits", "warps", "stages"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
