"""An output against its float64 reference, and the hints for what is wrong with it."""

from __future__ import annotations

import re

import torch

from .bounds import EDGE_MASK
from .reports import Case


def tolerance(dtype, mode_tf32: bool = False) -> tuple[float, float]:
    """(atol, rtol) for comparing a kernel's output of ``dtype`` with a float64 reference."""
    if dtype == torch.float16:
        return 2e-3, 2e-3
    if dtype == torch.bfloat16:
        return 2e-2, 2e-2
    if mode_tf32:
        return 1e-2, 1e-2
    return 1e-5, 1e-5


def table(idx, yours, expected, k: int = 5, names=("yours", "expected")) -> str:
    """The first ``k`` wrong positions as a small table."""
    rows = [f"{'position':>14}  {names[0]:>14}  {names[1]:>14}"]
    for i in range(min(k, len(idx))):
        pos = tuple(int(v) for v in idx[i]) if hasattr(idx[i], "__len__") else int(idx[i])
        pos_s = str(pos[0]) if isinstance(pos, tuple) and len(pos) == 1 else str(pos)
        rows.append(f"{pos_s:>14}  {float(yours[i]):>14.6g}  {float(expected[i]):>14.6g}")
    return "\n".join(rows)


def compare(label, out, expected, *, dtype=None, atol=None, rtol=None, allocs=(), diagnose=None,
            stored=None, mask: str | None = None) -> Case:
    """Compare ``out`` with ``expected`` (a float64 or same-dtype reference) and explain a mismatch.

    ``diagnose(out, expected, wrong_mask) -> str`` may give a lesson-specific hint. ``stored``: where the
    tracer saw a store into ``out`` (a bool tensor of its shape), which tells a NaN never written (the
    grader's poison) from a NaN the kernel computed; ``mask``: the lesson's edge mask, for the hint of a
    store past the end.
    """
    if out is None:
        return Case(label, "todo", "your function returned None", "return the output tensor from your launcher")
    if not isinstance(out, torch.Tensor):
        return Case(label, "fail", f"returned a {type(out).__name__}, not a torch.Tensor", "return the output tensor")
    dtype = dtype or expected.dtype
    if tuple(out.shape) != tuple(expected.shape):
        return Case(label, "fail", f"output shape {tuple(out.shape)}, expected {tuple(expected.shape)}",
                    "allocate the output with the shape of the result (e.g. torch.empty_like(x))")
    if out.dtype != dtype:
        return Case(label, "fail", f"output dtype {out.dtype}, expected {dtype}",
                    "wrong output dtype: allocate the output in the input's dtype (torch.empty_like(x) or "
                    "dtype=x.dtype); accumulate in fp32 inside the kernel, not in the output")
    for a in allocs:
        if not a.canary_intact():
            return Case(label, "fail", f"a store landed {a.first_overwrite()} elements past the end of an output",
                        "unmasked tail: your kernel writes past the end of the output. Mask the store with "
                        f"{mask or EDGE_MASK}, so the last, partial block stops at the edge")
    if atol is None or rtol is None:
        atol, rtol = tolerance(dtype)
    o = out.detach().to(torch.float64).cpu()
    e = expected.detach().to(torch.float64).cpu()
    wrong = ~torch.isclose(o, e, atol=atol, rtol=rtol, equal_nan=False)
    wrong &= ~(torch.isnan(e) & torch.isnan(o))
    if not wrong.any():
        return Case(label, "pass")
    idx = wrong.nonzero()
    n_wrong, n = int(wrong.sum()), wrong.numel()
    detail = f"{n_wrong} of {n} values wrong (atol={atol:g}, rtol={rtol:g})"
    nan = torch.isnan(o) & wrong
    n_nan = int(nan.sum())
    unwritten = computed = 0
    if n_nan and stored is not None and tuple(stored.shape) == tuple(o.shape):
        st = stored.cpu()
        unwritten, computed = int((nan & ~st).sum()), int((nan & st).sum())
        parts = ([f"{unwritten} never written by your kernel (the grader's NaN poison: the tracer saw no store "
                  "there)"] if unwritten else []) + (
                 [f"{computed} computed by your kernel (it stored NaN there)"] if computed else [])
        detail += f"; {n_nan} of them NaN: " + ", and ".join(parts)
    elif n_nan:
        detail += (f"; {n_nan} of them NaN: never written (the grader fills outputs with NaN first) or computed "
                   "as NaN by your kernel")
    detail += "\n" + table(idx, o[wrong], e[wrong])
    hint = _diagnosis(diagnose, o, e, wrong)
    if computed and not unwritten and re.search(r"\bwr(?:itten|ote)\b", hint):
        hint = ""  # the lesson's guess reads NaN as unwritten; the tracer saw these stored
    if not hint:
        if unwritten or (n_nan and stored is None):
            hint = ("some positions were never written (NaN is the grader's poison): check the grid and the "
                    "offsets" if unwritten else
                    "NaN in the output: either positions your kernel never wrote (NaN is the grader's poison: "
                    "check the grid and the offsets) or values it computed as NaN (0/0, inf - inf)")
        elif computed:
            hint = (f"your kernel stored NaN at {computed} position(s): it computed them. Look for 0/0, inf - inf "
                    "or inf * 0 (exp of a large value overflows to inf; a masked lane loaded with other=-inf and "
                    "then subtracted), and for values read from outside the data")
        else:
            hint = (f"no known mistake fits; what the grader sees: {describe_wrong(o, e, wrong)}. Compare your "
                    "formula with the reference, and check the offsets and strides")
    return Case(label, "fail", detail, hint)


def describe_wrong(o: torch.Tensor, e: torch.Tensor, wrong: torch.Tensor) -> str:
    """What a wrong output looks like, for a hint that cannot name the mistake: how many values, where
    (a run at the end, whole rows or columns), and whether they are the expected ones scaled or shifted."""
    n_wrong, n = int(wrong.sum()), wrong.numel()
    parts = ["every value is wrong" if n_wrong == n else f"{n_wrong} of {n} values are wrong"]
    flat = wrong.reshape(-1)
    first = int(flat.nonzero()[0])
    if n_wrong < n and bool(flat[first:].all()):
        parts.append(f"all of them from position {first} on{' (row-major)' if o.dim() > 1 else ''}, none before")
    elif n_wrong < n and o.dim() == 2 and o.shape[0] > 1 and o.shape[1] > 1:
        rows, cols = wrong.any(1), wrong.any(0)
        if int(rows.sum()) < o.shape[0]:
            parts.append(f"in {int(rows.sum())} of {o.shape[0]} rows (the first: {int(rows.nonzero()[0])})")
        if int(cols.sum()) < o.shape[1]:
            parts.append(f"in {int(cols.sum())} of {o.shape[1]} columns (the first: {int(cols.nonzero()[0])})")
    ow, ew = o[wrong], e[wrong]
    finite = torch.isfinite(ow) & torch.isfinite(ew) & (ew.abs() > 1e-12)
    if bool((ow == 0).all()):
        parts.append("each of them 0 (stored as 0, or a zero-filled output never written there)")
    elif int(finite.sum()) >= 2:
        ratio, diff = ow[finite] / ew[finite], ow[finite] - ew[finite]
        if torch.allclose(ratio, ratio.median().expand_as(ratio), rtol=1e-3, atol=1e-6):
            parts.append(f"each is the expected value times {float(ratio.median()):.4g}")
        elif torch.allclose(diff, diff.median().expand_as(diff), rtol=1e-3, atol=1e-6):
            parts.append(f"each is the expected value plus {float(diff.median()):.4g}")
    return ", ".join(parts)


def _diagnosis(diagnose, o, e, wrong) -> str:
    """A lesson's hint for a wrong output; a diagnosis that raises on a strange output gives no hint,
    never a crashed grader."""
    if diagnose is None:
        return ""
    try:
        return diagnose(o, e, wrong) or ""
    except Exception:  # noqa: BLE001  (whatever the learner's output holds)
        return ""


def shift_hint(o, e, wrong) -> str:
    """For 1-D results: an off-by-one offset shows as the output equal to the reference shifted."""
    if o.dim() != 1 or o.numel() < 3:
        return ""
    for s, word in ((1, "one ahead (offsets + 1?)"), (-1, "one behind (offsets - 1?)")):
        a, b = (o[:-1], e[1:]) if s == 1 else (o[1:], e[:-1])
        if torch.isclose(a, b, rtol=1e-3, atol=1e-3).float().mean() > 0.9:
            return (f"offset off by one: your output is the expected result shifted {word}. "
                    "offsets must be pid * BLOCK + tl.arange(0, BLOCK), exactly")
    return ""


def block_hint(o, e, wrong) -> str:
    """For 1-D results: NaN where whole blocks were never written."""
    if o.dim() != 1:
        return ""
    nan = torch.isnan(o)
    if not nan.any():
        return ""
    first = int(nan.nonzero()[0])
    n = o.numel()
    if nan[first:].all() and first > 0 and first & (first - 1) == 0:
        if n % first and first == n - n % first:
            return (f"the last, partial block (elements {first}..{n - 1}) was never written: launch "
                    "triton.cdiv(n, BLOCK) programs, not n // BLOCK")
        return (f"only the first block ({first} elements) was written: each program must start at "
                "tl.program_id(0) * BLOCK, so that program i handles block i")
    if nan[first:].all():
        return (f"nothing from element {first} on was written: the grid has too few programs "
                "(use triton.cdiv(n, BLOCK)) or the offsets do not advance with tl.program_id(0)")
    return ""
