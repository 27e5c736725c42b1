"""Lesson 09, part 1 on a GPU: is the fused RMSNorm (+ residual) right, and how close is it to a copy?

Asks, in order:
1. correctness: ``solutions.rmsnorm.rmsnorm`` against float64 in fp16, bf16 and fp32, with and without
   the residual, awkward lengths, strided rows; then the lesson's grader on the GPU;
2. how many warps a row wants (4, 8, 16, 32 at H = 4096 and 8192), to check ``_num_warps``;
3. the bench cases of ``benchmarks/rmsnorm.py`` (the kernel, the eager torch ops, ``F.rms_norm``, a copy of
   the same bytes) at 16384 rows of 4096 and 8192, fp16 and bf16, with the residual, against the
   issue's targets: at least 85% of the same-size copy and at least 2x the eager torch ops.

Run from the repository root on the GPU machine (a few minutes at most):
    PYTHONPATH=$PWD python3 research/decode/rmsnorm_check.py OUT_DIR
It writes OUT_DIR/rmsnorm_check.csv (the course's bench table), OUT_DIR/rmsnorm_warps.txt and
OUT_DIR/rmsnorm_check.md, and prints the markdown table last.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import triton
from triton.testing import do_bench

import tkcourse  # noqa: F401  (first: the mode, the checkout on the path)
from benchmarks import rmsnorm as bench_cases
from solutions import rmsnorm as lesson
from tkcourse import bench, check

out_dir = Path(sys.argv[1] if len(sys.argv) > 1 else "out")
out_dir.mkdir(parents=True, exist_ok=True)
torch.manual_seed(0)


def rms64(h, w, eps):
    h = h.double()
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * w.double()


# 1. correctness --------------------------------------------------------------------------------
tol = {torch.float16: 2e-3, torch.bfloat16: 2e-2, torch.float32: 1e-4}
bad = []
for dtype in (torch.float16, torch.bfloat16, torch.float32):
    for shape in [(1, 1), (7, 3), (33, 1000), (5, 1025), (3, 4, 4096), (64, 8192), (2, 32768), (16384, 4096)]:
        x = torch.randn(*shape, device="cuda").to(dtype)
        r = torch.randn(*shape, device="cuda").to(dtype)
        w = (1 + 0.5 * torch.randn(shape[-1], device="cuda")).to(dtype)
        y = lesson.rmsnorm(x, w, 1e-6)
        y2, h = lesson.rmsnorm(x, w, 1e-6, residual=r)
        h_exp = (x.double() + r.double()).to(dtype)
        errs = {"y": (y.double() - rms64(x, w, 1e-6)).abs().max().item(),
                "h": (h.double() - h_exp.double()).abs().max().item(),
                "y(residual)": (y2.double() - rms64(h_exp, w, 1e-6)).abs().max().item()}
        limit = tol[dtype] * 8  # absolute, on values of size up to ~5 (|x| / rms times the weight)
        if any(v > limit or v != v for v in errs.values()):
            bad.append(f"{shape} {dtype}: {errs}")
big = torch.randn(40, 600, device="cuda", dtype=torch.float16)
xs, rs = big[::2, 11:523], torch.randn(20, 512, device="cuda", dtype=torch.float16)
w = torch.randn(512, device="cuda", dtype=torch.float16)
ys, hs = lesson.rmsnorm(xs, w, residual=rs)
if (ys.double() - rms64(xs + rs, w, 1e-6)).abs().max().item() > 0.02:
    bad.append("strided rows: wrong")
print("correctness:", "all shapes pass" if not bad else "\n  ".join(["FAILED"] + bad), flush=True)
rep = check.run("rmsnorm", module=lesson, quiet=True, isolate=False)
print(f"grader on the GPU: {rep.status} ({sum(c.status == 'pass' for c in rep.cases)} cases)", flush=True)
if not rep.passed:
    print(rep)

# 2. warps per row --------------------------------------------------------------------------------
warps_lines = []
for H in bench_cases.HS:
    x = torch.randn(bench_cases.ROWS, H, device="cuda", dtype=torch.float16)
    r, y, h = torch.randn_like(x), torch.empty_like(x), torch.empty_like(x)
    w = torch.ones(H, device="cuda", dtype=torch.float16)
    BLOCK, moved = triton.next_power_of_2(H), bench_cases.rmsnorm_bytes(bench_cases.ROWS, H, 2)
    for nw in (4, 8, 16, 32):
        def f(nw=nw):
            lesson.rmsnorm_kernel[(x.shape[0],)](x, r, w, y, h, H, H, H, H, 1e-6, HAS_RESIDUAL=True, BLOCK=BLOCK,
                                                  num_warps=nw)
        ms = do_bench(f, warmup=25, rep=100)
        chosen = " (the launcher's)" if nw == lesson.num_warps(BLOCK) else ""
        warps_lines.append(f"H={H} num_warps={nw:2d}: {moved / ms * 1e-6:7.0f} GB/s{chosen}")
        print(warps_lines[-1], flush=True)
(out_dir / "rmsnorm_warps.txt").write_text("\n".join(warps_lines) + "\n")

# 3. the bench cases ------------------------------------------------------------------------------
rows = bench.run(bench_cases.cases(), command="PYTHONPATH=$PWD python3 research/decode/rmsnorm_check.py OUT")
bench.write_records(rows, out_dir / "rmsnorm_check.csv")
by = {(r["shape"], r["dtype"], r["provider"]): r for r in rows}
lines = ["| shape | dtype | triton GB/s | copy GB/s | % of copy | eager torch GB/s | x eager | F.rms_norm GB/s | x rms_norm | targets |",
         "|---|---|---|---|---|---|---|---|---|---|"]
for dtype in ("float16", "bfloat16"):
    for H in bench_cases.HS:
        shape = f"{bench_cases.ROWS}x{H}"
        t, c, e = (by.get((shape, dtype, p)) for p in ("triton", "copy", "torch"))
        f = by.get((shape, dtype, "torch-rms_norm"))
        if not (t and c and e):
            lines.append(f"| {shape} | {dtype} | missing | | | | | | | |")
            continue
        share, speedup = t["median"] / c["median"], t["median"] / e["median"]
        ok = "met" if share >= 0.85 and speedup >= 2 else "NOT met"
        fr = f"{f['median']:.0f} | {t['median'] / f['median']:.2f}x" if f else "n/a | n/a"
        lines.append(f"| {shape} | {dtype} | {t['median']:.0f} | {c['median']:.0f} | {100 * share:.1f}% | "
                     f"{e['median']:.0f} | {speedup:.2f}x | {fr} | {ok} |")
gpu = rows[0]["gpu"] if rows else "?"
head = (f"RMSNorm + residual, {gpu}, triton {triton.__version__}, torch {torch.__version__}; bytes = read x, residual, "
        "write y, sum (+ weight); targets: >= 85% of the same-size copy and >= 2x the eager torch ops")
table = "\n".join([head, "", *lines])
(out_dir / "rmsnorm_check.md").write_text(table + "\n")
print()
print(table)
