"""Grader for lesson 05: ``softmax(x)`` over rows of any length, streamed in blocks."""

from __future__ import annotations

import torch

from .. import mode
from .core import attempt, padded

# rows shorter and longer than any block, one element, strided rows, values that overflow exp
SHAPES = [(3, 5000, ""), (2, 1, ""), (4, 100, ""), (2, 20_011, ""), (5, 3000, "strided rows"),
          (3, 4099, "large values"), (2, 2500, "one huge value")]


def _input(rows, cols, note, dtype, gen):
    x = torch.randn(rows, cols, generator=gen, dtype=torch.float64)
    if note == "large values":
        x = x * 3000
    if note == "one huge value":
        x[:, -1] = 1e4  # the max arrives in the very last block: every earlier block must be rescaled
    x = x.to(dtype)
    if note == "strided rows":
        wide = torch.zeros(rows, cols + 13, dtype=dtype)
        wide[:, :cols] = x
        return wide.to(mode.DEVICE)[:, :cols]
    return padded(x.to(mode.DEVICE))


def _unrescaled(x, block):
    """The classic mistake: the running sum is not rescaled when the running max grows."""
    xd = x.double().cpu()
    m = torch.full((x.shape[0],), float("-inf"), dtype=torch.float64)
    l = torch.zeros(x.shape[0], dtype=torch.float64)
    for j in range(0, x.shape[1], block):
        b = xd[:, j:j + block]
        m = torch.maximum(m, b.amax(1))
        l = l + torch.exp(b - m[:, None]).sum(1)
    return torch.exp(xd - m[:, None]) / l[:, None]


def _diagnose(note, x):
    def hint(o, e, wrong):
        if x.shape[1] > 256 and not torch.isnan(o).any():
            for block in (256, 512, 1024, 2048, 4096, 8192):
                if block < x.shape[1] and torch.allclose(o, _unrescaled(x, block), rtol=1e-2, atol=1e-6):
                    return ("missing rescale: when a block raises the running max, multiply the running sum by "
                            "exp(m_old - m_new) before adding the block's sum")
        if (torch.isnan(o) | torch.isinf(o)).any() and note in ("large values", "one huge value"):
            return ("overflow: keep a running max m and compute exp(x - m); when a block raises the max, "
                    "rescale the running sum: l = l * exp(m_old - m_new) + sum(exp(x - m_new))")
        if note == "one huge value":
            return ("the max came in the last block and earlier blocks were not rescaled: multiply the running "
                    "sum by exp(m_old - m_new) whenever the max grows")
        if note == "strided rows":
            return "strided rows are wrong while contiguous ones pass: find row i at x_ptr + i * x.stride(0)"
        sums = o.sum(dim=1)
        if not torch.isclose(sums, torch.ones_like(sums), atol=1e-2).all():
            return ("rows do not sum to 1: the second pass must divide exp(x - m) by the final l, with m the "
                    "final max, and masked lanes must add nothing (load them as -inf)")
        if torch.isnan(o).any():
            return "some blocks were never written: the second pass must loop over the whole row too"
        return ""
    return hint


def grade(mod):
    gen = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.float16):
        for rows, cols, note in SHAPES:
            if dtype == torch.float16 and note == "one huge value":
                continue  # 1e4 is fine in fp16, but keep the fp16 pass short
            label = f"{rows}x{cols} {str(dtype)[6:]}" + (f" ({note})" if note else "")
            x = _input(rows, cols, note, dtype, gen)
            expected = torch.softmax(x.double(), dim=-1)
            f16 = dtype == torch.float16
            yield attempt(label, mod.softmax, (x,), expected, dtype=dtype, atol=1e-3 if f16 else 1e-6,
                          rtol=1e-2 if f16 else 1e-4, diagnose=_diagnose(note, x))
