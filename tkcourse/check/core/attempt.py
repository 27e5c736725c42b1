"""One graded call, checked in order, and the runner's guard around a grader.

``attempt`` runs the learner's function (``calls``) and fails, in this order, an out-of-bounds access
(``bounds``), a raised error, an output that is an input (``memory.alias_case``), a wrong output
(``compare``) and an input that the call changed (``memory.Snapshot``). ``guarded`` turns anything a
grader raises into one error case; ``refuses`` grades an input that must raise ValueError.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

import torch

from ... import traffic
from .bounds import oob_case
from .calls import call, explain_warnings, quiet_warnings, traceable, traced_call
from .compare import compare
from .memory import Snapshot, alias_case, input_names
from .reports import Case, error_case
from .source import boolean_op_hint


@dataclass
class GradedCall:
    """What one graded call left: its output, the poisoned allocations and the tracer's launches, and
    the inputs as they were before (``snap``), for the checks that follow; the function itself and
    the warnings it raised (shown only where they explain a failure)."""

    out: object
    allocs: list
    traces: list
    inputs: dict
    snap: "Snapshot"
    fn_name: str
    fn: object = None
    warnings: list = field(default_factory=list)


def graded_call(label, fn, args, *, kwargs=None, trace: bool = True, oob_hint=None,
                mask: str | None = None, error_hint=None) -> "GradedCall | Case":
    """``fn(*args, **kwargs)`` under poisoned allocations and the tracer: a ``GradedCall``, or the Case of
    an out-of-bounds access (``oob_case``, with the lesson's ``oob_hint(bad, hint)`` where it gives one,
    and its edge ``mask`` named) or of a raised error (``error_case``, with the lesson's
    ``error_hint(exc, hint)`` where it gives one). ``None`` arguments (an optional input left out) are not
    inputs."""
    inputs = {k: v for k, v in input_names(fn, args).items() if v is not None}
    fn_name = getattr(fn, "__name__", "function")
    snap = Snapshot(inputs)
    traces, seen = [], []
    try:
        if trace and traceable([a for a in args if a is not None] + list((kwargs or {}).values())):
            out, allocs, traces = traced_call(fn, *args, warned=seen, **(kwargs or {}))
        else:
            out, allocs = call(fn, *args, warned=seen, **(kwargs or {}))
    except traffic.OutOfBoundsError as exc:
        case = oob_case(label, exc, fn=fn, mask=mask)
        kernels = [ln.kernel for ln in exc.trace.launches]
        if oob_hint is not None and not boolean_op_hint(fn, kernels):  # the source's own mistake comes first
            case.hint = _lesson_hint(oob_hint, exc.out_of_bounds, case.hint) or case.hint
        return case
    except Exception as exc:
        case = error_case(label, exc)
        if error_hint is not None and case.status == "error":
            case.hint = _lesson_hint(error_hint, exc, case.hint) or case.hint
        return case
    return GradedCall(out, allocs, traces, inputs, snap, fn_name, fn, seen)


def _lesson_hint(hint, *args) -> str:
    """A lesson's hint function called on what went wrong; one that raises gives no hint (the default stays):
    a grader's guess never crashes the grader."""
    try:
        return hint(*args) or ""
    except Exception:  # noqa: BLE001
        return ""


def written_case(label, out, expected, graded: GradedCall, **compare_kwargs) -> Case:
    """``compare``, with what the tracer knows: which elements no store reached (a NaN there was never
    written, a NaN elsewhere was computed), the hidden unwritten elements of a filled output, Python's
    ``and``/``or`` between tensor tests in a launched kernel, and the warnings that explain an inf or NaN."""
    case = compare(label, out, expected, allocs=graded.allocs, **compare_kwargs)
    if case.status == "fail" and graded.traces and isinstance(out, torch.Tensor) and "NaN" in case.detail:
        never = never_stored(out, graded.traces)  # only now: reading the stores of a big trace costs time
        if never is not None:
            case = compare(label, out, expected, allocs=graded.allocs, stored=~never, **compare_kwargs)
    if case.status == "fail" and graded.traces:
        case = _unwritten_case(label, out, expected, graded.traces, graded.allocs, compare_kwargs) or case
        boolean = boolean_op_hint(graded.fn, {ln.kernel for tr in graded.traces for ln in tr.launches})
        if boolean:
            case.hint = boolean
    return explain_warnings(case, out, graded.warnings)


def returned_case(label, g: "GradedCall") -> Case | None:
    """A failing case when a graded call that should return one tensor returned a tuple, or an output
    sharing memory with an input; None when what it returned can be compared."""
    out = g.out
    if isinstance(out, tuple) and not hasattr(out, "_fields"):
        return Case(label, "fail", f"returned a tuple of {len(out)}, not a torch.Tensor",
                    f"your {g.fn_name} returns a tuple: return only the output tensor (return out, not return out, ...)")
    return alias_case(label, out, g.inputs, g.fn_name)


def attempt(label, fn, args, expected, *, kwargs=None, trace: bool = True, oob_hint=None, mask: str | None = None,
            error_hint=None, trace_hint=None, once: str | None = None, idle: str | None = None,
            reads: dict | None = None, then=None, **compare_kwargs) -> Case:
    """One graded call: ``fn(*args, **kwargs)`` under poisoned allocations and the tracer, checked in order
    for an out-of-bounds access (``oob_case``), a raised error, an output that is an input (``alias_case``),
    the output against ``expected`` (``compare``) and inputs that the call changed (``Snapshot``).

    ``trace=False`` skips the tracer (a launch too big to trace on a GPU, say). ``oob_hint(bad, hint)``
    may give a lesson's own hint for the out-of-bounds accesses ``bad`` (``""``: keep ``hint``), and
    ``error_hint(exc, hint)`` one for an error the call raised, and ``trace_hint(out, expected, traces)`` one for a
    wrong output from what the tracer saw (the launches' grids, which program stored where), which takes the place
    of ``diagnose``'s where it gives one; ``once``: the hint when a right output had an element stored more than
    once (work done twice, by several programs: ``stored_twice``); ``idle``: the hint when a right output's launches
    made loads with every lane masked off (steps that read nothing, a loop past its end: ``idle_steps``); ``reads``:
    how often a right output's launches may load each element of a kernel argument, and the hint when more
    (``{"x": (1, hint)}``: a fused kernel reads its input once: ``loaded_again``); ``then(label, traces)``: a
    lesson's own check of a right output's traces, a failing ``Case`` or None, run last; ``mask``
    is the lesson's edge mask (``offsets < n``), which out-of-bounds hints name. A lesson whose function returns several tensors builds on ``graded_call`` and ``written_case``.
    """
    g = graded_call(label, fn, args, kwargs=kwargs, trace=trace, oob_hint=oob_hint, mask=mask, error_hint=error_hint)
    if isinstance(g, Case):
        return g
    out = g.out
    bad = returned_case(label, g)
    if bad is not None:
        return bad
    case = written_case(label, out, expected, g, mask=mask, **compare_kwargs)
    if case.status == "todo":
        return case
    if case.status == "fail" and trace_hint is not None and g.traces:
        case.hint = _lesson_hint(trace_hint, out, expected, g.traces) or case.hint
    changed = g.snap.case(label, g.fn_name)
    if changed is not None:
        return changed
    if case.status == "pass" and once and g.traces:
        case = stored_twice(label, out, g.traces, once) or case
    if case.status == "pass" and idle and g.traces:
        case = idle_steps(label, g.traces, idle) or case
    if case.status == "pass" and reads and g.traces:
        case = loaded_again(label, g.traces, reads) or case
    if case.status == "pass" and then is not None and g.traces:
        try:
            case = then(label, g.traces) or case
        except Exception:  # noqa: BLE001  (a lesson's extra look never crashes the grader: the pass stays)
            pass
    return case


def loaded_again(label, traces, reads: dict) -> Case | None:
    """A failing case when a traced launch loaded an element of a kernel argument more often than ``reads`` allows:
    ``{name: (most loads an element, hint)}``, by the argument's name (``x`` for ``x_ptr``); 0 for an output the
    kernel only writes. The right result, with traffic that the lesson's kernel does not make; None otherwise."""
    for tr in traces:
        if len(tr.launches) != 1:
            continue
        for i, t in enumerate(tr.tensors):
            if t.name not in reads:
                continue
            allowed, hint = reads[t.name]
            counts = tr.read_counts(i, kind="load")
            most = int(counts.max()) if counts.size else 0
            if most > allowed:
                over = int((counts > allowed).sum())
                said = (f"loaded {over} elements of {t.name}, which it writes" if allowed == 0 else
                        f"loaded {over} elements of {t.name} {most} times each, where {allowed} load"
                        f"{'s' * (allowed != 1)} an element will do")
                return Case(label, "fail", f"the right result, but {tr.name} {said}: traffic the lesson's kernel "
                            "does not make", hint)
    return None


def rows_loaded_past(label, traces, tensor: str, n: int, reach, said: str, hint: str) -> Case | None:
    """A failing case when a traced launch loaded a row of ``tensor`` (axis 2 of a (B, H, n, D) argument) more often
    than ``reach(launch, row)`` allows: the right result, with blocks that a mask throws away whole (a causal loop
    run past the diagonal). ``reach`` returns None for a launch it cannot judge (not the lesson's kernel, or not its
    grid); ``said`` ends the detail. None otherwise, and None if the look itself raises: it never crashes a grade."""
    try:
        for tr in traces:
            if len(tr.launches) != 1:
                continue
            ln = tr.launches[0]
            if reach(ln, 0) is None:
                continue
            counts = tr.read_counts(tensor)
            if counts.ndim != 4 or counts.shape[2] != n:
                continue
            rows = counts.max(axis=(0, 1, 3))  # loads of each row, the most over batch, head and column
            for i in range(n):
                allowed = reach(ln, i)
                if rows[i] > allowed:
                    return Case(label, "fail", f"the right result, but {tr.name} loaded row {i} of {tensor} "
                                f"{int(rows[i])} times where {allowed} program(s) need it: {said}", hint)
    except Exception:  # noqa: BLE001  (an extra look never crashes the grader: the pass stays)
        return None
    return None


def idle_steps(label, traces, hint: str, stores_hint: str | None = None) -> Case | None:
    """A failing case when a traced launch made loads with every lane masked off: the right result, with steps
    that read nothing (a loop that runs past its data: ``range(K)`` for ``range(tl.cdiv(K, BLOCK_K))``); None
    otherwise. ``stores_hint``: the hint when stores with every lane off came too (whole tiles past the output's
    edge, computed and never stored: a grid or tile loop past the last tile), where the K loop alone stores
    nothing off."""
    for tr in traces:
        loads = [(program, i) for kind, program, i in tr.idle if kind == "load"]
        if not loads:
            continue
        stores = sum(kind == "store" for kind, _, _ in tr.idle)
        if stores and stores_hint:
            return Case(label, "fail", f"the right result, but {tr.name} stored {stores} blocks with every lane "
                        f"masked off, and made {len(loads)} loads so: work on tiles past the output's edge",
                        stores_hint)
        program, most = collections.Counter(p for p, _ in loads).most_common(1)[0]
        names = sorted({tr.tensors[i].name for _, i in loads if i is not None and i < len(tr.tensors)})
        of = f" of {', '.join(names)}" if names else ""
        return Case(label, "fail", f"the right result, but {tr.name} made {len(loads)} loads{of} with every lane "
                    f"masked off (program {program}: {most}): steps that read nothing and still take their time", hint)
    return None


def stored_twice(label, out, traces, hint: str) -> Case | None:
    """A failing case when the tracer saw an element of ``out`` stored more than once in one launch: the right
    result, with work done twice (programs that take the same rows or tiles); None otherwise."""
    if not isinstance(out, torch.Tensor):
        return None
    for tr, i in out_records(out, traces):
        counts = tr.read_counts(i, kind="store")
        most = int(counts.max()) if counts.size else 0
        if most > 1 and len(tr.launches) == 1:
            twice = int((counts > 1).sum())
            return Case(label, "fail", f"the right result, but {twice} of the output's {counts.size} elements were "
                        f"stored more than once (up to {most} times): the same work done by several programs", hint)
    return None


def out_records(out: torch.Tensor, traces):
    """(trace, index) of each traced tensor argument that is ``out`` as it is (its address, shape and strides)."""
    for tr in traces:
        for i, t in enumerate(tr.tensors):
            ptr, shape, stride, _ = t.key
            if ptr == out.data_ptr() and tuple(shape) == tuple(out.shape) and tuple(stride) == tuple(out.stride()):
                yield tr, i


def never_stored(out: torch.Tensor, traces) -> torch.Tensor | None:
    """Elements of ``out`` that no traced launch stored to (None when no launch took ``out`` as it is)."""
    written = None
    for tr, i in out_records(out, traces):
        counts = torch.from_numpy(tr.read_counts(i, kind="store").reshape(tuple(out.shape))) > 0
        written = counts if written is None else written | counts
    return None if written is None else ~written


def _unwritten_case(label, out, expected, traces, allocs, compare_kwargs) -> Case | None:
    """A filled output (torch.zeros, torch.full, a clone) hides the elements a kernel never wrote from the
    NaN poison; the tracer knows them: grade again with NaN there, so the hint can name the grid or mask."""
    if not isinstance(out, torch.Tensor) or any(out.data_ptr() == a.buf.data_ptr() for a in allocs):
        return None  # a poisoned torch.empty output: NaN already marks what was never written
    never = never_stored(out, traces)
    if never is None or not never.any():
        return None
    shown = out.detach().clone()
    shown[never.to(shown.device)] = float("nan") if shown.dtype.is_floating_point else 0
    case = compare(label, shown, expected, allocs=allocs, stored=~never, **compare_kwargs)
    if case.status != "fail":
        return None
    n, total = int(never.sum()), never.numel()
    case.detail = (f"your kernel never wrote {n} of the {total} output elements (the output was filled before the "
                   "launch, so they kept that value; the tracer saw no store there, and they show as NaN "
                   "below)\n" + case.detail)
    return case


def guarded(cases, label: str = "grading"):
    """Yield from a grader's generator of cases; anything it raises becomes one error case and ends it.

    A learner's module can make the grader itself fail (a missing function, an object where a tensor was
    expected, ``sys.exit`` in a launcher): the report says so instead of a traceback or a dead process.
    """
    it = iter(cases)
    n = 0
    while True:
        try:
            with quiet_warnings():  # a grader's own stray warnings never print before the verdict
                case = next(it)
        except StopIteration:
            return
        except (Exception, SystemExit) as exc:  # noqa: BLE001  (whatever the learner's code raised)
            case = error_case(f"{label} (after {n} case{'s' * (n != 1)})", exc)
            if isinstance(exc, AttributeError) and "has no attribute" in str(exc):
                case.hint = f"your module lacks a name the lesson asks for: {exc}"
            elif isinstance(exc, SystemExit):
                case.hint = "your code called sys.exit (or exit()): raise an exception instead"
            yield case
            return
        n += 1
        yield case


def refuses(label, fn, *args, hint: str, message_hint: tuple | None = None) -> Case:
    """A case that passes when ``fn(*args)`` raises ValueError (bad input must be refused, not computed on).

    ``message_hint``: (predicate on the message, hint when it fails), for errors that must say something.
    """
    try:
        (traced_call if traceable(args) else call)(fn, *args)  # a launch that should not happen: traced too
    except traffic.OutOfBoundsError as exc:
        case = oob_case(label, exc, fn=fn)
        case.hint = f"{hint}; and your kernel went out of bounds on this input: {case.hint}"
        return case
    except ValueError as e:
        if message_hint and not message_hint[0](str(e)):
            return Case(label, "fail", f"message: {e}", message_hint[1])
        return Case(label, "pass")
    except Exception as exc:
        return error_case(label, exc)
    shapes = ", ".join(f"{tuple(a.shape)} {a.dtype}" for a in args if isinstance(a, torch.Tensor))
    return Case(label, "fail", f"the call with {shapes} returned a result", hint)
