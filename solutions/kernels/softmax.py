"""Fused softmax (lesson 02) behind a lean launch: ``softmax(x)`` as ``solutions.softmax.softmax``.

The kernel is the lesson's; the host side is ``lean.Lean``'s (see the package's docstring). Short
rows get a grid of their own (``SHORT_ROW_BLOCK``).
"""

from __future__ import annotations

import torch
import triton

from tkcourse.mode import INTERPRET

from .. import softmax as sm
from .lean import Lean
from .lean import tensor_key as _t

__all__ = ["softmax", "LEANS", "forget"]

_SOFTMAX = Lean(sm.softmax_kernel)
#: Rows of at most SHORT_ROW_BLOCK columns get a program each with SHORT_ROW_WARPS warps instead of
#: the lesson's persistent grid of 4 warps: with the launch cost gone, a short row's kernel is bound
#: by how many loads are in flight, and a program per row puts every row's load in flight at once
#: (on the H200, 4096 x 1024 fp16: 2 warps a row beat the persistent grid; research/launch/tune_probe.py).
SHORT_ROW_BLOCK = 1024
SHORT_ROW_WARPS = 2


def softmax(x):
    """Softmax over the last dim of a 2-D ``x``, as ``softmax.softmax``."""
    try:
        key = _t(x)
    except AttributeError:
        return sm.softmax(x)
    e = _SOFTMAX.get(key)
    if e is not None:
        if x.stride(1) != 1:
            x = x.contiguous()
        out = torch.empty_like(x)  # (the cheapest allocation torch has: see the module's docstring)
        if e.lean:
            e(x.data_ptr(), out.data_ptr())
        else:
            e(x, out)
        return out
    sm.softmax(x)  # the lesson's checks and errors, and its launch this once
    if x.stride(1) != 1:
        x = x.contiguous()
    out = torch.empty_like(x)  # as every later call makes it: the same row stride
    n_rows, n_cols = x.shape
    BLOCK = triton.next_power_of_2(n_cols)
    warps, stages = sm.warps_for(BLOCK), sm.stages_for(BLOCK, x.element_size())
    if BLOCK <= SHORT_ROW_BLOCK and not INTERPRET:
        grid, warps = (n_rows,), SHORT_ROW_WARPS
    else:
        grid = (sm.num_programs(x, out, BLOCK, warps, stages),)
    _SOFTMAX.first(key, (x, out), (x.stride(0), out.stride(0), n_rows, n_cols), grid,
                   dict(BLOCK=BLOCK, NUM_STAGES=stages, num_warps=warps))  # the same result, written again
    return out


#: This module's lean launcher, for tests and lesson 08 (entries, compiles).
LEANS = dict(softmax=_SOFTMAX)


def forget():
    """Drop every kept entry: the next call of each key is a first call again."""
    _SOFTMAX.entries.clear()
