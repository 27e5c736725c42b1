"""Grader for lesson 03: ``matmul(a, b)``, a tiled matmul of any sizes and strides."""

from __future__ import annotations

import math

import torch

from .. import mode
from .core import attempt, padded, refuses

# (M, N, K, layout): primes, size 1, K not a multiple of any BLOCK_K, transposed inputs
SHAPES = [(67, 45, 29, ""), (128, 128, 64, ""), (1, 1, 1, ""), (1, 37, 300, ""), (131, 1, 17, ""),
          (97, 113, 257, ""), (64, 48, 80, "a transposed"), (50, 70, 33, "b transposed"), (33, 29, 65, "both transposed")]


def _inputs(M, N, K, layout, dtype, gen):
    a = (torch.randn(M, K, generator=gen, dtype=torch.float64) / math.sqrt(K)).to(dtype)
    b = torch.randn(K, N, generator=gen, dtype=torch.float64).to(dtype)
    a = a.t().contiguous().to(mode.DEVICE).t() if "a " in layout or "both" in layout else padded(a.to(mode.DEVICE))
    b = b.t().contiguous().to(mode.DEVICE).t() if "b " in layout or "both" in layout else padded(b.to(mode.DEVICE))
    return a, b


def _tolerance(dtype):
    if dtype == torch.float16:
        return 1e-2, 1e-2
    if dtype == torch.bfloat16:
        return 3e-2, 3e-2
    return (1e-4, 1e-4) if mode.INTERPRET else (2e-2, 2e-2)  # an fp32 tl.dot uses TF32 on a GPU


def _diagnose(a, b, layout):
    def hint(o, e, wrong):
        M, N = o.shape
        nan = torch.isnan(o)
        if nan.any():
            rows, cols = nan.all(dim=1), nan.all(dim=0)
            if rows.any() and not rows.all():
                return (f"rows from {int(rows.nonzero()[0])} on were never written: launch "
                        "cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N) programs and mask rows < M on the edge tile")
            if cols.any() and not cols.all():
                return (f"columns from {int(cols.nonzero()[0])} on were never written: launch "
                        "cdiv(N, BLOCK_N) tiles across N and map the program id to (pid_m, pid_n) correctly")
            return "some tiles were never written: check the grid and how pid maps to (pid_m, pid_n)"
        ad, bd = a.double().cpu(), b.double().cpu()
        K = ad.shape[1]
        for bk in (16, 32, 64, 128):
            if K > bk and K % bk and torch.allclose(o, ad[:, : K - K % bk] @ bd[: K - K % bk], atol=1e-2, rtol=1e-2):
                return (f"the last, partial K block is missing: loop over cdiv(K, BLOCK_K) blocks and mask the loads "
                        f"with k < K (other=0.0), so the {K % bk} leftover columns count")
        if layout:
            return ("a transposed input is wrong while contiguous ones pass: index with both strides, "
                    "a_ptr + rows * stride_am + ks * stride_ak (a transposed tensor has stride_am == 1)")
        for bk in (16, 32, 64, 128):
            last = (K - 1) // bk * bk
            if K > bk and torch.allclose(o, ad[:, last:] @ bd[last:], atol=1e-2, rtol=1e-2):
                return "only the last K step counts: accumulate with acc += tl.dot(a, b), not acc = tl.dot(a, b)"
            if K > bk and torch.allclose(o, ad[:, :bk] @ bd[:bk], atol=1e-2, rtol=1e-2):
                return "only the first K step counts: accumulate, and advance the pointers by BLOCK_K each step"
        return "compare with the reference: are a's and b's strides passed in the right order (am, ak, bk, bn)?"
    return hint


def grade(mod):
    gen = torch.Generator().manual_seed(0)
    for dtype in mode.float_dtypes():
        for M, N, K, layout in SHAPES:
            label = f"M={M} N={N} K={K} {str(dtype)[6:]}" + (f" ({layout})" if layout else "")
            a, b = _inputs(M, N, K, layout, dtype, gen)
            expected = a.double() @ b.double()
            atol, rtol = _tolerance(dtype)
            yield attempt(label, mod.matmul, (a, b), expected, dtype=dtype, atol=atol, rtol=rtol,
                          diagnose=_diagnose(a, b, layout))
    d = mode.DEVICE
    hint = "check shapes and dtypes before launching, and raise ValueError saying what to fix"
    yield refuses("mismatched inner dimensions raise ValueError", mod.matmul, torch.ones(3, 4, device=d),
                  torch.ones(5, 6, device=d), hint=hint)
    yield refuses("mismatched dtypes raise ValueError", mod.matmul, torch.ones(3, 4, device=d),
                  torch.ones(4, 6, device=d, dtype=torch.float16), hint=hint)
