"""Decode attention (lesson 09, part 2), the fast path: launch plans tuned on the H200, behind a lean
launch (``decode_attention``, as ``solutions.decode_attention.decode_attention`` plus ``config``).

The kernels are the lesson's (``decode_attention.decode_split`` and ``decode_combine``); what a
GPU needs beyond them is the launch: how many splits per sequence (enough programs in flight to
keep every SM's loads queued, few enough that the partials and the combine stay small), how many
tokens a step (bytes in flight per program), num_warps and num_stages (software pipelining of the
block-table and K/V loads, ``tl.range``'s docs). ``PLANS`` holds the choice for each regime, found
by the sweep in ``research/decode/decode_check.py``; ``config=`` overrides it. The values of
``seq_lens`` and ``block_table`` are not checked here (that needs a device sync, which serving
engines avoid); the lesson's launcher checks them.

``tuned_decode_attention`` launches the plan the ordinary way (``kernel[grid]``);
``decode_attention`` keeps the two kernels' compiled launchers per key (``lean.Lean``: dtypes,
shapes, strides, alignment, device, the scale), so a decode step's call costs a lookup, four
allocations and two launches. The lean path is what the benchmarks (``benchmarks/decode_attention.py``)
measure.
"""

from __future__ import annotations

import torch
import triton

from tkcourse.mode import INTERPRET

from .. import decode_attention as da
from .._checks import ConfigSpec, integer, power_of_two
from ..decode_attention import BLOCK_N, HEAD_DIMS, check_inputs, launch, reference  # noqa: F401 (same API)
from .lean import Lean
from .lean import tensor_key as _t

__all__ = ["decode_attention", "tuned_decode_attention", "reference", "LEANS", "forget"]

_CONFIG = ConfigSpec({"BLOCK_N": (power_of_two, 16, 256), "splits": (integer, 1, 1024),
                      "num_warps": (power_of_two, 1, 16), "num_stages": (integer, 1, 6),
                      "combine_warps": (power_of_two, 1, 16)},
                     required=("BLOCK_N",), defaults={"num_warps": 4, "num_stages": 2, "combine_warps": 4})

#: Launch plan on a GPU: tokens a step, warps and stages of the split kernel. 128 tokens a step keeps
#: 64 KB of K and V in flight per program; 4 warps and 3 stages were the fastest or within 1% of it
#: at every shape of the H200 sweep (research/decode/decode_check.py), where 32 or 64 tokens a step
#: with 4 warps reached 0.7-0.9x of it.
PLAN = {"BLOCK_N": 128, "num_warps": 4, "num_stages": 3}
#: Cached tokens per split, by the number of (sequence, KV head) pairs: the split count is
#: cdiv(max_pages · page_size, SPLIT_TOKENS). The H200 sweeps found the time sensitive to it (up to
#: 1.2x between neighbouring counts, the best counts moving by one between runs) and these the
#: fastest or within 1% of it in both: 3 splits of B 32 x 8192 (768 programs), 4 of B 8 x 32768
#: (256 programs), 5 of the mixed batch (capacity 15360). Logs: research/decode/logs/.
SPLIT_TOKENS = {256: 3072, 0: 8192}


def _splits(B, Hkv, capacity, target=None):
    """Splits per sequence: from SPLIT_TOKENS, or (``target``) enough for about ``target`` programs."""
    if target is not None:
        return max(1, min(-(-target // (B * Hkv)), -(-capacity // 128)))
    tokens = next(t for pairs, t in sorted(SPLIT_TOKENS.items(), reverse=True) if B * Hkv >= pairs)
    return max(1, -(-capacity // tokens))


def tuned_decode_attention(q, k_cache, v_cache, seq_lens, block_table, sm_scale=None, config=None):
    """The lesson's ``decode_attention`` with the tuned launch plan; ``config`` ({BLOCK_N, splits,
    num_warps, num_stages, combine_warps}) launches that plan instead."""
    sm_scale = check_inputs(q, k_cache, v_cache, seq_lens, block_table, sm_scale, check_values=INTERPRET)
    if config is None and INTERPRET:
        return launch(q, k_cache, v_cache, seq_lens, block_table, sm_scale, BLOCK_N, None, {}, {})
    cfg = _CONFIG(PLAN if config is None else config, "config")
    splits = cfg.get("splits") or _splits(q.shape[0], k_cache.shape[2], block_table.shape[1] * k_cache.shape[1])
    return launch(q, k_cache, v_cache, seq_lens, block_table, sm_scale, cfg["BLOCK_N"], splits,
                   {"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]},
                   {"num_warps": cfg["combine_warps"]})


_SPLIT = Lean(da.decode_split)
_COMBINE = Lean(da.decode_combine)


def decode_attention(q, k_cache, v_cache, seq_lens, block_table, sm_scale=None, config=None):
    """``(B, Hq, D)``, as ``tuned_decode_attention``; ``config`` takes its ordinary launch."""
    try:
        if config is not None or (sm_scale is not None and type(sm_scale) not in (float, int)):
            raise TypeError  # a config, or a tensor scale, say: the ordinary path
        key = (_t(q), _t(k_cache), _t(v_cache), _t(seq_lens), _t(block_table), sm_scale, type(sm_scale))
        e = _SPLIT.get(key)
    except (AttributeError, TypeError):
        return tuned_decode_attention(q, k_cache, v_cache, seq_lens, block_table, sm_scale, config)
    if e is None:
        return _first(key, q, k_cache, v_cache, seq_lens, block_table, sm_scale)
    prepared, combine, partial, acc_template = e.info
    tensors = (q, k_cache, v_cache, seq_lens, block_table)
    if not prepared:
        tensors = tuple(t.contiguous() for t in tensors)
    m, l, acc = torch.empty_like(partial), torch.empty_like(partial), torch.empty_like(acc_template)
    out = torch.empty_like(tensors[0])
    if e.lean:  # addresses as ints: the launcher then skips a driver query per pointer
        e(*(t.data_ptr() for t in tensors), m.data_ptr(), l.data_ptr(), acc.data_ptr())
        combine(m.data_ptr(), l.data_ptr(), acc.data_ptr(), out.data_ptr())
    else:
        e(*tensors, m, l, acc)
        combine(m, l, acc, out)
    return out


def _first(key, q, k_cache, v_cache, seq_lens, block_table, sm_scale):
    """The plan of ``tuned_decode_attention`` (the lesson's in the interpreter), launched through both
    Leans: their entries kept, the combine's with the split's."""
    sm_scale = check_inputs(q, k_cache, v_cache, seq_lens, block_table, sm_scale, check_values=INTERPRET)
    tensors = (q, k_cache, v_cache, seq_lens, block_table)
    prepared = all(t.is_contiguous() for t in tensors)
    q, k_cache, v_cache, seq_lens, block_table = (t.contiguous() for t in tensors)
    B, Hq, D = q.shape
    _, page_size, Hkv, _ = k_cache.shape
    if INTERPRET:
        block_n, splits, split_opts, combine_opts = BLOCK_N, None, {}, {}
    else:
        cfg = _CONFIG(PLAN, "config")
        block_n, splits = cfg["BLOCK_N"], _splits(B, Hkv, block_table.shape[1] * page_size)
        split_opts = {"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]}
        combine_opts = {"num_warps": cfg["combine_warps"]}
    splits, split_tokens = da.split_plan(B, Hkv, block_table.shape[1], page_size, block_n, splits)
    m = torch.empty((B, Hq, splits), device=q.device, dtype=torch.float32)
    l = torch.empty((B, Hq, splits), device=q.device, dtype=torch.float32)
    acc = torch.empty((B, Hq, splits, D), device=q.device, dtype=torch.float32)
    out = torch.empty_like(q)
    group = Hq // Hkv
    split = _SPLIT.first(key, (q, k_cache, v_cache, seq_lens, block_table, m, l, acc),
                         (block_table.shape[1], split_tokens, sm_scale * da.LOG2E, splits), (B * Hkv, splits),
                         dict(HKV=Hkv, GROUP=group, BLOCK_G=max(16, triton.next_power_of_2(group)), HEAD_DIM=D,
                              PAGE_SIZE=page_size, BLOCK_N=block_n, **split_opts))
    combine = _COMBINE.first(key, (m, l, acc, out), (), (B * Hq,),
                             dict(HEAD_DIM=D, SPLITS=splits, BLOCK_S=triton.next_power_of_2(splits), **combine_opts))
    one = torch.empty((), device=q.device, dtype=torch.float32)  # expanded: empty_like gives new contiguous ones
    split.info = (prepared, combine, one.expand(B, Hq, splits), one.expand(B, Hq, splits, D))
    return out


#: This module's lean launchers, for tests and lesson 08 (entries, compiles).
LEANS = dict(decode_split=_SPLIT, decode_combine=_COMBINE)


def forget():
    """Drop every kept entry: the next call of each key is a first call again."""
    for lean in LEANS.values():
        lean.entries.clear()
