"""The sweep format: configs, one config's ``Result``, a ``Sweep`` of them, and its JSON file.

A ``Sweep`` saves to, and loads from, one JSON file (schema ``SCHEMA``) with its provenance. The file's
shape is ``JSON_SCHEMA``, checked with ``jsonschema``; ``load_sweep`` raises ``SweepFormatError`` naming
the key or entry that is wrong. ``config_space``, ``config_label`` and ``axes_of`` build and name configs.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from ..errors import UserError

SCHEMA = "tkcourse.sweep/1"
#: The recorded sweeps the notebooks and the autotune grader read.
SWEEPS = Path(__file__).resolve().parents[1] / "data" / "sweeps"
METRICS = ("TFLOP/s", "GB/s", "ms")

# Short names for config keys in labels and tables.
_ABBREV = {"BLOCK_M": "BM", "BLOCK_N": "BN", "BLOCK_K": "BK", "GROUP_M": "G", "num_warps": "w", "num_stages": "s"}


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


def config_key(config: dict) -> tuple:
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
            d.update(ms=round_ms(self.ms), p20=round_ms(self.p20), p80=round_ms(self.p80))
        else:
            d.update(reason=self.reason, error=self.error)
        if self.compile_s is not None:
            d["compile_s"] = round(self.compile_s, 4)
        return d


def round_ms(ms: float) -> float:
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
        k = config_key(config)
        return next((r for r in self.results if config_key(r.config) == k), None)

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
        k = config_key(cfg)
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
