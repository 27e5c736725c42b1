"""RMSNorm (lesson 09, part 1) behind a lean launch: ``rmsnorm(x, weight, eps=1e-6, residual=None)``
as ``solutions.rmsnorm.rmsnorm``.

The kernel and its plan (a program per row, ``BLOCK`` the row rounded up to a power of two,
``num_warps(BLOCK)``) are the lesson's; the host side is ``lean.Lean``'s (see the package's
docstring). A decode step normalizes 1 to a few dozen rows, where the lesson's launcher spends more
time on the host than the kernel runs on the GPU: here a key seen before costs a lookup, two
allocations and the launch.
"""

from __future__ import annotations

import torch
import triton

from .. import rmsnorm as rn
from .lean import Lean
from .lean import tensor_key as _t

__all__ = ["rmsnorm", "LEANS", "forget"]

_RMSNORM = Lean(rn.rmsnorm_kernel)


def rmsnorm(x, weight, eps=1e-6, residual=None):
    """``y``, or ``(y, x + residual)``, as ``rmsnorm.rmsnorm``."""
    try:
        key = (_t(x), _t(weight), None if residual is None else _t(residual), eps, type(eps))
        e = _RMSNORM.get(key)  # the lookup hashes: TypeError for an unhashable eps
    except (AttributeError, TypeError):  # not tensors, or an eps of another kind: the lesson's checks
        return rn.rmsnorm(x, weight, eps, residual)
    if e is None:
        return _first(key, x, weight, eps, residual)
    x2, weight = rn.as_rows(x), weight.contiguous()
    r2 = x2 if residual is None else rn.as_rows(residual)
    template = e.info  # one element expanded to x's shape: empty_like gives a new contiguous tensor
    y = torch.empty_like(template)
    h = y if residual is None else torch.empty_like(template)
    if e.lean:  # addresses as ints: the launcher then skips a driver query per pointer
        e(x2.data_ptr(), r2.data_ptr(), weight.data_ptr(), y.data_ptr(), h.data_ptr())
    else:
        e(x2, r2, weight, y, h)
    return y if residual is None else (y, h)


def _first(key, x, weight, eps, residual):
    rn.rmsnorm(x, weight, eps, residual)  # the lesson's checks and errors, and its launch this once
    H = x.shape[-1]
    x2, weight = rn.as_rows(x), weight.contiguous()
    r2 = x2 if residual is None else rn.as_rows(residual)
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    h = y if residual is None else torch.empty(x.shape, dtype=x.dtype, device=x.device)
    BLOCK = triton.next_power_of_2(H)
    _RMSNORM.first(key, (x2, r2, weight, y, h), (x2.stride(0), r2.stride(0), H, H, float(eps)), (x2.shape[0],),
                   dict(HAS_RESIDUAL=residual is not None, BLOCK=BLOCK, num_warps=rn.num_warps(BLOCK)),
                   info=torch.empty((), dtype=x.dtype, device=x.device).expand(x.shape))
    return y if residual is None else (y, h)


#: This module's lean launcher, for tests and lesson 08 (entries, compiles).
LEANS = dict(rmsnorm=_RMSNORM)


def forget():
    """Drop every kept entry: the next call of each key is a first call again."""
    _RMSNORM.entries.clear()
