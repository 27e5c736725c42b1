"""Sweep of ``solutions.kernels.int4_matmul``'s configs on the GPU, against cuBLAS and tinygemm in the same run.

    python3 research/int4/sweep.py OUT [--quick]

1. correctness of the PTX dequantization (fp16, bf16) and of each regime against ``reference``;
2. compiles every candidate in parallel processes (Triton's disk cache), then
3. times each (weight shape, M) with ``triton.testing.do_bench`` (L2 flushed between calls, so the
   weights come from HBM as in a model), bf16; the best few again in fp16;
4. prints, per shape and M, the best config and its ratio to cuBLAS, tinygemm and the copy floor.
Rows go to OUT/int4_sweep.jsonl as they are measured.
"""
import itertools
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import torch
import triton

sys.path.insert(0, os.getcwd())
from benchmarks.int4_matmul import GROUP, MS, WEIGHTS, int4_bytes, tinygemm  # noqa: E402
from solutions import int4_matmul as lesson  # noqa: E402
from solutions.kernels import int4_matmul as fast  # noqa: E402

cfg = fast._cfg
SMALL = ([cfg(16, bn, bk, sp, True, 4, st) for bn in (64, 128) for bk in (64, 128) for sp in (1, 2, 4, 8) for st in (3, 4)]
         + [cfg(16, bn, bk, sp, False, 4, st) for bn in (32, 64) for bk in (64, 128) for sp in (1, 2, 4) for st in (3, 4)]
         + [dict(cfg(16, 64, 128, 4, True, 4, 4), ASM=False), dict(cfg(16, 64, 64, 2, False, 4, 4), ASM=False)])
LARGE = ([cfg(128, 128, 64, sp, False, 8, st) for sp in (1, 2) for st in (3, 4)]
         + [cfg(128, 256, 64, 1, False, 8, 3), cfg(64, 128, 64, 1, False, 4, 4), cfg(64, 128, 128, 1, False, 4, 3),
            cfg(64, 128, 64, 2, False, 4, 4), cfg(128, 64, 128, 1, False, 4, 4), cfg(128, 64, 128, 2, False, 4, 4),
            cfg(64, 256, 64, 1, False, 8, 3), cfg(128, 128, 128, 1, False, 8, 3), cfg(64, 64, 128, 1, False, 4, 4),
            cfg(128, 64, 64, 1, True, 4, 4), cfg(128, 128, 64, 1, True, 8, 3), cfg(128, 64, 128, 2, True, 4, 3),
            cfg(128, 128, 64, 1, False, 4, 4), dict(cfg(128, 128, 64, 1, False, 8, 3), ASM=False)])


def problem(M, N, K, dtype, seed=0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    w = (torch.randn(N, K, generator=g) * 0.02).to(dtype).cuda()
    x = torch.randn(M, K, generator=g).to(dtype).cuda()
    p, s = lesson.quantize(w, GROUP)
    return x, w, p, s


def _compile(job):
    c, dtype_name = job
    dtype = getattr(torch, dtype_name)
    try:
        x, w, p, s = problem(4, 256, 1024, dtype)
        fast.run(x, p, s, GROUP, c)
        torch.cuda.synchronize()
        return None
    except Exception as e:
        return f"{c} {dtype_name}: {type(e).__name__}: {str(e)[:300]}"


def bench(fn):
    return triton.testing.do_bench(fn, warmup=5, rep=20)


def main(out, quick=False):
    os.makedirs(out, exist_ok=True)
    log = open(os.path.join(out, "int4_sweep.jsonl"), "a")
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, flush=True)
    # 1. correctness
    for dtype in (torch.float16, torch.bfloat16):
        for M, c in ((1, SMALL[0]), (5, SMALL[34]), (16, SMALL[10]), (128, LARGE[0]), (3, SMALL[-2]), (77, LARGE[-6])):
            try:
                x, w, p, s = problem(M, 320, 1024, dtype, seed=M)
                y = fast.run(x, p, s, GROUP, c).float()
                r = lesson.reference(x, p, s, GROUP).float()
                err = ((y - r).abs().max() / r.abs().max()).item()
                print(f"check {dtype} M={M} swap={c['SWAP']} split={c['SPLIT_K']} asm={c.get('ASM', True)}: rel err {err:.2e}"
                      f" {'OK' if err < 1e-2 else 'WRONG'}", flush=True)
            except Exception as e:
                print(f"check {dtype} M={M}: {type(e).__name__}: {str(e)[:400]}", flush=True)
    # 2. compile in parallel
    t = time.time()
    jobs = [(c, "bfloat16") for c in SMALL + LARGE] + [(c, "float16") for c in SMALL + LARGE]
    import multiprocessing as mp
    with ProcessPoolExecutor(14, mp_context=mp.get_context("spawn")) as ex:
        errs = [e for e in ex.map(_compile, jobs) if e]
    print(f"compiled {len(jobs)} in {time.time() - t:.0f}s; {len(errs)} failed", flush=True)
    for e in errs[:8]:
        print("  ", e)
    # 3. time
    summary = []
    for dtype in (torch.bfloat16, torch.float16):
        for (N, K) in WEIGHTS:
            for M in MS:
                x, w, p, s = problem(M, N, K, dtype)
                moved = int4_bytes(M, N, K, x.element_size())
                src = torch.empty(moved // 2, dtype=torch.uint8, device="cuda")
                dst = torch.empty_like(src)
                peers = {"cublas": bench(lambda: x @ w.T), "copy": bench(lambda: dst.copy_(src))}
                tg = tinygemm(lesson.unpack(p), s)
                if tg is not None:
                    peers["tinygemm"] = bench(lambda: tg(x))
                cands = SMALL if M <= 16 else LARGE
                if dtype == torch.float16:  # the bf16 winners only
                    best = [r for r in summary if r["N"] == N and r["K"] == K and r["M"] == M]
                    cands = [json.loads(c) for c in best[0]["top"]] if best else cands[:4]
                times = []
                for c in cands:
                    try:
                        times.append((bench(lambda: fast.run(x, p, s, GROUP, c)), c))
                    except Exception as e:
                        print(f"  {c}: {type(e).__name__} {str(e)[:200]}")
                times.sort(key=lambda t: t[0])
                row = dict(dtype=str(dtype)[6:], N=N, K=K, M=M, **{k: round(v * 1e3, 2) for k, v in peers.items()},
                           best_us=round(times[0][0] * 1e3, 2), best=times[0][1],
                           top=[json.dumps(c) for _, c in times[:4]],
                           all=[(round(t * 1e3, 2), c) for t, c in times])
                log.write(json.dumps(row) + "\n"); log.flush()
                summary.append(row)
                print(f"{row['dtype']:8s} N{N:5d} K{K:5d} M{M:3d}: best {row['best_us']:7.2f}us cublas {row['cublas']:7.2f} "
                      f"tg {row.get('tinygemm', float('nan')):7.2f} copy {row['copy']:6.2f} | x{row['cublas'] / row['best_us']:.2f} cublas,"
                      f" x{row.get('tinygemm', float('nan')) / row['best_us']:.2f} tg, {100 * row['copy'] / row['best_us']:.0f}% floor"
                      f" | {times[0][1]}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], "--quick" in sys.argv)
