"""H200: from how many rows of x is cuBLAS on the dequantized weight faster than the int4 kernels?

    PYTHONPATH=$PWD python3 research/int4/dense_probe.py [--rounds 3] [--ms 128 256 512 1024 2048 4096]

At prefill sizes the int4 product is bound by the tensor cores, and the library's kernels (the Gluon
ping-pong from 33 to 2048 rows, the 128-row Triton tile above) run below cuBLAS on the 16-bit weight
(0.4-0.7x from 512 rows: ``logs/gluon_probe_twelfth.log``) because the tensor cores wait on the
dequantization inside every tile. Dequantizing the whole weight first (``kernels.int4_matmul.dequantize``,
one pass that reads the packed bytes and writes the 16-bit weight) costs a fixed time, about that of
writing the 16-bit weight once, and cuBLAS then runs at its own speed: past some M that fixed time is the
smaller loss. Checks first (the dequantized weight against the lesson's bit for bit, the product against
``lesson.reference``); then, at ``benchmarks/int4_matmul.py``'s four weight shapes, fp16 and bf16, the library
as routed today (``DENSE_MIN_M`` None), the dense route, the dequantization alone and cuBLAS on the 16-bit
weight, each replayed from a CUDA graph with the L2 flushed before each replay (``tkcourse.bench.graph_ms``),
in rounds that take them in turns. Prints medians and ratios to cuBLAS. Without a GPU it says so and exits 0.
"""

import argparse
import statistics
import sys

import torch

import tkcourse  # noqa: F401  (the mode, before any kernel is defined)
from benchmarks.int4_matmul import GROUP, WEIGHTS
from research.int4.sweep import problem  # (M, N, K) of x and a quantized weight on the GPU
from solutions import int4_matmul as lesson
from solutions.kernels import int4_matmul as fast
from tkcourse.bench import graph_ms


def check():
    bad = 0
    for dtype in (torch.float16, torch.bfloat16):
        for M, N, K in ((300, 320, 2048), (1024, 4096, 4096)):
            x, w, p, s = problem(M, N, K, dtype, seed=M)
            same = torch.equal(fast.dequantize(p, s, GROUP), lesson.dequantize(p, s, GROUP))
            y = fast._dense(x, p, s, GROUP).float()
            r = lesson.reference(x, p, s, GROUP).float()
            err = ((y - r).abs().max() / r.abs().max()).item()
            ok = same and err < 1e-2
            bad += not ok
            print(f"check {str(dtype)[6:]} M {M} {N}x{K}: dequantized bit for bit {same}, product rel err {err:.1e} "
                  f"{'OK' if ok else 'WRONG'}", flush=True)
    return bad


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ms", type=int, nargs="+", default=[128, 256, 512, 1024, 2048, 4096])
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("no GPU: nothing to measure")
        return 0
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    fast.DENSE_MIN_M = None  # the library as routed without the dense route
    bad = check()
    table = []
    for dtype in (torch.bfloat16, torch.float16):
        for N, K in WEIGHTS:
            for M in args.ms:
                x, w, p, s = problem(M, N, K, dtype)
                calls = {"cublas": lambda: x @ w.T, "library": lambda: fast.matmul(x, p, s, GROUP),
                         "dense": lambda: fast._dense(x, p, s, GROUP),
                         "dequantize": lambda: fast.dequantize(p, s, GROUP, x.dtype)}
                for f in calls.values():  # compile and warm
                    f()
                times = {name: [] for name in calls}
                for r in range(args.rounds):
                    names = list(calls)
                    names = names[r % len(names):] + names[:r % len(names)]
                    for name in names:
                        times[name].append(graph_ms(calls[name], rep=10))
                med = {name: statistics.median(t) * 1e3 for name, t in times.items()}
                row = (f"{str(dtype)[6:]:8} {N:5}x{K:<5} M {M:4} cuBLAS {med['cublas']:7.1f} us | library "
                       f"{med['library']:7.1f} ({med['cublas'] / med['library']:.2f}x)  dense {med['dense']:7.1f} "
                       f"({med['cublas'] / med['dense']:.2f}x)  dequantize {med['dequantize']:6.1f} "
                       f"({N * K * (0.5 + 2) / med['dequantize'] / 1e6:.2f} TB/s)")
                print(row, flush=True)
                table.append(row)
    print(f"\nchecks wrong: {bad}\n" + "\n".join(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
