"""Decode attention with K and V loaded ``evict_first`` against the same plan without it, at the bench's shapes.

Its one run (``logs/evict_probe_first.log``) found no difference, and the switch it measures (a constexpr
``EVICT_FIRST`` on the split kernel's K and V loads, the config key ``evict_first``) was taken out of
``solutions/kernels/decode_attention.py`` again: put it back to run this.

    PYTHONPATH=$PWD python3 research/decode/evict_probe.py [OUT] [--shapes B1-N32768 ...]

Why: the recorded rows flush the L2 before each call by zeroing a 256 MB buffer, which leaves the L2 full
of modified lines; a kernel that only reads must write those back as its loads take their place
(``timing_probe.py``: B 1 x 32768 reads 0.73x a copy's speed under that flush, 0.81x under a flush that
reads). With ``evict_first`` on its K and V loads the lines it brings in are the ones the L2 gives up
first, so the lines already there, written or not, may stay until a later kernel needs the room. A
model's step has such lines too: the activations the last kernels wrote and the next ones read.

For each shape: the fast path's own plan (``decode_attention.plan_of``) launched through
``tuned_decode_attention`` with ``config`` ``evict_first`` False and True (checked against SDPA first),
a copy of the K pool (the bench's: as many bytes moved as decode reads), SDPA's GQA decode; each timed as the table times it (``do_bench``, zeroing
flush), in a CUDA graph with the zeroing flush (the table's ``graph_ms``) and with the reading flush.
Prints microseconds and speed as a fraction of the copy's; writes ``OUT/evict_probe.json``.
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
# isort: off
import tkcourse  # noqa: E402, F401  (first: the mode, before triton is imported)
import torch  # noqa: E402
import triton  # noqa: E402
# isort: on

from benchmarks import decode_attention as bench  # noqa: E402
from solutions.kernels import decode_attention as fast  # noqa: E402
from tkcourse.bench import graph_ms  # noqa: E402

SHAPES = {**bench.SPREAD_SHAPES, "B32-N8192": [8192] * 32, "B8-N32768": [32768] * 8}
METHODS = {
    "eager, zero flush": lambda fn: triton.testing.do_bench(fn, warmup=10, rep=60),
    "graph, zero flush": lambda fn: graph_ms(fn, rep=60),
    "graph, read flush": lambda fn: graph_ms(fn, rep=60, flush="read"),
}


def providers(lens, page):
    q, k, v, seq_lens, table = bench.paged_cache(lens, page)
    plan = fast.plan_of(q, k, table)
    base = dict(BLOCK_N=plan.block_n, splits=plan.splits, num_warps=plan.num_warps, num_stages=plan.num_stages,
                combine_warps=plan.combine_warps)
    kc, vc = bench.contiguous_cache(k, seq_lens, table), bench.contiguous_cache(v, seq_lens, table)
    ref = bench.sdpa(q, kc, vc).float()
    dst = torch.empty_like(k)  # the bench's copy: the K pool, read and written
    fns, errs = {}, {}
    for evict in (False, True):
        cfg = dict(base, evict_first=evict)
        name = f"plan, evict_first={evict}"
        errs[name] = (fast.tuned_decode_attention(q, k, v, seq_lens, table, config=cfg).float() - ref).abs().max().item()
        fns[name] = (lambda c: lambda: fast.tuned_decode_attention(q, k, v, seq_lens, table, config=c))(cfg)
    fns["copy"] = lambda: dst.copy_(k)
    fns["sdpa"] = lambda: bench.sdpa(q, kc, vc)
    return plan, errs, fns


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", default=None, help="folder for evict_probe.json")
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--page", type=int, default=bench.SPREAD_PAGE_SIZE)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs a GPU: the interpreter's times say nothing of one")
        return 0
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, f"page {args.page}", flush=True)
    rows = []
    for shape in args.shapes:
        plan, errs, fns = providers(SHAPES[shape], args.page)
        print(f"{shape}: {plan}; max |diff| against SDPA: " + ", ".join(f"{k} {e:.1e}" for k, e in errs.items()),
              flush=True)
        for method, timer in METHODS.items():
            t = {name: timer(fn) * 1e3 for name, fn in fns.items()}
            rows.append(dict(shape=shape, method=method, us=t, errors=errs, splits=plan.splits, block_n=plan.block_n))
            print(f"  {method:18s} " + "  ".join(f"{k} {v:7.1f} us ({t['copy'] / v:.2f} of copy)" for k, v in t.items()),
                  flush=True)
        del fns
        torch.cuda.empty_cache()
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "evict_probe.json").write_text(json.dumps(rows, indent=1))
    print("\nshape        method              off/copy  on/copy  sdpa/copy  on vs off")
    for r in rows:
        t = r["us"]
        off, on = t["plan, evict_first=False"], t["plan, evict_first=True"]
        print(f"{r['shape']:12s} {r['method']:18s} {t['copy'] / off:8.2f} {t['copy'] / on:8.2f} {t['copy'] / t['sdpa']:10.2f} "
              f"{off / on:9.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
