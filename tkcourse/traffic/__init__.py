"""Seeing memory traffic: which bytes a kernel reads and writes, measured from the kernel itself.

The course's central claim is that traffic to HBM decides a kernel's speed. This package measures it:

* ``trace(kernel, grid, *args, **kwargs) -> Trace``: run one launch in Triton's interpreter with every
  ``tl.load``/``tl.store`` intercepted and record, per program, which tensor argument it touched, which
  elements (masked-off lanes excluded) and how many bytes. Out-of-bounds lanes (an address inside no
  tensor argument) are masked off *before* they reach memory and reported, so a learner's indexing bug
  gives a report, never a crash or garbage. Works in compiled mode too (on a GPU): the launch is re-run
  in the interpreter on CPU copies of the tensor arguments, so give it small sizes.
* ``capture()``: a context manager that traces every kernel launch inside it (e.g. a launcher such as
  ``solutions.vector_add.add(x, y)``, or a naive pipeline of several kernels).
* ``combine(traces)``: several launches summed as one pipeline (an intermediate tensor written by one
  kernel and read by a later one costs traffic but no minimum).
* ``count_eager()``: a torch dispatch mode that sums the bytes each aten op reads and writes, for torch
  eager code that cannot be traced (e.g. a naive ``torch`` softmax).
* ``simulate_l2(...)`` / ``program_order(...)``: an LRU cache simulated over a tiled matmul's tile loads,
  in the program order the kernel computes (row-major or grouped by ``GROUP_M``).

One module per idea:

    table.py        fmt_bytes and Table: the small reports every summary prints
    records.py      what a trace holds (TensorInfo, Access, OutOfBounds, Launch, Trace) and combine()
    tracer.py       trace() and capture(): staging the arguments, mapping addresses to tensors
    interpreter.py  the hooks into Triton's interpreter (its private objects: tkcourse.triton_internals)
    eager.py        count_eager(): bytes per aten op of torch eager code
    l2.py           program_order() and simulate_l2(): L2 reuse in a tiled matmul

Only ``tkcourse.mode`` (first, so the mode is set before triton loads) and ``tkcourse.triton_internals``
(every private Triton object the tracer touches) are imported from the course.
"""

from __future__ import annotations

from .. import mode  # noqa: F401  (decides TRITON_INTERPRET; triton itself is imported where it is used)
from .eager import EagerTraffic, count_eager
from .l2 import L2Result, matmul_tile_loads, program_order, simulate_l2
from .records import (
    Access,
    Launch,
    OutOfBounds,
    OutOfBoundsError,
    TensorInfo,
    Trace,
    TraceError,
    combine,
    minimum_bytes,
)
from .table import Table, fmt_bytes
from .tracer import capture, trace

__all__ = [
    "TensorInfo", "Access", "OutOfBounds", "OutOfBoundsError", "Launch", "Trace", "Table", "TraceError",
    "trace", "capture", "combine", "minimum_bytes", "fmt_bytes",
    "EagerTraffic", "count_eager",
    "program_order", "L2Result", "simulate_l2", "matmul_tile_loads",
]
