"""Decode at batch 1 x 32768 timed three ways in one run, its pages shuffled and in order, beside a copy.

    PYTHONPATH=$PWD python3 research/decode/timing_probe.py [--lens 32768] [--page 16]

Why: the recorded row (``tkcourse bench decode_attention``, pages shuffled in the pool, the L2 flushed
before each call) reads 50 us a call, 0.73x a same-size copy; ``plan_probe.py`` read 39 us (0.85x) with
``do_bench_cudagraph``, whose replays run back to back with nothing flushed, so part of a 134 MB cache
may still sit in the 60 MB L2 from the replay before. This says which method and which layout each
figure belongs to, every provider measured the same way in the same run:

- ``graph, flushed``: ``tkcourse.bench.graph_ms`` (a CUDA graph, the L2 flushed before each replay:
  the table's ``graph_ms``);
- ``eager, flushed``: ``triton.testing.do_bench`` (the table's ``ms``: the lean launch from the host);
- ``graph, read flush``: as the first, the L2 flushed by reading the 256 MB buffer instead of zeroing it,
  which leaves no modified line in the L2 for the timed kernel's reads to write back first (a model's
  decode step finds the L2 so: the previous kernels read far more than they wrote);
- ``graph, back to back``: ``triton.testing.do_bench_cudagraph`` (``plan_probe.py``'s method).

Providers: the course's decode attention (lean path), a copy of the K cache (read and write: as many
bytes as decode reads of K and V), SDPA's GQA decode on the same cache laid out contiguously. Prints
microseconds and each one's speed as a fraction of the copy's (copy time over its time: 0.8 is the
asked 80% of a copy).
"""

import argparse
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

METHODS = {
    "graph, flushed": lambda fn: graph_ms(fn, rep=50),
    "graph, read flush": lambda fn: graph_ms(fn, rep=50, flush="read"),
    "eager, flushed": lambda fn: triton.testing.do_bench(fn, warmup=10, rep=50),
    "graph, back to back": lambda fn: triton.testing.do_bench_cudagraph(fn, rep=50),
}


def providers(lens, page, in_order):
    q, k, v, seq_lens, table = bench.paged_cache(lens, page)
    if in_order:  # the same pool, each sequence's pages in order, one after another (uniform lengths)
        B, n = table.shape
        table = torch.arange(B * n, dtype=torch.int32, device=table.device).view(B, n)
    dst = torch.empty_like(k)
    kc, vc = bench.contiguous_cache(k, seq_lens, table), bench.contiguous_cache(v, seq_lens, table)
    out = fast.decode_attention(q, k, v, seq_lens, table)  # right first: against SDPA on the same cache
    err = (out.float() - bench.sdpa(q, kc, vc).float()).abs().max().item()
    return err, {"course": lambda: fast.decode_attention(q, k, v, seq_lens, table),
                 "copy": lambda: dst.copy_(k),
                 "sdpa": lambda: bench.sdpa(q, kc, vc)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lens", type=int, nargs="+", default=[32768], help="tokens of each sequence")
    ap.add_argument("--page", type=int, default=16)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs a GPU: the interpreter's times say nothing of one")
        return 0
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, f"B{len(args.lens)} x {args.lens[0]}, "
          f"page {args.page}", flush=True)
    print(f"{'layout':9s} {'method':20s} {'course us':>10s} {'copy us':>9s} {'sdpa us':>9s} {'course x copy':>14s} "
          f"{'sdpa x copy':>12s}")
    for in_order in (False, True):
        err, fns = providers(args.lens, args.page, in_order)
        layout = "in order" if in_order else "shuffled"
        for method, timer in METHODS.items():
            t = {name: timer(fn) * 1e3 for name, fn in fns.items()}
            print(f"{layout:9s} {method:20s} {t['course']:10.1f} {t['copy']:9.1f} {t['sdpa']:9.1f} "
                  f"{t['copy'] / t['course']:14.2f} {t['copy'] / t['sdpa']:12.2f}", flush=True)
        print(f"{layout:9s} course against SDPA: max |diff| {err:.1e}", flush=True)
        del fns
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
