"""Hints of the graders of lessons 01-05 for mistakes a learner makes on the way: each test plants
the mistake in the solution as a learner would have finished it (``stubs.answer_text``), grades it, and checks
that the grader fails it (or reports the error) with a hint that names the mistake."""

from pathlib import Path

import pytest
import torch
from helpers import assert_grader_catches, mutant

from tkcourse import check, mode, stubs
from tkcourse.check import autotune as autotune_grader
from tkcourse.check import matmul as matmul_grader
from tkcourse.check.core import error_case

ROOT = Path(__file__).resolve().parents[1]


def _answer(lesson: str) -> str:
    return stubs.answer_text((ROOT / "solutions" / f"{lesson}.py").read_text())


def _planted(lesson: str, *edits, name: str):
    return mutant(_answer(lesson), edits, f"planted_{name}", f"solutions/{lesson}.py")


# ----- lesson 05: the online softmax --------------------------------------------------------------------


def test_a_running_max_started_at_0_fails_on_rows_far_below_0():
    """m = 0 instead of -inf is right on every row whose max is above about -88: only a row far below 0 shows it
    (exp(x - 0) underflows to 0 in fp32, l = 0, 0/0 = NaN). The NaN was computed, not left unwritten."""
    mod = _planted("online_softmax", ('m = tl.full((), float("-inf"), tl.float32)', "m = tl.zeros((), tl.float32)"),
                   name="max_from_0")
    rep = assert_grader_catches("online_softmax", mod, "running max started at 0",
                                "the running max must start at -inf, not 0")
    bad = rep.first_problem()
    assert "all far below 0" in bad.label and "computed by your kernel" in bad.detail, rep


def test_the_correct_online_softmax_passes_the_rows_far_below_0():
    rep = check.run("online_softmax", module=_planted("online_softmax", name="faithful_softmax"), quiet=True)
    assert rep.passed and any("all far below 0" in c.label for c in rep.cases), rep
    assert "on the parts" in rep.cases[-1].label, rep  # the two functions on parts of rows, past column 0


def test_a_second_pass_that_stores_nothing_is_named():
    """write_softmax left empty: every output is the grader's poison, and the hint says the second pass stores
    nothing (not that rows do not sum to 1)."""
    text = _answer("online_softmax")
    body = text[text.index("    inv_l = 1.0 / l"):text.index("@triton.jit\ndef online_softmax_kernel")]
    rep = assert_grader_catches("online_softmax", _planted("online_softmax", (body, "    pass\n\n\n"), name="no_store"),
                                "write_softmax stores nothing", "the second pass stores nothing")
    bad = rep.first_problem()
    assert "never written by your kernel" in bad.detail and "do not sum to 1" not in bad.hint, rep


_STATS_LOOP = ("for block_start in tl.range(start, end, BLOCK, num_stages=NUM_STAGES):\n"
               "        cols = block_start + tl.arange(0, BLOCK)\n        # evict_last")
_WRITE_LOOP = ("for block_start in tl.range(start, end, BLOCK, num_stages=NUM_STAGES):\n"
               "        cols = block_start + tl.arange(0, BLOCK)\n        mask")


@pytest.mark.parametrize("loops, hint", [
    ((_STATS_LOOP,), "online_stats read the columns before start"),
    ((_WRITE_LOOP,), "write_softmax stored the columns before start"),
    ((_STATS_LOOP, _WRITE_LOOP), "online_stats read the columns before start: on x_row[start:end] it must take in "
                                 "only those, so loop from start (tl.range(start, end, BLOCK, ...)), not from 0; "
                                 "and write_softmax stored"),
])
def test_a_pass_that_loops_from_column_0_is_caught_on_a_part_of_a_row(loops, hint):
    """The lesson's kernel calls both functions with start = 0, where a loop from 0 is right; the split-row kernel
    passes a part's start. The grader calls them on parts of rows itself, after every case of the whole rows."""
    edits = [(loop, loop.replace("tl.range(start,", "tl.range(0,")) for loop in loops]
    mod = _planted("online_softmax", *edits, name="from_0_" + str(len(loops)) + loops[0][-4:])
    rep = assert_grader_catches("online_softmax", mod, "a loop from column 0", hint)
    bad = rep.first_problem()
    assert "on the parts [0, 230), [230, 450)" in bad.label and bad is rep.cases[-1], rep
    assert sum(c.status == "pass" for c in rep.cases) == len(rep.cases) - 1, rep


# ----- lesson 03: the matmul ----------------------------------------------------------------------------


def test_an_fp16_accumulator_in_the_lessons_form_gets_the_fp32_hint():
    """acc = tl.zeros(..., dtype=tl.float16) then acc = tl.dot(a, b, acc): Triton's own check in tl.dot raises
    (AssertionError, wrapped by the interpreter or the compiler); the hint says to accumulate in fp32."""
    mod = _planted("matmul", ("acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
                              "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float16)"), name="f16_acc")
    rep = check.run("matmul", module=mod, quiet=True)
    bad = rep.first_problem()
    assert rep.status == "error" and "AssertionError" in bad.detail, rep
    assert "accumulate in fp32" in bad.hint and "tl.dot(a, b, acc)" in bad.hint, rep


def _raised(fn):
    try:
        fn()
    except BaseException as exc:  # noqa: BLE001
        return exc
    raise AssertionError("did not raise")


def test_only_tl_dots_own_check_is_taken_for_an_fp16_accumulator():
    """An AssertionError of the learner's own, or one with a message, or another error, is not tl.dot's check
    of acc; a chain that loops is walked once, and the grader never raises."""
    def mine():
        assert False  # noqa: B011,PT015

    def wrapped():
        try:
            mine()
        except AssertionError as e:
            raise RuntimeError("wrapped") from e
    assert not matmul_grader._dot_acc_mismatch(_raised(mine))
    assert not matmul_grader._dot_acc_mismatch(_raised(wrapped))
    assert not matmul_grader._dot_acc_mismatch(ValueError("acc"))
    assert not matmul_grader._dot_acc_mismatch(None)
    loop = _raised(wrapped)
    loop.__cause__.__context__ = loop  # a cycle
    assert not matmul_grader._dot_acc_mismatch(loop)


GROUPED = "pid_n = (pid % pids_per_group) // group_size_m"
K_STEP = "a_ptrs += BLOCK_K * stride_ak"
C_PTRS = "offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn"
GRID = 'return (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)'


@pytest.mark.parametrize("name, old, new, hint", [
    ("the last group not clamped", "group_size_m = min(num_pid_m - first_pid_m, GROUP_M)",
     "group_size_m = GROUP_M", "the last group of tile rows may be shorter than GROUP_M"),
    ("the group clamped to the tile rows, not those left", "group_size_m = min(num_pid_m - first_pid_m, GROUP_M)",
     "group_size_m = min(num_pid_m, GROUP_M)", "the last group of tile rows may be shorter than GROUP_M"),
    ("pid_n by a remainder", GROUPED, GROUPED.replace("//", "%"), "pid_n is (pid % pids_per_group) // group_size_m"),
    ("a 2-D grid", GRID, 'return (triton.cdiv(M, meta["BLOCK_M"]), triton.cdiv(N, meta["BLOCK_N"]))',
     "the kernel takes its tile from tl.program_id(axis=0) alone"),
    ("A's K step by its row stride", K_STEP, K_STEP.replace("stride_ak", "stride_am"),
     "further than any missing mask reaches: a stride is in the wrong place"),
    ("C's strides swapped", C_PTRS, "offs_m[:, None] * stride_cn + offs_n[None, :] * stride_cm",
     "C is stored with its strides swapped"),
    ("K // BLOCK_K steps", "for k in range(0, tl.cdiv(K, BLOCK_K)):", "for k in range(0, K // BLOCK_K):",
     "a loop over K // BLOCK_K steps runs none"),
])
def test_matmul_slips_that_got_a_grid_or_mask_hint_are_named(name, old, new, hint):
    """Each got a hint about the grid, the store mask or the load masks (or none): tiles taken twice are read from
    the tracer's record of C's stores, with the launch's grid; the K step from how far past A the loads went."""
    rep = assert_grader_catches("matmul", _planted("matmul", (old, new), name="mm_" + name.split()[0]), name, hint)
    assert "mask rows < M on the edge tile" not in rep.first_problem().hint, rep


def test_an_unclamped_last_group_is_named_at_two_by_two_tiles():
    """At 2 x 2 tiles with GROUP_M = 8, an unclamped group and a pid_n taken by % with groups of one leave the same
    tiles unwritten: the launch's own GROUP_M decides. A GPU's first failing case is this one."""
    mod = _planted("matmul", ("group_size_m = min(num_pid_m - first_pid_m, GROUP_M)", "group_size_m = GROUP_M"),
                   name="mm_unclamped_2x2")
    a = torch.randn(128, 64, device=mode.DEVICE)
    b = torch.randn(64, 128, device=mode.DEVICE)
    config = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=8, num_warps=4, num_stages=1)
    case = matmul_grader._attempt("2 x 2 tiles", mod.matmul, (a, b), a.double() @ b.double(),
                                  kwargs=dict(config=config), atol=2e-2, rtol=2e-2)
    assert case.status == "fail" and "the last group of tile rows may be shorter than GROUP_M" in case.hint, case


def test_a_softmax_whose_programs_each_take_every_row_fails():
    """tl.range(pid, n_rows, 1): every program computes every row after its own, so the output is right and the
    work is done up to P times over. The tracer counts each element's stores."""
    loop = "tl.range(tl.program_id(0), n_rows, tl.num_programs(0), num_stages"
    mod = _planted("softmax", (loop, loop.replace("tl.num_programs(0), num", "1, num")), name="rows_step_1")
    rep = assert_grader_catches("softmax", mod, "a row loop of step 1", "step the row loop by tl.num_programs(0)")
    assert "stored more than once" in rep.first_problem().detail and len(rep.cases) == 1, rep


# ----- lesson 01: vector add ----------------------------------------------------------------------------


def test_a_launcher_left_as_the_stub_is_told_its_placeholder_is_still_none():
    """The kernel filled in, the launcher's out = None left under the given return out: the hint says what the
    other graders say of a placeholder left None, not to add a return the file already has."""
    text = _answer("vector_add")
    body = text[text.index("    out = torch.empty_like(x)"):text.index("    return out")]
    rep = check.run("vector_add", module=_planted("vector_add", (body, "    out = None\n"), name="stub_launcher"),
                    quiet=True)
    bad = rep.first_problem()
    assert rep.status == "todo" and "returned None" in bad.detail, rep
    still_none = error_case("", TypeError("'NoneType' object is not subscriptable")).hint  # the others' wording
    assert bad.hint.startswith(still_none) and "out = None" in bad.hint, rep
    assert "return the output tensor" not in bad.hint, rep


# ----- lesson 04: autotune ------------------------------------------------------------------------------

FLOOR_LINE = 'if (c["BLOCK_M"] > max(16, next_pow2(M))'


@pytest.mark.parametrize("floor", [64, 32])
def test_a_prune_that_floors_block_m_above_16_gets_a_tile_size_hint(floor):
    """BLOCK_M floored at 64 (the rows of Hopper's wgmma), as the lesson invites to try: the configs fit in
    shared memory, so the hint is about the tile's size, says what prune kept and what the rule allows."""
    mod = _planted("autotune", (FLOOR_LINE, FLOOR_LINE.replace("16", str(floor))), name=f"floor_{floor}")
    rep = assert_grader_catches("autotune", mod, f"BLOCK_M floored at {floor}", f"floored at {floor} instead of 16")
    bad = rep.first_problem()
    assert "skinny problem" in bad.label and "does not fit" not in bad.hint, rep
    assert f"keeps BLOCK_M up to {floor}" in bad.hint and "max(16, next_pow2(M)) = 16" in bad.hint, rep


def test_a_kept_tile_too_large_for_the_problem_is_named_when_no_known_mistake_fits():
    """One config too large for the problem kept beside the right answer: no known mistake matches, and the hint
    names the config and the side that is too large, not shared memory."""
    import types

    import solutions.autotune as sol

    def prune(configs, M, N, K, dtype_bytes=2, smem_limit=232_448):
        right = sol.prune(configs, M, N, K, dtype_bytes, smem_limit)
        odd = [c for c in configs if c not in right and c["BLOCK_M"] == 2 * max(16, sol.next_pow2(M))
               and sol.shared_memory_bytes(c, dtype_bytes) <= smem_limit and c["BLOCK_N"] <= max(16, sol.next_pow2(N))
               and c["BLOCK_K"] <= max(16, sol.next_pow2(K))][:1]
        return [c for c in configs if c in right or c in odd]
    mod = types.SimpleNamespace(config_space=sol.config_space, prune=prune, __name__="planted")
    rep = assert_grader_catches("autotune", mod, "one tile too large kept", "a kept config has a tile larger than")
    bad = rep.first_problem()
    assert "BLOCK_M=" in bad.hint and "fits in shared memory" in bad.hint, rep


def test_the_tile_hint_is_silent_without_a_tile_too_large():
    cfg = dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=32, GROUP_M=8, num_warps=4, num_stages=2)
    assert autotune_grader._tile_hint([cfg], 16, 4096, 4096) == ""
    assert "BLOCK_N=32 > max(16, next_pow2(N=3)) = 16" in autotune_grader._tile_hint([cfg], 16, 3, 4096)
