"""H200 A/B of the int4 kernel's tile at 9-16 rows of x (``--set pair``): x on the left (``CONFIGS[16]`` until
this probe's first run, ``logs/pair_probe_first.log``, where it read "recorded") against ``PARTS`` 2 (the weight
on the left, x's 16 rows as two ``mma.sync`` of 8 columns on the same dequantized weight); and at 17-32 rows
(``--set quad``): the 128-row tile those rows take today against ``PARTS`` 4 (four MMAs of 8 columns). cuBLAS
on the 16-bit weight in the same run.

    PYTHONPATH=$PWD python3 research/int4/pair_probe.py [--set pair|quad] [--rounds 3] [--ms 16 12]

First each candidate against ``lesson.reference`` (relative error, fp16 and bf16, a ragged M and split-K);
then, at ``benchmarks/int4_matmul.py``'s four weight shapes, each candidate and cuBLAS replayed from a CUDA
graph with the L2 flushed before each replay (``tkcourse.bench.graph_ms``, as the table's ``graph_ms``), in
rounds that take the candidates in turns. Prints the medians over rounds and each candidate's x cuBLAS.
Without a GPU it says so and exits 0.
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

cfg = fast.config
SETS = {
    "pair": {
        "x on the left": cfg(16, 128, 128, 0, False, 4, 3, deq=3, post_scale=True),
        "pair bn64 w4 s3": cfg(16, 64, 128, 0, True, 4, 3, deq=3, post_scale=True, parts=2),
        "pair bn64 w4 s4": cfg(16, 64, 128, 0, True, 4, 4, deq=3, post_scale=True, parts=2),
        "pair bn32 w2 s3": cfg(16, 32, 128, 0, True, 2, 3, deq=3, post_scale=True, parts=2),
        "pair bn128 w4 s3": cfg(16, 128, 128, 0, True, 4, 3, deq=3, post_scale=True, parts=2),
        "pair bn128 w8 s3": cfg(16, 128, 128, 0, True, 8, 3, deq=3, post_scale=True, parts=2),
    },
    "quad": {
        "128-row tile": fast.CONFIGS[1 << 62],
        "quad bn64 w4 s3": cfg(32, 64, 128, 0, True, 4, 3, deq=3, post_scale=True, parts=4),
        "quad bn64 w4 s4": cfg(32, 64, 128, 0, True, 4, 4, deq=3, post_scale=True, parts=4),
        "quad bn32 w2 s3": cfg(32, 32, 128, 0, True, 2, 3, deq=3, post_scale=True, parts=4),
        "quad bn64 w8 s3": cfg(32, 64, 128, 0, True, 8, 3, deq=3, post_scale=True, parts=4),
        "quad bn128 w8 s3": cfg(32, 128, 128, 0, True, 8, 3, deq=3, post_scale=True, parts=4),
    },
}
#: the rows of x and the split each candidate is checked at, a set's full tile, a ragged one and an odd one
CHECK_ROWS = {"pair": ((16, 0), (13, 4), (9, 1)), "quad": ((32, 0), (24, 4), (17, 1))}
CANDIDATES = SETS["pair"]


def check(rows=CHECK_ROWS["pair"]):
    bad = 0
    for dtype in (torch.float16, torch.bfloat16):
        for name, c in CANDIDATES.items():
            for M, split in rows:
                x, w, p, s = problem(M, 320, 2048, dtype, seed=M)
                y = fast.run(x, p, s, GROUP, dict(c, SPLIT_K=split)).float()
                r = lesson.reference(x, p, s, GROUP).float()
                err = ((y - r).abs().max() / r.abs().max()).item()
                bad += err >= 1e-2
                print(f"check {str(dtype)[6:]} {name} M {M} split {split}: rel err {err:.1e} "
                      f"{'OK' if err < 1e-2 else 'WRONG'}", flush=True)
    return bad


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ms", type=int, nargs="+", default=None, help="rows of x (default 16, or 32 24 for quad)")
    ap.add_argument("--set", choices=sorted(SETS), default="pair")
    args = ap.parse_args(argv)
    global CANDIDATES
    CANDIDATES = SETS[args.set]
    args.ms = args.ms or ([32, 24] if args.set == "quad" else [16])
    if not torch.cuda.is_available():
        print("no GPU: nothing to measure")
        return 0
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    bad = check(CHECK_ROWS[args.set])
    table = []
    for dtype in (torch.bfloat16, torch.float16):
        for M in args.ms:
            for N, K in WEIGHTS:
                x, w, p, s = problem(M, N, K, dtype)
                calls = {"cublas": lambda: x @ w.T}
                calls.update({name: (lambda c=c: fast.run(x, p, s, GROUP, c)) for name, c in CANDIDATES.items()})
                times = in_turns(calls, args.rounds, rep=20)
                med = {name: statistics.median(t) for name, t in times.items()}
                row = f"{str(dtype)[6:]:8} M {M:3} {N:5}x{K:<5} cuBLAS {med['cublas'] * 1e3:6.1f} us | " + "  ".join(
                    f"{name} {med[name] * 1e3:5.1f} ({med['cublas'] / med[name]:.2f}x)" for name in CANDIDATES)
                print(row, flush=True)
                table.append(row)
    print(f"\nchecks wrong: {bad}\n" + "\n".join(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
