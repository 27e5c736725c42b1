"""Your progress through the course, kept on your machine: ``tkcourse progress``.

``tkcourse.check.run`` records each result of grading your exercise (the lesson, passed or not, the
first failing case, when, and a hash of the file it graded), and ``tkcourse.check.hint`` records how
many hints of each exercise you have revealed. ``tkcourse progress`` prints one line for each lesson with
an exercise: done, failing at which case, changed since its last check, edited but not checked yet, or not
started.

Where: ``.tkcourse/progress.json`` in the course's checkout (git-ignored), or the folder
``TKCOURSE_STATE_DIR`` names. The checkout, not a per-user data folder, because what it describes is
the exercises of that checkout: a second clone (a fresh start, another learner on the same machine)
has its own progress, and deleting the clone deletes it. Nothing is ever sent anywhere.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

from . import course, stubs

_VERSION = 1


def state_dir() -> Path:
    """The folder of the local state: ``TKCOURSE_STATE_DIR``, else ``.tkcourse/`` in the checkout (or
    in your home folder for a copy of tkcourse installed without its checkout)."""
    env = os.environ.get("TKCOURSE_STATE_DIR", "").strip()
    if env:
        return Path(env).expanduser()
    return (course.CHECKOUT or Path.home()) / ".tkcourse"


def state_path() -> Path:
    return state_dir() / "progress.json"


def load() -> dict:
    """The whole state: ``{"checks": {exercise: record}, "hints": {exercise: revealed}}``; empty when
    there is none yet, or when the file is unreadable (it is only a convenience: never an error)."""
    try:
        data = json.loads(state_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = {}
    if not isinstance(data, dict):
        data = {}
    for key in ("checks", "hints"):
        if not isinstance(data.get(key), dict):
            data[key] = {}
    data["version"] = _VERSION
    return data


def save(data: dict) -> None:
    """Write the state at once (a temporary file renamed over the old one: never half a file)."""
    path = state_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def file_hash(path) -> str | None:
    """sha256 of a file's bytes; None when it cannot be read."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def record(report, path=None) -> dict:
    """Keep the result of grading ``path`` (default ``exercises/<lesson>.py``) as that exercise's latest."""
    name = report.lesson
    path = Path(path) if path is not None else stubs.EXERCISES / f"{name}.py"
    bad = report.first_problem()
    entry = {
        "status": report.status,
        "passed": bool(report.passed),
        "first_failing": None if bad is None else bad.label,
        "cases_passed": sum(c.status == "pass" for c in report.cases),
        "time": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime()),
        "file": str(path),
        "sha256": file_hash(path),
    }
    data = load()
    data["checks"][name] = entry
    save(data)
    return entry


def _untouched(path: Path, name: str) -> bool:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    return stubs.digest(text) in (stubs.digest(stubs.expected(name)), stubs.manifest().get(name))


def exercise_state(name: str, exercises: Path | None = None, data: dict | None = None) -> str:
    """One exercise in words: "done", "failing at <case>", "changed since last check (...)",
    "edited, not checked yet" or "not started"."""
    path = Path(exercises or stubs.EXERCISES) / f"{name}.py"
    data = load() if data is None else data
    rec = data["checks"].get(name)
    if not path.exists() or _untouched(path, name):
        return "not started"
    if not isinstance(rec, dict):
        return "edited, not checked yet"
    was = "done" if rec.get("passed") else (f"failing at {rec.get('first_failing')!r}" if rec.get("first_failing")
                                             else "not passing")
    if rec.get("sha256") != file_hash(path):
        return f"changed since last check (then: {was}, {rec.get('time')})"
    return f"{was} (checked {rec.get('time')})"


def lines(exercises: Path | None = None) -> list[str]:
    """One line a lesson that has an exercise, in course order."""
    data = load()
    names = set(stubs.lessons())
    out = []
    for entry in course.LESSONS:
        lesson = entry.name
        parts = [p for p in course.parts(lesson) if p in names]
        if not parts:
            continue
        states = [exercise_state(p, exercises, data) for p in parts]
        if len(set(states)) == 1:
            text = states[0]
        else:
            text = "; ".join(f"{p}: {s}" for p, s in zip(parts, states))
        out.append(f"{course.notebook(lesson):<30} {text}")
    return out


def report() -> str:
    """What ``tkcourse progress`` prints."""
    where = state_path()
    try:
        where = where.relative_to(Path.cwd())
    except ValueError:
        pass
    return "\n".join(lines() + [f"(kept in {where} on this machine; nothing is sent anywhere)"])
