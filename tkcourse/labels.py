"""Whose code ran: the learner's exercise, or the reference solution standing in for it (``tkcourse.whose``).

Until a learner edits ``exercises/<lesson>.py``, ``tkcourse.exercise(lesson)`` hands the notebook the
reference solution so that its demonstrations run. Every print, legend, title and table must then
say so: "your kernel" is only ever written about the learner's own code. This module is the one
place that decides it; notebooks ask it instead of writing "your" themselves::

    mod = tkcourse.exercise("matmul")
    w = tkcourse.whose(mod)
    w.label("kernel")     # "your kernel"  or  "the reference kernel"
    w.legend("kernel")    # "your kernel"  or  "reference kernel"     (for legends and table rows)
    w.note                # ""             or  "the reference solution ran: exercises/matmul.py is not done yet"
    print(w.source(mod.matmul_kernel))   # what the learner should see of a function (never a solution)

After a check, a cell runs the learner's module only once it passes; ``after_check`` is that rule::

    report = tkcourse.check.run("matmul")
    kernel, ran, line = tkcourse.labels.after_check(report, mod)   # mod, or solutions.matmul until it passes
    print(line)           # "running the reference kernel: exercises/matmul.py does not pass the check yet ..."
"""

from __future__ import annotations

import importlib
import inspect
import os
import types
from dataclasses import dataclass

from .course import CHECKOUT, import_checkout


def use_solutions() -> bool:
    """True when ``TKCOURSE_SOLUTIONS=1``: exercises resolve to the reference solutions."""
    return os.environ.get("TKCOURSE_SOLUTIONS", "").strip().lower() in ("1", "true", "yes", "on")


def exercise(name: str, fallback: bool = True):
    """The learner's module for lesson ``name`` (or the solution with ``TKCOURSE_SOLUTIONS=1``).

    While ``exercises/<name>.py`` is still the untouched stub, a notebook's demonstrations would only
    fail, so (with ``fallback``) the reference solution stands in, and this says so. Once you edit
    the file, your module is returned: re-run the cell that calls this after editing.
    """
    package = "solutions" if use_solutions() else "exercises"
    who = Whose(name, False, "TKCOURSE_SOLUTIONS=1") if package == "solutions" else Whose(name, True, "your exercise")
    if package == "exercises" and fallback:
        from . import stubs

        if name in stubs.lessons() and stubs.status(name).state in ("untouched", "missing"):
            print(f"exercises/{name}.py is not done yet: until you fill it in, the cells below use the reference "
                  f"solution (solutions/{name}.py), and say so. Re-run this cell after editing your file.")
            package = "solutions"
            who = Whose(name, False, "not done yet")
    try:
        module = _import_fresh(f"{package}.{name}")
    except Exception as e:  # noqa: BLE001 (the learner's file may raise anything while it imports)
        _missing(e, package, name)
        if package != "exercises" or not fallback:
            raise
        # An edited exercise that does not import (a syntax error, an indentation slip, a name it
        # lacks) would otherwise stop every cell below with a NameError: say what broke, once, and
        # let the reference stand in, labelled as such, until the file imports.
        where = f", line {e.lineno}" if isinstance(e, SyntaxError) and e.lineno else ""
        print(f"exercises/{name}.py does not import ({type(e).__name__}{where}: {getattr(e, 'msg', None) or e}): "
              f"until it does, the cells below use the reference solution (solutions/{name}.py), and say so. "
              "tkcourse.check.run shows the whole error; re-run this cell after fixing your file.")
        package, who = "solutions", Whose(name, False, "does not import")
        module = _import_fresh(f"{package}.{name}")
    if package == "solutions":
        module.__tkcourse_whose__ = who  # read by tkcourse.whose(module): every label says whose code ran
    return module


def _import_fresh(module_name: str):
    """``module_name`` from the checkout, reloaded so that the latest edits of its file count."""
    return importlib.reload(import_checkout(module_name))


def _missing(e: BaseException, package: str, name: str) -> None:
    """Raise the error that says where the lessons are, when ``package/name.py`` itself is missing."""
    if not (isinstance(e, ModuleNotFoundError) and e.name in (f"{package}.{name}", package)):
        return
    if CHECKOUT is None:  # a non-editable install ships tkcourse alone (README, "Installing")
        raise ModuleNotFoundError(
            f"no {package}/{name}.py: this tkcourse is installed without the course's checkout, whose "
            "folders solutions/ and exercises/ hold the lessons. Clone the course and install it "
            "from there: `make lab`, or `pip install -e .`") from e
    raise ModuleNotFoundError(
        f"no {package}/{name}.py. Lessons: see solutions/. Generate missing exercises with `make exercises`."
    ) from e


@dataclass(frozen=True)
class Whose:
    lesson: str
    learner: bool  # True: the learner's exercises/<lesson>.py ran
    why: str  # "your exercise" | "not done yet" | "TKCOURSE_SOLUTIONS=1" | "reference" (imported directly)
    #           | "fails the check" | "loaded before your edit" (the two of ``after_check``)

    def label(self, thing: str = "kernel") -> str:
        """For prose: 'your kernel' or 'the reference kernel'."""
        return f"your {thing}" if self.learner else f"the reference {thing}"

    def legend(self, thing: str = "kernel") -> str:
        """For legends, titles and table rows: 'your kernel' or 'reference kernel'."""
        return f"your {thing}" if self.learner else f"reference {thing}"

    @property
    def note(self) -> str:
        """One line saying why the reference ran, or '' when the learner's code did."""
        if self.learner:
            return ""
        if self.why in ("reference", "TKCOURSE_SOLUTIONS=1"):
            return f"the reference solution ran ({self.reason})"
        return f"the reference solution ran: {self.reason}"

    @property
    def reason(self) -> str:
        """Why this code ran, in a few words (the end of ``note`` and of ``after_check``'s line)."""
        ex = f"exercises/{self.lesson}.py"
        return {
            "your exercise": f"{ex} is yours",
            "not done yet": f"{ex} is not done yet",
            "does not import": f"{ex} does not import yet (tkcourse.check.run(\"{self.lesson}\") shows the error)",
            "TKCOURSE_SOLUTIONS=1": "TKCOURSE_SOLUTIONS=1",
            "fails the check": f"{ex} does not pass the check yet (tkcourse.check.run(\"{self.lesson}\") shows where "
                               "it stops); yours runs here once it passes",
            "loaded before your edit": f"it was loaded while {ex} was not done yet, and your file passes the "
                                       "check now: re-run the notebook's first cell to run yours",
        }.get(self.why, f"solutions/{self.lesson}.py")

    def source(self, obj) -> str:
        """The source of ``obj`` (a function or a Triton kernel) as this learner may see it.

        The learner's own code is shown as it is. A reference function is shown as the exercise
        shows it: its ``### BEGIN SOLUTION`` regions replaced by the exercise's TODO stub, so that a
        "Your turn" cell never gives the answer away.
        """
        return source(obj, reveal=False)

    def __str__(self) -> str:
        return self.label("code") if self.learner else self.note


def after_check(report, mine, reference=None, thing: str = "kernel") -> tuple[types.ModuleType, Whose, str]:
    """What a cell after a check runs: ``(module, whose, line)``.

    ``report``: what ``tkcourse.check.run`` returned; ``mine``: the module from ``tkcourse.exercise``;
    ``reference``: the lesson's solution module (by default ``solutions.<lesson>``, imported when needed).
    The learner's module runs only when it passed the check;
    otherwise the reference runs, so that no cell after a failed check shows a result as the learner's.
    ``whose`` labels what ran (``whose.label("kernel")``), and ``line`` says which ran and why, to print
    first::

        kernel, ran, line = tkcourse.labels.after_check(report, mod, ref)
        print(line)
    """
    passed = bool(getattr(report, "passed", False))
    lesson = getattr(report, "lesson", "") or _lesson_of(mine)[1]
    who = whose(mine)
    if who.learner and passed:
        ran = who
        reason = f"exercises/{who.lesson}.py passes the check"
    elif who.learner:
        ran = Whose(who.lesson, False, "fails the check")
        if reference is None:
            reference = import_checkout(f"solutions.{who.lesson}")
        mine, reason = reference, ran.reason
    elif passed and who.why == "not done yet" and not use_solutions():
        ran = Whose(lesson, False, "loaded before your edit")  # the check graded the edited file
        reason = ran.reason
    else:
        ran, reason = who, who.reason
    sep = " " if ran.why in ("reference", "TKCOURSE_SOLUTIONS=1") else ": "
    line = f"running {ran.label(thing)}{sep}{'(' + reason + ')' if sep == ' ' else reason}"
    return mine, ran, line


def _lesson_of(module: types.ModuleType) -> tuple[str, str]:
    name = getattr(module, "__name__", "")
    package, _, lesson = name.rpartition(".")
    return package, lesson or name


def whose(module) -> Whose:
    """Whose code ``module`` is (a module from ``tkcourse.exercise``, or ``solutions.<lesson>`` itself)."""
    if isinstance(module, str):  # a lesson name: what tkcourse.exercise(name) would return
        from . import stubs

        if use_solutions():
            return Whose(module, False, "TKCOURSE_SOLUTIONS=1")
        if module in stubs.lessons() and stubs.status(module).state in ("untouched", "missing"):
            return Whose(module, False, "not done yet")
        return Whose(module, True, "your exercise")
    package, lesson = _lesson_of(module)
    if package == "exercises":
        return Whose(lesson, True, "your exercise")
    recorded = getattr(module, "__tkcourse_whose__", None)
    if isinstance(recorded, Whose) and recorded.lesson == lesson:
        return recorded
    return Whose(lesson, False, "TKCOURSE_SOLUTIONS=1" if use_solutions() else "reference")


def _function(obj):
    obj = getattr(obj, "fn", obj)  # JITFunction / Autotuner / Heuristics wrap the Python function
    while hasattr(obj, "fn") and not inspect.isfunction(obj):
        obj = obj.fn
    return obj


def source(obj, reveal: bool = False) -> str:
    """Source of ``obj`` without solution markers; with ``reveal=False`` its solution regions become the stub."""
    from . import stubs

    text = inspect.getsource(_function(obj))
    if "### BEGIN SOLUTION" not in text:
        return text
    if not reveal:
        body = stubs.stub_text(text, "<source>")
        return body[len(stubs.HEADER.format(name="<source>")):]
    return stubs.answer_text(text)
