"""Which large matmul should the kernel library run: its own (``solutions.kernels.matmul.matmul``, lesson
03's kernel autotuned, behind a lean launch), lesson 12's persistent TMA kernel (``solutions.hopper.matmul``,
plain and warp-specialized) or the Gluon persistent warp-specialized one, against cuBLAS, at 4096^3 and
8192^3 in fp16 and bf16. Three rounds, the providers interleaved in each, so that a clock that drifts
during the run moves every provider alike; ``do_bench`` (a call as a user makes it) and a CUDA-graph
replay (the GPU's time alone).

    PYTHONPATH=$PWD python3 research/hopper/matmul_default_probe.py
"""
import statistics

import torch
import triton

from solutions import hopper
from solutions.kernels import gluon_matmul
from solutions.kernels import matmul as library
from tkcourse.bench import graph_ms

PROVIDERS = {"library": library.matmul, "persistent": hopper.matmul,
             "persistent, ws": lambda a, b: hopper.matmul(a, b, config=hopper.WS_CONFIG),
             "gluon ws": gluon_matmul.matmul_ws, "cublas": torch.matmul}

print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, flush=True)
for n in (4096, 8192):
    for dtype in (torch.float16, torch.bfloat16):
        a, b = (torch.randn(n, n, device="cuda", dtype=dtype) for _ in range(2))
        ref = (a.float() @ b.float())
        eager, graph = {p: [] for p in PROVIDERS}, {p: [] for p in PROVIDERS}
        for name, f in PROVIDERS.items():
            err = ((f(a, b).float() - ref).abs().max() / ref.abs().max()).item()
            if err > 1e-2:
                print(f"{n} {dtype} {name}: WRONG, error {err:.1e}", flush=True)
        for _ in range(3):
            for name, f in PROVIDERS.items():
                eager[name].append(triton.testing.do_bench(lambda: f(a, b)))
                graph[name].append(graph_ms(lambda: f(a, b)))
        flops = 2 * n ** 3
        ce, cg = statistics.median(eager["cublas"]), statistics.median(graph["cublas"])
        line = "  ".join(f"{name} {ce / statistics.median(eager[name]):.3f} ({cg / statistics.median(graph[name]):.3f})"
                         for name in PROVIDERS if name != "cublas")
        print(f"{n}^3 {str(dtype)[6:]:9s} cuBLAS {flops / ce / 1e9:.0f} TFLOP/s; x cuBLAS eager (graph): {line}",
              flush=True)
