"""Grader for lesson 09, part 2: ``decode_attention(q, k_cache, v_cache, seq_lens, block_table, sm_scale=None)``.

Every graded call runs under the tracer and is checked for aliasing and modified inputs, as ``core.attempt``
does. The caches are pools of pages in a shuffled order, so that a block table read wrongly gives wrong keys:
every block table is a random permutation of the pool's pages, one column wider than the longest
sequence needs (engines keep spare columns; logical page p + 1 is then a real, wrong page), and the
pool's last page is in no table (so that page + 1 stays inside the pool). The kernel gets the pool with
NaN in every slot no sequence attends to (the pages in no table, the spare columns' pages, the tail of
each last page past the sequence's length), as unused memory may hold: a K or V load that is not masked
at the sequence's end reads NaN. The hints are worked out on the same pool with random values there
instead (the kernel is run again on it), so that a mistake with the length still gets its own hint.

The cases, in order: fixed awkward batches (a 1-token sequence, lengths that end inside a page,
G = Hq / Hkv of 1, 4 and 8, D of 64 and 128, page sizes 16 and 32), fp32 then fp16; a split count that
is not a power of two, with lengths of every residue against the split's size (a multiple of it, one
more, one less, shorter than one split); the GPU's launch plan (its BLOCK_N of 64 tokens over pages of
16, so that a step spans pages, and its split counts), forced on the module in the interpreter; the
offsets into the pool in int64 (seen in the tracer: a pool past 2**31 elements, 4 GiB of fp16, is
common on a GPU, and an int32 page * page_elements wraps there); seeded random batches of mixed lengths;
``sm_scale``; then what must be refused. A wrong result gets a hint from the models of the usual
mistakes below, each a float64 torch computation of what that mistake returns (the split kernel's loop is
followed step by step for the slips inside it), and from the partials m, l, acc that the split kernel
stored. Kernels that load and store nothing (the exercise's stubs) are reported as still to write.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np
import torch

from .. import mode, traffic, triton_internals
from .core import (
    Case,
    graded_call,
    grading_seed,
    loaded_again,
    padded,
    poisoned_allocations,
    quarters,
    random_sizes,
    refuses,
    returned_case,
    seeded,
    traceable,
    traced_call,
    written_case,
)

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


def poisoned(k_cache, v_cache, seq_lens, block_table):
    """Copies of the pools with NaN in every slot that no sequence attends to: the pages in no block table
    (and the spare columns' pages), and each last page's slots past its sequence's length."""
    page_size = k_cache.shape[1]
    used = torch.zeros(k_cache.shape[:2], dtype=torch.bool)
    table = block_table.long().cpu()
    for b, n in enumerate(int(n) for n in seq_lens):
        pos = torch.arange(n)
        used[table[b, pos // page_size], pos % page_size] = True
    unused = (~used).to(k_cache.device)
    k, v = k_cache.clone(), v_cache.clone()
    k[unused], v[unused] = float("nan"), float("nan")
    return k, v


def reference(q, k_cache, v_cache, seq_lens, block_table, sm_scale=None, *, lens=None, table=None, kv_head=None,
              split=None, rescale=True, step=None, forget="", address=None, counts=None, denominator="weighted"):
    """Decode attention in float64 torch, and the usual mistakes by its keywords: ``lens`` (tokens each
    sequence attends to, default ``seq_lens``; 0 gives a NaN row), ``table`` (the block table used),
    ``kv_head(h, Hq, Hkv)`` (the KV head of query head h, default h // (Hq // Hkv)), and with ``split`` (tokens
    a split) the split kernel's partials and the combine (``split_partials``, ``combined``, whose keywords these are:
    ``rescale`` the combine's weights exp2(rescale · (m_i - m)), True the right rule; ``forget`` "l" or "acc", each
    split walked ``step`` tokens at a time; ``denominator``), ``address(page, pos, kvh, page_size, Hkv)`` (the row
    of the
    pool, seen as (num_pages * page_size * Hkv, D), that a kernel reads for token ``pos`` on physical ``page`` and KV
    head ``kvh``: a wrong formula for it; a row outside the pool reads NaN), ``counts(n)`` (how many splits walk each
    of a sequence's n keys, a tensor of n: a key walked twice weighs twice in the softmax; none walked, a NaN row).
    ``split`` takes the lesson's reading of the cache (no ``lens``, ``table``, ``kv_head``, ``address``, ``counts``)."""
    if split is not None and not (rescale is True and not forget and denominator == "weighted"):
        args = (q, k_cache, v_cache, seq_lens, block_table)
        n_splits = max(1, max(-(-int(n) // split) for n in seq_lens))
        partials = split_partials(args, n_splits, split, step or split, forget=forget)
        return combined(partials, rescale=float(rescale), denominator=denominator)
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
        if address is None:
            k, v = kc[rows][:, heads], vc[rows][:, heads]  # (n, Hq, D)
        else:  # the pool read at the rows a wrong formula gives, NaN outside it
            flat_k, flat_v = kc.reshape(-1, D), vc.reshape(-1, D)
            at = torch.as_tensor(address(rows[0][:, None], pos[:, None], heads[None, :], page_size, Hkv)).long()
            at = at.expand(n, Hq)
            inside = ((at >= 0) & (at < flat_k.shape[0]))[..., None]
            at = at.clamp(0, flat_k.shape[0] - 1)
            k, v = (torch.where(inside, flat[at], float("nan")) for flat in (flat_k, flat_v))
        s = torch.einsum("hd,nhd->hn", qd[b], k) * scale
        if counts is not None:  # the splits' partials combined rightly: each key weighs as often as it is walked
            c = torch.as_tensor(counts(n), dtype=torch.float64)
            if c.sum() > 0:
                w = c * torch.exp(s - s.amax(-1, keepdim=True))
                out[b] = torch.einsum("hn,nhd->hd", w, v) / w.sum(-1, keepdim=True)
            continue
        out[b] = torch.einsum("hn,nhd->hd", torch.softmax(s, -1), v)
    return out


# ----- the pool's addressing: wrong row formulas, modelled and named ----------------------------------

#: Rows of the pool (seen as (num_pages * PAGE_SIZE * Hkv, D)) that two slips give, as ``reference``'s ``address``:
#: HKV left out, (page * PAGE_SIZE + slot) + kvh; the slot taken as pos, not pos % PAGE_SIZE.
NO_HKV = lambda page, pos, kvh, ps, hkv: page * ps + pos % ps + kvh  # noqa: E731
NO_SLOT = lambda page, pos, kvh, ps, hkv: (page * ps + pos) * hkv + kvh  # noqa: E731

HKV_HINT = ("HKV is missing from the pool's row: the pool (pages, PAGE_SIZE, Hkv, D) interleaves the KV heads, so a "
            "token's row is (page * PAGE_SIZE + slot) * HKV + kvh (slot = pos % PAGE_SIZE, D values a row); "
            "(page * PAGE_SIZE + slot) + kvh reads the heads of other tokens")
SLOT_HINT = ("the slot in the page is pos % PAGE_SIZE, not pos: token pos lies on logical page pos // PAGE_SIZE, at "
             "slot pos % PAGE_SIZE of its physical page, so its row of the pool is "
             "(page * PAGE_SIZE + pos % PAGE_SIZE) * HKV + kvh. With pos itself, every token past the first page of "
             "its sequence reads a slot of another page (or past the end of the pool); your masks are not the "
             "problem")


# ----- what a split program works on: its (sequence, KV head), its query rows, its split's tokens ----------


def programs(q, k_cache, v_cache, seq_lens, block_table, decode, sm_scale=None):
    """What the two kernels return, in float64 torch, when the split kernel's program bh works on the (sequence,
    KV head) ``decode(bh, Hkv)`` (right: bh // Hkv, bh % Hkv), all of it as the kernel's code does for that pair:
    the sequence's length and pages, the pool's rows (page * page_size + slot) * Hkv + kvh (NaN outside the pool),
    the query rows and the partials' slots b * Hq + kvh * G + g; rows that no program stores are NaN. None when a
    program's sequence lies outside the batch (its load of seq_lens is out of bounds: ``_address_oob`` names it)."""
    B, Hq, D = q.shape
    ps, Hkv = k_cache.shape[1], k_cache.shape[2]
    G = Hq // Hkv
    scale = 1 / math.sqrt(D) if sm_scale is None else sm_scale
    fq = q.double().cpu().reshape(-1, D)
    fk, fv = (c.double().cpu().reshape(-1, D) for c in (k_cache, v_cache))
    table = block_table.long().cpu()
    out = torch.full((B * Hq, D), float("nan"), dtype=torch.float64)
    for bh in range(B * Hkv):
        b, kvh = decode(bh, Hkv)
        if not 0 <= b < B:
            return None
        slots = b * Hq + kvh * G + torch.arange(G)
        if int(slots.max()) >= B * Hq:  # out of bounds of q and of the partials: the tracer reports it
            continue
        pos = torch.arange(int(seq_lens[b]))
        rows = (table[b, pos // ps] * ps + pos % ps) * Hkv + kvh
        inside = (rows < fk.shape[0])[:, None]
        rows = rows.clamp(max=fk.shape[0] - 1)
        kk, vv = (torch.where(inside, f[rows], float("nan")) for f in (fk, fv))
        out[slots] = torch.softmax(fq[slots] @ kk.T * scale, -1) @ vv
    return out.view(B, Hq, D)


#: b and kvh decoded the wrong way round from the split kernel's first program id, as ``programs``' ``decode``.
SWAPPED = lambda bh, hkv: (bh % hkv, bh // hkv)  # noqa: E731
SWAP_HINT = ("b and kvh are decoded the wrong way round from the program id: the split kernel's grid is "
             "(B * Hkv, splits), so program bh = b * HKV + kvh works on sequence b = bh // HKV and KV head "
             "kvh = bh % HKV (not b = bh % HKV, kvh = bh // HKV)")


def query_slips(Hq, Hkv, D):
    """The queries a program (b, kvh) may load for its g-th head instead of q[b, kvh * G + g], as ``(offset, what)``:
    ``offset(b, kvh, g, d)`` the element of q (seen flat) it loads for lane d of that head."""
    G = Hq // Hkv
    row = lambda r: lambda b, kvh, g, d: r(b, kvh, g) * D + d  # noqa: E731  (a whole row of D values)
    slips = [(row(lambda b, kvh, g: b * Hq + g), "q[b, g] for every KV head (kvh * GROUP left out)"),
             (row(lambda b, kvh, g: b * Hq + kvh + g), "q[b, kvh + g] (kvh not multiplied by GROUP)"),
             (row(lambda b, kvh, g: b * Hq + kvh + 0 * g), "q[b, kvh] for every head of the group"),
             (row(lambda b, kvh, g: b * Hq + kvh * G + 0 * g), "q[b, kvh * GROUP], the group's first head, for every "
              "head of the group")]
    for x, name in ((Hkv, "HKV"), (G, "GROUP")):  # the sequence's stride short of a factor
        slips.append((row(lambda b, kvh, g, x=x: b * x + kvh * G + g),
                      f"rows b * {name} + kvh * GROUP + g (sequence b's rows start at b * HKV * GROUP, not b * {name}: "
                      "q has Hq = HKV * GROUP heads a sequence)"))
    names = {}
    for x, name in ((Hkv, "HKV"), (G, "GROUP"), (1, "1")):
        names.setdefault(x, []).append(name)
    for x, which in names.items():  # a head's stride other than HEAD_DIM
        slips.append((lambda b, kvh, g, d, x=x: b * Hq * D + (kvh * G + g) * x + d,
                      "b * HKV * GROUP * HEAD_DIM + head + d (the head not multiplied by HEAD_DIM)" if x == 1 else
                      f"b * HKV * GROUP * HEAD_DIM + head * {x} + d (a head's stride of {x} elements, "
                      f"{' and '.join(which)} here, not HEAD_DIM = {D})"))
    slips.append((lambda b, kvh, g, d: b * Hq + (kvh * G + g) * D + d,
                  "b * HKV * GROUP + head * HEAD_DIM + d (the sequence's offset not multiplied by HEAD_DIM)"))
    return slips


def moved_queries(q, offset, Hkv):
    """q with lane d of query head h = kvh * G + g of sequence b replaced by element ``offset(b, kvh, g, d)`` of q
    seen flat: the queries a program loads by a wrong formula; None when an element lies outside q."""
    B, Hq, D = q.shape
    G = Hq // Hkv
    b, h, d = torch.arange(B)[:, None, None], torch.arange(Hq)[None, :, None], torch.arange(D)[None, None, :]
    at = torch.as_tensor(offset(b, h // G, h % G, d)).expand(B, Hq, D)
    if int(at.min()) < 0 or int(at.max()) >= q.numel():
        return None
    return q.reshape(-1)[at.reshape(-1).to(q.device)].view(B, Hq, D)


def split_starts(splits, size, block_n, page_size, max_pages):
    """The wrong first tokens a split kernel may give its splits, as ``(ranges(n), what)``: ``ranges(n)`` the
    tokens [lo, hi) that each of the ``splits`` splits (of ``size`` tokens) walks in a sequence of n tokens."""
    cut = lambda lo, n: (lo, max(lo, min(lo + size, n)))  # end = min(start + split_tokens, seq_len)
    wrong = [(lambda n: [cut(0, n)] * splits, "start = 0 (each split from token 0)")]
    names = {}
    for x, name in ((block_n, "BLOCK_N"), (page_size, "PAGE_SIZE"), (splits, "splits"), (max_pages, "max_pages")):
        names.setdefault(x, []).append(name)
    for x, which in names.items():
        if x != size:
            wrong.append((lambda n, x=x: [cut(j * x, n) for j in range(splits)],
                          f"start = split * {x} ({x} is {' and '.join(which)} here)"))
    wrong += [(lambda n: [cut(j * -(-n // splits), n) for j in range(splits)], "start = split * cdiv(seq_len, splits)"),
              (lambda n: [cut(j * (n // splits), n) for j in range(splits)], "start = split * (seq_len // splits)"),
              (lambda n: [cut((j + 1) * size, n) for j in range(splits)], "start = (split + 1) * split_tokens"),
              (lambda n: [(0, min((j + 1) * size, n)) for j in range(splits)],
               "a loop from token 0 (not from start) to each split's end")]
    return wrong


def counted(ranges):
    """``reference``'s ``counts`` of splits that walk the tokens ``ranges(n)``."""
    def counts(n):
        c = torch.zeros(n)
        for lo, hi in ranges(n):
            c[lo:hi] += 1
        return c
    return counts


def starts_hint(splits, size, what, ranges, n) -> str:
    """The hint of splits that walk the tokens ``ranges(n)`` (``what`` names the formula), shown on n tokens."""
    starts = ", ".join(str(lo) for lo, hi in ranges(n) if hi > lo) or "no token"
    return (f"your splits walk the wrong tokens: here a sequence has {splits} splits of split_tokens = {size} tokens, "
            "and split j must walk tokens j * split_tokens up to its end: start = split * split_tokens, "
            "end = min(start + split_tokens, seq_len), the loop from start to end, so that every key lies in exactly "
            f"one split. Your result matches splits with {what}: in the sequence of {n} tokens they start at "
            f"tokens {starts}, not {', '.join(str(j * size) for j in range(-(-n // size)))}, so some keys count in "
            "several splits (or in none)")


# ----- the split kernel's partials and the combine, step by step: slips inside the loop and the combine ------


def split_partials(args, n_splits, size, block_n, *, loop_end="end", update_max=True, l_axis=1, acc_over_l=False,
                   forget=""):
    """The partials (m in log2 units, l, acc) that the split kernel stores, in float64, as (B, Hq, n_splits) and
    (B, Hq, n_splits, D): each split of ``size`` tokens walked ``block_n`` tokens a step on a (BLOCK_G, D) block of
    queries (BLOCK_G = max(16, G), rows g >= GROUP zero), as the lesson's kernel does, and its slips by keyword:
    ``loop_end`` "split" (the loop runs to start + split_tokens, not to end), ``update_max`` False (m_i = m_new left
    out), ``l_axis`` 0 (l_i sums p over the heads; None when BLOCK_G != block_n, where no such kernel compiles),
    ``acc_over_l`` (acc / l_i stored), ``forget`` "l" or "acc" (that running value not multiplied by alpha when the
    max grows)."""
    q, k_cache, v_cache, seq_lens, table = args
    B, Hq, D = q.shape
    ps, Hkv = k_cache.shape[1], k_cache.shape[2]
    G = Hq // Hkv
    BG = max(16, 1 << (G - 1).bit_length())
    if l_axis != 1 and BG != block_n:
        return None
    qk_scale = LOG2E / math.sqrt(D)
    kc, vc, qd, tab = k_cache.double().cpu(), v_cache.double().cpu(), q.double().cpu(), table.long().cpu()
    m_out = torch.full((B, Hq, n_splits), float("nan"), dtype=torch.float64)
    l_out, acc_out = m_out.clone(), torch.full((B, Hq, n_splits, D), float("nan"), dtype=torch.float64)
    for b, n in enumerate(int(x) for x in seq_lens):
        top = max(n, n_splits * size) + block_n
        pos = torch.arange(top)
        inside = pos < n
        rows = (tab[b, (pos.clamp(max=n - 1)) // ps], pos.clamp(max=n - 1) % ps)
        keys, vals = kc[rows], vc[rows]  # (top, Hkv, D), positions past n masked below
        for kvh in range(Hkv):
            qg = torch.zeros(BG, D, dtype=torch.float64)
            qg[:G] = qd[b, kvh * G:(kvh + 1) * G]
            for j in range(n_splits):
                start = j * size
                end = min(start + size, n)
                m_i = torch.full((BG,), float("-inf"), dtype=torch.float64)
                l_i, acc = torch.zeros(BG, dtype=torch.float64), torch.zeros(BG, D, dtype=torch.float64)
                for t in range(start, end if loop_end == "end" else start + size, block_n):
                    p_ = torch.arange(t, t + block_n)
                    valid = (p_ < end) & inside[p_]
                    kk = torch.where(valid[:, None], keys[p_, kvh], 0.0)
                    vv = torch.where(valid[:, None], vals[p_, kvh], 0.0)
                    s = torch.where(valid[None, :], qg @ kk.T * qk_scale, float("-inf"))
                    m_new = torch.maximum(m_i, s.amax(1))
                    alpha, p = torch.exp2(m_i - m_new), torch.exp2(s - m_new[:, None])
                    l_i = (l_i if forget == "l" else l_i * alpha) + p.sum(l_axis)
                    acc = (acc if forget == "acc" else acc * alpha[:, None]) + p @ vv
                    if update_max:
                        m_i = m_new
                m_out[b, kvh * G:(kvh + 1) * G, j] = m_i[:G]
                l_out[b, kvh * G:(kvh + 1) * G, j] = l_i[:G]
                acc_out[b, kvh * G:(kvh + 1) * G, j] = (acc / l_i[:, None] if acc_over_l else acc)[:G]
    return m_out, l_out, acc_out


def combined(partials, *, inverted=False, rescale=1.0, denominator="weighted"):
    """The combine of ``partials`` (m, l, acc) in float64: w = exp2(m_s - m), m = max(m_s), out = sum(w * acc) /
    sum(w * l); and its slips: ``inverted`` w = exp2(m - m_s); ``rescale`` w = exp2(rescale · (m_s - m)) (0: partials
    summed as they are; ln 2 or log2(e): a max kept in one base and weighed in the other); ``denominator`` "plain"
    sum(l), "weights" sum(w). An empty split (m_s = -inf, l = 0) weighs nothing, but under the inverted weight,
    whose exp2(m + inf) makes the NaN such a combine gives."""
    m_s, l_s, acc = partials
    m = m_s.amax(-1, keepdim=True)
    if inverted:
        w = torch.exp2(m - m_s)
    else:  # exp2(rescale * -inf) is 0, but for rescale 0 (weights left out), where 0 * -inf is NaN
        w = torch.where(torch.isneginf(m_s), 0.0, torch.exp2(rescale * (m_s - m)))
    den = {"weighted": w * l_s, "plain": l_s, "weights": w}[denominator].sum(-1)
    return (w[..., None] * acc).sum(-2) / den[..., None]


def stored_partials(allocs, B, Hq, D):
    """The partials (m, l, acc) as the graded call's kernels left them, in float64 ((B, Hq, S) and (B, Hq, S, D)):
    three allocations in a row of N, N and N·D floats, N a multiple of B·Hq; None when the launcher has no such."""
    floats = [a for a in allocs if a.buf.is_floating_point()]
    for a, b, c in zip(floats, floats[1:], floats[2:]):
        n = a.numel
        if n % (B * Hq) == 0 and b.numel == n and c.numel == n * D:
            S = n // (B * Hq)
            return tuple(x.buf[:x.numel].detach().double().cpu().view(B, Hq, S, *shape)
                         for x, shape in ((a, ()), (b, ()), (c, (D,))))
    return None


def _empty_splits(lens, n_splits, size) -> str:
    """Which sequences have splits past their end, in words: "sequence 0 (37 tokens; splits 2, 3 lie past its end)"."""
    out = []
    for b, n in enumerate(lens):
        empty = [j for j in range(n_splits) if j * size >= n]
        if empty:
            many = len(empty) > 1
            out.append(f"sequence {b} ({n} tokens; split{'s' * many} {', '.join(map(str, empty))} "
                       f"lie{'s' * (not many)} past its end)")
    return "; ".join(out)


MAX_NEVER_UPDATED = ("every partial max m your split kernel stored is -inf: m_i is never updated in its loop. End "
                     "each step with m_i = m_new: without it each step's alpha = exp2(m_i - m_new) = exp2(-inf - m_new) "
                     "= 0 throws away the steps before it, and the combine's m = max(m_s) = -inf makes "
                     "w = exp2(m_s - m) = exp2(-inf - (-inf)) = NaN")
ACC_OVER_L = ("your split kernel stores acc already divided by l_i: store the partial acc unnormalized, as it is, "
              "since the combine divides once, after weighting the splits: out = sum(w * acc_s) / sum(w * l_s). "
              "Divided by l_i as well, each split's acc is scaled by 1 / l_i, and an empty split's acc / l_i is "
              "0 / 0 = NaN")
WEIGHT_INVERTED = ("the combine's weight is inverted: w = exp2(m_s - m), each split scaled down from its own max m_s "
                   "to the common max m = max(m_s) (so w <= 1), not exp2(m - m_s). With the inverted weight the "
                   "splits of lower max count more, and an empty split (m_s = -inf) gets w = inf, and inf * 0 = NaN")
L_AXIS0 = ("l_i sums p over axis 0, the query heads: p is (BLOCK_G, BLOCK_N), a row per query head and a column "
           "per key, so each head's sum over this step's keys is tl.sum(p, axis=1), as for acc's dot(p, v). With "
           "axis=0, lane g of l_i gets column g, the sum over all BLOCK_G rows (the padding rows g >= GROUP too) of "
           "the step's token g")


def loop_past_end_hint(lens, n_splits, size) -> str:
    return ("your split kernel's loop runs past end: loop for n in range(start, end, BLOCK_N), with end = "
            "min(start + split_tokens, seq_len), not up to start + split_tokens. A split that lies wholly past its "
            "sequence's end must run no step; yours runs steps whose scores are all -inf, where m_new = -inf and "
            "alpha = exp2(-inf - (-inf)) = NaN, and it stores l = NaN and acc = NaN (with m = -inf). The combine's "
            f"weight 0 times NaN is NaN: here, with splits of {size} tokens, the rows of "
            f"{_empty_splits(lens, n_splits, size)} are NaN, and the other sequences' rows are right")


def _address_oob(args):
    """The out-of-bounds hint of the split kernel's addressing slips: loads of the pool past its end exactly
    where the slot taken as pos (not pos % PAGE_SIZE) puts them, or accesses by programs bh >= B * Hkv only (a
    grid of B * Hq programs, whose programs past B * Hkv read seq_lens past its end); ``""`` for any other
    pattern, which keeps the mask hint."""
    q, k, _, seq_lens, table = args
    B, Hq, D = q.shape
    ps, Hkv = k.shape[1], k.shape[2]
    pool = k.numel()

    def slot_offsets():
        """The offsets into the pool of every (valid token, KV head) with the slot taken as pos."""
        tab, offs = table.long().cpu(), []
        for b, n in enumerate(int(n) for n in seq_lens):
            pos = torch.arange(n)
            row = NO_SLOT(tab[b, pos // ps][:, None], pos[:, None], torch.arange(Hkv)[None, :], ps, Hkv)
            offs.append((row[..., None] * D + torch.arange(D)).reshape(-1))
        return torch.cat(offs).numpy() if offs else np.zeros(0, np.int64)

    def hint(bad, default):
        if not bad or not all(o.derived for o in bad):
            return ""
        if all(o.kind == "load" and o.numel == pool for o in bad):
            slots = slot_offsets()
            if all(np.isin(np.asarray(o.offsets, dtype=np.int64), slots).all() for o in bad):
                return SLOT_HINT
        # b and kvh decoded the wrong way round, with B < Hkv: program bh (inside the grid) whose bh % HKV >= B
        # loads seq_lens[bh % HKV], past its B values (and goes on with that sequence's row of everything)
        lens_loads = [o for o in bad if o.kind == "load" and o.numel == B]
        if (Hkv > B and lens_loads and all(o.program[0] < B * Hkv and o.program[0] % Hkv >= B for o in bad)
                and all((np.asarray(o.offsets) == o.program[0] % Hkv).all() for o in lens_loads)):
            p = lens_loads[0].program[0]
            return (f"{SWAP_HINT}. Program bh = {p} of your split kernel loaded seq_lens[{p % Hkv}] (bh % HKV), past "
                    f"the B = {B} sequences; the masks are not the problem")
        # the split kernel's programs past the batch (b = bh // HKV >= B: each loads seq_lens[b] past its B
        # values); not the combine's, whose grid is B * Hq and which never reads seq_lens
        if all(o.program[0] >= B * Hkv for o in bad) and any(o.kind == "load" and o.numel == B for o in bad):
            lo, hi = min(o.program[0] for o in bad), max(o.program[0] for o in bad)
            names = ", ".join(dict.fromkeys(o.tensor for o in bad))
            grid = f"B * Hq = {B * Hq}" if hi + 1 == B * Hq else f"at least {hi + 1}"
            return (f"the split kernel's grid has {grid} programs on its first axis, not B * Hkv = {B * Hkv}: "
                    f"only programs {lo}..{hi} (bh >= B * Hkv) went out of bounds ({names}). Launch "
                    "decode_split on (B * Hkv, splits): a program per (sequence, KV head, split), each handling the "
                    "G = Hq // Hkv query heads that share its KV head; with b = bh // HKV a program bh >= B * Hkv "
                    "has no sequence. The masks are not the problem")
        # rows g >= GROUP of the (BLOCK_G, D) block: q loaded, or partials stored, without g < GROUP
        split_kernel = all(o.kernel in ("decode_split", "") for o in bad)  # not a kernel of the learner's own
        if split_kernel and all(o.kind == "load" and o.numel == B * Hq * D for o in bad):
            return ("your split kernel loads q past its end: the (BLOCK_G, D) block of query heads has BLOCK_G = "
                    "max(16, G) rows, and rows g >= GROUP belong to no head of this KV head (the last program's lie "
                    "past q). Mask the load of q with g[:, None] < GROUP, other=0.0; the masks on the K and V loads "
                    "are not the problem")
        splits_n = {o.numel // (B * Hq) for o in bad if o.numel % (B * Hq) == 0}
        if (split_kernel and all(o.kind == "store" and o.program[0] < B * Hkv for o in bad) and splits_n
                and any(o.numel in (B * Hq * n, B * Hq * n * D) for o in bad for n in splits_n)):
            return ("your split kernel stores partials past their end: rows g >= GROUP of its (BLOCK_G, D) block are "
                    "padding (BLOCK_G = max(16, G)), so mask the stores of m_i, l_i (g < GROUP) and acc "
                    "(g[:, None] < GROUP); the masks on the K and V loads are not the problem")
        return ""
    return hint


def _diagnose(args, unstored=lambda: "", lengths_read=lambda: {}, partials=lambda: None, launched=lambda: ""):
    """The hint of a wrong result on ``args``: what ``launched()`` says of the launcher's arguments (``_launch_args``),
    else the first of the usual mistakes whose model it matches.
    ``unstored()``: what the launches loaded of the tensors they store into that none of them stored
    (``_unstored``), asked only of a NaN result; ``lengths_read()``: which elements of seq_lens each program of the
    split kernel loaded (``_lengths_read``); ``partials()``: the partials (m, l, acc) the kernels left
    (``stored_partials``), or None."""
    q, k, v, seq_lens, table = args
    B, Hq, D = q.shape
    page_size, Hkv = k.shape[1], k.shape[2]
    lens = [int(n) for n in seq_lens]
    cap = table.shape[1] * page_size
    scale = 1 / math.sqrt(D)
    splits = range(16, cap, 16)  # the split sizes a learner may have chosen, in tokens
    arange_cols = torch.arange(table.shape[1], device=table.device)[None, :]

    def hint(o, e, wrong):
        said = launched()
        if said:
            return said

        def close(pool=None, model=None, **kw):
            """The mistake ``kw`` (or the K, V ``pool`` read instead, or the ``model`` given) gives ``o``, where it
            is defined, and differs from the right answer there."""
            if model is None:
                model = reference(*args, **kw) if pool is None else reference(q, *pool, seq_lens, table, **kw)
            rows = ~torch.isnan(model).any(-1)
            m, oo, ee = model[rows], o.cpu()[rows], e.cpu()[rows]
            return (bool(rows.any()) and torch.allclose(oo, m, atol=2e-2, rtol=2e-2)
                    and not torch.allclose(m, ee, atol=2e-2, rtol=2e-2))

        try:
            found = _loop_slips(o, e, args, partials)
        except Exception:  # noqa: BLE001  (a model that cannot follow this output: the hints below stay)
            found = ""
        if found:
            return found
        shifted = torch.cat([table[:, 1:], table[:, :1]], 1)
        if close(table=shifted):
            return ("page index off by one: logical page p of sequence b is block_table[b, p], not "
                    "block_table[b, p + 1]; the page of token pos is pos // PAGE_SIZE")
        if close(table=table + 1):
            return ("page index off by one: the physical page is block_table[b, p] itself, not one more; "
                    "token pos lies at row (page * PAGE_SIZE + pos % PAGE_SIZE) * HKV + kvh of the pool")
        if Hkv > 1:  # row page * PAGE_SIZE + slot of the pool taken as a row of D values: the heads forgotten
            def headless(c):
                rows = c.shape[0] * page_size
                return c.reshape(-1, D)[:rows].reshape(c.shape[0], page_size, 1, D).expand(-1, -1, Hkv, -1)
            if close(pool=(headless(k), headless(v))):
                return ("the KV head is missing from the pool's row: the pool is (pages, PAGE_SIZE, Hkv, D), so token "
                        "pos of KV head kvh lies at row (page * PAGE_SIZE + pos % PAGE_SIZE) * HKV + kvh, D values each")
            if close(address=NO_HKV):
                return HKV_HINT
        if close(address=NO_SLOT):
            return SLOT_HINT
        if Hkv > 1 and close(address=lambda page, pos, kvh, ps, hkv: page * ps * hkv + pos % ps + kvh):
            return ("the slot's stride in the pool is HKV rows, not 1: token pos of KV head kvh lies at row "
                    "(page * PAGE_SIZE + pos % PAGE_SIZE) * HKV + kvh, so the slot pos % PAGE_SIZE is multiplied by "
                    "HKV as well as the page (page * PAGE_SIZE * HKV + pos % PAGE_SIZE + kvh reads other heads' rows)")
        if close(pool=(k, k)):
            return ("your kernel loads V from K: v = tl.load(V + row * HEAD_DIM + d), the same rows as k but from the "
                    "V pointer")
        flat = table.reshape(-1)
        for x, what in ((B, "B (block_table.shape[0])"), (page_size, "PAGE_SIZE"), (Hkv, "HKV")):
            idx = torch.arange(B, device=table.device)[:, None] * x + arange_cols
            if x != table.shape[1] and int(idx.max()) < flat.numel() and close(table=flat[idx]):
                return (f"the block table's rows are {table.shape[1]} columns apart (max_pages, "
                        f"block_table.shape[1]), not {x}, {what} here: sequence b's row starts at BLOCK_TABLE + "
                        "b * max_pages")
        arange = torch.arange(table.shape[1], device=table.device)
        for skipped in (arange.expand_as(table), arange + table.shape[1] * torch.arange(B, device=table.device)[:, None]):
            if close(table=skipped):
                return ("the block table is skipped: a sequence's pages are anywhere in the pool, so logical page "
                        "p is physical page block_table[b, p] (load it from BLOCK_TABLE + b * max_pages + p)")
        if B > 1 and close(table=table[:1].expand_as(table)):
            return ("every sequence reads row 0 of the block table: sequence b's row starts at BLOCK_TABLE + "
                    "b * max_pages, so its logical page p is at BLOCK_TABLE + b * max_pages + p")
        if B * Hkv > 1:
            read = lengths_read()  # what the trace saw: program bh read the length of sequence bh % HKV
            if any(bh % Hkv != bh // Hkv for bh in read) and all(r == {bh % Hkv} for bh, r in read.items()):
                bh = next(bh for bh in read if bh % Hkv != bh // Hkv)
                return (f"{SWAP_HINT}. Program bh = {bh} of your split kernel loaded seq_lens[{bh % Hkv}] (bh % HKV), "
                        f"the length of sequence {bh % Hkv}; its sequence is bh // HKV = {bh // Hkv}")
            swapped = programs(*args, SWAPPED)
            if swapped is not None and close(model=swapped):
                return (SWAP_HINT + ": your result is what programs on sequence bh % HKV and KV head bh // HKV "
                        "give")
        for offset, what in query_slips(Hq, Hkv, D):
            moved = moved_queries(q, offset, Hkv)
            if moved is not None and close(model=reference(moved, k, v, seq_lens, table)):
                return ("your kernel loads the wrong queries: program (b, kvh) must load the G query heads that share "
                        "KV head kvh, q[b, kvh * GROUP + g] for g < GROUP, the elements (b * HKV * GROUP + kvh * GROUP "
                        f"+ g) * HEAD_DIM + d of q; your result is what loading {what} gives")
        if close(lens=[-(-n // page_size) * page_size for n in lens]):
            return ("the sequence's length is ignored in its last, partial page: keys at positions >= seq_lens[b] "
                    "must get score -inf (mask them with pos < seq_len, loads and scores alike)")
        if any(close(lens=[n + (n % st != 0) for n in lens]) for st in (1, INTERPRETER_BLOCK_N, GPU_BLOCK_N)):
            return ("the mask at the sequence's end is off by one: its keys are at positions 0 .. seq_lens[b] - 1, so "
                    "a key is valid where pos < end, with end = min(start + split_tokens, seq_len) (not pos <= end, "
                    "nor seq_len + 1): the key at position seq_lens[b] counts here")
        if close(lens=[n - 1 for n in lens]):
            return ("the sequence's last key is left out: its keys are at positions 0 .. seq_lens[b] - 1, all of them "
                    "valid, so end = min(start + split_tokens, seq_len) and valid = pos < end (not seq_len - 1)")
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
        if close(sm_scale=scale * scale * LOG2E):  # exp2 of (q·k) · qk_scale²: exp of (q·k) · scale² · log2(e)
            return ("the scale is applied twice: qk_scale multiplies the scores once, s = dot(q, k.T) * qk_scale (not "
                    "q * qk_scale as well)")
        if close(sm_scale=scale * LOG2E):
            return ("log2(e) in the scale but tl.exp in the softmax: use tl.exp2 with qk_scale = sm_scale * log2(e) "
                    "(in the split kernel and in the combine), or tl.exp with sm_scale alone")
        for split in splits:
            if close(split=split, rescale=False):
                return ("partials combined without rescaling: each split has its own max m_i, so weight its acc and "
                        "l by exp2(m_i - m), m = max over splits, before summing: out = sum(w * acc) / sum(w * l)")
            if close(split=split, rescale=math.log(2)):
                return ("the partial maxima are in natural-log units but the combine weighs them with exp2: keep m in "
                        "log2 units throughout, as the scores are (s = q·k * qk_scale, qk_scale = sm_scale * log2(e), "
                        "m_i = the max of s, p = exp2(s - m_i)); store m_i as it is, and the combine's w = exp2(m_i - m)")
            for denominator, what in (("plain", "sum(l_s), the partial sums unweighted"),
                                      ("weights", "sum(w), the weights alone")):
                if close(split=split, denominator=denominator):
                    return (f"the combine divides by {what}: out = sum(w * acc) / sum(w * l_s), each split's sum "
                            "rescaled by its weight w = exp2(m_s - m) as its acc is")
            if close(split=split, rescale=LOG2E):
                return ("the combine weighs the splits with exp, but m_i is in log2 units (qk_scale holds log2(e)): "
                        "w = exp2(m_i - m)")
        for split in range(16, cap + 1, 16):  # one split of the whole table too: the loop inside a split
            for step in (INTERPRETER_BLOCK_N, GPU_BLOCK_N):
                if step > split or split % step:
                    continue
                for forget, what in (("l", "running sum l_i"), ("acc", "accumulator acc")):
                    if close(split=split, step=step, forget=forget):
                        return (f"the {what} is not rescaled when the max grows: in the split kernel's loop, "
                                "alpha = exp2(m_i - m_new) must multiply both l_i and acc before this step's "
                                "terms are added: l_i = l_i * alpha + sum(p), acc = acc * alpha + dot(p, v)")
        for n_splits, size, block_n in dict.fromkeys(lesson_plan(B, Hkv, table.shape[1], page_size, gpu)
                                                     for gpu in (False, True)):
            for ranges, what in split_starts(n_splits, size, block_n, page_size, table.shape[1]):
                if close(counts=counted(ranges)):
                    return starts_hint(n_splits, size, what, ranges, max(lens))
        for split in splits:
            if close(lens=[min(n, cap // split * split) for n in lens]) or close(lens=[n // split * split for n in lens]):
                return ("the last, partial split is dropped: launch cdiv(tokens, split_tokens) splits, not "
                        "tokens // split_tokens, and let the last one stop at the sequence's end")
        if torch.isnan(o).any():
            rows = torch.isnan(o).any(-1).cpu()  # (B, Hq)
            missing = unstored()
            if missing:
                where = ""
                if bool((rows == rows[0]).all()) and not bool(rows[0].all()):
                    where = f" (query heads {', '.join(map(str, rows[0].nonzero()[:, 0].tolist()))} of every sequence)"
                return (f"{int(rows.sum())} (sequence, query head) rows are NaN{where}: the combine read partials that "
                        f"no split program stored ({missing}; the launcher makes them with torch.empty, NaN here). "
                        "Program (b, kvh, split) stores the query heads kvh * GROUP + g, g < GROUP, at slot "
                        "(b * HKV * GROUP + head) * splits + split, in every split, empty ones too")
            return (f"{int(rows.sum())} (sequence, query head) rows are NaN: never written (the combine's grid is "
                    "B * Hq programs, and a split kernel must store rows < GROUP of every split, empty ones too), or "
                    "0/0 from a sum of weights that is 0")
        return ""
    return hint


def _loop_slips(o, e, args, partials) -> str:
    """The hint of the split kernel's loop and store slips and of an inverted combine weight (``split_partials``,
    ``combined``), matched by the output (NaN where the model is NaN, close elsewhere), or by the partials stored."""
    q, k, _, seq_lens, table = args
    B, Hq, D = q.shape
    ps, Hkv = k.shape[1], k.shape[2]
    lens = [int(n) for n in seq_lens]
    oo, ee = o.double().cpu(), e.double().cpu()

    def same(model):
        if model is None or model.shape != oo.shape:
            return False
        nan = torch.isnan(model)
        if not torch.equal(nan, torch.isnan(oo)) or torch.isinf(oo).any():
            return False
        right = ~nan & ~torch.isnan(ee)
        differs = bool(nan.any()) or not torch.allclose(model[right], ee[right], atol=2e-2, rtol=2e-2)
        return differs and torch.allclose(oo[~nan], model[~nan], atol=2e-2, rtol=2e-2)

    stored = partials()
    if stored is not None and bool(torch.isinf(stored[0]).all()) and bool((stored[0] < 0).all()):
        return MAX_NEVER_UPDATED
    for n_splits, size, block_n in dict.fromkeys(lesson_plan(B, Hkv, table.shape[1], ps, gpu) for gpu in (False, True)):
        if stored is not None and stored[0].shape[-1] != n_splits:
            continue
        if stored is not None:  # a split with no key that stored l = NaN: its loop ran steps of all -inf scores
            m_s, l_s = stored[0], stored[1]
            if (bool((torch.isneginf(m_s) & torch.isnan(l_s)).any())
                    and same(combined(split_partials(args, n_splits, size, block_n, loop_end="split")))):
                return loop_past_end_hint(lens, n_splits, size)
        for kw, hint in (({"acc_over_l": True}, ACC_OVER_L), ({"l_axis": 0}, L_AXIS0)):
            model = split_partials(args, n_splits, size, block_n, **kw)
            if model is not None and same(combined(model)):
                return hint
        if same(combined(split_partials(args, n_splits, size, block_n), inverted=True)):
            return WEIGHT_INVERTED
    return ""


def _lengths_read(traces, B, Hkv) -> dict:
    """``{bh: elements of seq_lens it loaded}`` for every program of the split kernel (the launch of B * Hkv programs
    on its first axis that loads seq_lens, a (B,) int32 tensor), over its splits; ``{}`` when no launch is that."""
    for tr in traces:
        if not tr.launches or tr.launches[0].grid[0] != B * Hkv:
            continue
        lengths = [i for i, t in enumerate(tr.tensors) if tuple(t.shape) == (B,) and t.dtype.startswith("int")]
        read = {}
        for a in tr.accesses:
            if a.kind == "load" and a.tensor in lengths:
                read.setdefault(a.program[0], set()).update(int(x) for x in np.asarray(a.offsets).reshape(-1))
        if read:
            return read
    return {}


def _launch_args(traces, B: int, Hq: int, Hkv: int) -> str:
    """What the launcher passed that this input contradicts, read from the traced launches: the split kernel's HKV
    and GROUP (the query heads that share a KV head), the combine's grid; ``""`` when they agree or were not seen."""
    want = {"HKV": Hkv, "GROUP": Hq // Hkv}
    for tr in traces:
        for ln in tr.launches:
            if ln.kernel == "decode_combine" and ln.num_programs != B * Hq:
                return (f"the launcher runs decode_combine on a grid of {ln.num_programs} programs: it takes one per "
                        f"(sequence, query head), (B * Hq,) = ({B * Hq},) here, and each combines that head's splits")
            wrong = {k: ln.arg(k) for k in want if ln.kernel == "decode_split" and ln.arg(k) not in (None, want[k])}
            if wrong:
                said = " and ".join(f"{k}={v}" for k, v in wrong.items())
                return (f"the launcher passes decode_split {said}, and this input has Hq = {Hq} query heads over Hkv = "
                        f"{Hkv} KV heads: HKV = Hkv = {Hkv}, and GROUP = Hq // Hkv = {Hq // Hkv}, the query heads that "
                        "share a KV head")
    return ""


def _unstored(traces) -> str:
    """Elements that a launch loaded and none stored, of the tensors that a launch stores into (the partials
    between the split kernel and the combine): ``"M: 24 of 96, ..."``, or ``""``."""
    seen = {}  # tensor key -> (its name in the first launch, elements loaded, elements stored)
    for tr in traces:
        for i, t in enumerate(tr.tensors):
            name, loaded, stored = seen.get(t.key, (t.name, np.zeros(t.numel, bool), np.zeros(t.numel, bool)))
            seen[t.key] = (name, loaded | (tr.read_counts(i, "load").reshape(-1) > 0),
                           stored | (tr.read_counts(i, "store").reshape(-1) > 0))
    return ", ".join(f"{name}: {int((loaded & ~stored).sum())} of {loaded.size}" for name, loaded, stored in seen.values()
                     if stored.any() and (loaded & ~stored).any())


GENERIC = ("check the block-table lookup, the masks at the end of each sequence, and the combine's rescaling "
           "by exp2(m_i - m)")

READS_UNUSED = ("your kernel reads slots of the pool that hold no key of the sequence (past seq_lens[b] in its last "
                "page, or a page of no block table): they hold NaN here, as unused memory may, and with ordinary "
                "values there your result is right. Mask the K and V loads with the sequence's end "
                "(mask=valid[:, None], other=0.0, valid = pos < end): a score set to -inf afterwards does not "
                "help, since p = 0 times a NaN value is still NaN")


def _close_to(o, e, tol) -> bool:
    return bool(torch.allclose(o.double().cpu(), e.double().cpu(), atol=tol, rtol=tol * 5))


def _rerun(fn, args, kwargs):
    """``fn`` called again (traced, outputs poisoned), or None when the call fails in any way."""
    try:
        call = traced_call if traceable(list(args)) else None
        out = call(fn, *args, **kwargs)[0] if call else fn(*args, **kwargs)
    except Exception:  # noqa: BLE001  (whatever the learner's code raises: the graded call reports it)
        return None
    return out.detach().double().cpu() if isinstance(out, torch.Tensor) else None


def _hint(fn, clean_call, kwargs, models, tol, extra=""):
    """A wrong result's hint: a NaN output is worked out again on the clean pool (``clean_call``), where
    the slots the kernel should not read hold ordinary values; then the models of the usual mistakes; then
    ``extra``, what the case itself is about; then the generic words."""
    def hint(o, e, wrong):
        if torch.isnan(o).any():
            o2 = _rerun(fn, clean_call, kwargs)
            if o2 is not None and o2.shape == e.shape and not torch.isnan(o2).any():
                if _close_to(o2, e, tol):
                    return READS_UNUSED
                wrong2 = ~torch.isclose(o2, e.double().cpu(), atol=tol, rtol=tol * 5)
                found = models(o2, e, wrong2) or extra or GENERIC
                return (found + ". The NaN in your output come from slots of the pool that no sequence uses, which "
                        "hold NaN here as unused memory may: with ordinary values there, your output is wrong as "
                        "this says")
        return models(o, e, wrong) or extra or GENERIC
    return hint


def _stub_case(label, out, graded, traced: bool) -> Case | None:
    """Kernels that load and store nothing are the exercise's stubs; no launch at all and an output still as
    allocated (all poison), a launcher not written."""
    if not traced:
        return None
    traces = graded.traces
    idle = list(dict.fromkeys(t.launches[0].kernel for t in traces if t.launches and not t.accesses))
    if idle:
        names = " and ".join(idle)
        many = len(idle) > 1
        return Case(label, "todo", f"{names} ran and loaded and stored nothing",
                    f"{names} {'are' if many else 'is'} still the stub{'s' * many} of the exercise: write "
                    f"{'their bodies' if many else 'its body'} (the numbered steps in the comments of each kernel), "
                    "then check again")
    allocated = isinstance(out, torch.Tensor) and any(out.data_ptr() == a.buf.data_ptr() for a in graded.allocs)
    if not traces and allocated and out.is_floating_point() and bool(torch.isnan(out).all()):
        return Case(label, "todo", "decode_attention launched no kernel, and its output was never written",
                    "launch the split kernel and then the combine in the marked part of the launcher (their grids "
                    "and arguments are in the comments there)")
    return None


def _partials_oob(splits, B, Hq, D):
    """The out-of-bounds hint of a split count that is not a power of two: the combine's BLOCK_S lanes."""
    def hint(bad, default):
        sizes = {B * Hq * splits, B * Hq * splits * D}
        if splits & (splits - 1) and any(o.kind == "load" and o.numel in sizes for o in bad):
            return (f"your combine reads past the partials: m, l and acc hold SPLITS = {splits} values a head here (not a "
                    f"power of two), and BLOCK_S = {1 << (splits - 1).bit_length()} lanes. Mask its loads with "
                    "s < SPLITS (other=-inf for m, 0 for l and acc), and find head bh's partials at bh * SPLITS + s "
                    "(SPLITS a head, not BLOCK_S)")
        return ""
    return hint


def _graded(label, mod, args, dtype, sm_scale=None, *, splits=None, extra="", loose=1):
    """One graded call on the NaN-poisoned pool, checked as ``core.attempt`` does, with this lesson's hints;
    ``loose`` widens the tolerance that many times, for a case whose data leaves fp32 less room."""
    expected = reference(*args, sm_scale=sm_scale)
    tol = loose * (2e-3 if dtype == torch.float16 else (2e-5 if mode.INTERPRET else 1e-2))
    q, k, v, seq_lens, table = args
    kp, vp = poisoned(k, v, seq_lens, table)
    call = (padded(q), padded(kp), padded(vp), seq_lens, table)  # a load past the end reads a loud value
    clean = (padded(q), padded(k), padded(v), seq_lens, table)
    kwargs = {} if sm_scale is None else {"sm_scale": sm_scale}
    fn = mod.decode_attention
    block_n = INTERPRETER_BLOCK_N if mode.INTERPRET else GPU_BLOCK_N  # the lesson launcher's, as it runs here
    if not extra and block_n > k.shape[1]:
        extra = f"{GENERIC}; and {_spanning(block_n, k.shape[1])}"
    B, Hq, D = q.shape
    hints = [_address_oob(args)] + ([_partials_oob(splits, B, Hq, D)] if splits else [])

    def oob_hint(bad, default):
        for h in hints:
            try:
                found = h(bad, default)
            except Exception:  # noqa: BLE001  (a diagnosis never crashes the grader: the default hint stays)
                found = ""
            if found:
                return found
        return ""
    g = graded_call(label, fn, call, kwargs=kwargs, oob_hint=oob_hint,
                    mask="valid = pos < end, each token against its sequence's length (seq_lens[b]), on the loads")
    if isinstance(g, Case):
        return g
    out = g.out
    bad = returned_case(label, g)
    if bad is not None:
        return bad
    stub = _stub_case(label, out, g, traceable(list(call)))
    if stub is not None:
        return stub
    models = (_diagnose(args, lambda: _unstored(g.traces), lambda: _lengths_read(g.traces, B, k.shape[2]),
                        lambda: stored_partials(g.allocs, B, Hq, D), lambda: _launch_args(g.traces, B, Hq, k.shape[2]))
              if sm_scale is None
              else (lambda o, e, w: "pass sm_scale through to the kernel instead of 1/sqrt(D)"))
    case = written_case(label, out, expected, g, dtype=dtype, atol=tol, rtol=tol * 5,
                        diagnose=_hint(fn, clean, kwargs, models, tol, extra))
    if case.status == "todo":
        return case
    changed = g.snap.case(label, g.fn_name)
    if changed is not None:
        return changed
    return (_q_reloaded(label, g.traces) if case.status == "pass" else None) or case


Q_RELOADED = ("the queries are loaded more than once a split: load the (BLOCK_G, D) block of q once, before the loop "
              "over the split's tokens, and keep it on chip; only K and V change from step to step")


def _q_reloaded(label, traces) -> Case | None:
    """A failing case when a split kernel loaded an element of q more often than once a split (the ``splits`` it
    was launched with): q loaded again inside the token loop."""
    for tr in traces:
        for ln in tr.launches:
            splits = ln.arg("splits")
            if ln.kernel == "decode_split" and isinstance(splits, int) and splits > 0:
                return loaded_again(label, [tr], {"Q": (splits, Q_RELOADED)})
    return None


def _label(lens, ps, Hq, Hkv, D, dtype):
    return f"B={len(lens)} lengths {lens} page {ps} Hq={Hq} Hkv={Hkv} D={D} {str(dtype)[6:]}"


# ----- the launch plans the graded kernel runs under -------------------------------------------------

INTERPRETER_BLOCK_N, GPU_BLOCK_N = 16, 64  # tokens a step of the lesson's launcher: interpreter, GPU
GPU_SM_PROGRAMS = 4 * 132


def lesson_plan(B, Hkv, max_pages, page_size, gpu: bool):
    """(splits, split_tokens, block_n) of the lesson's launcher (its ``split_plan``): 4 splits in the interpreter,
    on a GPU enough for about four programs an SM, one per 256 tokens of the table at most."""
    cdiv = lambda a, b: -(-a // b)
    capacity = max_pages * page_size
    block_n = GPU_BLOCK_N if gpu else INTERPRETER_BLOCK_N
    splits = max(1, min(cdiv(GPU_SM_PROGRAMS, B * Hkv), cdiv(capacity, 256))) if gpu else 4
    split_tokens = cdiv(cdiv(capacity, splits), block_n) * block_n
    return cdiv(capacity, split_tokens), split_tokens, block_n


def _max_pages(lens, ps):
    return max(-(-n // ps) for n in lens) + 1  # as ``paged``: one spare column


@contextlib.contextmanager
def gpu_plan(mod):
    """The module's launcher planned as on a GPU, in the interpreter too: its ``BLOCK_N`` set to the GPU's 64
    tokens a step and its ``INTERPRET`` to False (the GPU's split counts), put back afterwards. Yields whether
    the module has them (a launcher of the learner's own keeps its plan)."""
    saved = {}
    names = getattr(mod, "__dict__", {})
    for name, value in (("BLOCK_N", GPU_BLOCK_N), ("INTERPRET", False)):
        if isinstance(names.get(name), int):
            saved[name] = names[name]
            setattr(mod, name, value)
    try:
        yield "BLOCK_N" in saved
    finally:
        for name, value in saved.items():
            setattr(mod, name, value)


# (lengths, page_size, Hq, Hkv, D). RESIDUES: the interpreter's plan gives 3 splits of 48 tokens (a table
# of 9 pages of 16): lengths of 2 splits exactly, one more than 1, one less, 2 and a part, and 1 token.
# On a GPU its plan gives 3 splits of 256 tokens for a table of 23 pages of 32.
RESIDUES = ([96, 49, 1, 47, 128], 16, 4, 2, 64)
RESIDUES_GPU = ([512, 257, 1, 255, 700], 32, 4, 2, 64)
# The GPU's plan: 64 tokens a step over pages of 16 (a step spans 4 pages) in one split; over pages of 32 in
# 3 splits of 256 tokens (700 = 2 * 256 + 188; 90 leaves two splits empty).
GPU_CASES = [([37, 200], 16, 8, 2, 64), ([700, 90], 32, 4, 1, 128)]


def _residue_case(mod, gen):
    lens, ps, Hq, Hkv, D = RESIDUES if mode.INTERPRET else RESIDUES_GPU
    splits, size, _ = lesson_plan(len(lens), Hkv, _max_pages(lens, ps), ps, gpu=not mode.INTERPRET)
    label = (f"{_label(lens, ps, Hq, Hkv, D, torch.float32)}: {splits} split{'s' * (splits > 1)} of {size} tokens, "
             "lengths of every residue against them")
    extra = (f"this case has {splits} splits per sequence (not a power of two), and lengths that end on a split's "
             "end, one past it, one before it, and inside the first split (the later splits are empty). In the "
             "combine, mask the partials' loads with s < SPLITS (other=-inf for m, 0 for l and acc) and find them at "
             "bh * SPLITS + s (SPLITS, not BLOCK_S); in the split kernel, stop at end = min(start + split_tokens, "
             "seq_len), and store an empty split's m = -inf, l = 0, acc = 0 all the same")
    return _graded(label, mod, paged(lens, ps, Hq, Hkv, D, torch.float32, gen), torch.float32, splits=splits,
                   extra=extra)


#: How far below zero (log2 units) every score of ``_low_scores_case`` lies: 2**-200 underflows fp32 to 0.
LOW_GAP = 200


def _low_scores_case(mod, gen):
    """Every score about LOW_GAP log2 units below zero, on RESIDUES' 3 splits (the combine's fourth lane masked):
    a running max started at 0 rather than -inf, or a masked split's m loaded as 0 rather than -inf, becomes the
    max, and exp2(s - 0) underflows to 0 for every key, so l = 0 and out = 0 / 0. With the scores near zero that
    slip is exact, since any m at or above the true max rescales the sums alike."""
    lens, ps, Hq, Hkv, D = RESIDUES if mode.INTERPRET else RESIDUES_GPU
    splits, size, _ = lesson_plan(len(lens), Hkv, _max_pages(lens, ps), ps, gpu=not mode.INTERPRET)
    q, k, v, seq_lens, table = paged(lens, ps, Hq, Hkv, D, torch.float32, gen)
    q, k, v = quarters(q, k, v)
    q[..., 0] = -round(LOW_GAP * math.sqrt(D) / LOG2E * 4) / 4  # q·k / sqrt(D) · log2(e) about -LOW_GAP, give or take
    k[..., 0] = 1.0
    label = (f"{_label(lens, ps, Hq, Hkv, D, torch.float32)}: {splits} splits, every score about {LOW_GAP} (log2 "
             "units) below zero")
    case = _graded(label, mod, (q, k, v, seq_lens, table), torch.float32, splits=splits,
                   loose=10 if mode.INTERPRET else 1)
    if case.status == "fail" and any(w in case.detail for w in ("NaN", "nan", "inf")):
        case.hint = (f"every score lies about {LOW_GAP} (log2 units) below zero, so a max of 0 where -inf belongs "
                     "becomes the max and exp2(s - 0) underflows to 0 for every key: l = 0 and out = 0 / 0. Start "
                     "the split kernel's running max at -inf (tl.full([BLOCK_G], float('-inf'), tl.float32)), and "
                     "load the combine's masked splits with other=float('-inf') for m (0 for l and acc). With "
                     "scores near zero a 0 there is harmless: any max at or above the true one rescales alike")
    return case


#: (lengths, page_size, Hq, Hkv, D) of the case whose first key scores far above every later one
FALLING = ([150], 16, 4, 2, 64)
FALLING_GAP = 216  # log2 units between key 0's score and the others': 2**216 overflows fp32


def _falling_max_case(mod, gen):
    """Key 0 scores about FALLING_GAP log2 units above every later key of the sequence, so each later step of the
    first split has a lower block max. A running max taken from the block alone (m_new = tl.max(s, 1)) then falls,
    and alpha = exp2(m_i - m_new) overflows to inf; with tl.maximum(m_i, ...) it never exceeds 1."""
    lens, ps, Hq, Hkv, D = FALLING
    q, k, v, seq_lens, table = paged(lens, ps, Hq, Hkv, D, torch.float32, gen)
    c = FALLING_GAP * math.sqrt(D) / (2 * LOG2E)  # q·k differs by 2c along dimension 0, times 1/sqrt(D) and log2(e)
    q[..., 0] = c
    k[..., 0] = -1.0
    k[int(table[0, 0]), 0, :, 0] = 1.0  # token 0 of sequence 0, every KV head
    label = _label(lens, ps, Hq, Hkv, D, torch.float32) + ", key 0 far above the rest"
    case = _graded(label, mod, (q, k, v, seq_lens, table), torch.float32)
    if case.status == "fail" and any(w in case.detail for w in ("NaN", "nan", "inf")):
        case.hint = (f"key 0 scores about {FALLING_GAP} (log2 units) above every later key, so each later step's block "
                     "max is lower: the running max must never fall, m_new = tl.maximum(m_i, tl.max(s, axis=1)). With "
                     f"the block's max alone, alpha = exp2(m_i - m_new) is 2^{FALLING_GAP}, which overflows to inf")
    return case


def _spanning(block_n, ps) -> str:
    """The hint of a kernel that is wrong when a step of ``block_n`` tokens spans pages of ``ps``."""
    return (f"a step of {block_n} tokens over pages of {ps} spans {block_n // ps} pages here: look up each token's "
            "own page, page = block_table[b, pos // PAGE_SIZE] for the vector pos (not one page for the whole step), "
            "and its slot pos % PAGE_SIZE; the step's last tokens may lie past the split's end (mask them)")


def _gpu_plan_cases(mod, gen):
    for lens, ps, Hq, Hkv, D in GPU_CASES:
        splits, size, block_n = lesson_plan(len(lens), Hkv, _max_pages(lens, ps), ps, gpu=True)
        args = paged(lens, ps, Hq, Hkv, D, torch.float32, gen)
        with gpu_plan(mod) as forced:
            plan = (f"the GPU's launch plan: {block_n} tokens a step over pages of {ps} (a step spans {block_n // ps} "
                    f"pages), {splits} split{'s' * (splits > 1)} of {size} tokens" if forced else "the module's own plan")
            extra = (f"right at the interpreter's {INTERPRETER_BLOCK_N} tokens a step, wrong at the GPU's "
                     f"{block_n}: " + _spanning(block_n, ps))
            case = _graded(f"{_label(lens, ps, Hq, Hkv, D, torch.float32)}, {plan}", mod, args, torch.float32,
                           splits=splits, extra=extra)
        yield case


# ----- offsets into the pool: int64, seen in the tracer -----------------------------------------------


@contextlib.contextmanager
def _narrow_offsets(traces, threshold: int):
    """Note every pointer addition whose offsets are narrower than 64 bits and reach ``threshold`` elements:
    yields a list of ``(launch index, resulting pointer block, dtype, largest offset)``. The tracer, which wraps
    the same addition inside this one at each launch, tags each resulting block with the tensor it points into."""
    seen = []

    def wrapper(real):
        def addptr(ptr, offset, *args, **kwargs):
            out = real(ptr, offset, *args, **kwargs)
            with contextlib.suppress(Exception):  # never let the watch break a launch
                ty = offset.dtype
                bits = getattr(getattr(ty, "scalar", ty), "primitive_bitwidth", 64)
                if bits < 64:
                    top = int(np.abs(np.asarray(offset.data).astype(np.int64)).max(initial=0))
                    if top >= threshold:
                        seen.append((len(traces), out, str(ty), top))
            return out
        return addptr

    with triton_internals.builder_wrapped({"create_addptr": wrapper}):
        yield seen


def narrow_offsets(fn, args, threshold: int, wanted) -> list | None:
    """``fn(*args)`` traced, under poisoned allocations: ``(tensor name, dtype, largest offset)`` of every pointer
    addition narrower than 64 bits whose offsets reach ``threshold`` elements, into a tensor argument for which
    ``wanted(TensorInfo)`` holds. None when the call cannot be traced or fails (other cases report that)."""
    if not traceable(list(args)):
        return None
    from ..traffic.interpreter import ORIGIN_TAG  # the tracer's tag: which tensor a pointer block points into

    try:
        with poisoned_allocations(), traffic.capture(stop_on_oob=True) as traces, \
                _narrow_offsets(traces, threshold) as seen:
            fn(*args)
    except Exception:  # noqa: BLE001  (a failing call is the other cases' business)
        return None
    narrow = []
    for j, out, ty, top in seen:
        tag = getattr(out, ORIGIN_TAG, None)
        if tag is None or j >= len(traces) or tag >= len(traces[j].tensors):
            continue
        info = traces[j].tensors[tag]
        if wanted(info):
            narrow.append((info.name, ty, top))
    return narrow


def _pool_offsets_case(mod, gen):
    """The offsets into the pool must be int64: at a GPU's pool sizes page * (elements of a page) passes 2**31."""
    lens, ps, Hq, Hkv, D = FIXED[0]
    q, k, v, seq_lens, table = paged(lens, ps, Hq, Hkv, D, torch.float32, gen)
    page = ps * Hkv * D
    label = (f"{_label(lens, ps, Hq, Hkv, D, torch.float32)}: offsets into the pool in int64 (a pool of more than "
             "2**31 elements, 4 GiB of fp16, is common on a GPU)")
    call = (padded(q), padded(k), padded(v), seq_lens, table)
    pool = {t.data_ptr() for t in call[1:3]}  # the caches as passed (a launcher may view them in another shape)
    narrow = narrow_offsets(mod.decode_attention, call, page,
                            lambda info: info.key[0] in pool or tuple(info.shape) == tuple(k.shape))
    if narrow is None:
        return None
    if not narrow:
        return Case(label, "pass")
    name, ty, top = max(narrow, key=lambda n: n[2])
    return Case(label, "fail",
                f"the tracer saw {ty} offsets up to {top} elements added to the pointer {name} into the pool "
                f"(a page is {page} elements here)",
                "the offsets into the pool are computed in int32: page * PAGE_SIZE * HKV * HEAD_DIM passes 2**31 once "
                "the pool holds more than 2**31 elements (a 4 GiB fp16 cache; a GPU's pool is often larger), and the "
                "address wraps around. Convert the page to int64 before multiplying: "
                "page.to(tl.int64) * PAGE_SIZE + pos % PAGE_SIZE, then * HKV + kvh, then * HEAD_DIM")


def grade(mod):
    gen = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.float16):
        for lens, ps, Hq, Hkv, D in FIXED if dtype == torch.float32 else FIXED[:1]:
            yield _graded(_label(lens, ps, Hq, Hkv, D, dtype), mod, paged(lens, ps, Hq, Hkv, D, dtype, gen), dtype)
    yield _residue_case(mod, gen)
    yield _falling_max_case(mod, gen)
    yield _low_scores_case(mod, gen)
    yield from _gpu_plan_cases(mod, gen)
    case = _pool_offsets_case(mod, gen)
    if case is not None:
        yield case
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
