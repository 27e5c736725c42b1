"""H200 check of lesson 09's decode attention: correctness first, then bandwidth against a copy and SDPA.

    PYTHONPATH=$PWD python3 research/decode/decode_check.py OUT_DIR

1. Correctness, fp16 against the float32 torch reference, on a paged cache with a shuffled block
   table: small awkward batches (a sequence of 1 token, partial last pages, G = 8 and 1, D = 64) and
   the benchmark's shapes (B 32 at 8192, B 8 at 32768, mixed lengths; page_size 16 and 64), the
   lesson's launcher and the tuned one. A wrong result stops the script before any timing.
2. A sweep of the tuned launcher's plan (tokens a step, warps, stages, then split counts for the two best) on
   the benchmark's shapes, within a time budget, written to OUT_DIR/sweep.json.
3. The benchmark's cases (``benchmarks/decode_attention.py``: triton, copy, SDPA) plus the lesson's
   launcher and the sweep's best plan, into OUT_DIR/decode.csv; the markdown table is printed last.
"""

import json
import sys
import time
from pathlib import Path

import torch
import triton

import tkcourse  # noqa: F401  (the mode, before any kernel is defined)
from benchmarks import decode_attention as bench
from solutions import decode_attention as lesson
from solutions.kernels import decode_attention as tuned

T0 = time.time()
BUDGET_S = 100
SPLITS = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 24, 32)  # split counts tried for the best plans  # the sweep stops starting new configs after this many seconds of the run


def ms(fn, warmup=5, rep=20):
    return triton.testing.do_bench(fn, warmup=warmup, rep=rep, quantiles=[0.5])


def check(label, fn, args, atol=3e-3):
    out = fn(*args)
    ref = lesson.reference(*args)
    err = (out.float() - ref.float()).abs().max().item()
    ok = out.dtype == args[0].dtype and out.shape == args[0].shape and err <= atol
    print(f"{'ok  ' if ok else 'FAIL'} {label}: max abs error {err:.2e}", flush=True)
    if not ok:
        sys.exit(f"wrong result: {label}")


def correctness():
    for lens, ps, hq, hkv, d in [([1, 100, 1000], 16, 32, 8, 128), ([17, 64, 333], 64, 32, 8, 128),
                                 ([5000, 1], 16, 8, 1, 64), ([250, 4097], 32, 16, 16, 64)]:
        args = bench.paged_cache(lens, ps, Hq=hq, Hkv=hkv, D=d, seed=len(lens))
        for name, f in (("lesson", lesson.decode_attention), ("tuned", tuned.tuned_decode_attention)):
            check(f"{name} lens {lens} page {ps} Hq {hq} Hkv {hkv} D {d}", f, args)
    for ps in bench.PAGE_SIZES:
        for shape, lens in bench.SHAPES.items():
            args = bench.paged_cache(lens, ps)
            for name, f in (("lesson", lesson.decode_attention), ("tuned", tuned.tuned_decode_attention)):
                check(f"{name} {shape} page {ps}", f, args)
            del args
            torch.cuda.empty_cache()


def _sweep_shape(shape, lens, ps, configs):
    """Rows (fastest first) of ``configs`` at one shape, then of split counts for the three fastest."""
    args = bench.paged_cache(lens, ps)
    moved = bench.kv_bytes(args[1], args[3])
    rows = []

    def run(cfg):
        if time.time() - T0 > BUDGET_S:
            return
        try:
            t = ms(lambda: tuned.decode_attention(*args, config=cfg))
        except Exception as e:  # noqa: BLE001  (a config that fails to compile or launch)
            print(f"  {shape} P{ps} {cfg}: {type(e).__name__} {str(e)[:120]}", flush=True)
            return
        rows.append(dict(shape=f"{shape}-P{ps}", **cfg, us=round(t * 1e3, 2), tbps=round(moved / t * 1e-9, 3)))

    for cfg in configs:
        run(cfg)
    for r in sorted(rows, key=lambda r: r["us"])[:2]:
        for splits in SPLITS:
            run({k: r[k] for k in ("BLOCK_N", "num_warps", "num_stages")} | {"splits": splits})
    return sorted(rows, key=lambda r: r["us"])


def sweep():
    """Best config per shape, found in two stages: (BLOCK_N, warps, stages) at the default split count,
    then split counts for the three best; stops early past BUDGET_S."""
    results, best = [], {}
    stage1 = [dict(BLOCK_N=bn, num_warps=w, num_stages=s) for bn, w, s in
              [(128, 4, 3), (128, 4, 2), (128, 8, 2), (128, 8, 3), (64, 8, 3), (32, 4, 2), (256, 8, 2), (256, 8, 3)]]
    for ps in bench.PAGE_SIZES:
        for shape, lens in bench.SHAPES.items():
            first = shape == "B32-N8192"  # comes first: its stage 1 picks the others' candidates
            rows = _sweep_shape(shape, lens, ps, stage1 if first else best.get(ps, stage1[:1]))
            if first:
                plans = [{k: r[k] for k in ("BLOCK_N", "num_warps", "num_stages")} for r in rows]
                best[ps] = [p for i, p in enumerate(plans) if p not in plans[:i]][:3]
            results += rows
            if rows:
                print(f"sweep {shape} P{ps}: best {rows[0]} of {len(rows)} ({time.time() - T0:.0f} s)", flush=True)
            torch.cuda.empty_cache()
    return results


def timed(shape, lens, ps, best):
    """One shape's row: the benchmark's providers, the lesson's launcher and the sweep's best plan."""
    row = {"shape": f"{shape}-P{ps}"}
    for c in bench.shape_cases(shape, lens, ps):
        t = ms(c.fn, warmup=25, rep=100)
        row[c.provider] = (round(t * 1e3, 1), round(c.bytes / t * 1e-9, 3))
    args = bench.paged_cache(lens, ps)
    moved = bench.kv_bytes(args[1], args[3]) + 2 * args[0].numel() * args[0].element_size()
    t = ms(lambda: lesson.decode_attention(*args), warmup=25, rep=100)
    row["lesson"] = (round(t * 1e3, 1), round(moved / t * 1e-9, 3))
    if best is not None:
        cfg = {k: best[k] for k in ("BLOCK_N", "num_warps", "num_stages", "splits") if k in best}
        t = ms(lambda: tuned.decode_attention(*args, config=cfg), warmup=25, rep=100)
        row["best"] = (round(t * 1e3, 1), round(moved / t * 1e-9, 3), cfg)
    return row


def main(out_dir):
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    print(torch.cuda.get_device_name(0), "torch", torch.__version__, "triton", triton.__version__, flush=True)
    correctness()
    results = sweep()
    (out / "sweep.json").write_text(json.dumps(results, indent=1))
    best = {}
    for r in results:
        best.setdefault(r["shape"], r)  # sorted per shape: the first is the fastest
    table = [timed(shape, lens, ps, best.get(f"{shape}-P{ps}"))
             for ps in bench.PAGE_SIZES for shape, lens in bench.SHAPES.items()]
    (out / "decode.json").write_text(json.dumps(table, indent=1))
    print(f"\ntotal {time.time() - T0:.0f} s\n")
    print("| shape | triton (tuned) us, TB/s | lesson us, TB/s | best swept us, TB/s | copy TB/s | SDPA us, TB/s "
          "| tuned / copy | tuned / SDPA | best config |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in table:
        tr, co, sd, le = r["triton"], r["copy"], r.get("sdpa"), r["lesson"]
        be = r.get("best")
        print(f"| {r['shape']} | {tr[0]}, {tr[1]} | {le[0]}, {le[1]} | {f'{be[0]}, {be[1]}' if be else '-'} | {co[1]} "
              f"| {f'{sd[0]}, {sd[1]}' if sd else '-'} | {tr[1] / co[1]:.2f} | {f'{sd[0] / tr[0]:.2f}x' if sd else '-'} "
              f"| {be[2] if be else '-'} |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "artifacts/decode")
