"""Grader for lesson 01: ``add(x, y)``.

Fixed sizes with tails of every kind, then random sizes over five orders of magnitude (a grid or BLOCK
hard-coded to fit the fixed sizes fails there), then strided inputs (``add`` must compute them: the
launcher makes them contiguous), then a BLOCK other than the default (a grid with 1024 typed in fails).
Every launch runs under the tracer, so a load or store past the end is reported however the output was
allocated; an output that is an input, or an input the call changed, fails too (``core.attempt``).
"""

from __future__ import annotations

import torch

from .. import mode
from .core import STILL_NONE, attempt, block_hint, padded, random_sizes, refuses, seeded, shift_hint, strided

SIZES = [98_433, 1, 1023, 1025, 4097, 77_777]  # tails of every kind; the large one first tells most
N_RANDOM = (3, 2, 400_000)  # how many random sizes, between what bounds
MASK = "offsets < n"  # the edge mask that out-of-bounds hints name
OTHER_BLOCK = 256  # one case passes add a BLOCK other than its default


def _diagnose(o, e, wrong):
    return block_hint(o, e, wrong) or shift_hint(o, e, wrong)


def _strided_diagnose(o, e, wrong):
    return _diagnose(o, e, wrong) or (
        "a strided input (a view such as x[::2]) is wrong while contiguous ones pass: the kernel reads "
        "x_ptr + offsets as if x were contiguous (values near -31328 are the grader's padding between x's "
        "elements). The launcher's given line x, y = x.contiguous(), y.contiguous() makes them contiguous: keep "
        "it above your code, and launch with those x and y")


def _attempt(label, *args, **kwargs):
    """``core.attempt``; a launcher that returns None (its ``out = None`` left as the stub gave it, under the
    given ``return out``) is told that the placeholder was not replaced, not to add a return."""
    case = attempt(label, *args, **kwargs)
    if case.status == "todo" and case.detail.endswith("returned None"):
        case.hint = (f"{STILL_NONE} (add returned None: out is still the stub's out = None). Allocate it "
                     "(out = torch.empty_like(x)), launch add_kernel on a grid of triton.cdiv(n, BLOCK) programs "
                     "to fill it, and return it")
    return case


def _own_block_case(mod, gen):
    """``add(x, y, BLOCK=OTHER_BLOCK)``: every other case takes the default BLOCK, so a grid or a launch with
    1024 typed in for BLOCK passes them."""
    n = 5000
    x, y = (padded(t) for t in _pair(n, torch.float32, gen))

    def hint(o, e, wrong):
        return (f"with BLOCK={OTHER_BLOCK} (not the default) {int(wrong.sum())} of {n} elements were wrong: the "
                "launcher must use the BLOCK it is given, in the grid (triton.cdiv(n, BLOCK)) and in the launch "
                "(BLOCK=BLOCK), not a number typed in")
    return _attempt(f"n={n} float32, BLOCK={OTHER_BLOCK}", mod.add, (x, y), x + y, kwargs=dict(BLOCK=OTHER_BLOCK),
                    diagnose=hint, mask=MASK)


def _pair(n, dtype, gen):
    x = torch.randn(n, generator=gen, dtype=torch.float64).to(dtype).to(mode.DEVICE)
    y = torch.randn(n, generator=gen, dtype=torch.float64).to(dtype).to(mode.DEVICE)
    return x, y


def _fixed(mod, dtype, gen):
    for n in SIZES:
        x, y = (padded(t) for t in _pair(n, dtype, gen))
        expected = (x.double() + y.double()).to(dtype)  # torch reference, rounded like the kernel
        yield _attempt(f"n={n} {str(dtype).replace('torch.', '')}", mod.add, (x, y), expected, dtype=dtype,
                       diagnose=_diagnose, mask=MASK)


def grade(mod):
    gen = torch.Generator().manual_seed(0)
    dtypes = mode.float_dtypes()
    yield from _fixed(mod, dtypes[0], gen)
    seed, sizes = random_sizes(*N_RANDOM)
    for n in sizes:
        x, y = (padded(t) for t in _pair(n, torch.float32, gen))
        yield _attempt(seeded(f"n={n} float32", seed), mod.add, (x, y), x + y, diagnose=_diagnose,
                       mask=MASK)
    for n, how in ((1025, "x is x_big[::2]"), (4097, "x and y are views with stride 3")):
        x, y = _pair(n, torch.float32, gen)
        expected = x + y
        x, y = (strided(x), padded(y)) if "::2" in how else (strided(x, 3), strided(y, 3))
        yield _attempt(f"n={n} float32, strided ({how})", mod.add, (x, y), expected, diagnose=_strided_diagnose,
                       mask=MASK)
    for dtype in dtypes[1:]:
        yield from _fixed(mod, dtype, gen)
    yield _own_block_case(mod, gen)
    d = mode.DEVICE
    yield refuses("mismatched lengths raise ValueError", mod.add, torch.ones(3, device=d), torch.ones(4, device=d),
                  hint="the launcher's given first line, validate(x, y, ...), checks the shapes before launching: keep it")
