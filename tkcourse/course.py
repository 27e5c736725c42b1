"""The lessons in course order, and the names a learner may use for them.

A lesson is one word everywhere (``solutions/matmul.py``, ``exercises/matmul.py``,
``tkcourse/check/matmul.py``); its notebook adds the number that orders the course
(``notebooks/03_matmul.ipynb``). Commands accept any of ``03``, ``3``, ``03_matmul``, ``matmul``
(and a path such as ``notebooks/03_matmul.ipynb``), so a learner can type what the notebook says.

Like ``tkcourse.mode`` this module imports nothing of the course but ``tkcourse.errors``, so the
command line and the graders may both use it.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Iterable

from .errors import UserError

#: (number, name) in course order; ``tests/test_cli.py`` checks it against notebooks/.
LESSONS: tuple[tuple[str, str], ...] = (
    ("00", "welcome"),
    ("01", "vector_add"),
    ("02", "softmax"),
    ("03", "matmul"),
    ("04", "autotune"),
    ("05", "online_softmax"),
    ("06", "flash_attention"),
    ("07", "flash_attention_backward"),
    ("08", "launch"),
    ("09", "decode_attention"),
)

#: Lessons whose exercises go by more than one name, in the order the notebook takes them: lesson 09
#: writes the two kernels of a decode step, a fused RMSNorm (``rmsnorm``) and then the attention
#: (``decode_attention``). Each part has its own solution, exercise and grader; ``tkcourse check 09``
#: grades them all. Every other lesson is one name everywhere.
PARTS: dict[str, tuple[str, ...]] = {
    "decode_attention": ("rmsnorm", "decode_attention"),
}

#: Which module holds each benchmark's cases (``cases()``, optionally ``extra_rows(provenance)``).
#: They live in the top-level ``benchmarks`` package,
#: above both ``solutions`` and ``tkcourse``, so that ``tkcourse`` finds kernels by name here and never
#: imports ``solutions`` itself (the layers in pyproject.toml's import-linter contracts). One module may
#: serve two lessons: softmax measures lessons 02 and 05, flash_attention lessons 06 and 07.
BENCHMARKS: dict[str, str] = {
    "vector_add": "benchmarks.vector_add",
    "softmax": "benchmarks.softmax",
    "matmul": "benchmarks.matmul",
    "flash_attention": "benchmarks.flash_attention",
    "rmsnorm": "benchmarks.rmsnorm",
    "decode_attention": "benchmarks.decode_attention",
}

#: Which module holds each kernel ``python -m tkcourse.autotune KERNEL`` sweeps (its ``TARGETS[KERNEL]``,
#: a ``tkcourse.autotune.Target``: the config space and how to launch one config), found by name as
#: ``BENCHMARKS`` are.
SWEEP_TARGETS: dict[str, str] = {
    "matmul": "benchmarks.sweeps",
    "attention": "benchmarks.sweeps",
}

#: The checkout this package was installed from (editable), or None (an installed copy). The lesson
#: code a learner edits (``solutions/``, ``exercises/``) and ``benchmarks/`` are folders of the
#: checkout, not packages installed into site-packages under generic top-level names.
CHECKOUT: Path | None = next((p for p in [Path(__file__).resolve().parents[1]]
                              if (p / "solutions").is_dir() and (p / "pyproject.toml").is_file()), None)


def put_checkout_on_path() -> None:
    """Make ``solutions``, ``exercises`` and ``benchmarks`` importable from the checkout, wherever the
    process started (a notebook in ``notebooks/``, the ``tkcourse`` command): append ``CHECKOUT`` to
    ``sys.path`` (appended, so that nothing already on the path is shadowed). Without a checkout
    there is nothing to add, and ``tkcourse.exercise`` says where the lessons are."""
    if CHECKOUT is not None and str(CHECKOUT) not in sys.path:
        sys.path.append(str(CHECKOUT))


_BY_NUMBER = {number: name for number, name in LESSONS}
_NAMES = [name for _, name in LESSONS]
_PART_LESSON = {part: lesson for lesson, ps in PARTS.items() for part in ps}


def lesson_of(module: str) -> str | None:
    """The lesson a module of ``solutions/`` or ``exercises/`` belongs to: a part named in ``PARTS``,
    else the longest lesson name it starts with (``online_softmax_split`` -> ``online_softmax``);
    None for a module of no lesson (``_checks``)."""
    for lesson, parts in PARTS.items():
        if module in parts:
            return lesson
    starts = [n for n in _NAMES if module == n or module.startswith(n + "_")]
    return max(starts, key=len) if starts else None


def parts(lesson: str) -> tuple[str, ...]:
    """The exercise names of a lesson: ``PARTS[lesson]``, or the lesson's own name."""
    return PARTS.get(lesson, (lesson,))


def notebook(name: str) -> str:
    """``"matmul"`` -> ``"03_matmul"``: the lesson as its notebook names it (a part: its lesson's notebook)."""
    lesson = name if name in _NAMES else next((k for k, v in PARTS.items() if name in v), name)
    for number, known in LESSONS:
        if known == lesson:
            return f"{number}_{known}"
    return name


def _rank(name: str) -> tuple[int, int]:
    lesson = _PART_LESSON.get(name, name)
    return _NAMES.index(lesson), (parts(lesson).index(name) if name in parts(lesson) else 0)


def in_order(names: Iterable[str]) -> list[str]:
    """``names`` in course order (a lesson's parts in the notebook's order); names the course does not
    list (a new module) go last, sorted."""
    names = set(names)
    known = sorted((n for n in names if n in _NAMES or n in _PART_LESSON), key=_rank)
    return known + sorted(n for n in names if n not in known)


def _listing(names: Iterable[str]) -> str:
    """``01_vector_add, ..., 09_decode_attention (rmsnorm, decode_attention)``: a lesson of several
    parts once, with the parts to type."""
    seen: dict[str, list[str]] = {}
    for n in in_order(names):
        seen.setdefault(notebook(n), []).append(n)
    return ", ".join(f"{nb} ({', '.join(ns)})" if len(parts(_PART_LESSON.get(ns[0], ns[0]))) > 1 else nb
                     for nb, ns in seen.items())


def resolve(text: str, among: Iterable[str] | None = None, what: str = "lesson") -> str:
    """The lesson ``text`` names (``"03"``, ``"3"``, ``"03_matmul"``, ``"matmul"``, a notebook path).

    ``among``: the lessons a command can act on (those with a grader, say); defaults to all of them,
    plus any in ``among`` the course does not list. Raises ``UserError`` with one line that lists
    the choices in course order.
    """
    choices = in_order(_NAMES if among is None else among)
    raw = str(text).strip()
    key = re.sub(r"\.(ipynb|py)$", "", raw.replace("\\", "/").rstrip("/").split("/")[-1]).lower().replace("-", "_")
    name = None
    m = re.fullmatch(r"(\d{1,2})(?:_(\w+))?", key)
    if m:
        number = m.group(1).zfill(2)
        name = _BY_NUMBER.get(number)
        if m.group(2) is not None and m.group(2) != name:
            name = None
    elif key in _NAMES or key in choices:
        name = key
    if name is None:
        raise UserError(f"no {what} named {raw!r}; the lessons: {_listing(choices)}")
    if name not in choices:
        raise UserError(f"{notebook(name)} has no {what}; the lessons that have one: {_listing(choices)}")
    return name


def resolve_all(texts: Iterable[str], among: Iterable[str], what: str = "lesson") -> list[str]:
    """Each of ``texts`` resolved (duplicates dropped, the order given kept; a lesson of several parts,
    named by number or notebook, gives each of its parts that ``among`` holds); all of ``among`` in course order when ``texts`` is
    empty."""
    among = list(among)
    texts = list(texts)
    if not texts:
        return in_order(among)
    out: list[str] = []
    for t in texts:
        name = resolve(t, among, what)
        typed = str(t).strip().lower()  # a part's own name is that part alone; 09 or 09_... is all of them
        for part in [p for p in parts(name) if p in among and typed not in parts(name)] or [name]:
            if part not in out:
                out.append(part)
    return out
