"""The layers README draws, held by tests: import-linter's contracts (pyproject.toml) and the lesson order.

import-linter checks the package layers and the forbidden arrows (tkcourse -> solutions, exercises ->
solutions, ...). What it cannot say is the course's order: a step module such as
``solutions/online_softmax_split.py`` belongs to lesson 05 and may import lesson 05's file or an
earlier lesson's, never a later one's (a learner's unfinished 07 must not run under their 06).
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tkcourse import course

ROOT = Path(__file__).resolve().parents[1]
ORDER = [lesson.name for lesson in course.LESSONS]


lesson_of = course.lesson_of  # online_softmax_split -> online_softmax; rmsnorm -> decode_attention


def imported(path: Path, package: str) -> set[str]:
    """Modules of ``package`` that ``path`` imports (``from package.x import``, ``import package.x``,
    ``from . import x`` and ``from .x import`` inside the package)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[1] for a in node.names if a.name.startswith(package + ".")}
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module and node.module.startswith(package + "."):
                out.add(node.module.split(".")[1])
            elif node.level == 0 and node.module == package or node.level == 1 and not node.module:
                out |= {a.name for a in node.names}
            elif node.level == 1 and node.module:
                out.add(node.module.split(".")[0])
    return out


def closure(package: str, start: str) -> set[str]:
    """Every module of ``package`` that importing ``package.start`` runs (``start`` included)."""
    seen, todo = set(), [start]
    while todo:
        m = todo.pop()
        path = ROOT / package / f"{m}.py"
        if m in seen or not path.is_file():
            continue
        seen.add(m)
        todo += sorted(imported(path, package))
    return seen


def test_lesson_order():
    """A lesson's module, and everything it imports, belongs to that lesson or an earlier one.

    Step modules count by name (``online_softmax_split`` is lesson 05's). A module that joins two
    lessons (``flash_attention_autograd``: 06's forward with 07's backward) may import the later one,
    as long as no earlier lesson's module imports it.
    """
    for package in ("solutions", "exercises"):
        for path in sorted((ROOT / package).glob("*.py")):
            if path.stem not in ORDER:
                continue
            mine = ORDER.index(path.stem)
            for other in sorted(closure(package, path.stem)):
                theirs = lesson_of(other)
                assert theirs is None or ORDER.index(theirs) <= mine, (
                    f"importing {package}.{path.stem} (lesson {course.notebook(path.stem)}) runs "
                    f"{package}.{other} (lesson {course.notebook(theirs)}): a lesson may use only earlier lessons")


def test_lesson_order_sees_a_later_import(tmp_path):
    p = tmp_path / "flash_attention_tuned.py"
    p.write_text("from solutions.flash_attention_backward import x\nfrom . import softmax\n")
    assert imported(p, "solutions") == {"flash_attention_backward", "softmax"}
    assert lesson_of("flash_attention_tuned") == "flash_attention"
    assert lesson_of("flash_attention_backward") == "flash_attention_backward"
    assert lesson_of("_checks") is None
    (tmp_path / "softmax.py").write_text("from . import _checks\n")
    assert imported(tmp_path / "softmax.py", "solutions") == {"_checks"}


def test_every_registered_module_exists():
    """The registries in tkcourse.course name modules of benchmarks/ that are there: tkcourse finds
    kernels by name (``tkcourse bench``, ``python -m tkcourse.autotune``), never by importing them."""
    registered = {**course.BENCHMARKS, **getattr(course, "SWEEP_TARGETS", {})}
    for name, module in registered.items():
        assert module.startswith("benchmarks."), (name, module)
        assert (ROOT / (module.replace(".", "/") + ".py")).is_file(), (name, module)


def test_import_linter_contracts_hold():
    """``lint-imports`` (also a line of ``make test``): every contract in pyproject.toml is kept."""
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    if exe is None:
        pytest.skip("import-linter is not installed (it is in the dev extra: pip install -e '.[dev]')")
    proc = subprocess.run([exe, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_the_wheel_holds_tkcourse_alone():
    """No generic top-level ``solutions``/``exercises``/``benchmarks`` in site-packages (README,
    "Installing"): the packages setuptools finds with pyproject.toml's settings are tkcourse's."""
    import tomllib

    from setuptools import find_packages

    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    found = find_packages(str(ROOT), include=find["include"], exclude=find.get("exclude", ()))
    assert found and all(p == "tkcourse" or p.startswith("tkcourse.") for p in found), found
    assert "tkcourse.traffic" in found and "tkcourse.check" in found


def test_lesson_code_is_found_in_the_checkout():
    """An editable install maps tkcourse alone; importing it puts its checkout on sys.path."""
    assert course.CHECKOUT == ROOT
    assert str(ROOT) in sys.path
    code = "import tkcourse, solutions.vector_add, benchmarks; print(solutions.vector_add.__file__)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT / "notebooks", capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == str(ROOT / "solutions" / "vector_add.py"), out.stderr


def private_uses(path: Path) -> list[str]:
    """``module._name`` and ``from solutions.x import _name`` in ``path``, for modules of ``solutions``."""
    tree = ast.parse(path.read_text(), str(path))
    aliases, found = {}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("solutions."):
                    aliases[a.asname or a.name] = a.name
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "solutions":
            for a in node.names:
                if a.name.startswith("_"):
                    found.append(f"from {node.module} import {a.name}")
                elif node.module == "solutions":
                    aliases[a.asname or a.name] = f"solutions.{a.name}"
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                and isinstance(node.value, ast.Name) and node.value.id in aliases):
            found.append(f"{aliases[node.value.id]}.{node.attr}")
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and node.attr.startswith("_")
              and ast.unparse(node.value).startswith("solutions.")):
            found.append(f"{ast.unparse(node.value)}.{node.attr}")
    return found


def test_research_uses_public_names_only():
    """The probes in research/ compose the solutions' public building blocks; a private name there
    would break silently when a solution changes its internals."""
    probes = sorted((ROOT / "research").rglob("*.py"))
    assert probes
    used = {str(p.relative_to(ROOT)): private_uses(p) for p in probes}
    assert {p: u for p, u in used.items() if u} == {}


def test_private_uses_are_seen(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("import solutions.softmax as S\nfrom solutions.matmul import _check_config\n"
                     "import solutions.flash_attention_tuned\nS._num_warps(1)\n"
                     "solutions.flash_attention_tuned._descriptors\nS.softmax\n")
    assert sorted(private_uses(probe)) == ["from solutions.matmul import _check_config",
                                           "solutions.flash_attention_tuned._descriptors", "solutions.softmax._num_warps"]
