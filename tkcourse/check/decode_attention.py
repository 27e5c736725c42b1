"""Grader for lesson 09, part 2: ``decode_attention(q, k_cache, v_cache, seq_lens, block_table, sm_scale=None)``.

Every graded call runs under the tracer and is checked for aliasing and modified inputs (``core.attempt``).
The caches are pools of pages in a shuffled order, so that a block table read wrongly gives wrong keys:
every block table is a random permutation of the pool's pages, one column wider than the longest
sequence needs (engines keep spare columns; logical page p + 1 is then a real, wrong page), and the
pool's last page is in no table (so that page + 1 stays inside the pool). Unused slots of the pool
hold random values, so keys past a sequence's length change the answer.

The cases, in order: fixed awkward batches (a 1-token sequence, lengths that end inside a page,
G = Hq / Hkv of 1, 4 and 8, D of 64 and 128, page sizes 16 and 32), fp32 then fp16; seeded random
batches of mixed lengths; ``sm_scale``; then what must be refused. A wrong result gets a hint from
the models of the usual mistakes below, each a float64 torch computation of what that mistake returns.
"""

from __future__ import annotations

import math

import torch

from .. import mode
from .core import attempt, grading_seed, padded, random_sizes, refuses, seeded

LOG2E = 1.4426950408889634

# (lengths, page_size, Hq, Hkv, D)
FIXED = [([37, 100], 16, 8, 2, 64), ([1, 64, 200], 32, 4, 1, 128), ([17, 250], 16, 4, 4, 64),
         ([300, 45], 16, 16, 2, 64)]


def paged(lens, page_size, Hq, Hkv, D, dtype, gen):
    """(q, k_cache, v_cache, seq_lens, block_table) on the mode's device, as the module docstring says."""
    B = len(lens)
    max_pages = max(-(-n // page_size) for n in lens) + 1  # one spare column
    num_pages = B * max_pages + 2  # the last page is in no table
    table = torch.randperm(num_pages - 1, generator=gen)[: B * max_pages]
    if torch.equal(table, torch.arange(B * max_pages)):  # never the identity: p -> p must be wrong
        table = table.roll(1)
    make = lambda *shape: torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype).to(mode.DEVICE)
    q, k, v = make(B, Hq, D), make(num_pages, page_size, Hkv, D), make(num_pages, page_size, Hkv, D)
    seq_lens = torch.tensor(lens, dtype=torch.int32, device=mode.DEVICE)
    return q, k, v, seq_lens, table.view(B, max_pages).to(torch.int32).to(mode.DEVICE)


def reference(q, k_cache, v_cache, seq_lens, block_table, sm_scale=None, *, lens=None, table=None, kv_head=None,
              split=None, rescale=True):
    """Decode attention in float64 torch, and the usual mistakes by its keywords: ``lens`` (tokens each
    sequence attends to, default ``seq_lens``; 0 gives a NaN row), ``table`` (the block table used),
    ``kv_head(h, Hq, Hkv)`` (the KV head of query head h, default h // (Hq // Hkv)), ``split`` and
    ``rescale=False`` (partials of ``split`` tokens summed without exp(m_i - m))."""
    B, Hq, D = q.shape
    page_size, Hkv = k_cache.shape[1], k_cache.shape[2]
    scale = 1 / math.sqrt(D) if sm_scale is None else sm_scale
    lens = [int(n) for n in (seq_lens if lens is None else lens)]
    table = (block_table if table is None else table).long().cpu()
    heads = torch.tensor([(h // (Hq // Hkv)) if kv_head is None else kv_head(h, Hq, Hkv) for h in range(Hq)])
    kc, vc, qd = k_cache.double().cpu(), v_cache.double().cpu(), q.double().cpu()
    out = torch.full((B, Hq, D), float("nan"), dtype=torch.float64)
    for b, n in enumerate(lens):
        if n <= 0:
            continue
        pos = torch.arange(n)
        rows = (table[b, pos // page_size], pos % page_size)
        k, v = kc[rows][:, heads], vc[rows][:, heads]  # (n, Hq, D)
        s = torch.einsum("hd,nhd->hn", qd[b], k) * scale
        if rescale or split is None:
            out[b] = torch.einsum("hn,nhd->hd", torch.softmax(s, -1), v)
            continue
        acc, l = torch.zeros(Hq, D, dtype=torch.float64), torch.zeros(Hq, dtype=torch.float64)
        for j in range(0, n, split):  # each split's own max, never brought to the common one
            p = torch.exp(s[:, j:j + split] - s[:, j:j + split].amax(-1, keepdim=True))
            acc += torch.einsum("hn,nhd->hd", p, v[j:j + split])
            l += p.sum(-1)
        out[b] = acc / l[:, None]
    return out


def _diagnose(args):
    q, k, v, seq_lens, table = args
    B, Hq, D = q.shape
    page_size, Hkv = k.shape[1], k.shape[2]
    lens = [int(n) for n in seq_lens]
    cap = table.shape[1] * page_size
    scale = 1 / math.sqrt(D)
    splits = range(16, cap, 16)  # the split sizes a learner may have chosen, in tokens

    def hint(o, e, wrong):
        def close(**kw):
            """The mistake ``kw`` gives ``o``, where it is defined, and differs from the right answer there."""
            model = reference(*args, **kw)
            rows = ~torch.isnan(model).any(-1)
            m, oo, ee = model[rows], o.cpu()[rows], e.cpu()[rows]
            return (bool(rows.any()) and torch.allclose(oo, m, atol=2e-2, rtol=2e-2)
                    and not torch.allclose(m, ee, atol=2e-2, rtol=2e-2))

        shifted = torch.cat([table[:, 1:], table[:, :1]], 1)
        if close(table=shifted):
            return ("page index off by one: logical page p of sequence b is block_table[b, p], not "
                    "block_table[b, p + 1]; the page of token pos is pos // PAGE_SIZE")
        if close(table=table + 1):
            return ("page index off by one: the physical page is block_table[b, p] itself, not one more; "
                    "token pos lies at row (page * PAGE_SIZE + pos % PAGE_SIZE) * HKV + kvh of the pool")
        arange = torch.arange(table.shape[1], device=table.device)
        for skipped in (arange.expand_as(table), arange + table.shape[1] * torch.arange(B, device=table.device)[:, None]):
            if close(table=skipped):
                return ("the block table is skipped: a sequence's pages are anywhere in the pool, so logical page "
                        "p is physical page block_table[b, p] (load it from BLOCK_TABLE + b * max_pages + p)")
        if close(lens=[-(-n // page_size) * page_size for n in lens]):
            return ("the sequence's length is ignored in its last, partial page: keys at positions >= seq_lens[b] "
                    "must get score -inf (mask them with pos < seq_len, loads and scores alike)")
        if close(lens=[cap] * B) or close(lens=[max(lens)] * B):
            return ("the sequence's length is ignored: keys past seq_lens[b] count. Each sequence attends to its "
                    "own seq_lens[b] keys: stop its splits at end = min(start + split_tokens, seq_len)")
        for wrong_head, what in ((lambda h, hq, hkv: h % hkv, "h % Hkv"), (lambda h, hq, hkv: 0, "KV head 0")):
            if Hkv > 1 and close(kv_head=wrong_head):
                return (f"GQA head mapping wrong: query head h reads KV head h // (Hq // Hkv) (heads kvh * G .. "
                        f"kvh * G + G - 1 share KV head kvh), not {what}")
        for s, what in ((1.0, "no scale at all"), (1 / D, "1/D instead of 1/sqrt(D)"), (scale * scale, "the scale twice")):
            if close(sm_scale=s):
                return f"wrong scale ({what}): scores are (q·k) * sm_scale, with sm_scale = 1/sqrt(D) by default"
        if close(sm_scale=scale * math.log(2)):
            return ("tl.exp2 without log2(e): exp2(x) is exp(x · ln 2), so with exp2 multiply the scores by "
                    "log2(e) = 1.4427 (qk_scale = sm_scale * log2(e)), or use tl.exp")
        if close(sm_scale=scale * LOG2E):
            return ("log2(e) in the scale but tl.exp in the softmax: use tl.exp2 with qk_scale = sm_scale * log2(e) "
                    "(in the split kernel and in the combine), or tl.exp with sm_scale alone")
        for split in splits:
            if close(split=split, rescale=False):
                return ("partials combined without rescaling: each split has its own max m_i, so weight its acc and "
                        "l by exp2(m_i - m), m = max over splits, before summing: out = sum(w * acc) / sum(w * l)")
        for split in splits:
            if close(lens=[min(n, cap // split * split) for n in lens]) or close(lens=[n // split * split for n in lens]):
                return ("the last, partial split is dropped: launch cdiv(tokens, split_tokens) splits, not "
                        "tokens // split_tokens, and let the last one stop at the sequence's end")
        if torch.isnan(o).any():
            n = int(torch.isnan(o).any(-1).sum())
            return (f"{n} (sequence, query head) rows are NaN: never written (the combine's grid is B * Hq programs, "
                    "and a split kernel must store rows < GROUP of every split, empty ones too), or 0/0 from a "
                    "sum of weights that is 0")
        return ("check the block-table lookup, the masks at the end of each sequence, and the combine's rescaling "
                "by exp2(m_i - m)")
    return hint


def _graded(label, mod, args, dtype, sm_scale=None):
    expected = reference(*args, sm_scale=sm_scale)
    tol = 2e-3 if dtype == torch.float16 else (2e-5 if mode.INTERPRET else 1e-2)
    q, k, v, seq_lens, table = args
    call = (padded(q), padded(k), padded(v), seq_lens, table)  # a load past the end reads a loud value
    kwargs = {} if sm_scale is None else {"sm_scale": sm_scale}
    return attempt(label, mod.decode_attention, call, expected, kwargs=kwargs, dtype=dtype, atol=tol, rtol=tol * 5,
                   diagnose=_diagnose(args) if sm_scale is None else
                   (lambda o, e, w: "pass sm_scale through to the kernel instead of 1/sqrt(D)"))


def _label(lens, ps, Hq, Hkv, D, dtype):
    return f"B={len(lens)} lengths {lens} page {ps} Hq={Hq} Hkv={Hkv} D={D} {str(dtype)[6:]}"


def grade(mod):
    gen = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.float16):
        for lens, ps, Hq, Hkv, D in FIXED if dtype == torch.float32 else FIXED[:1]:
            yield _graded(_label(lens, ps, Hq, Hkv, D, dtype), mod, paged(lens, ps, Hq, Hkv, D, dtype, gen), dtype)
    seed = grading_seed()
    rng = torch.Generator().manual_seed(seed)
    pick = lambda options: options[int(torch.randint(0, len(options), (1,), generator=rng))]
    for i in range(2):  # mixed lengths, the longest anywhere in the batch
        _, lens = random_sizes(pick((2, 3, 4)), 1, 400, seed=seed + i)
        lens = [lens[j] for j in torch.randperm(len(lens), generator=rng)]
        Hkv, G, D, ps = pick((1, 2, 3)), pick((1, 2, 4)), pick((64, 128)), pick((16, 32))
        label = seeded(_label(lens, ps, G * Hkv, Hkv, D, torch.float32) + ", mixed lengths", seed)
        yield _graded(label, mod, paged(lens, ps, G * Hkv, Hkv, D, torch.float32, rng), torch.float32)
    args = paged([40, 7], 16, 4, 2, 64, torch.float32, gen)
    yield _graded("sm_scale is honoured", mod, args, torch.float32, sm_scale=0.3)

    q, k, v, seq_lens, table = paged([20, 9], 16, 4, 2, 64, torch.float32, gen)
    hint = "check the arguments before launching and raise ValueError naming the one that is wrong"
    bad = [("k_cache and v_cache of different shapes", (q, k, v[:, :, :1], seq_lens, table)),
           ("Hq not a multiple of Hkv", (q[:, :3], k, v, seq_lens, table)),
           ("page_size not a power of two", (q, k[:, :12], v[:, :12], seq_lens, table)),
           ("head dimension 32", (q[..., :32], k[..., :32], v[..., :32], seq_lens, table)),
           ("seq_lens of the wrong length", (q, k, v, seq_lens[:1], table)),
           ("seq_lens not int32", (q, k, v, seq_lens.long(), table)),
           ("block_table with the wrong number of rows", (q, k, v, seq_lens, table[:1]))]
    for what, args in bad:
        yield refuses(f"{what} raises ValueError", mod.decode_attention, *args, hint=hint)
