"""tools/mutants.py: one-edit mutants of the learner's lines, each graded as a learner's file."""

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("mutants_tool", ROOT / "tools" / "mutants.py")
tool = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = tool  # dataclasses look their module up there
_spec.loader.exec_module(tool)


def _text(lesson):
    return (ROOT / "solutions" / f"{lesson}.py").read_text()


def test_mutants_edit_one_learner_line_each_and_never_repeat():
    text = _text("matmul")
    mine = tool.learner_lines(text)
    found = tool.mutants(text)
    assert len(found) > 20
    original = text.splitlines()
    for m, mutated in found:
        changed = [i + 1 for i, (a, b) in enumerate(zip(original, mutated.splitlines())) if a != b]
        assert changed == [m.line] and m.line in mine, m
        assert len(mutated.splitlines()) == len(original)
    assert len({t for _, t in found}) == len(found)
    kinds = {m.what for m, _ in found}
    assert {"comparison turned", "operator swapped", "mask= of tl.load dropped", "augmented assignment dropped"} <= kinds


def test_the_answer_passes_and_a_dropped_store_mask_is_caught(tmp_path):
    text = _text("vector_add")
    report, stopped = tool.grade("vector_add", text, tmp_path, 0, timeout=120)
    assert stopped == "" and report.status == "pass", report
    (m, mutated), = [x for x in tool.mutants(text) if x[0].what == "mask= of tl.store dropped"]
    report, stopped = tool.grade("vector_add", mutated, tmp_path, 1, timeout=120)
    r = tool.outcome(m, report, stopped, 0.0)
    assert r.verdict == "caught" and "mask" in r.hint, r


def test_a_grader_that_raises_is_told_apart_from_a_kernel_that_fails(tmp_path):
    from tkcourse.check.core import Case, Report

    m = tool.Mutant(1, "x", "a", "b")
    raised = Report("vector_add", "x", [Case("grading (after 2 cases)", "error", "KeyError: 'BLOCK'", "")]).finish()
    assert tool.outcome(m, raised, "", 0.0).verdict == "grader raised"
    learners = Report("vector_add", "x", [Case("grading (after 2 cases)", "error", "ValueError: no",
                                              "your code raised; the message above says where")]).finish()
    assert tool.outcome(m, learners, "", 0.0).verdict == "caught"
    assert tool.outcome(m, None, "timed out", 0.0).verdict == "timed out"
