"""The command line: lessons named as the notebooks name them, one line for a user's mistake."""

import pathlib
import types

import pytest

from tkcourse import check, cli, course, stubs
from tkcourse.errors import UserError

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_course_order_is_the_notebooks():
    notebooks = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert [lesson.notebook for lesson in course.LESSONS] == notebooks


def test_every_grader_and_exercise_is_a_lesson():
    """A lesson's name, or one of its parts (course.PARTS): never a module of no lesson."""
    names = [lesson.name for lesson in course.LESSONS] + [p for lesson in course.LESSONS for p in lesson.parts]
    assert set(check.lessons()) <= set(names) and set(stubs.lessons()) <= set(names)
    assert all(course.lesson_of(n) is not None for n in [*check.lessons(), *stubs.lessons()])


@pytest.mark.parametrize("text", ["03", "3", "03_matmul", "matmul", "MATMUL", "notebooks/03_matmul.ipynb",
                                  "exercises/matmul.py"])
def test_a_lesson_by_any_of_its_names(text):
    assert course.resolve(text) == "matmul"


@pytest.mark.parametrize("text", ["nosuch", "99", "03_softmax", "", "matmul2"])
def test_an_unknown_name_lists_the_lessons_in_course_order(text):
    with pytest.raises(UserError) as e:
        course.resolve(text, check.lessons(), what="grader")
    msg = str(e.value)
    assert "\n" not in msg and repr(text) in msg
    listed = msg.split(": ", 1)[1]
    # every lesson with a grader once, by its notebook, in course order; a lesson of several parts names them
    expected = [lesson.notebook + (f" ({', '.join(lesson.parts)})" if len(lesson.parts) > 1 else "")
                for lesson in course.LESSONS if lesson.parts]
    assert listed == ", ".join(expected)
    assert listed.startswith("01_vector_add, 02_softmax, 03_matmul, 04_autotune, ")


def test_a_lesson_without_a_grader_says_so():
    with pytest.raises(UserError, match="00_welcome has no grader"):
        course.resolve("00", check.lessons(), what="grader")


@pytest.fixture
def graded(monkeypatch):
    """check.run replaced by a recorder: the CLI's choice of lessons, without grading."""
    seen = []

    def run(name, quiet=False):
        seen.append(name)
        return types.SimpleNamespace(passed=True, __str__=None)

    monkeypatch.setattr(check, "run", run)
    return seen


@pytest.mark.parametrize("argv", [["01"], ["01_vector_add"], ["vector_add"], ["1", "vector_add"]])
def test_check_takes_notebook_names(graded, argv, capsys):
    assert cli.main(["check", *argv]) == 0
    assert graded == ["vector_add"]


def test_check_with_no_name_runs_the_course_in_order(graded, capsys):
    assert cli.main(["check"]) == 0
    assert graded == course.in_order(check.lessons())
    assert graded[0] == "vector_add" and graded.index("matmul") < graded.index("autotune") and "welcome" not in graded


@pytest.mark.parametrize("argv", [
    ["check", "nosuch"], ["check", "00"], ["exercises", "nosuch"], ["bench", "nosuch"],
    ["bench", "--rep", "x"], ["bench", "--warmup", "-1"], ["lab", "--port", "99999"], ["lab", "--port", "x"],
    ["lab", "--notebook-dir", "no/such/folder"], ["check", "--bogus"], ["nosuch"], [],
])
def test_a_mistake_is_one_line_and_status_2(argv, capsys):
    try:
        rc = cli.main(argv)
    except SystemExit as e:  # argparse's own errors
        rc = e.code
    out = capsys.readouterr()
    assert rc == 2
    assert out.out == "" and len(out.err.strip().splitlines()) == 1 and "Traceback" not in out.err, out.err
    assert out.err.startswith("tkcourse")


def test_debug_shows_the_traceback():
    with pytest.raises(UserError, match="nosuch"):
        cli.main(["check", "nosuch", "--debug"])
    with pytest.raises(UserError, match="nosuch"):
        cli.main(["--debug", "exercises", "nosuch"])


def test_exercises_get_resolved_names(monkeypatch):
    seen = {}
    monkeypatch.setattr(stubs, "generate", lambda names=None, force=False: seen.update(names=names, force=force))
    assert cli.main(["exercises", "03", "01_vector_add", "--force"]) == 0
    assert seen == {"names": ["matmul", "vector_add"], "force": True}
    assert cli.main(["exercises"]) == 0 and seen["names"] == course.in_order(stubs.lessons())


def test_lab_passes_its_options_on(monkeypatch):
    from tkcourse import lab

    seen = []
    monkeypatch.setattr(lab, "main", lambda argv: seen.append(argv) or 0)
    assert cli.main(["lab", "--port", "8899", "--no-browser", "--solutions"]) == 0
    assert seen == [["--notebook-dir", "notebooks", "--port", "8899", "--no-browser", "--solutions"]]


def test_the_cli_knows_every_option_of_lab():
    """The CLI parses lab's options itself (so a mistake is one line): none may be missing."""
    import argparse

    from tkcourse import lab

    captured = []

    def grab(self, args=None, namespace=None):
        captured.extend(self._actions)
        raise SystemExit(0)

    real = argparse.ArgumentParser.parse_args
    argparse.ArgumentParser.parse_args = grab
    try:
        with pytest.raises(SystemExit):
            lab.main([])
    finally:
        argparse.ArgumentParser.parse_args = real
    lab_options = {o for a in captured for o in a.option_strings} - {"-h", "--help"}
    lab_cli = cli.parser()._subparsers._group_actions[0].choices["lab"]
    assert lab_options and lab_options <= {o for a in lab_cli._actions for o in a.option_strings}


def test_a_reader_that_leaves_early_gets_no_traceback():
    """`tkcourse check | head -1`: the pipe closes under the report; the command ends quietly."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "TKCOURSE_SOLUTIONS": "1"}
    p = subprocess.Popen([sys.executable, "-m", "tkcourse", "check", "vector_add", "vector_add"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    p.stdout.close()  # the reader leaves before the report is written, as `head` may
    err = p.stderr.read().decode()
    assert p.wait(timeout=300) == 141
    assert "Traceback" not in err and "BrokenPipe" not in err and "Exception ignored" not in err, err


def test_a_lesson_of_two_parts_resolves_to_both():
    """Lesson 09 writes two kernels: ``check 09`` grades both, ``check rmsnorm`` the one; both name notebook 09."""
    among = ["vector_add", "rmsnorm", "decode_attention"]
    assert course.resolve_all(["09"], among) == ["rmsnorm", "decode_attention"]
    assert course.resolve_all(["rmsnorm"], among) == ["rmsnorm"]
    assert course.resolve_all(["decode_attention"], among) == ["decode_attention"]  # the part, by its name
    assert course.resolve_all(["09_decode_attention"], among) == ["rmsnorm", "decode_attention"]
    assert course.resolve_all([], among) == ["vector_add", "rmsnorm", "decode_attention"]
    assert course.notebook("rmsnorm") == course.notebook("decode_attention") == "09_decode_attention"
    assert course.lesson_of("rmsnorm") == "decode_attention" and course.lesson_of("launch_lean") == "launch"
    assert course.lesson_of("_checks") is None


def test_bench_saves_each_row_as_it_is_measured(tmp_path, monkeypatch):
    """A bench run stopped part way (a timeout, say) keeps the rows it measured: each is written as
    soon as it is measured, not when the lesson ends."""
    from tkcourse import bench, mode

    monkeypatch.setattr(mode, "INTERPRET", False)
    out = tmp_path / "bench.csv"

    def stopped_run(cases, on_row=None, **kwargs):
        for i in range(2):
            on_row(dict(kernel="k", provider="p", shape=str(i), dtype="float16", metric="GB/s", median=1.0,
                        p20=1.0, p80=1.0, ms=0.01, bytes=1, flops=0))
        raise KeyboardInterrupt  # what a timeout's signal does mid-lesson

    monkeypatch.setattr(bench, "run", stopped_run)
    monkeypatch.setattr(bench.core, "module_for", lambda name: types.SimpleNamespace(cases=lambda: []))
    assert cli.main(["bench", "vector_add", "--out", str(out)]) != 0  # interrupted: says so
    assert [r["shape"] for r in bench.load_records(out)] == ["0", "1"]


def test_bench_kernel_and_shape_filters_pick_the_cases_measured(tmp_path, monkeypatch):
    """``--kernel``, ``--shape``, ``--provider`` and ``--dtype`` keep only their cases (a forward's rows without its backward's); the
    other cases are never measured, and a filtered run adds no extra rows."""
    from tkcourse import bench, mode

    monkeypatch.setattr(mode, "INTERPRET", False)
    cases = [types.SimpleNamespace(kernel=k, shape=s, provider=p, dtype="float16") for k in ("fwd", "bwd")
             for s in ("a", "b") for p in ("ours", "peer")]
    cases.append(types.SimpleNamespace(kernel="fwd", shape="a", provider="ours", dtype="bfloat16"))
    measured = []

    def run(cases, on_row=None, **kwargs):
        measured.extend((c.kernel, c.shape) for c in cases)
        return []

    monkeypatch.setattr(bench, "run", run)
    module = types.SimpleNamespace(cases=lambda: iter(cases), extra_rows=lambda prov: pytest.fail("extra rows"))
    monkeypatch.setattr(bench.core, "module_for", lambda name: module)
    out = str(tmp_path / "bench.csv")
    assert cli.main(["bench", "vector_add", "--out", out, "--kernel", "fwd"]) == 0
    assert measured == [("fwd", "a"), ("fwd", "a"), ("fwd", "b"), ("fwd", "b"), ("fwd", "a")]
    measured.clear()
    assert cli.main(["bench", "vector_add", "--out", out, "--kernel", "bwd", "--shape", "b"]) == 0
    assert measured == [("bwd", "b")] * 2
    measured.clear()
    assert cli.main(["bench", "vector_add", "--out", out, "--provider", "peer", "--shape", "a"]) == 0
    assert measured == [("fwd", "a"), ("bwd", "a")]
    measured.clear()
    assert cli.main(["bench", "vector_add", "--out", out, "--dtype", "bfloat16"]) == 0
    assert measured == [("fwd", "a")]


def test_bench_rounds_reach_the_run_and_must_be_positive(tmp_path, monkeypatch, capsys):
    from tkcourse import bench, mode

    monkeypatch.setattr(mode, "INTERPRET", False)
    seen = []
    monkeypatch.setattr(bench, "run", lambda cases, on_row=None, **kwargs: (seen.append(kwargs["rounds"]), [])[1])
    monkeypatch.setattr(bench.core, "module_for", lambda name: types.SimpleNamespace(cases=lambda: []))
    out = str(tmp_path / "bench.csv")
    assert cli.main(["bench", "vector_add", "--out", out]) == 0
    assert cli.main(["bench", "vector_add", "--out", out, "--rounds", "1"]) == 0
    assert seen == [None, 1]  # None: the run's own default, TIME_ROUNDS
    for bad in ("0", "-2", "two"):
        with pytest.raises(SystemExit) as e:
            cli.main(["bench", "vector_add", "--out", out, "--rounds", bad])
        assert e.value.code == 2
    assert "not a positive number" in capsys.readouterr().err


def test_bench_kernel_filter_names_a_modules_extra_rows(tmp_path, monkeypatch):
    """``--kernel`` may name a module's extra rows (``EXTRA_KERNELS``, e.g. attention_memory): they are
    measured and written, filtered by ``--shape`` too, beside the named cases' rows."""
    from tkcourse import bench, mode

    monkeypatch.setattr(mode, "INTERPRET", False)
    monkeypatch.setattr(bench, "run", lambda cases, on_row=None, **kwargs: [])
    row = dict(provider="p", dtype="float16", metric="GB", median=0.5, p20=0.5, p80=0.5, ms=0.0, bytes=0, flops=0)
    extra = [dict(row, kernel="mem", shape=s) for s in ("a", "b")]
    module = types.SimpleNamespace(cases=lambda: iter([]), extra_rows=lambda prov: [dict(r, **prov) for r in extra],
                                   EXTRA_KERNELS=("mem",))
    monkeypatch.setattr(bench.core, "module_for", lambda name: module)
    out = tmp_path / "bench.csv"
    assert cli.main(["bench", "vector_add", "--out", str(out), "--kernel", "mem", "--shape", "b"]) == 0
    assert [(r["kernel"], r["shape"]) for r in bench.load_records(out)] == [("mem", "b")]
    assert cli.main(["bench", "vector_add", "--out", str(out), "--kernel", "mem", "--provider", "other"]) == 0
    assert bench.load_records(out) == []
    assert cli.main(["bench", "vector_add", "--out", str(out), "--kernel", "fwd"]) == 0
    assert bench.load_records(out) == []
