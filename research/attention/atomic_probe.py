"""H200: the one-pass attention backward (``research/attention/atomic_backward.py``, dQ added by
atomics) against SDPA's cuDNN backend, at lesson 06/07's shapes and the grouped-query ones, in one run.

    PYTHONPATH=$PWD python3 research/attention/atomic_probe.py [C] [T] [--budget 420] [--out OUT.json]

C. Correctness on the GPU: every variant below at small shapes (MHA, GQA, MQA, N_Q < N_KV causal, ragged
   N, D 64 and 128, fp16 and bf16) against an fp64 reference, by FlashAttention's rule for gradients: the
   error within 3x that of torch's own backward in the same dtype (plus 1e-5).
T. Time: each shape's cuDNN backward (``o.backward(do)`` through autograd, as ``tkcourse bench``'s
   ``attention_bwd`` rows time it) and each variant of the one-pass kernel (its three launches), eagerly
   (``triton.testing.do_bench``), interleaved over two rounds; ``x cuDNN`` is cuDNN's time over the
   variant's (above 1: faster). FLOPs counted as the bench counts them (2.5x the forward).

Variants: configs (BLOCK_N keys a program, BLOCK_M queries a step, warps, stages), dQ's adds by TMA
reductions or by atomics from every thread (``red``), programs staggered over the query blocks or not.
A total budget stops it where it is; the table is printed last. Without a GPU it says so and exits 0.
"""

import argparse
import json
import statistics
import sys
import time

# isort: off
import tkcourse  # noqa: F401  (first: the mode, before triton is imported)
import torch
import triton
# isort: on

T0 = time.time()
#: name -> (config, TMA_REDUCE, STAGGER)
VARIANTS = {
    "128x64w8s2": (dict(BLOCK_N=128, BLOCK_M=64, num_warps=8, num_stages=2), True, True),
    "128x64w8s3": (dict(BLOCK_N=128, BLOCK_M=64, num_warps=8, num_stages=3), True, True),
    "128x32w8s2": (dict(BLOCK_N=128, BLOCK_M=32, num_warps=8, num_stages=2), True, True),
    "64x64w4s2": (dict(BLOCK_N=64, BLOCK_M=64, num_warps=4, num_stages=2), True, True),
    "128x64w8s2 red": (dict(BLOCK_N=128, BLOCK_M=64, num_warps=8, num_stages=2), False, True),
    "128x64w8s2 nostagger": (dict(BLOCK_N=128, BLOCK_M=64, num_warps=8, num_stages=2), True, False),
}
#: the variants checked at every case below; the others at the fp16 D 128 ones
FULL_CHECK = ("128x64w8s2", "64x64w4s2")
#: (B, Hq, Hkv, N_Q, N_KV, D, causal, dtype) of the correctness check
CHECK_CASES = ((2, 4, 4, 512, 512, 128, False, "float16"), (2, 4, 4, 512, 512, 128, True, "float16"),
               (1, 4, 1, 200, 328, 128, True, "float16"),
               (1, 8, 2, 384, 384, 64, True, "bfloat16"),
               (2, 4, 2, 257, 257, 64, False, "bfloat16"), (1, 4, 4, 100, 612, 64, False, "float16"))
#: (B, Hq, Hkv, N, D, causal, dtype) of the timed shapes
SHAPES = ((4, 16, 16, 4096, 128, False, "float16"), (4, 16, 16, 4096, 128, True, "float16"),
          (1, 16, 16, 16384, 128, False, "float16"), (16, 16, 16, 1024, 128, False, "float16"),
          (4, 32, 32, 4096, 64, False, "float16"), (4, 32, 32, 4096, 64, True, "float16"),
          (4, 32, 8, 4096, 128, False, "float16"), (4, 32, 8, 4096, 128, True, "float16"),
          (4, 16, 16, 4096, 128, False, "bfloat16"), (16, 32, 32, 1024, 64, True, "float16"))


def say(*a):
    print(f"[{time.time() - T0:6.1f}s]", *a, flush=True)


def reference_grads(q, k, v, do, causal, dtype):
    """(dq, dk, dv) by torch's autograd in ``dtype`` (float64 for the reference), GQA by repeating k and v."""
    q, k, v = (t.detach().to(dtype).requires_grad_() for t in (q, k, v))
    g = q.shape[1] // k.shape[1]
    kk, vv = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    s = (q @ kk.transpose(-1, -2)) * q.shape[-1] ** -0.5
    if causal:
        nq, nk = q.shape[2], k.shape[2]
        keep = torch.arange(nk, device=q.device)[None, :] <= torch.arange(nq, device=q.device)[:, None] + nk - nq
        s = s.masked_fill(~keep, float("-inf"))
    (s.float().softmax(-1).to(dtype) @ vv).backward(do.to(dtype))
    return q.grad, k.grad, v.grad


def check(aba, fat, results):
    for B, Hq, Hkv, Nq, Nk, D, causal, dt in CHECK_CASES:
        dtype = getattr(torch, dt)
        q = torch.randn(B, Hq, Nq, D, device="cuda", dtype=dtype)
        k, v = (torch.randn(B, Hkv, Nk, D, device="cuda", dtype=dtype) for _ in range(2))
        do = torch.randn_like(q)
        o, lse = fat.attention_forward(q, k, v, causal)
        ref = reference_grads(q, k, v, do, causal, torch.float64)
        low = reference_grads(q, k, v, do, causal, dtype)
        tol = [3 * (a.double() - r).abs().max().item() + 1e-5 for a, r in zip(low, ref)]
        for name, (cfg, tma, stagger) in VARIANTS.items():
            if name not in FULL_CHECK and (D, causal, dt) not in ((128, False, "float16"), (128, True, "float16")):
                continue  # the other variants at the shapes the timing compiles anyway
            label = f"B{B} Hq{Hq} Hkv{Hkv} Nq{Nq} Nk{Nk} D{D}{' causal' if causal else ''} {dt} {name}"
            try:
                got = aba.attention_backward(do, q, k, v, o, lse, causal, config=cfg, tma_reduce=tma, stagger=stagger)
                errs = [(a.double() - r).abs().max().item() for a, r in zip(got, ref)]
                ok = all(e <= t for e, t in zip(errs, tol))
                results["check"].append(dict(case=label, ok=ok, errs=errs, tol=tol))
                say("ok  " if ok else "FAIL", label, " ".join(f"{n} {e:.1e}/{t:.1e}" for n, e, t in zip("qkv", errs, tol)))
            except Exception as e:  # noqa: BLE001 (say what failed, and go on)
                results["check"].append(dict(case=label, ok=False, error=repr(e)[:300]))
                say("FAIL", label, type(e).__name__, str(e)[:200])


def interleaved_medians(fns, rounds=2, label=""):
    """``{name: median ms}`` of each ``fns[name]()`` by ``triton.testing.do_bench``, the names taken in turn
    in each of ``rounds`` rounds (what drifts during a run then drifts for all); a call that fails is said and
    counts as NaN. ``gluon_backward_probe.py`` times with it too."""
    times = {n: [] for n in fns}
    for _ in range(rounds):
        for n, fn in fns.items():
            try:
                times[n].append(triton.testing.do_bench(fn))
            except Exception as e:  # noqa: BLE001 (say what failed, and go on)
                say(label, n, "FAIL", type(e).__name__, str(e)[:160])
                times[n].append(float("nan"))
    return {n: statistics.median(t) for n, t in times.items()}


def time_shapes(aba, fat, budget, results):
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    for B, Hq, Hkv, N, D, causal, dt in SHAPES:
        if time.time() - T0 > budget:
            say("budget spent: stopping before", (B, Hq, Hkv, N, D, causal, dt))
            break
        dtype = getattr(torch, dt)
        name = f"B{B}-Hq{Hq}-Hkv{Hkv}-N{N}-D{D}{'-causal' if causal else ''} {dt}"
        flops = 2.5 * 4 * B * Hq * N * N * D / (2 if causal else 1)
        q = torch.randn(B, Hq, N, D, device="cuda", dtype=dtype, requires_grad=True)
        k, v = (torch.randn(B, Hkv, N, D, device="cuda", dtype=dtype, requires_grad=True) for _ in range(2))
        do = torch.randn_like(q)
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            oc = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=Hq != Hkv)

        def cudnn():  # the gradients not summed into .grad: one backward's work, as the bench times it
            q.grad = k.grad = v.grad = None
            oc.backward(do, retain_graph=True)

        o, lse = fat.attention_forward(q.detach(), k.detach(), v.detach(), causal)
        fns = {"cudnn": cudnn}
        for vname, (cfg, tma, stagger) in VARIANTS.items():
            fns[vname] = (lambda cfg=cfg, tma=tma, stagger=stagger: aba.attention_backward(
                do, q.detach(), k.detach(), v.detach(), o, lse, causal, config=cfg, tma_reduce=tma, stagger=stagger))
        med = interleaved_medians(fns, 2, name)
        row = dict(shape=name, ms=med, tflops={n: flops / t / 1e9 for n, t in med.items()},
                   x_cudnn={n: med["cudnn"] / t for n, t in med.items() if n != "cudnn"})
        results["time"].append(row)
        best = max(row["x_cudnn"].items(), key=lambda kv: kv[1] if kv[1] == kv[1] else 0)
        say(name, f"cuDNN {row['tflops']['cudnn']:.0f} TFLOP/s;",
            " ".join(f"{n} {x:.2f}" for n, x in row["x_cudnn"].items()), f"| best {best[0]} {best[1]:.2f}")
        torch.cuda.empty_cache()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("parts", nargs="*", default=["C", "T"])
    p.add_argument("--budget", type=float, default=420)
    p.add_argument("--out", default=None)
    a = p.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA GPU: this probe times kernels on one; nothing to do")
        return 0
    from research.attention import atomic_backward as aba
    from solutions.kernels import attention_forward as fat

    results = dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                   check=[], time=[])
    say(results["gpu"], results["torch"], results["triton"])
    if "C" in a.parts:
        check(aba, fat, results)
        n_ok = sum(r["ok"] for r in results["check"])
        say(f"checked: {n_ok} of {len(results['check'])} pass")
    if "T" in a.parts:
        time_shapes(aba, fat, a.budget, results)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(results, f, indent=1)
    print("\nshape | cuDNN TFLOP/s | " + " | ".join(VARIANTS))
    for r in results["time"]:
        print(r["shape"], "|", f"{r['tflops']['cudnn']:.0f}", "|",
              " | ".join(f"{r['x_cudnn'].get(n, float('nan')):.2f}" for n in VARIANTS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
