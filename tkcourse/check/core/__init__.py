"""What every grader shares: awkward inputs, poisoned outputs, traced launches, comparisons, reports.

A grader never trusts memory it did not fill, nor a kernel it did not watch:

* Outputs that the learner's launcher allocates with ``torch.empty``/``empty_like``/``new_empty``/
  ``empty_strided`` come back filled with NaN (poison), followed by a run of canary values: a value
  still NaN after the call was never written; a changed canary is a store past the end of the tensor.
  Inputs are followed by a run of ``INPUT_PAD`` (``padded``), and strided inputs (``strided``,
  ``row_padded``, ``transposed``, ``sliced_rows``) hold ``INPUT_PAD`` in their gaps, so an unmasked,
  shifted or contiguous-as-if load reads a loud, recognisable value instead of someone else's memory.
* Every kernel launch of a graded call runs under the course's tracer (``tkcourse.traffic.capture``),
  which copies the arguments into one buffer with gaps and masks off any lane outside every
  tensor: an out-of-bounds load or store, however the output was allocated (``torch.zeros``,
  ``torch.full``, a slice of something bigger), becomes a failing case with a hint instead of a
  write into the host heap. In the interpreter the traced run is the launch; on a GPU each launch is
  traced on CPU copies first and never runs on the GPU when the trace found a bad access.
* ``attempt`` also fails an output that shares memory with an input (``alias_case``) and an input
  that the call changed (``Snapshot``).

How a lesson grader uses it: ``grade(module)`` is a generator of ``Case``; for each input it builds
(``padded``/``strided``/... and ``random_sizes(...)`` for sizes that defeat a hard-coded grid or
BLOCK, with the seed in the label via ``seeded``), it yields
``attempt(label, mod.fn, args, expected, dtype=..., diagnose=...)``, which does all of the above and
compares with a float64 torch reference. ``refuses`` grades an input that must raise ValueError.
``tkcourse.check.run`` stops at the first case that is not a pass and turns anything the grader
raises into an error case (``guarded``), so a report is always printed.

One module an idea: ``inputs`` (awkward inputs, poison, seeded sizes), ``reports`` (cases and
reports), ``calls`` (the learner's function under poison and the tracer, its warnings kept),
``bounds`` (out-of-bounds accesses), ``source`` (mistakes read from the kernel's source), ``memory``
(aliasing and changed inputs), ``compare`` (an output against its reference, and hints), ``attempt``
(one graded call, in order; the runner's guard), ``compiles`` (the runner's last case in the interpreter:
would a GPU's compiler take the learner's kernels?). Graders import these names from here.
"""

from __future__ import annotations

from . import compiles
from .attempt import (
    GradedCall,
    attempt,
    graded_call,
    guarded,
    idle_steps,
    loaded_again,
    never_stored,
    out_records,
    refuses,
    returned_case,
    rows_loaded_past,
    stored_twice,
    written_case,
)
from .bounds import EDGE_MASK, at_pitch, describe, oob_case
from .calls import TRACE_MAX_BYTES, call, explain_warnings, quiet_warnings, traceable, traced_call
from .compare import block_hint, compare, describe_wrong, shift_hint, table, tolerance
from .inputs import (
    CANARY,
    INPUT_PAD,
    grading_seed,
    layout_of,
    padded,
    poisoned_allocations,
    quarters,
    random_sizes,
    row_padded,
    seeded,
    sliced_rows,
    strided,
    transposed,
)
from .memory import Snapshot, alias_case, input_names, storage_overlap
from .reports import STILL_NONE, Case, NotDone, Report, error_case, exception_chain
from .source import boolean_op_hint, launched_kernels

__all__ = [
    "CANARY",
    "Case",
    "EDGE_MASK",
    "GradedCall",
    "INPUT_PAD",
    "NotDone",
    "Report",
    "STILL_NONE",
    "Snapshot",
    "TRACE_MAX_BYTES",
    "alias_case",
    "at_pitch",
    "attempt",
    "block_hint",
    "boolean_op_hint",
    "call",
    "compare",
    "compiles",
    "describe",
    "describe_wrong",
    "error_case",
    "exception_chain",
    "explain_warnings",
    "graded_call",
    "grading_seed",
    "guarded",
    "idle_steps",
    "input_names",
    "launched_kernels",
    "loaded_again",
    "rows_loaded_past",
    "never_stored",
    "layout_of",
    "oob_case",
    "out_records",
    "padded",
    "poisoned_allocations",
    "quiet_warnings",
    "quarters",
    "random_sizes",
    "refuses",
    "returned_case",
    "row_padded",
    "seeded",
    "shift_hint",
    "sliced_rows",
    "storage_overlap",
    "stored_twice",
    "strided",
    "table",
    "tolerance",
    "traceable",
    "traced_call",
    "transposed",
    "written_case",
]
