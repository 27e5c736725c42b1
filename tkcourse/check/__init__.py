"""Graders: ``run("vector_add")`` checks your exercise and explains what is wrong.

One module per lesson (``tkcourse/check/<lesson>.py``) defines ``grade(module) -> list[Case]``
against torch references, never against ``solutions/``, so a grader can also catch a bug in a
solution. ``core`` holds what they share.
"""

from __future__ import annotations

import importlib
import pkgutil

from .. import stubs
from .core import Case, NotDone, Report, error_case, guarded  # noqa: F401


def lessons() -> list[str]:
    """Lessons that have a grader."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name != "core")


def run(name: str, module=None, quiet: bool = False) -> Report:
    """Grade lesson ``name``: your exercise by default, or ``module`` (any module with the API).

    Returns a ``Report`` (``.passed``, ``.status`` in pass/fail/error/todo, printable).
    """
    from .. import exercise, use_solutions

    if name not in lessons():
        raise ValueError(f"no grader named {name!r}; graders: {', '.join(lessons())}")
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
    for case in guarded(grader.grade(module)):
        cases.append(case)
        if case.status != "pass":
            break
    report = Report(name, source, cases).finish()
    if not quiet:
        print(report)
    return report
