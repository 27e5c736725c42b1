"""``tkcourse doctor``: what a learner needs to see when something is off."""

from __future__ import annotations

import importlib.metadata as md
import platform
import re
import shutil
import subprocess
import sys

from . import mode


def _version(dist: str) -> str:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return "not installed"


def _older(version: str, than: tuple[int, int]) -> bool:
    try:
        return tuple(int(p) for p in version.split(".")[:2]) < than
    except ValueError:
        return False


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


def report() -> list[tuple[str, str, bool]]:
    """(what, value, ok) rows."""
    rows = [("python", platform.python_version(), sys.version_info >= (3, 10))]
    for dist in ("torch", "triton", "numpy", "matplotlib", "ipywidgets", "jupyterlab", "jupyterlab_widgets"):
        v = _version(dist)
        rows.append((dist, v, v != "not installed"))
    info = mode.describe()
    tv, nv = _version("triton"), _version("numpy")
    if mode.INTERPRET and _older(tv, (3, 9)) and not _older(nv, (2, 4)):
        rows.append(("interpreter", f"triton {tv}'s interpreter fails with numpy {nv}: pip install 'numpy<2.4' "
                                    "or 'triton>=3.9'", False))
    rows.append(("mode", info["mode"] + (" (TRITON_INTERPRET set by you)" if info["interpret_set_by_user"] else ""), True))
    if mode.INTERPRET:
        rows.append(("gpu", "none: kernels run in Triton's interpreter on the CPU; timings there say nothing "
                            "about GPU speed (the notebooks show recorded H200 figures instead)", True))
    else:
        rows.append(("gpu", f"{info['gpu']}, {info['sms']} SMs, {info['memory_gib']} GiB, sm_{info['capability']}", True))
    ok, msg = widget_extension()
    rows.append(("widgets", msg, ok))
    rows.append(("jupyter", shutil.which("jupyter") or f"{sys.executable} -m jupyter", True))
    return rows


def main() -> int:
    bad = 0
    for what, value, ok in report():
        print(f"{'ok ' if ok else 'BAD'}  {what:<20} {value}")
        bad += not ok
    print("\nall good" if not bad else f"\n{bad} problem(s) above")
    return 1 if bad else 0
