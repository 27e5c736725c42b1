"""The course's one registry of lessons, and the names a learner may use for them.

A lesson is declared once, in ``LESSONS``: one ``Lesson`` entry holds its number and name, its parts (the
exercise names), the benchmarks that measure it, the kernels the autotune command sweeps for it, its
problem sizes in both modes, and which steps of ``tools/gpu_pass.sh`` run it. Everything else is derived
from those by one naming rule (one word everywhere): part ``matmul`` of lesson ``03`` is
``notebooks/03_matmul.ipynb``, ``solutions/matmul.py``, ``exercises/matmul.py``, the grader
``tkcourse/check/matmul.py`` (``grade(module)``), ``tests/test_matmul.py`` and, where declared,
``benchmarks/matmul.py`` (``cases()``). ``tests/test_registry.py`` lists what a new lesson must provide
and checks every entry.

The API the rest of the course reads (stable; commands, graders, scripts and tests use only these):

* ``LESSONS``: the ``Lesson`` entries in course order; ``lesson(name)``: one, by name or part;
* ``parts(lesson)``, ``graded()``: exercise names (a lesson's; every lesson's, each with its grader), in
  course order; ``lesson_of(module)``: the lesson a module of ``solutions/`` belongs to;
* ``BENCHMARKS``, ``SWEEP_TARGETS``: name -> module of ``benchmarks/`` (``tkcourse bench``,
  ``python -m tkcourse.autotune``);
* ``size(name)``: a problem size for the current mode (``tkcourse.size``, which the notebooks call);
* ``resolve``, ``resolve_all``, ``notebook``, ``in_order``: names as a learner types them;
* ``CHECKOUT``, ``put_checkout_on_path()``, ``import_checkout(module)``: the checkout's folders
  (``solutions/``, ``exercises/``, ``benchmarks/``) and the one place ``tkcourse`` imports them, by name;
* ``main(argv)``: the lists ``tools/gpu_pass.sh`` asks for (``graders online``, ``notebooks verify``, ...).

Commands accept any of ``03``, ``3``, ``03_matmul``, ``matmul`` (and a path such as
``notebooks/03_matmul.ipynb``), so a learner can type what the notebook says. This module imports
nothing of the course but ``tkcourse.errors`` and ``tkcourse.mode``, so the command line and the
graders may both use it.
"""

from __future__ import annotations

import importlib
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Iterable, Mapping

from . import mode
from .errors import UserError

#: The steps of ``tools/gpu_pass.sh`` that run a chosen set of lessons (``Lesson.gpu_passes``, ``Lesson.records``).
GPU_PASSES = ("online", "verify", "int4", "inference", "llm", "hopper")


@dataclass(frozen=True)
class Lesson:
    """One lesson, declared once. Files follow from ``number``, ``name`` and ``parts`` (module docstring).

    ``parts``: the exercise names in the notebook's order, each with its solution, exercise and grader
    (most lessons: the lesson's own name; none for a lesson with no exercise). ``benchmarks``: modules of
    ``benchmarks/`` whose ``cases()`` measure this lesson's kernels (one may serve later lessons too).
    ``sweeps``: kernels ``python -m tkcourse.autotune`` sweeps for it (``benchmarks/sweeps.py``'s
    ``TARGETS``), each with the shapes recorded in ``tkcourse/data/sweeps/``. ``sizes``: ``name ->
    (interpreter, GPU)`` problem sizes its notebook asks for with ``tkcourse.size(name)``.
    ``gpu_passes``: the steps of ``tools/gpu_pass.sh`` (``GPU_PASSES``) that run its graders, its
    notebook and its ``gpu_tests`` (``tests/test_<x>.py``, the kernels' tests worth a GPU's time).
    ``quotes``: recorded rows its prose quotes, which the ``figures`` step measures again:
    ``benchmark -> shapes`` (empty: every shape). ``records``: the rows a step of ``GPU_PASSES`` records
    in one run, ``step -> benchmark -> shapes`` (empty: every shape), for figures whose ratios must share
    a run (the inference kernels at model sizes).
    """

    number: str
    name: str
    parts: tuple[str, ...] = ()
    benchmarks: tuple[str, ...] = ()
    sweeps: Mapping[str, str] = field(default_factory=dict)
    sizes: Mapping[str, tuple[object, object]] = field(default_factory=dict)
    gpu_passes: frozenset[str] = frozenset()
    gpu_tests: tuple[str, ...] = ()
    quotes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    records: Mapping[str, Mapping[str, tuple[str, ...]]] = field(default_factory=dict)

    def __post_init__(self):  # read-only mappings: the registry is data, not state
        for name in ("sweeps", "sizes", "quotes"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))
        object.__setattr__(self, "records", MappingProxyType({k: MappingProxyType(dict(v)) for k, v in self.records.items()}))
        object.__setattr__(self, "gpu_passes", frozenset(self.gpu_passes))

    @property
    def notebook(self) -> str:
        """``"03_matmul"``: the notebook's name (``notebooks/03_matmul.ipynb``)."""
        return f"{self.number}_{self.name}"

    @property
    def files(self) -> dict[str, list[str]]:
        """Every file this entry implies, relative to the checkout: what ``tests/test_registry.py`` checks."""
        return {
            "notebook": [f"notebooks/{self.notebook}.ipynb"],
            "solutions": [f"solutions/{p}.py" for p in self.parts],
            "exercises": [f"exercises/{p}.py" for p in self.parts],
            "graders": [f"tkcourse/check/{p}.py" for p in self.parts],
            "tests": [f"tests/test_{p}.py" for p in self.parts],
            "benchmarks": [f"benchmarks/{b}.py" for b in self.benchmarks],
            "gpu_tests": [f"tests/test_{t}.py" for t in self.gpu_tests],
        }


#: The course, in order. A new lesson is one entry here plus its own files (README, "Adding a lesson").
LESSONS: tuple[Lesson, ...] = (
    Lesson("00", "welcome", gpu_passes={"verify"}),
    Lesson("01", "vector_add", parts=("vector_add",), benchmarks=("vector_add",),
           sizes={"vector_add.n": (98_433, 1 << 26),
                  "vector_add.sweep": ([1 << 10, 1 << 12, 1 << 14, 1 << 16], [1 << p for p in range(12, 29, 2)])},
           gpu_passes={"verify"}),
    Lesson("02", "softmax", parts=("softmax",), benchmarks=("softmax",),  # lesson 05's rows too
           sizes={"softmax.shape": ((64, 1000), (4096, 4096))},
           gpu_passes={"online"}, gpu_tests=("softmax",)),
    Lesson("03", "matmul", parts=("matmul",), benchmarks=("matmul",),
           sizes={"matmul.shape": ((96, 80, 112), (4096, 4096, 4096))},
           gpu_passes={"verify"}),
    Lesson("04", "autotune", parts=("autotune",),
           sweeps={"matmul": "4096x4096x4096,16x4096x4096,8192x8192x8192,512x512x512,1024x1024x1024,2048x2048x2048"},
           sizes={"autotune.live": ((32, 32, 32), (4096, 4096, 4096))},
           gpu_passes={"verify"}),
    Lesson("05", "online_softmax", parts=("online_softmax",),  # measured by lesson 02's benchmark
           sizes={"online_softmax.shape": ((8, 5000), (1024, 131072))},
           gpu_passes={"online"}, gpu_tests=("online_softmax",)),
    Lesson("06", "flash_attention", parts=("flash_attention",), benchmarks=("flash_attention",),  # 07's too
           sweeps={"attention": "4x16x4096x128"},
           records={"inference": {"flash_attention": tuple(f"B{b}-Hq32-Hkv8-N4096-D128{c}" for b in (1, 4)
                                                           for c in ("", "-causal"))}}),
    Lesson("07", "flash_attention_backward", parts=("flash_attention_backward",),
           sizes={"attention_capstone": (dict(d_model=32, n_heads=2, seq=32, batch=2, steps=20, lr=3e-3),
                                         dict(d_model=512, n_heads=8, seq=1024, batch=8, steps=50, lr=1e-3))},
           gpu_passes={"verify"}, gpu_tests=("flash_attention_backward",)),
    Lesson("08", "launch", parts=("launch",),
           gpu_passes={"online", "verify"}, gpu_tests=("launch_lean",),
           quotes={"vector_add": (), "softmax": (), "matmul": ("512x512x512", "1024x1024x1024", "2048x2048x2048"),
                   "flash_attention": ("B1-H16-N512-D64", "B1-H16-N512-D64-causal", "B16-H32-N1024-D64",
                                       "B16-H32-N1024-D64-causal")}),
    Lesson("09", "decode_attention", parts=("rmsnorm", "decode_attention"),
           benchmarks=("rmsnorm", "decode_attention", "decode_step"),
           gpu_passes={"verify"}, quotes={"rmsnorm": (), "decode_attention": ()},
           records={"inference": {"decode_attention": (), "decode_step": ()}}),
    Lesson("10", "int4_matmul", parts=("int4_matmul",), benchmarks=("int4_matmul",),
           sizes={"int4_matmul.shape": ((4, 96, 256, 64), (16, 8192, 8192, 128))},
           gpu_passes={"verify", "int4"}, gpu_tests=("int4_matmul",), quotes={"int4_matmul": ()}),
    Lesson("11", "llm",  # the capstone: no exercise of its own; the learner swaps in those of 03, 06, 09, 10
           sizes={"llm.new_tokens": (16, 200), "llm.swap_tokens": (3, 64)},
           gpu_passes={"verify", "llm"}, gpu_tests=("llm",)),
    Lesson("12", "hopper", parts=("hopper",), benchmarks=("hopper",),  # GPU-first: on a CPU, recorded figures
           sizes={"hopper.shape": ((48, 64, 80), (8192, 8192, 8192))},
           gpu_passes={"hopper"}, gpu_tests=("hopper",), quotes={"hopper": ()}),
)

_BY_NAME = {l.name: l for l in LESSONS}
_BY_NUMBER = {l.number: l.name for l in LESSONS}
_NAMES = [l.name for l in LESSONS]
_PART_LESSON = {p: l.name for l in LESSONS for p in l.parts if p != l.name}

#: Lessons whose exercises go by more than one name, in the order the notebook takes them (lesson 09:
#: a fused RMSNorm, then the attention). Derived from ``LESSONS``.
PARTS: dict[str, tuple[str, ...]] = {l.name: l.parts for l in LESSONS if len(l.parts) > 1}

#: Which module of ``benchmarks/`` holds each benchmark's cases (``cases()``, optionally
#: ``extra_rows(provenance)``), found by name so that ``tkcourse`` never imports ``solutions``
#: (pyproject.toml's import-linter contracts). Derived from ``LESSONS``.
BENCHMARKS: dict[str, str] = {b: f"benchmarks.{b}" for l in LESSONS for b in l.benchmarks}

#: Which module holds each kernel ``python -m tkcourse.autotune KERNEL`` sweeps (its ``TARGETS[KERNEL]``,
#: a ``tkcourse.autotune.Target``), found by name as ``BENCHMARKS`` are. Derived from ``LESSONS``.
SWEEP_TARGETS: dict[str, str] = {t: "benchmarks.sweeps" for l in LESSONS for t in l.sweeps}

#: Every problem size, ``name -> (interpreter, GPU)``, from the lessons' ``sizes``.
SIZES: Mapping[str, tuple[object, object]] = MappingProxyType({k: v for l in LESSONS for k, v in l.sizes.items()})


def size(name: str):
    """The problem size ``name`` for the current mode: small enough that the interpreter stays quick on a
    laptop, large enough on a GPU that timings mean something (``Lesson.sizes``)."""
    try:
        small, large = SIZES[name]
    except KeyError:
        raise KeyError(f"no size named {name!r}; known: {', '.join(sorted(SIZES))}") from None
    return small if mode.INTERPRET else large


def lesson(name: str) -> Lesson:
    """The ``Lesson`` named ``name`` (a lesson's name or one of its parts)."""
    try:
        return _BY_NAME[_PART_LESSON.get(name, name)]
    except KeyError:
        raise KeyError(f"no lesson named {name!r}; lessons: {', '.join(_NAMES)}") from None


def graded() -> list[str]:
    """Every part, in course order: each has a solution, an exercise and a grader (``tkcourse check``)."""
    return [p for l in LESSONS for p in l.parts]


# --------------------------------------------------------------------------------------------
# The checkout: solutions/, exercises/ and benchmarks/ are its folders, not installed packages.
# --------------------------------------------------------------------------------------------

#: The checkout this package was installed from (editable), or None (an installed copy). The lesson
#: code a learner edits (``solutions/``, ``exercises/``) and ``benchmarks/`` are folders of the
#: checkout, not packages installed into site-packages under generic top-level names.
CHECKOUT: Path | None = next((p for p in [Path(__file__).resolve().parents[1]]
                              if (p / "solutions").is_dir() and (p / "pyproject.toml").is_file()), None)


def put_checkout_on_path() -> None:
    """Make ``solutions``, ``exercises`` and ``benchmarks`` importable from the checkout, wherever the
    process started (a notebook in ``notebooks/`` imports ``solutions.<lesson>`` itself; the ``tkcourse``
    command): append ``CHECKOUT`` to ``sys.path`` (appended, so that nothing already on the path is
    shadowed). Without a checkout there is nothing to add, and ``tkcourse.exercise`` says where the
    lessons are."""
    if CHECKOUT is not None and str(CHECKOUT) not in sys.path:
        sys.path.append(str(CHECKOUT))


_CHECKOUT_PACKAGES = ("solutions", "exercises", "benchmarks")


def import_checkout(module: str):
    """Import ``module`` of the checkout's ``solutions/``, ``exercises/`` or ``benchmarks/`` by name.

    The one place ``tkcourse`` loads lesson code: the layers (pyproject.toml) forbid ``tkcourse`` to
    import those folders, so it finds them by a name from this registry (``BENCHMARKS``, a lesson's
    part), at run time, where import-linter does not look. A module outside those folders is refused.
    """
    if module.split(".", 1)[0] not in _CHECKOUT_PACKAGES:
        raise ValueError(f"{module!r} is not a module of {', '.join(_CHECKOUT_PACKAGES)}")
    put_checkout_on_path()
    return importlib.import_module(module)


# --------------------------------------------------------------------------------------------
# Names as a learner types them.
# --------------------------------------------------------------------------------------------


def lesson_of(module: str) -> str | None:
    """The lesson a module of ``solutions/`` or ``exercises/`` belongs to: a part's lesson, else the
    longest lesson name it starts with (``online_softmax_split`` -> ``online_softmax``); None for a
    module of no lesson (``_checks``)."""
    if module in _PART_LESSON:
        return _PART_LESSON[module]
    starts = [n for n in _NAMES if module == n or module.startswith(n + "_")]
    return max(starts, key=len) if starts else None


def parts(lesson: str) -> tuple[str, ...]:
    """The exercise names of a lesson (its ``parts``; the lesson's own name for one of no exercise)."""
    known = _BY_NAME.get(lesson)
    return known.parts if known is not None and known.parts else (lesson,)


def notebook(name: str) -> str:
    """``"matmul"`` -> ``"03_matmul"``: the lesson as its notebook names it (a part: its lesson's notebook)."""
    known = _BY_NAME.get(_PART_LESSON.get(name, name))
    return known.notebook if known is not None else name


#: Benchmarks named after no lesson or part (``decode_step``): ranked with the lesson that lists them.
_BENCH_LESSON = {b: l for l in LESSONS for b in l.benchmarks if b not in _BY_NAME and b not in _PART_LESSON}


def _rank(name: str) -> tuple[int, int]:
    if name in _BENCH_LESSON:
        l = _BENCH_LESSON[name]
        return _NAMES.index(l.name), len(l.parts) + l.benchmarks.index(name)
    lesson = _PART_LESSON.get(name, name)
    return _NAMES.index(lesson), (parts(lesson).index(name) if name in parts(lesson) else 0)


def in_order(names: Iterable[str]) -> list[str]:
    """``names`` in course order (a lesson's parts in the notebook's order); names the course does not
    list (a new module) go last, sorted."""
    names = set(names)
    known = sorted((n for n in names if n in _NAMES or n in _PART_LESSON or n in _BENCH_LESSON), key=_rank)
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
    named by number or notebook, gives each of its parts that ``among`` holds); all of ``among`` in
    course order when ``texts`` is empty."""
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


# --------------------------------------------------------------------------------------------
# What tools/gpu_pass.sh asks: the registry as words a shell loop reads.
# --------------------------------------------------------------------------------------------


def gpu_pass(what: str, step: str | None = None, lessons: Iterable[str] = ()) -> list[str]:
    """The words ``tools/gpu_pass.sh`` reads for ``what`` (see ``main``)."""
    chosen = [l for l in LESSONS if step in l.gpu_passes] if step else list(LESSONS)
    if what == "graders":
        return [p for l in chosen for p in l.parts]
    if what == "benchmarks":
        return [b for l in chosen for b in l.benchmarks]
    if what == "notebooks":  # a pytest -k expression over tests/test_learner_path.py's notebook ids
        return [" or ".join(f"{l.number}_" for l in chosen)]
    if what == "tests":
        return [f"tests/test_{t}.py" for l in chosen for t in l.gpu_tests]
    if what == "sweeps":
        return [f"{t} {shapes}" for l in chosen for t, shapes in l.sweeps.items()]
    if what == "records":  # one line a benchmark: NAME [--shape S ...]
        return [" ".join([b, *(f"--shape {s}" for s in shapes)]) for l in LESSONS
                for b, shapes in l.records.get(step, {}).items()]
    if what == "quotes":
        named = [lesson(resolve(n)) for n in lessons] or [l for l in LESSONS if l.quotes]
        return [" ".join([b, *(f"--shape {s}" for s in shapes)]) for l in named for b, shapes in l.quotes.items()]
    raise UserError(f"nothing named {what!r} to list")


def main(argv: list[str] | None = None) -> int:
    """``python -c 'import sys, tkcourse.course as c; sys.exit(c.main())' WHAT [STEP | LESSON...]``, one a line:

    ``graders STEP`` the parts whose graders the step runs; ``benchmarks [STEP]`` benchmark names;
    ``notebooks STEP`` a ``pytest -k`` expression for those notebooks; ``tests STEP`` test files;
    ``sweeps`` ``TARGET SHAPES`` per sweep; ``quotes [LESSON...]`` ``BENCHMARK [--shape S ...]`` per
    benchmark the lessons' prose quotes (default: every lesson that quotes one); ``records STEP``
    ``BENCHMARK [--shape S ...]`` per benchmark the step records (``Lesson.records``).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print(main.__doc__, file=sys.stderr)
        return 2
    what, rest = args[0], args[1:]
    try:
        if what in ("graders", "notebooks", "tests", "records") and (len(rest) != 1 or rest[0] not in GPU_PASSES):
            raise UserError(f"{what} needs one step of {', '.join(GPU_PASSES)}")
        step = rest[0] if what != "quotes" and rest else None
        if step is not None and step not in GPU_PASSES:
            raise UserError(f"no step named {step!r}; steps: {', '.join(GPU_PASSES)}")
        print("\n".join(gpu_pass(what, step, rest if what == "quotes" else ())))
    except UserError as e:
        print(f"tkcourse.course: error: {e}", file=sys.stderr)
        return 2
    return 0
