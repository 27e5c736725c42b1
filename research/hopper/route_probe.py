"""H200 check of the kernel library's attention forward routed to lesson 12's ping-pong kernel
(``solutions.kernels.attention.PINGPONG``), then its speed against the Triton forward it replaces.

    PYTHONPATH=$PWD python3 research/hopper/route_probe.py [C] [T] [--dtype float16|bfloat16] [--out OUT.json]

C. Correctness where the route is taken: the trainable ``attention`` (forward by the ping-pong kernel, its
   log-sum-exp, lesson 07's backward) against a float32 torch reference by FlashAttention's rule (the
   error at most 2x (o) or 3x (dq, dk, dv) that of the same torch maths in the input's dtype, plus a
   small atol); the log-sum-exp against the Triton forward's. MHA and GQA, D 64 and 128, causal or not,
   fp16 and bf16.
T. Forward time, eager (``do_bench``, the L2 flushed) and replayed in a CUDA graph (``graph_ms``), and host
   time a call: the routed forward, the Triton forward (``impl="tuned"``), SDPA's cuDNN backend, at the
   grouped-query shapes of the bench (B 1 and 4, Hq 32, Hkv 8, D 128, N 1024-16384) and lesson 06's D 128
   and D 64 shapes at N 1024 and 4096.

Each case runs in try/except; the compact table is printed last.
"""

import json
import math
import sys
import time

import torch
import triton

import tkcourse  # noqa: F401  (the mode, before any kernel is defined)
from research.attention.gqa_probe import reference  # torch's attention, the mask aligned to the end
from solutions.kernels import attention as lean
from solutions.kernels import attention_forward as fat
from solutions.kernels import gluon_attention as ga
from tkcourse.bench import graph_ms, host_us

T0 = time.time()
DTYPES = (torch.float16, torch.bfloat16)
BUDGET_S = {"C": 120, "T": 240}


def log(msg):
    print(f"[{time.time() - T0:6.1f}s] {msg}", flush=True)


def _grads(f, q, k, v, do, causal):
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    o = f(q, k, v, causal)
    return (o.detach(), *torch.autograd.grad(o, (q, k, v), do))


def check_case(B, Hq, Hkv, N, D, dtype, causal):
    g = torch.Generator(device="cuda").manual_seed(N * 31 + D)
    q = torch.randn(B, Hq, N, D, device="cuda", dtype=dtype, generator=g)
    k, v = (torch.randn(B, Hkv, N, D, device="cuda", dtype=dtype, generator=g) for _ in range(2))
    do = torch.randn_like(q)
    lean.forget()
    if lean.forward_route(q, k, v, causal) != "pingpong":
        return False, "the route did not take this shape"
    got = _grads(lambda *a: lean.attention(*a[:3], causal=a[3]), q, k, v, do, causal)
    ref = _grads(reference, q.float(), k.float(), v.float(), do.float(), causal)
    pt = _grads(reference, q, k, v, do, causal)
    ok, notes = True, []
    for name, x, r, p, factor in zip(("o", "dq", "dk", "dv"), got, ref, pt, (2, 3, 3, 3)):
        err, base = (x.float() - r).abs().max().item(), (p.float() - r).abs().max().item()
        good = math.isfinite(err) and err <= factor * base + 1e-4
        ok &= good
        notes.append(f"{name} {err:.1e}/{base:.1e}{'' if good else ' FAIL'}")
    _, lse = lean.attention_forward(q, k, v, causal)
    _, lse_triton = fat.attention_forward(q, k, v, causal, config=dict(fat.SMALL_N_CONFIG))
    d = (lse - lse_triton).abs().max().item()
    ok &= d < 1e-2
    notes.append(f"lse {d:.1e}")
    return ok, ", ".join(notes)


def part_check():
    cases = [(2, 4, 4, 1024, 128), (1, 4, 4, 4096, 64), (1, 8, 2, 1024, 128), (2, 4, 1, 2048, 128), (1, 4, 2, 4096, 64)]
    out = []
    for B, Hq, Hkv, N, D in cases:
        for dtype in DTYPES:
            for causal in (False, True):
                if time.time() - T0 > BUDGET_S["C"]:
                    continue
                label = f"B{B}-Hq{Hq}-Hkv{Hkv}-N{N}-D{D}{'-causal' if causal else ''} {str(dtype)[6:]}"
                try:
                    ok, notes = check_case(B, Hq, Hkv, N, D, dtype, causal)
                except Exception as e:  # noqa: BLE001
                    ok, notes = False, f"{type(e).__name__}: {str(e)[:300]}"
                log(f"{'ok  ' if ok else 'FAIL'} {label}: {notes}")
                out.append(dict(case=label, ok=ok, notes=notes))
    log(f"checked: {sum(r['ok'] for r in out)} of {len(out)} pass")
    return out


def _cudnn(q, k, v, causal):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                                enable_gqa=q.shape[1] != k.shape[1])


def time_case(B, Hq, Hkv, N, D, dtype, causal):
    """The ping-pong kernel as the route launches it (``gluon_attention.attention_forward``), the Triton
    forward through its lean entry (``impl="tuned"``: the route left out), cuDNN."""
    q = torch.randn(B, Hq, N, D, device="cuda", dtype=dtype)
    k, v = (torch.randn(B, Hkv, N, D, device="cuda", dtype=dtype) for _ in range(2))
    fns = {"pingpong": lambda: ga.attention_forward(q, k, v, causal, kernel=ga.attention_pingpong_kernel,
                                                    return_lse=True)[0],
           "triton": lambda: lean.attention_forward(q, k, v, causal, impl="tuned")[0],
           "cudnn": lambda: _cudnn(q, k, v, causal)}
    ref = _cudnn(q, k, v, causal)
    row = {f"diff_{name}": (f().float() - ref.float()).abs().max().item() for name, f in fns.items()}
    for name, f in fns.items():
        row[f"{name}_ms"] = triton.testing.do_bench(f, warmup=10, rep=50)
        row[f"{name}_graph_ms"] = graph_ms(f, rep=30)
        row[f"{name}_host_us"] = host_us(f)
    return row


def part_time():
    shapes = [(B, 32, 8, N, 128) for N in (4096, 1024, 16384) for B in (1, 4)]
    shapes += [(16, 16, 16, 1024, 128), (4, 16, 16, 4096, 128), (4, 32, 32, 4096, 64)]
    rows = []
    for dtype in DTYPES:
        for B, Hq, Hkv, N, D in shapes:
            for causal in (False, True):
                name = f"B{B}-Hq{Hq}-Hkv{Hkv}-N{N}-D{D}{'-causal' if causal else ''}"
                if time.time() - T0 > BUDGET_S["C"] + BUDGET_S["T"]:
                    continue
                row = dict(shape=name, dtype=str(dtype)[6:])
                try:
                    row.update(time_case(B, Hq, Hkv, N, D, dtype, causal))
                    log(f"{name} {row['dtype']}: x cuDNN eager pingpong {row['cudnn_ms'] / row['pingpong_ms']:.2f} "
                        f"triton {row['cudnn_ms'] / row['triton_ms']:.2f}; graph pingpong "
                        f"{row['cudnn_graph_ms'] / row['pingpong_graph_ms']:.2f} triton "
                        f"{row['cudnn_graph_ms'] / row['triton_graph_ms']:.2f}; host us pingpong "
                        f"{row['pingpong_host_us']:.0f} triton {row['triton_host_us']:.0f} cudnn {row['cudnn_host_us']:.0f}")
                except Exception as e:  # noqa: BLE001
                    row["note"] = f"{type(e).__name__}: {str(e)[:300]}"
                    log(f"FAIL {name}: {row['note']}")
                rows.append(row)
                torch.cuda.empty_cache()
    return rows


def main(argv):
    global DTYPES
    parts = [a for a in argv if a in ("C", "T")] or ["C", "T"]
    if "--dtype" in argv:  # one dtype only: a run's budget may not reach the second
        DTYPES = (getattr(torch, argv[argv.index("--dtype") + 1]),)
    out = argv[argv.index("--out") + 1] if "--out" in argv else None
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, time.strftime("%FT%TZ", time.gmtime()))
    result = {}
    if "C" in parts:
        result["check"] = part_check()
    if "T" in parts:
        result["time"] = part_time()
        print("| shape | dtype | ping-pong x cuDNN eager (graph) | Triton x cuDNN eager (graph) | host us pp / triton / cudnn |")
        print("|---|---|---|---|---|")
        for r in result["time"]:
            if "pingpong_ms" in r:
                print(f"| {r['shape']} | {r['dtype']} | {r['cudnn_ms'] / r['pingpong_ms']:.2f} "
                      f"({r['cudnn_graph_ms'] / r['pingpong_graph_ms']:.2f}) | {r['cudnn_ms'] / r['triton_ms']:.2f} "
                      f"({r['cudnn_graph_ms'] / r['triton_graph_ms']:.2f}) | {r['pingpong_host_us']:.0f} / "
                      f"{r['triton_host_us']:.0f} / {r['cudnn_host_us']:.0f} |")
    if out:
        with open(out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
