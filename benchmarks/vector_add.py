"""Benchmark cases of lesson 01: vector add against ``torch.add``, and a copy.

Provider ``triton`` is the lean launch path (``solutions.kernels.vector_add.add``, the lesson's
kernel), ``triton-readable`` the lesson's own launcher (``solutions.vector_add.add``): same kernel, the
difference is the host's launch cost. 4096 elements: a size where only that cost shows.

Traffic: read x and y, write out: 3 x 4 bytes an element in fp32.
"""

from __future__ import annotations

import torch

from tkcourse.bench import Case, bytes_moved

SIZES = [1 << 12, 1 << 20, 1 << 24, 1 << 26, 1 << 28]


def cases():
    from solutions.kernels.vector_add import add
    from solutions.vector_add import add as readable

    for n in SIZES:
        x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        moved = bytes_moved(x, y, x)  # read x and y, write an output of x's size
        yield Case("vector_add", "triton", str(n), "float32", lambda x=x, y=y: add(x, y), bytes=moved)
        yield Case("vector_add", "triton-readable", str(n), "float32", lambda x=x, y=y: readable(x, y), bytes=moved)
        yield Case("vector_add", "torch", str(n), "float32", lambda x=x, y=y: torch.add(x, y), bytes=moved)
    # The ceiling every memory-bound kernel is measured against: a device-to-device copy.
    src = torch.empty(1 << 29, dtype=torch.float32, device="cuda")  # 2 GiB
    dst = torch.empty_like(src)
    yield Case("copy", "torch", str(src.numel()), "float32", lambda: dst.copy_(src), bytes=bytes_moved(src, dst))
