"""Graders: ``run("vector_add")`` checks your exercise and explains what is wrong.

One module per lesson (``tkcourse/check/<lesson>.py``) defines ``grade(module) -> list[Case]``
against torch references, never against ``solutions/``, so a grader can also catch a bug in a
solution. ``core`` holds what they share.

Graded by name on a GPU (or with ``TKCOURSE_CHECK_ISOLATE=1``), the lesson runs in a child process:
an illegal address there ends that process's CUDA context, not the notebook's, and a kernel that
never finishes is stopped after ``TKCOURSE_CHECK_TIMEOUT`` seconds; either way a report comes back.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from .. import stubs
from .core import Case, NotDone, Report, compiles, error_case, guarded  # noqa: F401


def lessons() -> list[str]:
    """Lessons that have a grader (``check/<part>.py`` for each part in ``tkcourse.course.LESSONS``)."""
    from ..course import graded

    return graded()


_MARK = "tkcourse-check-report:"  # the child's last line: this, then the report as JSON


def _isolate_default() -> bool:
    env = os.environ.get("TKCOURSE_CHECK_ISOLATE", "").strip().lower()
    if env in ("1", "true", "yes", "on", "0", "false", "no", "off"):
        return env in ("1", "true", "yes", "on")
    from .. import mode
    return mode.DEVICE == "cuda"


def _timeout() -> float:
    try:
        return float(os.environ.get("TKCOURSE_CHECK_TIMEOUT", "600"))
    except ValueError:
        return 600.0


def _child_main(name: str) -> None:
    """In the child: grade ``name`` and print the report as JSON on the last line."""
    rep = run(name, quiet=True, isolate=False, record=False)  # the parent records it
    print(_MARK + json.dumps(dataclasses.asdict(rep)), flush=True)


def _run_in_child(name: str, code: str | None = None) -> Report:
    """Grade ``name`` in a fresh Python process; a child that dies or hangs is a failed report with a hint.

    ``code``: what the child runs (tests pass one that dies); by default it grades ``name``.
    """
    root = Path(__file__).resolve().parents[2]
    code = code or "import sys; from tkcourse.check import _child_main; _child_main(sys.argv[1])"
    env = dict(os.environ, TKCOURSE_CHECK_ISOLATE="0")
    limit = _timeout()
    where = f"exercises/{name}.py"
    try:
        proc = subprocess.run([sys.executable, "-c", code, name], cwd=root, env=env, capture_output=True,
                              text=True, timeout=limit)
    except subprocess.TimeoutExpired as e:
        tail = "\n".join(((e.stderr or b"").decode(errors="replace") if isinstance(e.stderr, bytes)
                          else (e.stderr or "")).splitlines()[-8:])
        case = Case("grading", "error", f"no report after {limit:g} s; stopped" + (f"\n{tail}" if tail else ""),
                    f"your code ran for more than {limit:g} s without finishing: a loop that never ends? (a while "
                    "loop whose condition never changes, a range over the wrong bound). Raise "
                    "TKCOURSE_CHECK_TIMEOUT if your machine is just slow")
        return Report(name, where, [case]).finish()
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(_MARK):
            d = json.loads(line[len(_MARK):])
            cases = [Case(**c) for c in d.pop("cases")]
            return Report(cases=cases, **d)
    if proc.returncode < 0:
        with_what = f"killed by {signal.Signals(-proc.returncode).name}"
    else:
        with_what = f"exit status {proc.returncode}"
    tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-12:])
    case = Case("grading", "error", f"the grading process died ({with_what}) before it could report"
                + (f":\n{tail}" if tail else ""),
                "your code ended the process that ran it: on a GPU an illegal memory access (a load or store "
                "outside every tensor) ends the CUDA context, and in the interpreter a stray store can corrupt "
                "the heap. Check it in the interpreter, where the course's tracer reports each out-of-bounds "
                f"access instead of performing it: TRITON_INTERPRET=1 python -m tkcourse check {name}")
    return Report(name, where, [case]).finish()


def run(name: str, module=None, quiet: bool = False, isolate: bool | None = None,
        record: bool | None = None) -> Report:
    """Grade lesson ``name``: your exercise by default, or ``module`` (any module with the API).

    Returns a ``Report`` (``.passed``, ``.status`` in pass/fail/error/todo, printable). ``isolate``:
    grade in a child process (only by name; by default on a GPU, or with ``TKCOURSE_CHECK_ISOLATE=1``).
    ``record``: keep the result in your local progress (``tkcourse progress``); by default when your
    own exercise was graded (by name, without ``TKCOURSE_SOLUTIONS=1``) and it was not an untouched stub.
    """
    from ..labels import use_solutions

    report = _grade(name, module, quiet, isolate)
    if record is None:
        record = module is None and not use_solutions()
    if record and report.status != "todo":
        from .. import progress

        try:
            progress.record(report)
        except OSError:  # a read-only checkout, say: progress is a convenience, never an error
            pass
    return report


def _grade(name: str, module, quiet: bool, isolate: bool | None) -> Report:
    """``run`` without recording: the report of grading ``name``."""
    from ..errors import UserError
    from ..labels import exercise, use_solutions

    if name not in lessons():
        raise UserError(f"no grader named {name!r}; graders: {', '.join(lessons())}")
    if module is None and (_isolate_default() if isolate is None else isolate):
        report = _run_in_child(name)
        if not quiet:
            print(report)
        return report
    grader = importlib.import_module(f"{__name__}.{name}")
    if module is None:
        if not use_solutions():
            st = stubs.status(name) if name in stubs.lessons() else None
            if st is not None and st.state in ("untouched", "missing"):
                what = "is still the generated stub" if st.state == "untouched" else "does not exist (run `make exercises`)"
                report = Report(name, f"exercises/{name}.py", status="todo",
                                message=f"exercises/{name}.py {what}: fill in its TODO parts, then check again.")
                if not quiet:
                    print(report)
                return report
        try:
            module = exercise(name, fallback=False)
        except Exception as e:  # a syntax error in the learner's file, say
            rep = Report(name, f"exercises/{name}.py", [error_case("import", e)])
            rep.cases[0].hint = "your file does not import: fix the error above first"
            rep.finish()
            if not quiet:
                print(rep)
            return rep
    source = getattr(module, "__file__", None) or getattr(module, "__name__", repr(module))
    source = "/".join(str(source).replace("\\", "/").split("/")[-2:])
    cases = []
    # graders yield lazily: stop at the first problem, fix one thing at a time; whatever the learner's
    # module makes the grader raise becomes an error case (guarded), so a report is always printed
    with compiles.recorded(module) as launched:
        for case in guarded(grader.grade(module)):
            cases.append(case)
            if case.status != "pass":
                break
    if cases and all(c.status == "pass" for c in cases):  # right in the interpreter: would a GPU compile it?
        compiled = compiles.case(launched)
        if compiled is not None:
            cases.append(compiled)
    report = Report(name, source, cases).finish()
    if not quiet:
        print(report)
    return report


def hint(name: str):
    """Reveal the next hint of exercise ``name`` (one more each call; ``tkcourse.reveal``)."""
    from ..reveal import hint as _hint

    return _hint(name)


def hint_button(name: str):
    """A notebook button that reveals the hints of ``name`` one at a time."""
    from ..reveal import hint_button as _hint_button

    return _hint_button(name)


def answers(lesson: str):
    """A button a question of lesson ``lesson``'s "Check yourself", each revealing its answer."""
    from ..reveal import answers as _answers

    return _answers(lesson)


def answer(lesson: str, number: int):
    """The answer to question ``number`` of lesson ``lesson``'s "Check yourself", as text."""
    from ..reveal import answer as _answer

    return _answer(lesson, number)


def compare_with_reference(report: Report, name: str | None = None):
    """Once ``report`` passed: your marked functions beside the reference's; before, a line saying so."""
    from ..reveal import compare_with_reference as _compare

    return _compare(report, name)
