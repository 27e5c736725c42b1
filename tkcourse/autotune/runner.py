"""Running a sweep: time every config of a kernel at one problem shape, keep failures, show progress.

``sweep(make_fn, configs, kernel=..., shape=..., dtype=...)`` calls ``make_fn(config)`` for each
config (a dict such as ``{"BLOCK_M": 128, ..., "num_warps": 8, "num_stages": 3}``) to get a
zero-argument callable that launches exactly that config, times it, and records the median
(with p20/p80) or, when it fails, why (``OutOfResources`` -> "out of shared memory", any other
exception -> its type and message); one failure never stops the sweep.

On a GPU the time comes from ``triton.testing.do_bench``. In Triton's interpreter it is a
wall-clock timer, and the sweep is flagged ``timings_meaningful = False``: those numbers measure
Python, not a GPU. (``triton.autotune`` and ``do_bench`` cannot run there at all.)
"""

from __future__ import annotations

import datetime
import math
import platform
import re
import sys
import time
from pathlib import Path
from typing import Callable, Iterable

from .. import mode
from ..errors import UserError
from .format import Result, Sweep, config_key, config_label, higher_is_better, round_ms

# Errors after which the CUDA context is unusable: every later launch would fail too.
_FATAL = ("illegal memory access", "unspecified launch failure", "misaligned address", "device-side assert",
          "illegal instruction")


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
        if config_key(c) in seen:
            raise UserError(f"config {c} appears twice (positions {seen[config_key(c)]} and {i})")
        seen[config_key(c)] = i
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
            out.baseline = {"provider": baseline_name, "ms": round_ms(ms), "p20": round_ms(p20), "p80": round_ms(p80)}
        except Exception as e:
            out.notes.append(f"baseline {baseline_name} failed: {type(e).__name__}: {e}"[:300])
    if not out.results:
        raise KeyboardInterrupt("interrupted before any config finished")
    return out
