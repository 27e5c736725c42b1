"""The layers README draws, held by tests: import-linter's contracts (pyproject.toml) and the lesson order.

import-linter checks the package layers and the forbidden arrows (tkcourse -> solutions, exercises ->
solutions, ...). What it cannot say is the course's order: a lesson's module (``solutions/matmul.py``)
may import an earlier lesson's, never a later one's (a learner's unfinished 07 must not run under
their 06). The fast kernel library, ``solutions/kernels/``, sits above every lesson: its modules may
import any lesson, and no lesson imports it.
"""

from __future__ import annotations

import ast
import re
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


def closure(package: str, start: str, root: Path = ROOT) -> set[str]:
    """Every module of ``package`` that importing ``package.start`` runs (``start`` included); a
    subpackage (the kernel library) counts as one module, not followed."""
    seen, todo = set(), [start]
    while todo:
        m = todo.pop()
        path = root / package / f"{m}.py"
        if m not in seen and (root / package / m / "__init__.py").is_file():
            seen.add(m)
        if m in seen or not path.is_file():
            continue
        seen.add(m)
        todo += sorted(imported(path, package))
    return seen


#: The package of fast kernels, above every lesson (``solutions/kernels/``).
LIBRARY = "kernels"
#: Modules above the library: the capstone model (``solutions/llm.py`` and its ``llm_*`` helpers) runs its
#: kernels. No lesson may import one (its closure would reach the library, which the test below catches).
ABOVE_LIBRARY = ("llm",)


def test_lesson_order():
    """A lesson's module, and everything it imports, belongs to that lesson or an earlier one, and
    never to the kernel library above the lessons.

    A module that joins two lessons (``flash_attention_autograd``: 06's forward with 07's backward)
    may import the later one, as long as no earlier lesson's module imports it.
    """
    assert (ROOT / "solutions" / LIBRARY / "__init__.py").is_file()
    for package in ("solutions", "exercises"):
        for path in sorted((ROOT / package).glob("*.py")):
            if any(path.stem == m or path.stem.startswith(m + "_") for m in ABOVE_LIBRARY):
                continue
            if path.stem not in ORDER:
                assert LIBRARY not in closure(package, path.stem), f"{package}.{path.stem} imports the kernel library"
                continue
            mine = ORDER.index(path.stem)
            for other in sorted(closure(package, path.stem)):
                assert other != LIBRARY, (
                    f"importing {package}.{path.stem} runs {package}.{LIBRARY}: the kernel library sits above the "
                    "lessons and a lesson never imports it (move what both need into the lesson, or _checks)")
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
    (tmp_path / "matmul.py").write_text("from .kernels import matmul_small\nimport solutions.kernels.lean\n")
    assert imported(tmp_path / "matmul.py", "solutions") == {LIBRARY}  # the library, seen as one module
    pkg = tmp_path / "solutions"
    (pkg / LIBRARY).mkdir(parents=True)
    (pkg / LIBRARY / "__init__.py").write_text("")
    (pkg / "softmax.py").write_text("from . import _checks\n")
    (pkg / "_checks.py").write_text("from .kernels import lean\n")  # a lesson reaching the library indirectly
    assert closure("solutions", "softmax", tmp_path) == {"softmax", "_checks", LIBRARY}


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


#: Packages whose modules the course writes: a name with a leading underscore in one of them is that
#: module's own business, and another file that uses it breaks silently when the module changes.
COURSE_PACKAGES = ("solutions", "benchmarks", "tkcourse")


def _module_name(path: Path) -> str:
    """``solutions/kernels/attention.py`` -> ``solutions.kernels.attention`` (a package's ``__init__``: the package)."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(dotted: str) -> bool:
    """Whether ``dotted`` names a module or package of the checkout (``solutions._checks``: a module,
    imported by its file's name, not a name inside another module)."""
    base = ROOT.joinpath(*dotted.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _bindings(tree: ast.Module, module: str, is_package: bool):
    """What ``tree`` (module ``module``, dotted) imports from the course's packages: the names bound to course
    modules (alias -> dotted module) and each ``from x import name`` of a name that is not a module, as
    (line, x, name)."""
    package = module if is_package else module.rpartition(".")[0]
    aliases, names = {}, []

    def absolute(node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
        return ".".join(base + ([node.module] if node.module else []))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in COURSE_PACKAGES:
                    aliases[a.asname or a.name] = a.name
        elif isinstance(node, ast.ImportFrom):
            source_module = absolute(node)
            if source_module.split(".")[0] not in COURSE_PACKAGES:
                continue
            for a in node.names:
                dotted = f"{source_module}.{a.name}"
                if _is_module(dotted):
                    aliases[a.asname or a.name] = dotted
                else:
                    names.append((node.lineno, source_module, a.name))
    return aliases, names


def _attributes(tree: ast.Module, aliases: dict):
    """Each ``owner.attr`` of ``tree`` whose owner is a course module: (line, dotted owner, attr)."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        owner = ast.unparse(node.value)
        head, _, rest = owner.partition(".")
        target = aliases[head] + (f".{rest}" if rest else "") if head in aliases else owner
        if target.split(".")[0] in COURSE_PACKAGES and _is_module(target):
            yield node.lineno, target, node.attr


def private_uses(source: str, module: str, filename: str = "<source>") -> list[str]:
    """Where ``source`` (the text of module ``module``, dotted) uses another course module's private name:
    ``from x import _y``, ``from .x import _y``, ``alias._y`` for an alias bound to a course module, and
    ``solutions.x._y``. Module files whose name starts with an underscore (``_checks``) are modules,
    imported by name, not private names of another module."""
    tree = ast.parse(source, filename)
    aliases, names = _bindings(tree, module, filename.endswith("__init__.py"))

    def private(name):
        return name.startswith("_") and not name.startswith("__")

    found = [f"line {line}: from {src} import {name}" for line, src, name in names if private(name)]
    found += [f"line {line}: {target}.{attr}" for line, target, attr in _attributes(tree, aliases)
              if private(attr) and target != module]
    return found


def names_used(source: str, module: str, target: str, filename: str = "<source>") -> set[str]:
    """The names of course module ``target`` (dotted) that ``source`` (module ``module``) uses: imported
    from it, or read as an attribute of it."""
    tree = ast.parse(source, filename)
    aliases, names = _bindings(tree, module, filename.endswith("__init__.py"))
    return ({name for _, src, name in names if src == target}
            | {attr for _, owner, attr in _attributes(tree, aliases) if owner == target})


def _course_files() -> list[Path]:
    return sorted(p for folder in ("solutions", "research", "benchmarks", "tkcourse") for p in (ROOT / folder).rglob("*.py"))


def test_files_use_each_others_public_names_only():
    """A step, a fast path (``solutions/kernels/``), a benchmark, a probe or a module of ``tkcourse`` uses what
    another module exports (documented in its docstring), never ``module._name``: a private name there breaks
    silently when that module changes its internals."""
    files = _course_files()
    assert any("kernels" in p.parts for p in files) and any(p.parts[-3] == "research" for p in files)
    assert any(p.parts[-2] == "check" for p in files)
    used = {str(p.relative_to(ROOT)): private_uses(p.read_text(), _module_name(p), str(p)) for p in files}
    bad = {p: u for p, u in used.items() if u}
    assert not bad, ("these files use another module's private (underscore) names; export the name from its "
                     "module (no underscore, said in the module's docstring) and use that:\n"
                     + "\n".join(f"  {p}: {'; '.join(u)}" for p, u in bad.items()))


def test_private_uses_are_seen():
    """A planted violation of each kind is reported; public names, modules named with an underscore
    and a module's own private names are not."""
    probe = ("import solutions.softmax as S\nfrom solutions.matmul import _check_config\n"
             "import solutions.kernels.attention_forward\nS._num_warps(1)\n"
             "solutions.kernels.attention_forward._descriptors\nS.softmax\n"
             "from solutions import _checks\n_checks.power_of_two\n")
    assert sorted(private_uses(probe, "research.probe")) == [
        "line 2: from solutions.matmul import _check_config", "line 4: solutions.softmax._num_warps",
        "line 5: solutions.kernels.attention_forward._descriptors"]
    inside = ("from .. import flash_attention as fa\nfrom ..softmax import _num_stages\nfrom . import lean\n"
              "from .lean import tensor_key as _t\nlean._jit_of(fa)\nfa._prepare(q)\n_t(q)\n_own(1)\n")
    assert private_uses(inside, "solutions.kernels.attention", "solutions/kernels/attention.py") == [
        "line 2: from solutions.softmax import _num_stages", "line 5: solutions.kernels.lean._jit_of",
        "line 6: solutions.flash_attention._prepare"]


#: The sentence of a lesson's module docstring that lists what the fast path (``solutions/kernels/``) takes from
#: it: "Used by the fast path (...): ``a``, ``b``." or "... it uses this file's ``a`` and ``b``."
_FAST_PATH_USES = re.compile(r"(?:Used by the fast path[^:]*:|it uses this\s+file's)(.*?)\.(?:\s|$)", re.S)


def stated_fast_path_uses(docstring: str) -> set[str] | None:
    """The names a lesson's docstring says the fast path uses, or None where it says nothing of it."""
    said = _FAST_PATH_USES.search(docstring or "")
    return set(re.findall(r"``(\w+)``", said.group(1))) if said else None


def _lesson_modules() -> list[Path]:
    return sorted(p for p in (ROOT / "solutions").glob("*.py") if not p.name.startswith("_"))


def test_a_lesson_names_what_the_fast_path_takes_from_it():
    """A lesson's docstring that lists the names ``solutions/kernels/`` uses from it lists exactly those: a
    learner reads it to know what a change of the file breaks, and the next engineer what must stay."""
    kernels = sorted((ROOT / "solutions" / "kernels").glob("*.py"))
    checked, wrong = 0, []
    for path in _lesson_modules():
        stated = stated_fast_path_uses(ast.get_docstring(ast.parse(path.read_text())))
        if stated is None:
            continue
        checked += 1
        target = _module_name(path)
        used = set().union(*(names_used(k.read_text(), _module_name(k), target, str(k)) for k in kernels))
        if stated != used:
            wrong.append(f"  {path.relative_to(ROOT)}: says {sorted(stated)}, the fast path uses {sorted(used)}")
    assert checked >= 5, "the sentence's pattern no longer finds the lessons' docstrings"
    assert not wrong, "the fast path's uses as the lessons' docstrings state them, and as they are:\n" + "\n".join(wrong)


def test_the_stated_uses_are_read():
    """Both forms of the sentence give their names; a docstring without one gives None; the kernels' uses
    are seen through an aliased module and through ``from ..lesson import``."""
    assert stated_fast_path_uses("Used by the fast path (``solutions/kernels/x.py``, lean): ``a``, ``b`` and\n"
                                 "``c`` (with ``d``).\nMore: ``e``.") == {"a", "b", "c", "d"}
    assert stated_fast_path_uses("behind the same API; it uses this\nfile's ``check`` and ``LOG2E``.") == {
        "check", "LOG2E"}
    assert stated_fast_path_uses("A kernel.") is None
    source = ("from .. import decode_attention as da\nfrom ..decode_attention import reference\n"
              "from .. import softmax\nx = da.LOG2E + softmax.BLOCK\nda.check_inputs(q)\n")
    assert names_used(source, "solutions.kernels.decode_attention", "solutions.decode_attention",
                      "solutions/kernels/decode_attention.py") == {"reference", "LOG2E", "check_inputs"}
