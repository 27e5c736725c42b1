"""``tkcourse doctor``: what a learner needs to see when something is off.

It tests behaviour, not version numbers: a tiny kernel runs in Triton's interpreter (in a fresh
process with ``TRITON_INTERPRET=1``, so a GPU machine is checked too: the traffic tracer uses the
interpreter there) and its result is compared; JupyterLab is asked whether the widget extension
is enabled. Versions are listed, and ones outside the tested set (``constraints.txt``) get a
warning, never a failure: the course may well work there, it is only not what CI ran.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import pathlib
import platform
import re
import shutil
import subprocess
import sys
import tempfile

from . import mode

OK, WARN, BAD = "ok", "warn", "BAD"

#: Distributions whose versions the report lists (and compares with constraints.txt).
DISTS = ("torch", "triton", "numpy", "matplotlib", "ipywidgets", "jupyterlab", "jupyterlab_widgets")

CONSTRAINTS = pathlib.Path(__file__).resolve().parent.parent / "constraints.txt"

#: What the GPU pass (tools/gpu_pass.sh on the H200) runs, release prefixes; README, "Versions".
GPU_TESTED = {"torch": "2.11", "triton": "3.6"}

# The probe: a masked load/add/store over several programs, with a loop whose bound is a tensor
# (``range(tl.cdiv(...))`` turns a tensor into a Python int: the step that breaks triton 3.6's
# interpreter on NumPy >= 2.4 unless tkcourse.mode patches it). It imports tkcourse first, as a
# notebook does, so it runs what the course runs.
_PROBE = r"""
import tkcourse, torch, triton, triton.language as tl

@triton.jit
def _probe(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for _ in range(0, tl.cdiv(n, n)):
        acc += tl.load(x_ptr + offs, mask=mask, other=0.0) * 2.0
    tl.store(out_ptr + offs, acc + 1.0, mask=mask)

x = torch.arange(37, dtype=torch.float32)
out = torch.full((40,), -7.0)
_probe[(triton.cdiv(37, 16),)](x, out, 37, BLOCK=16)
want = torch.cat([x * 2 + 1, torch.full((3,), -7.0)])
bad = (out != want).nonzero().flatten().tolist()
print("PROBE-OK" if not bad else f"PROBE-WRONG at {bad[:5]}: got {out[bad[:5]].tolist()}, want {want[bad[:5]].tolist()}")
"""


# The graders' compile for a GPU (``tkcourse.check.core.compiles``), as they run it: Triton's front end for an
# H100 without the interpreter, in a fresh process. A kernel the interpreter runs but a compiler refuses (a break
# in a loop) must be refused, and a right one taken.
_COMPILE_PROBE = r"""
import triton, triton.language as tl
from tkcourse import triton_internals as ti

@triton.jit
def _ok(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)

@triton.jit
def _breaks(x_ptr, n, BLOCK: tl.constexpr):
    for i in range(n):
        if i > 2:
            break
        tl.store(x_ptr + i, 1.0)

types = {"x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
ti.front_end_compile(_ok, types, {"BLOCK": 16})
try:
    ti.front_end_compile(_breaks, types, {"BLOCK": 16})
    print("COMPILE-TOOK-BREAK")
except ti.compile_errors():
    print("COMPILE-OK")
"""


def compile_probe(timeout: float = 120.0) -> tuple[str, str]:
    """Can the graders compile a kernel for a GPU here (no GPU needed)? (status, message); a WARN where not: the
    course works, its graders then say nothing of what only a GPU's compiler refuses."""
    env = dict(os.environ, TRITON_INTERPRET="0")
    root = str(CONSTRAINTS.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    lost = ("the graders cannot compile kernels for a GPU here, so a kernel the interpreter runs and a GPU's "
            "compiler refuses (a break in a loop, say) passes the check")
    with tempfile.TemporaryDirectory() as folder:  # @triton.jit reads its kernel's source from a file
        script = pathlib.Path(folder) / "compile_probe.py"
        script.write_text(_COMPILE_PROBE)
        try:
            out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=timeout,
                                 env=env, cwd=root)
        except subprocess.TimeoutExpired:
            return WARN, f"{lost}: a compile did not finish within {timeout:.0f} s"
    if "COMPILE-OK" in out.stdout:
        return OK, ("Triton compiles kernels for an H100 here, without a GPU: the graders catch what only a GPU's "
                    "compiler refuses")
    if "COMPILE-TOOK-BREAK" in out.stdout:
        return WARN, f"{lost}: this Triton's compiler took a break in a loop"
    last = next((ln.strip() for ln in reversed((out.stdout + out.stderr).splitlines()) if ln.strip()),
                f"exit status {out.returncode}")
    return WARN, f"{lost}: {last[:300]}"


def _version(dist: str) -> str:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return "not installed"


def tested_versions(path: pathlib.Path = CONSTRAINTS) -> dict[str, str]:
    """``{dist: version}`` pinned in constraints.txt (empty when the file is not there)."""
    if not path.is_file():
        return {}
    pins = {}
    for line in path.read_text().splitlines():
        m = re.match(r"\s*([A-Za-z0-9_.-]+)\s*==\s*([^\s;#]+)", line)
        if m:
            pins[re.sub(r"[-_.]+", "_", m.group(1).lower())] = m.group(2)
    return pins


def _same_release(installed: str, pinned: str) -> bool:
    """``2.13.0+cpu`` is the CPU build of ``2.13.0``; a pin like ``3.6`` matches every 3.6.x."""
    release = installed.split("+")[0]
    return release == pinned or release.startswith(pinned + ".")


def interpreter_probe(timeout: float = 120.0) -> tuple[str, str]:
    """Run a tiny kernel in Triton's interpreter in a fresh process; (status, message)."""
    env = dict(os.environ, TRITON_INTERPRET="1")
    root = str(CONSTRAINTS.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    try:
        out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=timeout,
                             env=env, cwd=root)
    except subprocess.TimeoutExpired:
        return BAD, f"a tiny kernel did not finish in Triton's interpreter within {timeout:.0f} s"
    text = out.stdout + out.stderr
    if "PROBE-OK" in out.stdout:
        return OK, "a tiny kernel runs in Triton's interpreter and gives the right numbers"
    if "PROBE-WRONG" in out.stdout:
        return BAD, "a tiny kernel gives wrong numbers in Triton's interpreter: " + out.stdout.strip().splitlines()[-1]
    last = next((ln.strip() for ln in reversed(text.splitlines()) if ln.strip()), f"exit status {out.returncode}")
    return BAD, f"a tiny kernel fails in Triton's interpreter: {last[:300]}"


def widget_extension() -> tuple[bool, str]:
    """Is JupyterLab's ipywidgets extension installed and enabled?"""
    try:
        out = subprocess.run([sys.executable, "-m", "jupyter", "labextension", "list"],
                             capture_output=True, text=True, timeout=60)
    except Exception as e:  # pragma: no cover
        return False, f"could not run `jupyter labextension list` ({e})"
    text = re.sub(r"\x1b\[[0-9;]*m", "", out.stdout + out.stderr)  # drop terminal colors
    line = next((ln for ln in text.splitlines() if "@jupyter-widgets/jupyterlab-manager" in ln), "")
    ok = " enabled" in line and "disabled" not in line
    return ok, ("@jupyter-widgets/jupyterlab-manager enabled" if ok
                else "the ipywidgets extension is missing or disabled: `pip install jupyterlab_widgets` "
                     "(or `pip install -e .[dev]`), then restart JupyterLab"
                     + (f" (jupyter says: {line.strip()})" if line else ""))


def report(probe=None, widgets=None, compiler=None) -> list[tuple[str, str, str]]:
    """(what, value, status) rows; status is ``OK``, ``WARN`` or ``BAD``.

    ``probe``, ``widgets`` and ``compiler`` default to ``interpreter_probe``, ``widget_extension`` and
    ``compile_probe`` (asked in the interpreter only: on a GPU every kernel compiles for real).
    """
    probe, widgets, compiler = probe or interpreter_probe, widgets or widget_extension, compiler or compile_probe
    py_ok = sys.version_info >= (3, 11)
    rows = [("python", platform.python_version() + ("" if py_ok else ": the course needs Python 3.11 or newer"),
             OK if py_ok else BAD)]
    pins = tested_versions()
    if not mode.INTERPRET:  # a GPU machine is tested with the H200's set where it differs
        pins.update(GPU_TESTED)
    for dist in DISTS:
        v = _version(dist)
        pin = pins.get(dist)
        if v == "not installed":
            rows.append((dist, "not installed: `pip install -c constraints.txt -e '.[dev]'`", BAD))
        elif pin and not _same_release(v, pin):
            rows.append((dist, f"{v} (tested: {pin}; it may well work, but it is not what the course's tests ran)",
                         WARN))
        else:
            rows.append((dist, v, OK))
    info = mode.describe()
    rows.append(("mode", info["mode"] + (" (TRITON_INTERPRET set by you)" if info["interpret_set_by_user"] else ""), OK))
    rows.append(gpu_row(info))
    status, msg = probe()
    rows.append(("interpreter", msg, status))
    if mode.INTERPRET:
        status, msg = compiler()
        rows.append(("gpu compile", msg, status))
    ok, msg = widgets()
    rows.append(("widgets", msg, OK if ok else BAD))
    rows.append(("jupyter", shutil.which("jupyter") or f"{sys.executable} -m jupyter", OK))
    return rows


#: The oldest GPU Triton compiles the course's kernels for (README, "Which GPU").
MIN_CAPABILITY = (8, 0)


def gpu_row(info: dict) -> tuple[str, str, str]:
    """The report's GPU line from ``mode.describe()``: a GPU older than Triton supports warns, with the way out."""
    if mode.INTERPRET:
        return ("gpu", "none: kernels run in Triton's interpreter on the CPU; timings there say nothing about GPU "
                       "speed (the notebooks show recorded H200 figures instead)", OK)
    text = f"{info['gpu']}, {info['sms']} SMs, {info['memory_gib']} GiB, {info['arch']}"
    if tuple(int(n) for n in info["capability"].split(".")) < MIN_CAPABILITY:
        return ("gpu", f"{text}: Triton compiles for compute capability {'.'.join(map(str, MIN_CAPABILITY))} and "
                       "newer, so kernels may fail here; run the course on the CPU instead: TRITON_INTERPRET=1 make lab",
                WARN)
    return ("gpu", text, OK)


def main() -> int:
    rows = report()
    for what, value, status in rows:
        print(f"{status:<4} {what:<20} {value}")
    bad = sum(status == BAD for *_, status in rows)
    warn = sum(status == WARN for *_, status in rows)
    if bad:
        print(f"\n{bad} problem(s) above")
    else:
        print("\nall good" + (f" ({warn} warning(s) above)" if warn else ""))
    return 1 if bad else 0
