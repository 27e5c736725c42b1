"""Decode at one long sequence (B 1 x 32768, page 16): how fast can a kernel that only reads the cache be,
under each flush, and which launch plan of the split kernel comes nearest to it.

    PYTHONPATH=$PWD python3 research/decode/spread_probe.py [OUT] [--lens 32768] [--quick]

Why: the recorded row reads 0.73x a same-size copy (the table's flush zeroes a 256 MB buffer before
each call) where 0.8x was asked, and SDPA in the same run reads 0.74x. ``timing_probe.py`` found the
flush to be most of the gap: zeroing leaves the L2 full of modified lines that a reading kernel must
write back as its loads take their place, while a copy's own writes stay in the L2 when it ends. This
measures the bound directly: ``read``, a kernel that does nothing but stream K and V once (each program
sums a 64 KB block of them and stores one float), timed the same ways as the copy, SDPA and the
course. Then the split kernel's plans around the current one (tokens a step, splits, warps, stages),
each checked against SDPA first, timed in CUDA graphs under both flushes.

Prints one line a provider and flush (microseconds; speed as a fraction of the copy's), the sweep
sorted by the reading flush, and writes ``OUT/spread_probe.json``.
"""

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
# isort: off
import tkcourse  # noqa: E402, F401  (first: the mode, before triton is imported)
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
# isort: on

from benchmarks import decode_attention as bench  # noqa: E402
from solutions.kernels import decode_attention as fast  # noqa: E402
from tkcourse.bench import graph_ms  # noqa: E402

FLUSHES = ("zero", "read")
BUDGET_S = 300  # no new sweep point after this many seconds


@triton.jit
def read_kernel(K, V, OUT, n, BLOCK: tl.constexpr):
    """Each program reads BLOCK elements of K and of V and stores their sum: a kernel that only reads."""
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    k = tl.load(K + offs, mask=m, other=0.0).to(tl.float32)
    v = tl.load(V + offs, mask=m, other=0.0).to(tl.float32)
    tl.store(OUT + pid, tl.sum(k + v, axis=0))


def read_fn(k, v):
    n = k.numel()
    block = 16384  # 32 KB of K and 32 KB of V a program
    out = torch.empty(triton.cdiv(n, block), dtype=torch.float32, device=k.device)
    return lambda: read_kernel[(triton.cdiv(n, block),)](k, v, out, n, BLOCK=block, num_warps=8)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", default=None)
    ap.add_argument("--lens", type=int, default=32768)
    ap.add_argument("--quick", action="store_true", help="the providers only, no sweep")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs a GPU: the interpreter's times say nothing of one")
        return 0
    t0 = time.time()
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, f"B1 x {args.lens}, page 16", flush=True)
    q, k, v, seq_lens, table = bench.paged_cache([args.lens], 16)
    kc, vc = bench.contiguous_cache(k, seq_lens, table), bench.contiguous_cache(v, seq_lens, table)
    ref = bench.sdpa(q, kc, vc).float()
    plan = fast.plan_of(q, k, table)
    print("plan:", plan, flush=True)
    dst = torch.empty_like(k)
    fns = {"course": lambda: fast.decode_attention(q, k, v, seq_lens, table), "copy": lambda: dst.copy_(k),
           "read": read_fn(k, v), "sdpa": lambda: bench.sdpa(q, kc, vc)}
    print(f"course max |diff| against SDPA: {(fns['course']().float() - ref).abs().max().item():.1e}")
    rows = []
    base = {}
    for flush in FLUSHES:
        t = {name: graph_ms(fn, rep=80, flush=flush) * 1e3 for name, fn in fns.items()}
        base[flush] = t
        for name, us in t.items():
            rows.append(dict(kind="provider", name=name, flush=flush, us=round(us, 2), of_copy=round(t["copy"] / us, 3)))
            print(f"{flush:5s} flush  {name:7s} {us:7.1f} us  {t['copy'] / us:.3f} of a copy", flush=True)
    if not args.quick:
        own = (plan.block_n, plan.splits, plan.num_warps, plan.num_stages)
        points = [own] + [p for p in itertools.product((64, 128, 256), (16, 24, 32, 48, 64, 96), (4, 8), (2, 3, 4))
                          if p != own]
        for bn, splits, warps, stages in points:
            if time.time() - t0 > BUDGET_S:
                print("budget spent: the rest of the sweep skipped", flush=True)
                break
            cfg = dict(BLOCK_N=bn, splits=splits, num_warps=warps, num_stages=stages, combine_warps=4)
            fn = (lambda c: lambda: fast.tuned_decode_attention(q, k, v, seq_lens, table, config=c))(cfg)
            try:
                err = (fn().float() - ref).abs().max().item()
                t = {flush: graph_ms(fn, rep=40, flush=flush) * 1e3 for flush in FLUSHES}
            except Exception as e:  # noqa: BLE001  (a config that does not compile or fit)
                print(f"{bn}/{splits}/{warps}/{stages}: {type(e).__name__} {str(e)[:100]}", flush=True)
                continue
            row = dict(kind="sweep", BLOCK_N=bn, splits=splits, warps=warps, stages=stages, err=err, plan=(bn, splits, warps, stages) == own,
                       **{f"us_{f}": round(t[f], 2) for f in FLUSHES},
                       **{f"of_copy_{f}": round(base[f]["copy"] / t[f], 3) for f in FLUSHES})
            rows.append(row)
            print(f"{bn}/{splits}/{warps}/{stages}{' (plan)' if row['plan'] else ''}: err {err:.1e}  " + "  ".join(
                f"{f} {t[f]:.1f} us {row[f'of_copy_{f}']:.3f}" for f in FLUSHES), flush=True)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "spread_probe.json").write_text(json.dumps(rows, indent=1))
    sweep = sorted((r for r in rows if r["kind"] == "sweep"), key=lambda r: r["us_read"])
    print("\nBLOCK_N/splits/warps/stages   zero flush us (of copy)   read flush us (of copy)   (best 12 by the read flush)")
    for r in sweep[:12]:
        print(f"{r['BLOCK_N']}/{r['splits']}/{r['warps']}/{r['stages']}{' plan' if r['plan'] else ''}".ljust(30)
              + f"{r['us_zero']:7.1f} ({r['of_copy_zero']:.3f})        {r['us_read']:7.1f} ({r['of_copy_read']:.3f})")
    print("\nprovider  zero flush us (of copy)  read flush us (of copy)")
    for name in fns:
        z, r = base["zero"][name], base["read"][name]
        print(f"{name:8s}  {z:7.1f} ({base['zero']['copy'] / z:.3f})          {r:7.1f} ({base['read']['copy'] / r:.3f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
