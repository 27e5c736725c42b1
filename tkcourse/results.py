"""Graders' reports as data, for a class: ``tkcourse check --json`` and ``tkcourse check --gradescope OUT``.

``as_json`` is every case of every report, as the checker ran them (a report stops at its first
problem, so the cases after it are not listed). ``gradescope`` is Gradescope's ``results.json``
(https://gradescope-autograders.readthedocs.io/en/latest/specs/): one test an exercise, worth one
point when its check passes, the report as the test's output. An instructor's ``run_autograder``
copies a student's ``exercises/`` into a checkout of the course and runs
``tkcourse check --gradescope /autograder/results/results.json || true`` (the status is 1 when an
exercise fails, as for any check): the class is graded by the same checks the learners ran.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from . import course

#: The part of Gradescope's results.json specification this module writes, as a JSON schema: the
#: tests' fields and the top level's (``score``, ``execution_time``, ``output``, ``tests``). The
#: specification allows more optional fields (visibility, leaderboard, ...), which are not written.
GRADESCOPE_SCHEMA: dict = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["tests"],
    "properties": {
        "score": {"type": "number"},
        "execution_time": {"type": "number", "minimum": 0},
        "output": {"type": "string"},
        "output_format": {"enum": ["text", "html", "simple_format", "md", "ansi"]},
        "visibility": {"enum": ["hidden", "after_due_date", "after_published", "visible"]},
        "stdout_visibility": {"enum": ["hidden", "after_due_date", "after_published", "visible"]},
        "extra_data": {"type": "object"},
        "tests": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "score", "max_score", "status", "output"],
                "properties": {
                    "name": {"type": "string", "minLength": 1},
                    "number": {"type": "string"},
                    "score": {"type": "number", "minimum": 0},
                    "max_score": {"type": "number", "minimum": 0},
                    "status": {"enum": ["passed", "failed"]},
                    "output": {"type": "string"},
                    "output_format": {"enum": ["text", "html", "simple_format", "md", "ansi"]},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "visibility": {"enum": ["hidden", "after_due_date", "after_published", "visible"]},
                    "extra_data": {"type": "object"},
                },
                "additionalProperties": False,
            },
        },
    },
    "additionalProperties": False,
}


def report_dict(report, seconds: float | None = None) -> dict:
    """One report as plain data: lesson, notebook, source, status, passed, message, cases (each case's
    label, status, detail and hint), and how long grading took."""
    d = dataclasses.asdict(report)
    d["passed"] = bool(report.passed)
    d["notebook"] = course.notebook(report.lesson)
    bad = report.first_problem()
    d["first_failing"] = None if bad is None else bad.label
    if seconds is not None:
        d["seconds"] = round(seconds, 3)
    return d


def as_json(reports, seconds=None) -> dict:
    """``tkcourse check --json``: ``{"passed", "total", "reports": [report_dict, ...]}``."""
    seconds = list(seconds) if seconds is not None else [None] * len(reports)
    items = [report_dict(r, s) for r, s in zip(reports, seconds)]
    return {"passed": sum(r["passed"] for r in items), "total": len(items), "reports": items}


def gradescope(reports, seconds=None, points: float = 1.0) -> dict:
    """Gradescope's results.json for ``reports``: a test an exercise, ``points`` when it passes."""
    seconds = list(seconds) if seconds is not None else [0.0] * len(reports)
    tests = []
    for r in reports:
        number = course.notebook(r.lesson).split("_", 1)[0]
        tests.append({
            "name": f"{course.notebook(r.lesson)}: exercises/{r.lesson}.py",
            "number": number,
            "score": float(points) if r.passed else 0.0,
            "max_score": float(points),
            "status": "passed" if r.passed else "failed",
            "output": str(r),
        })
    score = sum(t["score"] for t in tests)
    out = {
        "score": score,
        "execution_time": round(sum(s or 0.0 for s in seconds), 3),
        "output": f"{sum(r.passed for r in reports)} of {len(reports)} exercises pass the course's checks.",
        "tests": tests,
    }
    validate_gradescope(out)
    return out


def validate_gradescope(data: dict) -> None:
    """Raise ``jsonschema.ValidationError`` unless ``data`` follows ``GRADESCOPE_SCHEMA``."""
    import jsonschema

    jsonschema.validate(data, GRADESCOPE_SCHEMA)


def write(data: dict, path) -> Path:
    """Write ``data`` as JSON to ``path`` (its folder made if needed)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return path
