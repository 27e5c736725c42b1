"""Every notebook, run the way a learner first runs it.

A learner opens the notebooks with their exercises still the generated stubs and without
``TKCOURSE_SOLUTIONS``: ``tkcourse.exercise`` then lets the reference solution stand in, so the
demonstrations run. This test does exactly that, one notebook per test (nbclient, ``MPLBACKEND=Agg``),
and fails on

* any cell that raises;
* a solution marker (``### BEGIN SOLUTION``, ``### STUB``, ``### END SOLUTION``) in any output: a
  "your turn" cell must show the stub, never the answer;
* an output that credits the learner with what the reference did. With untouched exercises nothing
  the learner wrote ran, so "your kernel", "your result", "your prune"... in an output (a print, a
  table, a figure's title or legend) is false. Phrases addressed to the learner ("your file
  exercises/x.py", "fill in your ...") are fine: ``ALLOWED`` lists them, and only them.

Figure text is not in a PNG, so the kernel gets a formatter (``_FIGURE_TEXT_HOOK``): a displayed figure
is rendered to PNG, as the inline backend does (a figure that cannot be drawn fails here), and its
text/plain carries its titles, legends and labels behind ``FIGURE_MARK``; figures left open in pyplot
are read the same way when a cell ends. Those lines are checked like any other output. A traceback
shown without the cell raising (a formatter's error, say) fails as well.

This is what proves every notebook runs (``make test``); ``pytest --durations=0`` shows each one's time.
"""

from __future__ import annotations

import os
import queue
import re
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from tkcourse import stubs

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
EXECUTED = ROOT / "build" / "executed"  # each run notebook, kept: tests/test_book.py builds the site from them
TIMEOUT = 900  # seconds a cell may take; the slowest notebook cell takes well under a minute
#: Seconds of each wait for a kernel's message (``_sliced``).
POLL_SLICE = 2.0

MARKERS = ("### BEGIN SOLUTION", "### STUB", "### END SOLUTION")

# "your ..." said TO the learner, about what they will do or must do: true whoever's code ran.
ALLOWED = [re.compile(p, re.IGNORECASE) for p in (
    r"\byour (?:own )?files?\b",                        # "Re-run this cell after editing your file"
    r"\byour exercises?\b",                             # "your exercise exercises/x.py", "your exercises/x.py"
    r"\byour exercises/",
    r"\b(?:fill in|complete|write|edit|open) your\b",   # "fill in your kernel"
    r"\b(?:once|after|when|until|before) you (?:\w+ )?(?:edit|fill in|write|complete|finish)\w* your\b",
    r"\byour turn\b",
    r"\byour (?:device|gpu|machine|laptop)\b",          # the learner's hardware is theirs
    r"\bTODO: your code here\b",                        # the stub's fixed phrase, shown in place of a solution
)]
YOUR = re.compile(r"\byour\b", re.IGNORECASE)

FIGURE_MARK = "[tkcourse figure text]"
_FIGURE_TEXT_HOOK = r"""
def _tkcourse_figure_lines(fig):  # every word-bearing text of a figure (titles, legends, labels), tick numbers left out
    import re
    from matplotlib.text import Text
    return ["MARK " + line.strip() for t in fig.findobj(Text) for line in t.get_text().splitlines()
            if re.search(r"[A-Za-z]{2}", line)]


def _tkcourse_figure_repr(fig, p, cycle):  # text/plain of a displayed Figure: its repr, then its text
    p.text("\n".join([repr(fig)] + _tkcourse_figure_lines(fig)))


def _tkcourse_figure_png(fig):  # image/png, drawn as the inline backend would
    from IPython.core.pylabtools import print_figure
    return print_figure(fig, "png")


def _tkcourse_open_figures(result=None):  # figures left open in pyplot when a cell ends
    import sys
    if "matplotlib.pyplot" not in sys.modules:
        return
    import matplotlib.pyplot as plt
    for n in plt.get_fignums():
        print("\n".join(_tkcourse_figure_lines(plt.figure(n))))
    plt.close("all")


from matplotlib.figure import Figure as _tkcourse_Figure

get_ipython().display_formatter.formatters["text/plain"].for_type(_tkcourse_Figure, _tkcourse_figure_repr)
get_ipython().display_formatter.formatters["image/png"].for_type(_tkcourse_Figure, _tkcourse_figure_png)
get_ipython().events.register("post_run_cell", _tkcourse_open_figures)
""".replace("MARK", FIGURE_MARK)


def _lessons_used(nb, path: Path) -> list[str]:
    """The exercises a notebook runs: its own lesson, and any ``tkcourse.exercise("x")`` it calls."""
    text = "\n".join("".join(c.source) for c in nb.cells if c.cell_type == "code")
    used = set(re.findall(r"""(?:exercise|check\.run)\(\s*["'](\w+)["']""", text))
    used.add(path.stem.partition("_")[2])  # 01_vector_add -> vector_add
    return sorted(used & set(stubs.lessons()))


def _output_lines(output) -> list[str]:
    if output.output_type == "stream":
        return output.text.splitlines()
    if output.output_type == "error":
        return [f"{output.ename}: {output.evalue}"]
    data = output.get("data", {})
    lines = []
    for mime in ("text/plain", "text/markdown", "text/html"):
        if mime in data:
            text = data[mime]
            lines += ("".join(text) if isinstance(text, list) else text).splitlines()
    return lines


def _false_your(line: str) -> bool:
    """True if ``line`` says "your ..." about something other than what the learner is told to do."""
    stripped = line
    for pattern in ALLOWED:
        stripped = pattern.sub("", stripped)
    return bool(YOUR.search(stripped))


def _sliced(channel) -> None:
    """Make ``channel.get_msg`` wait in slices of ``POLL_SLICE`` seconds, its timeout kept. pyzmq's asyncio
    poll can miss the wake-up of a message that has arrived, and then hands it over only when its timeout
    ends: nbclient waits for each reply with the cell's whole timeout, so one missed wake-up held a
    notebook of a few seconds for ``TIMEOUT``. A fresh poll finds the message at once."""
    get = channel.get_msg

    async def get_msg(timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = POLL_SLICE if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                return await get(timeout=min(POLL_SLICE, left))
            except queue.Empty:
                if deadline is not None and left <= POLL_SLICE:
                    raise

    channel.get_msg = get_msg


def _run(path: Path, root: Path = ROOT):
    """Run the notebook at ``path`` as a learner does, in ``notebooks/`` of the checkout at ``root`` (another
    checkout's ``tkcourse`` comes first on the kernel's path)."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")

    nb = nbformat.read(path, as_version=4)
    env = {k: v for k, v in os.environ.items() if k != "TKCOURSE_SOLUTIONS"}
    env["MPLBACKEND"] = "Agg"
    if root != ROOT:
        env["PYTHONPATH"] = os.pathsep.join([str(root)] + [p for p in [env.get("PYTHONPATH")] if p])
    client = nbclient.NotebookClient(nb, timeout=TIMEOUT, kernel_name="python3",
                                     resources={"metadata": {"path": str(root / "notebooks")}})
    with tempfile.TemporaryDirectory(prefix="nb-") as sockets:
        if os.name == "posix":  # on TCP a kernel binds ports chosen before it starts, and another test may take one
            km = client.create_kernel_manager()
            km.transport = "ipc"
            km.ip = os.path.join(sockets, "kernel")  # absolute: the kernel starts in notebooks/
        with client.setup_kernel(env=env):  # the kernel's whole environment: this one, less TKCOURSE_SOLUTIONS
            _sliced(client.kc.shell_channel)
            _sliced(client.kc.iopub_channel)
            hook = nbformat.v4.new_code_cell(_FIGURE_TEXT_HOOK)
            nb.cells.append(hook)  # executed at an index of its own, then taken out again
            try:
                client.execute_cell(hook, len(nb.cells) - 1)
            finally:
                nb.cells.pop()
            for index, cell in enumerate(nb.cells):
                client.execute_cell(cell, index)  # raises CellExecutionError on the first error
    return nb


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_as_a_learner(path):
    nbformat = pytest.importorskip("nbformat")
    used = _lessons_used(nbformat.read(path, as_version=4), path)
    edited = [n for n in used if stubs.status(n).state == "edited"]
    if edited:
        pytest.skip(f"{path.name} runs as a learner only with untouched exercises; edited here: "
                    + ", ".join(f"exercises/{n}.py" for n in edited))

    nb = _run(path)
    EXECUTED.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, EXECUTED / path.name)
    problems = _problems(nb)
    assert not problems, (f"{path.name}, run with untouched exercises (the reference solution standing in):\n  "
                          + "\n  ".join(problems))


def _problems(nb) -> list[str]:
    """What is wrong in the outputs of an executed notebook: solution markers, and 'your' claims."""
    problems = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        for output in cell.get("outputs", []):
            if output.output_type == "error":  # shown, though the cell itself did not raise
                problems.append(f"cell {index}: a traceback in an output: {output.ename}: {output.evalue}")
                continue
            for line in _output_lines(output):
                marker = next((m for m in MARKERS if m in line), None)
                if marker:
                    problems.append(f"cell {index}: a solution marker ({marker}) in an output: {line.strip()!r}")
                elif _false_your(line):
                    where = "figure" if line.startswith(FIGURE_MARK) else "output"
                    text = line.replace(FIGURE_MARK, "").strip()
                    problems.append(f"cell {index}: the reference ran, but its {where} says 'your': {text!r}")
    return problems


def test_the_check_catches_false_labels(tmp_path):
    """A notebook that claims the learner's work in a print, a figure title and a legend, and shows a
    solution marker, fails with each offending line and cell named; instructions pass."""
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in (
        'print("fill in your kernel in exercises/vector_add.py")',
        'print("your kernel, fp32: max error 0")',
        "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.plot([1, 2], label='your prune')\n"
        "ax.legend()\nax.set_title('bandwidth (your kernel, measured now)')",
        "from matplotlib.figure import Figure\nf = Figure()\nf.suptitle('your result')\nf",
        'print("### BEGIN SOLUTION")',
        'import os, matplotlib\nprint(os.environ.get("TKCOURSE_SOLUTIONS"), matplotlib.get_backend())',
    )]
    path = tmp_path / "planted.ipynb"
    nbformat.write(nb, path)
    nb_out = _run(path)
    problems = _problems(nb_out)
    assert not any(p.startswith("cell 0:") for p in problems)
    assert "cell 1: the reference ran, but its output says 'your': 'your kernel, fp32: max error 0'" in problems
    assert "cell 2: the reference ran, but its figure says 'your': 'your prune'" in problems
    assert "cell 2: the reference ran, but its figure says 'your': 'bandwidth (your kernel, measured now)'" in problems
    assert "cell 3: the reference ran, but its figure says 'your': 'your result'" in problems
    assert any(p.startswith("cell 4: a solution marker (### BEGIN SOLUTION)") for p in problems), problems
    # as a learner: no TKCOURSE_SOLUTIONS (one print may reach the notebook as several stream outputs)
    printed = "".join(o.text for o in nb_out.cells[5].outputs if o.output_type == "stream")
    assert printed.lower().split() == ["none", "agg"]


@pytest.mark.parametrize("line, false", [
    ("your kernel, fp32: largest error 1e-7", True),
    ("vector add, fp32 (your kernel, measured now)", True),
    ("Your result: 3 configs pruned", True),
    ("exercises/vector_add.py is not done yet: ... Re-run this cell after editing your file.", False),
    ("fill in your kernel in exercises/softmax.py", False),
    ("once you edit your exercise the cells below run it", False),
    ("your file is fine, but your kernel is slow", True),
    ("the reference kernel, fp32", False),
])
def test_label_rule(line, false):
    """The allowlist lets instructions through and nothing that credits the learner with a result."""
    assert _false_your(line) is false


def test_an_edited_exercise_skips_its_notebook(monkeypatch):
    """A developer who has edited exercises/vector_add.py gets a skip that names it, not a false failure."""
    real = stubs.status
    monkeypatch.setattr(stubs, "status", lambda name: stubs.Status(name, "edited", real(name).path)
                        if name == "vector_add" else real(name))
    with pytest.raises(pytest.skip.Exception, match=r"edited here: exercises/vector_add\.py"):
        test_notebook_as_a_learner(ROOT / "notebooks" / "01_vector_add.ipynb")


def _wrong_exercise(solution: str, right: str, wrong: str) -> str:
    """The solution's text as a learner would have written it (no exercise markers), with ``right`` made ``wrong``."""
    text = stubs.answer_text(solution)
    assert text.count(right) == 1, right
    return text.replace(right, wrong)


def test_a_failing_exercise_is_never_shown_as_right(tmp_path):
    """A learner whose kernel fails the check (Python's `and` in the mask) runs lesson 01: the check says
    FAIL, and every cell after it runs the reference and says so; none credits the learner with a result.

    The notebook runs in a copy of the checkout whose exercises/vector_add.py is the wrong one, so this
    checkout's exercises stay as they are."""
    pytest.importorskip("nbclient")
    for part in ("tkcourse", "solutions", "exercises", "benchmarks"):
        shutil.copytree(ROOT / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__", "*.bak-*"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    (tmp_path / "notebooks").mkdir()
    shutil.copy(ROOT / "notebooks" / "01_vector_add.ipynb", tmp_path / "notebooks")
    wrong = _wrong_exercise((ROOT / "solutions" / "vector_add.py").read_text(), "mask = offsets < n ",
                            "mask = offsets < n and offsets >= 0 ")
    (tmp_path / "exercises" / "vector_add.py").write_text(wrong)

    nb = _run(tmp_path / "notebooks" / "01_vector_add.ipynb", root=tmp_path)
    texts = ["\n".join(line for o in cell.get("outputs", []) for line in _output_lines(o)) for cell in nb.cells]
    at = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and "check.run(" in "".join(c.source))
    assert "exercises/vector_add.py): FAIL" in texts[at] and "Python's `and`" in texts[at], texts[at]
    after = "\n".join(texts[at + 1:])
    assert "running the reference kernel" in after and "does not pass the check" in after, after
    problems = [p for p in _problems(nb) if int(p.split(":")[0].split()[1]) > at]
    assert not problems, "after the failed check:\n  " + "\n  ".join(problems)


def test_kernel_messages_are_waited_for_in_slices():
    """A wait for a kernel's message never polls longer than ``POLL_SLICE`` at once, hands over a message a
    later poll finds, and still ends with ``queue.Empty`` at its own timeout."""
    import asyncio

    class Channel:
        def __init__(self, found_on_poll):
            self.polls, self.found_on_poll = [], found_on_poll

        async def get_msg(self, timeout=None):
            self.polls.append(timeout)
            if len(self.polls) == self.found_on_poll:
                return {"msg": "reply"}
            raise queue.Empty

    found = Channel(found_on_poll=3)
    _sliced(found)
    assert asyncio.run(found.get_msg(timeout=TIMEOUT)) == {"msg": "reply"}
    assert found.polls[:2] == [POLL_SLICE, POLL_SLICE] and len(found.polls) == 3
    forever = Channel(found_on_poll=4)
    _sliced(forever)
    assert asyncio.run(forever.get_msg()) == {"msg": "reply"}  # no timeout: slices until a message comes
    never = Channel(found_on_poll=0)
    _sliced(never)
    start = time.monotonic()
    with pytest.raises(queue.Empty):
        asyncio.run(never.get_msg(timeout=0.05))
    assert time.monotonic() - start < 1 and all(t <= 0.05 for t in never.polls)
