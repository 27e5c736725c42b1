"""Exercises are generated from solutions; the generator never loses a learner's work."""

import os
import re

import pytest

from tkcourse import stubs
from tkcourse.errors import UserError

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


def test_regions_pair_each_solution_with_its_stub():
    """Regions with a stub, as stub_text reads the markers; a region without one (g's) is left out."""
    assert stubs.regions(SOLUTION) == [(3, "    y = x + 1\n", "    # add one to x\n    #! y = None\n")]


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


# ----- issue 19: regenerating never loses an edit, and a damaged manifest says how to recover -------


def _demo(tmp_path, monkeypatch):
    sol, ex = tmp_path / "solutions", tmp_path / "exercises"
    sol.mkdir()
    (sol / "demo.py").write_text(SOLUTION)
    for attr, val in (("SOLUTIONS", sol), ("EXERCISES", ex), ("MANIFEST", ex / "MANIFEST.json")):
        monkeypatch.setattr(stubs, attr, val)
    stubs.generate(log=lambda s: None)
    return sol, ex


def test_two_forced_regenerations_in_one_second_keep_both_edits(tmp_path, monkeypatch):
    _, ex = _demo(tmp_path, monkeypatch)
    monkeypatch.setattr(stubs.time, "strftime", lambda fmt: "20260101-120000")  # one second for both runs
    for edit in ("# first edit", "# second edit"):
        (ex / "demo.py").write_text((ex / "demo.py").read_text() + edit + "\n")
        assert stubs.generate(force=True, log=lambda s: None)["demo"].startswith("rewritten")
    backups = sorted(ex.glob("demo.py.bak-*"))
    assert [p.name for p in backups] == ["demo.py.bak-20260101-120000", "demo.py.bak-20260101-120000-1"]
    assert "# first edit" in backups[0].read_text() and "# second edit" in backups[1].read_text()


def test_an_edited_init_is_kept_and_backed_up_before_a_rewrite(tmp_path, monkeypatch):
    _, ex = _demo(tmp_path, monkeypatch)
    init = ex / "__init__.py"
    assert init.read_text() == stubs.INIT_TEXT
    init.write_text(stubs.INIT_TEXT + "MINE = 1\n")
    log = []
    stubs.generate(log=log.append)
    assert "MINE = 1" in init.read_text() and any("__init__.py: kept" in line for line in log)
    stubs.generate(force=True, log=log.append)
    assert init.read_text() == stubs.INIT_TEXT
    (backup,) = ex.glob("__init__.py.bak-*")
    assert "MINE = 1" in backup.read_text()


def test_helpers_are_copied_and_imported_from_the_exercise_package(tmp_path, monkeypatch):
    sol, ex = _demo(tmp_path, monkeypatch)
    (sol / "_help.py").write_text("def one():\n    return 1\n")
    (sol / "demo.py").write_text("from ._help import one\n" + SOLUTION)
    stubs.generate(log=lambda s: None)
    assert (ex / "_help.py").read_text().endswith("def one():\n    return 1\n")
    assert (ex / "demo.py").read_text().count("from exercises._help import one\n") == 1
    assert stubs.helpers() == ["_help"] and stubs.lessons() == ["demo"]
    assert stubs.status("_help").state == "untouched"


def test_the_real_exercises_never_import_solutions():
    for path in stubs.EXERCISES.glob("*.py"):
        assert "solutions" not in "".join(line for line in path.read_text().splitlines(True)
                                          if line.lstrip().startswith(("import ", "from "))), path


@pytest.mark.parametrize("content, words", [
    ("[]", "holds list"),
    ("null", "holds null"),
    ('"demo"', "holds str"),
    ('{"demo": 3}', "the entry for 'demo' is not a sha256 hash"),
    ("{ not json", "is not valid JSON"),
])
def test_a_damaged_manifest_says_how_to_recover(tmp_path, monkeypatch, content, words):
    _, ex = _demo(tmp_path, monkeypatch)
    (ex / "MANIFEST.json").write_text(content)
    with pytest.raises(UserError) as e:
        stubs.generate(log=lambda s: None)
    assert words in str(e.value) and "git checkout" in str(e.value) and "delete it" in str(e.value)
    (ex / "MANIFEST.json").unlink()  # the way out the message gives: nothing of the learner's is lost
    (ex / "demo.py").write_text((ex / "demo.py").read_text() + "# mine\n")
    assert stubs.generate(log=lambda s: None) == {"demo": "kept (you edited it)"}


def test_an_unknown_lesson_lists_the_lessons(tmp_path, monkeypatch):
    _, ex = _demo(tmp_path, monkeypatch)
    with pytest.raises(UserError, match="no lesson named 'nosuch'; lessons: demo"):
        stubs.generate(["nosuch"], log=lambda s: None)
    with pytest.raises(UserError, match="lessons: .*vector_add"):
        monkeypatch.undo()
        stubs.generate(["nosuch"], log=lambda s: None)


def test_answer_text_keeps_the_solution_and_drops_markers_and_stubs():
    """What a finished exercise reads like: the solution's code, no markers, no stub comments."""
    from tkcourse import stubs

    src = ("def f(x):\n    ### BEGIN SOLUTION\n    y = x + 1\n    ### STUB\n    # add one\n    #! y = None\n"
           "    ### END SOLUTION\n    return y\n")
    assert stubs.answer_text(src) == "def f(x):\n    y = x + 1\n    return y\n"
    real = (stubs.SOLUTIONS / "vector_add.py").read_text()
    answer = stubs.answer_text(real)
    assert "### " not in answer and "# TODO" not in answer and len(answer) < len(real)


# ---------------------------------------------------------------------------------------------------------
# a stub says what to write, not the reference's lines
# ---------------------------------------------------------------------------------------------------------

#: The most of a region's code (in characters, spaces, ``tl.`` and ``self.`` left out) that its stub may spell out.
MOST_SPELLED = 0.25
#: Regions allowed more, and why. Lesson 01's kernel is the course's first: its stub walks through the three lines
#: the welcome lesson has already shown. Lesson 05's stub gives the scaffolding, two 0-d fp32 scalars (an API no
#: lesson has shown) and the pipelined loop's header; the online update, the idea, is left in words.
SPELLED_OUT = {("vector_add", "add_kernel"): 0.4, ("online_softmax", "online_stats"): 0.35}


def _plain(code: str) -> str:
    return re.sub(r"\s+", "", re.sub(r"\b(tl|self)\.", "", code))


def spelled_out(source: str, hints: list[str] = ()) -> dict[str, float]:
    """For each BEGIN SOLUTION region with a stub (named by the function it lies in): the share of its code
    that the stub's comments, and the exercise's ``hints`` if given, hold word for word (an assignment counted
    by its right-hand side, a line of at least 8 characters)."""
    lines = source.splitlines()
    shares = {}
    for start, solution, stub_lines in stubs.regions(source):
        name = next((m[1] for line in reversed(lines[:start]) if (m := re.match(r"\s*def (\w+)\(", line))),
                    "<module>")
        stub = _plain(" ".join([line.strip().lstrip("#!") for line in stub_lines.splitlines()] + list(hints)))
        total = found = 0
        for line in solution.splitlines():
            code = _plain(line.split("  #", 1)[0])
            if not code or code.startswith("#"):
                continue
            assigned = re.match(r"^[\w,\[\]\.]+[+*/-]?=(?!=)(.*)$", code)  # a target has no call in it
            piece = assigned.group(1) if assigned else code
            total += len(piece)
            found += len(piece) if len(piece) >= 8 and piece in stub else 0
        if total:
            shares[name] = found / total
    return shares


def test_no_stub_spells_out_its_solution():
    """An exercise stub says what each step computes and which helper it takes; a stub that is the reference's
    lines with ``tl.`` left off leaves the learner nothing to write."""
    over = []
    for name in stubs.lessons():
        for fn, share in spelled_out((stubs.SOLUTIONS / f"{name}.py").read_text()).items():
            if share > SPELLED_OUT.get((name, fn), MOST_SPELLED):
                over.append(f"  solutions/{name}.py, {fn}: the stub spells out {share:.0%} of the code")
    assert not over, "stubs that give the reference's lines:\n" + "\n".join(over)


def test_no_stub_and_its_hints_spell_out_its_solution():
    """The hints go from a nudge to nearly the answer in words: all of them beside the stub still leave the
    learner the code to write."""
    from tkcourse import reveal

    over = []
    for name in stubs.lessons():
        source = (stubs.SOLUTIONS / f"{name}.py").read_text()
        for fn, share in spelled_out(source, reveal.all_hints().get(name, [])).items():
            if share > SPELLED_OUT.get((name, fn), MOST_SPELLED):
                over.append(f"  {name}, {fn}: the stub and the hints spell out {share:.0%} of the code")
    assert not over, "hints that give the reference's lines:\n" + "\n".join(over)


def test_a_spelled_out_stub_is_measured():
    source = ("def f(x, n):\n    ### BEGIN SOLUTION\n    offs = tl.arange(0, BLOCK) + start\n    y = x * 2\n"
              "    ### STUB\n    # offs = arange(0, BLOCK) + start\n    #! y = None\n    ### END SOLUTION\n"
              "def g(x):\n    ### BEGIN SOLUTION\n    return tl.sum(x, axis=0) / n\n    ### STUB\n"
              "    # the mean of x\n    ### END SOLUTION\n")
    shares = spelled_out(source)
    assert shares["f"] == pytest.approx(len("arange(0,BLOCK)+start") / len("arange(0,BLOCK)+startx*2"))
    assert shares["g"] == 0
    assert spelled_out(source, ["the mean: return tl.sum(x, axis=0) / n"])["g"] == 1
