"""One tested set of versions (constraints.txt), and Triton's interpreter on a current NumPy."""

import importlib.metadata as md
import pathlib
import re
import sys
import tomllib

import numpy as np
import pytest
import torch
import yaml
from packaging.requirements import Requirement

from tkcourse import mode
from tkcourse import triton_internals as ti

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name.lower())


def _pins() -> dict[str, Requirement]:
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    reqs = [Requirement(ln.split("#")[0]) for ln in lines if ln.split("#")[0].strip()]
    assert all(len(r.specifier) == 1 and next(iter(r.specifier)).operator == "==" for r in reqs), \
        "constraints.txt pins exact versions"
    return {_norm(r.name): r for r in reqs}


def _pinned(name: str) -> str:
    return next(iter(_pins()[_norm(name)].specifier)).version


def test_constraints_pin_every_dependency_within_pyproject_ranges():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = [Requirement(d) for d in project["dependencies"] + project["optional-dependencies"]["dev"]]
    pins = _pins()
    for want in ("torch", "triton", "numpy", "matplotlib", "ipywidgets", "jupyterlab", "jupyterlab_widgets",
                 "nbval", "nbclient", "pytest", "hypothesis", "jsonschema", "import_linter"):
        assert want in pins, f"constraints.txt does not pin {want}"
    for dep in deps:
        assert _norm(dep.name) in pins, f"{dep.name} is a dependency but constraints.txt does not pin it"
        assert dep.specifier.contains(_pinned(dep.name)), f"{dep.name}=={_pinned(dep.name)} is outside {dep}"
    assert {"hypothesis", "import_linter"} <= {_norm(d.name) for d in deps}
    assert "jsonschema" in {_norm(Requirement(d).name) for d in project["dependencies"]}


def test_environment_yml_installs_the_constraints():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    assert "-c constraints.txt" in pip, "environment.yml must install with constraints.txt"
    for line in pip:  # anything it names with a version must be the pinned one
        if not line.startswith("-"):
            r = Requirement(line)
            assert not r.specifier or r.specifier == _pins()[_norm(r.name)].specifier, line
    python = next(d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python="))
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    from packaging.specifiers import SpecifierSet

    assert SpecifierSet(requires).contains(python.split("=", 1)[1] + ".0")


def test_make_and_ci_install_the_constraints():
    make = (ROOT / "Makefile").read_text()
    stamp_rule = re.search(r"^\$\(STAMP\):(.*)$", make, re.M).group(1)
    assert "constraints.txt" in stamp_rule.split(), "a change to constraints.txt must re-install"
    assert "-c constraints.txt" in make
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^make test\s*$", ci, re.M), ".ci/run runs `make test`, the one entry point"
    assert "constraints.txt" in ci and not re.search(r"torch==\d", ci), ".ci/run takes torch's version from the pins"


def test_torch_and_triton_pins_are_consistent():
    """PyPI's Linux torch wheels pin one triton: the pinned triton must be the one torch asks for."""
    triton = _pins()["triton"]
    assert triton.marker is not None and triton.marker.evaluate({"platform_system": "Linux"}) \
        and not triton.marker.evaluate({"platform_system": "Darwin"}), "triton publishes Linux wheels only"
    for req in md.requires("torch") or []:  # the CUDA build names its triton; the CPU build names none
        r = Requirement(req)
        if _norm(r.name) == "triton" and (r.marker is None or r.marker.evaluate({"extra": ""})):
            assert r.specifier.contains(_pinned("triton")), f"torch asks for {r}, constraints pin {triton}"


def test_the_installed_set_is_the_pinned_one_in_ci():
    """Under CI (``.ci/run`` sets up .venv from constraints.txt) the versions are exactly the pins."""
    if pathlib.Path(sys.prefix).resolve() != (ROOT / ".venv").resolve() \
            or not (ROOT / ".venv" / ".tkcourse-installed").exists():
        pytest.skip("not the environment `make` installs")
    stamp, pins = (ROOT / ".venv" / ".tkcourse-installed").stat().st_mtime, _pins()
    if stamp < (ROOT / "constraints.txt").stat().st_mtime:
        pytest.skip("constraints.txt changed since .venv was installed: `make setup` re-installs")
    for name, req in pins.items():
        if req.marker is None or req.marker.evaluate():
            v = md.version(name).split("+")[0]
            assert req.specifier.contains(v), f"{name} {v} installed, {req} pinned"


# ---- Triton's interpreter on NumPy >= 2.4 (triton 3.6 calls int() on 1-element arrays) ----------

def _buggy_patch_lang_tensor(original):
    """triton 3.6's ``tl.tensor.__index__`` (``int(self.handle.data)``), to test the patch on any triton."""
    def patch(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data))
    return patch


def _run_loop_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def loop_sum(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        acc = tl.zeros((BLOCK,), dtype=tl.float32)
        for k in range(0, tl.cdiv(n, BLOCK)):  # a tensor used as a Python int: __index__
            offs = k * BLOCK + tl.arange(0, BLOCK)
            acc += tl.load(x_ptr + offs, mask=offs < n, other=0.0)
        tl.store(out_ptr, tl.sum(acc, axis=0))

    x = torch.arange(100, dtype=torch.float32)
    out = torch.zeros(1)
    loop_sum[(1,)](x, out, 100, BLOCK=16)
    return out.item(), x.sum().item()


numpy_refuses = pytest.mark.skipif(np.lib.NumpyVersion(np.__version__) < "2.4.0",
                                   reason="NumPy < 2.4 still converts 1-element arrays to scalars")
interpreter_only = pytest.mark.skipif(not mode.INTERPRET, reason="kernels run in the interpreter only on the CPU")


@interpreter_only
def test_the_patch_is_on_where_triton_needs_it():
    import triton.runtime.interpreter as interp

    patched = getattr(interp._patch_lang_tensor, "_tkcourse_patched", False)
    assert patched == (ti.triton_version() < ti.INTERPRETER_FIXED_IN)
    got, want = _run_loop_kernel()
    assert got == want


@interpreter_only
@numpy_refuses
def test_the_patch_fixes_the_interpreter_on_numpy_24(monkeypatch):
    """Without the patch triton 3.6's conversion fails on this NumPy; with it the kernel is right."""
    import triton.runtime.interpreter as interp

    original = getattr(interp._patch_lang_tensor, "__wrapped__", interp._patch_lang_tensor)
    monkeypatch.setattr(interp, "_patch_lang_tensor", _buggy_patch_lang_tensor(original))
    with pytest.raises(Exception, match="0-dimensional"):
        _run_loop_kernel()
    assert ti.patch_interpreter(force=True)
    assert ti.patch_interpreter(force=True)  # idempotent: wraps once
    assert getattr(interp._patch_lang_tensor.__wrapped__, "_tkcourse_patched", False) is False
    got, want = _run_loop_kernel()
    assert got == want


def test_the_tracer_applies_the_patch(monkeypatch):
    """On a GPU the tracer switches to the interpreter: it must get the patched one."""
    import triton.runtime.interpreter as interp

    calls = []
    monkeypatch.setattr(ti, "patch_interpreter", lambda force=False: calls.append(force) or True)
    assert ti.interpreter() is interp and calls == [False]
