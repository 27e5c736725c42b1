"""Decode at the table's shapes: does a deeper software pipeline (``num_stages`` 5 and up) stream K and V
closer to a copy, and at which tokens a step, splits and warps.

    PYTHONPATH=$PWD python3 research/decode/stages_probe.py [OUT] [--shapes B1-N32768,B1-N4096]

Why: compiled for sm_90a with triton 3.6, the split kernel at ``num_stages`` 3 or 4 copies each step's K
and V tiles asynchronously into shared memory but keeps one buffer of each, and waits for all copies at
the top of every step (``async_wait {num = 0}``): the next step's tiles are requested only after this
step's dots, so loads and math take turns. The pipeliner gives an indirect load (the tiles' addresses come
from the block-table load) ``(num_stages - 1) // 2`` stages of its own, so only from 5 stages on does it
keep two buffers of K and V and let a step's math run while the next step's tiles arrive. The sweep of
``spread_probe.py`` stopped at 4 stages. Each point is checked against SDPA, then timed in a CUDA graph
under the table's flush (``graph_ms``), beside the copy (``kernel_copy``) and SDPA of the same run.

Prints one line a point, the best points a shape, and writes ``OUT/stages_probe.json``.
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

from solutions.kernels import decode_attention as fast  # noqa: E402

BUDGET_S = 330  # no new point after this many seconds


def points(name, plan):
    """The plan, then (tokens a step, splits, warps, stages) around it: a wide sweep at B 1 x 32768, the
    plan's splits and warps with other tiles and stages elsewhere."""
    own = (plan.block_n, plan.splits, plan.num_warps, plan.num_stages)
    if name == "B1-N32768":
        grid = itertools.product((32, 64, 128), (16, 24, 32, 48, 64), (4, 8), (5, 6))
    else:
        grid = itertools.product((plan.block_n // 2, plan.block_n), (plan.splits,), (plan.num_warps,), (3, 4, 5, 6))
    return [own] + [p for p in grid if p != own and p[0] >= 16]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", default=None)
    ap.add_argument("--shapes", default="B1-N32768,B1-N4096,B64-N1024,B32-N8192,B8-N32768")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs a GPU: the interpreter's times say nothing of one")
        return 0
    t0 = time.time()
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, "page 16", flush=True)
    rows = []
    for name in args.shapes.split(","):
        (q, k, v, seq_lens, table), ref, base, plan = sweep.with_plan(name, rows)
        copy_us, sdpa_us = base["copy"], base["sdpa"]
        for bn, splits, warps, stages in points(name, plan):
            if time.time() - t0 > BUDGET_S:
                print("budget spent: the rest skipped", flush=True)
                break
            cfg = dict(BLOCK_N=bn, splits=splits, num_warps=warps, num_stages=stages, combine_warps=4)
            fn = (lambda c: lambda: fast.tuned_decode_attention(q, k, v, seq_lens, table, config=c))(cfg)
            sweep.measure(fn, ref, dict(BLOCK_N=bn, splits=splits, warps=warps, stages=stages), name, copy_us, sdpa_us,
                          rows)
    sweep.finish(rows, args.out, "stages_probe", args.shapes.split(","), ("BLOCK_N", "splits", "warps", "stages"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
