"""The Hopper matmul in Gluon, checked and timed: the first kernels of the Hopper lesson's ladder, now in the
kernel library (``solutions/kernels/gluon_matmul.py``: the kernels, their configs and the launchers
``matmul`` and ``matmul_ws``). TMA loads into a ring of shared-memory stages, each guarded by an mbarrier,
and asynchronous warpgroup MMAs (``wgmma``) that overlap the next stages' loads; the second rung
persistent and warp-specialized (a producer warp issues the loads, the consumer warpgroups the wgmma).

    python research/hopper/gluon_matmul.py check   # on an H100/H200: C = A @ B against torch, then times it
                                                   # against cuBLAS at 4096^3 and 8192^3, fp16 and bf16
    python research/hopper/compile_check.py        # on any machine: compiles it for sm_90a (no GPU)
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout, for solutions/
# isort: off
import tkcourse  # noqa: E402, F401  (first: the mode, before triton is imported)
import triton  # noqa: E402
# isort: on

from solutions.kernels.gluon_matmul import matmul, matmul_ws  # noqa: E402


def check():
    import torch

    for dtype in (torch.float16, torch.bfloat16):
        for M, N, K in ((256, 512, 192), (1000, 1000, 1000), (4096, 4096, 4096), (8192, 8192, 8192)):
            a = torch.randn(M, K, device="cuda", dtype=dtype)
            b = torch.randn(K, N, device="cuda", dtype=dtype)
            ref = (a.float() @ b.float())
            tc = triton.testing.do_bench(lambda: a @ b) if M >= 4096 else None
            for name, fn in (("pipelined", matmul), ("persistent, warp-specialized", matmul_ws)):
                try:
                    c = fn(a, b)
                    err = ((c.float() - ref).abs().max() / ref.abs().max()).item()
                    line = f"{name:29s} {str(dtype)[6:]:9s} {M}x{N}x{K}: rel err {err:.1e} {'OK' if err < 1e-2 else 'WRONG'}"
                    if tc is not None:
                        t = triton.testing.do_bench(lambda: fn(a, b))
                        line += f"; {2 * M * N * K / t / 1e9:.0f} TFLOP/s, cuBLAS {2 * M * N * K / tc / 1e9:.0f}: {tc / t:.2f}x"
                except Exception as e:  # a rung that fails to build or run: say so, try the next
                    line = f"{name:29s} {str(dtype)[6:]:9s} {M}x{N}x{K}: {type(e).__name__}: {str(e)[:200]}"
                print(line, flush=True)


if __name__ == "__main__" and sys.argv[1:] == ["check"]:
    check()
