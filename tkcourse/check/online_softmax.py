"""Grader for lesson 05: ``softmax(x)`` over rows of any length, streamed in blocks.

Every graded call runs under the tracer and is checked for aliasing and modified inputs (``core.attempt``).
The cases, in order: awkward fixed shapes (one element, rows shorter and longer than any block, values
that overflow ``exp``, the max in the last block, rows that start with whole blocks of -inf, rows whose
values all lie far below 0, where a running max started at 0 instead of -inf underflows to 0/0); strided
layouts of ``x`` (rows further apart than their width, every other row, a column slice, a transposed
``x``: ``softmax`` must compute them all, as the solution does by reading rows in place and copying
``x`` whose columns are not contiguous); seeded random sizes over four orders of magnitude, which
defeat a grid, a BLOCK or a loop bound hard-coded to the fixed sizes; then the inputs it must refuse.
Last, the two functions on a part of a row, ``x_row[start:end]`` with ``start > 0``, as the split-row
kernel of *Going further* calls them (the lesson's kernel only ever passes ``start = 0``): a grader kernel
calls the module's ``online_stats`` and ``write_softmax`` on each of a row's parts, one launch a part.
"""

from __future__ import annotations

import inspect

import torch
import triton
import triton.language as tl

from .. import mode
from .. import triton_internals as ti
from .core import (
    attempt,
    never_stored,
    out_records,
    padded,
    random_sizes,
    refuses,
    row_padded,
    seeded,
    sliced_rows,
    transposed,
)

# rows shorter and longer than any block, one element, strided rows, values that overflow exp, values far below 0
SHAPES = [(3, 5000, ""), (2, 1, ""), (4, 100, ""), (2, 20_011, ""), (5, 3000, "strided rows"),
          (3, 4099, "large values"), (2, 2500, "one huge value"), (3, 3001, "leading -inf"),
          (2, 3000, "all far below 0"), (2, 3001, "leading -inf, then far below 0"), (130, 77, "many rows")]
# (rows, cols, layout): the layouts a caller hands over; the gaps of each hold core.INPUT_PAD
LAYOUTS = [(4, 1500, "every other row"), (3, 1000, "a column slice"), (5, 700, "transposed")]
BLOCKS = (64, 128, 256, 512, 1024, 2048, 4096, 8192)  # the blocks a learner may have chosen
MASK = "cols < n_cols in every block of the row (the loads with other=-inf)"  # named by out-of-bounds hints


def _values(rows, cols, note, dtype, gen):
    x = torch.randn(rows, cols, generator=gen, dtype=torch.float64)
    if note == "large values":
        x = x * 3000
    if note == "one huge value":
        x[:, -1] = 1e4  # the max arrives in the very last block: every earlier block must be rescaled
    if note == "leading -inf":
        x[:, : cols // 2] = float("-inf")  # whole blocks of -inf first, as a masked row of scores has
    if note == "leading -inf, then far below 0":  # a max kept at the shift's 0 after the -inf blocks underflows
        x = x - 200
        x[:, : cols // 2] = float("-inf")
    if note == "all far below 0":
        x = x - 200  # every value near -200: exp(x - 0) underflows to 0 in fp32, so a max started at 0 gives l = 0
    return x.to(dtype)


def _input(rows, cols, note, dtype, gen):
    x = _values(rows, cols, note, dtype, gen)
    if note == "strided rows":
        return row_padded(x.to(mode.DEVICE), pad=13)
    return padded(x.to(mode.DEVICE))


def _layout(rows, cols, layout, gen):
    x = _values(rows, cols, "", torch.float32, gen).to(mode.DEVICE)
    if layout == "every other row":
        return sliced_rows(x)
    if layout == "a column slice":  # x = big[:, 5:5 + cols]: it starts 5 elements into its storage
        big = torch.full((rows, cols + 12), -31328.0, device=mode.DEVICE)
        big[:, 5:5 + cols] = x
        return big[:, 5:5 + cols]
    return transposed(x)


def _streamed(x, block, *, rescale=True, masked_zero=False, exp2_rescale=False, drop_tail=False, per_lane=False):
    """Softmax as a block-by-block kernel computes it, with switches for the classic mistakes:
    the running sum not rescaled when the max grows; masked lanes loaded as 0 instead of -inf; the rescale
    by exp2(m_old - m_new) where the block's terms use exp; pass 1 stopped before the last, partial block;
    l kept as a vector of BLOCK lanes (no tl.sum), so that column c is divided by the sum of its lane c % BLOCK."""
    xd = x.double().cpu()
    rows, n = xd.shape
    if masked_zero and n % block:
        xd = torch.cat([xd, torch.zeros(rows, block - n % block, dtype=torch.float64)], 1)
    m = torch.full((rows,), float("-inf"), dtype=torch.float64)
    l = torch.zeros(rows, dtype=torch.float64)
    if per_lane:
        m = xd.amax(1)
        lanes = torch.zeros(rows, block, dtype=torch.float64)
        lanes.index_add_(1, torch.arange(n) % block, torch.exp(xd - m[:, None]))
        return torch.exp(xd - m[:, None]) / lanes[:, torch.arange(n) % block]
    for j in range(0, n // block * block if drop_tail else xd.shape[1], block):
        b = xd[:, j:j + block]
        m_new = torch.maximum(m, b.amax(1))
        alpha = torch.exp2(m - m_new) if exp2_rescale else torch.exp(m - m_new)
        l = (l * alpha if rescale else l) + torch.exp(b - m_new[:, None]).sum(1)
        m = m_new
    return torch.exp(xd[:, :n] - m[:, None]) / l[:, None]


def _matches_some_block(o, x, **mistake) -> bool:
    return any((block < x.shape[1] or mistake.get("masked_zero") or mistake.get("per_lane")) and
               torch.allclose(o, _streamed(x, block, **mistake), rtol=1e-2, atol=1e-6, equal_nan=True)
               for block in BLOCKS)


def _like(o, model, e) -> bool:
    """``o`` is ``model`` (a mistake's result) and the mistake shows: ``model`` is not the right ``e``."""
    o, model, e = o.double().cpu(), model.double().cpu(), e.double().cpu()
    return (torch.allclose(o, model, rtol=1e-2, atol=1e-6, equal_nan=True)
            and not torch.allclose(model, e, rtol=1e-2, atol=1e-6, equal_nan=True))


def _formula_hint(o, e, x) -> str:
    """The hint of a wrong formula in one of the passes, from cheap float64 models of what each gives."""
    xd = x.double().cpu()
    m = xd.amax(1, keepdim=True)
    z = torch.exp(xd - m)
    l = z.sum(1, keepdim=True)
    if _like(o, z * l, e):
        return ("pass 2 multiplies by l: the output is exp(x - m) / l, a division by the row's sum (or a "
                "product with inv_l = 1 / l)")
    if _like(o, torch.exp(xd) / l, e):
        return ("pass 2 leaves out the max: it must store exp(x - m) / l with the same m as pass 1, since l is "
                "the sum of exp(x - m), not of exp(x)")
    if _like(o, torch.exp2(xd - m) / l, e):
        return ("pass 2 uses exp2 where pass 1 used exp: l is the sum of exp(x - m), so pass 2 stores "
                "exp(x - m) / l (tl.exp); exp2(y) is exp(y · ln 2), a different number")
    if _like(o, z / torch.exp2(xd - m).sum(1, keepdim=True), e):
        return ("pass 1 sums exp2 where pass 2 uses exp: l must be the sum of exp(x - m) (tl.exp, in the block's "
                "terms and in the rescale exp(m_old - m_new)), the same function that pass 2 divides")
    if x.shape[1] > 64 and _matches_some_block(o, x, exp2_rescale=True):
        return ("the running sum is rescaled with exp2 but the blocks' terms use exp: when the max grows, "
                "l = l * exp(m_old - m_new) + sum(exp(x - m_new)), the same exp in both (exp2(y) is exp(y · ln 2))")
    if x.shape[1] > 1 and _matches_some_block(o, x, per_lane=True):
        return ("l (or m) is a vector of BLOCK lanes, not a number: each column was divided by the sum of its own "
                "lane over the blocks. Reduce each block to scalars: m_new = max(m, tl.max(x, axis=0)) and "
                "l = l * exp(m - m_new) + tl.sum(exp(x - m_new), axis=0), with m and l started as fp32 scalars "
                "(tl.full((), ...), tl.zeros((), ...))")
    if _matches_some_block(o, x, drop_tail=True):
        return ("pass 1 leaves out the last, partial block of the row: loop over all of [start, end) "
                "(tl.range(start, end, BLOCK, ...)) and mask the loads with cols < end (other=-inf), so that the "
                "partial block counts in m and l")
    finite_x = torch.isfinite(xd).all()
    if finite_x and bool(torch.isinf(o).all()) and bool((o > 0).all()):
        return ("every output is +inf: pass 2 got m = -inf, so exp(x - m) overflowed. online_stats must return "
                "the row's max: m = m_new at the end of each step")
    return ""


def _diagnose(note, x):
    def hint(o, e, wrong):
        finite = not (torch.isnan(o) | torch.isinf(o)).any()
        if x.shape[1] > 64 and finite and _matches_some_block(o, x, rescale=False):
            return ("missing rescale: when a block raises the running max, multiply the running sum by "
                    "exp(m_old - m_new) before adding the block's sum")
        if finite and x.shape[1] > 1 and _matches_some_block(o, x, masked_zero=True):
            return ("the masked lanes of the last, partial block count in the sum (and the max): load them with "
                    "other=float('-inf'), so that they add exp(-inf) = 0 and never win the max")
        if note == "all far below 0" and not finite:
            return ("the running max must start at -inf, not 0: on a row whose values all lie far below 0 (here "
                    "near -200) a max started at 0 stays 0, every exp(x - 0) underflows to 0 in fp32, l ends at 0 "
                    "and exp(x - m) / l is 0/0 = NaN. Start with m = tl.full((), float('-inf'), tl.float32)")
        if note == "leading -inf" and torch.isnan(o).any():
            return ("NaN from a row that starts with whole blocks of -inf: there m_new is -inf and "
                    "exp(-inf - (-inf)) is NaN. While the running max is still -inf, subtract 0 instead "
                    "(shift = tl.where(m_new == float('-inf'), 0.0, m_new))")
        if not finite and note in ("large values", "one huge value"):
            return ("overflow: keep a running max m and compute exp(x - m); when a block raises the max, "
                    "rescale the running sum: l = l * exp(m_old - m_new) + sum(exp(x - m_new))")
        if note == "leading -inf, then far below 0" and not finite:
            return ("NaN on a row of -inf blocks followed by values far below 0 (near -200): after the -inf blocks "
                    "your running max is 0, not -inf, so the later blocks' exp(x - 0) underflow to 0 and l ends at 0. "
                    "Keep m = m_new, the true max (-inf while every column so far is -inf); only the subtraction "
                    "uses the shift of 0")
        if bool(torch.isnan(o).all()):  # compare drops this (it says "written") where the tracer saw the NaN stored
            return ("nothing was written: every output is still the grader's NaN poison, so the second pass stores "
                    "nothing. In write_softmax, loop over the row's blocks (tl.range(start, end, BLOCK, ...)), load "
                    "each (mask cols < end) and tl.store exp(x - m) / l into out_row + cols with the same mask")
        formula = _formula_hint(o, e, x)
        if formula:
            return formula
        if note == "one huge value":
            return ("the max came in the last block and earlier blocks were not rescaled: multiply the running "
                    "sum by exp(m_old - m_new) whenever the max grows")
        if note == "strided rows" or note == "every other row" or note == "a column slice":
            return ("a strided x is wrong while contiguous ones pass: the given online_softmax_kernel finds row i at "
                    "x_ptr + i * x_row_stride and row i of out at out_ptr + i * out_row_stride, and the given "
                    "softmax passes x.stride(0) and out.stride(0): if you changed them, put them back as the "
                    "exercise has them (your helpers read from the x_row and out_row they are given)")
        if note == "transposed":
            return ("a transposed x (its columns not contiguous, x.stride(1) != 1) is wrong: the kernel reads a "
                    "row as consecutive elements, and the given softmax makes such an x contiguous first "
                    "(x = x.contiguous()): if you changed that, put it back")
        if note in ("random", "many rows") and torch.isnan(o).any():
            nan_rows = torch.isnan(o).all(1)
            if nan_rows.any() and not nan_rows.all():
                return (f"rows from {int(nan_rows.nonzero()[0])} on were never written: the given softmax launches "
                        "one program per row (grid = (n_rows,)), not a fixed number that the smaller cases happen "
                        "to fit: if you changed the launch, put it back")
            return ("columns were never written at a size no fixed case has: loop over the whole of [start, end) "
                    "in both passes, tl.range(start, end, BLOCK, ...), with the start, end and BLOCK arguments, "
                    "not fixed numbers")
        sums = o.sum(dim=1)
        if not torch.isclose(sums, torch.ones_like(sums), atol=1e-2).all():
            return ("rows do not sum to 1: the second pass must divide exp(x - m) by the final l, with m the "
                    "final max, and masked lanes must add nothing (load them as -inf)")
        if torch.isnan(o).any():
            return "some blocks were never written: the second pass must loop over the whole row too"
        return ""

    return hint  # core's compare turns a diagnosis that raises into no hint


def _trace_hint(x):
    """The hint of a wrong output from the tracer's record: pass 2 loading the output it writes, or NaN stored
    everywhere on rows of ordinary values (l NaN after pass 1; not rows far below 0, where the diagnosis
    names a running max started at 0)."""
    def hint(out, expected, traces):
        for tr, i in out_records(out, traces):
            if (tr.read_counts(i, kind="load") > 0).any():
                return ("your kernel loads from out: write_softmax must load x (x_row + cols) and store "
                        "exp(x - m) / l into out_row + cols; out holds nothing to read until it is written")
        if not bool(torch.isfinite(x).all()) or not bool(torch.isnan(out).all()):
            return ""
        if not bool((x.amax(1) > -50).all()):  # rows far below 0: a max started at 0 (the lesson's hint names it)
            return ""
        never = never_stored(out, traces)
        if never is not None and not bool(never.any()):
            return ("your kernel stored NaN in every column of rows of ordinary values, so l (or m) is NaN after pass "
                    "1: l starts at 0 and m at -inf, and 0 * inf is NaN. The rescale factor is exp(m_old - m_new), "
                    "at most 1 (exp(-inf) = 0 at the first block), not exp(m_new - m_old)")
        return ""
    return hint


def _le_hint(kernels):
    """The out-of-bounds hint of a load one element past x where a learner-written mask reads ``<= end``."""
    import re

    def hint(bad, default):
        if not bad or any(o.kind != "load" or o.offsets.min() < o.numel or o.offsets.max() >= o.numel + 1
                          for o in bad):
            return ""
        for name, fn in kernels:
            try:
                src = inspect.getsource(getattr(fn, "fn", fn))
            except (OSError, TypeError):
                continue
            if re.search(r"\bcols\s*<=\s*end\b", src):
                return (f"{name} masks its columns with cols <= end: end is one past the last column, so the lane "
                        "at cols = end lies past the row (the last row's reaches past the end of x). Mask with "
                        "cols < end, in both passes")
        return ""
    return hint


#: How often the two-pass kernel loads an element: x twice (pass 1 for the max and the sum together, pass 2 to
#: write), out never.
READS = {"x": (2, "each element of x is loaded more than twice: a pass for the max and another for the sum (then a "
                  "third to write) is the three-pass softmax this lesson does away with. online_stats keeps the max "
                  "and the sum together in one pass, rescaling the sum, l = l * exp(m - m_new) + sum(exp(x - m_new)), "
                  "whenever the max grows; write_softmax is the second and last pass"),
         "out": (0, "the kernel loads from out, which it only writes: pass 2 reads x again, not out")}


def _graded(label, softmax, x, note, dtype=torch.float32, trace=True, kernels=()):
    expected = torch.softmax(x.double(), dim=-1)
    f16 = dtype == torch.float16
    case = attempt(label, softmax, (x,), expected, dtype=dtype, atol=1e-3 if f16 else 1e-6,
                   rtol=1e-2 if f16 else 1e-4, diagnose=_diagnose(note, x), trace=trace, mask=MASK,
                   trace_hint=_trace_hint(x), oob_hint=_le_hint(kernels), reads=READS)
    if case.status == "fail" and case.detail.startswith("returned a tuple"):
        case.hint = "softmax returns the output tensor alone, as the given launcher does: return out"
    return case


# (start, end) of each part of a PARTS_COLS-column row, each launched alone, in this order; the later parts
# start past 0, at columns that are not multiples of PARTS_BLOCK
PARTS_COLS, PARTS_BLOCK = 700, 64
PARTS = ((0, 230), (230, 450), (450, PARTS_COLS))


@triton.jit
def _part_softmax_kernel(x_ptr, out_ptr, x_row_stride, out_row_stride, start, end, STATS: tl.constexpr,
                         WRITE: tl.constexpr, BLOCK: tl.constexpr):
    """out[row, start:end] = softmax of x[row, start:end] alone, by the module's two functions."""
    row = tl.program_id(0)
    x_row = x_ptr + row * x_row_stride
    m, l = STATS(x_row, start, end, BLOCK, 1)
    WRITE(x_row, out_ptr + row * out_row_stride, start, end, m, l, BLOCK, 1)


def _part_softmax(mod):
    """``x`` -> each part of each row softmaxed on its own by ``mod``'s functions (one launch a part)."""
    def online_stats_and_write_softmax_on_parts(x):
        out = torch.empty_like(x)
        for start, end in PARTS:
            _part_softmax_kernel[(x.shape[0],)](x, out, x.stride(0), out.stride(0), start, end,
                                                STATS=mod.online_stats, WRITE=mod.write_softmax, BLOCK=PARTS_BLOCK)
        return out
    return online_stats_and_write_softmax_on_parts


def _parts_model(x, stats_from_0=False, write_from_0=False):
    """What the part launches leave in out when ``online_stats`` (``write_softmax``) loops from column 0
    instead of ``start``: the stats take in the columns before the part; the store covers them too, so a
    later part's launch overwrites the earlier parts' columns with its own (m, l)."""
    xd = x.double().cpu()
    out = torch.full_like(xd, float("nan"))
    for start, end in PARTS:
        part = xd[:, 0 if stats_from_0 else start:end]
        m = part.amax(1, keepdim=True)
        l = torch.exp(part - m).sum(1, keepdim=True)
        cols = slice(0 if write_from_0 else start, end)
        out[:, cols] = torch.exp(xd[:, cols] - m) / l
    return out


def _parts_hint(x):
    def hint(o, e, wrong):
        o = o.double().cpu()
        close = {(s, w): torch.allclose(o, _parts_model(x, s, w), rtol=1e-3, atol=1e-6)
                 for s in (False, True) for w in (False, True)}
        stats = ("online_stats read the columns before start: on x_row[start:end] it must take in only those, so "
                 "loop from start (tl.range(start, end, BLOCK, ...)), not from 0")
        write = ("write_softmax stored the columns before start, which belong to another part: loop from start "
                 "(tl.range(start, end, BLOCK, ...)), not from 0")
        why = (" (the lesson's kernel always passes start = 0, where this cannot show; the split-row kernel of "
               "Going further passes a part's start, as this case does)")
        if close[True, True]:
            return stats + "; and " + write + why
        if close[True, False]:
            return stats + why
        if close[False, True]:
            return write + why
        return ("each part of the row must be a softmax of x_row[start:end] alone: online_stats reads only "
                "[start, end) and write_softmax stores only [start, end), with the m and l it is given")
    return hint


def _parts_case(mod):
    """The module's two functions on parts of rows starting past column 0 (None without both)."""
    if not all(ti.is_kernel(getattr(mod, name, None)) for name in ("online_stats", "write_softmax")):
        return None
    gen = torch.Generator().manual_seed(2)
    x = padded((torch.randn(4, PARTS_COLS, generator=gen) * 3).to(mode.DEVICE))
    expected = _parts_model(x)
    parts = ", ".join(f"[{s}, {e})" for s, e in PARTS)
    return attempt(f"4x{PARTS_COLS} float32, online_stats and write_softmax on the parts {parts} of each row "
                   f"(BLOCK={PARTS_BLOCK})", _part_softmax(mod), (x,), expected, dtype=torch.float32, atol=1e-6, rtol=1e-4,
                   diagnose=_parts_hint(x), mask=MASK)


def _has_one_read(mod) -> bool:
    """Whether ``mod.softmax`` takes ``one_read`` (``solutions.kernels.online_softmax_one_read``, the
    lesson's last step): a keyword that chooses between the one-read kernel and the two passes."""
    try:
        return "one_read" in inspect.signature(mod.softmax).parameters
    except (TypeError, ValueError):
        return False


def grade(mod):
    # A module whose softmax takes one_read (the lesson's last step) runs, on a GPU, a kernel whose
    # programs wait for each other: the tracer's replay in the interpreter, one program at a time, would
    # poll for minutes. So its two passes are graded traced (one_read=False), then the one-read plan
    # untraced (the canaries still watch its stores). Any other module (the exercise) is graded as it is.
    one_read = not mode.INTERPRET and _has_one_read(mod)

    def softmax(x):  # the two passes of a module with a one-read plan, under the name the hints use
        return mod.softmax(x, one_read=False)
    kernels = [(name, getattr(mod, name)) for name in ("online_stats", "write_softmax")
               if ti.is_kernel(getattr(mod, name, None))]
    yield from _two_pass_cases(softmax if one_read else mod.softmax, kernels)
    parts = _parts_case(mod)
    if parts is not None:
        yield parts
    if one_read:
        gen = torch.Generator().manual_seed(1)
        for rows, cols in ((3, 5000), (2, 100_003), (37, 4099)):
            x = padded(torch.randn(rows, cols, generator=gen).to(torch.float16).to(mode.DEVICE))
            yield _graded(f"{rows}x{cols} float16, the one-read plan (one_read=True)", mod.softmax, x, "",
                          torch.float16, trace=False)


def _two_pass_cases(softmax, kernels=()):
    gen = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.float16):
        for rows, cols, note in SHAPES:
            if dtype == torch.float16 and note in ("one huge value", "leading -inf", "all far below 0", "many rows",
                                                   "leading -inf, then far below 0"):
                continue  # keep the fp16 pass short
            label = f"{rows}x{cols} {str(dtype)[6:]}" + (f" ({note})" if note else "")
            yield _graded(label, softmax, _input(rows, cols, note, dtype, gen), note, dtype, kernels=kernels)
    for rows, cols, layout in LAYOUTS:
        x = _layout(rows, cols, layout, gen)
        yield _graded(f"{rows}x{cols} float32, {layout} (stride {tuple(x.stride())})", softmax, x, layout)
    seed, col_sizes = random_sizes(3, 1, 30_000)
    _, row_sizes = random_sizes(3, 1, 300, seed=seed + 1)
    rgen = torch.Generator().manual_seed(seed)
    # the most rows with the fewest columns: a hard-coded grid meets many rows, and the interpreter stays quick
    for rows, cols in zip(sorted(row_sizes, reverse=True), sorted(col_sizes)):
        rows = max(1, min(rows, 120_000 // cols))
        x = padded((torch.randn(rows, cols, generator=rgen) * 4).to(mode.DEVICE))
        yield _graded(seeded(f"{rows}x{cols} float32", seed), softmax, x, "random")
    yield refuses("a 1-D x raises ValueError", softmax, torch.ones(8, device=mode.DEVICE),
                  hint="softmax works on the rows of a 2-D x: refuse other shapes with a ValueError")
    yield refuses("an empty x raises ValueError", softmax, torch.ones(2, 0, device=mode.DEVICE),
                  hint="a row of no columns has no softmax: refuse it with a ValueError")

