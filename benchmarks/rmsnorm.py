"""Benchmark cases of lesson 09, part 1: RMSNorm fused with the residual add, against the torch ops.

Shapes: 16384 rows of H = 4096 and 8192, fp16 and bf16, with the residual. 16384 rows is a prefill
chunk of 16k tokens (vLLM's and SGLang's batches reach that), and it makes each (rows, H) tensor
128 MiB or 256 MiB: every one far past the H200's 50 MB L2, so the rates are HBM's, and a launch's
few microseconds are under 2% of the time.

Bytes, the same for every provider (the minimum): read x and residual, write y and the sum, each
(rows, H) in x's dtype, plus the weight once: ``4 * rows * H * 2 + H * 2``. Providers:

* ``triton``: ``rmsnorm(x, w, eps, residual=r)``, one kernel (the lesson's, behind the lean launch of
  ``solutions.kernels.rmsnorm``);
* ``torch``: the unfused eager ops (``solutions.rmsnorm.eager_rmsnorm``: the add, then Hugging Face's
  ``LlamaRMSNorm``), about 5x those bytes in fp16, over several kernels;
* ``torch-rms_norm``: the add, then ``torch.nn.functional.rms_norm`` (where this torch has it);
* ``copy``: ``dst.copy_(src)`` of a buffer of half those bytes, so it reads and writes as many bytes
  as the kernel does, in the same run: the ceiling at this size (replayed from a CUDA graph, by a copy
  kernel: ``tkcourse.bench.copy_case``).
"""

from __future__ import annotations

import torch

from tkcourse.bench import Case, copy_case

ROWS = 16384
HS = [4096, 8192]
DTYPES = [torch.float16, torch.bfloat16]
EPS = 1e-6


def rmsnorm_bytes(rows: int, H: int, element_size: int) -> int:
    """Read x and residual, write y and the sum, read the weight: the fused kernel's minimum traffic."""
    return (4 * rows * H + H) * element_size


def shape_cases(rmsnorm, eager, rows: int, H: int, dtype):
    """One shape's cases: ``rmsnorm`` as provider triton, the eager ops, ``F.rms_norm``, a copy."""
    x = torch.randn(rows, H, dtype=dtype, device="cuda")
    r = torch.randn(rows, H, dtype=dtype, device="cuda")
    w = 1 + 0.1 * torch.randn(H, dtype=dtype, device="cuda")
    moved, shape, name = rmsnorm_bytes(rows, H, x.element_size()), f"{rows}x{H}", str(dtype).replace("torch.", "")
    src = torch.empty(2 * rows * H + H, dtype=dtype, device="cuda").normal_()  # half the bytes: read, and written
    dst = torch.empty_like(src)
    out = [Case("rmsnorm", "triton", shape, name, lambda: rmsnorm(x, w, EPS, residual=r), bytes=moved),
           Case("rmsnorm", "torch", shape, name, lambda: eager(x, w, EPS, residual=r), bytes=moved)]
    rms_norm = getattr(torch.nn.functional, "rms_norm", None)
    if rms_norm is not None:
        out.append(Case("rmsnorm", "torch-rms_norm", shape, name,
                        lambda: (rms_norm(x + r, (H,), w, EPS), None), bytes=moved))
    out.append(copy_case("rmsnorm", shape, name, src, dst))
    return out


def cases(rmsnorm=None, eager=None):
    """Every shape and dtype; ``rmsnorm`` defaults to the fast path: the lesson's kernel behind a lean launch."""
    if rmsnorm is None:
        from solutions.kernels.rmsnorm import rmsnorm
    if eager is None:
        from solutions.rmsnorm import eager_rmsnorm as eager
    for dtype in DTYPES:
        for H in HS:
            yield from shape_cases(rmsnorm, eager, ROWS, H, dtype)
