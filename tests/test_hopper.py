"""Lesson 12: the persistent matmul on tensor descriptors matches torch at ragged sizes, with any number of
programs, from inputs the TMA cannot take as they are; and the grader against the solution with one learner's
mistake written in at a time, each caught with the hint that names it."""

from pathlib import Path

import pytest
import torch
from helpers import assert_grader_catches, assert_grader_reports, mutant, planted_file
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
     f"steps by {5 if mode.INTERPRET else 6} tiles"),  # the first failing case's step: 11 // 2, or 45 // 7 on a GPU
    ("C's row offset in blocks", [(STORE, STORE.replace("[pid_m * BLOCK_M,", "[pid_m,"))],
     "C's tiles were stored at rows"),
    ("runs of consecutive tiles",
     [(LOOP, "per = tl.cdiv(num_tiles, NUM_PROGRAMS)\n    for tile in tl.range(tl.program_id(axis=0) * per, "
             "tl.minimum((tl.program_id(axis=0) + 1) * per, num_tiles), 1, warp_specialize=WARP_SPECIALIZE):")],
     "a run of consecutive tiles"),
    pytest.param("the tile loop past num_tiles", [(LOOP, LOOP.replace("num_tiles,", "num_tiles * NUM_PROGRAMS,"))],
                 "the tile loop runs past the last tile", id="the tile loop past num_tiles",
                 marks=pytest.mark.skipif(not mode.INTERPRET, reason="on a GPU it ends the CUDA context: "
                                          "test_a_gpu_trap_is_named_from_a_child_process grades it in a child")),
    ("GROUP_M left at 1", [(TILE, TILE.replace("GROUP_M)", "1)"))], "GROUP_M = 1 is the row-major order"),
]


def _values(p):
    """(name, edits, hint) of a planted mistake, a tuple or a ``pytest.param``."""
    return getattr(p, "values", p)


@pytest.mark.parametrize("name, edits, hint", MORE_PLANTED, ids=[_values(p)[0] for p in MORE_PLANTED])
def test_grader_names_more_planted_mistakes(name, edits, hint):
    assert_grader_catches("hopper", _mutant(*edits), name, hint)


def _planted(name):
    return next(_values(p) for p in MORE_PLANTED + PLANTED if _values(p)[0] == name)


#: The GPU's graded configs: GPU_CONFIG's equal tiles with a smaller K step, and the lesson's own CONFIG.
GPU_LIKE = dict(grader.CONFIG, BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=4)
LESSON_LIKE = dict(grader.CONFIG, BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8)


@pytest.mark.parametrize("name, cfg, shape, status, words", [
    ("tl.dot(b, a)", GPU_LIKE, (300, 520, 200, 7), "error", "accumulator shape is incompatible"),
    ("tl.dot(b, a)", LESSON_LIKE, (256, 512, 128, 2), "error", "must have equal reduction dimensions"),
    ("steps of num_tiles // NUM_PROGRAMS", GPU_LIKE, (300, 520, 200, 7), "fail", "steps by 6 tiles, not NUM_PROGRAMS"),
    ("C's column offset with BLOCK_M", LESSON_LIKE, (256, 1024, 128, 3), "fail",
     "(multiples of BLOCK_M = 128, not of BLOCK_N = 256): an offset uses one block for another"),
], ids=["dot(b, a), square tiles", "dot(b, a), unequal tiles", "a step of 6 redoes tiles", "columns by BLOCK_M"])
def test_the_gpu_configs_name_the_mistake(name, cfg, shape, status, words):
    """On a GPU the graded tiles differ from the interpreter's all-16 ones, and the same mistakes show otherwise:
    tl.dot(b, a) does not compile (its shapes do not fit), a step that is not NUM_PROGRAMS redoes tiles instead of
    leaving some out, C's columns at multiples of BLOCK_M are no multiples of BLOCK_N. Each is named; run here at
    the GPU's configs in the interpreter. The lesson's tiles are graded in fp16, as on a GPU: in fp32 their stages
    need more shared memory than an SM has."""
    dtype = torch.float16 if cfg is LESSON_LIKE else torch.float32
    case = grader._case(_mutant(*_planted(name)[1]), *shape, dtype, torch.Generator().manual_seed(0), cfg)
    assert case.status == status and words in case.hint, case
    if name == "tl.dot(b, a)":
        assert "B's block times A's" in case.hint, case


def test_a_gpu_trap_is_named():
    """A CUDA illegal instruction (where an H100 stopped with the tile loop past num_tiles) gets that mistake's
    hint, whatever the exception wrapping it; another error gets none."""
    try:
        try:
            raise RuntimeError("CUDA error: an illegal instruction was encountered")
        except RuntimeError as inner:
            raise ValueError("the launch failed") from inner
    except ValueError as exc:
        assert grader._error_hint(exc, "") == grader.TRAP_HINT
    assert "the tile loop runs past the last tile" in grader.TRAP_HINT
    assert grader._error_hint(ValueError("something else"), "") == ""


@pytest.mark.skipif(mode.INTERPRET, reason="the interpreter's tracer names it in-process (the parametrized test)")
def test_a_gpu_trap_is_named_from_a_child_process(tmp_path):
    """On a GPU the tile loop past num_tiles ends the CUDA context (an illegal instruction on an H100): graded in a
    child process, as a learner's exercise is, the report names it and this process's context lives on."""
    import json
    import subprocess
    import sys

    edits = [(LOOP.strip(), LOOP.strip().replace("num_tiles,", "num_tiles * NUM_PROGRAMS,"))]
    planted_file(tmp_path, "hopper", edits)
    code = ("import importlib.util, json, sys; from tkcourse import check; "
            "spec = importlib.util.spec_from_file_location('planted_hopper', sys.argv[1]); "
            "mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod); "
            "rep = check.run('hopper', module=mod, quiet=True); p = rep.first_problem(); "
            "print(json.dumps([rep.status, p.hint if p else '']))")
    root = Path(__file__).resolve().parents[1]
    run = subprocess.run([sys.executable, "-c", code, str(tmp_path / "exercises" / "hopper.py")], capture_output=True,
                         text=True, timeout=600, cwd=root)
    status, hint = json.loads(run.stdout.strip().splitlines()[-1])
    assert status in ("fail", "error") and "the tile loop runs past the last tile" in hint, (status, hint,
                                                                                           run.stderr[-2000:])
    assert torch.ones(2, device=DEV).sum().item() == 2  # this process's GPU still works


def test_the_k_step_models_differ_from_the_product_and_each_other():
    """Each K-loop model is wrong on the first graded input, and no two agree."""
    a, b = _randn(37, 40).cpu(), _randn(40, 45, seed=1).cpu()
    models = [grader.k_steps_only(a, b, grader.CONFIG, steps) for _, steps in grader.k_step_mistakes(40, grader.CONFIG)]
    right = a.double() @ b.double()
    for i, m in enumerate(models):
        assert not torch.allclose(m, right, atol=1e-2, rtol=1e-2), i
        assert all(not torch.allclose(m, other, atol=1e-2, rtol=1e-2) for other in models[i + 1:]), i
