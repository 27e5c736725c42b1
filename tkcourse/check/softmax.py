"""Grader for lesson 02: ``softmax(x)``, a fused row softmax (rows that fit in one block).

Fixed shapes (lengths 1, 3, 1000, 1025, many rows, large values), strided layouts the API accepts
(rows of a wider tensor, every other row, a transposed view: ``softmax`` must compute them all), then
random shapes whose rows reach thousands of columns (a BLOCK or grid hard-coded to fit the fixed
shapes fails there). Every launch is traced; aliasing and modified inputs fail (``core.attempt``).
"""

from __future__ import annotations

import math

import torch

from .. import mode
from .core import attempt, padded, random_sizes, refuses, row_padded, seeded, sliced_rows, transposed

# (rows, cols, note): lengths 1, 3, 1000, 1025; many rows; a strided view; large magnitudes
SHAPES = [(5, 1000, ""), (1, 1, ""), (4, 3, ""), (3, 1025, ""), (300, 17, "many rows"),
          (6, 257, "strided rows"), (4, 700, "large values"), (5, 300, "row-padded"), (7, 129, "every other row"),
          (9, 40, "transposed")]
STRIDED = ("strided rows", "row-padded", "every other row", "transposed")
N_RANDOM = (2, 2, 20_000)  # random row lengths (the first in the top quarter), between these bounds
MAX_RANDOM_ELEMENTS = 40_000  # rows * cols of a random case, to keep the interpreter quick
MASK = "cols < n_cols (load the masked lanes as -inf)"  # the edge mask that out-of-bounds hints name


def _input(rows, cols, note, dtype, gen):
    x = torch.randn(rows, cols, generator=gen, dtype=torch.float64)
    if note == "large values":
        x = x * 2000  # exp(2000) overflows any float: only x - max survives
    x = x.to(dtype)
    if note == "strided rows":  # every other row of a wider tensor: row stride > cols
        wide = torch.randn(2 * rows, cols + 9, generator=gen, dtype=torch.float64).to(dtype)
        wide[::2, :cols] = x
        return wide.to(mode.DEVICE)[::2, :cols]
    x = x.to(mode.DEVICE)
    if note == "row-padded":  # x_big[:, :cols]: row stride cols + 7, the gaps hold INPUT_PAD
        return row_padded(x)
    if note == "every other row":
        return sliced_rows(x)
    if note == "transposed":  # column-major, stride (1, rows): the launcher must copy it (x.contiguous())
        return transposed(x)
    return padded(x)


def _diagnose(note, n_cols, x=None):
    def hint(o, e, wrong):
        if x is not None and not torch.isnan(o).any():
            xd = x.detach().double().cpu()
            for scale, what in ((math.log(2), "2**x, not e**x: tl.exp2(x) needs x * log2(e) (1.4427...) first, "
                                              "or use tl.exp"),
                                (1 / math.log(2), "e**(x * log2(e)): multiply by log2(e) only for tl.exp2, "
                                                  "tl.exp takes x as it is")):
                if torch.allclose(o, torch.softmax(xd * scale, dim=-1), atol=1e-3, rtol=1e-2):
                    return f"your kernel computes {what}"
        if note == "large values" and (torch.isnan(o) | torch.isinf(o)).any():
            return ("overflow: exp of a large value is inf, and inf/inf is NaN. Subtract the row max "
                    "before tl.exp: softmax(x) = softmax(x - max(x))")
        if note == "transposed":
            return ("a transposed input (column-major, x.stride(1) != 1) is wrong while row-major ones pass: "
                    "the kernel reads a row as one contiguous block, so such an x must be copied first: keep the "
                    "launcher's given lines (if x.stride(1) != 1: x = x.contiguous())")
        if note in STRIDED:
            return ("a strided input is wrong while contiguous ones pass: find row i at "
                    "x_ptr + i * x.stride(0), not i * n_cols (and out's row at i * out.stride(0))")
        nan_cols = torch.isnan(o).any(dim=0).nonzero().flatten()
        if len(nan_cols) and int(nan_cols[0]) > 0 and bool(torch.isnan(o[:, int(nan_cols[0]):]).all()):
            return (f"columns from {int(nan_cols[0])} on were never written: BLOCK must cover the whole row "
                    "(triton.next_power_of_2(n_cols))")
        nan = torch.isnan(o)
        partly = nan.any(dim=1) & ~nan.all(dim=1)
        if o.shape[0] > 1 and not bool(nan[0].any()) and bool(partly[1:].any()) and bool(nan[1:].any(dim=1).all()):
            return ("the first row is written and every other row has unwritten elements, some of them only a few: "
                    "the rows overlap, so a row starts too close to the last. Row i starts at i * x.stride(0) in x and i * out.stride(0) "
                    "in out: pass the row strides, stride(0), not stride(1)")
        nan_rows = nan.all(dim=1)
        if nan_rows.any() and not nan_rows.all():
            return ("some rows were never written: the kernel's loop over rows must reach every row (start at "
                    "tl.program_id(0), step by tl.num_programs(0), stop before n_rows)")
        ratio = o / e
        known = ratio[~torch.isnan(ratio)]
        if (bool((known > 0).all()) and bool((known < 1).all())
                and bool(torch.isclose(o.sum(1), e.sum(1) * ratio[:, 0]).all())):
            return ("each row is scaled down by a constant: the masked lanes count in the sum. Load them as "
                    "-inf (other=float('-inf')) so exp gives 0 there")
        if not torch.isclose(o.sum(1), torch.ones_like(o.sum(1)), atol=1e-2).all():
            return "rows do not sum to 1: divide by the sum of the exponentials over the row"
        return ""
    return hint


# a right output with rows stored twice: programs that each walked rows the others also took
ONCE = ("each row was computed and stored by several programs: program p takes rows p, p + P, p + 2P, ... with P "
        "the number of programs, so step the row loop by tl.num_programs(0): tl.range(tl.program_id(0), n_rows, "
        "tl.num_programs(0), ...). Every row then falls to one program")


#: How often the fused kernel loads an element: x once (the row stays in registers for the max, the
#: exponentials and the sum), out never.
READS = {"x": (1, "the row of x is loaded more than once: load it once into a block, keep it in registers for the "
                  "max, the exponentials and their sum, and store the result. Reading it again is the traffic that "
                  "fusing the passes saves"),
         "out": (0, "the kernel loads from out, which it only needs to write: keep what it computed in registers "
                    "and store it once")}


def grade(mod):
    gen = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.float16):
        for rows, cols, note in SHAPES:
            label = f"{rows}x{cols} {str(dtype)[6:]}" + (f" ({note})" if note else "")
            x = _input(rows, cols, note, dtype, gen)
            expected = torch.softmax(x.double(), dim=-1)
            f16 = dtype == torch.float16
            yield attempt(label, mod.softmax, (x,), expected, dtype=dtype, atol=1e-3 if f16 else 1e-5,
                          rtol=1e-2 if f16 else 1e-4, diagnose=_diagnose(note, cols, x), mask=MASK, once=ONCE,
                          reads=READS)
    seed, lengths = random_sizes(*N_RANDOM)
    for cols in lengths:
        rows = max(1, min(300, MAX_RANDOM_ELEMENTS // cols))
        x = padded(torch.randn(rows, cols, generator=gen, dtype=torch.float64).to(torch.float32).to(mode.DEVICE))
        yield attempt(seeded(f"{rows}x{cols} float32", seed), mod.softmax, (x,), torch.softmax(x.double(), dim=-1),
                      dtype=torch.float32, atol=1e-5, rtol=1e-4, diagnose=_diagnose("", cols, x), mask=MASK, once=ONCE,
                      reads=READS)
    yield refuses("a row too long for one block raises ValueError pointing to lesson 05", mod.softmax,
                  torch.zeros(1, 1 << 20, device=mode.DEVICE),
                  hint="a whole row must fit in one block: keep the launcher's given check that raises ValueError "
                       "for rows longer than MAX_COLS",
                  message_hint=(lambda m: "05" in m or "online" in m, "say where to go: lesson 05, the online softmax"))
