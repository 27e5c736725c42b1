"""Where a small call's time goes, and what a leaner launch path saves (a tuning aid for lesson 08).

Asks: how many microseconds of host time does each launch style cost on triton 3.6
(``kernel[grid](...)``, the ``CompiledKernel`` it returns called as ``compiled[grid](*args)``, and
``compiled.run`` with the stream and metadata looked up once), against torch's own ops; where the
course's bf16 matmul spends its host time (cProfile); and which small tiles fill the GPU at 512³ and
1024³ (CUDA-graph times, the GPU's work alone). Run on the GPU machine from the repository root:
    PYTHONPATH=$PWD python3 research/launch/host_probe.py
"""
import cProfile, io, pstats, time
import tkcourse  # noqa: F401  (interpreter patches, checkout on the path)
import torch, triton
from triton.testing import do_bench
from tkcourse.bench.core import graph_ms, host_us
from solutions.softmax import softmax as fused, softmax_kernel
from solutions.matmul import matmul, matmul_kernel
from solutions.kernels.attention_forward import attention_forward
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend

rows = []
def case(name, fn):
    fn(); torch.cuda.synchronize()
    h = host_us(fn, n=500)
    e = do_bench(fn, quantiles=[0.5])
    e = e[0] if isinstance(e, (list, tuple)) else e
    try:
        g = graph_ms(fn) * 1e3
    except Exception as exc:  # noqa: BLE001
        g = float("nan"); print("  graph failed:", type(exc).__name__, str(exc)[:100])
    rows.append((name, h, e * 1e3, g)); print(f"{name:48s} host {h:7.2f} us  eager {e*1e3:7.2f} us  graph {g:7.2f} us", flush=True)

# 1. launch styles, softmax 4096x1024 fp16
M, N = 4096, 1024
x = torch.randn(M, N, dtype=torch.float16, device="cuda"); out = torch.empty_like(x)
P = min(M, 132 * 8)
args = (x, out, x.stride(0), out.stride(0), M, N)
meta = dict(BLOCK=1024, NUM_STAGES=1, num_warps=4)
case("softmax course fused(x)", lambda: fused(x))
case("softmax torch.softmax", lambda: torch.softmax(x, -1))
case("softmax kernel[grid](...)", lambda: softmax_kernel[(P,)](*args, **meta))
compiled = softmax_kernel[(P,)](*args, **meta)
print("compiled:", type(compiled).__name__, "signature", getattr(compiled.src, "signature", None))
full = args + (1024, 1)
try:
    runner = compiled[(P, 1, 1)]
    runner(*full); torch.cuda.synchronize()
    ok = torch.allclose(out.float(), torch.softmax(x.float(), -1), atol=1e-3)
    print("compiled[grid](*args+constexprs) ok:", ok)
    case("softmax compiled[grid](*args)", lambda: runner(*full))
except Exception as exc:  # noqa: BLE001
    print("compiled[grid] failed:", type(exc).__name__, exc)
try:
    from triton.runtime import driver
    from triton import knobs
    dev = driver.active.get_current_device(); stream = driver.active.get_current_stream(dev)
    fnc, pm = compiled.function, compiled.packed_metadata
    lm = compiled.launch_metadata((P, 1, 1), stream, *full)
    run = compiled.run
    def raw():
        run(P, 1, 1, stream, fnc, pm, lm, None, None, *full)
    raw(); torch.cuda.synchronize()
    case("softmax compiled.run, all cached", raw)
    cs = torch.cuda.current_stream
    def raw_stream():
        run(P, 1, 1, cs().cuda_stream, fnc, pm, lm, None, None, *full)
    case("softmax compiled.run, stream per call", raw_stream)
    def empty_plus():
        o = torch.empty_like(x); run(P, 1, 1, cs().cuda_stream, fnc, pm, lm, None, None, x, o, *full[2:])
        return o
    case("softmax compiled.run + torch.empty_like", empty_plus)
except Exception as exc:  # noqa: BLE001
    print("compiled.run failed:", type(exc).__name__, exc)
case("torch.empty_like alone", lambda: torch.empty_like(x))

# 2. matmul: host time and a profile
for dt in (torch.float16, torch.bfloat16):
    for n in (512, 1024, 2048):
        a = torch.randn(n, n, dtype=dt, device="cuda"); b = torch.randn(n, n, dtype=dt, device="cuda")
        case(f"matmul course {str(dt)[6:]} {n}", lambda a=a, b=b: matmul(a, b))
        case(f"matmul cuBLAS {str(dt)[6:]} {n}", lambda a=a, b=b: a @ b)
for dt in (torch.float16, torch.bfloat16):
    a = torch.randn(512, 512, dtype=dt, device="cuda"); b = torch.randn(512, 512, dtype=dt, device="cuda")
    matmul(a, b); torch.cuda.synchronize()
    pr = cProfile.Profile(); pr.enable()
    for _ in range(300):
        matmul(a, b)
    pr.disable(); torch.cuda.synchronize()
    s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(14)
    print(f"--- cProfile matmul {dt} 512, 300 calls ---"); print("\n".join(s.getvalue().splitlines()[:40]))

# 3. small tiles: GPU time of one config (graph), 512^3 and 1024^3
cfgs = [(64, 64, 64, 4, 3), (64, 64, 64, 4, 4), (64, 128, 64, 4, 3), (64, 128, 64, 4, 4), (128, 64, 64, 4, 4),
        (128, 128, 64, 8, 3), (128, 128, 64, 4, 3), (64, 256, 64, 8, 3), (128, 256, 64, 8, 3), (32, 64, 64, 4, 4),
        (64, 32, 64, 4, 4), (64, 64, 128, 4, 3)]
for dt in (torch.float16, torch.bfloat16):
    for n in (512, 1024, 2048):
        a = torch.randn(n, n, dtype=dt, device="cuda"); b = torch.randn(n, n, dtype=dt, device="cuda")
        c = torch.empty_like(a)
        gb = graph_ms(lambda: a @ b) * 1e3
        best = []
        for bm, bn, bk, w, s in cfgs:
            grid = (triton.cdiv(n, bm) * triton.cdiv(n, bn),)
            f = lambda: matmul_kernel[grid](a, b, c, n, n, n, n, 1, n, 1, n, 1, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                                             GROUP_M=8, num_warps=w, num_stages=s)
            try:
                g = graph_ms(f) * 1e3
            except Exception as exc:  # noqa: BLE001
                g = float("nan")
            best.append((g, (bm, bn, bk, w, s)))
        best.sort()
        print(f"tiles {str(dt)[6:]} {n}: cuBLAS graph {gb:.2f} us; best " + "; ".join(f"{c} {g:.2f}" for g, c in best[:5]), flush=True)

# 4. attention forward B1 H16 N512 D64
for causal in (False, True):
    q, k, v = (torch.randn(1, 16, 512, 64, dtype=torch.float16, device="cuda") for _ in range(3))
    case(f"attn course causal={causal}", lambda: attention_forward(q, k, v, causal=causal))
    for be in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION):
        def sd(be=be):
            with sdpa_kernel(be):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        try:
            case(f"attn SDPA {be.name} causal={causal}", sd)
        except Exception as exc:  # noqa: BLE001
            print("sdpa", be, "failed", exc)
    case(f"attn SDPA default causal={causal}", lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))

print("\n| call | host us | eager us | graph us |\n|---|---|---|---|")
for r in rows:
    print(f"| {r[0]} | {r[1]:.2f} | {r[2]:.2f} | {r[3]:.2f} |")
