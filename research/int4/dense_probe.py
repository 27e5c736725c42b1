"""H200: from how many rows of x is cuBLAS on the dequantized weight faster than the int4 kernels?

    PYTHONPATH=$PWD python3 research/int4/dense_probe.py [--rounds 3] [--ms 512 1024 2048 4096]

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
in rounds that take them in turns, after a choice of the dequantizing kernel's block among
``DEQUANT_CONFIGS`` (each timed alone). Prints medians and ratios to cuBLAS, and the least M from which the
dense route beat the library at every shape and dtype. Without a GPU it says so and exits 0.
"""

import argparse
import statistics
import sys

import torch

import tkcourse  # noqa: F401  (the mode, before any kernel is defined)
from benchmarks.int4_matmul import GROUP, WEIGHTS
from research.int4.sweep import in_turns, problem  # problem: (M, N, K) of x and a quantized weight on the GPU
from solutions import int4_matmul as lesson
from solutions.kernels import int4_matmul as fast
from tkcourse.bench import graph_ms


def check():
    bad = 0
    for dtype in (torch.float16, torch.bfloat16):
        for M, N, K in ((300, 320, 2048), (1024, 4096, 4096)):
            x, w, p, s = problem(M, N, K, dtype, seed=M)
            same = torch.equal(fast.dequantize(p, s, GROUP), lesson.dequantize(p, s, GROUP))
            y = fast.dense_matmul(x, p, s, GROUP).float()
            r = lesson.reference(x, p, s, GROUP).float()
            err = ((y - r).abs().max() / r.abs().max()).item()
            ok = same and err < 1e-2
            bad += not ok
            print(f"check {str(dtype)[6:]} M {M} {N}x{K}: dequantized bit for bit {same}, product rel err {err:.1e} "
                  f"{'OK' if ok else 'WRONG'}", flush=True)
    return bad


#: ``kernels.int4_matmul``'s (DEQUANT_BLOCK, DEQUANT_WARPS) candidates, timed alone first; the fastest on
#: average over the four weights (bf16) is then the dense route's
DEQUANT_CONFIGS = [((16, 128), 4), ((32, 128), 4), ((64, 128), 8), ((32, 64), 4)]


def pick_dequant(rounds):
    score = {}
    for N, K in WEIGHTS:
        _, _, p, s = problem(1, N, K, torch.bfloat16)
        times = {c: [] for c in DEQUANT_CONFIGS}
        for r in range(rounds):
            for c in DEQUANT_CONFIGS[r % len(DEQUANT_CONFIGS):] + DEQUANT_CONFIGS[:r % len(DEQUANT_CONFIGS)]:
                fast.DEQUANT_BLOCK, fast.DEQUANT_WARPS = c
                times[c].append(graph_ms(lambda: fast.dequantize(p, s, GROUP), rep=10))
        best = min(statistics.median(t) for t in times.values())
        for c, t in times.items():
            us = statistics.median(t) * 1e3
            score.setdefault(c, []).append(statistics.median(t) / best)
            print(f"dequantize bf16 {N:5}x{K:<5} block {c[0]} warps {c[1]}: {us:7.1f} us "
                  f"({N * K * 2.5 / us / 1e6:.2f} TB/s)", flush=True)
    chosen = min(score, key=lambda c: statistics.mean(score[c]))
    fast.DEQUANT_BLOCK, fast.DEQUANT_WARPS = chosen
    print(f"dequantize: block {chosen[0]} warps {chosen[1]} (mean time over the fastest "
          f"{statistics.mean(score[chosen]):.3f})", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ms", type=int, nargs="+", default=[512, 1024, 2048, 4096])
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("no GPU: nothing to measure")
        return 0
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    fast.DENSE_MIN_M = None  # the library as routed without the dense route
    bad = check()
    pick_dequant(args.rounds)
    table, dense_won = [], []
    for dtype in (torch.bfloat16, torch.float16):
        for N, K in WEIGHTS:
            for M in args.ms:
                x, w, p, s = problem(M, N, K, dtype)
                calls = {"cublas": lambda: x @ w.T, "library": lambda: fast.matmul(x, p, s, GROUP),
                         "dense": lambda: fast.dense_matmul(x, p, s, GROUP),
                         "dequantize": lambda: fast.dequantize(p, s, GROUP, x.dtype)}
                times = in_turns(calls, args.rounds, rep=10)
                med = {name: statistics.median(t) * 1e3 for name, t in times.items()}
                row = (f"{str(dtype)[6:]:8} {N:5}x{K:<5} M {M:4} cuBLAS {med['cublas']:7.1f} us | library "
                       f"{med['library']:7.1f} ({med['cublas'] / med['library']:.2f}x)  dense {med['dense']:7.1f} "
                       f"({med['cublas'] / med['dense']:.2f}x)  dequantize {med['dequantize']:6.1f} "
                       f"({N * K * (0.5 + 2) / med['dequantize'] / 1e6:.2f} TB/s)")
                print(row, flush=True)
                table.append(row)
                dense_won.append((M, med["dense"] < med["library"]))
    print(f"\nchecks wrong: {bad}\n" + "\n".join(table))
    wins = [M for M in args.ms if all(w for m, w in dense_won if m == M)]
    print(f"dense route faster than the library at every shape and dtype from M = {min(wins) if wins else None} "
          f"(of {args.ms})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
