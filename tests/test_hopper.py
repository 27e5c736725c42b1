"""Lesson 12: the persistent matmul on tensor descriptors matches torch at ragged sizes, with any number of
programs, from inputs the TMA cannot take as they are; and the grader against the solution with one learner's
mistake written in at a time, each caught with the hint that names it."""

from pathlib import Path

import pytest
import torch
from helpers import assert_grader_catches, assert_grader_reports, mutant
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from solutions import hopper as lesson
from tkcourse import check, mode, traffic
from tkcourse.check import hopper as grader

DEV = mode.DEVICE
SOURCE = Path(lesson.__file__).read_text()


def _randn(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype).to(DEV)


def _tol(dtype):
    if dtype == torch.float32:
        return dict(rtol=1e-4, atol=1e-4) if mode.INTERPRET else dict(rtol=2e-2, atol=2e-2)
    return dict(rtol=2e-2, atol=2e-2)


@settings(max_examples=12, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(M=st.integers(1, 70), N=st.integers(1, 70), K=st.integers(1, 90), programs=st.integers(1, 9))
def test_matches_torch_with_any_number_of_programs(M, N, K, programs):
    a, b = _randn(M, K, seed=M), _randn(K, N, seed=N + 1)
    c = lesson.matmul(a, b, config=grader.CONFIG if mode.INTERPRET else None, programs=programs)
    assert c.shape == (M, N) and c.dtype == a.dtype
    torch.testing.assert_close(c, lesson.reference(a, b), **_tol(a.dtype))


@pytest.mark.parametrize("dtype", mode.float_dtypes())
def test_inputs_the_tma_cannot_take_are_copied_and_left_as_they_were(dtype):
    """A transposed A and a B whose rows are not 16-byte multiples: both copied into padded row-major
    buffers; neither input changes."""
    a = _randn(29, 37, dtype=dtype).t()  # (37, 29), column-major
    b = _randn(29, 13, dtype=dtype, seed=3)  # rows of 13 elements
    a0, b0 = a.clone(), b.clone()
    assert lesson.tma_ready(a) is not a and lesson.tma_ready(b) is not b
    torch.testing.assert_close(lesson.matmul(a, b), lesson.reference(a, b), **_tol(dtype))
    assert torch.equal(a, a0) and torch.equal(b, b0)


def test_each_tile_is_stored_once_and_each_program_takes_its_share():
    """The tracer's record: every element of C stored once; program p stores the tiles p, p + P, ..."""
    a, b = _randn(70, 40), _randn(40, 50, seed=1)
    cfg, P = grader.CONFIG, 4
    with traffic.capture() as traces:
        lesson.matmul(a, b, config=cfg, programs=P)
    (tr,) = traces
    assert (tr.read_counts("c", kind="store") == 1).all()
    order = grader.tile_order(5, 4, cfg["GROUP_M"])
    owner = tr.owner_map("c", kind="store")
    for t, (i, j) in enumerate(order):
        assert (owner[i * 16:(i + 1) * 16, j * 16:(j + 1) * 16] == t % P).all(), t


@pytest.mark.parametrize("call, message", [
    (lambda: lesson.matmul(_randn(3, 4), _randn(5, 6)), "inner dimensions differ"),
    (lambda: lesson.matmul(_randn(3, 4), _randn(4, 6), programs=0), "programs"),
    (lambda: lesson.matmul(_randn(3, 4), _randn(4, 6), config=dict(grader.CONFIG, BLOCK_M=24)), "BLOCK_M"),
    (lambda: lesson.matmul(_randn(3, 4), _randn(4, 6), config=dict(grader.CONFIG, WARP_SPECIALIZE="yes")),
     "WARP_SPECIALIZE"),
])
def test_bad_input_is_refused_naming_it(call, message):
    with pytest.raises((ValueError, TypeError), match=message):
        call()


# ----- the grader and the learner's mistakes -------------------------------------------------------------

LOOP = "for tile in tl.range(tl.program_id(axis=0), num_tiles, NUM_PROGRAMS, warp_specialize=WARP_SPECIALIZE):"
ACC = "        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)  # a fresh sum for every tile\n"


def _mutant(*edits, name="planted_hopper"):
    return mutant(SOURCE, edits, name, "solutions/hopper.py")


PLANTED = [
    ("every program from tile 0", [(LOOP, LOOP.replace("tl.program_id(axis=0)", "0"))], "every program starts at tile 0"),
    ("steps of one", [(LOOP, LOOP.replace("NUM_PROGRAMS,", "1,"))], "step the tile loop by NUM_PROGRAMS"),
    ("a tile short", [(LOOP, LOOP.replace("num_tiles,", "num_tiles - 1,"))], "the tile loop stops early"),
    ("one tile a program", [(LOOP, LOOP.replace("num_tiles,", "tl.program_id(axis=0) + 1,"))], "one a program"),
    ("the accumulator zeroed once", [(ACC, ""), (LOOP, ACC.strip() + "\n    " + LOOP)],
     "the accumulator is zeroed once"),
    ("offsets in blocks", [("a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])", "a_desc.load([pid_m, k])"),
                           ("b_desc.load([k * BLOCK_K, pid_n * BLOCK_N])", "b_desc.load([k, pid_n])"),
                           ("c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N]", "c_desc.store([pid_m, pid_n]")],
     "offsets count elements, not blocks"),
    ("B's offsets swapped", [("b_desc.load([k * BLOCK_K, pid_n * BLOCK_N])", "b_desc.load([pid_n * BLOCK_N, k * BLOCK_K])")],
     "B is (K, N)"),
    ("A's offsets swapped", [("a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])", "a_desc.load([k * BLOCK_K, pid_m * BLOCK_M])")],
     "A is (M, K)"),
    ("pid_m and pid_n swapped in the loads", [("a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])",
                                               "a_desc.load([pid_n * BLOCK_M, k * BLOCK_K])"),
                                              ("b_desc.load([k * BLOCK_K, pid_n * BLOCK_N])",
                                               "b_desc.load([k * BLOCK_K, pid_m * BLOCK_N])")],
     "A's rows come from pid_n"),
    ("the partial K step dropped", [("for k in range(k_steps):", "for k in range(K // BLOCK_K):")],
     "the last, partial K step is missing"),
    ("the tiles taken row by row", [("        pid_m, pid_n = grouped_tile(tile, num_pid_m, num_pid_n, GROUP_M)",
                                     "        pid_m, pid_n = tile // num_pid_n, tile % num_pid_n")],
     "the tiles were taken row by row"),
    ("the tiles taken column by column", [("        pid_m, pid_n = grouped_tile(tile, num_pid_m, num_pid_n, GROUP_M)",
                                           "        pid_m, pid_n = tile % num_pid_m, tile // num_pid_m")],
     "another order than the grouped one"),
    ("C's column offset with BLOCK_M", [("c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N]",
                                         "c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_M]")],
     "an offset uses one block for another"),
    ("A's K offset with BLOCK_M", [("a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])",
                                    "a_desc.load([pid_m * BLOCK_M, k * BLOCK_M])")], "A's K offset counts BLOCK_M"),
    ("B's column offset with BLOCK_K", [("b_desc.load([k * BLOCK_K, pid_n * BLOCK_N])",
                                         "b_desc.load([k * BLOCK_K, pid_n * BLOCK_K])")],
     "B's column offset counts BLOCK_K"),
    ("grouped_tile's arguments swapped",
     [("        pid_m, pid_n = grouped_tile(tile, num_pid_m, num_pid_n, GROUP_M)",
       "        pid_m, pid_n = grouped_tile(tile, num_pid_n, num_pid_m, GROUP_M)")], "num_pid_m and num_pid_n swapped"),
    ("warp specialization left out", [(", warp_specialize=WARP_SPECIALIZE):", "):")], "warp_specialize=WARP_SPECIALIZE"),
]


@pytest.mark.parametrize("name, edits, hint", PLANTED, ids=[p[0] for p in PLANTED])
def test_grader_catches_planted_mistake(name, edits, hint):
    assert_grader_catches("hopper", _mutant(*edits), name, hint)


def test_each_planted_mistake_gets_its_own_hint():
    hints = [p[2] for p in PLANTED]
    assert len(set(hints)) == len(hints)


def test_the_faithful_copy_and_the_solution_pass():
    assert check.run("hopper", module=_mutant(), quiet=True).passed
    assert check.run("hopper", module=lesson, quiet=True).passed


@pytest.mark.parametrize("fn, words", [
    (lambda a, b, config=None, programs=None: (_ for _ in ()).throw(RuntimeError("boom")), "boom"),
    (lambda a, b, config=None, programs=None: torch.full((a.shape[0], b.shape[1]), float("nan"), dtype=a.dtype),
     "NaN"),
    (lambda a, b, config=None, programs=None: torch.zeros(3, dtype=a.dtype), "output shape"),
    (lambda a, b, config=None, programs=None: None, "returned None"),
    (lambda a, b: a @ b, "keep its signature"),  # a launcher whose signature lost the grader's arguments
])
def test_grader_never_crashes_whatever_the_kernel_does(fn, words):
    assert_grader_reports("hopper", fn, words)


def test_the_offset_models_differ_from_the_product_and_each_other():
    """Each swapped-offsets model is wrong on a graded input, and no two agree: a hint names one mistake. With
    the equal blocks of most cases the models of one block taken for another are the product itself; with the
    unequal blocks of the last case they are not."""
    a, b = _randn(50, 150).cpu(), _randn(150, 70, seed=1).cpu()
    right = a.double() @ b.double()
    for cfg, equal_block_models in ((grader.CONFIG, 2), (grader.UNEQUAL_CONFIG, 0)):
        bm, bn, bk = (cfg[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K"))
        assert torch.allclose(grader.modelled(a, b, cfg, lambda i, j, k: (i * bm, k * bk),
                                              lambda i, j, k: (k * bk, j * bn)), right)  # the right offsets
        models = [grader.modelled(a, b, cfg, a_at, b_at) for _, a_at, b_at in grader.offset_mistakes(cfg)]
        wrong = [m for m in models if not torch.allclose(m, right, atol=1e-2, rtol=1e-2)]
        assert len(wrong) == len(models) - equal_block_models, cfg
        for i, m in enumerate(wrong):
            assert all(not torch.allclose(m, other, atol=1e-2, rtol=1e-2) for other in wrong[i + 1:]), (cfg, i)


def test_the_carried_accumulator_model_differs_from_the_product():
    """The model behind the accumulator's hint is not the right answer on a graded input (else the hint
    could name a mistake that was not made)."""
    a, b = _randn(37, 40).cpu(), _randn(40, 45, seed=1).cpu()  # the grader's models compute on the CPU
    right = a.double() @ b.double()
    assert not torch.allclose(grader.carried(a, b, grader.CONFIG, 3), right, atol=1e-2, rtol=1e-2)
    assert torch.allclose(grader.carried(a, b, grader.CONFIG, 64), right)  # one tile a program: nothing carried


# ----- more of the learner's mistakes: each caught, and its hint names it -----------------------------------

KLOOP = "for k in range(k_steps):"
DOT = "acc = tl.dot(a, b, acc)"
STORE = "c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_desc.dtype))"
TILE = "        pid_m, pid_n = grouped_tile(tile, num_pid_m, num_pid_n, GROUP_M)"

MORE_PLANTED = [
    ("the K loop from 1", [(KLOOP, "for k in range(1, k_steps):")], "the first K step is missing"),
    ("k counts elements, offsets multiply it again", [(KLOOP, "for k in range(0, K, BLOCK_K):")],
     "it already counts elements"),
    ("the accumulator overwritten", [(DOT, "acc = tl.dot(a, b)")], "the accumulator is overwritten"),
    ("the accumulator zeroed in the K loop", [(KLOOP + "\n", KLOOP + "\n            " + ACC.strip() + "\n")],
     "the accumulator is overwritten"),
    ("tl.dot(b, a)", [(DOT, "acc = tl.dot(b, a, acc)")], "B's block times A's"),
    ("an fp16 accumulator", [(ACC.strip(), ACC.strip().replace("tl.float32", "c_desc.dtype"))],
     "refused the accumulator: it must be fp32"),
    ("C stored inside the K loop", [(DOT + "\n", DOT + "\n            " + STORE + "\n")], "stored inside the K loop"),
    ("tiles from the program id", [(TILE, TILE.replace("(tile,", "(tl.program_id(axis=0),"))],
     "not the program id"),
    ("steps of num_tiles // NUM_PROGRAMS", [(LOOP, LOOP.replace("NUM_PROGRAMS,", "num_tiles // NUM_PROGRAMS,"))],
     "steps by 5 tiles"),
    ("C's row offset in blocks", [(STORE, STORE.replace("[pid_m * BLOCK_M,", "[pid_m,"))],
     "C's tiles were stored at rows"),
    ("runs of consecutive tiles",
     [(LOOP, "per = tl.cdiv(num_tiles, NUM_PROGRAMS)\n    for tile in tl.range(tl.program_id(axis=0) * per, "
             "tl.minimum((tl.program_id(axis=0) + 1) * per, num_tiles), 1, warp_specialize=WARP_SPECIALIZE):")],
     "a run of consecutive tiles"),
    ("the tile loop past num_tiles", [(LOOP, LOOP.replace("num_tiles,", "num_tiles * NUM_PROGRAMS,"))],
     "the tile loop runs past the last tile"),
    ("GROUP_M left at 1", [(TILE, TILE.replace("GROUP_M)", "1)"))], "GROUP_M = 1 is the row-major order"),
]


@pytest.mark.parametrize("name, edits, hint", MORE_PLANTED, ids=[p[0] for p in MORE_PLANTED])
def test_grader_names_more_planted_mistakes(name, edits, hint):
    assert_grader_catches("hopper", _mutant(*edits), name, hint)


def test_the_k_step_models_differ_from_the_product_and_each_other():
    """Each K-loop model is wrong on the first graded input, and no two agree."""
    a, b = _randn(37, 40).cpu(), _randn(40, 45, seed=1).cpu()
    models = [grader.k_steps_only(a, b, grader.CONFIG, steps) for _, steps in grader.k_step_mistakes(40, grader.CONFIG)]
    right = a.double() @ b.double()
    for i, m in enumerate(models):
        assert not torch.allclose(m, right, atol=1e-2, rtol=1e-2), i
        assert all(not torch.allclose(m, other, atol=1e-2, rtol=1e-2) for other in models[i + 1:]), i
