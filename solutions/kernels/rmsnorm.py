"""RMSNorm (lesson 09, part 1) behind a lean launch: ``rmsnorm(x, weight, eps=1e-6, residual=None)``
as ``solutions.rmsnorm.rmsnorm``.

The kernel and its plan (a program per row, ``BLOCK`` the row rounded up to a power of two,
``num_warps(BLOCK)``) are the lesson's; the host side is ``lean.Lean``'s (see the package's
docstring). A decode step normalizes 1 to a few dozen rows, where the lesson's launcher spends more
time on the host than the kernel runs on the GPU: here a key seen before costs a lookup, two
allocations and the launch. What the first call worked out from shapes and strides (whether an input
needs a copy to be read as rows of one stride; the row strides themselves) is the key's, so a later
call takes the inputs' addresses as they are: a view as rows starts where its tensor does.

``rmsnorm_pdl_kernel`` is the lesson's kernel with programmatic dependent launch around it
(``lean.pdl_meta``): it waits for the kernel before it on the stream, then lets the next one start.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from .. import rmsnorm as rn
from .lean import Lean, hooks_on, pdl_meta

__all__ = ["rmsnorm", "rmsnorm_pdl_kernel", "RMSNORM_PDL", "LEANS", "forget"]


@triton.jit
def rmsnorm_pdl_kernel(x_ptr, res_ptr, w_ptr, y_ptr, sum_ptr, x_row_stride, res_row_stride, out_row_stride, n_cols,
                       eps, HAS_RESIDUAL: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr = False):
    """The lesson's ``rmsnorm_kernel`` (same arguments); with ``PDL``, launched with programmatic
    dependent launch: x and the residual may be the previous kernel's output."""
    if PDL:
        gdc_wait()
        gdc_launch_dependents()  # short programs: the next kernel may start once all of these have
    rn.rmsnorm_kernel(x_ptr, res_ptr, w_ptr, y_ptr, sum_ptr, x_row_stride, res_row_stride, out_row_stride, n_cols,
                      eps, HAS_RESIDUAL, BLOCK)


#: Launch with programmatic dependent launch where the GPU has it (``lean.pdl_meta``). Read when a key's
#: entry is made (``forget()`` after changing it).
RMSNORM_PDL = True
_RMSNORM = Lean(rmsnorm_pdl_kernel)
_ENTRIES = _RMSNORM.entries  # the table itself: Lean only ever clears it


def rmsnorm(x, weight, eps=1e-6, residual=None):
    """``y``, or ``(y, x + residual)``, as ``rmsnorm.rmsnorm``."""
    try:  # what the compile depends on (``lean.tensor_key`` of each tensor, written out in one tuple)
        key = (x.dtype, x.shape, x.stride(), x.data_ptr() & 15, x.get_device(),
               weight.dtype, weight.shape, weight.stride(), weight.data_ptr() & 15, weight.get_device(),
               None if residual is None else (residual.dtype, residual.shape, residual.stride(),
                                              residual.data_ptr() & 15, residual.get_device()),
               eps, type(eps))
        e = _ENTRIES.get(key)  # the lookup hashes: TypeError for an unhashable eps
    except (AttributeError, TypeError):  # not tensors, or an eps of another kind: the lesson's checks
        return rn.rmsnorm(x, weight, eps, residual)
    if e is None or hooks_on():  # a launch hook (a profiler) sees launches through kernel[grid]
        return _first(key, x, weight, eps, residual)
    template, copies = e.info  # template: one element expanded to x's shape; copies: which inputs the key
    if copies:  # made the first call copy (rows no single stride describes, strided columns or weight)
        x, weight, residual = _copied(x, weight, residual)
    y = torch.empty_like(template)  # a new contiguous tensor
    h = y if residual is None else torch.empty_like(template)
    if e.lean:  # addresses as ints (a view as rows starts where x does): no driver query per pointer
        xp = x.data_ptr()
        e(xp, xp if residual is None else residual.data_ptr(), weight.data_ptr(), y.data_ptr(), h.data_ptr())
    else:
        x2 = rn.as_rows(x)
        e(x2, x2 if residual is None else rn.as_rows(residual), weight, y, h)
    return y if residual is None else (y, h)


def _copied(x, weight, residual):
    """The inputs as the kernel reads them with one row stride: each copied where it has none."""
    return rn.as_rows(x), weight.contiguous(), None if residual is None else rn.as_rows(residual)


def _first(key, x, weight, eps, residual):
    rn.rmsnorm(x, weight, eps, residual)  # the lesson's checks and errors, and its launch this once
    H = x.shape[-1]
    x2, w = rn.as_rows(x), weight.contiguous()
    r2 = x2 if residual is None else rn.as_rows(residual)
    copies = (x2.data_ptr() != x.data_ptr() or w.data_ptr() != weight.data_ptr()
              or (residual is not None and r2.data_ptr() != residual.data_ptr()))
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    h = y if residual is None else torch.empty(x.shape, dtype=x.dtype, device=x.device)
    BLOCK = triton.next_power_of_2(H)
    template = torch.empty((), dtype=x.dtype, device=x.device).expand(x.shape)
    _RMSNORM.first(key, (x2, r2, w, y, h), (x2.stride(0), r2.stride(0), H, H, float(eps)), (x2.shape[0],),
                   dict(HAS_RESIDUAL=residual is not None, BLOCK=BLOCK, num_warps=rn.num_warps(BLOCK),
                        **pdl_meta(x.device, RMSNORM_PDL)),
                   info=(template, copies))
    return y if residual is None else (y, h)


#: This module's lean launcher, for tests and lesson 08 (entries, compiles).
LEANS = dict(rmsnorm=_RMSNORM)


def forget():
    """Drop every kept entry: the next call of each key is a first call again."""
    _RMSNORM.entries.clear()
