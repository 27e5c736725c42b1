"""Lessons 05 and 09: planted mistakes in the learner-written parts, each named by its own hint.

Each planted module is the solution as a learner would have finished it (``answer_text``) with one mistake
written in; the grader must fail it and its first problem's hint must name that mistake.
"""

from pathlib import Path

import pytest
from helpers import assert_grader_catches, mutant

from tkcourse.stubs import answer_text

ROOT = Path(__file__).resolve().parents[1]
SOFTMAX = answer_text((ROOT / "solutions" / "online_softmax.py").read_text())

Y = "y = tl.exp(x.to(tl.float32) - m) * inv_l"
L1 = "l = l * tl.exp(m - shift) + tl.sum(tl.exp(x - shift), axis=0)"
M_END = "        m = m_new\n    return m, l"
LOAD2 = 'x = tl.load(x_row + cols, mask=mask, other=float("-inf"), eviction_policy="evict_first")'
SOFTMAX_SLIPS = [
    ("pass 2 multiplies by l", [(Y, "y = tl.exp(x.to(tl.float32) - m) * l")], "pass 2 multiplies by l"),
    ("pass 2 leaves out m", [(Y, "y = tl.exp(x.to(tl.float32)) * inv_l")], "pass 2 leaves out the max"),
    ("pass 2 with exp2", [(Y, "y = tl.exp2(x.to(tl.float32) - m) * inv_l")], "pass 2 uses exp2 where pass 1"),
    ("pass 1 with exp2", [(L1, "l = l * tl.exp2(m - shift) + tl.sum(tl.exp2(x - shift), axis=0)")],
     "pass 1 sums exp2 where pass 2"),
    ("the rescale alone with exp2", [(L1, "l = l * tl.exp2(m - shift) + tl.sum(tl.exp(x - shift), axis=0)")],
     "rescaled with exp2 but the blocks' terms use exp"),
    ("l a vector (no tl.sum)", [(L1, "l = l * tl.exp(m - shift) + tl.exp(x - shift)")], "a vector of BLOCK lanes"),
    ("m and l vectors", [('m = tl.full((), float("-inf"), tl.float32)', 'm = tl.full((BLOCK,), float("-inf"), tl.float32)'),
                         ("l = tl.zeros((), tl.float32)", "l = tl.zeros((BLOCK,), tl.float32)"),
                         ("m_new = tl.maximum(m, tl.max(x, axis=0))", "m_new = tl.maximum(m, x)"),
                         (L1, "l = l * tl.exp(m - shift) + tl.exp(x - shift)")], "a vector of BLOCK lanes"),
    ("the last partial block left out of pass 1",
     [("tl.range(start, end, BLOCK, num_stages=NUM_STAGES):\n        cols = block_start + tl.arange(0, BLOCK)\n"
       "        # evict_last", "tl.range(start, end - BLOCK + 1, BLOCK, num_stages=NUM_STAGES):\n"
       "        cols = block_start + tl.arange(0, BLOCK)\n        # evict_last")], "leaves out the last, partial block"),
    ("m never updated", [(M_END, "    return m, l")], "pass 2 got m = -inf"),
    ("m kept at the shift", [(M_END, "        m = shift\n    return m, l")], "your running max is 0, not -inf"),
    ("the rescale factor inverted", [(L1, "l = l * tl.exp(shift - m) + tl.sum(tl.exp(x - shift), axis=0)")],
     "The rescale factor is exp(m_old - m_new)"),
    ("pass 2 loads out", [(LOAD2, LOAD2.replace("x_row", "out_row"))], "your kernel loads from out"),
    ("pass 1 masked with <=", [("mask=cols < end,", "mask=cols <= end,")], "online_stats masks its columns with cols <= end"),
]


@pytest.mark.parametrize("name, edits, hint", SOFTMAX_SLIPS, ids=[s[0] for s in SOFTMAX_SLIPS])
def test_online_softmax_names_the_slip(name, edits, hint):
    mod = mutant(SOFTMAX, edits, "planted_online", "solutions/online_softmax.py")
    assert_grader_catches("online_softmax", mod, name, hint)


DECODE = answer_text((ROOT / "solutions" / "decode_attention.py").read_text())
PAGE = "page = tl.load(BLOCK_TABLE + b * max_pages + pos // PAGE_SIZE, mask=valid, other=0)"
ROW = "row = (page.to(tl.int64) * PAGE_SIZE + pos % PAGE_SIZE) * HKV + kvh"
VLOAD = "v = tl.load(V + row[:, None] * HEAD_DIM + d[None, :], mask=valid[:, None], other=0.0)"
COMBINE = "o = tl.sum(acc * w[:, None], axis=0) / tl.sum(l_s * w, axis=0)"
DECODE_SLIPS = [
    ("the table's row stride B from the launcher", [("block_table.shape[1], split_tokens,", "block_table.shape[0], split_tokens,")],
     "the block table's rows are 8 columns apart (max_pages, block_table.shape[1]), not 2"),
    ("V loaded from K", [(VLOAD, VLOAD.replace("tl.load(V +", "tl.load(K +"))], "your kernel loads V from K"),
    ("the slot's stride 1, not HKV", [(ROW, "row = page.to(tl.int64) * PAGE_SIZE * HKV + pos % PAGE_SIZE + kvh")],
     "the slot's stride in the pool is HKV rows, not 1"),
    ("the combine divides by sum(l_s)", [(COMBINE, "o = tl.sum(acc * w[:, None], axis=0) / tl.sum(l_s, axis=0)")],
     "the combine divides by sum(l_s), the partial sums unweighted"),
    ("the combine divides by sum(w)", [(COMBINE, "o = tl.sum(acc * w[:, None], axis=0) / tl.sum(w, axis=0)")],
     "the combine divides by sum(w), the weights alone"),
    ("q loaded without g < GROUP", [("d[None, :], mask=g[:, None] < GROUP, other=0.0)", "d[None, :])")],
     "Mask the load of q with g[:, None] < GROUP"),
    ("partials stored without g < GROUP",
     [("tl.store(M + part, m_i, mask=g < GROUP)", "tl.store(M + part, m_i)"),
      ("tl.store(L + part, l_i, mask=g < GROUP)", "tl.store(L + part, l_i)"), ("acc, mask=g[:, None] < GROUP)", "acc)")],
     "mask the stores of m_i, l_i (g < GROUP)"),
    ("sm_scale passed without log2(e)", [("sm_scale * LOG2E, splits,", "sm_scale, splits,")], "tl.exp2 without log2(e)"),
    ("the split loop runs to start + split_tokens",  # an empty split stores l = acc = NaN
     [("for n in range(start, end, BLOCK_N):", "for n in range(start, start + split_tokens, BLOCK_N):")],
     "your split kernel's loop runs past end"),
    ("m_i = m_new left out", [("        m_i = m_new\n", "")], "m_i is never updated in its loop"),
    ("acc stored divided by l_i", [("d[None, :], acc, mask=", "d[None, :], acc / l_i[:, None], mask=")],
     "your split kernel stores acc already divided by l_i"),
    ("the combine's weight inverted", [("w = tl.exp2(m_s - m)", "w = tl.exp2(m - m_s)")],
     "the combine's weight is inverted"),
    ("l_i summed over axis 0", [("l_i = l_i * alpha + tl.sum(p, axis=1)", "l_i = l_i * alpha + tl.sum(p, axis=0)")],
     "l_i sums p over axis 0"),
]


@pytest.mark.parametrize("name, edits, hint", DECODE_SLIPS, ids=[s[0] for s in DECODE_SLIPS])
def test_decode_attention_names_the_slip(name, edits, hint):
    mod = mutant(DECODE, edits, "planted_decode_slip", "solutions/decode_attention.py")
    rep = assert_grader_catches("decode_attention", mod, name, hint)
    assert "B=2 lengths [37, 100]" in rep.first_problem().label, rep
    assert "Mask the store with valid" not in rep.first_problem().hint and "give it one (valid" not in rep.first_problem().hint


def test_a_running_max_from_the_block_alone_fails_where_a_later_max_falls_far():
    """m_new = tl.max(s, 1) is right wherever alpha = exp2(m_i - m_new) stays finite, which every earlier case
    keeps: only a key far above the later ones (216 log2 units) makes it overflow."""
    edits = [("m_new = tl.maximum(m_i, tl.max(s, axis=1))", "m_new = tl.max(s, axis=1)")]
    rep = assert_grader_catches("decode_attention", mutant(DECODE, edits, "planted_decode_falling", "solutions/decode_attention.py"),
                                "a running max from the block alone", "the running max must never fall")
    assert "key 0 far above the rest" in rep.first_problem().label, rep
