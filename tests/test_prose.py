"""Every sentence a learner reads is true.

* GPU figures (µs, GB/s, TFLOP/s, ratios such as 1.04x, percentages) are never typed into a lesson: the
  markdown says what the figures show in words, and a code cell prints the numbers from the recorded table
  (``tkcourse/data/h200/bench.csv``, read through ``tkcourse.bench``), so that they cannot drift from it;
  a code cell that prints a rate or a time reads that table or measures it now.
* The comparisons the markdown still makes in words ("beats torch at every shape") are checked against
  that table (``CLAIMS``).
* What the text says the learner writes is what the exercise leaves open: a lesson's "You write:" line
  names, in backticks, exactly the functions whose bodies hold a ``### BEGIN SOLUTION`` region in
  ``solutions/<part>.py`` (the regions the generated exercise replaces by stubs).

These tests read files only: a few seconds.
"""

from __future__ import annotations

import ast
import io
import json
import re
import tokenize
from pathlib import Path

import pytest

from tkcourse import course
from tkcourse.bench import load_records, select
from tkcourse.bench.summary import PROVIDERS, provider_label, ratio, recorded

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
SOLUTIONS = ROOT / "solutions"

UNITS = r"(?:µs|us|ns|ms|GB/s|GiB/s|TB/s|TFLOP/s|GFLOP/s|TFLOPS)"
#: A typed GPU figure: a number with a unit of time or rate, a ratio with a decimal point (1.6x, 0.98×), a
#: percentage, a whole-number speed-up ("2x faster"). Sizes, shapes, dtypes, counts (132 SMs, 4096 x 4096, 16 KiB) and whole-number ratios of bytes
#: that follow from counting (4x fewer bytes) are not figures of a GPU run and pass; so does 100%, which
#: names a ceiling itself, not a measurement.
FIGURE = re.compile(rf"\d(?:[\d,.]*\d)?\s*{UNITS}(?![\w/])"
                    r"|(?<![\w.])\d+\.\d+\s*[x×](?!\w)"
                    r"|(?<![\w.])\d+\s*(?:[x×]|times)\s+(?:faster|slower|the speed|as fast)"
                    r"|(?<![\w.])(?!100\s*%)\d+(?:\.\d+)?\s*%")

#: Typed numbers that are not figures of a GPU run: (notebook, the phrase) -> why it may stay typed.
ALLOWED: dict[tuple[str, str], str] = {
    ("00_welcome", "4.8 TB/s"): "the H200 data sheet's figure, quoted as the spec, not as a measurement",
    ("07_flash_attention_backward", "2.5× the forward's"): "the convention for counting the backward's FLOPs",
    ("05_online_softmax", "1.5x the minimum"): "bytes counted from the two passes' reads, no GPU run",
    ("08_launch", "30 µs a call"): "made-up numbers of a worked example, not measurements",
    ("08_launch", "30 µs and its graph time 10 µs"): "made-up numbers of a check-yourself question",
    ("08_launch", "under 40 us"): "the threshold the cell picks rows by, a choice, not a measurement",
}


def _cells(name: str) -> list[dict]:
    return json.loads((NOTEBOOKS / f"{name}.ipynb").read_text())["cells"]


def _text(cell: dict) -> str:
    return "".join(cell["source"])


def _prose(markdown: str) -> str:
    """What a reader reads as sentences: fenced code blocks and inline code taken out."""
    markdown = re.sub(r"```.*?```", " ", markdown, flags=re.S)
    return re.sub(r"`[^`\n]*`", " ", markdown)


def _strings_and_comments(code: str) -> list[str]:
    """The string constants (f-strings' fixed parts included) and the comments of a code cell."""
    lines = [ln for ln in code.splitlines() if not ln.lstrip().startswith(("%", "!"))]  # IPython magics
    src = "\n".join(lines) + "\n"
    tree = ast.parse(src)
    specs = {id(c) for n in ast.walk(tree) if isinstance(n, ast.FormattedValue) and n.format_spec
             for c in ast.walk(n.format_spec)}  # ``{x:>6.1%}``: a format, not text
    out = [n.value for n in ast.walk(tree)
           if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in specs]
    out += [t.string for t in tokenize.generate_tokens(io.StringIO(src).readline) if t.type == tokenize.COMMENT]
    return out


def typed_figures(name: str, cells: list[dict] | None = None) -> list[str]:
    """Each typed GPU figure of a notebook, as ``cell N: ...the sentence...``, the allowed ones left out."""
    found = []
    for i, cell in enumerate(_cells(name) if cells is None else cells):
        texts = [_prose(_text(cell))] if cell["cell_type"] == "markdown" else _strings_and_comments(_text(cell))
        for text in texts:
            flat = " ".join(text.split())
            spans = [(m.start(), m.end()) for (nb, phrase) in ALLOWED if nb == name
                     for m in re.finditer(re.escape(phrase), flat)]
            for m in FIGURE.finditer(flat):
                if any(a <= m.start() < b for a, b in spans):
                    continue
                found.append(f"cell {i}: ...{flat[max(0, m.start() - 60):m.end() + 30]}...")
    return found


def _lesson_names() -> list[str]:
    """The lessons' names in course order, whatever shape ``course.LESSONS`` has: (number, name) pairs, or
    records with a ``name``."""
    return [entry[1] if isinstance(entry, tuple) else getattr(entry, "name", entry) for entry in course.LESSONS]


def _notebooks() -> list[str]:
    """Every lesson's notebook, from the course's list of lessons."""
    return [course.notebook(n) for n in _lesson_names()]


@pytest.mark.parametrize("name", _notebooks())
def test_no_typed_gpu_figure(name):
    bad = typed_figures(name)
    assert not bad, (f"{name} types GPU figures; say it in words and print the numbers from the recorded table "
                     "(tkcourse.bench.summary.recorded / ratio) in a code cell:\n" + "\n".join(bad))


def test_a_typed_figure_is_caught():
    planted = [{"cell_type": "markdown", "source": ["The kernel trails cuBLAS at 1024³ (94 TFLOP/s), 0.98x; "
                                                     "a row split costs 15% at 4096 x 1024 on 132 SMs, "
                                                     "and lanes are 2x faster."]},
               {"cell_type": "code", "source": ['print("it reached 3.2 TB/s")  # 12.5 µs a call\n']},
               {"cell_type": "markdown", "source": ["A 4096 x 4096 tile, 16 KiB, 4x fewer bytes, `x % 4`, 100% of copy."]}]
    bad = typed_figures("planted", planted)
    assert [b.split(":")[0] for b in bad] == ["cell 0"] * 4 + ["cell 1"] * 2, bad


def test_every_allowed_phrase_is_still_there():
    """An allowance whose phrase has gone from its notebook is dropped, so the list stays short."""
    for (name, phrase), why in ALLOWED.items():
        text = " ".join(" ".join(_text(c) for c in _cells(name)).split())
        assert phrase in text, f"{name} no longer says {phrase!r} ({why}): drop it from ALLOWED"


#: What a code cell that prints a rate or a time must read it from: the recorded table (through
#: ``tkcourse.bench``) or a measurement it takes now.
RATE_SOURCES = ("bench.", "ratios(", "ratio(", "recorded(", "peaks", "load_records", "device_ceilings", "summary.",
                "timed_rows", "host_and_gpu_time", "do_bench", "timeit", "perf_counter", "proton",
                "torch.profiler")
RATE_WORDS = re.compile(r"GB/s|TB/s|TFLOP/s|(?<![\w/])(?:us|µs|ms)\b")


def rates_from_nowhere(cells: list[dict]) -> list[int]:
    """Code cells whose printed text names a rate or a time and that neither read the table nor measure."""
    return [i for i, c in enumerate(cells) if c["cell_type"] == "code"
            and RATE_WORDS.search(" ".join(_strings_and_comments(_text(c))))
            and not any(s in _text(c) for s in RATE_SOURCES)]


@pytest.mark.parametrize("name", _notebooks())
def test_printed_rates_come_from_the_table_or_a_measurement(name):
    assert not rates_from_nowhere(_cells(name)), (
        f"{name}: cells {rates_from_nowhere(_cells(name))} print a rate or a time without reading "
        "tkcourse/data/h200/bench.csv (tkcourse.bench) or measuring it")


def test_a_rate_from_nowhere_is_caught():
    cells = [{"cell_type": "code", "source": ['rate = 94\nprint(f"the kernel: {rate} TFLOP/s")\n']},
             {"cell_type": "code", "source": ['r = summary.recorded("matmul", "1024x1024x1024", "float16")\n'
                                              'print(f"the kernel: {r:.0f} TFLOP/s")\n']},
             {"cell_type": "code", "source": ['print("a tile of 128 x 128")\n']}]
    assert rates_from_nowhere(cells) == [0]


# ---------------------------------------------------------------------------------------------------------
# comparisons in words, against the table
# ---------------------------------------------------------------------------------------------------------

def _ratios(rows, kernel, peer, provider="triton", dtype=None) -> dict[tuple[str, str], float]:
    """``{(shape, dtype): provider's median / peer's}`` over the shapes where both are recorded."""
    mine = select(rows, kernel=kernel, provider=provider, **({"dtype": dtype} if dtype else {}))
    assert mine, f"no {kernel}/{provider} rows"
    return {(r["shape"], r["dtype"]): ratio(kernel, r["shape"], r["dtype"], peer, provider, rows) for r in mine
            if select(rows, kernel=kernel, provider=peer, shape=r["shape"], dtype=r["dtype"])}


def _ceiling(rows) -> float:
    """The copy ceiling of lesson 00 as recorded (one large copy)."""
    (copy,) = select(rows, kernel="copy")
    return copy["median"]


def _cols(shape: str) -> int:
    return int(shape.split("x")[-1])


def _all_above(kernel, peer, above=1.0, provider="triton"):
    return lambda rows: all(q > above for q in _ratios(rows, kernel, peer, provider).values())


def _vector_add_past_copy(rows):
    largest = max(int(r["shape"]) for r in select(rows, kernel="vector_add"))
    rates = [r["median"] / _ceiling(rows) for r in select(rows, kernel="vector_add", shape=str(largest))]
    return len(rates) > 1 and all(1.0 < q < 1.1 for q in rates)


def _softmax_longest_rows_closest(rows):
    by_cols = sorted(select(rows, kernel="softmax", provider="triton"), key=lambda r: _cols(r["shape"]))
    return [r["median"] for r in by_cols] == sorted(r["median"] for r in by_cols)


def _softmax_small_copy(rows):
    shortest = min((r["shape"] for r in select(rows, kernel="softmax", provider="copy")), key=_cols)
    copy = recorded("softmax", shortest, "float16", "copy", rows)
    return copy < 0.5 * _ceiling(rows) and abs(recorded("softmax", shortest, "float16", rows=rows) / copy - 1) < 0.15


def _plain_matmul_behind_small(rows):
    for dtype in ("float16", "bfloat16"):
        plain = {int(k[0].split("x")[0]): q for k, q in _ratios(rows, "matmul", "cublas", "triton-readable", dtype).items()}
        if not (plain[512] < 1 and plain[1024] < 1 and min(plain, key=plain.get) == 512):
            return False
    return True


def _online_beats_torch_most_on_long_rows(rows):
    q = _ratios(rows, "online_softmax", "torch")
    return all(v > 1 for v in q.values()) and min(q, key=q.get)[0] == min(q, key=lambda k: _cols(k[0]))[0]


def _online_below_copy_and_02_closer(rows):
    online = _ratios(rows, "online_softmax", "copy").values()
    fused = _ratios(rows, "softmax", "copy").values()
    return max(online) < 1 and min(fused) > max(online)


def _lesson_shapes(ratios: dict) -> dict:
    """Lessons 06 and 07's shapes: the grouped-query rows (``-Hq``) are the capstone model's."""
    return {k: q for k, q in ratios.items() if "-Hq" not in k[0]}


def _attention_against_sdpa(rows):
    """Forward: ahead of SDPA's FlashAttention everywhere; from N = 1024 within a sixth of cuDNN's rate at
    every shape and level with it (within 2%) at one shape at least."""
    flash = _lesson_shapes(_ratios(rows, "attention_fwd", "sdpa-flash", dtype="float16"))
    cudnn = _lesson_shapes(_ratios(rows, "attention_fwd", "sdpa-cudnn", dtype="float16"))
    large = {k[0]: q for k, q in cudnn.items() if "-N512-" not in k[0]}
    return all(q > 1 for q in flash.values()) and all(q > 5 / 6 for q in large.values()) and max(large.values()) > 0.98


def _attention_at_n512(rows):
    """Forward at N = 512: without a mask far ahead of both peers call by call (over 2x) and, replayed as CUDA
    graphs, still ahead by much less (under half that ratio); causal, within 5% of cuDNN."""
    def graph_ms(provider, shape):
        (r,) = select(rows, kernel="attention_fwd", provider=provider, shape=shape, dtype="float16")
        return r["graph_ms"]

    shapes = [k[0] for k in _ratios(rows, "attention_fwd", "sdpa-cudnn") if "-N512-" in k[0]]
    plain = [s for s in shapes if not s.endswith("-causal")]
    causal = [s for s in shapes if s.endswith("-causal")]
    if not plain or not causal:
        return False
    for shape in plain:
        for peer in ("sdpa-flash", "sdpa-cudnn"):
            eager = ratio("attention_fwd", shape, "float16", peer, rows=rows)
            graph = graph_ms(peer, shape) / graph_ms("triton", shape)
            if not (eager > 2 and 1 < graph < eager / 2):
                return False
    return all(abs(ratio("attention_fwd", s, "float16", "sdpa-cudnn", rows=rows) - 1) < 0.05 for s in causal)


def _backward_against_sdpa(rows):
    return (all(q > 1 for q in _lesson_shapes(_ratios(rows, "attention_bwd", "sdpa-flash", dtype="float16")).values())
            and all(0.5 < q < 1 for q in _lesson_shapes(_ratios(rows, "attention_bwd", "sdpa-cudnn",
                                                                 dtype="float16")).values()))


def _backward_lowest_at_short_sequences(rows):
    """Every provider's backward at its lowest rate at the shortest N (per head dim and dtype), its causal rows
    lower still there."""
    groups = {}  # (provider, dtype, head dim) -> {(N, causal): median}
    for r in select(rows, kernel="attention_bwd"):
        if r["provider"] in ("triton", "sdpa-flash", "sdpa-cudnn") and "-Hq" not in r["shape"]:
            _, _, n, d, *causal = r["shape"].split("-")
            groups.setdefault((r["provider"], r["dtype"], d), {})[int(n[1:]), bool(causal)] = r["median"]
    for rates in groups.values():
        plain = {n: v for (n, causal), v in rates.items() if not causal}
        shortest = min(plain)
        if min(plain.values()) != plain[shortest] or rates.get((shortest, True), float("inf")) >= plain[shortest]:
            return False
    return bool(groups)


def _matmul_4096_few_percent_behind(rows):
    return 0.85 < ratio("matmul", "4096x4096x4096", "float16", "cublas", provider="triton-readable", rows=rows) < 1


#: Comparisons the markdown makes in words: (notebook, phrase, what it claims, a test of it on the table).
CLAIMS = [
    ("05_online_softmax", "beats `torch.softmax` at every shape, by the widest margins where there are few, long rows",
     "the reference over PyTorch at every shape, least on the shortest rows", _online_beats_torch_most_on_long_rows),
    ("05_online_softmax", "stays below a copy of the same bytes at every shape",
     "under a same-size copy everywhere, and lesson 02's fused kernel closer to its copy", _online_below_copy_and_02_closer),
    ("05_online_softmax", "lesson 02's kernel came closer to the copy on rows that fit in one program",
     "lesson 02's fused kernel closer to its copy than the online one", _online_below_copy_and_02_closer),
    ("03_matmul", "The fastest path keeps close to cuBLAS at every size",
     "the fastest path within 10% of cuBLAS at every size and dtype", _all_above("matmul", "cublas", 0.9)),
    ("03_matmul", "the plain launch falls behind at the small sizes, furthest at 512",
     "the plain launch under cuBLAS at 512 and 1024, lowest at 512", _plain_matmul_behind_small),
    ("01_vector_add", "every one of them passes the copy line by a few percent",
     "every provider at the largest size over the copy ceiling, by under 10%", _vector_add_past_copy),
    ("00_welcome", "so it lands a little over 100%", "vector add over the copy ceiling, by under 10%",
     _vector_add_past_copy),
    ("02_softmax", "The longest rows come closest to the copy ceiling",
     "the fused softmax's rate grows with the row length", _softmax_longest_rows_closest),
    ("02_softmax", "a plain copy of the same bytes reaches only about as much as the softmax, under half of the copy",
     "at the shortest rows, the same-size copy under half the ceiling and the softmax within 15% of it",
     _softmax_small_copy),
    ("06_flash_attention", "At N = 1024 and above it comes within a sixth of cuDNN's attention, which NVIDIA "
     "tunes for Hopper, at every shape, and is level with it at one shape at least",
     "forward: over SDPA flash everywhere, within a sixth of cuDNN from N = 1024 and within 2% somewhere",
     _attention_against_sdpa),
    ("06_flash_attention", "Without a mask the course's kernel is far ahead of both in these timings",
     "forward at N = 512: over 2x both peers call by call, ahead by under half that as CUDA graphs",
     _attention_at_n512),
    ("06_flash_attention", "With the causal mask it is level with cuDNN",
     "forward at N = 512, causal: within 5% of cuDNN", _attention_at_n512),
    ("07_flash_attention_backward", "beats SDPA's FlashAttention-2 backend at every shape, and reaches most, not all",
     "backward: over SDPA flash everywhere, 50-100% of cuDNN", _backward_against_sdpa),
    ("07_flash_attention_backward", "Short sequences are the hardest case for all three, causal ones most",
     "backward: each provider's lowest rate at the shortest N, its causal row there lower still",
     _backward_lowest_at_short_sequences),
    ("04_autotune", "Triton's autotuned kernel a few percent to a tenth behind cuBLAS in either",
     "lesson 03's autotuned kernel at 4096³ fp16 at 85-100% of cuBLAS",
     _matmul_4096_few_percent_behind),
]


@pytest.mark.parametrize("name, phrase, claim, holds", CLAIMS, ids=[c[0] + ": " + c[2] for c in CLAIMS])
def test_words_agree_with_the_recorded_table(name, phrase, claim, holds):
    text = " ".join(" ".join(_text(c) for c in _cells(name) if c["cell_type"] == "markdown").split())
    assert phrase in text, f"{name} no longer says {phrase!r}: update CLAIMS"
    assert holds(load_records()), f"{name} says {phrase!r} ({claim}), and the recorded table disagrees"


def test_a_claim_the_table_contradicts_is_caught():
    rows = [dict(r) for r in load_records()]
    holds = {c[0] + c[1]: c[3] for c in CLAIMS}
    assert all(h(rows) for h in holds.values())
    for r in select(rows, kernel="online_softmax", provider="torch", shape="4096x32768"):
        r["median"] *= 10  # PyTorch now far ahead at one shape
    for r in select(rows, kernel="matmul", provider="cublas", shape="2048x2048x2048"):
        r["median"] *= 2  # cuBLAS twice as fast at one size
    for r in select(rows, kernel="softmax", provider="copy", shape="4096x1024"):
        r["median"] *= 3  # a small copy as fast as the ceiling
    failing = {c[0] for c in CLAIMS if not c[3](rows)}
    assert failing == {"05_online_softmax", "03_matmul", "02_softmax"}, failing


def test_recorded_figures_come_from_one_row():
    rows = load_records()
    r = select(rows, kernel="matmul", provider="cublas", shape="1024x1024x1024", dtype="float16")[0]
    assert recorded("matmul", "1024x1024x1024", "float16", "cublas") == r["median"]
    mine = recorded("matmul", "1024x1024x1024", "float16")
    assert ratio("matmul", "1024x1024x1024", "float16", "cublas") == pytest.approx(mine / r["median"])
    with pytest.raises(LookupError, match="0 rows of matmul/cublas 3x3x3"):
        recorded("matmul", "3x3x3", "float16", "cublas")
    with pytest.raises(LookupError, match="2 rows"):
        recorded("matmul", "1024x1024x1024", "float16", "cublas", rows=rows + [dict(r)])


def test_every_recorded_provider_has_plain_words():
    for provider in {r["provider"] for r in load_records()}:
        assert provider in PROVIDERS, f"provider {provider!r} of the recorded table has no plain label"
        assert provider_label(provider) != provider or provider == "copy"
    assert provider_label("something-new") == "something-new"


# ---------------------------------------------------------------------------------------------------------
# the text and the exercise
# ---------------------------------------------------------------------------------------------------------

def marked_functions(source: str) -> set[str]:
    """Qualified names (``SoftmaxPlan.__call__``) of the innermost functions that hold a BEGIN SOLUTION line."""
    starts = [i + 1 for i, line in enumerate(source.splitlines()) if line.strip() == "### BEGIN SOLUTION"]
    defs: list[tuple[str, ast.AST]] = []

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = prefix + child.name
                if not isinstance(child, ast.ClassDef):
                    defs.append((name, child))
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    out = set()
    for line in starts:
        holders = [(name, d) for name, d in defs if d.lineno <= line <= d.end_lineno]
        assert holders, f"a BEGIN SOLUTION region at line {line} outside any function"
        out.add(max(holders, key=lambda h: h[1].lineno)[0])
    return out


YOU_WRITE = re.compile(r"^\W*You write\W*:", re.M)


def you_write(cells: list[dict], parts: tuple[str, ...]) -> dict[str, set[str]]:
    """What the notebook's "You write:" lines name, by exercise: ``{part: {function names}}``.

    The convention: a markdown line that starts with "You write:" (bold or not) names, in backticks, the
    functions (``SoftmaxPlan.__call__`` for a method) and, where the lesson has several exercises, the file
    `exercises/<part>.py` they are in; with several files on one line, a name belongs to the file named
    before it. Nothing else on the line goes in backticks."""
    out: dict[str, set[str]] = {}
    for cell in cells:
        if cell["cell_type"] != "markdown":
            continue
        for m in YOU_WRITE.finditer(_text(cell)):
            items = re.findall(r"`([^`]+)`", _text(cell)[m.end():].split("\n\n")[0])
            files = [f.group(1) for f in map(lambda i: re.fullmatch(r"exercises/(\w+)\.py", i), items) if f]
            part = files[0] if len(files) == 1 else (parts[0] if len(parts) == 1 else None)
            for item in items:
                file = re.fullmatch(r"exercises/(\w+)\.py", item)
                if file:
                    part = file.group(1) if len(files) > 1 else part
                    continue
                assert re.fullmatch(r"[A-Za-z_][\w.]*", item), f"'You write:' has {item!r} in backticks, not a name"
                assert part is not None, f"'You write:' names {item!r} and no exercises/<part>.py before it"
                out.setdefault(part, set()).add(item)
    return out


def _lessons_with_exercises() -> list[str]:
    return [n for n in _lesson_names() if any((SOLUTIONS / f"{p}.py").is_file() for p in course.parts(n))]


@pytest.mark.parametrize("lesson", _lessons_with_exercises())
def test_the_text_names_what_the_exercise_leaves_open(lesson):
    parts = course.parts(lesson)
    named = you_write(_cells(course.notebook(lesson)), parts)
    for part in parts:
        marked = marked_functions((SOLUTIONS / f"{part}.py").read_text())
        assert named.get(part, set()) == marked, (
            f"{course.notebook(lesson)}'s 'You write:' line names {sorted(named.get(part, set()))} for "
            f"exercises/{part}.py, but the exercise leaves {sorted(marked)} to write")


def test_a_mismatch_between_text_and_exercise_is_caught():
    source = (SOLUTIONS / "vector_add.py").read_text()
    marked = marked_functions(source)
    assert marked == {"add_kernel", "add"}
    cells = [{"cell_type": "markdown", "source": ["## Your turn\n\nYou write: `add`, its launch.\n"]}]
    assert you_write(cells, ("vector_add",)) == {"vector_add": {"add"}} != {"vector_add": marked}
    two = [{"cell_type": "markdown", "source": ["**You write:** in `exercises/b.py`, `f` and `C.g`; in "
                                                "`exercises/a.py`, `h`.\n"]},
           {"cell_type": "markdown", "source": ["You write: `k` (its body),\nin `exercises/a.py`.\n\n`not_this`\n"]}]
    assert you_write(two, ("a", "b")) == {"a": {"h", "k"}, "b": {"f", "C.g"}}
    assert marked_functions("class C:\n    def g(self):\n        ### BEGIN SOLUTION\n        pass\n"
                            "        ### END SOLUTION\n") == {"C.g"}


# --- the recorded proton profile names kernels a learner can find -----------------------------------------
PROFILE = ROOT / "tkcourse" / "data" / "h200" / "proton" / "launch.txt"


def profiled_course_kernels(tree: str) -> set[str]:
    """The kernels the recorded tree lists under a "(course)" scope (its lines are indented two spaces a level)."""
    names, in_course = set(), False
    for line in tree.splitlines():
        depth = (len(line) - len(line.lstrip(" "))) // 2
        if depth == 1:
            in_course = "(course)" in line
        elif depth == 2 and in_course:
            names.add(line.split()[0])
    return names


def _defined() -> set[str]:
    return {m for path in SOLUTIONS.rglob("*.py") for m in re.findall(r"^def (\w+)\(", path.read_text(), re.M)}


def unexplained_kernels(tree: str, markdown: str) -> set[str]:
    """Profiled course kernels that no ``def`` under solutions/ defines and the lesson's text does not name."""
    defined = _defined()
    return {k for k in profiled_course_kernels(tree) if k not in defined and f"`{k}`" not in markdown}


def stale_names(tree: str, markdown: str) -> set[str]:
    """Names the text gives in backticks that neither solutions/ defines nor the recorded tree holds: an old
    name explained after the profile was recorded again."""
    defined, profiled = _defined(), profiled_course_kernels(tree)
    # a kernel's name has an underscore; a plain word in backticks (`proton`) has none
    return {n for n in re.findall(r"`(\w+)`", markdown) if n not in defined and n not in profiled and "_" in n}


@pytest.mark.skipif(not PROFILE.exists(), reason="no proton profile recorded")
def test_the_recorded_profile_names_kernels_the_learner_can_find():
    markdown = "\n".join(_text(c) for c in _cells("08_launch") if c["cell_type"] == "markdown")
    assert profiled_course_kernels(PROFILE.read_text()), "the recorded tree lists no course kernel: its format changed?"
    assert not unexplained_kernels(PROFILE.read_text(), markdown), (
        "lesson 08 shows a recorded proton tree naming a course kernel that solutions/ no longer defines; "
        "record it again (research/launch/proton_profile.py) or say in the text what the name was")
    profile_cell = next(_text(c) for c in _cells("08_launch") if c.get("id") == "3106227c")
    assert not stale_names(PROFILE.read_text(), profile_cell), "lesson 08 explains a kernel name the profile no longer has"


def test_a_renamed_profiled_kernel_is_caught():
    tree = "ROOT  0.0 us\n  softmax (course)  0.0 us\n    softmax_kernel  1.0 us, 20 launches\n" \
           "    _old_kernel  1.0 us, 20 launches\n  softmax (torch)  0.0 us\n    torch_kernel  1.0 us, 2 launches\n"
    assert profiled_course_kernels(tree) == {"softmax_kernel", "_old_kernel"}
    assert unexplained_kernels(tree, "text") == {"_old_kernel"}
    assert unexplained_kernels(tree, "it was named `_old_kernel`") == set()
    recorded_again = tree.replace("_old_kernel", "softmax_kernel")
    assert stale_names(recorded_again, "it was named `_old_kernel`") == {"_old_kernel"}
    assert stale_names(tree, "it was named `_old_kernel`, now `softmax_kernel`") == set()
