"""Where the time of a small kernel goes on the GPU machine (a tuning aid, not part of the course).

For each reference kernel and its peer: host microseconds per call, do_bench time, and the time of a
CUDA-graph replay (GPU work alone, L2 flushed before each replay), plus a cProfile of the softmax and
matmul launchers. Run on the GPU machine from the repository root:
    PYTHONPATH=$PWD python3 research/tuning/launch_probe.py
Its output of 2026-11-29 is research/tuning/logs/launch_probe.txt (made when the graph and host
timers lived here; they moved, unchanged, to tkcourse.bench.core).
"""
import os, sys, time, cProfile, pstats, io
import tkcourse
import torch, triton
from tkcourse.bench.core import graph_ms, host_us
from solutions.softmax import softmax as fused, softmax_kernel
from solutions.kernels.online_softmax_one_read import softmax as online  # the reference's fast path
from solutions.matmul import matmul
from solutions.kernels.attention_forward import attention_forward

rows = []
def case(name, fn, work, unit):
    fn(); torch.cuda.synchronize()
    c = host_us(fn, n=300)
    e = triton.testing.do_bench(fn, quantiles=[0.5])
    e = e[0] if isinstance(e, (list, tuple)) else e
    g = graph_ms(fn)
    rate = lambda ms: work / ms * (1e-9 if unit == "TF" else 1e-6)
    rows.append((name, c, e*1e3, g*1e3, rate(e), rate(g), unit)); print(rows[-1], flush=True)

for M, N in [(4096, 1024), (4096, 4096), (4096, 16384)]:
    x = torch.randn(M, N, dtype=torch.float16, device="cuda"); b = 4*M*N
    case(f"fused {M}x{N}", lambda x=x: fused(x), b, "GB")
    case(f"torch {M}x{N}", lambda x=x: torch.softmax(x, -1), b, "GB")
    out = torch.empty_like(x)
    case(f"bare {M}x{N}", lambda x=x, out=out: softmax_kernel[(min(M, 132*8),)](x, out, x.stride(0), out.stride(0), M, N, BLOCK=triton.next_power_of_2(N), NUM_STAGES=1, num_warps=4), b, "GB")
for M, N in [(4096, 32768), (1024, 131072), (256, 262144)]:
    x = torch.randn(M, N, dtype=torch.float16, device="cuda"); b = 4*M*N
    case(f"online {M}x{N}", lambda x=x: online(x), b, "GB")
    case(f"torch {M}x{N}", lambda x=x: torch.softmax(x, -1), b, "GB")
x = torch.randn(1 << 29, dtype=torch.float32, device="cuda"); y = torch.empty_like(x)
case("copy 2GiB", lambda: y.copy_(x), 8 * (1 << 29), "GB"); del x, y
for n in (1024, 2048, 4096):
    a = torch.randn(n, n, dtype=torch.float16, device="cuda"); bb = torch.randn(n, n, dtype=torch.float16, device="cuda")
    case(f"matmul {n}", lambda a=a, bb=bb: matmul(a, bb), 2*n**3, "TF")
    case(f"cublas {n}", lambda a=a, bb=bb: a @ bb, 2*n**3, "TF")
for D, N, causal in [(128, 1024, False), (64, 1024, False), (64, 4096, True)]:
    H = 2048 // D; B = 16384 // N
    q, k, v = (torch.randn(B, H, N, D, dtype=torch.float16, device="cuda") for _ in range(3))
    f = 4*B*H*N*N*D // (2 if causal else 1)
    case(f"attn D{D} N{N} c{int(causal)}", lambda: attention_forward(q, k, v, causal=causal), f, "TF")
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
        case(f"sdpa-flash D{D} N{N} c{int(causal)}", lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal), f, "TF")
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.CUDNN_ATTENTION):
        case(f"sdpa-cudnn D{D} N{N} c{int(causal)}", lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal), f, "TF")

x = torch.randn(4096, 1024, dtype=torch.float16, device="cuda")
pr = cProfile.Profile(); pr.enable()
for _ in range(2000): fused(x)
pr.disable(); s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(18); print(s.getvalue()[:5000])
a = torch.randn(1024, 1024, dtype=torch.float16, device="cuda")
pr = cProfile.Profile(); pr.enable()
for _ in range(1000): matmul(a, a)
pr.disable(); s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(14); print(s.getvalue()[:4000])
print(f"{'case':<28}{'cpu_us':>8}{'eager_us':>9}{'graph_us':>9}{'eager':>9}{'graph':>9}")
for r in rows: print(f"{r[0]:<28}{r[1]:>8.1f}{r[2]:>9.1f}{r[3]:>9.1f}{r[4]:>9.1f}{r[5]:>9.1f} {r[6]}")
