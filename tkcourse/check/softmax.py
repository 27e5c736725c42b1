"""Grader for lesson 02: ``softmax(x)``, a fused row softmax (rows that fit in one block)."""

from __future__ import annotations

import torch

from .. import mode
from .core import attempt, padded, refuses

# (rows, cols, note): lengths 1, 3, 1000, 1025; many rows; a strided view; large magnitudes
SHAPES = [(5, 1000, ""), (1, 1, ""), (4, 3, ""), (3, 1025, ""), (300, 17, "many rows"),
          (6, 257, "strided rows"), (4, 700, "large values")]


def _input(rows, cols, note, dtype, gen):
    x = torch.randn(rows, cols, generator=gen, dtype=torch.float64)
    if note == "large values":
        x = x * 2000  # exp(2000) overflows any float: only x - max survives
    x = x.to(dtype)
    if note == "strided rows":  # every other row of a wider tensor: row stride > cols
        wide = torch.randn(2 * rows, cols + 9, generator=gen, dtype=torch.float64).to(dtype)
        wide[::2, :cols] = x
        return wide.to(mode.DEVICE)[::2, :cols]
    return padded(x.to(mode.DEVICE))


def _diagnose(note, n_cols):
    def hint(o, e, wrong):
        if note == "large values" and (torch.isnan(o) | torch.isinf(o)).any():
            return ("overflow: exp of a large value is inf, and inf/inf is NaN. Subtract the row max "
                    "before tl.exp: softmax(x) = softmax(x - max(x))")
        if note == "strided rows":
            return ("a strided input is wrong while contiguous ones pass: find row i at "
                    "x_ptr + i * x.stride(0), not i * n_cols")
        nan_cols = torch.isnan(o).any(dim=0).nonzero().flatten()
        if len(nan_cols) and int(nan_cols[0]) > 0 and bool(torch.isnan(o[:, int(nan_cols[0]):]).all()):
            return (f"columns from {int(nan_cols[0])} on were never written: BLOCK must cover the whole row "
                    "(triton.next_power_of_2(n_cols))")
        nan_rows = torch.isnan(o).all(dim=1)
        if nan_rows.any() and not nan_rows.all():
            return ("some rows were never written: every row needs a program (the grid, or the loop over "
                    "rows with tl.program_id(0) and tl.num_programs(0))")
        ratio = o / e
        if bool((ratio[~torch.isnan(ratio)] < 1).all()) and bool(torch.isclose(o.sum(1), e.sum(1) * ratio[:, 0]).all()):
            return ("each row is scaled down by a constant: the masked lanes count in the sum. Load them as "
                    "-inf (other=float('-inf')) so exp gives 0 there")
        if not torch.isclose(o.sum(1), torch.ones_like(o.sum(1)), atol=1e-2).all():
            return "rows do not sum to 1: divide by the sum of the exponentials over the row"
        return ""
    return hint


def grade(mod):
    gen = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.float16):
        for rows, cols, note in SHAPES:
            label = f"{rows}x{cols} {str(dtype)[6:]}" + (f" ({note})" if note else "")
            x = _input(rows, cols, note, dtype, gen)
            expected = torch.softmax(x.double(), dim=-1)
            f16 = dtype == torch.float16
            yield attempt(label, mod.softmax, (x,), expected, dtype=dtype, atol=1e-3 if f16 else 1e-5,
                          rtol=1e-2 if f16 else 1e-4, diagnose=_diagnose(note, cols))
    yield refuses("a row too long for one block raises ValueError pointing to lesson 05", mod.softmax,
                  torch.zeros(1, 1 << 20, device=mode.DEVICE),
                  hint="a whole row must fit in one block: refuse longer rows with a ValueError that points to lesson 05",
                  message_hint=(lambda m: "05" in m or "online" in m, "say where to go: lesson 05, the online softmax"))
