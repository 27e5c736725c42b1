"""Lesson 09, part 2, from correct to fast: decode attention with launch plans tuned on the H200.

The kernels are the lesson's (``decode_attention._decode_split`` and ``_decode_combine``); what a
GPU needs beyond them is the launch: how many splits per sequence (enough programs in flight to
keep every SM's loads queued, few enough that the partials and the combine stay small), how many
tokens a step (bytes in flight per program), num_warps and num_stages (software pipelining of the
block-table and K/V loads, ``tl.range``'s docs). ``PLANS`` holds the choice for each regime, found
by the sweep in ``research/decode/decode_check.py``; ``config=`` overrides it. The values of
``seq_lens`` and ``block_table`` are not checked here (that needs a device sync, which serving
engines avoid); the lesson's launcher checks them.

This is what the benchmarks (``benchmarks/decode_attention.py``) measure.
"""

from tkcourse.mode import INTERPRET

from .._checks import ConfigSpec, integer, power_of_two
from ..decode_attention import BLOCK_N, HEAD_DIMS, check_inputs, launch, reference  # noqa: F401 (same API)

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


def decode_attention(q, k_cache, v_cache, seq_lens, block_table, sm_scale=None, config=None):
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
