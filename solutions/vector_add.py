"""Lesson 01: vector add, ``out = x + y``, one program per BLOCK elements.

Traffic: read 2n elements, write n elements (12 bytes an element in fp32).

Used by the fast path (``solutions/kernels/vector_add.py``, the same kernel behind a lean launch): ``add_kernel``, and ``add``
for the calls it does not take.
"""

import torch
import triton
import triton.language as tl

from ._checks import power_of_two, validate


@triton.jit
def add_kernel(
    x_ptr,  # pointer to the first element of x
    y_ptr,  # pointer to the first element of y
    out_ptr,  # pointer to the first element of out
    n,  # number of elements in each vector
    BLOCK: tl.constexpr,  # elements per program; a power of two
):
    ### BEGIN SOLUTION
    pid = tl.program_id(axis=0)  # which block of BLOCK elements this program handles
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n  # the last block may run past the end
    x = tl.load(x_ptr + offsets, mask=mask)  # read BLOCK elements of x
    y = tl.load(y_ptr + offsets, mask=mask)  # read BLOCK elements of y
    tl.store(out_ptr + offsets, x + y, mask=mask)  # write BLOCK elements of out
    ### STUB
    # 1. pid = tl.program_id(axis=0)
    # 2. offsets of this program's BLOCK elements: pid * BLOCK + tl.arange(0, BLOCK)
    # 3. a mask for the last, partial block: offsets < n
    # 4. load x and y with that mask, store x + y with it
    ### END SOLUTION


def add(x: torch.Tensor, y: torch.Tensor, BLOCK: int = 1024) -> torch.Tensor:
    """``x + y`` for 1-D tensors of one length, dtype and device; ``BLOCK``: elements per program, a power of two."""
    validate(x, y, names=["x", "y"], ndim=1, same_shape=True)
    BLOCK = power_of_two("BLOCK", BLOCK)  # tl.arange(0, BLOCK) needs a power of two, at most 2**20
    x, y = x.contiguous(), y.contiguous()
    ### BEGIN SOLUTION
    out = torch.empty_like(x)
    n = x.numel()
    grid = (triton.cdiv(n, BLOCK),)  # enough programs to cover n, the last one partial
    add_kernel[grid](x, y, out, n, BLOCK=BLOCK)
    ### STUB
    # n = x.numel(); allocate out like x; launch add_kernel on a grid of triton.cdiv(n, BLOCK) programs
    #! out = None
    ### END SOLUTION
    return out


def reference(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """What ``add`` must return."""
    return x + y
