"""Benchmark cases of lesson 03: the tiled matmul against ``torch.matmul`` (cuBLAS).

FLOPs: 2*M*N*K. Traffic at least: read A and B, write C. Provider ``triton`` is the lean launch
path (``solutions.kernels.matmul.matmul``: split-K and TMA kernels for small products);
``triton-readable`` the lesson's launcher (``solutions.matmul.matmul``), autotuned the same way.
512 and 1024: sizes where launch cost and filling 132 SMs decide the result.
"""

from __future__ import annotations

import torch

from tkcourse.bench import Case, matmul_flops

SHAPES = [512, 1024, 2048, 4096, 8192]


def cases():
    from solutions.kernels.matmul import matmul
    from solutions.matmul import matmul as readable

    for dtype in (torch.float16, torch.bfloat16):
        for n in SHAPES:
            a = torch.randn(n, n, dtype=dtype, device="cuda")
            b = torch.randn(n, n, dtype=dtype, device="cuda")
            shape, dt, flops = f"{n}x{n}x{n}", str(dtype).replace("torch.", ""), matmul_flops(n, n, n)
            yield Case("matmul", "triton", shape, dt, lambda a=a, b=b: matmul(a, b), flops=flops)
            yield Case("matmul", "triton-readable", shape, dt, lambda a=a, b=b: readable(a, b), flops=flops)
            yield Case("matmul", "cublas", shape, dt, lambda a=a, b=b: torch.matmul(a, b), flops=flops)
