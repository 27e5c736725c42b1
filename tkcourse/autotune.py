"""Sweeps: time every config of a kernel at one problem shape, keep failures, save with provenance.

``sweep(make_fn, configs, kernel=..., shape=..., dtype=...)`` calls ``make_fn(config)`` for each
config (a dict such as ``{"BLOCK_M": 128, ..., "num_warps": 8, "num_stages": 3}``) to get a
zero-argument callable that launches exactly that config, times it, and records the median
(with p20/p80) or, when it fails, why (``OutOfResources`` -> "out of shared memory", any other
exception -> its type and message); one failure never stops the sweep.

On a GPU the time comes from ``triton.testing.do_bench``. In Triton's interpreter it is a
wall-clock timer, and the sweep is flagged ``timings_meaningful = False``: those numbers measure
Python, not a GPU. (``triton.autotune`` and ``do_bench`` cannot run there at all.)

A ``Sweep`` saves to, and loads from, one JSON file (schema ``SCHEMA``) with its provenance;
``load_sweep`` raises ``SweepFormatError`` naming the key or entry that is wrong.

On a GPU, ``python -m tkcourse.autotune matmul --shapes 4096x4096x4096 --out tkcourse/data/sweeps/``
sweeps the course's matmul (see ``main``).
"""

from __future__ import annotations

import datetime
import functools
import itertools
import json
import math
import platform
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from . import mode
from .errors import UserError
from .mode import UnsupportedInInterpreter

SCHEMA = "tkcourse.sweep/1"
SWEEPS = Path(__file__).resolve().parent / "data" / "sweeps"
METRICS = ("TFLOP/s", "GB/s", "ms")

# Short names for config keys in labels and tables.
_ABBREV = {"BLOCK_M": "BM", "BLOCK_N": "BN", "BLOCK_K": "BK", "GROUP_M": "G", "num_warps": "w", "num_stages": "s"}
# Errors after which the CUDA context is unusable: every later launch would fail too.
_FATAL = ("illegal memory access", "unspecified launch failure", "misaligned address", "device-side assert",
          "illegal instruction")


class SweepFormatError(UserError):
    """A sweep file that is not valid JSON, not a sweep, or of another schema version; names the file and place."""


class SweepNotFound(UserError, FileNotFoundError):
    """No sweep file (or folder) at the path given (a ``FileNotFoundError`` too, for code that catches that)."""


# ------------------------------------------------------------------------------------------
# configs
# ------------------------------------------------------------------------------------------


def config_space(**axes: Iterable[Any]) -> list[dict]:
    """The cartesian product of the axes, as a list of dicts (keys in the order given).

    ``config_space(BLOCK_M=[64, 128], num_warps=[4, 8])`` -> 4 configs. A scalar is one value.
    """
    if not axes:
        raise UserError("config_space needs at least one axis, e.g. config_space(BLOCK_M=[64, 128])")
    values = []
    for name, vals in axes.items():
        vals = [vals] if isinstance(vals, (int, float, str, bool)) else list(vals)
        if not vals:
            raise UserError(f"axis {name!r} has no values")
        values.append(vals)
    return [dict(zip(axes, combo)) for combo in itertools.product(*values)]


def config_label(config: dict, keys: Iterable[str] | None = None) -> str:
    """A short label: ``BM128 BN256 BK64 G8 w8 s3``."""
    keys = list(keys) if keys is not None else list(config)
    return " ".join(f"{_ABBREV[k]}{config[k]}" if k in _ABBREV else f"{k}={config[k]}" for k in keys if k in config)


def _key(config: dict) -> tuple:
    return tuple(sorted(config.items()))


def axes_of(configs: Iterable[dict]) -> dict[str, list]:
    """``{key: sorted distinct values}`` over the configs (keys in first-seen order)."""
    axes: dict[str, set] = {}
    for c in configs:
        for k, v in c.items():
            axes.setdefault(k, set()).add(v)
    return {k: sorted(v, key=lambda x: (str(type(x)), x)) for k, v in axes.items()}


# ------------------------------------------------------------------------------------------
# results
# ------------------------------------------------------------------------------------------


@dataclass
class Result:
    """One config's outcome: times in ms when it ran, ``reason``/``error`` when it failed."""

    config: dict
    ms: float | None = None
    p20: float | None = None
    p80: float | None = None
    reason: str | None = None  # short, for people: "out of shared memory (needs 262144 B, limit 232448 B)"
    error: str | None = None  # the exception: "OutOfResources: out of resource: shared memory, ..."
    compile_s: float | None = None  # wall time of the first call (compile + one launch)

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict:
        d: dict = {"config": dict(self.config), "status": "ok" if self.ok else "failed"}
        if self.ok:
            d.update(ms=_round(self.ms), p20=_round(self.p20), p80=_round(self.p80))
        else:
            d.update(reason=self.reason, error=self.error)
        if self.compile_s is not None:
            d["compile_s"] = round(self.compile_s, 4)
        return d


def _round(ms: float) -> float:
    """Six significant digits: plenty for a timing, and monotonic, so p20 <= ms <= p80 survives."""
    return float(f"{ms:.6g}")


def _rate(metric: str, ms: float, flops: int | None, nbytes: int | None) -> float:
    if metric == "TFLOP/s":
        return flops / ms * 1e-9
    if metric == "GB/s":
        return nbytes / ms * 1e-6
    return ms


def higher_is_better(metric: str) -> bool:
    return metric != "ms"


@dataclass
class Sweep:
    """Every config of one kernel at one shape and dtype, with where and how it was measured."""

    kernel: str
    shape: str  # "4096x4096x4096"
    dtype: str  # "float16"
    results: list[Result]
    flops: int | None = None
    bytes: int | None = None
    timings_meaningful: bool = True
    warmup: float | None = None
    rep: float | None = None
    gpu: str = ""
    sms: int | None = None
    triton: str = ""
    torch: str = ""
    date: str = ""
    command: str = ""
    baseline: dict | None = None  # {"provider": "torch", "ms": .., "p20": .., "p80": ..}
    notes: list[str] = field(default_factory=list)

    # ----- reading --------------------------------------------------------------------------

    @property
    def metric(self) -> str:
        """The default metric: TFLOP/s when FLOPs are known, else GB/s when bytes are, else ms."""
        return "TFLOP/s" if self.flops else "GB/s" if self.bytes else "ms"

    @property
    def dims(self) -> tuple[int, ...]:
        return tuple(int(p) for p in self.shape.split("x"))

    @property
    def ok(self) -> list[Result]:
        return [r for r in self.results if r.ok]

    @property
    def failed(self) -> list[Result]:
        return [r for r in self.results if not r.ok]

    @property
    def axes(self) -> dict[str, list]:
        return axes_of(r.config for r in self.results)

    def metrics(self) -> list[str]:
        """The metrics this sweep can be shown in."""
        return [m for m, ok in (("TFLOP/s", self.flops), ("GB/s", self.bytes), ("ms", True)) if ok]

    def _check_metric(self, metric: str | None) -> str:
        metric = metric or self.metric
        if metric not in self.metrics():
            raise ValueError(f"{self.kernel} {self.shape}: cannot show {metric!r} (no "
                             f"{'flops' if metric == 'TFLOP/s' else 'bytes'} recorded); choose from {self.metrics()}")
        return metric

    def rate(self, result: Result, metric: str | None = None) -> float:
        """``result``'s median in ``metric`` (default: the sweep's); NaN for a failed config."""
        metric = self._check_metric(metric)
        if not result.ok:
            return math.nan
        return _rate(metric, result.ms, self.flops, self.bytes)

    def baseline_rate(self, metric: str | None = None) -> float | None:
        if not self.baseline:
            return None
        return _rate(self._check_metric(metric), self.baseline["ms"], self.flops, self.bytes)

    def best(self, metric: str | None = None) -> Result | None:
        """The fastest config that ran (None when every config failed)."""
        metric = self._check_metric(metric)
        ok = self.ok
        if not ok:
            return None
        pick = max if higher_is_better(metric) else min
        return pick(ok, key=lambda r: self.rate(r, metric))

    def get(self, config: dict) -> Result | None:
        """The result for exactly this config, or None when it was not in the sweep."""
        k = _key(config)
        return next((r for r in self.results if _key(r.config) == k), None)

    def title(self) -> str:
        return f"{self.kernel} {self.shape} {self.dtype}"

    def provenance(self) -> str:
        where = f"{self.gpu}" + (f" ({self.sms} SMs)" if self.sms else "")
        text = f"{where}, triton {self.triton}, torch {self.torch}, {self.date}"
        if not self.timings_meaningful:
            text += " - interpreter timings: meaningless for GPU speed"
        return text

    def table(self, top: int = 5, metric: str | None = None) -> str:
        """The ``top`` fastest configs and a line on the failures, as text."""
        metric = self._check_metric(metric)
        ranked = sorted(self.ok, key=lambda r: self.rate(r, metric), reverse=higher_is_better(metric))
        lines = [f"{self.title()}: {len(self.ok)} ran, {len(self.failed)} failed ({self.provenance()})"]
        for r in ranked[:top]:
            lines.append(f"  {self.rate(r, metric):10.4g} {metric:<8} {r.ms:9.4f} ms  {config_label(r.config)}")
        if self.baseline:
            lines.append(f"  {self.baseline_rate(metric):10.4g} {metric:<8} {self.baseline['ms']:9.4f} ms  "
                         f"({self.baseline.get('provider', 'baseline')})")
        reasons: dict[str, int] = {}
        for r in self.failed:
            short = re.sub(r" \(needs.*", "", r.reason or "")
            reasons[short] = reasons.get(short, 0) + 1
        for reason, n in sorted(reasons.items(), key=lambda kv: -kv[1]):
            lines.append(f"  failed x{n}: {reason}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<Sweep {self.title()}: {len(self.ok)} ran, {len(self.failed)} failed>"

    # ----- files ----------------------------------------------------------------------------

    def filename(self) -> str:
        """``matmul_float16_4096x4096x4096.json``."""
        return f"{self.kernel}_{self.dtype}_{self.shape}.json"

    def to_dict(self) -> dict:
        d = {"schema": SCHEMA, "kernel": self.kernel, "shape": self.shape, "dtype": self.dtype,
             "metric": self.metric, "flops": self.flops, "bytes": self.bytes,
             "timings_meaningful": self.timings_meaningful, "warmup": self.warmup, "rep": self.rep,
             "gpu": self.gpu, "sms": self.sms, "triton": self.triton, "torch": self.torch, "date": self.date,
             "command": self.command}
        if self.baseline:
            d["baseline"] = dict(self.baseline)
        if self.notes:
            d["notes"] = list(self.notes)
        d["results"] = [r.to_dict() for r in self.results]
        return d

    def save(self, path) -> Path:
        """Write JSON to ``path`` (a folder -> ``self.filename()`` in it); returns the file's path."""
        path = Path(path)
        if path.is_dir() or str(path).endswith(("/", "\\")) or path.suffix != ".json":
            path = path / self.filename()
        d = self.to_dict()
        validate_sweep(d, where=str(path))  # never write a file that would not load
        results = d.pop("results")
        head = json.dumps(d, indent=1)
        body = ",\n".join("  " + json.dumps(r) for r in results)
        text = head[:-2] + ',\n "results": [\n' + body + "\n ]\n}\n"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    @classmethod
    def from_dict(cls, d: dict, where: str = "sweep") -> "Sweep":
        validate_sweep(d, where=where)
        results = [Result(config=dict(e["config"]), ms=e.get("ms"), p20=e.get("p20"), p80=e.get("p80"),
                          reason=e.get("reason"), error=e.get("error"), compile_s=e.get("compile_s"))
                   for e in d["results"]]
        return cls(kernel=d["kernel"], shape=d["shape"], dtype=d["dtype"], results=results, flops=d["flops"],
                   bytes=d["bytes"], timings_meaningful=d["timings_meaningful"], warmup=d.get("warmup"),
                   rep=d.get("rep"), gpu=d["gpu"], sms=d["sms"], triton=d["triton"], torch=d["torch"],
                   date=d["date"], command=d["command"], baseline=d.get("baseline"), notes=list(d.get("notes", [])))


# ------------------------------------------------------------------------------------------
# the schema
# ------------------------------------------------------------------------------------------

_POSITIVE = {"type": "number", "exclusiveMinimum": 0}
_TEXT = {"type": "string"}

#: Schema ``SCHEMA`` of a sweep file, as JSON Schema (draft 2020-12), checked with ``jsonschema``.
#: What JSON Schema cannot say (the metric that flops and bytes imply, p20 <= ms <= p80, one set of
#: config keys, no config twice) ``validate_sweep`` checks after it.
JSON_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": SCHEMA,
    "type": "object",
    "required": ["schema", "kernel", "shape", "dtype", "metric", "flops", "bytes", "timings_meaningful", "gpu",
                 "sms", "triton", "torch", "date", "command", "results"],
    "properties": {
        "schema": {"const": SCHEMA},
        "kernel": _TEXT, "dtype": _TEXT, "gpu": _TEXT, "triton": _TEXT, "torch": _TEXT, "date": _TEXT,
        "command": _TEXT,
        "shape": {"type": "string", "pattern": r"^\d+(x\d+)*$"},
        "metric": {"enum": list(METRICS)},
        "flops": {"type": ["integer", "null"], "exclusiveMinimum": 0},
        "bytes": {"type": ["integer", "null"], "exclusiveMinimum": 0},
        "sms": {"type": ["integer", "null"], "minimum": 0},
        "timings_meaningful": {"type": "boolean"},
        "warmup": {"type": ["number", "null"], "minimum": 0},
        "rep": {"type": ["number", "null"], "minimum": 0},
        "notes": {"type": "array", "items": _TEXT},
        "baseline": {"type": ["object", "null"], "required": ["ms", "p20", "p80"],
                     "properties": {"ms": _POSITIVE, "p20": _POSITIVE, "p80": _POSITIVE}},
        "results": {"type": "array", "minItems": 1, "items": {
            "type": "object",
            "required": ["config", "status"],
            "properties": {
                "config": {"type": "object", "minProperties": 1,
                           "additionalProperties": {"type": ["number", "string", "boolean"]}},
                "status": {"enum": ["ok", "failed"]},
                "compile_s": {"type": ["number", "null"], "minimum": 0},
            },
            "allOf": [
                {"if": {"properties": {"status": {"const": "ok"}}},
                 "then": {"required": ["ms", "p20", "p80"], "properties": {"ms": _POSITIVE, "p20": _POSITIVE,
                                                                          "p80": _POSITIVE}}},
                {"if": {"properties": {"status": {"const": "failed"}}},
                 "then": {"required": ["reason", "error"], "properties": {"reason": {"type": "string", "minLength": 1},
                                                                          "error": {"type": "string", "minLength": 1}}}},
            ],
        }},
    },
}

#: The largest sweep file read: the recorded ones are tens of KiB.
MAX_SWEEP_BYTES = 16 << 20

_TYPE_WORDS = {"string": "a string", "integer": "an integer", "number": "a number", "boolean": "true or false",
               "array": "a list", "object": "an object", "null": "null"}


@functools.lru_cache(maxsize=1)
def _validator():
    """The jsonschema validator of ``JSON_SCHEMA``, built once (imported on first use: import stays cheap)."""
    import jsonschema

    cls = jsonschema.Draft202012Validator
    cls.check_schema(JSON_SCHEMA)
    return cls(JSON_SCHEMA)


def _at(path) -> str:
    """``results[2].config`` for the path ``["results", 2, "config"]``; "" for the top."""
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _schema_message(err) -> str:
    """One line, in the course's words, for a ``jsonschema.ValidationError``."""
    path = list(err.absolute_path)
    v, value, got = err.validator, err.validator_value, json.dumps(err.instance)[:60]
    if v == "required":
        key = next((k for k in value if k not in err.instance), value[0])
        at = _at(path)
        if not at:
            return f"missing key {key!r}"
        if key == "config":
            return f"{at} has no 'config' object"
        if len(path) == 2 and path[0] == "results":  # an entry: say which config, and why the key is needed
            cfg = err.instance.get("config")
            label = f" ({config_label(cfg)})" if isinstance(cfg, dict) and cfg else ""
            return f"{at}{label}: status {err.instance.get('status')!r} needs {key!r}"
        return f"{at}: missing key {key!r}"
    key = path[-1] if path else None
    where = _at(path[:-1])
    name = f"{where}: {key!r}" if where else repr(key) if key is not None else "the top"
    if isinstance(key, int):
        name = _at(path)
    if v == "type":
        if not path:
            return f"expected a JSON object at the top, got {_TYPE_WORDS.get(type(err.instance).__name__, got)}"
        types = value if isinstance(value, list) else [value]
        return f"{name} must be {' or '.join(_TYPE_WORDS.get(t, t) for t in types)}, got {got}"
    if v == "enum":
        return f"{name} must be one of {', '.join(json.dumps(x) for x in value)}, got {got}"
    if v in ("exclusiveMinimum", "minimum"):
        return f"{name} must be {'>' if v == 'exclusiveMinimum' else '>='} {value}, got {got}"
    if v == "minItems" and key == "results":
        return "'results' is empty: a sweep has at least one config"
    if v == "minProperties" and key == "config":
        return f"{where} has no 'config' object (got {{}})"
    if v == "minLength":
        return f"{name} must be a non-empty string"
    if v == "pattern" and key == "shape":
        return f"'shape' must look like '4096x4096x4096', got {got}"
    return f"{name}: {err.message}"


def validate_sweep(d, where: str = "sweep") -> None:
    """Raise ``SweepFormatError`` saying which key or entry of ``d`` breaks schema ``SCHEMA``."""
    import jsonschema

    def bad(msg):
        raise SweepFormatError(f"{where}: {msg}")

    if not isinstance(d, dict):
        bad(f"expected a JSON object at the top, got {type(d).__name__}")
    if "schema" not in d:
        bad(f"no 'schema' key: not a tkcourse sweep file (expected \"schema\": \"{SCHEMA}\")")
    if d["schema"] != SCHEMA:
        bad(f"schema is {json.dumps(d['schema'])[:60]}, but this tkcourse reads {SCHEMA!r}; re-run the sweep "
            "(python -m tkcourse.autotune ...) or update tkcourse")
    err = jsonschema.exceptions.best_match(_validator().iter_errors(d))
    if err is not None:
        bad(_schema_message(err))
    expected = "TFLOP/s" if d["flops"] else "GB/s" if d["bytes"] else "ms"
    if d["metric"] != expected:
        bad(f"'metric' is {d['metric']!r} but flops={d['flops']} and bytes={d['bytes']} make it {expected!r}")
    keys0, seen = set(d["results"][0]["config"]), {}
    for i, e in enumerate(d["results"]):
        at, cfg = f"results[{i}]", e["config"]
        if set(cfg) != keys0:
            bad(f"{at}: config keys {sorted(cfg)} differ from results[0]'s {sorted(keys0)}")
        k = _key(cfg)
        if k in seen:
            bad(f"{at}: config {cfg} appears twice (also results[{seen[k]}])")
        seen[k] = i
        if e["status"] == "ok" and not e["p20"] <= e["ms"] <= e["p80"]:
            bad(f"{at} ({config_label(cfg)}): times must satisfy p20 <= ms <= p80, got "
                f"{e['p20']} / {e['ms']} / {e['p80']}")


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not a JSON number (write null for a missing value)")


def load_sweep(path) -> Sweep:
    """Read one sweep file; ``SweepFormatError`` (a UserError) names the file and what is wrong with it."""
    path = Path(path)
    if not path.exists():
        raise SweepNotFound(f"no sweep file {path}")
    if path.is_dir():
        raise SweepFormatError(f"{path} is a folder, not a sweep file; load_sweeps({str(path)!r}) reads every "
                               "sweep in a folder")
    size = path.stat().st_size
    if size > MAX_SWEEP_BYTES:
        raise SweepFormatError(f"{path}: {size} bytes, more than a sweep holds (at most {MAX_SWEEP_BYTES})")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SweepFormatError(f"{path}: not UTF-8 text (byte {data[e.start]:#04x} at offset {e.start}); "
                               "not a sweep file") from None
    try:
        d = json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as e:
        raise SweepFormatError(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    except RecursionError:
        raise SweepFormatError(f"{path}: JSON nested too deep to be a sweep file") from None
    except ValueError as e:  # NaN or Infinity
        raise SweepFormatError(f"{path}: not valid JSON ({e})") from None
    return Sweep.from_dict(d, where=str(path))


def load_sweeps(path=None, kernel: str | None = None, dtype: str | None = None) -> list[Sweep]:
    """Every sweep in a folder (default: the recorded ones in ``tkcourse/data/sweeps``), sorted.

    One malformed file stops the load with a ``SweepFormatError`` that names it."""
    folder = Path(path) if path is not None else SWEEPS
    if not folder.exists():
        raise SweepNotFound(f"no folder {folder}")
    if not folder.is_dir():
        raise SweepFormatError(f"{folder} is a file, not a folder of sweeps; load_sweep({str(folder)!r}) reads one")
    files = sorted(folder.glob("*.json"))
    sweeps = []
    for p in files:
        try:
            sweeps.append(load_sweep(p))
        except SweepFormatError as e:
            raise SweepFormatError(f"{folder}: {p.name} (one of its {len(files)} sweep files) is not a valid sweep; "
                                   f"fix it or move it away: {e}") from None
    sweeps = [s for s in sweeps if (kernel is None or s.kernel == kernel) and (dtype is None or s.dtype == dtype)]
    return sorted(sweeps, key=lambda s: (s.kernel, s.dtype, math.prod(s.dims), s.dims))


# ------------------------------------------------------------------------------------------
# running
# ------------------------------------------------------------------------------------------


def _reason(exc: BaseException) -> str:
    """A short, human reason for a failed config."""
    name, msg = type(exc).__name__, str(exc)
    first = msg.strip().splitlines()[0] if msg.strip() else ""
    if name == "OutOfResources":
        resource = getattr(exc, "name", None)
        required, limit = getattr(exc, "required", None), getattr(exc, "limit", None)
        if resource is None:
            m = re.search(r"out of resource: ([^,]+)", msg)
            resource = m.group(1) if m else "resources"
        text = f"out of {resource}"
        if required is not None and limit is not None:
            unit = " B" if "memory" in str(resource) else ""
            text += f" (needs {required}{unit}, limit {limit}{unit})"
        return text
    if name == "OutOfMemoryError":
        return "out of GPU memory"
    if isinstance(exc, AssertionError):
        return "wrong result" + (f": {first}" if first else "")
    if name in ("CompilationError", "CompileTimeAssertionFailure"):
        return f"does not compile: {first}"[:200]
    return f"{name}: {first}"[:200]


def _is_fatal(exc: BaseException) -> bool:
    return any(s in str(exc).lower() for s in _FATAL)


def _time_gpu(fn, warmup, rep):
    import triton

    med, p20, p80 = triton.testing.do_bench(fn, warmup=warmup, rep=rep, quantiles=[0.5, 0.2, 0.8])
    return float(med), float(p20), float(p80)


def _time_wallclock(fn, warmup, rep, max_calls: int = 10):
    """Interpreter: wall-clock ms of a few calls (at least 3, at most ``max_calls``, about ``rep`` ms)."""
    times, start = [], time.perf_counter()
    while len(times) < 3 or (len(times) < max_calls and (time.perf_counter() - start) * 1e3 < rep):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()

    def q(p):  # linear-interpolated quantile
        x = p * (len(times) - 1)
        lo = int(x)
        hi = min(lo + 1, len(times) - 1)
        return times[lo] + (times[hi] - times[lo]) * (x - lo)

    return q(0.5), q(0.2), q(0.8)


def _sync():
    if not mode.INTERPRET:
        import torch

        torch.cuda.synchronize()


def environment() -> dict:
    """gpu, sms, triton, torch, date: where a sweep runs."""
    import torch
    import triton

    if not mode.INTERPRET and torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        gpu, sms = p.name, int(p.multi_processor_count)
    else:
        gpu, sms = f"CPU interpreter ({platform.processor() or platform.machine() or 'unknown'})", None
    return {"gpu": gpu, "sms": sms, "triton": triton.__version__, "torch": torch.__version__,
            "date": datetime.date.today().isoformat()}


class _Progress:
    """A widget in Jupyter, one rewritten line in a terminal, one line per config in a log."""

    def __init__(self, n: int, what: str, kind):
        self.n, self.what, self.kind, self.widget = n, what, kind, None
        self.best: tuple[float, str] | None = None
        if kind == "auto":
            self.kind = "widget" if _in_notebook() else "tty" if sys.stdout.isatty() else "lines"
        if self.kind == "widget":
            try:
                import ipywidgets as w
                from IPython.display import display
            except ImportError:
                self.kind = "lines"
            else:
                self.bar = w.IntProgress(min=0, max=n, description="sweep")
                self.label = w.HTML(value=f"{what}: compiling and timing {n} configs")
                self.widget = w.HBox([self.bar, self.label])
                display(self.widget)

    def update(self, i: int, result: Result, rate: float, metric: str):
        better = (lambda a, b: a > b) if higher_is_better(metric) else (lambda a, b: a < b)
        if result.ok and (self.best is None or better(rate, self.best[0])):
            self.best = (rate, config_label(result.config))
        best = f"best {self.best[0]:.4g} {metric} ({self.best[1]})" if self.best else "none ran yet"
        if self.kind == "widget":
            self.bar.value = i
            self.label.value = f"{self.what}: {i}/{self.n}, {best}"
        elif self.kind == "tty":
            sys.stdout.write(f"\r{self.what}: {i}/{self.n}, {best}\033[K")
            sys.stdout.flush()
        elif self.kind == "lines":
            done = f"{rate:9.4g} {metric}" if result.ok else f"FAILED {result.reason}"
            print(f"[{i:>3}/{self.n}] {config_label(result.config):<32} {done}", flush=True)
        elif callable(self.kind):
            self.kind(i, self.n, result)

    def close(self):
        if self.kind == "tty":
            sys.stdout.write("\n")
        elif self.kind == "widget":
            self.bar.bar_style = "success"


def _in_notebook() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    ip = get_ipython()
    return ip is not None and type(ip).__name__ == "ZMQInteractiveShell"


def sweep(make_fn: Callable[[dict], Callable[[], object]], configs: Iterable[dict], *, kernel: str, shape,
          dtype, flops: int | None = None, bytes: int | None = None, warmup: float = 10, rep: float = 25,
          progress=True, check: Callable[[object], None] | None = None,
          baseline: Callable[[], object] | None = None, baseline_name: str = "torch",
          command: str | None = None) -> Sweep:
    """Time each config; a failing config is recorded with its reason and the sweep goes on.

    ``make_fn(config)`` returns a zero-argument callable that launches that config once.
    ``shape``: "MxNxK" or a tuple of ints; ``dtype``: "float16" or a torch dtype; ``flops``/
    ``bytes``: per call, for TFLOP/s or GB/s; ``warmup``/``rep``: ms for ``do_bench`` (on a GPU).
    ``check(output)``: optional, called on the first call's output; an ``AssertionError`` marks the
    config "wrong result". ``baseline``: optional callable (e.g. ``torch.matmul``) timed once
    for comparison. ``progress``: True (widget/terminal line), False, or ``fn(i, n, result)``.
    Interrupting (Ctrl-C / the stop button) returns the configs done so far.
    """
    configs = [dict(c) for c in configs]
    if not configs:
        raise UserError("no configs to sweep")
    seen: dict[tuple, int] = {}
    for i, c in enumerate(configs):
        if _key(c) in seen:
            raise UserError(f"config {c} appears twice (positions {seen[_key(c)]} and {i})")
        seen[_key(c)] = i
    shape = shape if isinstance(shape, str) else "x".join(str(int(d)) for d in shape)
    dtype = str(dtype).replace("torch.", "")
    timer = _time_wallclock if mode.INTERPRET else _time_gpu
    meta = dict(kernel=kernel, shape=shape, dtype=dtype, flops=int(flops) if flops else None,
                bytes=int(bytes) if bytes else None, timings_meaningful=not mode.INTERPRET, warmup=warmup, rep=rep,
                command=command if command is not None else f"tkcourse.autotune.sweep() in {Path(sys.argv[0]).name}",
                **environment())
    out = Sweep(results=[], **meta)
    metric = out.metric
    bar = _Progress(len(configs), f"{kernel} {shape} {dtype}", "auto" if progress is True else progress or None)
    try:
        for i, cfg in enumerate(configs, 1):
            res = Result(config=cfg)
            t0 = time.perf_counter()
            try:
                fn = make_fn(cfg)
                value = fn()  # compiles; errors such as OutOfResources surface here
                _sync()
                res.compile_s = time.perf_counter() - t0
                if check is not None:
                    check(value)
                del value
                res.ms, res.p20, res.p80 = timer(fn, warmup, rep)
            except KeyboardInterrupt:
                raise
            except Exception as e:  # record and go on: one bad config must not lose the sweep
                res.ms = res.p20 = res.p80 = None
                res.compile_s = res.compile_s if res.compile_s is not None else time.perf_counter() - t0
                res.reason, res.error = _reason(e), f"{type(e).__name__}: {e}"[:2000]
                if _is_fatal(e):
                    out.results.append(res)
                    out.notes.append(f"stopped after {config_label(cfg)}: the GPU context is lost ({res.reason}); "
                                     f"{len(configs) - i} configs not run")
                    bar.update(i, res, math.nan, metric)
                    break
            out.results.append(res)
            bar.update(i, res, out.rate(res), metric)
    except KeyboardInterrupt:
        out.notes.append(f"interrupted after {len(out.results)} of {len(configs)} configs")
    finally:
        bar.close()
    if baseline is not None:
        try:
            baseline()
            _sync()
            ms, p20, p80 = timer(baseline, warmup, rep)
            out.baseline = {"provider": baseline_name, "ms": _round(ms), "p20": _round(p20), "p80": _round(p80)}
        except Exception as e:
            out.notes.append(f"baseline {baseline_name} failed: {type(e).__name__}: {e}"[:300])
    if not out.results:
        raise KeyboardInterrupt("interrupted before any config finished")
    return out


# ------------------------------------------------------------------------------------------
# command line: the course's kernels on a GPU
# ------------------------------------------------------------------------------------------

# Attention has no exercise config space of its own; this one is the default (override with --axes).
ATTENTION_AXES = {"BLOCK_M": [64, 128], "BLOCK_N": [32, 64, 128], "num_warps": [4, 8], "num_stages": [2, 3, 4]}


def _parse_shape(text: str, ndim: int, example: str) -> tuple[int, ...]:
    parts = text.strip().lower().split("x")
    if len(parts) != ndim or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise UserError(f"shape {text!r}: expected {ndim} positive integers like {example}")
    return tuple(int(p) for p in parts)


def _parse_axes(text: str | None, base: dict[str, list]) -> dict[str, list]:
    axes = {k: list(v) for k, v in base.items()}
    for part in filter(None, (text or "").replace(";", " ").split()):
        name, _, vals = part.partition("=")
        if not vals:
            raise UserError(f"--axes {part!r}: expected NAME=v1,v2 (e.g. GROUP_M=1,8)")
        if name not in axes:
            raise UserError(f"--axes: unknown axis {name!r}; known: {', '.join(axes)}")
        try:
            axes[name] = [int(v) for v in vals.split(",")]
        except ValueError:
            raise UserError(f"--axes {part!r}: the values of {name} must be integers, e.g. {name}=1,8") from None
    return axes


def _close(reference):
    """check(out): relative Frobenius error against ``reference`` below 1e-2."""

    def check(out):
        ref = reference.float()
        err = float((out.float() - ref).norm() / ref.norm().clamp_min(1e-30))
        assert err < 1e-2, f"relative error {err:.2e} against torch"

    return check


def _matmul_configs(dims, dtype_bytes, args) -> list[dict]:
    """solutions.autotune.config_space(), with --axes overrides and --prune applied."""
    from solutions import autotune as at

    space = at.config_space()
    configs = config_space(**_parse_axes(args.axes, axes_of(space))) if args.axes else space
    if args.prune:
        configs = at.prune(configs, *dims, dtype_bytes=dtype_bytes, smem_limit=_smem_limit())
    return configs


def _matmul_job(dims, dtype, args):
    import torch

    from solutions import matmul as mm

    M, N, K = dims
    a = torch.randn(M, K, dtype=dtype, device=mode.DEVICE)
    b = torch.randn(K, N, dtype=dtype, device=mode.DEVICE)
    ref = mm.reference(a, b) if hasattr(mm, "reference") else torch.matmul(a, b)
    size = a.element_size()
    return dict(make_fn=lambda cfg: (lambda: mm.matmul(a, b, config=cfg)), kernel="matmul",
                flops=2 * M * N * K, bytes=(M * K + K * N + M * N) * size, check=_close(ref),
                baseline=lambda: torch.matmul(a, b))


def _attention_configs(dims, dtype_bytes, args) -> list[dict]:
    return config_space(**_parse_axes(args.axes, ATTENTION_AXES))


def _attention_job(dims, dtype, args):
    import torch

    from solutions import flash_attention_tuned as fa  # the tuned forward: the kernel the sweeps tune

    B, H, N, D = dims
    q, k, v = (torch.randn(B, H, N, D, dtype=dtype, device=mode.DEVICE) for _ in range(3))
    causal = args.causal
    if hasattr(fa, "reference"):
        ref = fa.reference(q, k, v, causal)
    else:
        ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    flops = 4 * B * H * N * N * D // (2 if causal else 1)
    return dict(make_fn=lambda cfg: (lambda: fa.attention(q, k, v, causal, config=cfg)),
                kernel="attention_causal" if causal else "attention", flops=flops,
                bytes=4 * B * H * N * D * q.element_size(), check=_close(ref),
                baseline=lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal))


def _smem_limit() -> int:
    import torch

    if mode.INTERPRET or not torch.cuda.is_available():
        return 228 * 1024
    p = torch.cuda.get_device_properties(0)
    return int(getattr(p, "shared_memory_per_block_optin", 228 * 1024))


_KERNELS = {"matmul": (_matmul_configs, _matmul_job, 3, "4096x4096x4096"),
            "attention": (_attention_configs, _attention_job, 4, "4x16x4096x128")}
_DEFAULT_SHAPES = {"matmul": "512x512x512,1024x1024x1024,2048x2048x2048,4096x4096x4096,8192x8192x8192,16x4096x4096",
                   "attention": "4x16x1024x128,4x16x4096x128"}


def main(argv=None) -> int:
    """The command line. A user's mistake (a bad shape or axis, an unreadable --out, bf16 in the
    interpreter, a config the kernel refuses) prints one line and exits with status 2, as argparse
    does for a bad option; ``--debug`` shows the traceback instead."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return _main(argv)
    except (UserError, UnsupportedInInterpreter) as e:
        if "--debug" in argv:
            raise
        print(f"python -m tkcourse.autotune: error: {e} (--debug shows the traceback)", file=sys.stderr)
        raise SystemExit(2) from None


def _main(argv: list[str]) -> int:
    import argparse

    import torch

    p = argparse.ArgumentParser(prog="python -m tkcourse.autotune",
                                description="Sweep every config of a course kernel at some shapes; one JSON per shape.")
    p.add_argument("kernel", choices=sorted(_KERNELS))
    p.add_argument("--shapes", help="comma-separated: MxNxK for matmul, BxHxNxD for attention "
                   "(default: %s)" % "; ".join(f"{k}: {v}" for k, v in _DEFAULT_SHAPES.items()))
    p.add_argument("--dtype", default="float16", choices=["float16", "bfloat16", "float32"])
    p.add_argument("--out", default=str(SWEEPS), help="folder for the JSON files (default: %(default)s)")
    p.add_argument("--warmup", type=float, default=10, help="do_bench warmup, ms (default 10)")
    p.add_argument("--rep", type=float, default=25, help="do_bench rep, ms (default 25)")
    p.add_argument("--axes", help="override axes of the space, e.g. 'GROUP_M=1,8 num_stages=2,3,4'")
    p.add_argument("--prune", action="store_true", help="matmul: drop configs solutions.autotune.prune drops")
    p.add_argument("--causal", action="store_true", help="attention: causal mask")
    p.add_argument("--no-check", action="store_true", help="do not compare each config's output with torch")
    p.add_argument("--no-baseline", action="store_true", help="do not time torch for comparison")
    p.add_argument("--dry-run", action="store_true", help="list the configs and exit")
    p.add_argument("--allow-interpreter", action="store_true",
                   help="run in Triton's interpreter (tiny shapes only; timings are meaningless)")
    p.add_argument("--debug", action="store_true", help="on an error, show the traceback")
    args = p.parse_args(argv)
    configs_for, job, ndim, example = _KERNELS[args.kernel]
    shapes = [_parse_shape(s, ndim, example) for s in (args.shapes or _DEFAULT_SHAPES[args.kernel]).split(",")]
    if mode.INTERPRET and not (args.allow_interpreter or args.dry_run):
        print("No GPU: Triton's interpreter would take hours at these shapes and its timings say nothing about GPU "
              "speed. Run this on a GPU, or pass --allow-interpreter with tiny --shapes to try the machinery.")
        return 1
    dtype = getattr(torch, args.dtype)
    mode.check_dtype(torch.empty(0, dtype=dtype))
    command = " ".join(["python -m tkcourse.autotune"] + argv)
    rows = []
    for dims in shapes:
        shape = "x".join(map(str, dims))
        configs = configs_for(dims, dtype.itemsize, args)
        if args.dry_run:
            print(f"{args.kernel} {shape}: {len(configs)} configs")
            for c in configs:
                print("  " + config_label(c))
            continue
        spec = job(dims, dtype, args)
        print(f"== {spec['kernel']} {shape} {args.dtype}: {len(configs)} configs", flush=True)
        t0 = time.perf_counter()
        s = sweep(spec["make_fn"], configs, kernel=spec["kernel"], shape=shape, dtype=args.dtype,
                  flops=spec["flops"], bytes=spec["bytes"], warmup=args.warmup, rep=args.rep,
                  check=None if args.no_check else spec["check"],
                  baseline=None if args.no_baseline else spec["baseline"], command=command)
        try:
            path = s.save(args.out)
        except OSError as e:
            raise UserError(f"--out {args.out}: cannot write the sweep there ({e.strerror or e})") from None
        rows.append((s, path, time.perf_counter() - t0))
        for note in s.notes:
            print("note:", note)
    if rows:
        print(f"\n{'shape':<18} {'best config':<28} {'rate':>14} {'torch':>14} {'ok':>4} {'failed':>6} "
              f"{'time':>6} {'compile':>7}  file")
        for s, path, secs in rows:
            best = s.best()
            rate = f"{s.rate(best):.4g} {s.metric}" if best else "-"
            base = f"{s.baseline_rate():.4g} {s.metric}" if s.baseline else "-"
            compile_s = sum(r.compile_s or 0 for r in s.results)
            print(f"{s.shape:<18} {config_label(best.config) if best else 'all failed':<28} {rate:>14} {base:>14} "
                  f"{len(s.ok):>4} {len(s.failed):>6} {secs:>5.0f}s {compile_s:>6.0f}s  {path}")
        if not s.timings_meaningful:
            print("(interpreter: these timings are meaningless for GPU speed)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
