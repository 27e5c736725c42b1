"""The lesson registry (``tkcourse.course.LESSONS``): what a lesson must provide, checked for every entry.

A new lesson is one ``Lesson`` entry plus its own files. For each entry:

1. a notebook ``notebooks/NN_<name>.ipynb`` (and no numbered notebook the registry does not list);
2. for each part (exercise name): ``solutions/<part>.py`` with at least one ``### BEGIN SOLUTION``
   region, its generated ``exercises/<part>.py`` (``tkcourse exercises``), and a grader
   ``tkcourse/check/<part>.py`` defining ``grade(module)``, and its tests ``tests/test_<part>.py``;
   graders and exercises are those parts only;
3. for each declared benchmark: ``benchmarks/<name>.py`` defining ``cases()``; a sweep target is a key of
   ``benchmarks/sweeps.py``'s ``TARGETS``, with the shapes its recorded sweeps use;
4. sizes: every ``tkcourse.size("x")`` its notebook calls is in its ``sizes``, each an
   ``(interpreter, GPU)`` pair of one type, and every size it declares is used by its notebook;
5. GPU pass: ``gpu_passes`` names steps of ``tools/gpu_pass.sh``, ``gpu_tests`` name files of
   ``tests/``, ``quotes`` name benchmarks the registry lists; the script itself names no lesson.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tkcourse import bench, check, course, stubs

ROOT = Path(__file__).resolve().parents[1]
IDS = [lesson.notebook for lesson in course.LESSONS]


def _defines(path: Path, name: str) -> bool:
    """``path`` defines a top-level function ``name`` (read, not imported: a grader or a benchmark
    module may import the lesson code)."""
    tree = ast.parse(path.read_text(), str(path))
    return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name for n in tree.body)


def _notebook_code(lesson) -> str:
    cells = json.loads((ROOT / lesson.files["notebook"][0]).read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")


@pytest.mark.parametrize("lesson", course.LESSONS, ids=IDS)
def test_a_lesson_provides_its_files(lesson):
    """Every file the entry implies is there (notebook, solutions, exercises, graders, benchmarks, tests)."""
    missing = [f for files in lesson.files.values() for f in files if not (ROOT / f).is_file()]
    assert not missing, f"lesson {lesson.notebook} is declared in tkcourse/course.py but lacks {missing}"
    assert re.fullmatch(r"\d\d", lesson.number) and re.fullmatch(r"[a-z][a-z0-9_]*", lesson.name)


@pytest.mark.parametrize("lesson", [lesson for lesson in course.LESSONS if lesson.parts],
                         ids=[lesson.notebook for lesson in course.LESSONS if lesson.parts])
def test_each_part_has_an_exercise_region_and_a_grader(lesson):
    for part in lesson.parts:
        assert "### BEGIN SOLUTION" in (ROOT / "solutions" / f"{part}.py").read_text(), part
        assert _defines(ROOT / "tkcourse" / "check" / f"{part}.py", "grade"), f"tkcourse/check/{part}.py: no grade()"
        assert course.lesson_of(part) == lesson.name and course.notebook(part) == lesson.notebook


def test_graders_exercises_and_benchmarks_are_the_registrys():
    """The commands list exactly what the registry declares, in course order."""
    parts = [p for lesson in course.LESSONS for p in lesson.parts]
    assert check.lessons() == parts
    assert course.in_order(stubs.lessons()) == parts  # every marked solution is a registered part
    graders = {p.stem for p in (ROOT / "tkcourse" / "check").glob("*.py") if _defines(p, "grade")}
    assert graders == set(parts), "a grader module the registry does not list (or the other way round)"
    assert bench.lessons() == [b for lesson in course.LESSONS for b in lesson.benchmarks]
    assert len(set(parts)) == len(parts) and len(set(bench.lessons())) == len(bench.lessons())


def test_every_numbered_notebook_is_a_lesson():
    notebooks = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert notebooks == IDS and [lesson.number for lesson in course.LESSONS] == sorted({n[:2] for n in IDS})


@pytest.mark.parametrize("lesson", [lesson for lesson in course.LESSONS if lesson.benchmarks],
                         ids=[lesson.notebook for lesson in course.LESSONS if lesson.benchmarks])
def test_a_benchmark_has_cases(lesson):
    for b in lesson.benchmarks:
        assert _defines(ROOT / "benchmarks" / f"{b}.py", "cases"), f"benchmarks/{b}.py: no cases()"
        assert course.BENCHMARKS[b] == f"benchmarks.{b}"


def test_sweep_targets_are_in_benchmarks_sweeps():
    tree = ast.parse((ROOT / "benchmarks" / "sweeps.py").read_text())
    targets = next(n.value for n in tree.body if isinstance(n, ast.Assign)
                   and any(isinstance(t, ast.Name) and t.id == "TARGETS" for t in n.targets))
    keys = {k.value for k in targets.keys}
    declared = {t: shapes for lesson in course.LESSONS for t, shapes in lesson.sweeps.items()}
    assert set(declared) == keys == set(course.SWEEP_TARGETS)
    for t, shapes in declared.items():
        assert shapes and all(re.fullmatch(r"\d+(x\d+)+", s) for s in shapes.split(",")), (t, shapes)


@pytest.mark.parametrize("lesson", course.LESSONS, ids=IDS)
def test_sizes_are_the_notebooks(lesson):
    """A notebook asks only for its own lesson's sizes, and a lesson declares only sizes its notebook uses."""
    used = set(re.findall(r"""\bsize\(\s*["']([^"']+)["']""", _notebook_code(lesson)))
    assert used == set(lesson.sizes), (f"{lesson.notebook} asks for {sorted(used)}; tkcourse/course.py "
                                       f"declares {sorted(lesson.sizes)}")
    for name, pair in lesson.sizes.items():
        assert isinstance(pair, tuple) and len(pair) == 2, f"{name}: (interpreter size, GPU size)"
        assert type(pair[0]) is type(pair[1]), f"{name}: one kind of value for both modes"
    assert not re.search(r"\bmode\.(size|register_sizes)\(", _notebook_code(lesson))


def test_size_names_are_unique():
    names = [n for lesson in course.LESSONS for n in lesson.sizes]
    assert len(names) == len(set(names)) == len(course.SIZES)


def test_the_gpu_pass_reads_the_registry():
    """Steps named in the registry are steps of the script; the script names no lesson of its own."""
    script = (ROOT / "tools" / "gpu_pass.sh").read_text()
    steps = set(re.findall(r"^([a-z0-9|]+)\)", script, re.M))
    steps = {s for group in steps for s in group.split("|")}
    assert set(course.GPU_PASSES) <= steps
    assert all(lesson.gpu_passes <= set(course.GPU_PASSES) for lesson in course.LESSONS)
    assert all(b in course.BENCHMARKS for lesson in course.LESSONS for b in lesson.quotes)
    assert all(step in course.GPU_PASSES and set(rows) <= set(lesson.benchmarks)
               for lesson in course.LESSONS for step, rows in lesson.records.items())
    names = {lesson.name for lesson in course.LESSONS} | set(course.graded()) | set(course.BENCHMARKS)
    code = "\n".join(line.split("#", 1)[0] for line in script.splitlines())  # comments may name lessons
    literal = re.findall(r"(?:tkcourse (?:check|bench)|tkcourse\.autotune)((?: +[a-z_]+)+)", code)
    assert not {w for group in literal for w in group.split()} & names, literal
    assert not re.search(r'-k "[^"$]*\d\d_', code), "notebooks picked by number in the script"


@pytest.mark.parametrize("argv, expected", [
    (["graders", "online"], lambda: [p for l in course.LESSONS if "online" in l.gpu_passes for p in l.parts]),
    (["notebooks", "verify"],
     lambda: [" or ".join(f"{l.number}_" for l in course.LESSONS if "verify" in l.gpu_passes)]),
    (["tests", "online"],
     lambda: [f"tests/test_{t}.py" for l in course.LESSONS if "online" in l.gpu_passes for t in l.gpu_tests]),
])
def test_what_the_script_asks(argv, expected, capsys):
    assert course.main(argv) == 0
    assert capsys.readouterr().out.split("\n")[:-1] == expected()
    assert course.main(["graders"]) == 2 and "online" in capsys.readouterr().err


def test_the_script_can_ask_from_a_shell():
    """As ``tools/gpu_pass.sh`` asks: a fresh interpreter, one item a line, quotes of one lesson."""
    code = "import sys, tkcourse.course as c; sys.exit(c.main())"
    out = subprocess.run([sys.executable, "-c", code, "quotes", "09"], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [" ".join([b, *(f"--shape {s}" for s in shapes)])
                                      for b, shapes in course.lesson("decode_attention").quotes.items()]


def test_a_lesson_is_read_only_data():
    lesson = course.lesson("rmsnorm")
    assert lesson.name == "decode_attention" and lesson.parts == ("rmsnorm", "decode_attention")
    with pytest.raises(AttributeError):
        lesson.name = "x"
    with pytest.raises(TypeError):
        lesson.sizes["x"] = (1, 2)
    with pytest.raises(KeyError, match="lessons: welcome"):
        course.lesson("nosuch")


def test_lesson_code_loads_through_one_function():
    """``tkcourse`` loads solutions/, exercises/ and benchmarks/ by name in one place only."""
    assert course.import_checkout("solutions.vector_add").__name__ == "solutions.vector_add"
    with pytest.raises(ValueError, match="not a module of"):
        course.import_checkout("os")
    outside = []
    for path in (ROOT / "tkcourse").rglob("*.py"):
        if path == ROOT / "tkcourse" / "course.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module":
                arg = ast.unparse(node.args[0])
                if not (arg.startswith("f'.") or "__name__" in arg):  # tkcourse's own modules, named relatively
                    outside.append(f"{path.relative_to(ROOT)}:{node.lineno}: import_module({arg})")
    assert not outside, f"load lesson code with tkcourse.course.import_checkout: {outside}"
