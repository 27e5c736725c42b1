"""tkcourse: the helper package of the Triton kernel course.

Importing it first decides the runtime mode (``tkcourse.mode``): compiled on a CUDA GPU, or Triton's
interpreter on the CPU. Everything else is imported on demand, so ``import tkcourse`` stays cheap:

* ``tkcourse.exercise(name)``: your module ``exercises/<name>.py`` (the solution when
  ``TKCOURSE_SOLUTIONS=1``), reloaded so your latest edits count;
* ``tkcourse.whose(module)``: whose code ran (yours, or the reference while your exercise is not done),
  for every label a notebook prints;
* ``tkcourse.check.run(name)``: grade it, with hints when something is wrong;
* ``tkcourse.size(name)``: a problem size for this mode (small in the interpreter), from ``tkcourse.course``;
* ``tkcourse.bench``, ``tkcourse.traffic``, ``tkcourse.autotune``, ``tkcourse.plots``: measuring and drawing.
"""

from __future__ import annotations

import importlib

# first the mode (TRITON_INTERPRET, before any kernel is defined), then the interpreter's NumPy fix
from . import mode, triton_internals  # noqa: F401
from .course import put_checkout_on_path, size  # noqa: F401  (tkcourse.size(name): a lesson's problem size)
from .labels import exercise, use_solutions  # noqa: F401  (re-exported: tkcourse.exercise(name))
from .mode import DEVICE, INTERPRET  # noqa: F401

# solutions/, exercises/ and benchmarks/ are the checkout's folders, not installed packages, and the
# notebooks import solutions.<lesson> themselves: see tkcourse.course.put_checkout_on_path and README,
# "Installing".
put_checkout_on_path()

__version__ = "0.1.0"


def whose(module):
    """Whose code ``module`` (from ``exercise``) is: see ``tkcourse.labels``. Labels come from here."""
    from .labels import whose as _whose

    return _whose(module)


def __getattr__(attr):  # lazy submodules: tkcourse.bench, tkcourse.plots, ...
    if attr in ("check", "bench", "traffic", "autotune", "plots", "stubs", "doctor", "lab"):
        return importlib.import_module(f".{attr}", __name__)
    raise AttributeError(f"module 'tkcourse' has no attribute {attr!r}")
