"""The learner's path in a real browser: JupyterLab in headless Chromium, Run All, look at the page.

nbval checks what a kernel prints; this checks what a learner *sees*: a kernel that starts and runs
every cell, no traceback anywhere on the page, widgets that render (not "Error displaying widget",
not stuck at "Loading widget...", not the text fallback ``IntSlider(...)`` of a missing lab
extension), a slider that moves and redraws its figure, and matplotlib figures that appear.
Screenshots of every step go to artifacts/browser/.

Needs Debian's ``chromium`` (/usr/bin/chromium) and ``pip install playwright`` (its own browser
download is not used); skipped when either is missing. Notebooks run with TKCOURSE_SOLUTIONS=1.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from tkcourse.lab import REPO_ROOT, start_lab

# The notebooks driven through JupyterLab, and what each must show once run:
# (file in notebooks/, sliders that must redraw a figure, plain matplotlib figures at least)
NOTEBOOKS = [
    ("00_welcome.ipynb", 1, 1),
    ("01_vector_add.ipynb", 0, 2),
    ("04_autotune.ipynb", 0, 8),  # the autotune explorer (dropdowns) and the sweeps' heatmaps
]

CHROMIUM = os.environ.get("TKCOURSE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ARTIFACTS = REPO_ROOT / "artifacts" / "browser"
RUN_TIMEOUT_S = 120  # Run All of one notebook (each should take < 60 s in the interpreter)
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
WIDGET_EXTENSION = "@jupyter-widgets/jupyterlab-manager"

pytestmark = pytest.mark.browser

if not os.path.exists(CHROMIUM):
    pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")
psutil = pytest.importorskip("psutil")


class NotebookProblems(AssertionError):
    """What went wrong on the page, one line per problem."""


# ------------------------------------------------------------------------------------------------
# What the page says, read through JupyterLab's own models (window.jupyterapp, exposed for tests)
# and the DOM they render.
# ------------------------------------------------------------------------------------------------
_FIND_PANEL = """
function findPanel(path) {
  const app = window.jupyterapp;
  if (!app) return null;
  for (const w of app.shell.widgets('main')) {
    if (w.context && w.context.path === path && w.content && w.sessionContext) return w;
  }
  return null;
}
"""


def _js(fn: str) -> str:
    """A page function (one argument) that can call findPanel(path)."""
    return "(arg) => {" + _FIND_PANEL + "return (" + fn.strip() + ")(arg); }"


STATE_JS = _js("""
(path) => {
  if (!window.jupyterapp) return {found: false, why: 'window.jupyterapp is missing'};
  const panel = findPanel(path);
  if (!panel) return {found: false, why: 'notebook ' + path + ' is not open'};
  const sc = panel.sessionContext;
  const kernel = sc.session ? sc.session.kernel : null;
  const cells = [];
  panel.content.widgets.forEach((cell, i) => {
    const m = cell.model;
    if (m.type !== 'code') return;
    const src = m.sharedModel.getSource();
    const outputs = [];
    const area = cell.outputArea;
    for (let j = 0; j < m.outputs.length; j++) {
      const o = m.outputs.get(j);
      const js = o.toJSON();
      const node = area && area.widgets[j] ? area.widgets[j].node : null;
      const shown = node ? node.querySelector(':scope > .jp-OutputArea-output') : null;
      const data = o.data || {};
      outputs.push({
        type: o.type, mimes: Object.keys(data), ename: js.ename || null, evalue: js.evalue || null,
        modelId: data['""" + WIDGET_MIME + """'] ? data['""" + WIDGET_MIME + """'].model_id : null,
        shown: shown ? (shown.getAttribute('data-mime-type') || shown.className) : null,
        text: shown ? shown.innerText.slice(0, 300) : (node ? node.innerText.slice(0, 300) : ''),
        view: shown ? [shown, ...shown.querySelectorAll('.jupyter-widgets')].some((e) =>
          e.classList.contains('jupyter-widgets') && [...e.classList].some((c) => c.startsWith('widget-'))) : false,
      });
    }
    const prompt = cell.node.querySelector('.jp-InputArea-prompt');
    cells.push({index: i, empty: src.trim() === '', count: m.executionCount,
                prompt: prompt ? prompt.innerText : '', head: src.split('\\n')[0].slice(0, 70), outputs});
  });
  const dialog = document.querySelector('.jp-Dialog');
  return {found: true, ready: sc.isReady, kernel: kernel ? kernel.status : null,
          connection: kernel ? kernel.connectionStatus : null, cells,
          dialog: dialog ? dialog.innerText.slice(0, 300) : null};
}
""")

CLEAR_COUNTS_JS = _js("""
(path) => { for (const c of findPanel(path).content.widgets) if (c.model.type === 'code') c.model.executionCount = null; }
""")

KERNEL_EXEC_JS = _js("""
async ([path, code]) => {
  const kernel = findPanel(path).sessionContext.session.kernel;
  const future = kernel.requestExecute({code, silent: false, store_history: false});
  let out = '';
  future.onIOPub = (msg) => {
    if (msg.header.msg_type === 'stream') out += msg.content.text;
    if (msg.header.msg_type === 'error') out += msg.content.ename + ': ' + msg.content.evalue;
  };
  await future.done;
  return out;
}
""")

SHUTDOWN_JS = _js("""
async (path) => { const p = findPanel(path); if (p && p.sessionContext.session) await p.sessionContext.shutdown(); }
""")

FIGURES_JS = """
(nb) => Array.from(document.querySelectorAll(nb + ' .jp-OutputArea-output img'))
  .filter((img) => img.naturalWidth >= 100 && img.naturalHeight >= 100)
  .map((img) => ({inWidget: !!img.closest('.jupyter-widgets'), w: img.naturalWidth, h: img.naturalHeight}))
"""

STDERR_SEL = ' .jp-RenderedText[data-mime-type="application/vnd.jupyter.stderr"]'


def _where(cell) -> str:
    return f"cell {cell['index'] + 1} ({cell['head']!r})"


def _state(page, path):
    st = page.evaluate(STATE_JS, path)
    if not st["found"]:
        raise NotebookProblems(st["why"])
    return st


def _finished(st) -> bool:
    if st["kernel"] in ("dead", "unknown") or st["connection"] == "disconnected" or st["dialog"]:
        return True
    if st["kernel"] != "idle" or any("*" in c["prompt"] for c in st["cells"]):
        return False
    errored = any(o["type"] == "error" for c in st["cells"] for o in c["outputs"])
    return errored or all(c["count"] is not None for c in st["cells"] if not c["empty"])


def widget_problems(st, page_text: str) -> list[str]:
    """Every widget that did not render, as 'widget failed to render: ...' lines."""
    found = []
    for c in st["cells"]:
        for o in c["outputs"]:
            if WIDGET_MIME not in o["mimes"] or o["modelId"] == "":
                continue
            text = o["text"].strip().replace("\n", " ")[:120]
            if "Error displaying widget" in o["text"]:
                found.append(f"widget failed to render: {_where(c)} shows {text!r}")
            elif "Loading widget..." in o["text"]:
                found.append(f"widget failed to render: {_where(c)} is stuck at 'Loading widget...'")
            elif not o["view"] and o["shown"] == "text/plain":
                found.append(f"widget failed to render: {_where(c)} shows the text {text!r} instead of the widget "
                             f"(is the {WIDGET_EXTENSION} lab extension installed and enabled? "
                             "`jupyter labextension list`)")
            elif not o["view"]:
                found.append(f"widget failed to render: {_where(c)} shows {text!r} instead of the widget "
                             "(a JavaScript error in the widget's front end: see the browser console)")
    if "Error displaying widget" in page_text and not any("Error displaying" in f for f in found):
        found.append("widget failed to render: 'Error displaying widget' on the page")
    if "Loading widget..." in page_text and not any("Loading widget" in f for f in found):
        found.append("widget failed to render: 'Loading widget...' never went away")
    return found


def page_problems(page, path, nb) -> list[str]:
    """Everything wrong with the notebook ``path`` (its node: CSS selector ``nb``) once it has run."""
    st = _state(page, path)
    found = []
    if st["dialog"]:
        found.append(f"a dialog is open: {st['dialog']!r}")
    if st["kernel"] != "idle":
        found.append(f"the kernel is {st['kernel']} (connection {st['connection']}): it died or never started")
    raised = [o["ename"] for c in st["cells"] for o in c["outputs"] if o["type"] == "error"]
    for c in st["cells"]:
        for o in c["outputs"]:
            if o["type"] == "error":
                found.append(f"{_where(c)} raised {o['ename']}: {o['evalue']}")
        if not c["empty"] and c["count"] is None and not raised:  # (after an error, Run All stops: expected)
            found.append(f"{_where(c)} never ran")
    for node in page.locator(nb + STDERR_SEL).all():
        text = node.inner_text()
        in_widget = node.evaluate("(n) => !!n.closest('.jupyter-widgets')")
        if not in_widget and any(ename and ename in text for ename in raised):
            continue  # the cell's own error, reported above
        if "Traceback" in text or re.search(r"^\w*Error\b", text, re.M):
            where = "inside a widget" if in_widget else "on the page"
            found.append(f"a traceback {where}: {text.strip()[-300:]!r}")
    page_text = page.locator(nb).inner_text()
    found += widget_problems(st, page_text)
    return found


def _shot(page, stem, step):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        page.screenshot(path=str(ARTIFACTS / f"{stem}-{step}.png"), full_page=True)
    except Exception:  # a screenshot must never hide the real failure
        pass


def _wait(cond, timeout, interval=0.25):
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


def _move_slider(page, slider) -> tuple[str, str]:
    """Move an ipywidgets slider two steps right with the keyboard (drag if that does nothing)."""
    readout = slider.locator(".widget-readout")
    before = readout.inner_text() if readout.count() else ""
    handle = slider.locator(".noUi-handle, input[type=range]").first
    handle.scroll_into_view_if_needed()
    handle.focus()
    handle.press("ArrowRight")
    handle.press("ArrowRight")
    after = readout.inner_text() if readout.count() else ""
    if after == before:
        box = handle.bounding_box()
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        page.mouse.down()
        page.mouse.move(box["x"] + box["width"] / 2 + 40, box["y"] + box["height"] / 2, steps=5)
        page.mouse.up()
        after = readout.inner_text() if readout.count() else ""
    return before, after


def slider_problems(page, path, nb, stem, want: int, info: dict) -> list[str]:
    """Each slider (at least ``want``) must move and change the figure drawn in its cell."""
    found = []
    sliders = page.locator(nb + " .widget-slider")
    n = sliders.count()
    if n < want:
        return [f"expected at least {want} ipywidgets slider(s), found {n} rendered"]
    driving = 0
    for k in range(n):
        slider = sliders.nth(k)
        cell = slider.locator("xpath=ancestor::div[contains(concat(' ', @class, ' '), ' jp-CodeCell ')][1]")
        imgs = cell.locator(".jp-OutputArea-output img")
        srcs = [imgs.nth(i).get_attribute("src") for i in range(imgs.count())]
        if not srcs:
            continue  # a slider that draws nothing (e.g. a size picker): nothing to compare
        before, after = _move_slider(page, slider)
        if after == before:
            found.append(f"slider {k + 1} did not move (readout stayed {before!r})")
            continue

        def redrawn():
            st = _state(page, path)
            now = [imgs.nth(i).get_attribute("src") for i in range(imgs.count())]
            return st["kernel"] == "idle" and now and now != srcs

        if not _wait(redrawn, 60):
            found.append(f"moving slider {k + 1} ({before} -> {after}) did not change the figure drawn in its cell")
        else:
            driving += 1
        cell.scroll_into_view_if_needed()
        _shot(page, stem, f"3-slider{k + 1}")
    info["sliders_driving_figures"] = driving
    if driving < want and not found:
        found.append(f"expected {want} slider(s) driving a figure, found {driving}")
    return found


def run_in_lab(context, lab, path, *, sliders=0, figures=0, stem=None) -> dict:
    """Open ``path`` (relative to the lab's root) in JupyterLab, Run All, and check the page.

    Raises NotebookProblems listing everything wrong; returns a small summary otherwise.
    """
    stem = stem or Path(path).stem
    for old in ARTIFACTS.glob(f"{stem}-*.png"):
        old.unlink()
    page = context.new_page()
    t0 = time.monotonic()
    info = {"path": path}
    try:
        found = _drive(page, lab, path, sliders, figures, stem, info)
        if found:
            _shot(page, stem, "FAILED")
            raise NotebookProblems(f"{path} in JupyterLab ({ARTIFACTS}/{stem}-*.png):\n  - " + "\n  - ".join(found))
        info["seconds"] = round(time.monotonic() - t0, 1)
        return info
    except NotebookProblems:
        raise
    except Exception:
        _shot(page, stem, "FAILED")
        raise
    finally:
        try:
            page.evaluate(SHUTDOWN_JS, path)
        except Exception:
            pass
        page.close()


def _drive(page, lab, path, sliders, figures, stem, info) -> list[str]:
    t0 = time.monotonic()

    def step(what):  # shown by pytest with the failure (or always with -s)
        print(f"  [{time.monotonic() - t0:5.1f}s] {stem}: {what}", flush=True)

    page.goto(lab.url_for(path, workspace=f"test-{uuid.uuid4().hex[:12]}"))  # a fresh workspace per page
    try:
        page.wait_for_function(_js("(p) => !!findPanel(p)"), arg=path, timeout=60_000)
        step("JupyterLab loaded")
        page.wait_for_function(_js("(p) => { const w = findPanel(p); return w && w.sessionContext.isReady "
                                   "&& w.sessionContext.session && w.sessionContext.session.kernel "
                                   "&& w.sessionContext.session.kernel.status === 'idle'; }"),
                               arg=path, timeout=60_000)
    except Exception:
        _shot(page, stem, "1-opened")
        st = page.evaluate(STATE_JS, path)
        return [f"the notebook did not open with an idle kernel within 60 s: {st}"]
    lab.track_processes()
    step("kernel started")
    _shot(page, stem, "1-opened")
    nb = "#" + page.evaluate(_js("(p) => findPanel(p).content.node.id"), path)  # this notebook's node
    page.evaluate(CLEAR_COUNTS_JS, path)

    # Run > Run All Cells, as a learner would.
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()
    st = _wait(lambda: (lambda s: s if _finished(s) else None)(_state(page, path)), RUN_TIMEOUT_S, 0.5)
    if not st:
        _shot(page, stem, "2-ran")
        st = _state(page, path)
        todo = [_where(c) for c in st["cells"] if not c["empty"] and c["count"] is None]
        return [f"Run All did not finish within {RUN_TIMEOUT_S} s (kernel {st['kernel']}; not run: {todo})"]
    step("Run All finished")
    # Widgets render after the kernel goes idle: give them a moment before judging.
    _wait(lambda: "Loading widget..." not in page.locator(nb).inner_text(), 15)
    if not any(o["type"] == "error" for c in st["cells"] for o in c["outputs"]):
        _wait(lambda: len(page.evaluate(FIGURES_JS, nb)) >= figures, 10)
    _shot(page, stem, "2-ran")
    step("outputs settled")

    found = page_problems(page, path, nb)
    if any(f.startswith(("the kernel is", "a dialog")) or " raised " in f for f in found):
        return found  # Run All stopped early: figures and sliders further down were never made
    exe = page.evaluate(KERNEL_EXEC_JS, [path, "import sys, os; print(sys.prefix, sys.executable, sep='|'); "
                                               "print(os.environ.get('TKCOURSE_SOLUTIONS'))"]).split("\n")
    prefix, _, executable = exe[0].partition("|")
    if os.path.realpath(prefix) != os.path.realpath(sys.prefix):
        found.append(f"the kernel runs {executable!r} (prefix {prefix}), not the course's Python {sys.executable}")
    if exe[1:2] != ["1"]:
        found.append(f"the kernel does not see TKCOURSE_SOLUTIONS=1 (got {exe[1:2]})")
    plain = [f for f in page.evaluate(FIGURES_JS, nb) if not f["inWidget"]]
    info["figures"] = len(plain)
    if len(plain) < figures:
        found.append(f"expected at least {figures} matplotlib figure(s) shown as images, found {len(plain)} "
                     "(a closed figure kept in a variable, `fig = plot(...)` as a cell's last line, is never shown: "
                     "end the cell with `fig`)")
    if sliders and not any(f.startswith("widget failed") for f in found):
        found += slider_problems(page, path, nb, stem, sliders, info)
    return found


# ------------------------------------------------------------------------------------------------
# Fixtures: one browser for the module, JupyterLab per group; nothing may outlive them.
# ------------------------------------------------------------------------------------------------
def _kill_and_report(procs) -> list[str]:
    alive = [p for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    _, still = psutil.wait_procs(alive, timeout=5)
    left = []
    for p in still:
        try:
            left.append(f"{p.pid} {p.name()}")
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(still, timeout=5)
    return left


@pytest.fixture(scope="module")
def browser():
    """Headless Debian Chromium with a fresh profile, through Playwright; closed at the end, and checked gone."""
    profile = tempfile.mkdtemp(prefix="tkcourse-chromium-")
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    pw = sync_api.sync_playwright().start()
    context = None
    try:
        context = pw.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1400, "height": 1000}, timeout=60_000)
        context.set_default_timeout(30_000)
        yield context
    finally:
        ours = [p for p in me.children(recursive=True) if p.pid not in before]
        try:
            if context is not None:
                context.close()
        finally:
            pw.stop()
            shutil.rmtree(profile, ignore_errors=True)
        left = _kill_and_report(ours)
        assert not left, f"browser or JupyterLab processes left behind (now killed): {left}"


@pytest.fixture(scope="module")
def course_lab():
    """JupyterLab on the repo (solutions mode, isolated settings); stopped, kernels included, at the end."""
    with _lab("notebooks") as lab:
        yield lab


class _lab:
    """start_lab for tests, asserting at exit that no server or kernel process outlived it.

    ``_lab(...)`` starts the server without waiting; entering the ``with`` waits until it answers.
    """

    def __init__(self, notebook_dir, **kw):
        self.lab = start_lab(notebook_dir, solutions=True, isolated=True, expose_app=True, wait=False, **kw)

    def __enter__(self):
        try:
            return self.lab.wait_ready()
        except BaseException:
            self.__exit__(None, None, None)
            raise

    def __exit__(self, *exc):
        kids = psutil.Process(self.lab.process.pid).children(recursive=True) if self.lab.running() else []
        self.lab.stop()
        left = self.lab.leftovers + _kill_and_report(kids)
        if not exc[0]:
            assert not left, f"JupyterLab processes outlived stop() (now killed): {left}"


# ------------------------------------------------------------------------------------------------
# Tests
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,sliders,figures", NOTEBOOKS, ids=[n for n, *_ in NOTEBOOKS])
def test_notebook_runs_in_jupyterlab(browser, course_lab, name, sliders, figures):
    path = f"notebooks/{name}"
    assert (REPO_ROOT / path).exists(), f"{path} is listed in NOTEBOOKS but does not exist"
    summary = run_in_lab(browser, course_lab, path, sliders=sliders, figures=figures)
    print(f"clean in JupyterLab: {summary}")


_PLANTED_NB = [
    "import ipywidgets as widgets, traitlets\nwidgets.IntSlider(value=3, min=0, max=10, description='n')",
    "class Broken(widgets.IntSlider):  # a widget whose front-end code does not exist\n"
    "    _model_module_version = traitlets.Unicode('99.0.0').tag(sync=True)\n"
    "    _view_module_version = traitlets.Unicode('99.0.0').tag(sync=True)\n"
    "Broken(value=3)",
    "import traceback\ntry:\n    1 / 0\nexcept ZeroDivisionError:\n    traceback.print_exc()",
]


def _write_nb(path: Path, cells):
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(src) for src in cells]
    nbformat.write(nb, path)


def test_broken_widgets_are_caught(browser, tmp_path):
    """The detector itself, on a planted notebook: a plain slider (cell 1) passes; a widget whose
    front end cannot load (cell 2) and a printed traceback (cell 3) are reported, and nothing else;
    with the widget lab extension disabled, the plain slider is reported too."""
    _write_nb(tmp_path / "planted.ipynb", _PLANTED_NB)
    normal = _lab(tmp_path)
    no_widgets = _lab(tmp_path, disabled_extensions=[WIDGET_EXTENSION])  # starts alongside the first
    try:
        with normal as lab:
            with pytest.raises(NotebookProblems) as bad:
                run_in_lab(browser, lab, "planted.ipynb", stem="planted-broken-widget")
        lines = sorted(str(bad.value).splitlines()[1:])
        assert len(lines) == 2, lines  # the plain slider and everything else (kernel, env) are fine
        assert lines[0].startswith("  - a traceback on the page") and "ZeroDivisionError" in lines[0], lines
        assert lines[1].startswith("  - widget failed to render: cell 2 ('class Broken"), lines

        with no_widgets as lab:
            with pytest.raises(NotebookProblems, match=r"widget failed to render: cell 1 .*IntSlider\(") as missing:
                run_in_lab(browser, lab, "planted.ipynb", stem="planted-no-extension")
        assert WIDGET_EXTENSION in str(missing.value)
    finally:
        no_widgets.lab.stop()  # no-op when its `with` already did
