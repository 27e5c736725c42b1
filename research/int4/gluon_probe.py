"""The Gluon int4 kernel at prefill sizes (``solutions/kernels/gluon_int4.py``) on an H100/H200: right, then
timed against cuBLAS on the 16-bit weight and the library (``kernels.int4_matmul`` as it ships, which routes
``gluon_int4.MIN_M`` + 1 to ``MAX_M`` rows to the Gluon kernel on Hopper; ``--no-route`` times its Triton kernel
there instead).

    PYTHONPATH=$PWD python3 research/int4/gluon_probe.py [OUT] [--m 128 256] [--no-route]

C. Correctness: each config below against ``x @ dequantize(packed, scales).T`` in fp32 (max error over the
   largest |y|), fp16 and bf16, M 1, 64, 128, 200 (a ragged tile), 256, at a small shape and at 8192 x 8192.
T. Time: at the four weight shapes of ``benchmarks/int4_matmul.py`` and each M given, fp16 and bf16,
   replayed from a CUDA graph with the L2 flushed by zeroing (``graph_ms``, the table's ``graph_ms``):
   each config (launched through ``kernel[grid]``; its host time is not what is timed), the variants of
   ``TIMED_ONLY`` (wrong values: where the time goes), the library, cuBLAS. Prints each one's speed over
   cuBLAS's (above 1: faster); writes ``OUT/gluon_probe.json``.

The first prototype (the dequantized tile stored to shared memory for both wgmma operands) and its runs
(``logs/gluon_probe_{first,second}.log``) are described in ``research/README.md``; its code is in the
history (``research/int4/gluon_int4.py`` until the register-operand kernel moved to the library).
"""

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
# isort: off
import tkcourse  # noqa: E402, F401  (first: the mode, before triton is imported)
import torch  # noqa: E402
import triton  # noqa: E402
# isort: on

from benchmarks.int4_matmul import GROUP, WEIGHTS  # noqa: E402
from solutions import int4_matmul as lesson  # noqa: E402
from solutions.kernels import gluon_int4 as gi  # noqa: E402
from solutions.kernels import int4_matmul as fast  # noqa: E402
from tkcourse.bench import graph_ms  # noqa: E402

CONFIGS = {
    "default": dict(gi.CONFIG),  # the ping-pong kernel, as routed
    "s3": dict(gi.CONFIG, STAGES=3),
    "deq1": dict(gi.CONFIG, DEQ=1),
    "serial": dict(gi.CONFIG, ATOMIC=False),
    "nosplit": dict(gi.CONFIG, SPLIT_K=1),
    "m256": dict(gi.CONFIG, BLOCK_M=256, STAGES=3),  # 256 rows of x a tile: each step's dequantization
    # serves twice the products (compiled for sm_90a, 221 kB of shared memory; not yet run)
    "wgmma": dict(gi.CONFIG, PINGPONG=False),  # the rung before: both warpgroups dequantize, then both wait
    "wgmma perm": dict(gi.CONFIG, PINGPONG=False, PERMUTE_K=True),
}
#: Where the time goes (wrong values; timed, not checked): the rung before's ``TIMING`` 1 (the first step's
#: tile reused: no bytes loaded or dequantized after it), the loads and MMAs alone.
TIMED_ONLY = {
    "no-deq": (dict(gi.CONFIG, PINGPONG=False), 1),
}


def run(name, x, packed, scales):
    if name in TIMED_ONLY:
        cfg, timing = TIMED_ONLY[name]
        return gi.matmul(x, packed, scales, GROUP, config=cfg, timing=timing)
    return gi.matmul(x, packed, scales, GROUP, config=CONFIGS[name])


def weights(N, K, dtype, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    w = (torch.randn(N, K, device="cuda", generator=g) * 0.02).to(dtype)
    packed, scales = lesson.quantize(w, GROUP)
    return packed, scales, lesson.dequantize(packed, scales, GROUP).to(dtype)


def check():
    bad = 0
    for dtype in (torch.float16, torch.bfloat16):
        for N, K in ((256, 512), (8192, 8192)):
            packed, scales, w16 = weights(N, K, dtype)
            for M in (64, 128, 200, 256, 1):
                x = torch.randn(M, K, device="cuda", dtype=dtype)
                ref = x.float() @ w16.float().T
                for name in CONFIGS:
                    try:
                        y = run(name, x, packed, scales)
                        err = ((y.float() - ref).abs().max() / ref.abs().max()).item()
                    except Exception as e:  # a config that does not compile or launch: say so
                        err = float("nan")
                        print(f"  {name}: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
                    ok = err < 1e-2
                    bad += not ok
                    if not ok or (M == 200 and N == 8192):
                        print(f"check {str(dtype)[6:]:8s} M {M:3d} N {N} K {K} {name:14s} rel err {err:.1e} "
                              f"{'OK' if ok else 'WRONG'}", flush=True)
    print(f"check: {'all right' if not bad else f'{bad} wrong'}", flush=True)
    return bad


def timings(ms, dtypes=(torch.float16, torch.bfloat16)):
    rows = []
    for dtype in dtypes:
        for (N, K) in WEIGHTS:
            packed, scales, w16 = weights(N, K, dtype)
            for M in ms:
                x = torch.randn(M, K, device="cuda", dtype=dtype)
                fns = {name: (lambda c: lambda: run(c, x, packed, scales))(name) for name in [*CONFIGS, *TIMED_ONLY]}
                fns["library"] = lambda: fast.matmul(x, packed, scales, GROUP)
                fns["cublas"] = lambda: x @ w16.T
                t = {}
                for name, fn in fns.items():
                    try:
                        t[name] = (graph_ms(fn, rep=50) * 1e3, float("nan"))  # the GPU's time: the launcher's host time is a probe's
                    except Exception as e:
                        print(f"  {name}: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
                row = dict(dtype=str(dtype)[6:], M=M, N=N, K=K, us=t)
                rows.append(row)
                cb = t["cublas"]
                print(f"{row['dtype']:8s} M {M:4d} {N:5d}x{K:<5d} cuBLAS {cb[0]:6.1f} us | " + "  ".join(
                    f"{n} {v[0]:6.1f} ({cb[0] / v[0]:.2f}x)" for n, v in t.items() if n != "cublas"),
                    flush=True)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", default=None)
    ap.add_argument("--m", type=int, nargs="+", default=[128, 256])
    ap.add_argument("--skip-check", action="store_true")
    ap.add_argument("--dtype", nargs="+", default=["float16", "bfloat16"])
    ap.add_argument("--no-route", action="store_true", help="the library without its Gluon route (gi.ROUTE)")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs a GPU")
        return 0
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, time.strftime("%FT%TZ", time.gmtime()),
          flush=True)
    gi.ROUTE = not args.no_route
    bad = 0 if args.skip_check else check()
    rows = timings(args.m, [getattr(torch, d) for d in args.dtype])
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "gluon_probe.json").write_text(json.dumps(dict(bad=bad, rows=rows), indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
