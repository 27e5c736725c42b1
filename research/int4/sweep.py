"""Sweep of ``solutions.kernels.int4_matmul``'s configs on the GPU, then its benchmark rows on the winners.

    python3 research/int4/sweep.py OUT

1. correctness of each dequantization (``DEQ`` 0, 1, 2) and regime against ``reference``, fp16 and bf16;
2. compiles every candidate in parallel processes (Triton's disk cache); a candidate that fails to
   compile is reported and left out;
3. times each (weight shape, M) replayed from a CUDA graph with the L2 flushed before each replay
   (``graph_time``: the GPU alone, the weights from HBM, as in a model), bf16, and picks for each
   M the config with the best score over the four weight shapes (time over the fastest's, averaged) (``CONFIGS``' keys: M up to 1, 4, 16, and above); each candidate is
   timed with 16-bit and with fp32 scales, and fp32 scales are taken (``FP32_SCALES``) if they save 3%;
4. measures ``benchmarks/int4_matmul.py``'s rows with those configs (``tkcourse.bench.run``) into
   OUT/bench.csv, and prints the configs to commit as ``CONFIGS`` (and ``FP32_SCALES``) and a table of ratios.
Rows of the sweep go to OUT/int4_sweep.jsonl as they are measured.
"""
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import torch
import triton

sys.path.insert(0, os.getcwd())
from benchmarks.int4_matmul import GROUP, MS, WEIGHTS  # noqa: E402
from solutions import int4_matmul as lesson  # noqa: E402
from solutions.kernels import int4_matmul as fast  # noqa: E402
from tkcourse.bench import graph_ms  # noqa: E402

cfg = fast.config
# Fourth run: the leaner PTX dequantization (DEQ 3) and 8 warps a program beside the recorded configs, each
# timed with 16-bit and with fp32 scales (steps of 64 bytes never won in the earlier runs: left out).
# Fifth: timed in CUDA graphs (``graph_time``; the fourth's eager timing put the host's launch into every
# small config's time). New candidates from the SASS of the main loop (``research/int4/compile_check.py``),
# which showed it issue-bound at about 9 instructions a weight byte a thread: the weight as the MMA's left
# operand with 8 columns of x (SWAP, BLOCK_M 8: mma.sync m16n8k16, no register copies of a padded x), the
# scale applied to the fp32 product instead of every weight (POST_SCALE), the next step's scales loaded a
# step ahead (EARLY_SCALES), DEQ 3; about 5 instructions a byte. They won at M 1 to 16 (logs ``*_fifth*``).
# Sixth (this one): around the fifth's winners, with K split by the work (``SPLIT_K`` 0, ``fast.auto_split``:
# the fifth's fastest split at each shape gave every small program 8 steps).
TINY = []  # the fifth run's one-row GEMV (a 2-D fp32 accumulator, DOT False) lost at every shape: removed
SWAP8 = ([cfg(8, bn, 128, 0, True, w, st, deq=3, post_scale=True, early_scales=es) for bn in (32, 64, 128)
          for w in (2, 4) for st in (2, 3, 4) for es in (False, True)]
         + [cfg(8, 64, 64, 0, True, w, st, deq=3, post_scale=True) for w in (2, 4) for st in (3, 4)]
         + [cfg(8, 64, 128, 4, True, 4, 3, deq=3, post_scale=True),  # the fifth's choices for M 1 and 4
            cfg(8, 64, 128, 4, True, 2, 3, deq=3, post_scale=True, early_scales=True)])
SMALL = ([cfg(16, bn, 128, 0, False, w, st, deq=3, post_scale=True) for bn in (64, 128) for w in (4, 8)
          for st in (3, 4, 5)]
         + [cfg(16, 64, 128, 2, False, 4, 4, deq=3, post_scale=True)])  # the fifth's choice for M 16
SWAP16 = []
LARGE = ([cfg(128, bn, 64, 0, False, 8, st, deq=dq) for bn in (128, 256) for st in (3, 4) for dq in (2, 3)]
         + [cfg(64, 128, 64, 0, False, 4, st, deq=3) for st in (3, 4)]
         + [cfg(128, 128, 64, 4, False, 8, 3, deq=2)])  # the fifth's choice for M 128
SCALE_KINDS = (False,)  # fp32 scales too: (False, True)
BUCKETS = {1: SWAP8, 4: SWAP8, 16: SMALL + SWAP8[::6], 128: LARGE}


def in_turns(calls: dict, rounds: int, rep: int) -> dict:
    """Each call's graph times (``graph_ms``, ms) over ``rounds`` rounds that take the calls in turns, each
    round starting one further along, so that no call always runs first or after the same one. Calls
    each ``calls`` value once first (compiling, warming)."""
    for f in calls.values():
        f()
    times = {name: [] for name in calls}
    for r in range(rounds):
        names = list(calls)
        for name in names[r % len(names):] + names[:r % len(names)]:
            times[name].append(graph_ms(calls[name], rep=rep))
    return times


def problem(M, N, K, dtype, seed=0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    w = (torch.randn(N, K, generator=g) * 0.02).to(dtype).cuda()
    x = torch.randn(M, K, generator=g).to(dtype).cuda()
    p, s = lesson.quantize(w, GROUP)
    return x, w, p, s


def _compile(job):
    c, dtype_name = job
    try:
        x, w, p, s = problem(4 if not c["DOT"] else 16, 256, 1024, getattr(torch, dtype_name))
        fast.run(x, p, s, GROUP, c)
        torch.cuda.synchronize()
        return None
    except Exception as e:
        return f"{type(e).__name__}: {str(e)[:200]}"


def bench(fn):
    return triton.testing.do_bench(fn, warmup=5, rep=12)


def graph_time(call, rep=20):
    """Milliseconds of ``call()`` replayed from a CUDA graph with the L2 flushed before each replay: the
    GPU alone, the weight read from HBM, as the recorded rows' ``graph_ms`` (``tkcourse.bench.graph_ms``).
    The fourth sweep timed ``fast.run`` eagerly with ``do_bench`` instead: its Python launch path (20-50
    us a call) put host time into small configs' times, and the same config read 25 us in the bench rows
    and 97 us in the sweep."""
    return graph_ms(call, rep=rep)


def main(out):
    os.makedirs(out, exist_ok=True)
    log = open(os.path.join(out, "int4_sweep.jsonl"), "a")
    t0 = time.time()
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, flush=True)
    for dtype in (torch.float16, torch.bfloat16):
        for M, c in ((1, SWAP8[1]), (5, SWAP8[3]), (13, SWAP8[-1]),
                     (1, SMALL[2]), (3, SMALL[-1]), (5, SMALL[1]), (16, SMALL[0]), (9, SMALL[-1]), (128, LARGE[0]),
                     (77, LARGE[1]), (200, LARGE[-2])):
            try:
                x, w, p, s = problem(M, 320, 1024, dtype, seed=M)
                y = fast.run(x, p, s, GROUP, c).float()
                r = lesson.reference(x, p, s, GROUP).float()
                err = ((y - r).abs().max() / r.abs().max()).item()
                print(f"check {str(dtype)[6:]} M={M} dot={c['DOT']} swap={c['SWAP']} split={c['SPLIT_K']} deq={c['DEQ']}: "
                      f"rel err {err:.1e} {'OK' if err < 1e-2 else 'WRONG'}", flush=True)
            except Exception as e:
                print(f"check {dtype} M={M} deq={c['DEQ']}: {type(e).__name__}: {str(e)[:300]}", flush=True)
    everything = list({json.dumps(c, sort_keys=True): c for b in BUCKETS.values() for c in b}.values())
    jobs = [(c, d) for c in everything for d in ("bfloat16", "float16")]
    import multiprocessing as mp
    with ProcessPoolExecutor(15, mp_context=mp.get_context("spawn")) as ex:
        errs = list(ex.map(_compile, jobs))
    bad = {json.dumps(c, sort_keys=True) for (c, d), e in zip(jobs, errs) if e}
    print(f"compiled {len(jobs)} in {time.time() - t0:.0f}s; {len(bad)} configs failed", flush=True)
    for (c, d), e in zip(jobs, errs):
        if e:
            print("  ", c, d, e[:160])
            break
    # every candidate with the scales as they are (16-bit) and in fp32: 4 bytes a row, which Triton's
    # pipeliner streams with cp.async (2-byte scales are below its minimum and are waited on in every
    # step, as the TTGIR shows); fp32 scales are taken (FP32_SCALES, for every M) if their best configs
    # save at least 3% in total over the four buckets
    best = {False: {}, True: {}}  # fp32 scales? -> M -> (total seconds, config)
    for M in MS:
        cands = [c for c in BUCKETS[M] if json.dumps(c, sort_keys=True) not in bad]
        totals = {(i, f): 0.0 for i in range(len(cands)) for f in SCALE_KINDS}
        times = {k: {} for k in totals}  # (candidate, fp32 scales) -> (N, K) -> ms
        for (N, K) in WEIGHTS:
            x, w, p, s = problem(M, N, K, torch.bfloat16)
            cub = bench(lambda: x @ w.T)
            scales = {False: s, True: s.float()}
            for i, c in enumerate(cands):
                for f in SCALE_KINDS:
                    try:
                        t = graph_time(lambda: fast.run(x, p, scales[f], GROUP, c))
                    except Exception:
                        t = float("inf")
                    times[i, f][(N, K)] = t
                    totals[i, f] += t
                    log.write(json.dumps(dict(M=M, N=N, K=K, us=round(t * 1e3, 2), cublas=round(cub * 1e3, 2),
                                              fp32_scales=f, cfg=c)) + "\n")
            log.flush()
        # the score of a candidate: its time over the fastest candidate's at each weight shape, averaged, so
        # that the largest shape does not choose for all (the fourth sweep's total picked a config 1.7x
        # slower than the best at 4096 x 14336)
        fastest = {nk: min(t[nk] for t in times.values()) for nk in WEIGHTS}
        score = {k: sum(t[nk] / fastest[nk] for nk in WEIGHTS) / len(WEIGHTS) for k, t in times.items()}
        for f in SCALE_KINDS:
            order = sorted((k for k in score if k[1] == f), key=score.get)
            best[f][M] = (totals[order[0]], cands[order[0][0]])
            print(f"M={M} {'fp32' if f else '16-bit'} scales: best {cands[order[0][0]]} score "
                  f"{score[order[0]]:.3f} (total {totals[order[0]] * 1e3:.1f}us); next "
                  f"{[round(score[k], 3) for k in order[1:4]]} {time.time() - t0:.0f}s", flush=True)
    use32 = True in SCALE_KINDS and (sum(t for t, _ in best[True].values())
                                     < 0.97 * sum(t for t, _ in best[False].values()))
    chosen = {M: c for M, (t, c) in best[use32].items()}
    print(f"FP32_SCALES = {use32}", flush=True)
    fast.FP32_SCALES = use32
    print("CONFIGS =", json.dumps({str(k): v for k, v in chosen.items()}), flush=True)
    json.dump(dict({str(k): v for k, v in chosen.items()}, FP32_SCALES=use32),
              open(os.path.join(out, "int4_configs.json"), "w"))
    fast.CONFIGS.clear()
    fast.CONFIGS.update({1: chosen[1], 4: chosen[4], 16: chosen[16], 1 << 62: chosen[128]})
    fast.forget()
    from benchmarks.int4_matmul import cases
    from tkcourse.bench import run, write_records
    rows = run(cases(), command="python3 research/int4/sweep.py OUT (the rows of tkcourse bench int4_matmul, "
                                "on the chosen CONFIGS)", progress=lambda *a: None)
    write_records(rows, os.path.join(out, "bench.csv"))
    by = {(r["shape"], r["dtype"], r["provider"]): r for r in rows}
    print(f"{'shape':22s} {'dtype':8s} {'us':>7s} {'graph':>7s} {'x cuBLAS':>8s} {'x tinygemm':>10s} {'% floor':>7s}")
    for (shape, dt, prov), r in by.items():
        if prov != "triton":
            continue
        c, t, cp = by.get((shape, dt, "cublas")), by.get((shape, dt, "tinygemm")), by.get((shape, dt, "copy"))
        print(f"{shape:22s} {dt:8s} {r['ms'] * 1e3:7.1f} {(r.get('graph_ms') or 0) * 1e3:7.1f} "
              f"{c['ms'] / r['ms'] if c else 0:8.2f} {t['ms'] / r['ms'] if t else 0:10.2f} "
              f"{100 * cp['ms'] / r['ms'] if cp else 0:7.0f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
