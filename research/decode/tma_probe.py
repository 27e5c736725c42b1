"""Decode with K and V by the TMA (``tma_pages.py``): does a page's box a load bring B 1 x 32768 from the
library's 0.72-0.77 of a copy toward the 0.85 of a kernel that only reads the cache, and what does it do at
the table's other shapes.

    PYTHONPATH=$PWD python3 research/decode/tma_probe.py [OUT] [--shapes B1-N32768,B1-N4096,...]

Compiled for sm_90a with triton 3.6 (``tma_pages.py --compile``), the pipeliner gives the descriptor loads,
whose coordinates come from a block-table load, ``(num_stages - 1) // 2`` buffers (one at 3 and 4 stages, two
at 5, three at 7); a program holds 8 kB of them a box of 16 tokens, so many programs fit an SM. Points: boxes
of 16 tokens, 1/2/4/8 boxes a step, stages 3/5/7, splits 16-128, warps 4 (and 8 at the plan's size) at
B 1 x 32768; the best ones again at the other shapes, with
the library's splits there. Each point is checked against SDPA, then timed in a CUDA
graph under the table's flush (``graph_ms``) beside the copy, SDPA and the library's plan of the same run.

Prints one line a point, the best points a shape, and writes ``OUT/tma_probe.json``.
"""

import argparse
import itertools
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
# isort: off
import tkcourse  # noqa: E402, F401  (first: the mode, before triton is imported)
import torch  # noqa: E402
import triton  # noqa: E402
# isort: on

import points as sweep  # noqa: E402  (this folder's shared sweep loop)
import tma_pages  # noqa: E402

from solutions.kernels import decode_plan  # noqa: E402

BUDGET_S = 420  # no new point after this many seconds
KEYS = ("kernel", "BLOCK_N", "splits", "warps", "stages")


def grid_long():
    """(tokens a step, splits, warps, stages) at B 1 x 32768."""
    pts = list(itertools.product((16, 32, 64, 128), (16, 32, 64, 128), (4,), (3, 5, 7)))
    return pts + [(bn, s, 8, st) for bn, s, st in itertools.product((64, 128), (32, 64), (3, 5))]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", default=None)
    ap.add_argument("--shapes", default="B1-N32768,B1-N4096,B64-N1024,B32-N8192,B8-N32768")
    ap.add_argument("--best", type=int, default=6, help="points of B1-N32768 tried again at the other shapes")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs a GPU: the interpreter's times say nothing of one")
        return 0
    t0 = time.time()
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, "page 16", flush=True)
    rows = []
    best = []
    for name in args.shapes.split(","):
        (q, k, v, seq_lens, table), ref, base, plan = sweep.with_plan(name, rows)
        own = (plan.block_n, plan.splits, plan.num_warps, plan.num_stages)
        others = dict.fromkeys([own] + [(bn, plan.splits, w, st) for bn, _, w, st in best])  # the plan's splits
        pts = grid_long() if name == "B1-N32768" else list(others)
        descs = tma_pages.descriptors(k, v, 16)
        for bn, splits, warps, stages in pts:
            if time.time() - t0 > BUDGET_S:
                print("budget spent: the rest skipped", flush=True)
                break
            p = decode_plan.Plan(bn, splits, warps, stages, 4, max(1, min(triton.next_power_of_2(splits), 4096 // q.shape[2])))
            fn = (lambda p: lambda: tma_pages.decode_attention_tma(q, k, v, seq_lens, table, plan=p, box=16,
                                                                    descs=descs))(p)
            sweep.measure(fn, ref, dict(kernel="tma", BLOCK_N=bn, splits=splits, warps=warps, stages=stages), name,
                          base["copy"], base["sdpa"], rows)
        if name == "B1-N32768":
            ranked = sorted((r for r in rows if r["kind"] == "point" and r["shape"] == name), key=lambda r: r["us"])
            best = [(r["BLOCK_N"], r["splits"], r["warps"], r["stages"]) for r in ranked[:args.best]]
    sweep.finish(rows, args.out, "tma_probe", args.shapes.split(","), KEYS)
    print(f"done in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
