"""Exercises are generated from solutions; the generator never loses a learner's work."""

import os

import pytest

from tkcourse import stubs

SOLUTION = '''def f(x):
    y = 1
    ### BEGIN SOLUTION
    y = x + 1
    ### STUB
    # add one to x
    #! y = None
    ### END SOLUTION
    return y


def g():
    ### BEGIN SOLUTION
    return 2
    ### END SOLUTION
'''


def test_stub_text_replaces_regions():
    text = stubs.stub_text(SOLUTION, "demo")
    assert "x + 1" not in text and "return 2" not in text
    assert "    # add one to x\n    y = None\n" in text
    assert "def g():\n    # TODO: your code here\n    pass\n" in text
    compile(text, "demo.py", "exec")


@pytest.mark.parametrize("bad, why", [
    ("### BEGIN SOLUTION\nx = 1\n", "never closed"),
    ("### END SOLUTION\n", "outside"),
    ("### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION\n", "inside another"),
    ("### BEGIN SOLUTION\nx = 1\n### STUB\nx = 2\n### END SOLUTION\n", "must be a comment"),
])
def test_malformed_markers_are_reported(bad, why):
    with pytest.raises(stubs.MarkerError, match=why):
        stubs.stub_text(bad, "demo")


def test_every_exercise_is_generated_from_its_solution():
    """Strict in CI (a clean clone); on a learner's machine an edited exercise is theirs."""
    lessons = stubs.lessons()
    assert "vector_add" in lessons
    man = stubs.manifest()
    for name in lessons:
        expected = stubs.expected(name)
        assert man.get(name) == stubs.digest(expected), f"exercises/MANIFEST.json is behind solutions/{name}.py: run `make exercises`"
        st = stubs.status(name)
        if st.state == "edited" and not os.environ.get("CI"):
            continue  # the learner's work
        assert st.path.read_text() == expected, f"exercises/{name}.py differs from what solutions/{name}.py generates: run `make exercises`"
        compile(expected, f"exercises/{name}.py", "exec")
        assert "### BEGIN SOLUTION" not in expected


def test_generator_never_overwrites_edits(tmp_path, monkeypatch):
    sol, ex = tmp_path / "solutions", tmp_path / "exercises"
    sol.mkdir()
    (sol / "demo.py").write_text(SOLUTION)
    monkeypatch.setattr(stubs, "SOLUTIONS", sol)
    monkeypatch.setattr(stubs, "EXERCISES", ex)
    monkeypatch.setattr(stubs, "MANIFEST", ex / "MANIFEST.json")
    log = []
    assert stubs.generate(log=log.append) == {"demo": "written"}
    assert stubs.status("demo").state == "untouched"
    (ex / "demo.py").write_text((ex / "demo.py").read_text().replace("y = None", "y = x + 1  # mine"))
    assert stubs.status("demo").state == "edited"
    # the solution changes: the learner's file is still kept
    (sol / "demo.py").write_text(SOLUTION.replace("return 2", "return 3"))
    assert stubs.generate(log=log.append) == {"demo": "kept (you edited it)"}
    assert "# mine" in (ex / "demo.py").read_text()
    # --force rewrites, but keeps a backup of the learner's work first
    result = stubs.generate(force=True, log=log.append)
    assert result["demo"].startswith("rewritten")
    backups = list(ex.glob("demo.py.bak-*"))
    assert len(backups) == 1 and "# mine" in backups[0].read_text()
    assert "# mine" not in (ex / "demo.py").read_text()


def test_untouched_file_from_an_older_solution_is_refreshed(tmp_path, monkeypatch):
    sol, ex = tmp_path / "solutions", tmp_path / "exercises"
    sol.mkdir()
    (sol / "demo.py").write_text(SOLUTION)
    for attr, val in (("SOLUTIONS", sol), ("EXERCISES", ex), ("MANIFEST", ex / "MANIFEST.json")):
        monkeypatch.setattr(stubs, attr, val)
    stubs.generate(log=lambda s: None)
    (sol / "demo.py").write_text(SOLUTION.replace("y = 1", "y = 2"))  # outside the regions
    assert stubs.status("demo").state == "untouched"  # matches the manifest's older hash
    assert stubs.generate(log=lambda s: None) == {"demo": "written"}
