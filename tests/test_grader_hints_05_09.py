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
