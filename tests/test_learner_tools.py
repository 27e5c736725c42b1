"""What a learner reveals and tracks: hints one at a time, answers to "Check yourself", the reference
after a pass, ``tkcourse progress``, and the class formats (``check --json``, Gradescope's results.json)."""

import importlib.util
import json
import re
import shutil
import sys

import jsonschema
import pytest

from tkcourse import check, cli, course, labels, progress, results, reveal, stubs
from tkcourse.check import Case, Report

ROOT = stubs.ROOT
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


@pytest.fixture(autouse=True)
def state(tmp_path, monkeypatch):
    """Each test keeps its progress and hints in a folder of its own, never in the checkout."""
    monkeypatch.setenv("TKCOURSE_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def _solution_lines(name):
    """The code lines of ``solutions/<name>.py``'s solution regions (what a hint must never give away)."""
    out, inside, stub = [], False, False
    for ln in (stubs.SOLUTIONS / f"{name}.py").read_text().splitlines():
        s = ln.strip()
        if s.startswith("### BEGIN SOLUTION"):
            inside, stub = True, False
        elif s.startswith("### STUB"):
            stub = True
        elif s.startswith("### END SOLUTION"):
            inside = False
        elif inside and not stub and s and not s.startswith("#"):
            out.append(s.split("  #")[0].strip())
    return [s for s in out if len(s) >= 20]


# ------------------------------------------------------------------------------------------
# hints
# ------------------------------------------------------------------------------------------


def test_hints_reveal_one_at_a_time_and_stop_at_the_last():
    hints = reveal.all_hints()["vector_add"]
    n = len(hints)
    for i in range(1, n + 1):
        text = check.hint("vector_add" if i % 2 else "01")  # as the notebook names it, too
        assert text.startswith(f"Hint {i} of {n}") and hints[i - 1] in text
        assert all(h not in text for h in hints[i:])  # never ahead of the learner
        assert reveal.revealed("vector_add") == i
    assert "(the last)" in text
    again = check.hint("vector_add")
    assert again.startswith("No more hints") and hints[-1] in again and reveal.revealed("vector_add") == n
    assert reveal.revealed("softmax") == 0  # each exercise counts its own
    reveal.reset_hints("vector_add")
    assert check.hint("vector_add").startswith(f"Hint 1 of {n}")


def test_hint_button_reveals_the_next_hint_per_click():
    box = check.hint_button("matmul")
    button = box.children[0]
    total = len(reveal.all_hints()["matmul"])
    assert reveal.revealed("matmul") == 0 and f"(1 of {total})" in button.description
    for i in range(1, total + 1):
        button.click()
        assert reveal.revealed("matmul") == i
    assert button.disabled and "All" in button.description


def test_every_exercise_has_hints_that_never_give_the_solution_code():
    hints = reveal.all_hints()
    assert sorted(hints) == sorted(stubs.lessons())
    for name, texts in hints.items():
        assert 2 <= len(texts) <= 4, name
        code = _solution_lines(name)
        for text in texts:
            leaked = [c for c in code if c in text]
            assert not leaked, f"a hint of {name} quotes the solution: {leaked}"


def test_a_malformed_hints_file_is_refused():
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"vector_add": ["only one hint, far too few"]}, reveal.HINTS_SCHEMA)


# ------------------------------------------------------------------------------------------
# answers to "Check yourself"
# ------------------------------------------------------------------------------------------


def _questions(nb_path):
    """The numbered questions after **Check yourself** in the notebook's recap, and the recap's cell index."""
    nb = json.loads(nb_path.read_text())
    for i, cell in enumerate(nb["cells"]):
        text = "".join(cell["source"])
        if cell["cell_type"] == "markdown" and "**Check yourself**" in text:
            after = text.split("**Check yourself**", 1)[1].split("\nNext:", 1)[0]
            return re.findall(r"^\s*(\d+)\. ", after, flags=re.M), i, nb
    return [], None, nb


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_check_yourself_question_has_an_answer(path):
    numbers, at, nb = _questions(path)
    assert numbers, f"{path.name} has no 'Check yourself' questions"
    assert numbers == [str(k) for k in range(1, len(numbers) + 1)]
    stored = reveal.all_answers().get(path.stem, [])
    assert len(stored) == len(numbers), f"{path.stem}: {len(numbers)} questions, {len(stored)} answers"
    for k in range(1, len(numbers) + 1):
        text = reveal.answer(path.stem[:2], k)
        assert "{" not in text and "}" not in text  # every figure filled in from the recorded table
    # the reveal cell follows the recap
    later = ["".join(c["source"]) for c in nb["cells"][at + 1:] if c["cell_type"] == "code"]
    assert any(f'answers("{path.stem[:2]}")' in src for src in later[:1])


def test_an_answer_that_quotes_a_gpu_figure_computes_it_from_the_table():
    stored = reveal.all_answers()["03_matmul"][4]
    assert "{mm1024_fp16_x" in stored  # not typed
    f = reveal.figures()
    assert f"{f['mm1024_fp16_x']:.2f}x" in reveal.answer("03", 5)


def test_the_skinny_matmul_answer_holds_in_the_recorded_sweeps():
    """Lesson 04's answer on M = 16: the winner there spreads B's read over more programs than the 4096³ winner,
    wastes fewer masked rows, and the best 16-row tile is well behind it."""
    f = reveal.figures()
    assert f["skinny_winner_programs"] > f["big_winner_programs"]
    assert 16 < int(re.search(r"BM(\d+)", f["skinny_winner"]).group(1)) < f["big_winner_bm"]
    assert f["skinny_bm16_pct"] < 75 and f["skinny_big_pct"] < 75


def test_the_kv_cache_answer_holds_for_both_models():
    """Lesson 11's answer on the cache's share: at batch 8 and its longest context Llama-3-8B's cache is over half
    its 16-bit weights and more than its int4 weights; the lesson's small model reads more cache than weights."""
    from solutions import llm

    def parts(cfg, int4=False):
        p = llm.step_bytes(cfg, 8, cfg.max_seq, int4=int4)
        return p["KV cache"], sum(v for k, v in p.items() if k != "KV cache")

    big, tiny = llm.Config.llama3_8b(), llm.Config.tiny()
    (kv, w16), (_, w4) = parts(big), parts(big, int4=True)
    assert w16 / 2 < kv < w16 and kv > w4
    kv_tiny, w16_tiny = parts(tiny)
    assert kv_tiny > w16_tiny
    text = reveal.answer("11", 3)
    assert f"({big.max_seq} tokens)" in text and f"its {tiny.max_seq} tokens" in text and f"{tiny.n_layers}-layer" in text


def test_answers_widget_reveals_on_click():
    box = check.answers("05")
    first = box.children[0]
    button, shown = first.children
    assert shown.value == ""
    button.click()
    assert "exp(-3)" in shown.value
    button.click()
    assert shown.value == ""


# ------------------------------------------------------------------------------------------
# a planted exercise: progress, the reference after a pass, the class formats
# ------------------------------------------------------------------------------------------


def _plant(folder, text):
    """``text`` as ``<folder>/vector_add.py`` in a package of its own, imported afresh."""
    folder.mkdir(exist_ok=True)
    (folder / "__init__.py").write_text("")
    shutil.copy(stubs.SOLUTIONS / "_checks.py", folder / "_checks.py")
    path = folder / "vector_add.py"
    path.write_text(text)
    pkg = folder.name
    if str(folder.parent) not in sys.path:
        sys.path.insert(0, str(folder.parent))
    sys.modules.pop(f"{pkg}.vector_add", None)
    spec = importlib.util.spec_from_file_location(f"{pkg}.vector_add", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module, path


SOLUTION = (stubs.SOLUTIONS / "vector_add.py").read_text()
WRONG = SOLUTION.replace("grid = (triton.cdiv(n, BLOCK),)", "grid = (n // BLOCK,)")  # the tail never runs
assert WRONG != SOLUTION


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Real reports of the real grader: a planted wrong vector add, then the right one."""
    folder = tmp_path_factory.mktemp("planted") / "planted_vector_add"
    wrong, path = _plant(folder, WRONG)
    failed = check.run("vector_add", module=wrong, quiet=True)
    right, _ = _plant(folder, SOLUTION)
    passed = check.run("vector_add", module=right, quiet=True)
    assert failed.status == "fail" and passed.passed
    return folder, path, failed, passed


def test_progress_says_done_failing_changed_and_not_started(graded):
    folder, path, failed, passed = graded
    path.write_text(WRONG)
    progress.record(failed, path)
    lines = progress.lines(exercises=folder)
    assert len(lines) == len([entry for entry in course.LESSONS if any(p in stubs.lessons()
                                                                         for p in course.parts(entry.name))])
    first = lines[0]
    assert first.startswith("01_vector_add") and f"failing at {failed.first_problem().label!r}" in first
    assert all(line.endswith("not started") for line in lines[1:])  # no file of theirs in the folder
    path.write_text(SOLUTION)
    progress.record(passed, path)
    assert progress.lines(exercises=folder)[0].split(None, 1)[1].startswith("done")
    path.write_text(SOLUTION + "\n# an edit\n")
    assert "changed since last check (then: done" in progress.lines(exercises=folder)[0]
    (folder / "softmax.py").write_text("# started\n")
    assert "edited, not checked yet" in progress.lines(exercises=folder)[1]
    (folder / "softmax.py").write_text(stubs.expected("softmax"))  # the untouched stub
    assert progress.lines(exercises=folder)[1].endswith("not started")


def test_check_run_records_the_learners_result(graded, monkeypatch):
    folder, path, failed, passed = graded
    wrong, _ = _plant(folder, WRONG)
    monkeypatch.delenv("TKCOURSE_SOLUTIONS", raising=False)
    monkeypatch.setattr(labels, "exercise", lambda name, fallback=True: wrong)
    monkeypatch.setattr(stubs, "status", lambda name: stubs.Status(name, "edited", path))
    report = check.run("vector_add", quiet=True, isolate=False)
    kept = progress.load()["checks"]["vector_add"]
    assert kept["passed"] is False and kept["status"] == report.status == "fail"
    assert kept["first_failing"] == report.first_problem().label
    assert kept["sha256"] == progress.file_hash(stubs.EXERCISES / "vector_add.py") and kept["time"]
    monkeypatch.setenv("TKCOURSE_SOLUTIONS", "1")  # the reference graded: not the learner's progress
    progress.save({"checks": {}, "hints": {}})
    check.run("vector_add", module=wrong, quiet=True)
    assert progress.load()["checks"] == {}


def test_compare_with_reference_refuses_before_a_pass(graded):
    _, _, failed, passed = graded
    refused = check.compare_with_reference(failed, "vector_add")
    assert "once your exercise passes" in refused
    assert not any(c in refused for c in _solution_lines("vector_add"))
    todo = Report("vector_add", "exercises/vector_add.py", status="todo", message="not done yet")
    assert "once your exercise passes" in repr(check.compare_with_reference(todo))
    assert "once your exercise passes" in check.compare_with_reference(passed, "matmul")  # another lesson's pass
    shown = check.compare_with_reference(Report("vector_add", "exercises/vector_add.py", [Case("n = 1", "pass")]).finish())
    kernel, launcher = reveal.marked_functions("vector_add")  # the kernel and its launch: what the learner writes
    assert [fn for fn, _, _ in shown.pairs] == [kernel, launcher] and launcher == "add"
    text, page = repr(shown), shown._repr_html_()
    assert "tl.program_id" in text and f"reference: {kernel}" in text and "<table" in page
    assert "### BEGIN SOLUTION" not in text


def test_json_and_gradescope_agree_with_the_reports(graded, tmp_path, monkeypatch):
    _, _, failed, passed = graded
    data = results.as_json([failed, passed], [1.5, 2.0])
    assert (data["passed"], data["total"]) == (1, 2)
    for d, r in zip(data["reports"], [failed, passed]):
        assert d["status"] == r.status and d["passed"] == r.passed
        assert [c["label"] for c in d["cases"]] == [c.label for c in r.cases]
        assert [c["hint"] for c in d["cases"]] == [c.hint for c in r.cases]
    assert data["reports"][0]["first_failing"] == failed.first_problem().label
    assert data["reports"][1]["first_failing"] is None

    # the command line, with its grader answering from the reports above
    order = {"vector_add": failed, "softmax": passed}
    monkeypatch.setattr(check, "run", lambda name, quiet=False: order[name])
    out = tmp_path / "autograder" / "results.json"
    assert cli.main(["check", "01", "02", "--json", "--gradescope", str(out)]) == 1
    gs = json.loads(out.read_text())
    jsonschema.validate(gs, results.GRADESCOPE_SCHEMA)
    assert gs["score"] == 1.0 and [t["status"] for t in gs["tests"]] == ["failed", "passed"]
    assert [t["score"] for t in gs["tests"]] == [0.0, 1.0] and all(t["max_score"] == 1.0 for t in gs["tests"])
    assert gs["tests"][0]["output"] == str(failed) and gs["execution_time"] >= 0
    with pytest.raises(jsonschema.ValidationError):  # the schema can fail: a status Gradescope does not know
        jsonschema.validate(dict(gs, tests=[dict(gs["tests"][0], status="ok")]), results.GRADESCOPE_SCHEMA)


def test_the_real_command_grades_as_check_run_does(graded, tmp_path, capsys):
    """``tkcourse check 01 --json --gradescope OUT`` with the real grader (the suite grades the reference)."""
    _, _, _, passed = graded  # the same code, graded by check.run in the fixture
    out = tmp_path / "results.json"
    assert cli.main(["check", "01", "--json", "--gradescope", str(out)]) == 0
    data = json.loads(capsys.readouterr().out)
    (d,) = data["reports"]
    assert d["passed"] and d["status"] == "pass" and d["seconds"] > 0
    assert [(c["label"], c["status"]) for c in d["cases"]] == [(c.label, c.status) for c in passed.cases]
    gs = json.loads(out.read_text())
    jsonschema.validate(gs, results.GRADESCOPE_SCHEMA)
    assert gs["score"] == 1.0 and gs["tests"][0]["status"] == "passed"
    assert all(c.label in gs["tests"][0]["output"] for c in passed.cases)


def test_check_json_prints_every_case(graded, capsys, monkeypatch):
    _, _, failed, _ = graded
    monkeypatch.setattr(check, "run", lambda name, quiet=False: failed)
    assert cli.main(["check", "vector_add", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["reports"][0]["lesson"] == "vector_add" and len(data["reports"][0]["cases"]) == len(failed.cases)


def test_progress_command(capsys):
    assert cli.main(["progress"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("01_vector_add") and "nothing is sent anywhere" in out[-1]


# ------------------------------------------------------------------------------------------
# the notebooks carry the tools
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_check_has_a_hint_button_and_a_comparison(path):
    nb = json.loads(path.read_text())
    code = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    for name in re.findall(r'check\.run\("(\w+)"\)', "\n".join(code)):
        at = next(i for i, src in enumerate(code) if f'check.run("{name}")' in src)
        assert any(f'hint_button("{name}")' in src for src in code[:at]), f"{path.stem}: no hint button for {name}"
        assert any(f'compare_with_reference(report, "{name}")' in src for src in code[at + 1:]), \
            f"{path.stem}: no comparison after the check of {name}"


def test_the_sites_index_says_how_its_pages_were_run(monkeypatch):
    """book/index.md's sentence on how the pages ran is read from the lessons' outputs and the exercises."""
    import nbformat
    from helpers import book_build

    from tkcourse import stubs

    build = book_build()
    assert (ROOT / "book" / "index.md").read_text().count("{how_run}") == 1

    def ran(mode_line):
        nb = nbformat.v4.new_notebook()
        cell = nbformat.v4.new_code_cell("tkcourse.mode.describe()")
        cell.outputs = [nbformat.v4.new_output("stream", text=mode_line)]
        nb.cells = [cell]
        return [nb]

    status = stubs.status
    monkeypatch.setattr(stubs, "status", lambda name: stubs.Status(name, "untouched", status(name).path))
    cpu = build.how_run(ran("interpreter (CPU) | tensors live on cpu"))
    assert cpu.startswith("They were run on a CPU, in Triton's interpreter, with the exercises untouched")
    assert build.how_run(ran("compiled (GPU) | NVIDIA H200")).startswith("They were run on a GPU")
    monkeypatch.setattr(stubs, "status", lambda name: stubs.Status(name, "edited", status(name).path))
    assert "with the exercises of the checkout that built them" in build.how_run(ran("interpreter (CPU)"))
