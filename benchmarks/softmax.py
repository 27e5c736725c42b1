"""Benchmark cases of lessons 02 and 05: fused and online softmax against ``torch.softmax``.

Traffic: read the input once, write the output once (2 x 2 bytes an element in fp16). Provider
``copy`` is a device copy of the same bytes: the ceiling at that size, in the same run (replayed from a
CUDA graph, by a copy kernel: ``tkcourse.bench.copy_case``).
"""

from __future__ import annotations

import torch

from tkcourse.bench import Case, bytes_moved, copy_case

FUSED = [(4096, 1024), (4096, 4096), (4096, 16384)]
ONLINE = [(4096, 32768), (1024, 131072), (256, 262144)]


def shape_cases(kernel: str, softmax, x: torch.Tensor, readable=None):
    """One shape's cases: ``softmax(x)`` as provider triton, ``readable(x)`` (if given) as
    triton-readable, then ``torch.softmax`` and a same-size copy."""
    moved, shape = bytes_moved(x, x), "x".join(map(str, x.shape))
    dtype = str(x.dtype).replace("torch.", "")
    y = torch.empty_like(x)
    extra = [] if readable is None else [Case(kernel, "triton-readable", shape, dtype, lambda: readable(x), bytes=moved)]
    return [Case(kernel, "triton", shape, dtype, lambda: softmax(x), bytes=moved), *extra,
            Case(kernel, "torch", shape, dtype, lambda: torch.softmax(x, dim=-1), bytes=moved),
            copy_case(kernel, shape, dtype, x, y)]


def cases(fused=None, online=None):
    """Both kernels at their shapes, fp16; ``fused``/``online`` default to the references' fast paths
    behind a lean launch (``solutions.kernels.softmax``, ``solutions.kernels.online_softmax``): lesson
    02's kernel, and for lesson 05 its last step, ``solutions.kernels.online_softmax_one_read`` (the
    one-read and lanes kernels that the recorded ``online_softmax`` rows measured). Their readable
    launchers are the triton-readable rows."""
    readables = {}
    if fused is None:
        from solutions import softmax as lesson02
        from solutions.kernels.softmax import softmax as fused
        readables["softmax"] = lesson02.softmax
    if online is None:
        from solutions.kernels import online_softmax_one_read as lesson05
        from solutions.kernels.online_softmax import softmax as online
        readables["online_softmax"] = lesson05.softmax

    for kernel, shapes, fn in (("softmax", FUSED, fused), ("online_softmax", ONLINE, online)):
        for M, N in shapes:
            yield from shape_cases(kernel, fn, torch.randn(M, N, dtype=torch.float16, device="cuda"),
                                   readables.get(kernel))
