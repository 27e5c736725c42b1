"""Decode attention (lesson 09, part 2), the fast path: the lesson's split-KV decode with a launch
planned from the work and the GPU's SMs, page sizes from 1 token, D 64/128/256, and inputs whose
values are never trusted, behind a lean launch (``decode_attention``, as
``solutions.decode_attention.decode_attention`` plus ``config`` and ``max_seq_len``).

The kernels are the lesson's two (Flash-Decoding, Dao et al. 2023), grown in three ways:

1. **Splits sized on the device.** Each program reads its sequence's length and takes its share of
   the sequence's steps of ``BLOCK_N`` tokens, the shares as equal as whole steps allow: the plan
   only says how many splits (``decode_plan``: from the SMs, shared memory and a bound on the
   lengths, which the host cannot read without a sync), and a sequence far shorter than that bound
   still spreads over all of its splits. With one split the split kernel normalizes and writes the
   output itself: one launch, no partials.
2. **Values checked in the kernel, at no sync.** A block-table entry outside the pool, a length of 0
   or below, or past the table (``> max_pages · page_size``): nothing outside the tensors is read for
   it (a page index is clamped into the pool, a bad length runs no step), and that sequence's row of
   the output is NaN, every head ("flagged"; a zero-length sequence has no softmax to take either).
   The checks are a clamp and a compare per step on the page indices already loaded: no extra
   memory traffic. (A clamp rather than a mask built from the loaded page: whatever a mask would say,
   a clamped address lies inside the pool.)
3. **Any page size.** Each token finds its own page (``block_table[b, pos // PAGE_SIZE]``), so a
   step may span many pages (page 1) or lie inside one (page 256); page sizes are powers of two, and
   the head dimension 64, 128 or 256 (``tl.arange`` needs a power of two; D 96 raises ValueError).

Traffic: K and V once (2·L·Hkv·D elements for L cached tokens), q and out; the partials
B·Hq·splits·(D + 2) fp32, written once and read once (none at one split).

On GPUs that have it (Hopper), both kernels are launched with programmatic dependent launch (as
``kernels.attention``): the combine's programs get onto the SMs while the split kernel's last
programs finish, and wait (``gdc_wait``) for its partials before reading them.

``tuned_decode_attention`` launches the plan the ordinary way (``kernel[grid]``), ``config`` overriding
it; ``decode_attention`` keeps the compiled launchers per key (``lean.Lean``: dtypes, shapes, strides,
alignment, device, the scale, the ``max_seq_len`` bucket) with the plan, so that a decode step costs
a lookup, one or two allocations and one or two launches. The benchmarks measure the lean path.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from .. import decode_attention as da
from .._checks import ConfigSpec, integer, power_of_two
from ..decode_attention import reference  # noqa: F401 (same API)
from . import decode_plan
from .lean import Lean, pdl_meta
from .lean import tensor_key as _t

__all__ = ["decode_attention", "tuned_decode_attention", "check_inputs", "reference", "HEAD_DIMS", "LEANS",
           "forget"]

HEAD_DIMS = (64, 128, 256)
LOG2E = da.LOG2E
#: Both kernels launched with programmatic dependent launch where the GPU has it (``lean.pdl_meta``).
#: Read when a key's entry is made.
DECODE_PDL = True

_CONFIG = ConfigSpec({"BLOCK_N": (power_of_two, 16, 256), "splits": (integer, 1, 1024),
                      "num_warps": (power_of_two, 1, 16), "num_stages": (integer, 1, 6),
                      "combine_warps": (power_of_two, 1, 16)},
                     required=("BLOCK_N",), defaults={"num_warps": 4, "num_stages": 2, "combine_warps": 4})


@triton.jit
def decode_split_kv(
    Q,  # pointer to q, (B, Hq, D), contiguous
    K,  # pointer to k_cache, (num_pages, PAGE_SIZE, Hkv, D), contiguous
    V,  # pointer to v_cache, same layout as K
    SEQ_LENS,  # pointer to seq_lens, (B,) int32; values not trusted
    BLOCK_TABLE,  # pointer to block_table, (B, max_pages) int32, contiguous; values not trusted
    O,  # pointer to out, (B, Hq, D): written here at one split
    M,  # pointer to the partial maxima, (B, Hq, splits) fp32, log2 units (unused at one split)
    L,  # pointer to the partial sums, (B, Hq, splits) fp32; NaN flags a sequence
    ACC,  # pointer to the partial accumulators, (B, Hq, splits, D) fp32
    num_pages,  # pages in the pool: a table entry outside 0 .. num_pages - 1 flags its sequence
    max_pages,  # columns of the block table
    qk_scale,  # sm_scale · log2(e): scores in log2 units, so that exp2 gives exp
    splits,  # splits per sequence; each takes an equal share of its sequence's steps
    HKV: tl.constexpr,  # KV heads
    GROUP: tl.constexpr,  # G = Hq // Hkv, query heads per KV head
    BLOCK_G: tl.constexpr,  # G rounded up to a power of two, at least 16 (an MMA's rows; Triton would pad fewer)
    HEAD_DIM: tl.constexpr,  # D, a power of two
    PAGE_SIZE: tl.constexpr,  # tokens per page, a power of two
    BLOCK_N: tl.constexpr,  # tokens per step, a power of two
    ONE_SPLIT: tl.constexpr,  # splits == 1: normalize and write O, no partials
    PDL: tl.constexpr = False,  # launched with programmatic dependent launch
):
    bh = tl.program_id(0)  # which (sequence, KV head)
    split = tl.program_id(1)  # which share of the sequence's steps
    b, kvh = bh // HKV, bh % HKV
    g = tl.arange(0, BLOCK_G)  # the query heads kvh·G .. kvh·G + G - 1 share this KV head
    d = tl.arange(0, HEAD_DIM)
    heads = kvh * GROUP + g
    if PDL:
        gdc_wait()  # q, the cache and the lengths may be the previous kernel's output
    seq_len = tl.load(SEQ_LENS + b)
    flagged = (seq_len < 1) | (seq_len > max_pages * PAGE_SIZE)  # a length the table cannot hold
    n = tl.where(flagged, 0, seq_len)  # a flagged sequence runs no step: nothing past its table row is read
    per = tl.cdiv(tl.cdiv(n, BLOCK_N), splits) * BLOCK_N  # this sequence's tokens a split, whole steps
    start = split * per
    end = tl.minimum(start + per, n)
    q = tl.load(Q + (b * HKV * GROUP + heads)[:, None] * HEAD_DIM + d[None, :], mask=g[:, None] < GROUP, other=0.0)

    m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)  # running max (log2 units)
    l_i = tl.zeros([BLOCK_G], tl.float32)  # running sum of exp2(s - m_i)
    acc = tl.zeros([BLOCK_G, HEAD_DIM], tl.float32)  # running sum of exp2(s - m_i) · v
    stray = tl.zeros([BLOCK_N], tl.int32)  # tokens whose page lies outside the pool
    row0 = b.to(tl.int64) * max_pages  # this sequence's row of the block table
    for t in range(start, end, BLOCK_N):
        pos = t + tl.arange(0, BLOCK_N)  # logical token positions
        valid = pos < end  # the last step may run past the sequence
        page = tl.load(BLOCK_TABLE + row0 + pos // PAGE_SIZE, mask=valid, other=0)
        safe = tl.minimum(tl.maximum(page, 0), num_pages - 1)  # clamped into the pool: no stray address
        stray += (page != safe).to(tl.int32)  # a page outside the pool flags the sequence
        page = safe
        row = (page.to(tl.int64) * PAGE_SIZE + pos % PAGE_SIZE) * HKV + kvh  # (page, slot, head) of the pool
        k = tl.load(K + row[:, None] * HEAD_DIM + d[None, :], mask=valid[:, None], other=0.0)
        v = tl.load(V + row[:, None] * HEAD_DIM + d[None, :], mask=valid[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k)) * qk_scale  # (BLOCK_G, BLOCK_N) scores, log2 units
        s = tl.where(valid[None, :], s, float("-inf"))  # keys past the end do not exist
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    if PDL:
        gdc_launch_dependents()  # the combine may get onto the SMs now; it waits for these stores
    flagged = flagged | (tl.max(stray, axis=0) > 0)
    l_i = tl.where(flagged, float("nan"), l_i)  # NaN carries through the combine to every head and d

    if ONE_SPLIT:
        o = acc / l_i[:, None]  # a zero-length or flagged sequence: NaN
        tl.store(O + (b * HKV * GROUP + heads)[:, None] * HEAD_DIM + d[None, :], o.to(O.dtype.element_ty),
                 mask=g[:, None] < GROUP)
    else:
        part = (b * HKV * GROUP + heads) * splits + split  # this split's slot of each query head
        tl.store(M + part, m_i, mask=g < GROUP)
        tl.store(L + part, l_i, mask=g < GROUP)
        tl.store(ACC + part[:, None] * HEAD_DIM + d[None, :], acc, mask=g[:, None] < GROUP)


@triton.jit
def decode_merge(
    M,  # pointer to the partial maxima, (B, Hq, splits) fp32, log2 units
    L,  # pointer to the partial sums, (B, Hq, splits) fp32
    ACC,  # pointer to the partial accumulators, (B, Hq, splits, D) fp32
    O,  # pointer to out, (B, Hq, D), contiguous
    splits,  # splits per sequence
    HEAD_DIM: tl.constexpr,  # D
    BLOCK_S: tl.constexpr,  # splits merged a step, a power of two
    PDL: tl.constexpr = False,  # launched with programmatic dependent launch
):
    bh = tl.program_id(0)  # which (sequence, query head)
    d = tl.arange(0, HEAD_DIM)
    m = float("-inf")
    l = 0.0
    o = tl.zeros([HEAD_DIM], tl.float32)
    if PDL:
        gdc_wait()  # the split kernel's partials
    for s0 in range(0, splits, BLOCK_S):  # lesson 05's rule, BLOCK_S partials at a time
        s = s0 + tl.arange(0, BLOCK_S)
        m_s = tl.load(M + bh * splits + s, mask=s < splits, other=float("-inf"))
        l_s = tl.load(L + bh * splits + s, mask=s < splits, other=0.0)
        acc = tl.load(ACC + (bh * splits + s)[:, None] * HEAD_DIM + d[None, :], mask=s[:, None] < splits, other=0.0)
        m_new = tl.maximum(m, tl.max(m_s, axis=0))
        alpha = tl.exp2(m - m_new)  # all -inf so far (a zero-length sequence): NaN, the flag
        w = tl.exp2(m_s - m_new)  # an empty split (m = -inf) weighs 0
        l = l * alpha + tl.sum(l_s * w, axis=0)  # a flagged split's NaN sum: NaN
        o = o * alpha + tl.sum(acc * w[:, None], axis=0)
        m = m_new
    tl.store(O + bh * HEAD_DIM + d, (o / l).to(O.dtype.element_ty))


def check_inputs(q, k_cache, v_cache, seq_lens, block_table, sm_scale):
    """The lesson's checks of what the host knows (shapes, dtypes, devices; ValueError naming what is wrong)
    with this kernel's head dims and page sizes from 1. The values of ``seq_lens`` and ``block_table`` are
    the kernel's to check (module docstring, 2.): reading them here would cost a device sync."""
    return da.check_inputs(q, k_cache, v_cache, seq_lens, block_table, sm_scale, check_values=False,
                           head_dims=HEAD_DIMS, min_page_size=1)


def _bucket(max_seq_len):
    """``max_seq_len`` rounded up to a power of two: a growing sequence changes the plan's key rarely."""
    n = integer("max_seq_len", max_seq_len, 1)
    return 1 << (n - 1).bit_length()


def _plan(q, k_cache, block_table, max_seq_len, config=None) -> decode_plan.Plan:
    """``decode_plan``'s plan for these shapes, or ``config``'s."""
    B, Hq, D = q.shape
    _, page_size, Hkv, _ = k_cache.shape
    max_pages = block_table.shape[1]
    if config is None:
        return decode_plan.plan(B, Hkv, D, q.element_size(), page_size, max_pages, q.device, max_seq_len)
    cfg = _CONFIG(config, "config")
    splits = cfg.get("splits")
    if splits is None:
        splits = decode_plan.plan(B, Hkv, D, q.element_size(), page_size, max_pages, q.device, max_seq_len).splits
    block_s = max(1, min(triton.next_power_of_2(splits), 4096 // D))
    return decode_plan.Plan(cfg["BLOCK_N"], splits, cfg["num_warps"], cfg["num_stages"], cfg["combine_warps"], block_s)


def _metas(q, k_cache, plan):
    """The two kernels' constexprs and launch options."""
    B, Hq, D = q.shape
    _, page_size, Hkv, _ = k_cache.shape
    group = Hq // Hkv
    extra = pdl_meta(q.device, DECODE_PDL)
    split = dict(HKV=Hkv, GROUP=group, BLOCK_G=max(16, triton.next_power_of_2(group)), HEAD_DIM=D,
                 PAGE_SIZE=page_size, BLOCK_N=plan.block_n, ONE_SPLIT=plan.one_split,
                 num_warps=plan.num_warps, num_stages=plan.num_stages, **extra)
    merge = dict(HEAD_DIM=D, BLOCK_S=plan.block_s, num_warps=plan.combine_warps, **extra)
    return split, merge


def _workspace(q, plan):
    """(out, m, l, acc): the partials as views of one fp32 buffer (acc first: every view 16-byte aligned
    where B·Hq·splits is a multiple of 4); at one split, out stands in for them (never touched)."""
    B, Hq, D = q.shape
    out = torch.empty_like(q)
    if plan.one_split:
        return out, out, out, out
    n = B * Hq * plan.splits
    ws = torch.empty(n * (D + 2), device=q.device, dtype=torch.float32)
    return out, ws[n * D: n * D + n], ws[n * D + n:], ws[: n * D]


def tuned_decode_attention(q, k_cache, v_cache, seq_lens, block_table, sm_scale=None, config=None,
                           max_seq_len=None):
    """The lesson's ``decode_attention`` on the fast path's kernels and plan, launched the ordinary way;
    ``config`` ({BLOCK_N, splits, num_warps, num_stages, combine_warps}) launches that plan instead,
    ``max_seq_len`` bounds the lengths more tightly than the block table (module docstring)."""
    sm_scale = check_inputs(q, k_cache, v_cache, seq_lens, block_table, sm_scale)
    hint = None if max_seq_len is None else _bucket(max_seq_len)
    plan = _plan(q, k_cache, block_table, hint, config)
    q, k_cache, v_cache, seq_lens, block_table = (t.contiguous() for t in (q, k_cache, v_cache, seq_lens, block_table))
    split_meta, merge_meta = _metas(q, k_cache, plan)
    out, m, l, acc = _workspace(q, plan)
    B, Hq, D = q.shape
    Hkv = k_cache.shape[2]
    decode_split_kv[(B * Hkv, plan.splits)](q, k_cache, v_cache, seq_lens, block_table, out, m, l, acc,
                                             k_cache.shape[0], block_table.shape[1], sm_scale * LOG2E, plan.splits,
                                             **split_meta)
    if not plan.one_split:
        decode_merge[(B * Hq,)](m, l, acc, out, plan.splits, **merge_meta)
    return out


_SPLIT = Lean(decode_split_kv)
_COMBINE = Lean(decode_merge)


def decode_attention(q, k_cache, v_cache, seq_lens, block_table, sm_scale=None, config=None, max_seq_len=None):
    """``(B, Hq, D)``, as ``tuned_decode_attention``; ``config`` takes its ordinary launch. A sequence
    whose length or pages the cache cannot hold gets a NaN row (module docstring, 2.)."""
    try:
        if config is not None or (sm_scale is not None and type(sm_scale) not in (float, int)):
            raise TypeError  # a config, or a tensor scale, say: the ordinary path
        hint = None if max_seq_len is None else _bucket(max_seq_len)
        key = (_t(q), _t(k_cache), _t(v_cache), _t(seq_lens), _t(block_table), sm_scale, type(sm_scale), hint)
        e = _SPLIT.get(key)
    except (AttributeError, TypeError):
        return tuned_decode_attention(q, k_cache, v_cache, seq_lens, block_table, sm_scale, config, max_seq_len)
    if e is None:
        return _first(key, q, k_cache, v_cache, seq_lens, block_table, sm_scale, hint)
    prepared, combine, ws_template = e.info
    tensors = (q, k_cache, v_cache, seq_lens, block_table)
    if not prepared:
        tensors = tuple(t.contiguous() for t in tensors)
    out = torch.empty_like(tensors[0])
    if combine is None:  # one split: one launch, no partials
        if e.lean:  # addresses as ints: the launcher then skips a driver query per pointer
            o = out.data_ptr()
            e(*(t.data_ptr() for t in tensors), o, o, o, o)
        else:
            e(*tensors, out, out, out, out)
        return out
    ws = torch.empty_like(ws_template)
    n = ws.numel() // (tensors[0].shape[2] + 2)  # B·Hq·splits partials
    if e.lean:
        a = ws.data_ptr()
        m, l = a + 4 * n * tensors[0].shape[2], a + 4 * n * (tensors[0].shape[2] + 1)
        e(*(t.data_ptr() for t in tensors), out.data_ptr(), m, l, a)
        combine(m, l, a, out.data_ptr())
    else:
        D = tensors[0].shape[2]
        m, l, acc = ws[n * D: n * D + n], ws[n * D + n:], ws[: n * D]
        e(*tensors, out, m, l, acc)
        combine(m, l, acc, out)
    return out


def _first(key, q, k_cache, v_cache, seq_lens, block_table, sm_scale, hint):
    """The plan for this key, launched through both Leans: their entries kept, the plan with them."""
    sm_scale = check_inputs(q, k_cache, v_cache, seq_lens, block_table, sm_scale)
    tensors = (q, k_cache, v_cache, seq_lens, block_table)
    prepared = all(t.is_contiguous() for t in tensors)
    q, k_cache, v_cache, seq_lens, block_table = (t.contiguous() for t in tensors)
    plan = _plan(q, k_cache, block_table, hint)
    split_meta, merge_meta = _metas(q, k_cache, plan)
    out, m, l, acc = _workspace(q, plan)
    B, Hq, D = q.shape
    Hkv = k_cache.shape[2]
    split = _SPLIT.first(key, (q, k_cache, v_cache, seq_lens, block_table, out, m, l, acc),
                         (k_cache.shape[0], block_table.shape[1], sm_scale * LOG2E, plan.splits), (B * Hkv, plan.splits),
                         split_meta)
    combine = ws_template = None
    if not plan.one_split:
        combine = _COMBINE.first(key, (m, l, acc, out), (plan.splits,), (B * Hq,), merge_meta)
        one = torch.empty((), device=q.device, dtype=torch.float32)  # expanded: empty_like gives a new contiguous one
        ws_template = one.expand(B * Hq * plan.splits * (D + 2))
    split.info = (prepared, combine, ws_template)
    return out


def plan_of(q, k_cache, block_table, max_seq_len=None) -> decode_plan.Plan:
    """The plan ``decode_attention`` launches for these shapes (for probes and tests)."""
    return _plan(q, k_cache, block_table, None if max_seq_len is None else _bucket(max_seq_len))


#: This module's lean launchers, for tests and lesson 08 (entries, compiles).
LEANS = dict(decode_split=_SPLIT, decode_combine=_COMBINE)


def forget():
    """Drop every kept entry: the next call of each key is a first call again."""
    for lean in LEANS.values():
        lean.entries.clear()
