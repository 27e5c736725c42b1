"""Benchmark cases of lessons 02 and 05: fused and online softmax against ``torch.softmax``.

Traffic: read the input once, write the output once (2 x 2 bytes an element in fp16). Provider
``copy`` is a device copy of the same bytes: the ceiling at that size, in the same run.
"""

from __future__ import annotations

import torch

from .core import Case, bytes_moved

FUSED = [(4096, 1024), (4096, 4096), (4096, 16384)]
ONLINE = [(4096, 32768), (1024, 131072), (256, 262144)]


def cases():
    from solutions.online_softmax import softmax as online
    from solutions.softmax import softmax as fused

    for kernel, shapes, fn in (("softmax", FUSED, fused), ("online_softmax", ONLINE, online)):
        for M, N in shapes:
            x = torch.randn(M, N, dtype=torch.float16, device="cuda")
            moved = bytes_moved(x, x)
            shape = f"{M}x{N}"
            yield Case(kernel, "triton", shape, "float16", lambda x=x, fn=fn: fn(x), bytes=moved)
            yield Case(kernel, "torch", shape, "float16", lambda x=x: torch.softmax(x, dim=-1), bytes=moved)
            # the ceiling at this size: a device copy of the same bytes (small copies run below the big one)
            y = torch.empty_like(x)
            yield Case(kernel, "copy", shape, "float16", lambda x=x, y=y: y.copy_(x), bytes=moved)
