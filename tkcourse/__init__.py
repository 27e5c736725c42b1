"""tkcourse: the helper package of the Triton kernel course.

Importing it first decides the runtime mode (``tkcourse.mode``): compiled on a CUDA GPU, or Triton's
interpreter on the CPU. Everything else is imported on demand, so ``import tkcourse`` stays cheap:

* ``tkcourse.exercise(name)``: your module ``exercises/<name>.py`` (the solution when
  ``TKCOURSE_SOLUTIONS=1``), reloaded so your latest edits count;
* ``tkcourse.whose(module)``: whose code ran (yours, or the reference while your exercise is not done),
  for every label a notebook prints;
* ``tkcourse.check.run(name)``: grade it, with hints when something is wrong;
* ``tkcourse.bench``, ``tkcourse.traffic``, ``tkcourse.autotune``, ``tkcourse.plots``: measuring and drawing.
"""

from __future__ import annotations

import importlib
import os

from . import mode  # noqa: F401  (first: sets TRITON_INTERPRET before any kernel is defined)
from .mode import DEVICE, INTERPRET  # noqa: F401

__version__ = "0.1.0"


def use_solutions() -> bool:
    """True when ``TKCOURSE_SOLUTIONS=1``: exercises resolve to the reference solutions."""
    return os.environ.get("TKCOURSE_SOLUTIONS", "").strip().lower() in ("1", "true", "yes", "on")


def exercise(name: str, fallback: bool = True):
    """The learner's module for lesson ``name`` (or the solution with ``TKCOURSE_SOLUTIONS=1``).

    While ``exercises/<name>.py`` is still the untouched stub, a notebook's demonstrations would only
    fail, so (with ``fallback``) the reference solution stands in, and this says so. Once you edit
    the file, your module is returned: re-run the cell that calls this after editing.
    """
    from .labels import Whose

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
        module = importlib.import_module(f"{package}.{name}")
    except ModuleNotFoundError as e:
        if e.name in (f"{package}.{name}", package):
            raise ModuleNotFoundError(
                f"no {package}/{name}.py. Lessons: see solutions/. Generate missing exercises with `make exercises`."
            ) from e
        raise
    module = importlib.reload(module)
    if package == "solutions":
        module.__tkcourse_whose__ = who  # read by tkcourse.whose(module): every label says whose code ran
    return module


def whose(module):
    """Whose code ``module`` (from ``exercise``) is: see ``tkcourse.labels``. Labels come from here."""
    from .labels import whose as _whose

    return _whose(module)


def __getattr__(attr):  # lazy submodules: tkcourse.bench, tkcourse.plots, ...
    if attr in ("check", "bench", "traffic", "autotune", "plots", "stubs", "doctor", "lab"):
        return importlib.import_module(f".{attr}", __name__)
    raise AttributeError(f"module 'tkcourse' has no attribute {attr!r}")
