"""What a grader reports: one ``Case`` an input, a ``Report`` a lesson, and a case for a call that raised."""

from __future__ import annotations

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
    elif "Loop-carried variable" in str(exc):  # Triton's compiler (on a GPU; the interpreter runs such a loop)
        hint = ("a value your loop carries changes its type inside the loop, such as an accumulator started in "
                "fp16 while tl.dot returns fp32: accumulate in fp32 (tl.zeros(..., dtype=tl.float32)), or give "
                "the value the loop's type before the loop" + (f": {where}" if where else ""))
    return Case(label, "error", text, hint)
