"""Exercises are generated from solutions, never edited by hand.

``solutions/<lesson>.py`` marks what the learner writes::

        ### BEGIN SOLUTION
        code of the solution
        ### STUB
        # what the exercise gets instead: comments, copied as they are
        #! placeholder = None      <- a line the exercise gets as code ("#! " removed)
        ### END SOLUTION

A solution may import a private helper of solutions/ (``from ._checks import integer``): the
generator copies the helper into exercises/ and the exercise imports that copy
(``from exercises._checks import integer``), so exercises never import solutions/.

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

from .errors import UserError

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "solutions"
EXERCISES = ROOT / "exercises"
MANIFEST = EXERCISES / "MANIFEST.json"

_BEGIN = re.compile(r"^(?P<indent>\s*)### BEGIN SOLUTION\s*$")
_STUB = re.compile(r"^\s*### STUB\s*$")
_END = re.compile(r"^\s*### END SOLUTION\s*$")
# ``from ._checks import ...`` in a solution: the exercise imports its own copy by its full name,
# so that it also runs when executed outside its package (a test that execs the stub text)
_HELPER_IMPORT = re.compile(r"^(?P<indent>\s*)from \.(?P<helper>_\w+) import ")

HEADER = (
    "# Exercise generated from solutions/{name}.py by `make exercises`. Fill in the parts marked TODO.\n"
    "# Your edits are safe: the generator never overwrites a file you have changed.\n"
    "# Check your work: `tkcourse check {name}` in a shell, or tkcourse.check.run(\"{name}\") in a notebook.\n"
)

HELPER_HEADER = (
    "# Generated from solutions/{name}.py by `make exercises`: a verbatim copy that the exercises import.\n"
    "# Nothing to fill in here.\n"
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
                out.append(_HELPER_IMPORT.sub(r"\g<indent>from exercises.\g<helper> import ", line))
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


def regions(source: str) -> list[tuple[int, str, str]]:
    """Each BEGIN SOLUTION region of a solution's source that has a stub: (the line of its BEGIN marker, the
    solution's lines, the stub's lines), for checks of what a stub says (markers as ``stub_text`` reads them)."""
    found, state, start, solution, stub = [], "code", 0, [], []
    for line_no, line in enumerate(source.splitlines(keepends=True), 1):
        if _BEGIN.match(line):
            state, start, solution, stub = "solution", line_no, [], []
        elif _STUB.match(line) and state == "solution":
            state = "stub"
        elif _END.match(line):
            if state == "stub":
                found.append((start, "".join(solution), "".join(stub)))
            state = "code"
        elif state == "solution":
            solution.append(line)
        elif state == "stub":
            stub.append(line)
    return found


def answer_text(source: str) -> str:
    """A solution's source as a learner who finished the exercise would have written it: the solution's code
    kept, the markers and the stubs (``### STUB`` up to ``### END SOLUTION``) dropped."""
    kept, in_stub = [], False
    for line in source.splitlines(keepends=True):
        if _STUB.match(line):
            in_stub = True
        elif _END.match(line):
            in_stub = False
        elif not in_stub and not _BEGIN.match(line):
            kept.append(line)
    return "".join(kept)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


#: The manifest's name for ``exercises/__init__.py``, which is generated and guarded like an exercise.
INIT = "__init__"


def lessons() -> list[str]:
    """Lessons that have an exercise: solution modules with at least one marked region."""
    return sorted(p.stem for p in SOLUTIONS.glob("*.py")
                  if not p.stem.startswith("_") and "### BEGIN SOLUTION" in p.read_text())


def helpers() -> list[str]:
    """Private modules of solutions/ (``_checks``: the launchers' argument checks) that the lessons import
    relatively; each exercise folder gets a verbatim copy, so that exercises never import solutions/."""
    return sorted(p.stem for p in SOLUTIONS.glob("_*.py")
                  if p.stem != INIT and "### BEGIN SOLUTION" not in p.read_text())


def expected(name: str) -> str:
    """What the generator writes for ``name``: a lesson's exercise, a helper's copy, or ``__init__``."""
    if name == INIT:
        return INIT_TEXT
    path = SOLUTIONS / f"{name}.py"
    if name.startswith("_"):
        return HELPER_HEADER.format(name=name) + path.read_text()
    return stub_text(path.read_text(), name)


def _restore_hint() -> str:
    return (f"restore it with `git checkout {MANIFEST.relative_to(ROOT) if MANIFEST.is_relative_to(ROOT) else MANIFEST}`, "
            "or delete it (then every exercise that differs from its stub counts as yours and is kept)")


def manifest() -> dict[str, str]:
    """``{name: sha256 of the generated text}``; a damaged file raises a UserError that says how to recover."""
    if not MANIFEST.exists():
        return {}
    try:
        d = json.loads(MANIFEST.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise UserError(f"{MANIFEST} is not valid JSON ({e}); {_restore_hint()}") from None
    except OSError as e:
        raise UserError(f"{MANIFEST} cannot be read ({e.strerror or e}); {_restore_hint()}") from None
    if not isinstance(d, dict):
        raise UserError(f"{MANIFEST} holds {type(d).__name__ if d is not None else 'null'}, not an object of "
                        f"lesson -> hash; {_restore_hint()}")
    bad = [k for k, v in d.items() if not (isinstance(v, str) and re.fullmatch(r"[0-9a-f]{64}", v))]
    if bad:
        raise UserError(f"{MANIFEST}: the entry for {bad[0]!r} is not a sha256 hash; {_restore_hint()}")
    return d


@dataclass
class Status:
    name: str
    state: str  # "missing" | "untouched" | "edited" | "current"
    path: Path


def _path(name: str) -> Path:
    return EXERCISES / f"{name}.py"


def status(name: str) -> Status:
    """Where the learner's exercise file stands against what was generated for it."""
    path = _path(name)
    if not path.exists():
        return Status(name, "missing", path)
    try:
        h = digest(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, OSError):
        return Status(name, "edited", path)  # not what the generator writes: the learner's, kept
    if h == digest(expected(name)):
        return Status(name, "untouched", path)
    if h == manifest().get(name):  # generated from an older solution, still untouched
        return Status(name, "untouched", path)
    return Status(name, "edited", path)


def backup(path: Path) -> Path:
    """Copy ``path`` to a new ``<name>.bak-<time>[-n]`` beside it; an existing backup is never overwritten."""
    stem = f"{path.name}.bak-{time.strftime('%Y%m%d-%H%M%S')}"
    data = path.read_bytes()
    for n in range(10_000):
        target = path.with_name(stem if n == 0 else f"{stem}-{n}")
        try:
            with open(target, "xb") as f:  # "x": fails if the name is taken, atomically
                f.write(data)
        except FileExistsError:
            continue
        shutil.copystat(path, target)
        return target
    raise UserError(f"{path.parent}: too many backups named {stem}-*; move some away and retry")


def _check_names(names) -> list[str]:
    known = lessons()
    if isinstance(names, str):
        names = [names]
    names = list(names)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UserError(f"no lesson named {', '.join(map(repr, unknown))}; lessons: {', '.join(known)}")
    return names


def _write(name: str, force: bool, man: dict) -> str:
    """Write one generated file unless the learner edited it; returns what happened."""
    text = expected(name)
    st = status(name)
    if st.state == "edited" and not force:
        what = "kept (you edited it)"
    else:
        if st.state == "edited":
            what = f"rewritten, your version saved as {backup(st.path).name}"
        elif st.path.exists() and st.path.read_text() == text:
            what = "up to date"
        else:
            what = "written"
        st.path.write_text(text)
    man[name] = digest(text)
    return what


def generate(names=None, force: bool = False, log=print) -> dict[str, str]:
    """Write exercises/<name>.py for each lesson; returns {name: what happened}.

    A file the learner has edited is kept unless ``force``; even then it is first copied to a new
    ``exercises/<name>.py.bak-<time>`` (never over an earlier backup), so no work is lost. The same
    holds for ``exercises/__init__.py`` and the helper copies (``helpers()``), written on every run.
    An unknown lesson name or a damaged manifest raises ``UserError`` before anything is written.
    """
    names = _check_names(names) if names else lessons()
    man, done = manifest(), {}
    EXERCISES.mkdir(exist_ok=True)
    for name in [INIT, *helpers()]:
        what = _write(name, force, man)
        if what != "up to date":
            log(f"exercises/{name}.py: {what}")
    for name in names:
        done[name] = _write(name, force, man)
        log(f"exercises/{name}.py: {done[name]}")
    MANIFEST.write_text(json.dumps(dict(sorted(man.items())), indent=1) + "\n")
    return done
