"""The course's 16-bit matmul at a decode step's sizes, against cuBLAS, and tiles that might do better.

    PYTHONPATH=$PWD python3 research/llm/matmul_decode_probe.py [--json OUT.json]

Why: the capstone's course path at batch 1 runs at 42% of its floor where ``torch.compile`` runs at 76%
(``tkcourse/data/h200/llm.json``); its fused small kernels are few, so the likeliest gap is the matmul
at one row. The library's plan (``solutions/kernels/matmul.py``) gives such products the TMA kernel
with 64-row tiles and no split-K: at N = 4096, 64 programs for 132 SMs, each walking all of K.

What: at Llama-3-8B's projections (q/k/v 6144 x 4096, output 4096 x 4096, gate+up 28672 x 4096, down
4096 x 14336, LM head 128256 x 4096; weight (N, K) as ``nn.Linear`` stores it), M 1 and 8, bf16:

- ``cublas``: ``x @ w.T``, what torch and ``torch.compile`` call;
- ``course``: ``solutions.kernels.matmul.matmul(x, w_t)`` on the transposed copy the capstone keeps;
- ``course-decode``: the same with ``MATMUL_DECODE`` on (``matmul_small.decode_config``'s plan);
- ``gemv BN/BK/warps/stages`` (M up to 8): ``gemv_kernel`` here, fp32 multiply-adds on the weight as
  stored, no tensor cores;
- ``splitk BN/BK/warps/stages xS``: lesson 03's split-K kernel (``matmul_small.matmul_split_k_kernel``)
  with tiles 16 rows tall (the MMA's least) and split-K chosen so that the programs fill the SMs twice.

Each is timed replayed from a CUDA graph with the L2 flushed before each replay (the GPU alone, the
weight read from HBM as in a model; ``tkcourse.bench.graph_ms``, as the recorded rows). Prints a table (us and GB/s, the weight's bytes over
the time) and the candidate with the best time over the fastest, averaged over the shapes, per M.
Nothing here changes the library: a win becomes a decode plan in ``solutions/kernels/matmul.py``.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.getcwd())
# isort: off
import tkcourse  # noqa: E402, F401  (first: the mode, before triton is imported)
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
# isort: on

from solutions.kernels import matmul as k_matmul  # noqa: E402
from solutions.kernels import matmul_small as small  # noqa: E402
from tkcourse.bench import graph_ms  # noqa: E402


def graph_time(call, w):
    """Microseconds of ``call(w)`` replayed from a CUDA graph, the L2 flushed before each replay (the
    GPU alone, the weight read from HBM), as the recorded rows' ``graph_ms``."""
    return graph_ms(lambda: call(w), rep=20) * 1e3

SHAPES = {"qkv": (6144, 4096), "out": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336),
          "lm_head": (128256, 4096)}


@triton.jit
def gemv_kernel(x_ptr, w_ptr, y_ptr, N, K, stride_xm, stride_wn, stride_ym,
                M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """y[m, n] = sum_k x[m, k] w[n, k] with no tensor cores: a program owns BLOCK_N rows of the weight
    (N, K), reads them once in contiguous BLOCK_K slices, and multiplies each slice by the M rows of x
    in fp32 (a candidate for M of 1 to 8, where an MMA pads M to 16 or 64)."""
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = rows < N
    w_row = w_ptr + tl.where(n_ok, rows, 0).to(tl.int64)[:, None] * stride_wn
    for m in tl.static_range(M):
        acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            cols = k0 + tl.arange(0, BLOCK_K)
            w = tl.load(w_row + cols[None, :], mask=cols[None, :] < K, other=0.0)
            x = tl.load(x_ptr + m * stride_xm + cols, mask=cols < K, other=0.0)
            acc += tl.sum(w.to(tl.float32) * x.to(tl.float32)[None, :], axis=1)
        tl.store(y_ptr + m * stride_ym + rows, acc.to(y_ptr.dtype.element_ty), mask=n_ok)


def gemv_candidates():
    return [dict(BLOCK_N=bn, BLOCK_K=bk, num_warps=w, num_stages=st)
            for bn in (16, 32) for bk in (256, 512) for w in (4, 8) for st in (3,)]  # 8, compiled for M 1 and 8


def gemv_call(x, cfg, N, K):
    M = x.shape[0]
    meta = dict(cfg)

    def call(w):
        y = torch.empty((M, N), dtype=x.dtype, device=x.device)
        gemv_kernel[(triton.cdiv(N, meta["BLOCK_N"]),)](x, w, y, N, K, x.stride(0), w.stride(0), y.stride(0),
                                                         M=M, **meta)
        return y
    return call


def candidates():
    return [dict(BLOCK_M=16, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=1, num_warps=w, num_stages=st)
            for bn in (64, 128) for bk in (128, 256) for w in (4, 8) for st in (3, 5)
            if bn * bk <= 128 * 128]  # 12 tiles, each compiled for M 1 and M 8 (Triton specializes M = 1)


def split_for(M, N, K, cfg, sms):
    tiles = triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"])
    steps = triton.cdiv(K, cfg["BLOCK_K"])
    split = 1
    while split < 16 and tiles * split < 2 * sms and steps // (2 * split) >= 4:
        split *= 2
    return split


def splitk_call(x, cfg, split, N, K):
    M = x.shape[0]
    tiles = triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"])
    ws = torch.empty(max(1, tiles * split * cfg["BLOCK_M"] * cfg["BLOCK_N"]), dtype=torch.float32, device=x.device)
    counts = torch.zeros(tiles, dtype=torch.int32, device=x.device)

    def call(wt):
        c = torch.empty((M, N), dtype=x.dtype, device=x.device)
        small.matmul_split_k_kernel[(tiles * split,)](x, wt, c, ws, counts, M, N, K, x.stride(0), x.stride(1),
                                                      wt.stride(0), wt.stride(1), c.stride(0), c.stride(1),
                                                      SPLIT_K=split, **cfg)
        return c
    return call


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--ms", type=int, nargs="+", default=[1, 8])
    args = ap.parse_args(argv)
    t0 = time.time()
    dev = torch.device("cuda")
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, f"{sms} SMs", flush=True)
    results, g = [], torch.Generator(device="cpu").manual_seed(0)
    for name, (N, K) in SHAPES.items():
        w = (torch.randn(N, K, generator=g) * 0.02).to(torch.bfloat16).to(dev)
        wt = w.t().contiguous()
        nbytes = w.nbytes
        for M in args.ms:
            x = torch.randn(M, K, generator=g).to(torch.bfloat16).to(dev)
            ref = (x.float() @ w.float().T)
            row = dict(shape=name, N=N, K=K, M=M, times={})
            row["times"]["cublas"] = graph_time(lambda w_: x @ w_.T, w)
            row["times"]["course"] = graph_time(lambda w_: k_matmul.matmul(x, w_), wt)
            k_matmul.MATMUL_DECODE = True  # the library's decode plan (matmul_small.decode_config), on for a moment
            k_matmul.forget()
            row["times"]["course-decode"] = graph_time(lambda w_: k_matmul.matmul(x, w_), wt)
            k_matmul.MATMUL_DECODE = False
            k_matmul.forget()
            for cfg in candidates():
                split = split_for(M, N, K, cfg, sms)
                # the label names the tile only (its split follows the shape), so that tiles score across shapes
                label = f"splitk {cfg['BLOCK_N']}/{cfg['BLOCK_K']}/{cfg['num_warps']}/{cfg['num_stages']}"
                row.setdefault("splits", {})[label] = split
                try:
                    call = splitk_call(x, cfg, split, N, K)
                    err = ((call(wt).float() - ref).abs().max() / ref.abs().max()).item()
                    row["times"][label] = graph_time(call, wt) if err < 2e-2 else float("inf")
                    if err >= 2e-2:
                        print(f"  WRONG {label} at {name} M{M}: rel err {err:.1e}", flush=True)
                except Exception as e:  # a config that does not compile (shared memory): left out
                    row["times"][label] = float("inf")
                    print(f"  {label}: {type(e).__name__}: {str(e)[:120]}", flush=True)
            if M <= 8:  # the weight as nn.Linear stores it, (N, K): one contiguous row a weight row
                for cfg in gemv_candidates():
                    label = f"gemv {cfg['BLOCK_N']}/{cfg['BLOCK_K']}/{cfg['num_warps']}/{cfg['num_stages']}"
                    try:
                        call = gemv_call(x, cfg, N, K)
                        err = ((call(w).float() - ref).abs().max() / ref.abs().max()).item()
                        row["times"][label] = graph_time(call, w) if err < 2e-2 else float("inf")
                    except Exception as e:
                        row["times"][label] = float("inf")
                        print(f"  {label}: {type(e).__name__}: {str(e)[:120]}", flush=True)
            best = min((k for k in row["times"] if k.startswith(("splitk", "gemv"))), key=row["times"].get)
            t = row["times"]
            gbs = lambda us: nbytes / us / 1e3  # noqa: E731 (GB/s of the weight)
            print(f"{name:8s} M{M}: cublas {t['cublas']:7.1f} us ({gbs(t['cublas']):5.0f} GB/s)  course "
                  f"{t['course']:7.1f} ({gbs(t['course']):5.0f})  decode plan {t['course-decode']:7.1f} "
                  f"({gbs(t['course-decode']):5.0f})  best candidate {best} x{row.get('splits', {}).get(best, 1)}: {t[best]:7.1f} "
                  f"({gbs(t[best]):5.0f})  {time.time() - t0:.0f}s", flush=True)
            results.append(row)
            if args.json:  # as it goes, so that a run cut short keeps its rows
                with open(args.json, "w") as f:
                    json.dump(dict(results=results), f, indent=1)
        del w, wt
        torch.cuda.empty_cache()
    summary = {}
    for M in args.ms:
        rows = [r for r in results if r["M"] == M]
        labels = [k for k in rows[0]["times"] if k.startswith(("splitk", "gemv")) and all(k in r["times"] for r in rows)]
        score = {k: sum(r["times"][k] / min(r["times"][j] for j in labels) for r in rows) / len(rows) for k in labels}
        best = min(score, key=score.get)
        summary[M] = dict(best=best, score=score[best], **{
            r["shape"]: dict(cublas=r["times"]["cublas"], course=r["times"]["course"],
                             course_decode=r["times"]["course-decode"], best=r["times"][best])
            for r in rows})
        print(f"\nM {M}: best tile over all shapes {best} (score {score[best]:.3f})")
        print(f"{'shape':9s}{'cublas us':>10s}{'course us':>10s}{'decode us':>10s}{'tile us':>9s}"
              f"{'x cuBLAS: course':>17s}{'decode':>8s}{'tile':>6s}")
        for r in rows:
            t = r["times"]
            print(f"{r['shape']:9s}{t['cublas']:10.1f}{t['course']:10.1f}{t['course-decode']:10.1f}{t[best]:9.1f}"
                  f"{t['cublas'] / t['course']:17.2f}{t['cublas'] / t['course-decode']:8.2f}{t['cublas'] / t[best]:6.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(results=results, summary=summary), f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
