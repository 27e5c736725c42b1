"""Measuring: times, bytes, FLOPs, and the one results table.

The table is long-format CSV, one row per (kernel, provider, shape, dtype, metric):
``kernel, provider, shape, dtype, metric, median, p20, p80, ms, host_us, graph_ms, bytes, flops, gpu,
triton, torch, date, command``. ``median/p20/p80`` are in ``metric`` units (GB/s or TFLOP/s; note that
the p20 of the time is the p80 of the rate); ``ms`` is the median time of the call as a learner makes
it (``do_bench``: host and GPU together, "eager"); ``bytes`` and ``flops`` are the analytic minimum
counts the rate was computed from.

Where a call's time goes, on the case as benchmarked (empty where not measured, and in rows recorded
before these columns existed: the reader gives None):

* ``host_us``: host microseconds per call, from the call to its return (``host_us()``): calls queued
  back to back in short bursts (``HOST_BURST`` calls, the GPU idle at the start of each), wall clock
  per call, median over the bursts; a row's providers take their bursts in turns
  (``host_us_interleaved``). A burst is far shorter than CUDA's launch queue, so a call never
  waits for the GPU to make room: the figure is the host's cost even where the GPU is the bottleneck
  (``ms`` then exceeds it). A call that synchronizes (``.item()``, a fresh ``cudaMalloc``) waits for the
  GPU; no benchmarked call does.
* ``graph_ms``: median milliseconds of the same call replayed from a CUDA graph (``graph_ms()``): the
  GPU's work with no host in the way. Where ``ms`` is well above ``graph_ms``, the host sets the speed.

A row's providers take turns for ``ms`` and ``graph_ms`` too (``run``, ``TIME_ROUNDS``): the GPU's clock
moves with its power draw during a run, and a ratio to the peer should not depend on which of them ran
while the clock was high. (Rows recorded before 2026-12-04 16:55 UTC timed each provider in one go;
PROVENANCE.md says which.)
"""

from __future__ import annotations

import csv
import datetime
import io
import itertools
import json
import math
import platform
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .. import mode
from ..errors import UserError

COLUMNS = ["kernel", "provider", "shape", "dtype", "metric", "median", "p20", "p80", "ms", "host_us", "graph_ms",
           "bytes", "flops", "gpu", "triton", "torch", "date", "command"]
#: Columns a table may lack (it was recorded before they existed): read as None, written empty.
OPTIONAL = ("host_us", "graph_ms")
DATA = Path(__file__).resolve().parent.parent / "data"
RECORDED = DATA / "h200" / "bench.csv"
#: The recorded run of lesson 11's model, whose rows (tokens/s by path) are not kernel rows:
#: ``research/llm/bench_llm.py --json``'s output as written, with its provenance beside it.
RECORDED_MODEL = DATA / "h200" / "llm.json"
_NUMBER = {"type": "number", "minimum": 0}
MODEL_RUN_SCHEMA = {
    "type": "object",
    "required": ["provenance", "rows", "notes"],
    "properties": {
        "provenance": {"type": "object", "required": ["gpu", "torch", "triton", "date", "command", "commit"],
                       "properties": {k: {"type": "string"} for k in ("gpu", "torch", "triton", "date", "command",
                                                                       "commit")}},
        "rows": {"type": "array", "minItems": 1, "items": {
            "type": "object", "required": ["path", "batch", "tok_s", "ms_step", "gb_step", "floor_pct"],
            "properties": {"path": {"type": "string"}, "batch": {"type": "integer", "minimum": 1},
                           "tok_s": _NUMBER, "ms_step": _NUMBER, "gb_step": _NUMBER, "floor_pct": _NUMBER}}},
        "notes": {"type": "object"},
    },
}


class RecordsFormatError(UserError):
    """A results file that is not the course's table; the message names the file, the line and the field."""


class RecordsNotFound(UserError, FileNotFoundError):
    """No results file at the path given (a ``FileNotFoundError`` too, for code that catches that)."""


#: The largest results file ``load_records`` reads: the recorded table is a few dozen KiB.
MAX_RECORDS_BYTES = 64 << 20
#: Metrics a row may carry: rates (higher is better) and peak memory in GB (lower is better).
METRICS = ("GB/s", "TFLOP/s", "GB")


# ------------------------------------------------------------------------------------------
# counting
# ------------------------------------------------------------------------------------------


def bytes_moved(*tensors) -> int:
    """Bytes of the given tensors (each read or written once): sum of numel * element_size."""
    return int(sum(t.numel() * t.element_size() for t in tensors))


def matmul_flops(M: int, N: int, K: int) -> int:
    return 2 * M * N * K


def attention_flops(B: int, H: int, N: int, D: int, causal: bool = False, backward: bool = False) -> int:
    """4*B*H*N*N*D for the forward (two matmuls), half when causal; the backward is 2.5x that."""
    f = 4 * B * H * N * N * D
    if causal:
        f //= 2
    return int(f * 2.5) if backward else f


# ------------------------------------------------------------------------------------------
# timing
# ------------------------------------------------------------------------------------------


def refuse_in_interpreter() -> None:
    if mode.INTERPRET:
        raise RuntimeError("no GPU: kernels run in Triton's interpreter, whose timings say nothing about GPU "
                           "speed. Read the recorded H200 figures instead (tkcourse.bench.load_records()).")


def measure(fn: Callable[[], object], warmup: int = 25, rep: int = 100) -> tuple[float, float, float]:
    """(median, p20, p80) milliseconds of ``fn()`` on the GPU, from ``triton.testing.do_bench``.

    Refuses in the interpreter: timings there say nothing about GPU speed.
    """
    return median_p20_p80(eager_times(fn, warmup=warmup, rep=rep))


def eager_times(fn: Callable[[], object], warmup: float = 25, rep: float = 100) -> list[float]:
    """Every timed call's milliseconds from ``triton.testing.do_bench`` (``warmup`` and ``rep`` in ms, as
    there: the L2 zeroed before each call). Refuses in the interpreter."""
    refuse_in_interpreter()
    import triton

    return [float(t) for t in triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="all")]


def median_p20_p80(times: list[float]) -> tuple[float, float, float]:
    """(median, p20, p80) of ``times``, interpolated between neighbours as ``do_bench``'s quantiles are."""
    if not times:
        raise ValueError("no times to summarize")
    xs = sorted(times)

    def q(f):
        pos = f * (len(xs) - 1)
        lo = int(pos)
        hi = min(lo + 1, len(xs) - 1)
        return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)

    return q(0.5), q(0.2), q(0.8)


#: Rounds in which a bench row's providers take turns for their eager (``ms``) and graph (``graph_ms``)
#: times, each round a third of the calls: the H200's SM clock falls from 1980 to about 1620 MHz within
#: a hundred back-to-back replays once the board reaches its power limit (``research/hopper/power_probe.py``),
#: so a provider timed alone, after another one's run, meets another clock; in turns they meet them alike.
TIME_ROUNDS = 3


#: Calls a burst of ``host_us`` queues back to back: far fewer than CUDA's launch queue holds (about a
#: thousand launches), so even a call of several kernels never waits for the GPU to make room.
HOST_BURST = 10


#: Calls ``host_us`` times for a bench row: 50 bursts, so that the median is steady to a few percent.
HOST_CALLS = 500

#: Rounds ``host_us_interleaved`` spreads each call's bursts over: a bench row's providers take turns,
#: five bursts each a round, so a slow spell of the host (another process, a clock change) falls on
#: all of them alike instead of on whichever happened to be running.
HOST_ROUNDS = 10


def host_us(fn: Callable[[], object], n: int = HOST_CALLS, burst: int = HOST_BURST) -> float:
    """Host microseconds per call of ``fn``, from the call to its return (Python, the launcher, the driver).

    ``n`` calls in bursts of ``burst`` queued back to back, the GPU idle at the start of each burst
    (a synchronize, not timed); the median over the bursts of the wall clock per call. A burst never
    fills the launch queue, so the figure is the host's cost whether or not the GPU is the bottleneck.
    Python's garbage collector is off while it runs (as ``timeit`` does), so that a collection
    started by the allocations of one case is not charged to whichever case happens to be running.
    """
    return host_us_interleaved([fn], n, burst, rounds=1)[0]


def host_us_interleaved(fns: list, n: int = HOST_CALLS, burst: int = HOST_BURST,
                        rounds: int = HOST_ROUNDS) -> list[float]:
    """``host_us`` of each of ``fns``, their bursts taken in turns: ``rounds`` rounds, each giving
    every function its share of the ``n // burst`` bursts, one function after the other. What the
    bench measures a row's providers with, so that their ratio is not the host's drift between them."""
    refuse_in_interpreter()
    import gc
    import time

    import torch

    for fn in fns:
        fn()
    torch.cuda.synchronize()
    burst = max(1, min(burst, n))
    bursts = max(1, n // burst)
    rounds = max(1, min(rounds, bursts))
    per_call: list[list[float]] = [[] for _ in fns]
    collecting = gc.isenabled()
    gc.disable()
    try:
        for r in range(rounds):
            share = bursts // rounds + (r < bursts % rounds)  # the bursts of this round, per function
            for times, fn in zip(per_call, fns):
                for _ in range(share):
                    start = time.perf_counter()
                    for _ in range(burst):
                        fn()
                    times.append((time.perf_counter() - start) / burst)
                    torch.cuda.synchronize()
    finally:
        if collecting:
            gc.enable()
    return [sorted(t)[len(t) // 2] * 1e6 for t in per_call]


def capture(fn: Callable[[], object], on_warmup_stream: bool = False):
    """``(graph, out)``: ``fn`` run twice on a side stream (compiling, autotuning, allocating what
    it keeps), then captured once into a ``torch.cuda.CUDAGraph``; ``out`` is what the captured call
    returned, the tensors each ``graph.replay()`` writes again. A call that cannot be captured raises.
    The capture runs on torch's own capture stream, or with ``on_warmup_stream`` on the side stream
    that warmed up (where a launcher that keeps state per stream, as the online softmax's exchange
    slots, then captures with what it kept)."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream if on_warmup_stream else None):
        out = fn()
    torch.cuda.synchronize()
    return graph, out


class GraphTimer:
    """``fn`` run twice on a side stream (compiling, autotuning), captured once into a CUDA graph and
    replayed ten times; then ``times(rep)`` replays it ``rep`` more times, the L2 flushed before each
    (``graph_ms``'s ``flush``), and gives each replay's milliseconds. A launcher that cannot be captured
    raises here. ``cache``: the buffer the flush zeroes or reads (one is made if not given)."""

    def __init__(self, fn: Callable[[], object], flush: str = "zero", cache=None):
        if flush not in ("zero", "read"):
            raise ValueError(f"flush = {flush!r}: 'zero' or 'read'")
        refuse_in_interpreter()
        import torch

        self.graph, _ = capture(fn)
        self.flush = flush
        self.cache = _flush_buffer() if cache is None else cache
        self.sink = torch.empty(1, dtype=self.cache.dtype, device=self.cache.device)
        for _ in range(10):
            self.graph.replay()

    def times(self, rep: int = 100) -> list[float]:
        import torch
        from triton import runtime

        starts = [torch.cuda.Event(enable_timing=True) for _ in range(rep)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(rep)]
        for start, end in zip(starts, ends):
            if self.flush == "zero":
                runtime.driver.active.clear_cache(self.cache)
            else:
                torch.amax(self.cache.view(-1), dim=0, keepdim=True, out=self.sink)
            start.record()
            self.graph.replay()
            end.record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def graph_ms(fn: Callable[[], object], rep: int = 100, flush: str = "zero") -> float:
    """Median milliseconds of ``fn`` replayed from a CUDA graph: the GPU's work without the launch path.

    ``fn`` is run twice on a side stream (compiling, autotuning), then captured once; the L2 cache is
    flushed before each timed replay: ``flush="zero"`` zeroes a buffer larger than the L2, as ``do_bench``
    does, which leaves the L2 full of modified lines that the timed kernel's own reads must first write
    back; ``"read"`` reads that buffer instead, which leaves nothing to write back, as a model's kernel finds
    the L2 after the previous layer's weights were read. A launcher that cannot be captured raises.
    """
    times = sorted(GraphTimer(fn, flush).times(rep))
    return times[len(times) // 2]


@dataclass
class Case:
    """One measurement: ``fn`` launches ``provider``'s version of ``kernel`` once."""

    kernel: str
    provider: str
    shape: str
    dtype: str
    fn: Callable[[], object]
    bytes: int = 0
    flops: int = 0
    #: False: no ``graph_ms`` (a call that a CUDA graph cannot capture, such as autograd's backward;
    #: a failed capture can leave torch's CUDA random generator unusable for the rest of the process).
    graph: bool = True
    #: What ``graph_ms`` replays in place of ``fn``, where a graph would capture ``fn`` as something else
    #: than what it launches eagerly (a copy: ``peers.copy_case``). None: ``fn`` itself.
    graph_fn: Callable[[], object] | None = None

    @property
    def metric(self) -> str:
        return "TFLOP/s" if self.flops else "GB/s"

    def rate(self, ms: float) -> float:
        return self.flops / ms * 1e-9 if self.flops else self.bytes / ms * 1e-6


def provenance(command: str | None = None) -> dict:
    import torch
    import triton

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"CPU ({platform.processor() or 'unknown'})"
    return {"gpu": gpu, "triton": triton.__version__, "torch": torch.__version__,
            "date": datetime.date.today().isoformat(),
            "command": command if command is not None else " ".join(["python -m tkcourse"] + sys.argv[1:])}


def run(cases, *, warmup: int = 25, rep: int = 100, command: str | None = None, progress=print,
        host: bool = True, on_row=None, rounds: int | None = None) -> list[dict]:
    """Measure each case; a case that fails is reported and skipped, the others go on.

    ``host``: also each case's ``host_us`` and ``graph_ms`` (see the module's docstring); a call that
    a CUDA graph cannot capture gets an empty ``graph_ms`` and a line saying why. Consecutive cases
    of one shape and dtype (a row's providers) are measured together, taking turns: their eager times
    in ``rounds`` rounds (``TIME_ROUNDS``; each round ``rep / rounds`` ms of calls a case), then their
    graph replays the same way (``100 / rounds`` a case a round), then their ``host_us``
    (``host_us_interleaved``); each figure is the median of a case's times from every round.
    ``on_row``: called with each row as soon as its shape is measured (the CLI saves it then, so a run
    stopped by a timeout keeps the rows it measured).
    """
    rounds = max(1, TIME_ROUNDS if rounds is None else int(rounds))
    prov, rows, i = provenance(command), [], 0
    cache = None
    for _, group in itertools.groupby(cases, key=lambda c: (c.shape, c.dtype)):  # lazily, a shape at a time
        group = list(group)
        numbers = list(range(i + 1, i + 1 + len(group)))
        i += len(group)
        eager = _in_turns(group, numbers, [lambda c=c: eager_times(c.fn, warmup=warmup / rounds, rep=rep / rounds)
                                           for c in group], rounds, progress, failed="FAILED")
        measured = []
        for j, c, times in zip(numbers, group, eager):
            if times is None:
                continue
            med, p20, p80 = median_p20_p80(times)
            row = dict(kernel=c.kernel, provider=c.provider, shape=c.shape, dtype=c.dtype, metric=c.metric,
                       median=round(c.rate(med), 4), p20=round(c.rate(p80), 4), p80=round(c.rate(p20), 4),
                       ms=round(med, 6), bytes=c.bytes, flops=c.flops, **prov)
            measured.append((j, c, row))
        if host and measured:
            if cache is None:
                cache = _flush_buffer()
            timers = [(_timed(c, "graph_ms", lambda c=c: GraphTimer(c.graph_fn or c.fn, cache=cache), progress, j,
                              rounded=False) if c.graph else None) for j, c, _ in measured]
            per_round = max(1, 100 // rounds)
            graphs = _in_turns([c for _, c, _ in measured], [j for j, _, _ in measured],
                               [None if t is None else (lambda t=t: t.times(per_round)) for t in timers], rounds,
                               progress, failed="no graph_ms")
            del timers  # the graphs' memory goes before the host times' calls
            for (j, c, row), times in zip(measured, graphs):
                row["graph_ms"] = None if times is None else round(sorted(times)[len(times) // 2], 6)
            for (j, c, row), t in zip(measured, _host_times([m[1] for m in measured], progress, [m[0] for m in measured])):
                row["host_us"] = t
        for j, c, row in measured:
            rows.append(row)
            if on_row is not None:
                on_row(row)
            extra = f"  host {row['host_us']:.1f} us" if row.get("host_us") is not None else ""
            extra += f"  graph {row['graph_ms'] * 1e3:.1f} us" if row.get("graph_ms") is not None else ""
            progress(f"[{j}] {c.kernel:<22} {c.provider:<14} {c.shape:<22} {c.dtype:<9} "
                     f"{row['median']:>9.1f} {c.metric}{extra}")
        del measured  # this shape's tensors go before the next shape's are made
    return rows


def _flush_buffer():
    """The buffer ``GraphTimer``'s flush zeroes or reads, made once a run."""
    from triton import runtime

    return runtime.driver.active.get_empty_cache_for_benchmark()


def _in_turns(cases: list, numbers: list, timers: list, rounds: int, progress, failed: str) -> list:
    """Each case's times from its timer (a function giving a list of milliseconds; None: not timed), the
    cases taking turns ``rounds`` times; a case whose timer raises is reported (``failed``) and gets None."""
    times: list = [None if t is None else [] for t in timers]
    for _ in range(rounds):
        for k, (c, j, timer) in enumerate(zip(cases, numbers, timers)):
            if times[k] is None:
                continue
            try:
                times[k] += timer()
            except Exception as e:  # keep going: one broken case must not lose a whole run
                progress(f"[{j}] {c.kernel} {c.provider} {c.shape} {c.dtype}: {failed} {type(e).__name__}: "
                         f"{str(e)[:300]}")
                times[k] = None
    return [t if t else None for t in times]


def _timed(c: Case, column: str, timer, progress, i: int, rounded: bool = True):
    """``timer()`` (rounded), or None and a line saying why (an uncapturable call keeps its eager time)."""
    try:
        return round(timer(), 6) if rounded else timer()
    except Exception as e:  # noqa: BLE001
        progress(f"[{i}] {c.kernel} {c.provider} {c.shape}: no {column} ({type(e).__name__}: {str(e)[:160]})")
        return None


def _host_times(cases: list, progress, numbers: list) -> list:
    """``host_us`` of the cases, interleaved; if one of them fails there, each alone (the failing one None)."""
    try:
        return [round(t, 6) for t in host_us_interleaved([c.fn for c in cases])]
    except Exception:  # noqa: BLE001
        return [_timed(c, "host_us", lambda c=c: host_us(c.fn), progress, i) for c, i in zip(cases, numbers)]


# ------------------------------------------------------------------------------------------
# the table
# ------------------------------------------------------------------------------------------


def write_records(rows: list[dict], path, append: bool = False) -> Path:
    """Write ``rows`` (a missing or None field is left empty). ``append`` to a table of older columns
    rewrites it first with today's header, its rows' new columns empty."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not (append and path.exists())
    if not new:
        with open(path, newline="") as f:
            header = next(csv.reader(f), [])
        if header != COLUMNS:
            with open(path, newline="") as f:
                old = list(csv.DictReader(f))
            rows = old + list(rows)
            new = True
    with open(path, "w" if new else "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        if new:
            w.writeheader()
        for r in rows:
            w.writerow({k: ("" if r.get(k) is None else r.get(k, "")) for k in COLUMNS})
    return path


_FLOATS = ("median", "p20", "p80", "ms")
_INTS = ("bytes", "flops")
_TEXTS = ("kernel", "provider", "shape", "dtype", "metric")  # must be non-empty


def _read_text(path: Path) -> str:
    """The file's text, or a RecordsFormatError/RecordsNotFound naming it (folder, too big, not UTF-8)."""
    if not path.exists():
        raise RecordsNotFound(f"no results table at {path}; on a GPU, `python -m tkcourse bench` writes one")
    if not path.is_file():
        raise RecordsFormatError(f"{path} is a folder, not a results table (give the path of a .csv file)")
    size = path.stat().st_size
    if size > MAX_RECORDS_BYTES:
        raise RecordsFormatError(f"{path}: {size} bytes, more than a results table holds "
                                 f"(at most {MAX_RECORDS_BYTES}); is it the right file?")
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise RecordsFormatError(f"{path}, line {line}: not UTF-8 text (byte {data[e.start]:#04x} at offset "
                                 f"{e.start}); not a tkcourse results table") from None


def _typed_row(r: dict, fields) -> dict:
    """The row with numbers parsed; ValueError saying which field is wrong. ``fields``: the header's columns."""
    if None in r:
        raise ValueError(f"{len(fields) + len(r[None])} fields, expected {len(fields)} (a comma too many?)")
    short = [k for k in fields if r.get(k) is None]
    if short:
        raise ValueError(f"the row stops before {short[0]!r}: {len(fields) - len(short)} of {len(fields)} fields "
                         "(the file was cut short?)")
    for k in OPTIONAL:  # absent (an older table) or empty (not measured): None
        text = (r.get(k) or "").strip()
        if not text:
            r[k] = None
            continue
        try:
            r[k] = float(text)
        except ValueError:
            raise ValueError(f"{k} is {text!r}, not a number") from None
        if not math.isfinite(r[k]) or r[k] <= 0:
            raise ValueError(f"{k} is {r[k]}, expected a finite number > 0 (or empty: not measured)")
    for k in _TEXTS:
        if not r[k].strip():
            raise ValueError(f"{k} is empty")
    if r["metric"] not in METRICS:
        raise ValueError(f"metric is {r['metric']!r}, expected one of {', '.join(METRICS)}")
    for k in _FLOATS:
        try:
            r[k] = float(r[k])
        except ValueError:
            raise ValueError(f"{k} is {r[k]!r}, not a number") from None
        if not math.isfinite(r[k]) or r[k] < 0:
            raise ValueError(f"{k} is {r[k]}, expected a finite number >= 0")
    for k in _INTS:
        text = r[k].strip() or "0"
        if not text.isdigit():
            raise ValueError(f"{k} is {r[k]!r}, expected a whole number >= 0")
        r[k] = int(text)
    if r["metric"] != "GB":  # a rate: timed, so positive, and its quantiles in order
        for k in _FLOATS:
            if r[k] <= 0:
                raise ValueError(f"{k} is {r[k]}; a measured {r['metric']} row needs it > 0")
        counted = "flops" if r["metric"] == "TFLOP/s" else "bytes"
        if r[counted] <= 0:
            raise ValueError(f"metric {r['metric']} needs {counted} > 0 (the count the rate comes from), got {r[counted]}")
    if r["date"]:
        try:
            datetime.date.fromisoformat(r["date"])
        except ValueError:
            raise ValueError(f"date is {r['date']!r}, expected YYYY-MM-DD") from None
    return r


#: Lesson 12's recorded schedule: proton's intra-kernel profile of the ping-pong attention on the H200, each
#: consumer warpgroup's phases per CTA (``research/hopper/schedule_probe.py --record``'s output, as written).
RECORDED_SCHEDULE = DATA / "h200" / "proton" / "pingpong_schedule.json"
_PHASE = {"type": "array", "minItems": 3, "maxItems": 3,
          "prefixItems": [{"enum": ["wait", "mma", "softmax"]}, _NUMBER, _NUMBER]}
SCHEDULE_RUN_SCHEMA = {
    "type": "object",
    "required": ["provenance", "unit", "runs"],
    "properties": {
        "provenance": MODEL_RUN_SCHEMA["properties"]["provenance"],
        "unit": {"type": "string"},
        "runs": {"type": "array", "minItems": 1, "items": {
            "type": "object", "required": ["kernel", "n", "causal", "ctas"],
            "properties": {"kernel": {"type": "string"}, "n": {"type": "integer", "minimum": 1},
                           "causal": {"type": "boolean"},
                           "ctas": {"type": "object", "minProperties": 1, "additionalProperties": {
                               "type": "object", "minProperties": 1,
                               "additionalProperties": {"type": "array", "items": _PHASE}}}}}},
    },
}


def _load_json(path: Path, schema: dict) -> dict | None:
    """``path``'s JSON checked against ``schema``, None when the file does not exist; RecordsFormatError
    naming the file and what is wrong otherwise."""
    import jsonschema

    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        jsonschema.validate(data, schema)
    except ValueError as e:
        raise RecordsFormatError(f"{path}: not valid JSON ({e})") from None
    except jsonschema.ValidationError as e:
        where = "/".join(str(p) for p in e.absolute_path) or "the top level"
        raise RecordsFormatError(f"{path}: {where}: {e.message}") from None
    return data


def load_schedule_run(path=None) -> dict | None:
    """Lesson 12's recorded schedule (``RECORDED_SCHEDULE`` by default): ``{"provenance", "unit", "runs"}``,
    each run ``{"kernel", "n", "causal", "ctas": {cta: {warpgroup: [[phase, start, end], ...]}}}``; None when
    none is recorded. A file that does not match ``SCHEDULE_RUN_SCHEMA`` raises ``RecordsFormatError``."""
    return _load_json(Path(path) if path is not None else RECORDED_SCHEDULE, SCHEDULE_RUN_SCHEMA)


def load_model_run(path=None) -> dict | None:
    """The recorded run of lesson 11's model (``RECORDED_MODEL`` by default): ``{"provenance", "rows",
    "notes"}``, or None when no run is recorded. A file that does not match ``MODEL_RUN_SCHEMA`` raises
    ``RecordsFormatError`` naming the file and what is wrong."""
    return _load_json(Path(path) if path is not None else RECORDED_MODEL, MODEL_RUN_SCHEMA)


def load_records(path=None) -> list[dict]:
    """Rows of a results table (the recorded H200 one by default), typed.

    Every row and field is checked: the columns, the number of fields (a file cut in the middle of
    a row is refused, not read with a short number), numbers finite and in range. A malformed file
    raises ``RecordsFormatError`` (a ``UserError``) naming the file, the line and the field.
    """
    path = Path(path) if path is not None else RECORDED
    text = _read_text(path)
    if text and not text.endswith("\n"):
        raise RecordsFormatError(f"{path}, line {text.count(chr(10)) + 1}: the file ends in the middle of a row "
                                 "(cut short while being written or copied?); write it again")
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        fields = reader.fieldnames or []
        missing = [c for c in COLUMNS if c not in fields and c not in OPTIONAL]
        if missing:
            raise RecordsFormatError(f"{path}: not a tkcourse results table: missing column(s) {', '.join(missing)} "
                                     f"(expected {', '.join(COLUMNS)})")
        rows = []
        for r in reader:
            try:
                rows.append(_typed_row(r, fields))
            except ValueError as e:
                shown = {k: v for k, v in r.items() if k is not None}
                raise RecordsFormatError(f"{path}, line {reader.line_num}: {e} (row {shown})") from None
    except csv.Error as e:
        raise RecordsFormatError(f"{path}, line {reader.line_num}: not CSV ({e})") from None
    return rows


def select(rows, **where) -> list[dict]:
    """Rows whose columns equal ``where`` (a value may be a tuple of allowed values)."""
    def ok(r):
        return all(r.get(k) in (v if isinstance(v, tuple) else (v,)) for k, v in where.items())
    return [r for r in rows if ok(r)]


def lessons() -> list[str]:
    """Benchmarks with cases, in course order: the names in ``tkcourse.course.BENCHMARKS``."""
    from ..course import BENCHMARKS, in_order

    return in_order(BENCHMARKS)


def module_for(name: str):
    """A benchmark's module (``benchmarks.<name>``, found by name through ``tkcourse.course.BENCHMARKS``):
    ``cases()`` and, optionally, ``extra_rows(provenance) -> rows``."""
    from ..course import BENCHMARKS, import_checkout

    return import_checkout(BENCHMARKS[name])
