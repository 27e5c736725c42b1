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
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import math
import os
import random
import re
import textwrap
import traceback
import warnings
from dataclasses import dataclass, field

import numpy as np
import torch

from .. import mode, traffic

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
        if numel == 0:  # nothing to poison; such tensors are often re-pointed with set_ (the tracer does)
            return real["empty"](shape, dtype=dtype, device=device)
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


def _filled_like(numel: int, t: torch.Tensor, fill: float) -> torch.Tensor:
    return torch.full((numel,), fill, dtype=t.dtype, device=t.device)


def strided(t: torch.Tensor, step: int = 2, fill: float = INPUT_PAD) -> torch.Tensor:
    """A 1-D view of ``t``'s values with stride ``step`` (``t`` lives at every step-th element of a
    bigger buffer whose other elements hold ``fill``): read as if contiguous, it gives loud values."""
    flat = t.reshape(-1)
    buf = _filled_like(flat.numel() * step + _pad_for(flat.numel()), flat, fill)
    view = buf[: flat.numel() * step: step]
    view.copy_(flat)
    return view


def row_padded(t: torch.Tensor, pad: int = 7, fill: float = INPUT_PAD) -> torch.Tensor:
    """A 2-D view of ``t``'s values whose rows are ``pad`` elements further apart than its width
    (row stride ``cols + pad``; the gaps hold ``fill``), as a slice ``big[:, :cols]`` is."""
    rows, cols = t.shape
    buf = _filled_like(rows * (cols + pad) + _pad_for(rows * cols), t, fill)
    view = buf[: rows * (cols + pad)].view(rows, cols + pad)[:, :cols]
    view.copy_(t)
    return view


def sliced_rows(t: torch.Tensor, step: int = 2, fill: float = INPUT_PAD) -> torch.Tensor:
    """A 2-D view of ``t``'s values that is every ``step``-th row of a bigger tensor (``big[::step]``)."""
    rows, cols = t.shape
    buf = _filled_like(rows * step * cols + _pad_for(rows * cols), t, fill)
    view = buf[: rows * step * cols].view(rows * step, cols)[::step]
    view.copy_(t)
    return view


def transposed(t: torch.Tensor) -> torch.Tensor:
    """``t``'s values stored column-major (``t.t().contiguous().t()``): stride (1, rows)."""
    return padded(t.t().contiguous()).t()


def layout_of(t: torch.Tensor) -> str:
    """A few words for a label: "contiguous", "stride (1, 64)", ..."""
    return "contiguous" if t.is_contiguous() else f"stride {tuple(t.stride())}"


def grading_seed() -> int:
    """The seed of the random sizes: ``TKCOURSE_CHECK_SEED`` if set, else a fixed one (so a report
    reproduces; the seed is in every label that uses it)."""
    with contextlib.suppress(ValueError):
        return int(os.environ.get("TKCOURSE_CHECK_SEED", "17"))
    return 17


def random_sizes(count: int, lo: int, hi: int, seed: int | None = None) -> tuple[int, list[int]]:
    """``(seed, sizes)``: ``count`` sizes in ``[lo, hi]`` from ``seed`` (``grading_seed()`` by default),
    none a power of two above 2. The first lies in the top quarter, ``[hi / 4, hi]`` (past any grid or
    BLOCK hard-coded to fit smaller sizes); the others are log-uniform, one in each equal slice of
    ``[lo, hi / 4]`` on a log scale, so they span the orders of magnitude whatever the seed.
    """
    seed = grading_seed() if seed is None else seed
    rng = random.Random(seed)
    top = max(lo, hi // 4)
    edges = [math.log(lo) + (math.log(top) - math.log(lo)) * i / max(1, count - 1) for i in range(count)]
    spans = [(math.log(top), math.log(hi))] + list(zip(edges[:-1], edges[1:]))
    out = []
    for a, b in spans[:count]:
        n = min(max(int(round(math.exp(rng.uniform(a, b)))), lo), hi)
        if n & (n - 1) == 0 and n > 2:
            n += 1 if n + 1 <= hi else -1
        out.append(n)
    return seed, out


def seeded(label: str, seed: int) -> str:
    """A label that says how to reproduce a random case."""
    return f"{label} (random, seed {seed}: TKCOURSE_CHECK_SEED={seed})"


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


def _just_past_end(bad, name: str) -> bool:
    """Only loads of ``name``, each at most two elements past its end: a shifted offset under a correct mask."""
    mine = [o for o in bad if o.tensor == name]
    if any(o.kind != "load" or not o.derived for o in bad) or not mine:
        return False
    return all(o.offsets.min() >= o.numel and o.offsets.max() < o.numel + 2 and o.offsets.size <= 2 for o in mine)


# ------------------------------------------------------------------------------------------
# the learner's kernel source: mistakes that show in the code itself
# ------------------------------------------------------------------------------------------


def launched_kernels(fn, names) -> list:
    """The ``@triton.jit`` functions named ``names`` that ``fn`` can reach: its module's globals and its
    closure (a launcher's kernel lives beside it). Unknown names are left out."""
    from .. import triton_internals as ti

    names = set(names)
    found = []
    base = inspect.unwrap(fn) if callable(fn) else fn
    scopes = [getattr(base, "__globals__", {})]
    scopes.append({f"cell{i}": c.cell_contents for i, c in enumerate(getattr(base, "__closure__", None) or ())
                   if _cell_filled(c)})
    for scope in scopes:
        for obj in list(scope.values()):
            if not ti.is_kernel(obj):  # @triton.jit, compiled or interpreted; Autotuner; Heuristics
                continue
            k = obj
            while not inspect.isfunction(k) and hasattr(k, "fn"):
                k = k.fn
            if inspect.isfunction(k) and k.__name__ in names and k not in found:
                found.append(k)
    return found


def _cell_filled(cell) -> bool:
    try:
        cell.cell_contents  # noqa: B018
    except ValueError:
        return False
    return True


def _boolean_ops(py_fn) -> list[tuple[int, str, str, str]]:
    """``(line, source text, "and"/"or", the same with & or |)`` for each ``and``/``or`` between comparisons in ``py_fn``'s body
    that is not an ``if``/``while`` condition (where constexpr tests are fine)."""
    try:
        text = textwrap.dedent(inspect.getsource(py_fn))
        tree = ast.parse(text)
        first = inspect.getsourcelines(py_fn)[1]
    except (OSError, TypeError, SyntaxError):
        return []
    conditions = {id(node.test) for node in ast.walk(tree) if isinstance(node, (ast.If, ast.While, ast.IfExp))}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BoolOp) and id(node) not in conditions \
                and any(isinstance(v, ast.Compare) for v in node.values):
            word, op = ("and", "&") if isinstance(node.op, ast.And) else ("or", "|")
            fixed = f" {op} ".join(f"({ast.get_source_segment(text, v)})" for v in node.values)
            out.append((first + node.lineno - 1, ast.get_source_segment(text, node) or "", word, fixed))
    return out


def boolean_op_hint(fn, kernel_names) -> str:
    """A hint for ``a < n and a >= 0`` in a launched kernel: on tensors Python's ``and`` keeps one test only.

    In Triton's interpreter a kernel is plain Python: a block of booleans counts as true, so ``a and b``
    is ``b`` and ``a or b`` is ``a``; the other test is silently dropped (compiled kernels warn that
    ``and``/``or`` on tensors are deprecated). ``""`` when no launched kernel has one.
    """
    if fn is None or not kernel_names:
        return ""
    for py_fn in launched_kernels(fn, kernel_names):
        for line, text, word, fixed in _boolean_ops(py_fn):
            kept = "the last" if word == "and" else "the first"
            return (f"`{text}` ({py_fn.__name__}, line {line}): Python's `{word}` on tensors keeps only one of the "
                    f"tests ({kept}: a block of booleans counts as true), so the others are dropped. Combine "
                    f"tensor tests with `{'&' if word == 'and' else '|'}`, each in parentheses: {fixed}")
    return ""


def storage_overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors share any byte of memory (same storage, overlapping extents)."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.device != b.device:
        return False
    if a.numel() == 0 or b.numel() == 0:
        return False
    if a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        return False

    def extent(t):
        lo = t.data_ptr()
        hi = lo + (sum((n - 1) * abs(st) for n, st in zip(t.shape, t.stride())) + 1) * t.element_size()
        return lo, hi

    (a0, a1), (b0, b1) = extent(a), extent(b)
    return a0 < b1 and b0 < a1


def alias_case(label: str, out, inputs: dict, fn_name: str = "function") -> Case | None:
    """A failing case when the output shares memory with an input (the result written over it), else None."""
    if not isinstance(out, torch.Tensor):
        return None
    for name, t in inputs.items():
        if not isinstance(t, torch.Tensor):
            continue
        if out is t or (out.data_ptr() == t.data_ptr() and out.shape == t.shape and out.stride() == t.stride()):
            return Case(label, "fail", f"the tensor returned is {name} itself",
                        f"your {fn_name} returned {name} itself: the result overwrote an input. Allocate a new "
                        f"output (torch.empty_like({name}), or torch.empty(shape, dtype=..., device=...)) and "
                        "store the result there")
        if storage_overlap(out, t):
            return Case(label, "fail", f"the tensor returned shares memory with {name}",
                        f"your {fn_name} returned a view of {name}'s memory: the result overwrote (part of) an "
                        f"input. Allocate a new output (torch.empty_like({name}) or torch.empty(...)); a view, "
                        "reshape or slice of an input is not a new tensor")
    return None


def _same(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.dtype.is_floating_point:
        return (a == b) | (torch.isnan(a) & torch.isnan(b))
    return a == b


class Snapshot:
    """Copies of the inputs before a call; ``case(label)`` fails when the call changed one of them."""

    def __init__(self, inputs: dict):
        self.inputs = {k: v for k, v in inputs.items() if isinstance(v, torch.Tensor)}
        self.before = {k: v.detach().clone() for k, v in self.inputs.items()}

    def changed(self) -> list[tuple[str, int, int]]:
        """(name, how many elements changed, their count) for every input the call changed."""
        out = []
        for k, t in self.inputs.items():
            if t.shape != self.before[k].shape or t.dtype != self.before[k].dtype:
                out.append((k, t.numel(), t.numel()))
                continue
            diff = ~_same(t.detach(), self.before[k])
            if diff.any():
                out.append((k, int(diff.sum()), diff.numel()))
        return out

    def case(self, label: str, fn_name: str = "function") -> Case | None:
        ch = self.changed()
        if not ch:
            return None
        name, n_bad, n = ch[0]
        return Case(label, "fail", f"after the call, {n_bad} of {n} elements of the input {name} had changed",
                    f"your {fn_name} changed its input {name}: a kernel must only read its inputs. Store results "
                    f"into a new output (torch.empty_like({name})), never into {name}, and do not update "
                    f"{name} in place (x += ..., x.copy_(...), x.sub_(...))")


def input_names(fn, args) -> dict:
    """``{parameter name: argument}`` for the positional arguments of ``fn`` (arg0, arg1, ... if unknown)."""
    try:
        names = [p.name for p in inspect.signature(fn).parameters.values()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        names = []
    names += [f"arg{i}" for i in range(len(names), len(args))]
    return dict(zip(names, args))


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
                mask: str | None = None) -> "GradedCall | Case":
    """``fn(*args, **kwargs)`` under poisoned allocations and the tracer: a ``GradedCall``, or the Case of
    an out-of-bounds access (``oob_case``, with the lesson's ``oob_hint(bad, hint)`` where it gives one,
    and its edge ``mask`` named) or of a raised error. ``None`` arguments (an optional input left out)
    are not inputs."""
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
            case.hint = oob_hint(exc.out_of_bounds, case.hint) or case.hint
        return case
    except Exception as exc:
        return error_case(label, exc)
    return GradedCall(out, allocs, traces, inputs, snap, fn_name, fn, seen)


def written_case(label, out, expected, graded: GradedCall, **compare_kwargs) -> Case:
    """``compare``, with what the tracer knows: which elements no store reached (a NaN there was never
    written, a NaN elsewhere was computed), the hidden unwritten elements of a filled output, Python's
    ``and``/``or`` between tensor tests in a launched kernel, and the warnings that explain an inf or NaN."""
    case = compare(label, out, expected, allocs=graded.allocs, **compare_kwargs)
    if case.status == "fail" and graded.traces and isinstance(out, torch.Tensor) and "NaN" in case.detail:
        never = _never_stored(out, graded.traces)  # only now: reading the stores of a big trace costs time
        if never is not None:
            case = compare(label, out, expected, allocs=graded.allocs, stored=~never, **compare_kwargs)
    if case.status == "fail" and graded.traces:
        case = _unwritten_case(label, out, expected, graded.traces, graded.allocs, compare_kwargs) or case
        boolean = boolean_op_hint(graded.fn, {ln.kernel for tr in graded.traces for ln in tr.launches})
        if boolean:
            case.hint = boolean
    return explain_warnings(case, out, graded.warnings)


def attempt(label, fn, args, expected, *, kwargs=None, trace: bool = True, oob_hint=None, mask: str | None = None,
            **compare_kwargs) -> Case:
    """One graded call: ``fn(*args, **kwargs)`` under poisoned allocations and the tracer, checked in order
    for an out-of-bounds access (``oob_case``), a raised error, an output that is an input (``alias_case``),
    the output against ``expected`` (``compare``) and inputs that the call changed (``Snapshot``).

    ``trace=False`` skips the tracer (a launch too big to trace on a GPU, say). ``oob_hint(bad, hint)``
    may give a lesson's own hint for the out-of-bounds accesses ``bad`` (``""``: keep ``hint``); ``mask``
    is the lesson's edge mask (``offsets < n``), which out-of-bounds hints name. A lesson whose function returns several tensors builds on ``graded_call`` and ``written_case``.
    """
    g = graded_call(label, fn, args, kwargs=kwargs, trace=trace, oob_hint=oob_hint, mask=mask)
    if isinstance(g, Case):
        return g
    out = g.out
    if isinstance(out, tuple) and not hasattr(out, "_fields"):
        return Case(label, "fail", f"returned a tuple of {len(out)}, not a torch.Tensor",
                    f"your {g.fn_name} returns a tuple: return only the output tensor (return out, not return out, ...)")
    bad = alias_case(label, out, g.inputs, g.fn_name)
    if bad is not None:
        return bad
    case = written_case(label, out, expected, g, mask=mask, **compare_kwargs)
    if case.status == "todo":
        return case
    changed = g.snap.case(label, g.fn_name)
    return changed if changed is not None else case


def _never_stored(out: torch.Tensor, traces) -> torch.Tensor | None:
    """Elements of ``out`` that no traced launch stored to (None when no launch took ``out`` as it is)."""
    written, found = None, False
    for tr in traces:
        for i, t in enumerate(tr.tensors):
            ptr, shape, stride, _ = t.key
            if ptr == out.data_ptr() and tuple(shape) == tuple(out.shape) and tuple(stride) == tuple(out.stride()):
                counts = torch.from_numpy(tr.read_counts(i, kind="store").reshape(tuple(out.shape))) > 0
                written = counts if written is None else written | counts
                found = True
    return None if not found else ~written


def _unwritten_case(label, out, expected, traces, allocs, compare_kwargs) -> Case | None:
    """A filled output (torch.zeros, torch.full, a clone) hides the elements a kernel never wrote from the
    NaN poison; the tracer knows them: grade again with NaN there, so the hint can name the grid or mask."""
    if not isinstance(out, torch.Tensor) or any(out.data_ptr() == a.buf.data_ptr() for a in allocs):
        return None  # a poisoned torch.empty output: NaN already marks what was never written
    never = _never_stored(out, traces)
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
