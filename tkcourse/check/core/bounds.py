"""Out-of-bounds accesses the tracer found, as failing cases whose hints name the likely mistake."""

from __future__ import annotations

import contextlib

from ... import traffic  # noqa: F401  (the type of oob_case's exc)
from .reports import Case
from .source import boolean_op_hint

#: What an out-of-bounds hint says to mask when the lesson gives no mask of its own (``mask=``): the
#: graders of each lesson name theirs (vector add ``offsets < n``, matmul the row, column and K edges).
EDGE_MASK = "a mask that is False for every lane past the tensor's edge"


def describe(o) -> str:
    """One out-of-bounds access as the tracer saw it: kernel, program, load or store, tensor, offsets."""
    n, lo, hi = o.offsets.size, int(o.offsets.min()), int(o.offsets.max())
    rng = f"offset {lo}" if n == 1 else f"offsets {lo}..{hi}"
    pid = ", ".join(map(str, o.program))
    head = f"{o.kernel or 'kernel'}: program ({pid}) {o.kind}s {n} element{'s' * (n != 1)}"
    if not o.derived:
        near = f"the nearest, {o.tensor}, {rng} from its first element" if o.tensor else "it has no tensor argument"
        return f"{head} at addresses that lie in no tensor argument ({near})"
    return f"{head} {o.where} of {o.tensor} ({rng}; it has {o.numel} elements, valid offsets 0..{o.numel - 1})"


def _integer_tensor(trace, name: str) -> bool:
    with contextlib.suppress(KeyError, AttributeError):
        return trace.tensor(name).dtype.startswith(("int", "uint"))
    return False


def oob_case(label: str, exc: "traffic.OutOfBoundsError", *, fn=None, mask: str | None = None) -> Case:
    """An out-of-bounds access found by the tracer, as a failing case whose hint names the likely mistake.

    ``fn``: the graded function, whose kernels' source is read for Python's ``and``/``or`` between
    tensor tests; ``mask``: the lesson's edge mask, named by the hint (``EDGE_MASK`` when not given).
    """
    bad = exc.out_of_bounds
    first = next((o for o in bad if o.kind == "store"), bad[0])  # a stray store is the worse one
    lines = [describe(o) for o in bad[:3]] + ([f"... and {len(bad) - 3} more"] if len(bad) > 3 else [])
    detail = ("the grader ran your kernel under the course's tracer, which masked these accesses off instead "
              "of performing them:\n" + "\n".join(lines))
    mask = mask or EDGE_MASK
    t, what = first.tensor, first.kind
    mine = [o for o in bad if o.tensor == t and o.kind == what]
    top = max(int(o.offsets.max()) for o in mine)
    lo = min(int(o.offsets.min()) for o in mine)
    n = first.numel
    saw = f"{what}s of {t} at offsets {lo}..{top}; {t} has {n} elements"
    trace = getattr(exc, "trace", None)
    boolean = boolean_op_hint(fn, [ln.kernel for ln in trace.launches] if trace is not None else [])
    if boolean:
        hint = boolean
    elif not first.derived:
        hint = ("your kernel used an address that lies in no tensor argument: compute every pointer as a "
                "pointer argument plus offsets (x_ptr + offsets); never turn an integer into a pointer")
    elif what == "load" and trace is not None and _integer_tensor(trace, t):
        hint = (f"your kernel reads the index tensor {t} outside it ({saw}): the lookup into {t} is wrong, not a "
                "mask. Check the row and the column it is indexed with, and its row stride (the table's "
                ".stride(0), passed from the launcher): every index your kernel takes from the table comes from "
                "that lookup")
    elif first.where == "before the start":
        hint = (f"your kernel {what}s before the start of {t} ({saw}): an offset is negative (offsets - 1? a "
                "shifted start?). Offsets must run from 0, and every lane outside the tensor must be masked off")
    elif top >= 4 * max(n, 1):
        hint = (f"your kernel {what}s far past the end of {t} (offset {top}; it has {n} elements): the offsets "
                "grow too fast. Is a stride or a row length used in place of another (or a hard-coded size)? "
                f"Every lane's offset must stay inside the tensor, and {mask} must switch off the others")
    elif what == "store" and all(int(o.offsets.min()) == o.numel and o.offsets.size == 1 for o in mine):
        hint = (f"your kernel stores one element past the end of {t}: its mask lets one lane too many through "
                f"(<= where < belongs?). Mask the store with {mask}")
    elif what == "store" and lo > n and len({o.program for o in mine}) > 1:
        hint = (f"your kernel stores whole blocks past the end of {t} (the tracer saw {saw}): several programs' "
                "stores start beyond its last element, so this is not a missing mask but a block that starts too "
                f"far: check the offsets' strides ({t}'s own, passed from the launcher, not another tensor's) and "
                "the indices a program computes its block from")
    elif what == "store":
        hint = (f"unmasked tail: your kernel stores past the end of {t} (the tracer saw {saw}, however the "
                f"output was allocated, torch.zeros included). Mask the store with {mask}, so the last, "
                "partial block stops at the edge")
    elif _just_past_end(bad, t):
        hint = (f"offset off by one: your kernel loads the element just past the end of {t}, under a mask that "
                "fits the output: the load's offsets are shifted (offsets + 1?). The loads and the store must "
                "use the same offsets")
    else:
        hint = (f"your kernel loads past the end of {t} (the tracer saw {saw}), while its stores stayed inside. "
                f"If that load has no mask, give it one ({mask}, with other=...); if it has one, that mask lets "
                "these lanes through: compare it with the store's")
    return Case(label, "fail", detail, hint)


def at_pitch(offsets, pitch: int, rows: int, cols: int) -> bool:
    """Every element offset lies in a row below ``rows`` and at a column below ``cols`` of a tensor whose rows
    are ``pitch`` elements apart: how offsets computed with another tensor's row stride are recognised."""
    return pitch > 0 and bool(((offsets // pitch) < rows).all()) and bool(((offsets % pitch) < cols).all())


def _just_past_end(bad, name: str) -> bool:
    """Only loads of ``name``, each at most two elements past its end: a shifted offset under a correct mask."""
    mine = [o for o in bad if o.tensor == name]
    if any(o.kind != "load" or not o.derived for o in bad) or not mine:
        return False
    return all(o.offsets.min() >= o.numel and o.offsets.max() < o.numel + 2 and o.offsets.size <= 2 for o in mine)
