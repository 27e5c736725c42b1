"""H200: the Gluon one-pass attention backward (``research/hopper/gluon_backward.py``), which has NEVER RUN
before this probe, checked for its numbers and timed against SDPA's cuDNN backward and the library's.

    PYTHONPATH=$PWD python3 research/hopper/gluon_backward_probe.py [C] [T] [--budget 300] [--out OUT.json]
        [--shape B,H,N,D[,causal][,bf16] ...] [--config NAME:STAGES,STAGGER ...]

C. Correctness first (B 2, H 4, N 256 and 512, D 64 and 128, causal or not, fp16 and bf16) against an fp64
   reference by FlashAttention's rule for gradients: each of dq, dk, dv within 3x the error of torch's own
   backward in the same dtype, plus 1e-5 (as ``research/attention/atomic_probe.py``). lse from the Gluon
   ping-pong forward (``return_lse=True``), Δ by lesson 07's ``compute_delta`` inside the launcher.
T. Time at lesson 07's shapes (fp16, causal and not): cuDNN's backward through autograd
   (``o.backward(do, retain_graph=True)`` under ``sdpa_kernel(SDPBackend.CUDNN_ATTENTION)``, the gradients set
   to None before each call, as ``tkcourse bench`` does: runs before 2026-12-04 12:30 UTC summed them into
   ``.grad``, three adds a call that made cuDNN read slower), the library's
   (``solutions.kernels.attention_backward``: two Triton kernels, autotuned on first use) and this one (its
   delta, zeroing, kernel and cast), eagerly with ``triton.testing.do_bench``, interleaved over two rounds;
   ``x cuDNN`` is cuDNN's time over the other's (above 1: faster). FLOPs 2.5x the forward's (4·B·H·N²·D, half
   when causal). Each shape's gradients are also compared with the library's (max |diff| / max |library|).
   ``--shape`` replaces the shapes (``4,16,4096,128,causal,bf16``); ``--config s3:3,1`` adds the kernel
   under another config (STAGES 3, STAGGER on) to the interleaved rounds, as ``gluon s3``.

A kernel that never ran may hang (a deadlock of its mbarriers) or fault: each part runs in a child process
with a time limit, so that a hang costs that part only, and its results are saved case by case (what a
killed part had done is still printed). The compact table comes last. Without a GPU (or on one that is not
a Hopper) it says so and exits 0.
"""

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# isort: off
import tkcourse  # noqa: F401  (first: the mode, before triton is imported)
import torch
import triton
# isort: on

from research.attention.atomic_probe import interleaved_medians, reference_grads  # noqa: E402

T0 = time.time()
ROOT = Path(__file__).resolve().parents[2]
#: (B, H, N, D, causal, dtype) of the correctness check
CHECK_CASES = ((2, 4, 256, 64, False, "float16"), (2, 4, 256, 64, True, "float16"),
               (2, 4, 512, 128, False, "float16"), (2, 4, 512, 128, True, "float16"),
               (2, 4, 512, 64, True, "bfloat16"), (2, 4, 256, 128, False, "bfloat16"),
               (2, 4, 512, 128, True, "bfloat16"), (2, 4, 512, 64, False, "bfloat16"))
#: (B, H, N, D, causal) of the timed shapes, fp16, the most telling first (the budget stops where it is)
SHAPES = ((4, 16, 4096, 128, False), (4, 16, 4096, 128, True), (4, 32, 4096, 64, False), (4, 32, 4096, 64, True),
          (16, 16, 1024, 128, False), (16, 16, 1024, 128, True), (1, 16, 16384, 128, False),
          (1, 16, 16384, 128, True))


def say(*a):
    print(f"[{time.time() - T0:6.1f}s]", *a, flush=True)


def forward(q, k, v, causal):
    """(o, lse) of the forward: the Gluon ping-pong rung (no autotuning), or the library's Triton forward."""
    try:
        from solutions.kernels import gluon_attention as ga

        return ga.attention_forward(q, k, v, causal, kernel=ga.attention_pingpong_kernel, return_lse=True)
    except Exception as e:  # noqa: BLE001 (fall back, and say so)
        say("Gluon forward failed, using the Triton one:", type(e).__name__, str(e)[:160])
        from solutions.kernels import attention_forward as fat

        return fat.attention_forward(q, k, v, causal)


def save(results, path):
    with open(path, "w") as f:
        json.dump(results, f, indent=1)


def check(gb, results, path):
    for B, H, N, D, causal, dt in CHECK_CASES:
        label = f"B{B} H{H} N{N} D{D}{' causal' if causal else ''} {dt}"
        try:
            dtype = getattr(torch, dt)
            torch.manual_seed(0)
            q, k, v, do = (torch.randn(B, H, N, D, device="cuda", dtype=dtype) for _ in range(4))
            o, lse = forward(q, k, v, causal)
            ref = reference_grads(q, k, v, do, causal, torch.float64)
            low = reference_grads(q, k, v, do, causal, dtype)
            tol = [3 * (a.double() - r).abs().max().item() + 1e-5 for a, r in zip(low, ref)]
            say("run ", label)  # a hang shows after this line
            got = gb.attention_backward(do, q, k, v, o, lse, causal)
            torch.cuda.synchronize()
            errs = [(a.double() - r).abs().max().item() for a, r in zip(got, ref)]
            finite = all(bool(torch.isfinite(a).all()) for a in got)
            ok = finite and all(e <= t for e, t in zip(errs, tol))
            results["check"].append(dict(case=label, ok=ok, errs=errs, tol=tol, finite=finite))
            say("ok  " if ok else "FAIL", label, " ".join(f"d{n} {e:.1e}/{t:.1e}" for n, e, t in zip("qkv", errs, tol)),
                "" if finite else "(non-finite values)")
        except Exception as e:  # noqa: BLE001 (say what failed, and go on)
            results["check"].append(dict(case=label, ok=False, error=repr(e)[:300]))
            say("FAIL", label, type(e).__name__, str(e)[:200])
        save(results, path)


def parse_shape(text):
    """``B,H,N,D[,causal][,bf16]`` -> (B, H, N, D, causal, dtype name)."""
    parts = text.split(",")
    B, H, N, D = (int(x) for x in parts[:4])
    return B, H, N, D, "causal" in parts[4:], "bfloat16" if "bf16" in parts[4:] else "float16"


def parse_config(text):
    """``NAME:STAGES,STAGGER`` -> (name, config dict)."""
    name, _, rest = text.partition(":")
    stages, stagger = rest.split(",")
    return name, dict(STAGES=int(stages), STAGGER=bool(int(stagger)))


def time_shapes(gb, budget, results, path, shapes=None, configs=()):
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from solutions.kernels import attention_backward as lib

    for B, H, N, D, causal, dt in shapes or [(*s, "float16") for s in SHAPES]:
        if time.time() - T0 > budget:
            say("budget spent: stopping before", (B, H, N, D, causal, dt))
            break
        name = f"B{B}-H{H}-N{N}-D{D}{'-causal' if causal else ''} {'fp16' if dt == 'float16' else 'bf16'}"
        try:
            flops = 2.5 * 4 * B * H * N * N * D / (2 if causal else 1)
            q, k, v = (torch.randn(B, H, N, D, device="cuda", dtype=getattr(torch, dt), requires_grad=True)
                       for _ in range(3))
            do = torch.randn_like(q)
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                oc = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            qd, kd, vd = q.detach(), k.detach(), v.detach()
            o, lse = forward(qd, kd, vd, causal)
            def cudnn():  # the gradients not summed into .grad: one backward's work, as the bench times it
                q.grad = k.grad = v.grad = None
                oc.backward(do, retain_graph=True)

            fns = {"cudnn": cudnn,
                   "library": lambda: lib.attention_backward(do, qd, kd, vd, o, lse, causal),
                   "gluon": lambda: gb.attention_backward(do, qd, kd, vd, o, lse, causal)}
            for cname, cfg in configs:
                fns[f"gluon {cname}"] = (lambda c: lambda: gb.attention_backward(do, qd, kd, vd, o, lse, causal,
                                                                                 config=c))(cfg)
            say("run ", name)  # a hang shows after this line
            ours = gb.attention_backward(do, qd, kd, vd, o, lse, causal)
            theirs = lib.attention_backward(do, qd, kd, vd, o, lse, causal)
            agree = [((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-30)).item()
                     for a, b in zip(ours, theirs)]
            say(name, "gluon vs library, max|diff|/max|library|:",
                " ".join(f"d{n} {x:.1e}" for n, x in zip("qkv", agree)))
            med = interleaved_medians(fns, 2, name)
            row = dict(shape=name, ms=med, tflops={n: flops / t / 1e9 for n, t in med.items()},
                       x_cudnn={n: med["cudnn"] / t for n, t in med.items() if n != "cudnn"}, vs_library=agree)
            results["time"].append(row)
            say(name, f"cuDNN {med['cudnn']:.3f} ms {row['tflops']['cudnn']:.0f} TFLOP/s;",
                f"gluon {med['gluon']:.3f} ms x cuDNN {row['x_cudnn']['gluon']:.2f};",
                f"library {med['library']:.3f} ms x cuDNN {row['x_cudnn']['library']:.2f}",
                *(f"{n} x cuDNN {x:.2f};" for n, x in row["x_cudnn"].items() if n.startswith("gluon ")))
        except Exception as e:  # noqa: BLE001
            results["time"].append(dict(shape=name, error=repr(e)[:300]))
            say(name, "FAIL", type(e).__name__, str(e)[:200])
        save(results, path)
        q = k = v = do = oc = o = lse = fns = None  # the next shape's tensors in their place
        torch.cuda.empty_cache()


def child(part, budget, path, shapes=None, configs=()):
    """One part in this process (the parent's child): results saved to ``path`` case by case."""
    from solutions.kernels import gluon_attention_backward as gb

    results = dict(check=[], time=[])
    save(results, path)
    if part == "C":
        check(gb, results, path)
    else:
        time_shapes(gb, budget, results, path, shapes, configs)
    return 0


def run_part(part, limit, budget, extra=()):
    """The part in a child process of at most ``limit`` seconds: its results, and whether it finished."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "part.json")
        cmd = [sys.executable, __file__, part, "--child", "--budget", str(budget), "--out", path, *extra]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
        try:
            rc = subprocess.run(cmd, timeout=limit, env=env).returncode
            status = "done" if rc == 0 else f"exit code {rc} (a fault?)"
        except subprocess.TimeoutExpired:
            status = f"killed after {limit:.0f} s: a hang (mbarrier deadlock?) after the last 'run' line above"
        try:
            with open(path) as f:
                got = json.load(f)
        except (OSError, ValueError):
            got = dict(check=[], time=[])
    say(f"part {part}: {status}")
    return got, status


def main():
    p = argparse.ArgumentParser()
    p.add_argument("parts", nargs="*", default=["C", "T"])
    p.add_argument("--budget", type=float, default=300)
    p.add_argument("--out", default=None)
    p.add_argument("--shape", action="append", default=[], help="B,H,N,D[,causal][,bf16]: time these shapes")
    p.add_argument("--config", action="append", default=[], help="NAME:STAGES,STAGGER: time this config too")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    shapes = [parse_shape(t) for t in a.shape]
    configs = [parse_config(t) for t in a.config]
    extra = [x for t in a.shape for x in ("--shape", t)] + [x for t in a.config for x in ("--config", t)]
    if not torch.cuda.is_available():
        print("no CUDA GPU: this probe needs a GPU (an H100/H200) to run the Gluon backward; nothing to do")
        return 0
    if a.child:
        return child(a.parts[0], a.budget, a.out, shapes, configs)
    major, minor = torch.cuda.get_device_capability()
    print(f"GPU {torch.cuda.get_device_name()} (sm_{major}{minor}), torch {torch.__version__}, triton "
          f"{triton.__version__}, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M:%S} UTC", flush=True)
    if major != 9:
        print("not a Hopper GPU: the Gluon backward uses wgmma (sm_90); nothing to do")
        return 0
    results = dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__, check=[],
                   time=[], status={})
    if "C" in a.parts:
        got, results["status"]["C"] = run_part("C", max(120.0, 0.4 * a.budget), a.budget)
        results["check"] = got["check"]
        say(f"checked: {sum(r['ok'] for r in results['check'])} of {len(CHECK_CASES)} pass")
    if "T" in a.parts:
        left = a.budget - (time.time() - T0)
        if left <= 30:
            say("budget spent before the timing")
        else:  # the child stops starting shapes at the budget; the limit leaves it one shape's time past it
            got, results["status"]["T"] = run_part("T", left + 120, left, extra)
            results["time"] = got["time"]
    if a.out:
        save(results, a.out)
    print("\ncorrectness (errors / tolerance):")
    for r in results["check"]:
        detail = (" ".join(f"d{n} {e:.1e}/{t:.1e}" for n, e, t in zip("qkv", r["errs"], r["tol"])) if "errs" in r
                  else r.get("error", ""))
        print(f"  {'ok  ' if r['ok'] else 'FAIL'} {r['case']}: {detail}")
    print("\nshape | cuDNN ms | cuDNN TFLOP/s | gluon ms | gluon x cuDNN | library x cuDNN | gluon vs library (dq dk dv)")
    for r in results["time"]:
        if "error" in r:
            print(r["shape"], "| FAIL", r["error"][:100])
            continue
        print(r["shape"], "|", f"{r['ms']['cudnn']:.3f}", "|", f"{r['tflops']['cudnn']:.0f}", "|",
              f"{r['ms']['gluon']:.3f}", "|", f"{r['x_cudnn']['gluon']:.2f}", "|", f"{r['x_cudnn']['library']:.2f}",
              "|", " ".join(f"{x:.1e}" for x in r["vs_library"]),
              *(f"| {n} {x:.2f}" for n, x in r["x_cudnn"].items() if n.startswith("gluon ")))
    print("status:", results["status"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
