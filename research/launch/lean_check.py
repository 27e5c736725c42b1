"""Do the lean launch paths meet issue #20's targets on this GPU? (lesson 08; run on the GPU machine)

Correctness first: every lean function (``solutions.kernels``) against its torch
reference, twice (the first call compiles, the second runs the kept kernel), then inside a CUDA
graph. Then, for each target, in one run against the peer: host microseconds per call
(``tkcourse.bench.core.host_us``: calls queued without waiting, on problems small enough that the
GPU is not the bottleneck), eager time as a learner calls it (``triton.testing.do_bench``), and
the GPU's work alone in a CUDA graph (``graph_ms``); ratios against the peer and PASS/FAIL.
    PYTHONPATH=$PWD python3 research/launch/lean_check.py OUT_DIR
"""
import json
import sys
import time
import traceback
from pathlib import Path

import tkcourse  # noqa: F401  (mode first)
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

from solutions import flash_attention_backward as fab
from solutions import kernels as lean
from solutions.kernels import attention as lean_attention
from solutions.kernels import matmul as lean_matmul
from solutions.kernels import online_softmax as lean_online
from solutions.kernels import softmax as lean_softmax
from solutions.kernels import vector_add as lean_add
from solutions import matmul as mm
from solutions.kernels import online_softmax_one_read as one
from solutions import softmax as sm
from solutions import vector_add as va
from solutions import flash_attention as fa
from solutions.kernels import attention_forward as fat
from tkcourse.bench.core import graph_ms, host_us

OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "lean_check_out")
OUT.mkdir(parents=True, exist_ok=True)
T0 = time.time()
checks, rows, targets = [], [], []


def close(a, b, tol):
    return bool(torch.allclose(a.float(), b.float(), atol=tol, rtol=tol))


def check(name, fn, ref, tol=2e-2):
    try:
        ok = all(close(x, y, tol) for _ in range(2) for x, y in zip(_tup(fn()), _tup(ref)))
        out = [None]
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            fn()
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(g):
            out[0] = fn()
        for t in _tup(out[0]):
            t.zero_()
        g.replay(); torch.cuda.synchronize()
        gok = all(close(x, y, tol) for x, y in zip(_tup(out[0]), _tup(ref)))
        checks.append((name, ok, gok, ""))
    except Exception as e:  # noqa: BLE001
        checks.append((name, False, False, f"{type(e).__name__}: {str(e)[:200]}"))
        traceback.print_exc()
    print("check", checks[-1], flush=True)


def _tup(x):
    return x if isinstance(x, (tuple, list)) else (x,)


def measure(name, fn, host_n=300):
    if time.time() - T0 > 215:  # keep the whole run inside its time limit
        rows.append(dict(call=name + " (skipped: time)", host_us=float("nan"), eager_us=float("nan"), graph_us=float("nan")))
        return rows[-1]
    try:
        fn(); torch.cuda.synchronize()
        h = host_us(fn, n=host_n)
        e = do_bench(fn, warmup=10, rep=40, quantiles=[0.5])
        e = (e[0] if isinstance(e, (list, tuple)) else e) * 1e3
        try:
            g = graph_ms(fn, rep=50) * 1e3
        except Exception as exc:  # noqa: BLE001
            g = float("nan"); print("graph failed", name, exc)
    except Exception:  # noqa: BLE001
        traceback.print_exc(); h = e = g = float("nan")
    rows.append(dict(call=name, host_us=h, eager_us=e, graph_us=g))
    print(f"{name:44s} host {h:7.2f}  eager {e:7.2f}  graph {g:7.2f} us  ({time.time() - T0:.0f}s)", flush=True)
    return rows[-1]


def target(what, ours, peer, metric, bound, faster=True):
    """ratio = peer / ours for times (above 1: ours faster); host: ours / peer (at most bound)."""
    a, b = ours[metric], peer[metric]
    if metric == "host_us":
        ratio = a / b; ok = ratio <= bound
    else:
        ratio = b / a; ok = ratio >= bound
    targets.append(dict(target=what, metric=metric, ours=round(a, 2), peer=round(b, 2), ratio=round(ratio, 3),
                        bound=bound, result="PASS" if ok else "FAIL"))


def dump(final=False):
    res = dict(gpu=torch.cuda.get_device_name(0), torch=torch.__version__, triton=__import__("triton").__version__,
               seconds=round(time.time() - T0, 1), checks=checks, rows=rows, targets=targets,
               compiles={n: l.compiles for n, l in lean.LEANS.items()})
    (OUT / "lean_check.json").write_text(json.dumps(res, indent=1, default=str))
    md = [f"GPU {res['gpu']}, torch {res['torch']}, triton {res['triton']}, {res['seconds']} s", "",
          "| check | eager ok | graph ok | error |", "|---|---|---|---|"]
    md += [f"| {c[0]} | {c[1]} | {c[2]} | {c[3]} |" for c in checks]
    md += ["", "| call | host us | eager us | graph us |", "|---|---|---|---|"]
    md += [f"| {r['call']} | {r['host_us']:.2f} | {r['eager_us']:.2f} | {r['graph_us']:.2f} |" for r in rows]
    md += ["", "| target | metric | ours | peer | ratio | bound | result |", "|---|---|---|---|---|---|---|"]
    md += [f"| {t['target']} | {t['metric']} | {t['ours']} | {t['peer']} | {t['ratio']} | {t['bound']} | {t['result']} |"
           for t in targets]
    (OUT / "lean_check.md").write_text("\n".join(md) + "\n")
    if final:
        print("\n".join(md))


dev = "cuda"
# ---- correctness ----
x, y = torch.randn(100_003, device=dev), torch.randn(100_003, device=dev)
check("add", lambda: lean_add.add(x, y), x + y, 1e-6)
s1 = torch.randn(1000, 777, device=dev, dtype=torch.float16)
check("softmax", lambda: lean_softmax.softmax(s1), sm.reference(s1), 2e-3)
check("softmax strided", lambda: lean_softmax.softmax(s1[::3]), sm.reference(s1[::3]), 2e-3)
for n in (3000, 70_000, 300_000):
    s2 = torch.randn(64 if n < 300_000 else 8, n, device=dev, dtype=torch.float16)
    check(f"online_softmax {n}", lambda s2=s2: lean_online.softmax(s2), one.reference(s2), 2e-3)
for dt in (torch.float16, torch.bfloat16):
    for (M, N, K) in ((512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048)) + (((300, 500, 700),) if dt == torch.float16 else ()):
        a = torch.randn(M, K, device=dev, dtype=dt); b = torch.randn(K, N, device=dev, dtype=dt)
        check(f"matmul {str(dt)[6:]} {M}x{N}x{K}", lambda a=a, b=b: lean_matmul.matmul(a, b), mm.reference(a, b), 3e-2)
a = torch.randn(1024, 1024, device=dev, dtype=torch.float16)
check("matmul transposed b", lambda: lean_matmul.matmul(a, a.T), mm.reference(a, a.T), 3e-2)
for causal in (False, True):
    for N in (512, 333):
        q, k, v = (torch.randn(1, 16, N, 64, device=dev, dtype=torch.float16) for _ in range(3))
        ref_o = fat.reference(q, k, v, causal)
        check(f"attention_forward N{N} causal={causal}", lambda q=q, k=k, v=v, c=causal: lean_attention.attention_forward(q, k, v, c)[0],
              ref_o, 2e-2)
        o, lse = fa.attention_forward(q, k, v, causal)  # the lesson's kernel: the backward's inputs
        do = torch.randn_like(o)
        ref_g = fab.reference_backward(do.float(), q.float(), k.float(), v.float(), causal)
        check(f"attention_backward N{N} causal={causal}",
              lambda q=q, k=k, v=v, o=o, lse=lse, do=do, c=causal: lean_attention.attention_backward(do, q, k, v, o, lse, c),
              ref_g, 5e-2)
print(f"correctness done ({time.time() - T0:.0f}s)", flush=True)
dump()

# ---- targets ----
xs, ys = torch.randn(4096, device=dev), torch.randn(4096, device=dev)
target("add host", measure("add lean n4096", lambda: lean_add.add(xs, ys)), measure("torch.add n4096", lambda: torch.add(xs, ys)), "host_us", 1.5)
measure("add readable n4096", lambda: va.add(xs, ys))
sx = torch.randn(4096, 1024, device=dev, dtype=torch.float16)
ss = torch.randn(64, 1024, device=dev, dtype=torch.float16)
target("softmax host", measure("softmax lean 64x1024", lambda: lean_softmax.softmax(ss)), measure("torch.softmax 64x1024", lambda: torch.softmax(ss, -1)), "host_us", 1.5)
measure("softmax readable 64x1024", lambda: sm.softmax(ss))
ours, peer = measure("softmax lean 4096x1024", lambda: lean_softmax.softmax(sx)), measure("torch.softmax 4096x1024", lambda: torch.softmax(sx, -1))
target("softmax 4096x1024 eager", ours, peer, "eager_us", 1.5)
measure("softmax readable 4096x1024", lambda: sm.softmax(sx))
so = torch.randn(64, 8192, device=dev, dtype=torch.float16)
target("online_softmax host", measure("online_softmax lean 64x8192", lambda: lean_online.softmax(so)),
       measure("torch.softmax 64x8192", lambda: torch.softmax(so, -1)), "host_us", 1.5)
measure("online_softmax readable 64x8192", lambda: one.softmax(so))
for dt in (torch.float16, torch.bfloat16):
    for n in (512, 1024, 2048):
        a = torch.randn(n, n, device=dev, dtype=dt); b = torch.randn(n, n, device=dev, dtype=dt)
        name = f"matmul {str(dt)[6:]} {n}"
        ours = measure(f"{name} lean", lambda a=a, b=b: lean_matmul.matmul(a, b))
        peer = measure(f"{name} cuBLAS", lambda a=a, b=b: torch.matmul(a, b))
        target(f"{name} eager", ours, peer, "eager_us", 0.9)
        if n == 512:
            target(f"{name} host", ours, peer, "host_us", 1.5)
        if n == 1024:
            target(f"{name} graph", ours, peer, "graph_us", 0.9)
        if n == 1024 and dt == torch.float16:  # the readable launcher, one config (no autotuning here)
            cfg = dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=4, num_stages=4)
            measure(f"{name} readable, one config", lambda a=a, b=b: mm.matmul(a, b, cfg))
    dump()
for causal in (False, True):
    q, k, v = (torch.randn(1, 16, 512, 64, device=dev, dtype=torch.float16) for _ in range(3))
    c = "causal" if causal else "full"
    ours = measure(f"attn fwd lean {c}", lambda q=q, k=k, v=v, c_=causal: lean_attention.attention_forward(q, k, v, c_))
    measure(f"attn fwd readable (lesson 06) {c}", lambda q=q, k=k, v=v, c_=causal: fa.attention_forward(q, k, v, c_))
    peers = [measure(f"SDPA default {c}", lambda q=q, k=k, v=v, c_=causal: F.scaled_dot_product_attention(q, k, v, is_causal=c_))]
    for be in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION):
        def sd(q=q, k=k, v=v, c_=causal, be=be):
            with sdpa_kernel(be):
                return F.scaled_dot_product_attention(q, k, v, is_causal=c_)
        peers.append(measure(f"SDPA {be.name} {c}", sd))
    good = [p for p in peers if p["eager_us"] == p["eager_us"]]
    best_eager = min(good, key=lambda p: p["eager_us"])
    best_host = min(good, key=lambda p: p["host_us"])
    target(f"attn fwd B1H16N512D64 {c} eager (vs SDPA best)", ours, best_eager, "eager_us", 1.0)
    target(f"attn fwd {c} host (vs SDPA fastest host)", ours, best_host, "host_us", 1.5)
    qg, kg, vg = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    o, lse = fa.attention_forward(q, k, v, causal)
    do = torch.randn_like(o)
    ours = measure(f"attn bwd lean {c}", lambda c_=causal, o=o, lse=lse, do=do, q=q, k=k, v=v: lean_attention.attention_backward(do, q, k, v, o, lse, c_))
    measure(f"attn bwd readable (lesson 07) {c}", lambda c_=causal, o=o, lse=lse, do=do, q=q, k=k, v=v: fab.attention_backward(do, q, k, v, o, lse, c_))
    osd = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)
    peer = measure(f"SDPA bwd (autograd) {c}", lambda osd=osd, do=do: torch.autograd.grad(osd, (qg, kg, vg), do, retain_graph=True))
    target(f"attn bwd {c} host", ours, peer, "host_us", 1.5)
    dump()

dump(final=True)
