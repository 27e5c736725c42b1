"""Outputs never enter git: lessons are stored without them, and a learner's run dirties nothing.

``make lab`` opens JupyterLab on the learner's own copies of the lessons, in the git-ignored
``my-notebooks/``; ``notebooks/`` keeps the lessons as the course stores them. These tests read what
git stores (the index, what a commit takes), never a working copy, and check in a temporary repository
that a learner's run notebook leaves ``git status`` clean and is never overwritten.
"""

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
STRIP = [sys.executable, "-m", "nbstripout", "--keep-id"]  # what `make strip` runs


def _git(*args, cwd=ROOT, check=True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=check)


def _in_git(root: pathlib.Path) -> bool:
    return shutil.which("git") is not None and _git("rev-parse", "--git-dir", cwd=root, check=False).returncode == 0


def _course_notebooks(root: pathlib.Path = ROOT) -> list[str]:
    """The course's notebooks (tracked ones; a learner's own notebook in notebooks/ is theirs)."""
    if _in_git(root):
        return _git("ls-files", "notebooks/*.ipynb", cwd=root).stdout.split()
    return sorted(p.relative_to(root).as_posix() for p in (root / "notebooks").glob("*.ipynb"))


def _stored(rel: str, root: pathlib.Path = ROOT) -> str:
    """The notebook as git stores it (the index); the file itself outside a git checkout."""
    if _in_git(root):
        return _git("show", f":{rel}", cwd=root).stdout
    return (root / rel).read_text()


def _outputs(text: str) -> list[int]:
    """Indices of the code cells that carry outputs or an execution count."""
    cells = json.loads(text)["cells"]
    return [i for i, c in enumerate(cells) if c["cell_type"] == "code" and (c.get("outputs") or c.get("execution_count"))]


@pytest.mark.parametrize("rel", _course_notebooks(), ids=lambda r: pathlib.Path(r).name)
def test_notebooks_are_stored_without_outputs(rel):
    stored = _stored(rel)
    assert not _outputs(stored), \
        f"{rel} as git stores it has outputs in cells {_outputs(stored)}: run the lessons in my-notebooks/ " \
        "(`make lab`); `make strip` takes them out of notebooks/, then `git add` it again"


@pytest.mark.parametrize("rel", _course_notebooks(), ids=lambda r: pathlib.Path(r).name)
def test_every_cell_has_its_own_id(rel):
    """nbformat 4.5 gives each cell an id (Jupyter's links and nbformat's validation need it): a cell added by a
    script without one makes every run warn, and a copied one makes two cells one."""
    cells = json.loads(_stored(rel))["cells"]
    missing = [i for i, c in enumerate(cells) if not c.get("id")]
    ids = [c.get("id") for c in cells if c.get("id")]
    assert not missing, f"{rel}: cells {missing} have no id (`make strip` keeps ids; give each a short unique one)"
    assert len(set(ids)) == len(ids), f"{rel}: cell ids repeat: {sorted({i for i in ids if ids.count(i) > 1})}"


def test_stored_notebooks_are_what_make_strip_writes(tmp_path):
    """`make strip` (nbstripout) leaves a stored lesson byte for byte as it is: after running a lesson in
    notebooks/ itself, stripping it shows only what really changed."""
    copies = []
    for rel in _course_notebooks():
        copies.append(tmp_path / pathlib.Path(rel).name)
        copies[-1].write_text(_stored(rel))
    done = subprocess.run(STRIP + ["--verify", *map(str, copies)], capture_output=True, text=True)
    assert done.returncode == 0, f"`make strip` would rewrite these stored lessons: run it, then `git add` " \
        f"them:\n{done.stdout}{done.stderr}"


@pytest.mark.skipif(shutil.which("git") is None or shutil.which("make") is None, reason="needs git and make")
def test_a_learners_run_notebook_leaves_git_clean(tmp_path):
    """In a fresh clone-like repository: `make lessons` (what `make lab` runs first) copies the lessons
    into the git-ignored my-notebooks/; outputs written there (as JupyterLab saves them) leave `git
    status` clean and the stored lessons untouched; running it again never overwrites the learner's
    copy, and says when the course's lesson is newer than it."""
    rel = "notebooks/01_vector_add.ipynb"
    repo = tmp_path / "course"
    (repo / "notebooks").mkdir(parents=True)
    shutil.copy(ROOT / ".gitignore", repo / ".gitignore")
    shutil.copy(ROOT / rel, repo / rel)
    _git("init", "-q", cwd=repo)
    _git("add", ".", cwd=repo)
    _git("-c", "user.name=learner", "-c", "user.email=learner@example.com", "-c", "commit.gpgsign=false",
         "commit", "-q", "-m", "the course", cwd=repo)

    def make_lessons() -> str:
        done = subprocess.run(["make", "-s", "-f", str(ROOT / "Makefile"), "lessons"], cwd=repo,
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    assert "copied notebooks/01_vector_add.ipynb to my-notebooks/01_vector_add.ipynb" in make_lessons()
    mine = repo / "my-notebooks" / "01_vector_add.ipynb"
    assert mine.read_text() == (repo / rel).read_text()

    nb = json.loads(mine.read_text())  # run it, as far as git can tell: counts, prints, figures, widget state
    for n, cell in enumerate((c for c in nb["cells"] if c["cell_type"] == "code"), 1):
        cell["execution_count"] = n
        cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": [f"cell {n} ran\n"]},
                           {"output_type": "display_data", "metadata": {},
                            "data": {"image/png": "iVBORw0KGgo=", "text/plain": ["<Figure>"]}}]
    nb["metadata"]["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}, "version_major": 2}}
    nb["metadata"]["language_info"]["version"] = "3.11.7"
    ran = json.dumps(nb, indent=1, ensure_ascii=False) + "\n"
    mine.write_text(ran)
    (mine.parent / ".ipynb_checkpoints").mkdir()
    (mine.parent / ".ipynb_checkpoints" / "01_vector_add-checkpoint.ipynb").write_text(ran)

    assert _git("status", "--porcelain", "--untracked-files=all", cwd=repo).stdout == ""
    assert not _outputs(_stored(rel, repo)) and not _outputs((repo / rel).read_text())

    assert "copied" not in make_lessons() and mine.read_text() == ran, "make lab overwrote the learner's copy"
    later = mine.stat().st_mtime + 10  # the course's lesson changes after the learner last saved (a git pull)
    os.utime(repo / rel, (later, later))
    said = make_lessons()
    assert "notebooks/01_vector_add.ipynb changed after your copy my-notebooks/01_vector_add.ipynb" in said, said
    assert "yours is kept" in said and mine.read_text() == ran
