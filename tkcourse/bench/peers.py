"""The copy peer: a device copy of as many bytes as a memory-bound kernel moves, the ceiling at that size.

Eagerly the copy is ``dst.copy_(src)``: for contiguous tensors of one dtype torch calls
``cudaMemcpyAsync``, which the driver runs as a kernel on the SMs. Captured in a CUDA graph, the same call
becomes a memcpy node, which the GPU runs another way: on the H200 a 1 GB copy replayed from a graph
took 397-401 us where the eager copy took 261 (``research/README.md``, the decode rows). So the graph time
of a copy case (``Case.graph_fn``) is this module's Triton copy kernel instead, which a graph replays as
the kernel it is: ``graph_ms`` of a copy row is then a copy on the SMs, as its eager ``ms`` is.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .core import Case

__all__ = ["copy_case", "kernel_copy", "copy_kernel"]

#: Bytes a program of ``copy_kernel`` copies: 64 KB, 16-byte loads and stores, 8 warps.
COPY_BLOCK_BYTES = 65536


@triton.jit
def copy_kernel(src, dst, n, BLOCK: tl.constexpr):
    """``dst[i] = src[i]`` for the ``BLOCK`` elements of this program (masked at ``n``)."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(dst + offs, tl.load(src + offs, mask=m), mask=m)


def kernel_copy(src, dst) -> None:
    """``dst.copy_(src)`` by ``copy_kernel``: both contiguous, of one dtype and size (viewed as 32-bit words
    where the size allows, else bytes)."""
    if src.shape != dst.shape or src.dtype != dst.dtype or not (src.is_contiguous() and dst.is_contiguous()):
        raise ValueError(f"kernel_copy needs two contiguous tensors of one shape and dtype, got {tuple(src.shape)} "
                         f"{src.dtype} and {tuple(dst.shape)} {dst.dtype}")
    import torch

    nbytes = src.numel() * src.element_size()
    word = torch.int32 if nbytes % 4 == 0 else torch.uint8
    s, d = src.view(-1).view(word), dst.view(-1).view(word)
    block = COPY_BLOCK_BYTES // s.element_size()
    copy_kernel[(triton.cdiv(s.numel(), block),)](s, d, s.numel(), BLOCK=block, num_warps=8)


def copy_case(kernel: str, shape: str, dtype: str, src, dst, bytes: int | None = None) -> Case:
    """The ``copy`` provider of a row: ``dst.copy_(src)`` eagerly, ``kernel_copy`` in a CUDA graph;
    ``bytes`` defaults to what it reads and writes (twice ``src``'s bytes)."""
    moved = 2 * src.numel() * src.element_size() if bytes is None else bytes
    return Case(kernel, "copy", shape, dtype, lambda: dst.copy_(src), bytes=moved,
                graph_fn=lambda: kernel_copy(src, dst))
