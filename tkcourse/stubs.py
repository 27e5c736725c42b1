"""Exercises are generated from solutions, never edited by hand.

``solutions/<lesson>.py`` marks what the learner writes::

        ### BEGIN SOLUTION
        code of the solution
        ### STUB
        # what the exercise gets instead: comments, copied as they are
        #! placeholder = None      <- a line the exercise gets as code ("#! " removed)
        ### END SOLUTION

Lines after ``### STUB`` run in the solution too, so they must be comments; ``#! `` marks the few
that become code in the exercise. A region whose stub has no code line gets ``pass``. ``exercises/MANIFEST.json``
records the hash of each generated file, which tells three things apart: a file the learner has
not touched (its hash is the manifest's: regenerate freely, grade as "not done yet"), a file the
learner edited (never overwritten), and a manifest that is behind the solutions (CI fails).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "solutions"
EXERCISES = ROOT / "exercises"
MANIFEST = EXERCISES / "MANIFEST.json"

_BEGIN = re.compile(r"^(?P<indent>\s*)### BEGIN SOLUTION\s*$")
_STUB = re.compile(r"^\s*### STUB\s*$")
_END = re.compile(r"^\s*### END SOLUTION\s*$")

HEADER = (
    "# Exercise generated from solutions/{name}.py by `make exercises`. Fill in the parts marked TODO.\n"
    "# Your edits are safe: the generator never overwrites a file you have changed.\n"
    "# Check your work: `tkcourse check {name}` in a shell, or tkcourse.check.run(\"{name}\") in a notebook.\n"
)

INIT_TEXT = (
    '"""Your exercises: one module per lesson, generated from solutions/ (see tkcourse.stubs)."""\n\n'
    "import tkcourse.mode  # noqa: F401  (before triton: its own jit functions must see TRITON_INTERPRET)\n"
)


class MarkerError(ValueError):
    """A solution file whose exercise markers do not pair up."""


def stub_text(source: str, name: str) -> str:
    """The exercise text for a solution's source (pure: no files touched)."""
    out: list[str] = [HEADER.format(name=name)]
    state, indent, stub, line_no = "code", "", [], 0
    for line_no, line in enumerate(source.splitlines(keepends=True), 1):
        if state == "code":
            m = _BEGIN.match(line)
            if m:
                state, indent, stub = "solution", m.group("indent"), []
            elif _STUB.match(line) or _END.match(line):
                raise MarkerError(f"solutions/{name}.py:{line_no}: marker outside a BEGIN SOLUTION region")
            else:
                out.append(line)
        elif state in ("solution", "stub"):
            if _BEGIN.match(line):
                raise MarkerError(f"solutions/{name}.py:{line_no}: BEGIN SOLUTION inside another region")
            if _STUB.match(line):
                if state == "stub":
                    raise MarkerError(f"solutions/{name}.py:{line_no}: two STUB markers in one region")
                state = "stub"
            elif _END.match(line):
                out.append(f"{indent}# TODO: your code here\n")
                out.extend(stub)
                if not any(not ln.lstrip().startswith("#") for ln in stub):
                    out.append(f"{indent}pass\n")
                state = "code"
            elif state == "stub":
                body = line.lstrip()
                if body.startswith("#! ") or body.rstrip() == "#!":
                    line = line[: len(line) - len(body)] + body[3:]
                    line = line if line.endswith("\n") else line + "\n"
                elif body.strip() and not body.startswith("#"):
                    raise MarkerError(f"solutions/{name}.py:{line_no}: a STUB line must be a comment (it runs in "
                                      "the solution); write '#! code' for a line the exercise gets as code")
                stub.append(line)
    if state != "code":
        raise MarkerError(f"solutions/{name}.py: a BEGIN SOLUTION region is never closed")
    return "".join(out)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def lessons() -> list[str]:
    """Lessons that have an exercise: solution modules with at least one marked region."""
    return sorted(p.stem for p in SOLUTIONS.glob("*.py")
                  if not p.stem.startswith("_") and "### BEGIN SOLUTION" in p.read_text())


def expected(name: str) -> str:
    return stub_text((SOLUTIONS / f"{name}.py").read_text(), name)


def manifest() -> dict[str, str]:
    if not MANIFEST.exists():
        return {}
    try:
        return json.loads(MANIFEST.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{MANIFEST} is not valid JSON ({e}); restore it with `git checkout {MANIFEST}`") from e


@dataclass
class Status:
    name: str
    state: str  # "missing" | "untouched" | "edited" | "current"
    path: Path


def status(name: str) -> Status:
    """Where the learner's exercise file stands against what was generated for it."""
    path = EXERCISES / f"{name}.py"
    if not path.exists():
        return Status(name, "missing", path)
    h = digest(path.read_text())
    if h == digest(expected(name)):
        return Status(name, "untouched", path)
    if h == manifest().get(name):  # generated from an older solution, still untouched
        return Status(name, "untouched", path)
    return Status(name, "edited", path)


def generate(names=None, force: bool = False, log=print) -> dict[str, str]:
    """Write exercises/<name>.py for each lesson; returns {name: what happened}.

    A file the learner has edited is kept unless ``force``; even then it is first copied to
    ``exercises/<name>.py.bak-<time>``, so no work is lost.
    """
    EXERCISES.mkdir(exist_ok=True)
    init = EXERCISES / "__init__.py"
    if not init.exists() or init.read_text() != INIT_TEXT:
        init.write_text(INIT_TEXT)
    names = list(names or lessons())
    man, done = manifest(), {}
    for name in names:
        text = expected(name)
        st = status(name)
        if st.state == "edited" and not force:
            done[name] = "kept (you edited it)"
        else:
            if st.state == "edited":
                backup = st.path.with_name(f"{name}.py.bak-{time.strftime('%Y%m%d-%H%M%S')}")
                shutil.copy2(st.path, backup)
                done[name] = f"rewritten, your version saved as {backup.name}"
            elif st.path.exists() and st.path.read_text() == text:
                done[name] = "up to date"
            else:
                done[name] = "written"
            st.path.write_text(text)
        man[name] = digest(text)
        log(f"exercises/{name}.py: {done[name]}")
    MANIFEST.write_text(json.dumps(dict(sorted(man.items())), indent=1) + "\n")
    return done
