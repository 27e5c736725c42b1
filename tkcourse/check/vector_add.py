"""Grader for lesson 01: ``add(x, y)``."""

from __future__ import annotations

import torch

from .. import mode
from .core import attempt, block_hint, padded, refuses, shift_hint

SIZES = [98_433, 1, 1023, 1025, 4097, 77_777]  # tails of every kind; the large one first tells most


def _diagnose(o, e, wrong):
    return block_hint(o, e, wrong) or shift_hint(o, e, wrong)


def grade(mod):
    gen = torch.Generator().manual_seed(0)
    for dtype in mode.float_dtypes():
        for n in SIZES:
            label = f"n={n} {str(dtype).replace('torch.', '')}"
            x = padded(torch.randn(n, generator=gen, dtype=torch.float64).to(dtype).to(mode.DEVICE))
            y = padded(torch.randn(n, generator=gen, dtype=torch.float64).to(dtype).to(mode.DEVICE))
            expected = (x.double() + y.double()).to(dtype)  # torch reference, rounded like the kernel
            yield attempt(label, mod.add, (x, y), expected, dtype=dtype, diagnose=_diagnose)
    d = mode.DEVICE
    yield refuses("mismatched lengths raise ValueError", mod.add, torch.ones(3, device=d), torch.ones(4, device=d),
                  hint="check the shapes before launching (tkcourse.mode.validate does it)")
