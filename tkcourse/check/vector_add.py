"""Grader for lesson 01: ``add(x, y)``."""

from __future__ import annotations

import torch

from .. import mode
from .core import Case, block_hint, call, compare, error_case, padded, shift_hint

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
            try:
                out, allocs = call(mod.add, x, y)
            except Exception as exc:
                yield error_case(label, exc)
                return
            case = compare(label, out, expected, dtype=dtype, allocs=allocs, diagnose=_diagnose)
            yield case
            if case.status == "todo":
                return
    # Wrong input must be refused, not computed on.
    label = "mismatched lengths raise ValueError"
    try:
        mod.add(torch.ones(3, device=mode.DEVICE), torch.ones(4, device=mode.DEVICE))
    except ValueError:
        yield Case(label, "pass")
    except Exception as exc:
        yield error_case(label, exc)
    else:
        yield Case(label, "fail", "add(ones(3), ones(4)) returned a result",
                   "check the shapes before launching (tkcourse.mode.validate does it)")
