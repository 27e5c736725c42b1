"""``python -m tkcourse.autotune KERNEL``: sweep a course kernel at some shapes, one JSON file per shape.

On a GPU, ``python -m tkcourse.autotune matmul --shapes 4096x4096x4096 --out tkcourse/data/sweeps/``
sweeps lesson 03's matmul over lesson 04's config space. The kernels come by name: each ``KERNEL`` is a
``Target`` in the module that ``tkcourse.course.SWEEP_TARGETS`` names (``benchmarks/sweeps.py``), the one
layer that imports both the solutions and this package, so that ``tkcourse`` never imports ``solutions``.

A user's mistake (a bad shape or axis, an unreadable ``--out``, bf16 in the interpreter, a config the
kernel refuses) prints one line and exits with status 2, as argparse does for a bad option; ``--debug``
shows the traceback instead.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Callable

from .. import mode
from ..course import SWEEP_TARGETS, import_checkout
from ..errors import UserError
from ..mode import UnsupportedInInterpreter
from .format import SWEEPS, config_label
from .runner import sweep


@dataclass(frozen=True)
class Target:
    """A kernel the command sweeps, as a module in ``benchmarks/`` describes it.

    ``configs(dims, dtype_bytes, args)``: the configs to run at one shape (``args``: the parsed command
    line, for ``--axes`` and ``--prune``); ``job(dims, dtype, args)``: a dict with ``make_fn`` (config ->
    a callable that launches it once), ``kernel`` (the sweep's name), ``flops``, ``bytes``, ``check``
    (output -> raises AssertionError when wrong) and ``baseline`` (torch's call, timed beside it).
    ``ndim`` and ``example``: what a shape looks like; ``shapes``: the default shapes, comma-separated.
    """

    configs: Callable
    job: Callable
    ndim: int
    example: str
    shapes: str


def _target(name: str) -> Target:
    """The target ``name``, from the module ``tkcourse.course.SWEEP_TARGETS`` names for it."""
    return import_checkout(SWEEP_TARGETS[name]).TARGETS[name]  # benchmarks/ lives in the checkout


def _parse_shape(text: str, ndim: int, example: str) -> tuple[int, ...]:
    parts = text.strip().lower().split("x")
    if len(parts) != ndim or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise UserError(f"shape {text!r}: expected {ndim} positive integers like {example}")
    return tuple(int(p) for p in parts)


def parse_axes(text: str | None, base: dict[str, list]) -> dict[str, list]:
    """``base`` with the axes that ``--axes`` text (``'GROUP_M=1,8 num_stages=2,3'``) overrides."""
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


def close_to(reference):
    """check(out): relative Frobenius error against ``reference`` below 1e-2."""

    def check(out):
        ref = reference.float()
        err = float((out.float() - ref).norm() / ref.norm().clamp_min(1e-30))
        assert err < 1e-2, f"relative error {err:.2e} against torch"

    return check


def smem_limit() -> int:
    """Shared memory one program may use on this GPU (an H200 block's 227 KiB in the interpreter)."""
    import torch

    if mode.INTERPRET or not torch.cuda.is_available():
        return 227 * 1024
    p = torch.cuda.get_device_properties(0)
    return int(getattr(p, "shared_memory_per_block_optin", 227 * 1024))


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
    p.add_argument("kernel", choices=sorted(SWEEP_TARGETS))
    p.add_argument("--shapes", help="comma-separated: MxNxK for matmul, BxHxNxD for attention "
                   "(default: the kernel's own shapes, in benchmarks/sweeps.py)")
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
    target = _target(args.kernel)
    configs_for, job = target.configs, target.job
    shapes = [_parse_shape(s, target.ndim, target.example) for s in (args.shapes or target.shapes).split(",")]
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
