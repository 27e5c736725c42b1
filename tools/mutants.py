"""Small mistakes planted in what a learner writes, each run through the lesson's grader: which ones it misses.

    .venv/bin/python tools/mutants.py LESSON [--limit N] [--only TEXT] [--timeout S] [--json FILE]

A grader is only as good as the wrong kernels it catches. The planted-mistake tests (``tests/helpers.py``:
``mutant``, ``planted_file``) hold the mistakes learners are known to make; this tool plants the small ones
nobody listed, mechanically, in the code between ``### BEGIN SOLUTION`` and ``### STUB`` of
``solutions/<LESSON>.py`` (the code the exercise leaves to the learner), one edit a mutant:

- a comparison turned (``<`` and ``<=``, ``>`` and ``>=``, ``==`` and ``!=``);
- an arithmetic operator swapped (``+`` and ``-``, ``*`` and ``+``, ``//`` and ``%``, ``/`` and ``*``);
- an integer constant plus one, a float constant 0.0 and 1.0 swapped;
- ``tl.maximum`` and ``tl.minimum``, ``tl.max`` and ``tl.sum``, ``tl.exp`` and ``tl.exp2`` swapped; an
  ``axis`` of 0 and 1 swapped;
- the ``mask=`` or the ``other=`` of a ``tl.load`` dropped, the ``mask=`` of a ``tl.store`` dropped;
- an augmented assignment (``x += step``) dropped.

Each mutant is the finished exercise (``stubs.answer_text``) with that edit, written to a temporary
``exercises/`` folder and graded in this process as ``tkcourse check`` grades a learner's file (the GPU
compile check included). It prints one line a mutant: caught (the first failing case and its hint),
**survived** (every case passed), **grader raised** (the grader's own code raised, not the learner's: a
grader must never crash), or timed out. A survivor is either a mistake the grader misses, which deserves a
case and a hint, or an edit that changes nothing the lesson asks for (a mask on lanes that are always in
range): read it and decide. Runs on the CPU (Triton's interpreter) or a GPU; a dev tool, not part of the
suite (a lesson takes minutes); ``tests/test_mutants_tool.py`` checks it on lesson 01.

Why not mutmut or cosmic-ray: they mutate files in place and judge mutants by a test suite's exit code;
here the oracle is one grader's report (which case, which hint), the mutations are limited to marked
regions, and a mutant is a new file in a folder of its own, as a learner's is.
"""

from __future__ import annotations

import argparse
import ast
import copy
import importlib.util
import json
import re
import signal
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

_BEGIN = re.compile(r"^\s*### BEGIN SOLUTION\s*$")
_STUB = re.compile(r"^\s*### STUB\s*$")

_COMPARE = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq}
_BINOP = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Add, ast.FloorDiv: ast.Mod, ast.Mod: ast.FloorDiv,
          ast.Div: ast.Mult}
_CALLS = {"maximum": "minimum", "minimum": "maximum", "max": "sum", "sum": "max", "exp": "exp2", "exp2": "exp"}


@dataclass
class Mutant:
    line: int  # 1-based line of solutions/<lesson>.py
    what: str  # the edit, in words
    before: str  # the line as the solution has it
    after: str  # the line as the mutant has it


@dataclass
class Outcome:
    mutant: Mutant
    verdict: str  # caught | survived | grader raised | timed out | not built
    case: str = ""  # the first case that did not pass
    hint: str = ""
    seconds: float = 0.0


def learner_lines(text: str) -> set[int]:
    """The 1-based lines between each ``### BEGIN SOLUTION`` and its ``### STUB``: the code the learner writes."""
    lines, inside = set(), False
    for i, line in enumerate(text.splitlines(), 1):
        if _BEGIN.match(line):
            inside = True
        elif _STUB.match(line):
            inside = False
        elif inside:
            lines.add(i)
    return lines


def _is_tl(call: ast.Call, names: tuple) -> str | None:
    f = call.func
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "tl" and f.attr in names:
        return f.attr
    return None


def _edits(node: ast.AST):
    """(words, mutated copy of ``node``) for each one-edit mutation of ``node`` itself (not its children)."""
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:
        new = copy.deepcopy(node)
        new.ops = [_COMPARE[type(node.ops[0])]()]
        yield "comparison turned", new
    elif isinstance(node, ast.BinOp) and type(node.op) in _BINOP:
        new = copy.deepcopy(node)
        new.op = _BINOP[type(node.op)]()
        yield "operator swapped", new
    elif isinstance(node, ast.Constant) and type(node.value) is int and not isinstance(node.value, bool):
        yield "constant + 1", ast.Constant(node.value + 1)
    elif isinstance(node, ast.Constant) and type(node.value) is float and node.value in (0.0, 1.0):
        yield "constant 0.0 / 1.0 swapped", ast.Constant(1.0 - node.value)
    elif isinstance(node, ast.Call):
        name = _is_tl(node, tuple(_CALLS))
        if name:
            new = copy.deepcopy(node)
            new.func.attr = _CALLS[name]
            yield f"tl.{name} -> tl.{_CALLS[name]}", new
        for i, kw in enumerate(node.keywords):
            if kw.arg == "axis" and isinstance(kw.value, ast.Constant) and kw.value.value in (0, 1):
                new = copy.deepcopy(node)
                new.keywords[i].value = ast.Constant(1 - kw.value.value)
                yield "axis swapped", new
        io = _is_tl(node, ("load", "store"))
        for i, kw in enumerate(node.keywords):
            if io and kw.arg in (("mask", "other") if io == "load" else ("mask",)):
                new = copy.deepcopy(node)
                del new.keywords[i]
                yield f"{kw.arg}= of tl.{io} dropped", new


def mutants(text: str) -> list[tuple[Mutant, str]]:
    """Every one-edit mutant of the learner's lines of ``text`` (a solution's source): (Mutant, mutated text).
    An edit replaces one node's source on one line by the unparsed mutated node; nodes over several lines are
    left alone (their children on one line are still mutated)."""
    lines = text.splitlines(keepends=True)
    mine = learner_lines(text)
    out = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.AugAssign) and node.lineno in mine and node.end_lineno == node.lineno:
            line = lines[node.lineno - 1]
            indent = line[: len(line) - len(line.lstrip())]
            new_line = f"{indent}pass  # dropped: {line.strip()}\n"
            out.append((Mutant(node.lineno, "augmented assignment dropped", line.rstrip(), new_line.rstrip()),
                        "".join(lines[: node.lineno - 1] + [new_line] + lines[node.lineno:])))
            continue
        if getattr(node, "lineno", None) not in mine or node.end_lineno != node.lineno:
            continue
        line = lines[node.lineno - 1]
        segment = line.encode()[node.col_offset:node.end_col_offset].decode()
        for what, new in _edits(node):
            replacement = ast.unparse(new)
            if replacement == segment:
                continue
            b = line.encode()
            new_line = (b[: node.col_offset] + replacement.encode() + b[node.end_col_offset:]).decode()
            out.append((Mutant(node.lineno, what, line.rstrip(), new_line.rstrip()),
                        "".join(lines[: node.lineno - 1] + [new_line] + lines[node.lineno:])))
    out.sort(key=lambda m: (m[0].line, m[0].what, m[0].after))
    seen: set[str] = set()
    return [m for m in out if not (m[1] in seen or seen.add(m[1]))]  # two edits may make one text


def _module(text: str, lesson: str, folder: Path, n: int):
    """``text`` (a solution with markers) as a learner's finished ``exercises/<lesson>.py``, imported."""
    from tkcourse import stubs

    body = stubs.answer_text(text)
    body = re.sub(r"^(\s*)from \.(\w*) import", lambda m: f"{m[1]}from solutions{'.' if m[2] else ''}{m[2]} import",
                  body, flags=re.M)  # the package's relative imports, from outside it
    path = folder / f"m{n}" / "exercises" / f"{lesson}.py"
    path.parent.mkdir(parents=True)
    path.write_text(body)
    spec = importlib.util.spec_from_file_location(f"mutant_{lesson}_{n}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout()


def grade(lesson: str, text: str, folder: Path, n: int, timeout: float):
    """The report of grading ``text`` as a learner's file, or the verdict that stopped it."""
    from tkcourse import check

    try:
        mod = _module(text, lesson, folder, n)
    except Exception as exc:  # noqa: BLE001  (a mutant that does not even import)
        return None, f"not built: {type(exc).__name__}: {exc}"
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        return check.run(lesson, module=mod, quiet=True, record=False), ""
    except _Timeout:
        return None, "timed out"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def outcome(mutant: Mutant, report, stopped: str, seconds: float) -> Outcome:
    if report is None:
        return Outcome(mutant, stopped.split(":")[0], stopped, "", seconds)
    if report.status == "pass":
        return Outcome(mutant, "survived", "", "", seconds)
    bad = report.first_problem()
    # guarded() labels what the grader's own generator raised "grading (after n cases)"; a mutant keeps the
    # lesson's API, so that is the grader failing, unless the learner's code raised inside it
    raised = bad.status == "error" and bad.label.startswith("grading (") and "your code raised" not in bad.hint
    return Outcome(mutant, "grader raised" if raised else "caught", f"{bad.label}: {bad.detail}"[:300],
                   bad.hint[:300], seconds)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("lesson")
    ap.add_argument("--limit", type=int, default=0, help="grade only the first N mutants")
    ap.add_argument("--only", default="", help="only mutants whose edit or line contains this text")
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds a mutant may take to grade")
    ap.add_argument("--json", type=Path, help="write every outcome here")
    args = ap.parse_args(argv)

    import tkcourse  # noqa: F401  (the mode, before triton is imported)

    text = (ROOT / "solutions" / f"{args.lesson}.py").read_text()
    todo = [m for m in mutants(text) if args.only in m[0].what or args.only in m[0].after]
    if args.limit:
        todo = todo[: args.limit]
    print(f"{args.lesson}: {len(todo)} mutants of {len(learner_lines(text))} learner lines", flush=True)
    results = []
    with tempfile.TemporaryDirectory(prefix="mutants-") as tmp:
        for n, (m, mtext) in enumerate(todo):
            t0 = time.perf_counter()
            report, stopped = grade(args.lesson, mtext, Path(tmp), n, args.timeout)
            r = outcome(m, report, stopped, time.perf_counter() - t0)
            results.append(r)
            mark = {"caught": "  ok", "survived": "MISS", "grader raised": "BUG!"}.get(r.verdict, "  ..")
            print(f"{mark} {n + 1:>3}/{len(todo)} line {m.line:>4} {m.what:<34} {m.after.strip()[:90]}", flush=True)
            if r.verdict != "caught":
                print(f"         {r.verdict}{': ' + r.case if r.case else ''}", flush=True)
    counts = {v: sum(r.verdict == v for r in results) for v in dict.fromkeys(r.verdict for r in results)}
    print(f"{args.lesson}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=1) + "\n")
    return 1 if counts.get("grader raised") else 0


if __name__ == "__main__":
    sys.exit(main())
