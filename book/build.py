"""Build the course's static site: every lesson with its outputs and figures (README, "Read it online").

    python book/build.py              # run every notebook here, as a learner first does; then the site
    python book/build.py --from DIR   # the site from notebooks already run into DIR (what the tests do)

Running: each notebook in ``notebooks/`` runs in a fresh kernel from that folder, without
``TKCOURSE_SOLUTIONS``, with the exercises as this checkout has them: in a fresh clone exactly as a
learner first opens it (untouched exercises: the reference solution runs in their place, and the outputs
say so), into ``build/executed/``. Without a GPU that is
Triton's interpreter, and the lessons show the recorded H200 figures beside what ran. Sphinx with
myst-nb then renders those notebooks (it executes nothing itself) into ``build/book/``; open
``build/book/index.html``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"                      # conf.py and index.md
NOTEBOOKS = ROOT / "notebooks"
EXECUTED = ROOT / "build" / "executed"    # the notebooks with their outputs (also tests/test_learner_path.py's)
SOURCE = ROOT / "build" / "book-src"      # what Sphinx reads: index.md and the executed notebooks
OUT = ROOT / "build" / "book"             # the site
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
TIMEOUT = 900                             # seconds a cell may take (as tests/test_learner_path.py)


def lessons(folder: Path) -> list[Path]:
    return sorted(folder.glob("[0-9][0-9]_*.ipynb"))


def execute(into: Path = EXECUTED) -> list[str]:
    """Run every lesson as a learner first does; write each, with its outputs, into ``into``.

    A lesson whose cell raises is written as far as it ran; the others still run. Returns the failures.
    """
    import nbclient
    import nbformat

    env = {k: v for k, v in os.environ.items() if k not in ("TKCOURSE_SOLUTIONS", "MPLBACKEND")}
    into.mkdir(parents=True, exist_ok=True)
    failed = []
    for path in lessons(NOTEBOOKS):
        t0 = time.monotonic()
        nb = nbformat.read(path, as_version=4)
        client = nbclient.NotebookClient(nb, timeout=TIMEOUT, kernel_name="python3",
                                         resources={"metadata": {"path": str(NOTEBOOKS)}})
        try:
            client.execute(env=env)
            print(f"ran {path.name} in {time.monotonic() - t0:.0f} s", flush=True)
        except nbclient.exceptions.CellExecutionError as e:
            failed.append(f"{path.name}: {e.ename}: {e.evalue}")
            print(f"{path.name} FAILED: {e.ename}: {e.evalue}", flush=True)
        nbformat.write(nb, into / path.name)
    return failed


def _for_a_page(nb):
    """A notebook as a static page shows it: a widget needs a running kernel, so its output is left
    out (the course's widgets display a still picture of their first view beside them)."""
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.outputs if WIDGET_VIEW not in o.get("data", {})]
    nb.metadata.pop("widgets", None)  # no widget state: the page loads no widget scripts from the web
    return nb


def how_run(notebooks: list) -> str:
    """The index's sentence on how the pages were run, read from their outputs (the mode each lesson prints)
    and from the exercises of this checkout, so that it is true of every build."""
    from tkcourse import stubs

    text = " ".join(str(o.get("text", "")) + str(o.get("data", {}).get("text/plain", ""))
                    for nb in notebooks for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    where = ("on a GPU" if "compiled (GPU)" in text else
             "on a CPU, in Triton's interpreter" if "interpreter (CPU)" in text else "here")
    untouched = all(stubs.status(name).state in ("untouched", "missing") for name in stubs.lessons())
    if untouched:
        return (f"They were run {where}, with the exercises untouched: where a lesson asks you to write a kernel, "
                "the reference solution ran in its place, and every output says so.")
    return (f"They were run {where}, with the exercises of the checkout that built them: where one was still "
            "untouched, the reference solution ran in its place, and the output says so.")


def build(executed: Path = EXECUTED, out: Path = OUT, source: Path = SOURCE) -> Path:
    """Render the executed lessons in ``executed`` into the site ``out``; return its index.html."""
    import nbformat

    found = lessons(executed)
    if not found:
        raise SystemExit(f"no executed lessons in {executed}: run `make book`")
    shutil.rmtree(source, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    source.mkdir(parents=True)
    notebooks = [nbformat.read(path, as_version=4) for path in found]
    index = (BOOK / "index.md").read_text(encoding="utf-8").replace("{how_run}", how_run(notebooks))
    (source / "index.md").write_text(index, encoding="utf-8")
    for path, nb in zip(found, notebooks):
        nbformat.write(_for_a_page(nb), source / path.name)
    cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-E", "-W", "--keep-going", "-c", str(BOOK),
           "-d", str(source / ".doctrees"), str(source), str(out)]
    subprocess.run(cmd, check=True)
    return out / "index.html"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="executed", type=Path, metavar="DIR",
                        help="build from notebooks already run into DIR; run none here")
    args = parser.parse_args(argv)
    failed = execute(EXECUTED) if args.executed is None else []
    index = build(args.executed or EXECUTED)
    print(f"the course's site: {index}")
    if failed:
        raise SystemExit("these lessons raised (their pages stop at the error):\n  " + "\n  ".join(failed))


if __name__ == "__main__":
    main()
