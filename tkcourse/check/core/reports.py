"""What a grader reports: one ``Case`` an input, a ``Report`` a lesson, and a case for a call that raised."""

from __future__ import annotations

import re
import traceback
from dataclasses import dataclass, field

from ... import mode


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


LEARNERS_DIRS = ("exercises", "solutions")  # a frame in a file under one of these is the learner's code


def _is_learners(filename: str) -> bool:
    """``filename`` lies in a folder ``exercises/`` (or ``solutions/``): a folder of that name, not a substring of
    some other path (a checkout in ``~/solutions-course`` would make every frame the learner's)."""
    return any(part in LEARNERS_DIRS for part in filename.replace("\\", "/").split("/")[:-1])


def _base(filename: str) -> str:
    return filename.replace("\\", "/").rsplit("/", 1)[-1]


def exception_chain(exc: BaseException | None):
    """``exc``, then the exceptions it was raised from or while handling (``__cause__``, else ``__context__``
    unless suppressed), each once: a chain that loops ends."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ if exc.__cause__ is not None else (None if exc.__suppress_context__ else exc.__context__)


def learners_frame(exc: BaseException) -> traceback.FrameSummary | None:
    """The line of the learner's code that raised ``exc``: the innermost frame in the learner's files, looked for
    along the chain of exceptions too. Triton's interpreter re-raises an error of the kernel's body as
    ``InterpreterError(...) from e``, whose own traceback stops at the launch; the kernel's line is in
    ``e.__cause__``'s. Going inward stops at an exception that the learner's code raised itself (its last frame
    is theirs, as ``raise ValueError`` in an ``except`` block): the one it handled is not where it went wrong. A
    chain that loops is walked once. ``None`` where no frame of the learner's code is in the chain."""
    found = None
    for e in exception_chain(exc):
        tb = traceback.extract_tb(e.__traceback__)
        found = next((f for f in reversed(tb) if _is_learners(f.filename)), None) or found
        if tb and _is_learners(tb[-1].filename):
            break
    return found


#: What a grader says of a stub's placeholder left None (a lesson's hint may add what it saw).
STILL_NONE = "something is still None: the stub's placeholder was not replaced"


#: Triton's own refusals that learners meet, by a piece of their message (the interpreter's and the compiler's), and
#: what each means
_TRITON_ERRORS = {
    "arange's range must be a power of 2": (
        "tl.arange's length must be a power of two: a BLOCK that is not one (the row length itself, say) is refused. "
        "Round it up, triton.next_power_of_2(n), and mask the lanes past the end"),
    "arange's end argument must be greater than the start": (
        "tl.arange(0, BLOCK) got a BLOCK of 0: a length computed from one less than the size (triton."
        "next_power_of_2(n - 1) is 0 for n = 1) leaves the block empty. BLOCK = triton.next_power_of_2(n)"),
    "must be same dtype": (
        "tl.dot takes two operands of one dtype: cast the fp32 one (the weights p, say) to the other's dtype, "
        "p.to(v.dtype); the sum stays fp32 in the accumulator"),
    "Input shapes should have M >=": (  # Triton's compiler only: the interpreter multiplies any block
        "tl.dot on a GPU needs blocks at least as large as the message says: on an NVIDIA GPU the side it sums "
        "over (K: the columns of a, the rows of b) 16 or more, 32 for 8-bit types. Make that block larger and "
        "mask the lanes past the real ones. The interpreter takes smaller blocks, so only a GPU says so"),
    "incompatible dimensions": (
        "two blocks of different shapes meet in one operation: a reduction over the wrong axis (axis=0 where "
        "axis=1 belongs), a [:, None] where [None, :] belongs, or a block not transposed makes one of them the "
        "wrong shape. Check the shapes along the line"),
    # what only Triton's compiler refuses (on a GPU, or the graders' compile for one): the interpreter runs
    # the kernel as Python, line by line, and takes all of these
    "Loop-carried variable": lambda said: _loop_carried(said),
    "unsupported AST node type: Break": (
        "a compiled kernel's loop has no break: Triton compiles the loop as a whole, with its bounds. Put the "
        "loop's end in its bounds (range(start, stop, step)), or the rest of its body under an if"),
    "unsupported AST node type: Continue": (
        "a compiled kernel's loop has no continue: put the rest of the body under an if (or a mask) instead"),
    "Cannot have `return` statements inside": (
        "a compiled kernel cannot return from inside a loop: put the loop's end in its bounds, or the rest of "
        "its body under an if"),
    "block redefines it as": (
        "a variable gets another type or shape inside an if than before it (the int 0 before, a loaded block "
        "inside, say): give it that type and shape before the if, tl.zeros((BLOCK,), dtype=tl.float32), so "
        "every branch leaves the same kind of value"),
    "is not defined')": (  # the compiler's NameError('v is not defined'), not Python's "name 'v' is not defined"
        "a name the kernel reads is defined in only one branch of an if, or not at all: a compiled kernel needs "
        "it defined before the if (or in every branch), whichever way the test goes"),
    "Cannot access global variable": (
        "a compiled kernel reads a module's global only when it is a tl.constexpr: pass the value in as an "
        "argument (BLOCK: tl.constexpr), or define the global as NAME = tl.constexpr(value)"),
    "cannot be accessed from Triton (cpu tensor?)": (  # a GPU launch given a tensor in host memory
        "a tensor the kernel was given lies in the CPU's memory, where a GPU kernel cannot reach it: make every "
        "tensor it takes on the inputs' device, torch.empty(..., device=x.device) or torch.empty_like(x)"),
    "unsupported tensor index": (
        "a block cannot be indexed by a number in a compiled kernel (x[0]): reduce it (tl.sum, tl.max), pick "
        "the element with tl.where and a reduction, or load the one element you need"),
}


def triton_hint(said: str) -> str | None:
    """What Triton's message ``said`` means for a learner (``_TRITON_ERRORS``), or None for one it does not know."""
    hint = next((h for needle, h in _TRITON_ERRORS.items() if needle in said), None)
    return hint(said) if callable(hint) else hint


def _loop_carried(said: str) -> str:
    """Triton's compiler on a loop whose carried value changes type or shape, in words naming the value."""
    found = re.search(r"Loop-carried variable (\w+) has initial type (.+?) but is re-assigned to (.+?) in loop", said)
    name, before, after = found.groups() if found else ("a value", "", "")
    shape = re.compile(r"\[[^\]]*\]")
    if found and shape.findall(before) != shape.findall(after):
        return (f"{name} changes its type inside the loop: it starts as {before} and the loop makes it {after}, a "
                "block where it started as one value (or another shape). Start it with the shape the loop gives it, "
                "tl.zeros([BLOCK_M], tl.float32) for a value a row, say, and accumulate in fp32")
    said_types = f": it starts as {before} and the loop makes it {after}" if found else ""
    if "int" in before and "fp" in after:
        why = ("an int (0, say) to which the loop adds floats: start it as a float, 0.0 or tl.zeros((), tl.float32), "
               "and accumulate in fp32")
    elif ("fp16" in before or "bf16" in before) and "fp32" in after:
        why = ("an accumulator in 16 bits to which the loop adds fp32 (tl.dot returns fp32): accumulate in fp32, "
               "tl.zeros(..., dtype=tl.float32), and cast once at the store")
    else:
        why = ("such as a sum started as the int 0 and then added an fp32 block's sum, or an accumulator started in "
               "fp16 while tl.dot returns fp32: accumulate in fp32, starting the value in the type the loop gives it "
               "(0.0, or tl.zeros(..., dtype=tl.float32))")
    return f"{name} changes its type inside the loop{said_types}: {why}"


def error_case(label: str, exc: BaseException) -> Case:
    """A case whose call raised: say where, briefly."""
    if isinstance(exc, (NotImplementedError, NotDone)):
        return Case(label, "todo", str(exc) or "not implemented yet", "fill in the TODO parts")
    if isinstance(exc, mode.UnsupportedInInterpreter):
        return Case(label, "error", str(exc))
    frame = learners_frame(exc)
    where = f"{_base(frame.filename)}:{frame.lineno} ({frame.name})" if frame else ""
    text = f"{type(exc).__name__}: {exc}".strip()
    if len(text) > 600:
        text = text[:600] + " ..."
    hint = "your code raised; the message above says where" + (f": {where}" if where else "")
    if isinstance(exc, (TypeError, NameError)) and "NoneType" in str(exc):
        hint = STILL_NONE
    elif triton_hint(" ".join(map(str, exception_chain(exc)))):
        hint = triton_hint(" ".join(map(str, exception_chain(exc)))) + (f": {where}" if where else "")
    return Case(label, "error", text, hint)
