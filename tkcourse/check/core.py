"""What every grader shares: awkward inputs, poisoned outputs, comparisons and reports.

A grader never trusts memory it did not fill. Outputs that the learner's launcher allocates with
``torch.empty``/``empty_like``/``new_empty``/``empty_strided`` come back filled with NaN (poison),
followed by a run of canary values: a value still NaN after the call was never written; a changed
canary is a store past the end of the tensor. Inputs are followed by a run of ``INPUT_PAD``, so an
unmasked or shifted load reads a loud, recognisable value instead of someone else's memory.
"""

from __future__ import annotations

import contextlib
import math
import traceback
from dataclasses import dataclass, field

import torch

from .. import mode

CANARY = 31328.0  # exactly representable in fp16, bf16 and fp32; unlikely as a result
INPUT_PAD = -31328.0  # after every input; two of them still fit in fp16


# ------------------------------------------------------------------------------------------
# inputs and poisoned allocations
# ------------------------------------------------------------------------------------------


def _pad_for(numel: int) -> int:
    return min(max(4096, numel), 1 << 20)


def padded(t: torch.Tensor) -> torch.Tensor:
    """A contiguous copy of ``t`` followed in memory by a run of ``INPUT_PAD``."""
    flat = t.contiguous().reshape(-1)
    buf = torch.full((flat.numel() + _pad_for(flat.numel()),), INPUT_PAD, dtype=t.dtype, device=t.device)
    buf[: flat.numel()] = flat
    return buf[: flat.numel()].view(t.shape)


@dataclass
class _Alloc:
    buf: torch.Tensor
    numel: int
    canary: float = CANARY  # what fills the buffer past numel (0 for integer scratch buffers)

    def canary_intact(self) -> bool:
        return self.first_overwrite() is None

    def first_overwrite(self) -> int | None:
        bad = (self.buf[self.numel:] != self.canary).nonzero()
        return int(bad[0]) if len(bad) else None


def _poison_value(dtype):
    return float("nan") if dtype.is_floating_point else torch.iinfo(dtype).max


@contextlib.contextmanager
def poisoned_allocations():
    """Within the block, uninitialised allocations are NaN-filled and followed by canaries."""
    allocs: list[_Alloc] = []
    real = {"empty": torch.empty, "empty_like": torch.empty_like, "empty_strided": torch.empty_strided}
    real_new_empty = torch.Tensor.new_empty

    def make(shape, dtype=None, device=None):
        dtype = dtype or torch.get_default_dtype()
        shape = tuple(int(s) for s in (shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)) else shape))
        numel = math.prod(shape)
        buf = real["empty"](numel + _pad_for(numel), dtype=dtype, device=device)
        canary = CANARY if dtype.is_floating_point else 0
        buf[:numel] = _poison_value(dtype)
        buf[numel:] = canary
        allocs.append(_Alloc(buf, numel, canary))
        return buf[:numel].view(shape)

    def empty(*shape, dtype=None, device=None, **_):
        return make(shape, dtype, device)

    def empty_like(t, *, dtype=None, device=None, **_):
        return make(tuple(t.shape), dtype or t.dtype, device or t.device)

    def empty_strided(size, stride, *, dtype=None, device=None, **_):
        return make(tuple(size), dtype, device).as_strided(size, stride) if _dense(size, stride) else \
            real["empty_strided"](size, stride, dtype=dtype, device=device)

    def new_empty(self, *size, dtype=None, device=None, **_):
        return make(size, dtype or self.dtype, device or self.device)

    torch.empty, torch.empty_like, torch.empty_strided = empty, empty_like, empty_strided
    torch.Tensor.new_empty = new_empty
    try:
        yield allocs
    finally:
        torch.empty, torch.empty_like, torch.empty_strided = real["empty"], real["empty_like"], real["empty_strided"]
        torch.Tensor.new_empty = real_new_empty


def _dense(size, stride) -> bool:
    return sorted(s for s, n in zip(stride, size) if n > 1) == sorted(
        math.prod(size[i + 1:]) for i, n in enumerate(size) if n > 1) and len(size) > 0


# ------------------------------------------------------------------------------------------
# results
# ------------------------------------------------------------------------------------------


@dataclass
class Case:
    label: str
    status: str  # "pass" | "fail" | "error" | "todo"
    detail: str = ""
    hint: str = ""


@dataclass
class Report:
    lesson: str
    source: str  # what was graded: "exercises/vector_add.py", "solutions/...", a module name
    cases: list[Case] = field(default_factory=list)
    status: str = ""  # overall; computed by finish()
    message: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    def finish(self) -> Report:
        if not self.status:
            kinds = {c.status for c in self.cases}
            self.status = ("todo" if "todo" in kinds else "error" if "error" in kinds
                           else "fail" if "fail" in kinds else "pass" if self.cases else "todo")
        return self

    def first_problem(self) -> Case | None:
        return next((c for c in self.cases if c.status != "pass"), None)

    def __str__(self) -> str:
        if self.status == "todo" and self.message:
            return f"{self.lesson}: not done yet. {self.message}"
        n_ok = sum(c.status == "pass" for c in self.cases)
        head = {"pass": "PASS", "fail": "FAIL", "error": "ERROR", "todo": "NOT DONE YET"}[self.status]
        tail = f"all {n_ok} cases pass" if self.passed else f"{n_ok} case(s) pass, then it stopped at the first problem"
        lines = [f"{self.lesson} ({self.source}): {head}, {tail}"]
        if self.message:
            lines.append(f"  {self.message}")
        for c in self.cases:
            mark = {"pass": "ok  ", "fail": "FAIL", "error": "ERR ", "todo": "TODO"}[c.status]
            lines.append(f"  [{mark}] {c.label}")
        bad = self.first_problem()
        if bad is not None:
            lines.append(f"\nFirst problem: {bad.label}")
            if bad.detail:
                lines.extend("  " + line for line in bad.detail.splitlines())
            if bad.hint:
                lines.append(f"Hint: {bad.hint}")
        return "\n".join(lines)

    __repr__ = __str__

    def raise_for_status(self) -> Report:
        if not self.passed:
            raise AssertionError(str(self))
        return self


class NotDone(Exception):
    """The learner's function is still the stub."""


# ------------------------------------------------------------------------------------------
# running one case
# ------------------------------------------------------------------------------------------


def tolerance(dtype, mode_tf32: bool = False) -> tuple[float, float]:
    """(atol, rtol) for comparing a kernel's output of ``dtype`` with a float64 reference."""
    if dtype == torch.float16:
        return 2e-3, 2e-3
    if dtype == torch.bfloat16:
        return 2e-2, 2e-2
    if mode_tf32:
        return 1e-2, 1e-2
    return 1e-5, 1e-5


def call(fn, *args, **kwargs):
    """Run the learner's function under poisoned allocations; returns (output, allocations)."""
    with poisoned_allocations() as allocs:
        out = fn(*args, **kwargs)
    if mode.DEVICE == "cuda":
        torch.cuda.synchronize()
    return out, allocs


def table(idx, yours, expected, k: int = 5, names=("yours", "expected")) -> str:
    """The first ``k`` wrong positions as a small table."""
    rows = [f"{'position':>14}  {names[0]:>14}  {names[1]:>14}"]
    for i in range(min(k, len(idx))):
        pos = tuple(int(v) for v in idx[i]) if hasattr(idx[i], "__len__") else int(idx[i])
        pos_s = str(pos[0]) if isinstance(pos, tuple) and len(pos) == 1 else str(pos)
        rows.append(f"{pos_s:>14}  {float(yours[i]):>14.6g}  {float(expected[i]):>14.6g}")
    return "\n".join(rows)


def compare(label, out, expected, *, dtype=None, atol=None, rtol=None, allocs=(), diagnose=None) -> Case:
    """Compare ``out`` with ``expected`` (a float64 or same-dtype reference) and explain a mismatch.

    ``diagnose(out, expected, wrong_mask) -> str`` may give a lesson-specific hint.
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
                        "unmasked tail: your kernel writes past the end of the output. Mask the store "
                        "(mask=offsets < n) so the last, partial block stops at the edge")
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
    n_nan = int(torch.isnan(o[wrong]).sum())
    if n_nan:
        detail += f"; {n_nan} of them NaN, i.e. never written by your kernel"
    detail += "\n" + table(idx, o[wrong], e[wrong])
    hint = (diagnose(o, e, wrong) if diagnose else "") or (
        "some positions were never written (NaN is the grader's poison): check the grid and the offsets"
        if n_nan else "compare your formula with the reference, and check offsets and strides")
    return Case(label, "fail", detail, hint)


def attempt(label, fn, args, expected, *, kwargs=None, **compare_kwargs) -> Case:
    """One graded call: ``fn(*args, **kwargs)`` under poisoned allocations, compared with ``expected``."""
    try:
        out, allocs = call(fn, *args, **(kwargs or {}))
    except Exception as exc:
        return error_case(label, exc)
    return compare(label, out, expected, allocs=allocs, **compare_kwargs)


def refuses(label, fn, *args, hint: str, message_hint: tuple | None = None) -> Case:
    """A case that passes when ``fn(*args)`` raises ValueError (bad input must be refused, not computed on).

    ``message_hint``: (predicate on the message, hint when it fails), for errors that must say something.
    """
    try:
        fn(*args)
    except ValueError as e:
        if message_hint and not message_hint[0](str(e)):
            return Case(label, "fail", f"message: {e}", message_hint[1])
        return Case(label, "pass")
    except Exception as exc:
        return error_case(label, exc)
    shapes = ", ".join(f"{tuple(a.shape)} {a.dtype}" for a in args if isinstance(a, torch.Tensor))
    return Case(label, "fail", f"the call with {shapes} returned a result", hint)


def error_case(label: str, exc: BaseException) -> Case:
    """A case whose call raised: say where, briefly."""
    if isinstance(exc, (NotImplementedError, NotDone)):
        return Case(label, "todo", str(exc) or "not implemented yet", "fill in the TODO parts")
    if isinstance(exc, mode.UnsupportedInInterpreter):
        return Case(label, "error", str(exc))
    tb = traceback.extract_tb(exc.__traceback__)
    where = next((f"{f.filename.rsplit('/', 1)[-1]}:{f.lineno} ({f.name})" for f in reversed(tb)
                  if "exercises" in f.filename or "solutions" in f.filename), "")
    text = f"{type(exc).__name__}: {exc}".strip()
    if len(text) > 600:
        text = text[:600] + " ..."
    hint = "your code raised; the message above says where" + (f": {where}" if where else "")
    if isinstance(exc, (TypeError, NameError)) and "NoneType" in str(exc):
        hint = "something is still None: the stub's placeholder was not replaced"
    return Case(label, "error", text, hint)


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
