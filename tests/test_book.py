"""The course's static site (``make book``) in headless Chromium: every lesson page renders with its
figures, and no link inside the site is broken.

The suite runs each notebook once: tests/test_learner_path.py keeps what it ran in build/executed/,
and this file (which tests/conftest.py runs last) builds the site from those with book/build.py,
executing nothing; ``make book`` runs the notebooks itself. The site is served on 127.0.0.1 and any
request for another host is refused, as a reader without network would see it. Needs Chromium and
playwright, like tests/test_browser.py, whose browser this file shares; skipped where they are missing.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import threading
from pathlib import Path
from urllib.parse import urldefrag, urlparse

import pytest

pytestmark = pytest.mark.browser

from helpers import book_build  # noqa: E402
from test_browser import browser  # noqa: E402,F401  (the shared fixture; skips this file without Chromium)
from test_learner_path import EXECUTED, FIGURE_MARK  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
IMAGE_MIMES = ("image/png", "image/jpeg", "image/svg+xml")


def _sources(path: Path) -> list[str]:
    return [c["source"] if isinstance(c["source"], str) else "".join(c["source"])
            for c in json.loads(path.read_text())["cells"]]


def _without_figure_text(nb):
    """test_learner_path.py prints the text of figures for its own check: not part of the lesson."""
    for cell in (c for c in nb.cells if c.cell_type == "code"):
        for out in cell.outputs:
            if out.output_type == "stream":
                out.text = "".join(ln for ln in out.text.splitlines(True) if not ln.startswith(FIGURE_MARK))
        cell.outputs = [o for o in cell.outputs if o.output_type != "stream" or o.text]
    return nb


# ------------------------------------------------------------------------------------------------
# Reading a site as a browser does: every page reachable from index.html, what it shows and links to.
# ------------------------------------------------------------------------------------------------
PAGE_JS = """
() => ({
  h1: (document.querySelector('article h1, main h1, h1') || {innerText: ''}).innerText.replace(/#$/, '').trim(),
  images: [...document.images].map((i) => ({src: i.currentSrc || i.src, ok: i.complete && i.naturalWidth > 0,
                                            output: !!i.closest('.cell_output')})),
  links: [...document.querySelectorAll('a[href]')].map((a) => a.href),
  ids: [...document.querySelectorAll('[id]')].map((e) => e.id).concat(
       [...document.querySelectorAll('a[name]')].map((e) => e.name)),
  tracebacks: document.querySelectorAll('.cell_output .traceback, .cell_output .output.error').length,
})
"""


def crawl(context, base: str, start: str = "index.html") -> dict:
    """Visit every HTML page of the site at ``base`` reachable from ``start``; what each shows."""
    pages, todo, failed, outside = {}, [base + start], [], set()
    page = context.new_page()

    def route(r):
        if r.request.url.startswith(base):
            return r.continue_()
        outside.add(urlparse(r.request.url).netloc)
        return r.abort()

    page.route("**/*", route)
    page.on("response", lambda resp: failed.append(f"{resp.status} {resp.url}")
            if resp.url.startswith(base) and resp.status >= 400 else None)
    try:
        while todo:
            url = todo.pop()
            if url in pages:
                continue
            response = page.goto(url, wait_until="load")
            info = page.evaluate(PAGE_JS)
            info["status"] = response.status if response else None
            pages[url] = info
            for link in info["links"]:
                target = urldefrag(link).url
                if target.startswith(base) and target.endswith(".html") and target not in pages:
                    todo.append(target)
    finally:
        page.close()
    return {"pages": pages, "failed": failed, "outside": outside}


def link_problems(site: dict, base: str, root: Path) -> list[str]:
    """Links inside the site to a file that is not there, or to an anchor its page does not have."""
    found = []
    for url, info in site["pages"].items():
        for link in info["links"]:
            target, fragment = urldefrag(link)
            if not target.startswith(base):
                continue
            rel = target[len(base):] or "index.html"
            if not (root / rel).is_file():
                found.append(f"{url[len(base):]}: a link to {rel}, which the site does not have")
            elif fragment and target in site["pages"] and fragment not in site["pages"][target]["ids"]:
                found.append(f"{url[len(base):]}: a link to {rel}#{fragment}, an anchor that page does not have")
    return sorted(set(found)) + [f"a request failed: {f}" for f in sorted(set(site["failed"]))]


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


class serve:
    """The folder ``root`` over HTTP on 127.0.0.1 (a free port), in a thread, for the ``with`` block."""

    def __init__(self, root: Path):
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                                      functools.partial(_Quiet, directory=str(root)))
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"

    def __enter__(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


# ------------------------------------------------------------------------------------------------
# The course's site
# ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def book(tmp_path_factory):
    """The site built from the notebooks tests/test_learner_path.py ran; its lessons as the pages show them."""
    import nbformat

    lessons = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    stale = [p.name for p in lessons if not (EXECUTED / p.name).exists()
             or _sources(EXECUTED / p.name) != _sources(p)]
    if stale:
        why = (f"no run of {', '.join(stale)} in {EXECUTED.relative_to(ROOT)}/ matches the notebook: "
               "tests/test_learner_path.py leaves them there (make test runs it first)")
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    tmp = tmp_path_factory.mktemp("book")
    (tmp / "executed").mkdir()
    for p in lessons:
        nbformat.write(_without_figure_text(nbformat.read(EXECUTED / p.name, as_version=4)), tmp / "executed" / p.name)
    build = book_build()
    index = build.build(tmp / "executed", out=tmp / "site", source=tmp / "source")
    pages = {p.stem: build._for_a_page(nbformat.read(tmp / "executed" / p.name, as_version=4)) for p in lessons}
    return index.parent, pages


@pytest.fixture(scope="module")
def site(browser, book):  # noqa: F811
    root, _ = book
    with serve(root) as server:
        yield server.url, crawl(browser, server.url), root


def _plain(heading: str) -> str:
    """A heading as text: markdown's backticks gone, typographic quotes (Sphinx's smartquotes) plain."""
    return heading.replace("`", "").translate(str.maketrans("\u2018\u2019\u201c\u201d", "''\"\""))


def test_every_lesson_page_renders_with_its_figures(book, site):
    base, crawled, _ = site
    _, lessons = book
    pages = crawled["pages"]
    problems = []
    for stem, nb in lessons.items():
        info = pages.get(f"{base}{stem}.html")
        if info is None:
            problems.append(f"{stem}.html: no page, or none linked from index.html")
            continue
        title = next(c.source.splitlines()[0].lstrip("# ").strip() for c in nb.cells if c.cell_type == "markdown")
        if info["status"] != 200 or _plain(info["h1"]) != _plain(title):
            problems.append(f"{stem}.html: status {info['status']}, heading {info['h1']!r} (want {title!r})")
        figures = sum(1 for c in nb.cells if c.cell_type == "code" for o in c.outputs
                      if any(m in o.get("data", {}) for m in IMAGE_MIMES))
        shown = [i for i in info["images"] if i["output"]]
        if len(shown) != figures:
            problems.append(f"{stem}.html: {len(shown)} figures on the page, the notebook has {figures}")
        problems += [f"{stem}.html: an image that does not load: {i['src']}" for i in info["images"] if not i["ok"]]
        if info["tracebacks"]:
            problems.append(f"{stem}.html: {info['tracebacks']} traceback(s) in its outputs")
    assert sum(len(i["images"]) for i in pages.values()) > 0, "no figure anywhere in the site"
    assert not problems, "\n".join(problems)


def test_no_broken_links_inside_the_site(site):
    base, crawled, root = site
    assert len(crawled["pages"]) > 1, crawled
    problems = link_problems(crawled, base, root)
    assert not problems, "\n".join(problems)


def test_the_checks_catch_a_broken_page(browser, tmp_path):  # noqa: F811
    """A planted site: a missing image, a link to a missing page and one to a missing anchor are each
    reported, and nothing else; a request for another host is refused, never made."""
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    (tmp_path / "_images").mkdir()
    Figure(figsize=(2, 2)).savefig(tmp_path / "_images" / "ok.png")
    plt.close("all")
    (tmp_path / "index.html").write_text(
        '<html><body><h1 id="top">Index</h1><div class="cell_output"><img src="_images/ok.png">'
        '<img src="_images/gone.png"></div><a href="lesson.html#top">fine</a> <a href="lesson.html#nowhere">bad'
        '</a> <a href="missing.html">gone</a> <img src="https://example.com/x.png"></body></html>')
    (tmp_path / "lesson.html").write_text('<html><body><h1 id="top">Lesson</h1><a href="index.html#top">back</a>'
                                          '</body></html>')
    with serve(tmp_path) as server:
        crawled = crawl(browser, server.url)
    base = server.url
    images = crawled["pages"][base + "index.html"]["images"]
    assert [i["ok"] for i in images] == [True, False, False] and crawled["outside"] == {"example.com"}
    assert link_problems(crawled, base, tmp_path) == [
        "index.html: a link to lesson.html#nowhere, an anchor that page does not have",
        "index.html: a link to missing.html, which the site does not have",
        f"a request failed: 404 {base}_images/gone.png",
        f"a request failed: 404 {base}missing.html"]
