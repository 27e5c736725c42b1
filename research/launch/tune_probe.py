"""Second look at lesson 08's misses (a tuning aid): which small-problem choices reach the peers.

Asks, on the H200, with times as ratios to the peer in the same run:
A. attention forward B1 H16 N512 D64 on the lean path, host-made against in-kernel descriptors
   (host, eager and graph time; SDPA's default beside it);
B. softmax fp16 4096x1024: the lesson's kernel on its persistent grid against a program per row,
   at 2, 4, 8 and 16 warps (graph and eager time; torch.softmax beside it);
C. matmul 1024^3 and 512^3, fp16 and bf16: single configs of ``kernels.matmul_small`` (split-K among
   them), graph time against cuBLAS;
D. the lean online softmax's host time beside ``torch.zeros`` (its per-call exchange slots).
Run on the GPU machine from the repository root:
    PYTHONPATH=$PWD python3 research/launch/tune_probe.py OUT
"""
import json, sys, time
from pathlib import Path
import tkcourse  # noqa: F401
import torch, triton
import torch.nn.functional as F
from triton.testing import do_bench
from tkcourse.bench.core import graph_ms, host_us
from solutions.kernels import attention as LA, matmul_small as small
from solutions.kernels.matmul import matmul as L_matmul
from solutions.kernels.online_softmax import softmax as L_online
from solutions.kernels.softmax import softmax as L_softmax
from solutions.softmax import softmax_kernel

out = Path(sys.argv[1] if len(sys.argv) > 1 else "."); out.mkdir(parents=True, exist_ok=True)
T0 = time.time(); rows = []
def db(fn):
    r = do_bench(fn, quantiles=[0.5]); return (r[0] if isinstance(r, (list, tuple)) else r) * 1e3
def case(name, fn, host=True):
    fn(); torch.cuda.synchronize()
    h = host_us(fn) if host else float("nan")
    e = db(fn)
    try:
        g = graph_ms(fn) * 1e3
    except Exception:  # noqa: BLE001
        g = float("nan")
    rows.append(dict(name=name, host_us=h, eager_us=e, graph_us=g))
    print(f"{name:52s} host {h:7.2f}  eager {e:7.2f}  graph {g:7.2f} us  [{time.time() - T0:.0f}s]", flush=True)

# A
for causal in (False, True):
    q, k, v = (torch.randn(1, 16, 512, 64, device="cuda", dtype=torch.float16) for _ in range(3))
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    for hd in (False, True):
        o = LA.attention_forward(q, k, v, causal=causal, host_descriptors=hd)[0]
        assert (o - ref).abs().max().item() < 2e-2
        case(f"A attn lean causal={causal} host_descriptors={hd}", lambda hd=hd: LA.attention_forward(q, k, v, causal=causal, host_descriptors=hd))
    case(f"A attn SDPA default causal={causal}", lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))

# B
x = torch.randn(4096, 1024, device="cuda", dtype=torch.float16); o = torch.empty_like(x)
ref = torch.softmax(x.float(), -1)
case("B torch.softmax 4096x1024", lambda: torch.softmax(x, -1), host=False)
case("B lean softmax 4096x1024", lambda: L_softmax(x), host=False)
for grid in (1056, 2112, 4096):
    for w in (2, 4, 8, 16):
        f = lambda grid=grid, w=w: softmax_kernel[(grid,)](x, o, 1024, 1024, 4096, 1024, BLOCK=1024, NUM_STAGES=1, num_warps=w)
        f(); torch.cuda.synchronize(); assert (o.float() - ref).abs().max().item() < 1e-2
        case(f"B kernel grid {grid} warps {w}", f, host=False)
for grid, st in ((1056, 2), (1056, 3), (528, 3)):
    f = lambda grid=grid, st=st: softmax_kernel[(grid,)](x, o, 1024, 1024, 4096, 1024, BLOCK=1024, NUM_STAGES=st, num_warps=4)
    f(); torch.cuda.synchronize(); assert (o.float() - ref).abs().max().item() < 1e-2
    case(f"B kernel grid {grid} warps 4 stages {st}", f, host=False)

# C
cfgs = [(64, 128, 64, 1, 4, 3), (64, 128, 64, 1, 4, 4), (64, 128, 64, 1, 4, 5), (64, 128, 128, 1, 4, 3),
        (128, 64, 64, 1, 4, 4), (64, 64, 128, 1, 4, 3), (64, 64, 64, 2, 4, 4), (64, 128, 64, 2, 4, 4),
        (128, 128, 64, 2, 4, 4), (128, 128, 64, 2, 8, 3), (128, 128, 64, 4, 8, 3), (128, 128, 128, 2, 8, 3),
        (128, 256, 64, 4, 8, 3), (64, 256, 64, 2, 8, 3), (128, 64, 64, 2, 4, 4), (64, 64, 128, 2, 4, 3),
        (128, 128, 64, 1, 8, 3), (64, 128, 32, 1, 4, 5)]
best = {}
for dt in (torch.float16, torch.bfloat16):
    for n in (512, 1024):
        a = torch.randn(n, n, device="cuda", dtype=dt); b = torch.randn(n, n, device="cuda", dtype=dt)
        ref = (a.float() @ b.float())
        cub = graph_ms(lambda: a @ b) * 1e3
        lean = L_matmul(a, b); torch.cuda.synchronize()
        lg = graph_ms(lambda: L_matmul(a, b)) * 1e3
        res = []
        for bm, bn, bk, sk, w, s in cfgs:
            cfg = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, SPLIT_K=sk, num_warps=w, num_stages=s)
            try:
                c = small.matmul(a, b, cfg); torch.cuda.synchronize()
                if (c.float() - ref).abs().max().item() > 0.5:
                    print("  wrong", cfg); continue
                res.append((graph_ms(lambda cfg=cfg: small.matmul(a, b, cfg)) * 1e3, (bm, bn, bk, sk, w, s)))
            except Exception as exc:  # noqa: BLE001
                print("  fail", cfg, str(exc)[:80])
        res.sort()
        best[f"{str(dt)[6:]} {n}"] = dict(cublas_graph_us=cub, lean_graph_us=lg, top=res[:6])
        print(f"C {str(dt)[6:]} {n}: cuBLAS {cub:.2f} lean {lg:.2f} ({cub / lg:.2f}x); best " +
              "; ".join(f"{c} {g:.2f} ({cub / g:.2f}x)" for g, c in res[:6]) + f" [{time.time() - T0:.0f}s]", flush=True)

# D
x = torch.randn(64, 8192, device="cuda", dtype=torch.float16)
case("D lean online_softmax 64x8192", lambda: L_online(x))
case("D torch.zeros (64, 8)", lambda: torch.zeros((64, 8), dtype=torch.int64, device="cuda"))
case("D torch.softmax 64x8192", lambda: torch.softmax(x, -1))

(out / "tune_probe.json").write_text(json.dumps(dict(rows=rows, matmul=best), indent=1, default=str))
print("\n| case | host us | eager us | graph us |\n|---|---|---|---|")
for r in rows:
    print(f"| {r['name']} | {r['host_us']:.2f} | {r['eager_us']:.2f} | {r['graph_us']:.2f} |")
