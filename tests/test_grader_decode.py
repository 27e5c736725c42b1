"""Lesson 09, part 2: the decode grader against wrong kernels that pass a weaker grader.

Each planted module is solutions/decode_attention.py with one mistake written into its source (``_mutant``),
run as a module of its own, so the grader sees what a learner's file would give it: a step that spans
pages only at the GPU's BLOCK_N, K and V loads unmasked at the sequence's end (right unless the unused
slots hold NaN), int32 offsets into the pool, a combine that is right only for a power-of-two split count,
the online softmax's usual slips (a running value not rescaled, a mask off by one at the end, a max in the
wrong base, query heads that no program stores), what a split program works on (its sequence and KV head, its
queries, its split's first token), and kernels left as the exercise's stubs.
"""

import re
import types
from pathlib import Path

import pytest
import torch
from helpers import assert_grader_catches, mutant

from tkcourse import check, mode
from tkcourse.check import decode_attention as grader

SOURCE = (Path(__file__).resolve().parents[1] / "solutions" / "decode_attention.py").read_text()


def _mutant(*edits, name="planted_decode", source=SOURCE):
    """solutions/decode_attention.py with each ``(old, new, count)`` of ``edits`` applied, as a module of its own."""
    return mutant(source, edits, name, "solutions/decode_attention.py")


PAGE_LOAD = "page = tl.load(BLOCK_TABLE + b * max_pages + pos // PAGE_SIZE, mask=valid, other=0)"
COMBINE_MASKS = [('mask=s < SPLITS, other=float("-inf"))', ")", 1), ("mask=s < SPLITS, other=0.0)", ")", 1),
                 ("mask=s[:, None] < SPLITS, other=0.0)", ")", 1)]
#: The first case that a wrong weighing of the splits' partials fails: on a GPU (its plan's splits) the
#: first two cases pass with these mistakes, and the case of lengths 17 and 250 is the first to fail.
SPLIT_CASE = "B=2 lengths [37, 100]" if mode.INTERPRET else "B=2 lengths [17, 250]"
PLANTED = [
    ("one page for the whole step",  # right while BLOCK_N <= PAGE_SIZE: the interpreter's 16 tokens a step
     [(PAGE_LOAD, "page = tl.load(BLOCK_TABLE + b * max_pages + n // PAGE_SIZE)", 1)],
     "over pages of 16 spans 4 pages here", "the GPU's launch plan" if mode.INTERPRET else "B=2 lengths [37, 100]"),
    ("K and V loaded unmasked",  # right while the unused slots of the pool hold ordinary values
     [(PAGE_LOAD, "page = tl.load(BLOCK_TABLE + b * max_pages + pos // PAGE_SIZE)", 1),
      ("d[None, :], mask=valid[:, None], other=0.0)", "d[None, :])", 2)],
     "a score set to -inf afterwards does not help", "B=2 lengths [37, 100]"),
    ("int32 offsets into the pool",
     [("page.to(tl.int64) * PAGE_SIZE", "page * PAGE_SIZE", 1)],
     "Convert the page to int64 before multiplying", "offsets into the pool in int64"),
    ("the combine's loads unmasked",  # right while SPLITS is a power of two, as the interpreter's 4
     COMBINE_MASKS, "Mask its loads with s < SPLITS", "3 splits of"),
    ("the KV head left out of the pool's row",  # what a hint without "* HKV + kvh" leads to
     [("(page.to(tl.int64) * PAGE_SIZE + pos % PAGE_SIZE) * HKV + kvh", "page.to(tl.int64) * PAGE_SIZE + pos % PAGE_SIZE",
       1)],
     "the KV head is missing from the pool's row", "B=2 lengths [37, 100]"),
    ("the combine steps by BLOCK_S",
     [("M + bh * SPLITS + s", "M + bh * BLOCK_S + s", 1), ("L + bh * SPLITS + s", "L + bh * BLOCK_S + s", 1),
      ("ACC + (bh * SPLITS + s)", "ACC + (bh * BLOCK_S + s)", 1)],
     "find head bh's partials at bh * SPLITS + s", "3 splits of"),
    ("the block table's row left out",  # every sequence reads sequence 0's pages
     [(PAGE_LOAD, "page = tl.load(BLOCK_TABLE + pos // PAGE_SIZE, mask=valid, other=0)", 1)],
     "every sequence reads row 0 of the block table", "B=2 lengths [37, 100]"),
    ("the running sum not rescaled by alpha",
     [("l_i = l_i * alpha + tl.sum(p, axis=1)", "l_i = l_i + tl.sum(p, axis=1)", 1)],
     "the running sum l_i is not rescaled when the max grows", "B=2 lengths [37, 100]"),
    ("the accumulator not rescaled by alpha",
     [("acc = acc * alpha[:, None] + tl.dot(", "acc = acc + tl.dot(", 1)],
     "the accumulator acc is not rescaled when the max grows", "B=2 lengths [37, 100]"),
    ("query heads kvh + g, not kvh * GROUP + g",  # heads past Hkv + G - 1 of no program: NaN partials
     [("heads = kvh * GROUP + g", "heads = kvh + g", 1)],
     "the combine read partials that no split program stored (M: ", "B=2 lengths [37, 100]"),
    ("the end mask pos <= end",  # reads the key at seq_lens[b]: NaN in the graded pool
     [("valid = pos < end  #", "valid = pos <= end  #", 1)],
     "the mask at the sequence's end is off by one", "B=2 lengths [37, 100]"),
    ("the end at seq_len - 1",
     [("end = tl.minimum(start + split_tokens, seq_len)", "end = tl.minimum(start + split_tokens, seq_len - 1)", 1)],
     "the sequence's last key is left out", "B=2 lengths [37, 100]"),
    ("the partial max stored in natural-log units",
     [("tl.store(M + part, m_i, mask=g < GROUP)", "tl.store(M + part, m_i * 0.6931471805599453, mask=g < GROUP)", 1)],
     "the partial maxima are in natural-log units", SPLIT_CASE),
    ("the combine weighs with exp",
     [("w = tl.exp2(m_s - m)", "w = tl.exp(m_s - m)", 1)], "the combine weighs the splits with exp", SPLIT_CASE),
    ("the running max started at 0",  # exact while the scores reach 0: any max at or above the true one does
     [('m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)', "m_i = tl.zeros([BLOCK_G], tl.float32)", 1)],
     "Start the split kernel's running max at -inf", "below zero"),
    ("the combine's masked maxima loaded as 0",  # exact while some split's max is above 0
     [('mask=s < SPLITS, other=float("-inf"))', "mask=s < SPLITS, other=0.0)", 1)],
     "load the combine's masked splits with other=float('-inf') for m", "below zero"),
    ("qk_scale on q and on the scores",
     [("s = tl.dot(q, tl.trans(k)) * qk_scale  #", "s = tl.dot((q * qk_scale).to(q.dtype), tl.trans(k)) * qk_scale  #", 1)],
     "the scale is applied twice", "B=2 lengths [37, 100]"),
]


@pytest.mark.parametrize("name, edits, hint, where", PLANTED, ids=[p[0] for p in PLANTED])
def test_grader_catches_planted_mistake(name, edits, hint, where):
    rep = assert_grader_catches("decode_attention", _mutant(*edits), name, hint)
    assert where in rep.first_problem().label, rep


def test_the_faithful_copy_passes():
    assert check.run("decode_attention", module=_mutant(), quiet=True).passed


def _kernel_bodies_stubbed(text):
    """The two kernels' marked regions replaced by ``pass``, as the exercise leaves them; the launch kept."""
    regions = list(re.finditer(r"    ### BEGIN SOLUTION\n.*?    ### END SOLUTION\n", text, flags=re.S))
    for m in reversed(regions[:2]):  # the split kernel and the combine come first in the file
        text = text[:m.start()] + "    pass\n" + text[m.end():]
    return text


def test_stub_kernels_are_named_as_still_to_write():
    mod = _mutant(source=_kernel_bodies_stubbed(SOURCE), name="planted_stubs")
    rep = check.run("decode_attention", module=mod, quiet=True)
    assert rep.status == "todo", rep
    bad = rep.first_problem()
    assert "decode_split and decode_combine are still the stubs" in bad.hint, rep
    assert "combine's grid" not in bad.hint


def test_a_launcher_that_launches_nothing_is_named():
    text = re.sub(r"(def \w*launch\(.*?)    ### BEGIN SOLUTION\n.*?    ### END SOLUTION\n", r"\1",
                  SOURCE, count=1, flags=re.S)
    rep = check.run("decode_attention", module=_mutant(source=text, name="planted_no_launch"), quiet=True)
    assert rep.status == "todo" and "launch the split kernel and then the combine" in rep.first_problem().hint, rep


def test_unused_slots_of_the_graded_pool_hold_nan():
    q, k, v, seq_lens, table = grader.paged([37, 100], 16, 8, 2, 64, torch.float32, torch.Generator().manual_seed(0))
    kp, vp = grader.poisoned(k, v, seq_lens, table)
    nan = torch.isnan(kp).all(-1).all(-1)  # (pages, slots)
    for b, n in enumerate(seq_lens.tolist()):
        pages = table[b].long().cpu()
        last = pages[(n - 1) // 16]
        assert not nan[pages[: (n - 1) // 16]].any() and not nan[last, : (n - 1) % 16 + 1].any()
        assert nan[last, (n - 1) % 16 + 1:].all() and nan[pages[-1]].all()  # the tail; the spare column's page
    assert nan[-1].all() and torch.equal(torch.isnan(vp), torch.isnan(kp))  # the page in no table
    assert torch.equal(grader.reference(q, kp, vp, seq_lens, table), grader.reference(q, k, v, seq_lens, table))


def test_gpu_plan_is_forced_and_put_back():
    mod = _mutant()
    before = (mod.BLOCK_N, mod.INTERPRET)
    with grader.gpu_plan(mod) as forced:
        assert forced and mod.BLOCK_N == 64 and mod.INTERPRET is False
    assert (mod.BLOCK_N, mod.INTERPRET) == before
    assert grader.lesson_plan(2, 1, 23, 32, gpu=True) == (3, 256, 64)
    assert grader.lesson_plan(5, 2, 9, 16, gpu=False) == (3, 48, 16)
    with grader.gpu_plan(types.SimpleNamespace()) as forced:
        assert not forced


@pytest.mark.skipif(not mode.INTERPRET, reason="the plan's split count in the interpreter")
def test_the_lesson_plan_matches_the_solution():
    from solutions import decode_attention as da

    for B, Hkv, pages, ps in ((5, 2, 9, 16), (2, 2, 8, 16), (3, 1, 8, 32), (2, 4, 17, 16)):
        splits, size, block_n = grader.lesson_plan(B, Hkv, pages, ps, gpu=False)
        assert da.split_plan(B, Hkv, pages, ps, block_n) == (splits, size)


def test_grader_never_crashes_on_a_function_that_changes_its_mind():
    """A NaN result whose rerun on the clean pool raises, and module constants that are not ints: a hint all
    the same, and the module left as it was."""
    calls = []

    def flaky(q, k_cache, v_cache, seq_lens, block_table, sm_scale=None):
        calls.append(1)
        if len(calls) > 1:
            raise RuntimeError("not twice")
        return torch.full_like(q, float("nan"))

    mod = types.SimpleNamespace(decode_attention=flaky, BLOCK_N="sixty-four", INTERPRET=None, __name__="flaky")
    rep = check.run("decode_attention", module=mod, quiet=True)
    assert rep.status == "fail" and "rows are NaN" in rep.first_problem().hint, rep
    assert mod.BLOCK_N == "sixty-four" and mod.INTERPRET is None


ROW = "row = (page.to(tl.int64) * PAGE_SIZE + pos % PAGE_SIZE) * HKV + kvh"
#: Addressing slips of the split kernel, planted in the code a learner who finished the exercise has
#: (``answer_text``): the mask hints the tracer's out-of-bounds accesses would give otherwise send the
#: learner the wrong way, so the hint must name the address (or grid) and not a mask.
ADDRESS_SLIPS = [
    ("the slot taken as pos, not pos % PAGE_SIZE",  # loads past the end of K and V, under a right mask
     (ROW, "row = (page.to(tl.int64) * PAGE_SIZE + pos) * HKV + kvh"),
     "the slot in the page is pos % PAGE_SIZE, not pos"),
    ("the split kernel launched on (B * Hq, splits)",  # programs past B * Hkv store past the end of M
     ("decode_split[(B * Hkv, splits)]", "decode_split[(B * Hq, splits)]"),
     "the split kernel's grid has B * Hq = 16 programs on its first axis, not B * Hkv = 4"),
    ("HKV left out of the pool's row, kvh kept",  # reads the neighbouring tokens' rows: NaN, then wrong
     (ROW, "row = (page.to(tl.int64) * PAGE_SIZE + pos % PAGE_SIZE) + kvh"),
     "HKV is missing from the pool's row"),
]


@pytest.mark.parametrize("name, edit, hint", ADDRESS_SLIPS, ids=[s[0] for s in ADDRESS_SLIPS])
def test_grader_names_the_address_slip_not_a_mask(name, edit, hint):
    from tkcourse.stubs import answer_text

    rep = assert_grader_catches("decode_attention", _mutant(edit, source=answer_text(SOURCE), name="planted_address"),
                                name, hint)
    bad = rep.first_problem()
    assert "B=2 lengths [37, 100]" in bad.label, rep
    for mask_words in ("give it one", "Mask the store", "unmasked tail", "check the block-table lookup"):
        assert mask_words not in bad.hint, rep


def test_address_models_are_the_lesson_rows():
    """``reference``'s ``address``: the right row formula gives the right answer; HKV dropped reads other rows."""
    args = grader.paged([37, 100], 16, 8, 2, 64, torch.float32, torch.Generator().manual_seed(0))
    right = grader.reference(*args)
    same = grader.reference(*args, address=lambda page, pos, kvh, ps, hkv: (page * ps + pos % ps) * hkv + kvh)
    assert torch.equal(same, right)
    assert not torch.allclose(grader.reference(*args, address=grader.NO_HKV), right)
    slot = grader.reference(*args, address=grader.NO_SLOT)  # rows past the pool read NaN
    assert torch.isnan(slot).any() and not torch.isnan(slot[0]).all()


Q_LOAD = "Q + (b * HKV * GROUP + heads)[:, None] * HEAD_DIM + d[None, :]"
START = "start = split * split_tokens"
DECODE = "b, kvh = bh // HKV, bh % HKV"
#: What a split program works on, planted in the learner's part of the finished exercise: its (sequence, KV head)
#: from the program id, its queries, its split's first token. Each hint names that slip, none a generic list.
PROGRAM_SLIPS = [
    ("b and kvh decoded the wrong way round",  # right at B == Hkv; B=3, Hkv=1 reads other sequences' tokens
     [(DECODE, "b, kvh = bh % HKV, bh // HKV")], "b and kvh are decoded the wrong way round", "B=3 lengths [1, 64, 200]"),
    ("kvh, b unpacked the wrong way round",
     [(DECODE, "kvh, b = bh // HKV, bh % HKV")], "loaded seq_lens[0] (bh % HKV)", "B=3 lengths [1, 64, 200]"),
    ("q of head g, not kvh * GROUP + g",
     [(Q_LOAD, "Q + (b * HKV * GROUP + g)[:, None] * HEAD_DIM + d[None, :]")],
     "your result is what loading q[b, g] for every KV head", "B=2 lengths [37, 100]"),
    ("q of head kvh for the whole group",
     [(Q_LOAD, "Q + (b * HKV * GROUP + kvh)[:, None] * HEAD_DIM + d[None, :]")],
     "q[b, kvh] for every head of the group", "B=2 lengths [37, 100]"),
    ("q's sequence stride HKV, not HKV * GROUP",
     [(Q_LOAD, "Q + (b * HKV + heads)[:, None] * HEAD_DIM + d[None, :]")],
     "sequence b's rows start at b * HKV * GROUP, not b * HKV", "B=2 lengths [37, 100]"),
    ("q's head stride HKV, not HEAD_DIM",
     [(Q_LOAD, "Q + b * HKV * GROUP * HEAD_DIM + heads[:, None] * HKV + d[None, :]")],
     "a head's stride of 2 elements, HKV here, not HEAD_DIM = 64", "B=2 lengths [37, 100]"),
    ("every split from token 0", [(START, "start = 0")],
     "splits with start = 0 (each split from token 0): in the sequence of 100 tokens they start at tokens 0, 0, 0, 0, "
     "not 0, 32, 64, 96", "B=2 lengths [37, 100]"),
    ("splits BLOCK_N apart", [(START, "start = split * BLOCK_N")],
     "start = split * 16 (16 is BLOCK_N and PAGE_SIZE here)", "B=2 lengths [37, 100]"),
    ("splits of the sequence's own length", [(START, "start = split * tl.cdiv(seq_len, splits)")],
     "start = split * cdiv(seq_len, splits)", "B=2 lengths [37, 100]"),
    ("the split's loop from token 0", [("for n in range(start, end, BLOCK_N)", "for n in range(0, end, BLOCK_N)")],
     "a loop from token 0 (not from start)", "B=2 lengths [37, 100]"),
    # the launcher's arguments, read from the traced launches
    ("GROUP passed as Hkv", [("HKV=Hkv, GROUP=group, BLOCK_G", "HKV=Hkv, GROUP=Hkv, BLOCK_G")],
     "the launcher passes decode_split GROUP=2, and this input has Hq = 8 query heads over Hkv = 2",
     "B=2 lengths [37, 100]"),
    ("the combine on B * Hkv programs", [("decode_combine[(B * Hq,)](", "decode_combine[(B * Hkv,)](")],
     "the launcher runs decode_combine on a grid of 4 programs", "B=2 lengths [37, 100]"),
]


@pytest.mark.parametrize("name, edits, hint, where", PROGRAM_SLIPS, ids=[s[0] for s in PROGRAM_SLIPS])
def test_grader_names_what_a_split_program_works_on(name, edits, hint, where):
    from tkcourse.stubs import answer_text

    if not mode.INTERPRET and name in ("every split from token 0", "splits BLOCK_N apart"):  # a GPU's plan: other sizes
        hint = "your splits walk the wrong tokens"
    rep = assert_grader_catches("decode_attention", _mutant(*edits, source=answer_text(SOURCE), name="planted_program"),
                                name, hint)
    bad = rep.first_problem()
    assert where in bad.label or not mode.INTERPRET, rep  # a GPU's launch plan shows some of them at other cases
    assert not bad.hint.startswith(grader.GENERIC), rep


def test_swapped_b_and_kvh_past_the_batch_is_named():
    """With B < Hkv the swapped decode gives programs a sequence past the batch: their loads of seq_lens are out of
    bounds, and the hint names the decode, not a mask."""
    mod = _mutant((DECODE, "b, kvh = bh % HKV, bh // HKV"), name="planted_swap")
    args = grader.paged([17, 250], 16, 4, 4, 64, torch.float32, torch.Generator().manual_seed(0))
    case = grader._graded("B=2 Hkv=4", mod, args, torch.float32)
    assert case.status == "fail" and "b and kvh are decoded the wrong way round" in case.hint, case
    assert "loaded seq_lens[2] (bh % HKV), past the B = 2 sequences" in case.hint and "Mask the" not in case.hint


def test_swapped_b_and_kvh_model():
    """``programs`` with the swapped decode is what such a kernel returns (the hint of a result without its trace)."""
    mod = _mutant((DECODE, "b, kvh = bh % HKV, bh // HKV"), name="planted_swap")
    args = grader.paged([1, 64, 200], 32, 4, 1, 128, torch.float32, torch.Generator().manual_seed(0))
    out = mod.decode_attention(*args).double().cpu()
    model = grader.programs(*args, grader.SWAPPED)
    atol = 1e-5 if mode.INTERPRET else 5e-3  # a GPU's fp32 tl.dot rounds its inputs to tf32
    assert torch.allclose(out, model, atol=atol) and not torch.allclose(model, grader.reference(*args), atol=atol)
    assert torch.allclose(grader.programs(*args, lambda bh, hkv: (bh // hkv, bh % hkv)), grader.reference(*args),
                          atol=1e-12, rtol=0)
    hint = grader._diagnose(args)(out, grader.reference(*args), None)
    assert hint.startswith(grader.SWAP_HINT), hint
