"""The int4 matmul at decode sizes (M 1 and 16) under both L2 flushes, beside cuBLAS, tinygemm, a copy and a
kernel that only reads the int4 path's bytes.

    PYTHONPATH=$PWD python3 research/int4/flush_probe.py [OUT] [--ms 1 16] [--dtypes bfloat16 float16]

Why: at M 1 the course's kernel and tinygemm only read (the weight, its scales, x) and write a few
kilobytes, where the copy peer writes half of what it moves. The table's flush zeroes a 256 MB buffer
before each call, which leaves the L2 full of modified lines: a reading kernel writes them back as its
loads take their place, and the copy's own writes are still in the L2 when it ends (``research/decode/
spread_probe.py`` measures the same at decode attention's B 1 x 32768). So this times every provider in
a CUDA graph under the zeroing flush (the table's ``graph_ms``) and under a flush that reads, and adds
``read``: a kernel that reads as many bytes as the int4 path's minimum and writes a float a program (the
floor of a kernel that only reads, where the copy is the floor of one that reads and writes).

Prints one line a shape (microseconds; cuBLAS's time over each provider's, and the course's time against
``read``), and writes ``OUT/flush_probe.json``.
"""

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "research" / "decode"))
# isort: off
import tkcourse  # noqa: E402, F401  (first: the mode, before triton is imported)
import torch  # noqa: E402
import triton  # noqa: E402
# isort: on

from spread_probe import read_fn  # noqa: E402  (the read-only kernel, one home)

from benchmarks import int4_matmul as bench  # noqa: E402
from tkcourse.bench import graph_ms  # noqa: E402

FLUSHES = ("zero", "read")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", default=None)
    ap.add_argument("--ms", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--dtypes", nargs="+", default=["bfloat16", "float16"])
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs a GPU: the interpreter's times say nothing of one")
        return 0
    from solutions.kernels.int4_matmul import matmul

    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, flush=True)
    rows = []
    for dtype in args.dtypes:
        for N, K in bench.WEIGHTS:
            for M in args.ms:
                cases = list(bench.shape_cases(matmul, M, N, K, getattr(torch, dtype)))
                fns = {c.provider: c.fn for c in cases}
                moved = cases[0].bytes
                buf = torch.empty(moved // 2 // 2 + 1, dtype=torch.float16, device="cuda")  # half in each of two reads
                fns["read"] = read_fn(buf, torch.empty_like(buf))
                for flush in FLUSHES:
                    t = {p: graph_ms(fn, rep=60, flush=flush) * 1e3 for p, fn in fns.items()}
                    row = dict(shape=f"M{M}-N{N}-K{K}", dtype=dtype, flush=flush, bytes=moved,
                               us={p: round(v, 2) for p, v in t.items()})
                    rows.append(row)
                    print(f"{row['shape']:18s} {dtype:8s} {flush:4s}  " + "  ".join(
                        f"{p} {v:6.1f} us ({t['cublas'] / v:.2f}x)" for p, v in t.items())
                        + f"  course / read {t['read'] / t['triton']:.2f}", flush=True)
                del cases, fns, buf
                torch.cuda.empty_cache()
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "flush_probe.json").write_text(json.dumps(rows, indent=1))
    provs = [p for p in rows[0]["us"]]
    print("\nshape              dtype    flush " + " ".join(f"{p:>9s}" for p in provs) + "  (x cuBLAS)  course of read")
    for r in rows:
        t = r["us"]
        print(f"{r['shape']:18s} {r['dtype']:8s} {r['flush']:5s} " + " ".join(f"{t['cublas'] / t[p]:9.2f}" for p in provs)
              + f"  {t['read'] / t['triton']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
