"""Running the learner's function: under poisoned allocations, under the tracer, its warnings kept.

Every kernel launch of a graded call runs under the course's tracer (``tkcourse.traffic.capture``),
which copies the arguments into one buffer with gaps and masks off any lane outside every tensor:
an out-of-bounds load or store becomes an ``OutOfBoundsError`` (``bounds.oob_case`` turns it into a
failing case) instead of a write into the host heap. In the interpreter the traced run is the launch;
on a GPU each launch is traced on CPU copies first and never runs on the GPU when the trace found a
bad access. The warnings a call raises (numpy's, from the interpreter) are recorded, never printed.
"""

from __future__ import annotations

import contextlib
import warnings

import numpy as np
import torch

from ... import mode, traffic
from .inputs import poisoned_allocations
from .reports import Case


@contextlib.contextmanager
def quiet_warnings(seen: list | None = None):
    """Within the block, warnings (numpy's from the interpreter: overflow in exp, 0/0...) are recorded
    into ``seen`` as "Category: message" lines, never printed: a report shows them only where they
    explain a failure (``explain_warnings``), never raw before the verdict."""
    with warnings.catch_warnings(record=True) as caught, np.errstate(over="warn", invalid="warn", divide="warn",
                                                                       under="ignore"):
        warnings.simplefilter("always")
        try:
            yield caught
        finally:
            if seen is not None:
                for w in caught:
                    line = f"{w.category.__name__}: {w.message}"
                    if line not in seen:
                        seen.append(line)


def call(fn, *args, warned: list | None = None, **kwargs):
    """Run the learner's function under poisoned allocations; returns (output, allocations).
    ``warned``: a list that collects the warnings the call raised (``quiet_warnings``)."""
    with quiet_warnings(warned), poisoned_allocations() as allocs:
        out = fn(*args, **kwargs)
        if mode.DEVICE == "cuda":
            torch.cuda.synchronize()
    return out, allocs


def traced_call(fn, *args, warned: list | None = None, **kwargs):
    """``call`` with every kernel launch under the tracer: returns (output, allocations, traces).

    Raises ``traffic.OutOfBoundsError`` at the first launch that touches memory outside its tensor
    arguments (masked off, never performed: in the interpreter a stray store would hit the host heap,
    on a GPU it would end the CUDA context).
    """
    with quiet_warnings(warned), poisoned_allocations() as allocs, traffic.capture(stop_on_oob=True) as traces:
        out = fn(*args, **kwargs)
        if mode.DEVICE == "cuda":
            torch.cuda.synchronize()
    return out, allocs, traces


def explain_warnings(case: Case, out, seen) -> Case:
    """Add the warnings ``seen`` during a graded call to a failed ``case`` whose output holds inf or NaN,
    where they explain it (an overflow in exp, a 0/0); otherwise they stay unsaid."""
    if case.status != "fail" or not seen:
        return case
    tensors = [t for t in (out if isinstance(out, (tuple, list)) else (out,)) if isinstance(t, torch.Tensor)]
    if not any(t.dtype.is_floating_point and not torch.isfinite(t).all() for t in tensors):
        return case
    shown = "; ".join(seen[:3]) + (f"; and {len(seen) - 3} more" if len(seen) > 3 else "")
    case.detail += f"\nwhile your kernel ran, the interpreter warned: {shown}"
    return case


TRACE_MAX_BYTES = 64 << 20  # on a GPU, larger graded calls run untraced (the trace re-runs them on the CPU)


def traceable(args) -> bool:
    """Whether a graded call with these arguments can run under the tracer.

    In the interpreter always (the traced run is the launch). On a GPU the tracer re-runs each launch
    in the interpreter on CPU copies, which has no bfloat16 and is slow on big tensors: such calls run
    untraced (the poison and canaries still see a stray store into a ``torch.empty`` output, and a
    child process keeps a dead CUDA context from taking the notebook with it).
    """
    if mode.INTERPRET:
        return True
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if any(t.dtype == torch.bfloat16 for t in tensors):
        return False
    return sum(t.untyped_storage().nbytes() for t in tensors) <= TRACE_MAX_BYTES
