"""What a learner reveals on demand: hints one at a time, answers to "Check yourself", and the
reference beside their own code once it passes.

* ``hint("vector_add")`` shows the next hint of that exercise at each call, from a gentle nudge to
  nearly the answer (never the solution's code); ``hint_button("vector_add")`` is the same as a
  button in a notebook. How many you have revealed is kept with your progress (``tkcourse.progress``).
* ``answers("03")`` is a button a question for lesson 03's "Check yourself"; ``answer("03", 2)`` is
  one answer as text. An answer that quotes a GPU figure computes it from the recorded table
  (``tkcourse/data/h200/bench.csv``).
* ``compare_with_reference(report, "matmul")`` shows your marked functions beside the reference's,
  only once ``report`` says your exercise passed.

The hints and answers are data, ``tkcourse/data/hints.json`` and ``answers.json``, checked against
a JSON schema (``HINTS_SCHEMA``, ``ANSWERS_SCHEMA``) when they are read.
"""

from __future__ import annotations

import ast
import difflib
import html
import json
import re
from functools import lru_cache
from pathlib import Path

from . import course, labels, progress, stubs

DATA = Path(__file__).resolve().parent / "data"

HINTS_SCHEMA: dict = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "description": "exercise name -> its hints, from a gentle nudge to nearly the answer",
    "type": "object",
    "additionalProperties": {
        "type": "array", "minItems": 2, "maxItems": 4,
        "items": {"type": "string", "minLength": 20},
    },
}

ANSWERS_SCHEMA: dict = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "description": "notebook (NN_name) -> the answers to its 'Check yourself' questions, in order; "
                   "{name} or {name:.0f} is a figure computed from the recorded table (tkcourse.reveal.figures)",
    "type": "object",
    "propertyNames": {"pattern": r"^\d\d_\w+$"},
    "additionalProperties": {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 10}},
}


class Text(str):
    """A string that shows as itself (no quotes) as a notebook cell's value and at a prompt."""

    def __repr__(self) -> str:
        return str(self)


@lru_cache(maxsize=None)
def _load(name: str, schema_key: str) -> dict:
    import jsonschema

    data = json.loads((DATA / name).read_text(encoding="utf-8"))
    jsonschema.validate(data, HINTS_SCHEMA if schema_key == "hints" else ANSWERS_SCHEMA)
    return data


def all_hints() -> dict[str, list[str]]:
    """Every exercise's hints (``tkcourse/data/hints.json``, validated)."""
    return _load("hints.json", "hints")


def all_answers() -> dict[str, list[str]]:
    """Every notebook's answers to "Check yourself" (``tkcourse/data/answers.json``, validated), as stored."""
    return _load("answers.json", "answers")


# ------------------------------------------------------------------------------------------
# hints
# ------------------------------------------------------------------------------------------


def _exercise(name: str) -> str:
    return course.resolve(name, all_hints(), what="exercise with hints")


def revealed(name: str) -> int:
    """How many hints of exercise ``name`` have been revealed on this machine."""
    name = _exercise(name)
    n = progress.load()["hints"].get(name, 0)
    return max(0, min(int(n) if isinstance(n, int) else 0, len(all_hints()[name])))


def hint(name: str) -> Text:
    """Reveal the next hint of exercise ``name`` (``"vector_add"``, ``"01"``) and return it.

    Each call shows one more, from a nudge to nearly the answer; after the last, it says so and shows
    the last again. ``reset_hints(name)`` starts over.
    """
    name = _exercise(name)
    hints = all_hints()[name]
    shown = revealed(name)
    if shown >= len(hints):
        return Text(f"No more hints for {name}: that was all {len(hints)}. The last one again:\n"
                    f"Hint {len(hints)} of {len(hints)}: {hints[-1]}")
    data = progress.load()
    data["hints"][name] = shown + 1
    try:
        progress.save(data)
    except OSError:  # a read-only checkout: the hint still shows, the count is not kept
        pass
    last = " (the last)" if shown + 1 == len(hints) else ""
    return Text(f"Hint {shown + 1} of {len(hints)}{last}: {hints[shown]}")


def hints_so_far(name: str) -> list[str]:
    """The hints of ``name`` revealed so far, in order."""
    name = _exercise(name)
    return all_hints()[name][:revealed(name)]


def reset_hints(name: str) -> None:
    """Hide the hints of ``name`` again: the next ``hint(name)`` is the first."""
    name = _exercise(name)
    data = progress.load()
    data["hints"].pop(name, None)
    progress.save(data)


def hint_button(name: str):
    """A button that reveals the next hint of ``name`` below it, with those already revealed shown."""
    import ipywidgets as widgets

    name = _exercise(name)
    total = len(all_hints()[name])
    out = widgets.Output()
    button = widgets.Button(icon="lightbulb-o", layout=widgets.Layout(width="auto"))

    def label():
        n = revealed(name)
        button.description = (f"Show a hint for {name} ({n + 1} of {total})" if n < total
                              else f"All {total} hints for {name} are shown")
        button.disabled = n >= total

    def show():
        with out:
            out.clear_output()
            for i, text in enumerate(hints_so_far(name), 1):
                print(f"Hint {i} of {total}: {text}")

    def click(_):
        hint(name)
        show()
        label()

    button.on_click(click)
    label()
    show()
    return widgets.VBox([button, out])


# ------------------------------------------------------------------------------------------
# answers to "Check yourself"
# ------------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def figures() -> dict:
    """The GPU figures answers quote, computed from the recorded H200 table (never typed)."""
    from .bench import load_records, select
    from .bench import peaks as _peaks
    from .bench.summary import ratio, recorded

    rows = load_records()
    p = _peaks.recorded(rows)
    copy, mm = p["copy_GBps"], p["matmul_TFLOPs"]
    va = select(rows, kernel="vector_add", provider="triton")
    va_top = max(va, key=lambda r: int(r["shape"]))
    va_low = min(va, key=lambda r: int(r["shape"]))
    out = {
        "copy_TBps": copy / 1000,
        "matmul_TFLOPs": mm,
        "ridge": mm * 1e12 / (copy * 1e9),
        "ai10_TFLOPs": 10 * copy * 1e9 / 1e12,
        "va_top_pct": 100 * va_top["median"] / copy,
        "va_top_n": int(va_top["shape"]),
        "va_low_pct": 100 * va_low["median"] / copy,
        "va_low_n": int(va_low["shape"]),
        "va_low_us": va_low["ms"] * 1000,
    }
    out["softmax_4096x1024_pct"] = 100 * recorded("softmax", "4096x1024", "float16", rows=rows) / copy
    out["softmax_4096x1024_us"] = 1000 * select(rows, kernel="softmax", provider="triton", shape="4096x1024",
                                                dtype="float16")[0]["ms"]
    out["softmax_copy_4096x1024_pct"] = 100 * recorded("softmax", "4096x1024", "float16", "copy", rows=rows) / copy
    out["mm1024_fp16_x"] = ratio("matmul", "1024x1024x1024", "float16", "cublas", rows=rows)
    out["mm1024_bf16_x"] = ratio("matmul", "1024x1024x1024", "bfloat16", "cublas", rows=rows)
    out["mm4096_bench_pct"] = 100 * ratio("matmul", "4096x4096x4096", "float16", "cublas", rows=rows)
    out.update(_sweep_figures())
    return out


def _sweep_figures() -> dict:
    """Lesson 04's figures, from the recorded sweeps (``tkcourse/data/sweeps/``)."""
    from . import autotune as at

    sweeps = {(s.kernel, s.shape, s.dtype): s for s in at.load_sweeps()}
    big, skinny = sweeps[("matmul", "4096x4096x4096", "float16")], sweeps[("matmul", "16x4096x4096", "float16")]
    winner, skinny_best = big.best().config, skinny.best()
    rows_16 = max(skinny.rate(r) for r in skinny.ok if r.config["BLOCK_M"] == 16)
    return {
        "big_winner": at.config_label(winner),
        "big_winner_bm": winner["BLOCK_M"],
        "big_winner_programs": 4096 // winner["BLOCK_N"],
        "skinny_winner": at.config_label(skinny_best.config),
        "skinny_winner_programs": 4096 // skinny_best.config["BLOCK_N"],
        "skinny_big_pct": 100 * skinny.rate(skinny.get(winner)) / skinny.rate(skinny_best),
        "skinny_bm16_pct": 100 * rows_16 / skinny.rate(skinny_best),
        "mm4096_sweep_pct": 100 * big.rate(big.best()) / big.baseline_rate(),
    }


def _lesson_notebook(lesson: str) -> str:
    return course.notebook(course.resolve(lesson))


def answer(lesson: str, number: int) -> Text:
    """The answer to question ``number`` (from 1) of lesson ``lesson``'s "Check yourself"."""
    nb = _lesson_notebook(lesson)
    stored = all_answers().get(nb, [])
    if not 1 <= number <= len(stored):
        from .errors import UserError

        raise UserError(f"{nb} has {len(stored)} questions in its 'Check yourself': ask for 1 to {len(stored)}")
    text = stored[number - 1]
    if "{" in text:
        text = text.format_map(figures())
    return Text(text)


def _html(text: str) -> str:
    """Plain text with `code` and $math$ for an HTMLMath widget."""
    text = html.escape(text, quote=False)
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", text)


def answers(lesson: str):
    """A button a question of lesson ``lesson``'s "Check yourself": each reveals (and hides) its answer."""
    import ipywidgets as widgets

    nb = _lesson_notebook(lesson)
    rows = []
    for k in range(1, len(all_answers().get(nb, [])) + 1):
        button = widgets.Button(description=f"Answer {k}", layout=widgets.Layout(width="auto"))
        shown = widgets.HTMLMath(value="")

        def toggle(_, k=k, button=button, shown=shown):
            if shown.value:
                shown.value, button.description = "", f"Answer {k}"
            else:
                shown.value, button.description = _html(answer(nb, k)), f"Hide answer {k}"

        button.on_click(toggle)
        rows.append(widgets.HBox([button, shown]))
    return widgets.VBox(rows)


# ------------------------------------------------------------------------------------------
# the reference beside yours, after a pass
# ------------------------------------------------------------------------------------------


def marked_functions(name: str) -> list[str]:
    """The functions (and methods, as ``Class.method``) of ``solutions/<name>.py`` that hold a part the
    learner writes (a ``### BEGIN SOLUTION`` region), in file order."""
    text = (stubs.SOLUTIONS / f"{name}.py").read_text(encoding="utf-8")
    lines = text.splitlines()
    found = []

    def visit(node, prefix=""):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body = "\n".join(lines[child.lineno - 1:child.end_lineno])
                if "### BEGIN SOLUTION" in body:
                    found.append(prefix + child.name)
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")

    visit(ast.parse(text))
    return found


def _function_text(path: Path, qualname: str) -> str | None:
    """The source of ``qualname`` in the file ``path`` (with its decorators), or None."""
    try:
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None
    lines = text.splitlines()
    node = tree
    for part in qualname.split("."):
        node = next((c for c in ast.iter_child_nodes(node)
                     if isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and c.name == part), None)
        if node is None:
            return None
    start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    return "\n".join(lines[start - 1:node.end_lineno]) + "\n"


def _reference_text(name: str, qualname: str) -> str:
    module = course.import_checkout(f"solutions.{name}")
    obj = module
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return labels.source(obj, reveal=True)


class Comparison:
    """Your functions beside the reference's: a side-by-side table in a notebook, a diff in a terminal."""

    def __init__(self, name: str, yours_path: str, pairs: list[tuple[str, str, str]]):
        self.name, self.yours_path, self.pairs = name, yours_path, pairs  # (function, yours, reference)

    def __repr__(self) -> str:
        out = [f"{self.name}: yours ({self.yours_path}) beside the reference (solutions/{self.name}.py)"]
        for fn, yours, ref in self.pairs:
            if yours == ref:
                out.append(f"\n{fn}: the same as the reference")
                continue
            diff = difflib.unified_diff(yours.splitlines(), ref.splitlines(), f"yours: {fn}", f"reference: {fn}",
                                        lineterm="", n=3)
            out.append("\n" + "\n".join(diff))
        return "\n".join(out)

    def _repr_html_(self) -> str:
        style = ("<style>.tkc-diff td{font-family:monospace;font-size:12px;white-space:pre-wrap;vertical-align:top}"
                 ".tkc-diff .diff_add{background:#d4f8d4}.tkc-diff .diff_chg{background:#fff3b0}"
                 ".tkc-diff .diff_sub{background:#ffd7d7}.tkc-diff .diff_next{display:none}</style>")
        parts = [style, f"<p><b>{html.escape(self.name)}</b>: yours (<code>{html.escape(self.yours_path)}</code>, "
                        f"left) beside the reference (<code>solutions/{html.escape(self.name)}.py</code>, right)</p>"]
        table = difflib.HtmlDiff(tabsize=4, wrapcolumn=72)
        for fn, yours, ref in self.pairs:
            if yours == ref:
                parts.append(f"<p><code>{html.escape(fn)}</code>: the same as the reference</p>")
                continue
            parts.append(f'<div class="tkc-diff">{table.make_table(yours.splitlines(), ref.splitlines(), "yours: " + fn, "reference: " + fn)}</div>')
        return "\n".join(parts)


def compare_with_reference(report, name: str | None = None):
    """Once ``report`` (from ``tkcourse.check.run``) says your exercise passed, your marked functions
    beside the reference's; before that, only a line saying that they appear once yours passes."""
    name = name or getattr(report, "lesson", None)
    if name not in stubs.lessons():
        from .errors import UserError

        raise UserError(f"no exercise named {name!r}; the exercises: {', '.join(course.in_order(stubs.lessons()))}")
    if getattr(report, "lesson", None) != name or not getattr(report, "passed", False):
        return Text(f"The reference's {name} appears here, beside yours, once your exercise passes the checker "
                    f"(run tkcourse.check.run({name!r}) above).")
    source = str(getattr(report, "source", "") or "")
    yours_path = source if source.endswith(".py") else f"exercises/{name}.py"
    root = course.CHECKOUT or stubs.ROOT
    pairs = []
    for fn in marked_functions(name):
        ref = _reference_text(name, fn)
        yours = _function_text(root / yours_path, fn)
        pairs.append((fn, yours if yours is not None else "(not found in your file)\n", ref))
    return Comparison(name, yours_path, pairs)
