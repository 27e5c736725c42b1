"""Decode at the table's shapes with the block table read ahead (``table_ahead.py``): does giving K and V
every pipeline stage bring B 1 x 32768 from the library's 0.73-0.77 of a copy toward the 0.85 of a kernel
that only reads the cache, and what does it do at the shapes the library already streams.

    PYTHONPATH=$PWD python3 research/decode/ahead_probe.py [OUT] [--shapes B1-N32768,B1-N4096,...]

Compiled for sm_90a (``table_ahead.py --compile``), the library's split kernel keeps one buffer of K and of
V at 3 and 4 stages and waits for every copy at the top of each step; the table-ahead kernel keeps
``num_stages - 1`` buffers (2 at 3 stages: 139 kB at 128 tokens a step) and leaves ``2 (num_stages - 2)``
copies in flight. Each point is checked against SDPA, then timed in a CUDA graph under the table's flush
(``graph_ms``) beside the copy (``kernel_copy``), SDPA and the library's own plan of the same run. Points:
the library's plan on the table-ahead kernel first, then tokens a step 32/64/128 x stages 2-5 x splits
(the plan's, half and twice) x warps 4/8 at B 1 x 32768, and the plan's splits and warps with other tiles
and stages elsewhere. A point that does not fit in shared memory is reported and skipped.

Prints one line a point, the best points a shape, and writes ``OUT/ahead_probe.json``. First run
2026-12-04 16:38 UTC (``logs/ahead_probe_first.*``): no point beyond 2% of the library's plan.
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
import table_ahead  # noqa: E402

from solutions.kernels import decode_attention as fast  # noqa: E402
from solutions.kernels import decode_plan  # noqa: E402

BUDGET_S = 330  # no new point after this many seconds


def points(name, plan):
    """(kernel, tokens a step, splits, warps, stages): the library's plan on both kernels, then the
    table-ahead kernel around it."""
    own = (plan.block_n, plan.splits, plan.num_warps, plan.num_stages)
    if name == "B1-N32768":
        grid = itertools.product((32, 64, 128), sorted({plan.splits // 2, plan.splits, plan.splits * 2}), (4, 8),
                                 (2, 3, 4, 5))
    else:
        grid = itertools.product((plan.block_n // 2, plan.block_n), (plan.splits,), (plan.num_warps,), (2, 3, 4, 5))
    return [("library", *own), ("ahead", *own)] + [("ahead", *p) for p in grid if p != own and p[0] >= 16]


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
        for kernel, bn, splits, warps, stages in points(name, plan):
            if time.time() - t0 > BUDGET_S:
                print("budget spent: the rest skipped", flush=True)
                break
            p = decode_plan.Plan(bn, splits, warps, stages, 4, max(1, min(triton.next_power_of_2(splits), 4096 // q.shape[2])))
            if kernel == "library":
                cfg = dict(BLOCK_N=bn, splits=splits, num_warps=warps, num_stages=stages, combine_warps=4)
                fn = (lambda c: lambda: fast.tuned_decode_attention(q, k, v, seq_lens, table, config=c))(cfg)
            else:
                fn = (lambda p: lambda: table_ahead.decode_attention_ahead(q, k, v, seq_lens, table, plan=p))(p)
            sweep.measure(fn, ref, dict(kernel=kernel, BLOCK_N=bn, splits=splits, warps=warps, stages=stages), name,
                          base["copy"], base["sdpa"], rows)
    sweep.finish(rows, args.out, "ahead_probe", args.shapes.split(","), ("kernel", "BLOCK_N", "splits", "warps", "stages"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
