"""Grader for lesson 01: ``add(x, y)``.

First two small sizes, where the tracer checks that each program took one block of BLOCK elements (a grid
of ``(n,)`` or a number typed in gives the right sum, and would cost minutes below). Then fixed sizes with
tails of every kind, then random sizes over five orders of magnitude (a grid or BLOCK
hard-coded to fit the fixed sizes fails there), then strided inputs (``add`` must compute them: the
launcher makes them contiguous), then a BLOCK other than the default (a grid with 1024 typed in fails).
Every launch runs under the tracer, so a load or store past the end is reported however the output was
allocated; an output that is an input, or an input the call changed, fails too (``core.attempt``). A wrong
sum is named from the tracer's record (where each program stored: the grid, the offsets, the mask, the tensor
stored into) or from its values (x + x, x - y, ...) before the generic hints.
"""

from __future__ import annotations

import torch

from .. import mode
from .core import (
    STILL_NONE,
    Case,
    attempt,
    block_hint,
    graded_call,
    out_records,
    padded,
    random_sizes,
    refuses,
    seeded,
    shift_hint,
    strided,
)

SIZES = [98_433, 1, 1023, 1025, 4097, 77_777]  # tails of every kind; the large one first tells most
N_RANDOM = (3, 2, 400_000)  # how many random sizes, between what bounds
MASK = "offsets < n"  # the edge mask that out-of-bounds hints name
OTHER_BLOCK = 256  # one case passes add a BLOCK other than its default
DEFAULT_BLOCK = 1024  # add's default BLOCK, which every case but one takes
GRID_SIZES = (1500, 2500)  # the first case's sizes: a grid far too large costs seconds here, not minutes


def _diagnose(o, e, wrong):
    return block_hint(o, e, wrong) or shift_hint(o, e, wrong)


#: What the kernel stored instead of x + y, and the hint that names it: a formula slip.
FORMULAS = (
    (lambda x, y: x + x, "your output is x + x: y never entered the sum (is y loaded from x_ptr, or x added to "
                         "itself?). Load y = tl.load(y_ptr + offsets, mask=mask) and store x + y"),
    (lambda x, y: y + y, "your output is y + y: x never entered the sum (is x loaded from y_ptr, or y added to "
                         "itself?). Load x = tl.load(x_ptr + offsets, mask=mask) and store x + y"),
    (lambda x, y: x - y, "your output is x - y: store x + y"),
    (lambda x, y: y - x, "your output is y - x: store x + y"),
    (lambda x, y: x * y, "your output is x * y, the product: store the sum, x + y"),
    (lambda x, y: x, "your output is x alone: y was never added. Store x + y"),
    (lambda x, y: y, "your output is y alone: x was never added. Store x + y"),
)


def _formula_diagnose(x, y):
    """``diagnose`` for contiguous inputs x, y: the output matches another formula of x and y (x + x, x - y, ...)."""
    def diagnose(o, e, wrong):
        if isinstance(o, torch.Tensor) and o.shape == x.shape and not torch.isnan(o).any():
            # compare hands o over on the CPU; x and y may be on a GPU
            xd, yd, od = x.double().cpu(), y.double().cpu(), o.double().cpu()
            for model, hint in FORMULAS:
                if torch.allclose(od, model(xd, yd), rtol=1e-2, atol=1e-3):
                    return hint
        return _diagnose(o, e, wrong)
    return diagnose


def _stored(tr, i):
    """{program: (first element, last element, lanes stored)} of the stores into tensor ``i`` of one launch."""
    t, launch, got = tr.tensors[i], tr.launches[0], {}
    for a in tr.accesses:
        if a.tensor != i or a.kind != "store" or not a.offsets.size:
            continue
        idx = t.linear_index(a.offsets)
        idx = idx[idx >= 0]
        if not idx.size:
            continue
        p = launch.program_index(a.program)
        lo, hi, k = got.get(p, (int(idx.min()), int(idx.max()), 0))
        got[p] = (min(lo, int(idx.min())), max(hi, int(idx.max())), k + int(idx.size))
    return got


def _stored_elsewhere(tr, i, x, y) -> str:
    """The kernel stored nothing into out: into which input did its stores go, and through which argument."""
    for j, t in enumerate(tr.tensors):
        if j == i or not any(a.tensor == j and a.kind == "store" for a in tr.accesses):
            continue
        which = next((name for name, v in (("x", x), ("y", y)) if t.key[0] == v.data_ptr()), None)
        if which is None:
            continue
        if t.name == which:
            return (f"your kernel stores into {which} (tl.store({which}_ptr + ...)), not into out: the result goes "
                    "to tl.store(out_ptr + offsets, x + y, mask=mask), and the inputs are only read")
        return (f"your launch passes the tensors in another order: {which} went in as the kernel's {t.name}_ptr, "
                "and the kernel stored into it. add_kernel takes (x_ptr, y_ptr, out_ptr, n, BLOCK): launch "
                "add_kernel[grid](x, y, out, n, BLOCK=BLOCK)")
    return ""


def _grid_hint(P, n, BLOCK) -> str:
    need = -(-n // BLOCK)
    said = (f"the grid has too few programs: {P}, but {n} elements in blocks of BLOCK={BLOCK} need "
            f"triton.cdiv(n, BLOCK) = {need}")
    if BLOCK != DEFAULT_BLOCK and P == -(-n // DEFAULT_BLOCK):
        return (f"{said}; your grid counts blocks of {DEFAULT_BLOCK}: the launcher must use the BLOCK it is given, "
                "in the grid (triton.cdiv(n, BLOCK)) and in the launch (BLOCK=BLOCK), not a number typed in")
    if P == n // BLOCK:
        return f"{said}: n // BLOCK rounds down, so the last, partial block gets no program. Use triton.cdiv(n, BLOCK)"
    if P == 1 and -(-BLOCK // n) == 1:
        return f"{said}: the grid is (1,) (triton.cdiv(BLOCK, n)? its arguments are n, then BLOCK)"
    return f"{said}: grid = (triton.cdiv(n, BLOCK),)"


def _trace_hint(BLOCK, x, y):
    """``trace_hint`` for add: what the tracer saw the programs store, against one program a block of BLOCK."""
    def hint(out, expected, traces):
        if not isinstance(out, torch.Tensor) or out.dim() != 1 or out.shape != expected.shape:
            return ""  # a wrong shape is named as such
        n = out.numel()
        for tr, i in out_records(out, traces):
            if len(tr.launches) != 1:
                continue
            stored, P = _stored(tr, i), tr.launches[0].num_programs
            if not stored:
                return _stored_elsewhere(tr, i, x, y)
            if P < -(-n // BLOCK):
                return _grid_hint(P, n, BLOCK)
            progs = sorted(stored)
            firsts = [stored[p][0] for p in progs]
            if len(progs) > 1 and len(set(firsts)) == 1:
                lo, hi = stored[progs[0]][:2]
                block = (f"only the first block ({hi - lo + 1} elements) was written" if lo == 0 else
                         f"only elements {lo}..{hi} were written")
                return (f"{block}, by every one of the {len(progs)} programs: the offsets do not change from program "
                        "to program. In a 1-D grid a program's index is tl.program_id(axis=0) (axis=1 is 0 for every "
                        "program): offsets = pid * BLOCK + tl.arange(0, BLOCK)")
            if progs == [0] and P > 1:
                return (f"only program 0 stored anything: the stores of the other {P - 1} programs were all masked "
                        f"off. Program i stores elements i*BLOCK .. i*BLOCK + BLOCK - 1: check its offsets "
                        "(pid * BLOCK + tl.arange(0, BLOCK)) and its mask, offsets < n with n the number of elements "
                        "(not BLOCK)")
            starts = {f - p * BLOCK for p, f in zip(progs, firsts)}
            if starts == {BLOCK}:
                return ("each program stored the block after its own: program i starts at (i + 1) * BLOCK, so block 0 "
                        "was never written. offsets = pid * BLOCK + tl.arange(0, BLOCK), not (pid + 1) * BLOCK")
            if len(starts) == 1 and 0 < abs(next(iter(starts))) < BLOCK:
                s = next(iter(starts))
                return (f"every program's offsets are shifted by {s}: program 0 stores from element {firsts[0]}, "
                        f"not 0. offsets = pid * BLOCK + tl.arange(0, BLOCK), exactly")
            if len(progs) > 1 and progs[:2] == [0, 1] and firsts[0] == 0:
                step = firsts[1]
                if step != BLOCK and all(f == p * step for p, f in zip(progs, firsts)):
                    at = "i" if step == 1 else f"{step} * i"
                    return (f"program i starts at element {at}, not BLOCK * i = {BLOCK} * i: offsets = "
                            "pid * BLOCK + tl.arange(0, BLOCK)" + (" (pid + tl.arange: * BLOCK is missing)" if step == 1
                                                                    else f" (is {step} typed in for BLOCK?)"))
            if starts == {0} and len(progs) == -(-n // BLOCK):
                last = max(hi for _, hi, _ in stored.values())
                if last < n - 1:
                    return (f"every program stored its own block, but nothing from element {last + 1} on: the last "
                            f"block's mask stopped early, so the kernel compares the offsets with less than the "
                            f"{n} elements. Pass n = x.numel() and mask with offsets < n")
        return ""
    return hint


def _error_hint(exc, hint):
    if isinstance(exc, TypeError) and "'int' has no len()" in str(exc):
        return ("is the grid a bare number? A grid is a tuple, one entry an axis: grid = (triton.cdiv(n, BLOCK),), "
                "with the trailing comma")
    return ""


def _strided_diagnose(o, e, wrong):
    return _diagnose(o, e, wrong) or (
        "a strided input (a view such as x[::2]) is wrong while contiguous ones pass: the kernel reads "
        "x_ptr + offsets as if x were contiguous (values near -31328 are the grader's padding between x's "
        "elements). The launcher's given line x, y = x.contiguous(), y.contiguous() makes them contiguous: keep "
        "it above your code, and launch with those x and y")


def _attempt(label, fn, args, expected, *, BLOCK=DEFAULT_BLOCK, **kwargs):
    """``core.attempt`` with add's hints: a formula slip named from the values, where the programs stored
    (``_trace_hint``), a bare-number grid; a launcher that returns None (its ``out = None`` left as the stub gave
    it, under the given ``return out``) is told that the placeholder was not replaced, not to add a return."""
    x, y = args
    seen = {}

    def traced(out, e, traces):
        seen["hint"] = _trace_hint(BLOCK, x, y)(out, e, traces)
        return seen["hint"]
    case = attempt(label, fn, args, expected, trace_hint=traced, error_hint=_error_hint, **kwargs)
    if case.status == "todo" and case.detail.endswith("returned None"):
        case.hint = (f"{STILL_NONE} (add returned None: out is still the stub's out = None). Allocate it "
                     "(out = torch.empty_like(x)), launch add_kernel on a grid of triton.cdiv(n, BLOCK) programs "
                     "to fill it, and return it")
    elif case.status == "fail" and case.detail.startswith("after the call") and seen.get("hint"):
        case.hint = seen["hint"]  # an input changed: the tracer saw the stores go there instead of into out
    return case


def _programs_case(label, fn, x, y, BLOCK, fixed_grid=False):
    """(verdict, programs) for a right output: verdict a failing case when the programs did not each take one block
    of BLOCK elements (a grid far larger than triton.cdiv(n, BLOCK), a BLOCK of the launcher's own), else a pass;
    (None, 0) when the call fails or its output is wrong (the graded cases say why)."""
    g = graded_call(label, fn, (x, y), kwargs=None if BLOCK == DEFAULT_BLOCK else dict(BLOCK=BLOCK), mask=MASK)
    if isinstance(g, Case) or not isinstance(g.out, torch.Tensor) or g.out.shape != x.shape:
        return None, 0
    if not torch.allclose(g.out.double(), x.double() + y.double(), rtol=1e-3, atol=1e-3):
        return None, 0
    n, need = x.numel(), -(-x.numel() // BLOCK)
    for tr, i in out_records(g.out, g.traces):
        if len(tr.launches) != 1:
            continue
        stored, P = _stored(tr, i), tr.launches[0].num_programs
        widest = max((k for _, _, k in stored.values()), default=0)
        if widest > BLOCK:
            most = int(tr.read_counts(i, kind="store").max())
            where = (f"elements were stored up to {most} times by overlapping programs: is a number typed in for "
                     "BLOCK in the kernel (tl.arange(0, 1024))? Use tl.arange(0, BLOCK)" if most > 1 else
                     f"{P - len(stored)} of the {P} programs stored nothing: the launch passes a BLOCK of its own "
                     f"(BLOCK={DEFAULT_BLOCK}?), not the one add was given: add_kernel[grid](x, y, out, n, BLOCK=BLOCK)")
            return Case(label, "fail", f"BLOCK={BLOCK}: a program stored {widest} elements, more than BLOCK",
                        f"the right sum, but with BLOCK={BLOCK} a program stored {widest} elements: " + where), P
        if P > need + 1:  # n // BLOCK + 1 programs (one spare when BLOCK divides n) is fine
            idle = P - len(stored)
            why = ("The grid is (n,), a program an element, but a program takes BLOCK elements. " if P == n else
                   "The grid does not follow n (the same number of programs for n=%d and n=%d): is it typed in? "
                   % GRID_SIZES if fixed_grid else "")
            return Case(label, "fail", f"n={n}, BLOCK={BLOCK}: the grid has {P} programs, {idle} of which stored "
                        "nothing", f"the right sum, but your grid launches {P} programs where triton.cdiv(n, BLOCK) = "
                        f"{need} cover the {n} elements: the other {idle} only cost time (their lanes are all masked "
                        f"off). {why}Launch grid = (triton.cdiv(n, BLOCK),)"), P
    return Case(label, "pass"), 0


def _grid_case(mod, gen):
    """First, small sizes: a grid of far more programs than blocks (``(n,)``, a number typed in) gives the right
    sum and would cost minutes on the larger sizes; here it costs a second or two, and fails. None when the
    output is wrong: the cases that follow name that."""
    label = f"n={GRID_SIZES[0]} float32: one program a block of BLOCK elements"
    x, y = (padded(t) for t in _pair(GRID_SIZES[0], torch.float32, gen))
    case, P = _programs_case(label, mod.add, x, y, DEFAULT_BLOCK)
    if case is not None and case.status == "fail" and P and P != GRID_SIZES[0]:  # too many: is the grid fixed?
        x2, y2 = (padded(t) for t in _pair(GRID_SIZES[1], torch.float32, gen))
        case2, P2 = _programs_case(label, mod.add, x2, y2, DEFAULT_BLOCK)
        if case2 is not None and P2 == P:
            case, _ = _programs_case(label, mod.add, x, y, DEFAULT_BLOCK, fixed_grid=True)
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
    label = f"n={n} float32, BLOCK={OTHER_BLOCK}"
    case = _attempt(label, mod.add, (x, y), x + y, BLOCK=OTHER_BLOCK, kwargs=dict(BLOCK=OTHER_BLOCK), diagnose=hint,
                    mask=MASK)
    if case.status == "pass":  # the right sum: did each program take one block of the BLOCK given?
        case = _programs_case(label, mod.add, x, y, OTHER_BLOCK)[0] or case
    return case


def _pair(n, dtype, gen):
    x = torch.randn(n, generator=gen, dtype=torch.float64).to(dtype).to(mode.DEVICE)
    y = torch.randn(n, generator=gen, dtype=torch.float64).to(dtype).to(mode.DEVICE)
    return x, y


def _fixed(mod, dtype, gen):
    for n in SIZES:
        x, y = (padded(t) for t in _pair(n, dtype, gen))
        expected = (x.double() + y.double()).to(dtype)  # torch reference, rounded like the kernel
        yield _attempt(f"n={n} {str(dtype).replace('torch.', '')}", mod.add, (x, y), expected, dtype=dtype,
                       diagnose=_formula_diagnose(x, y), mask=MASK)


def grade(mod):
    first = _grid_case(mod, torch.Generator().manual_seed(1))
    if first is not None:
        yield first
    gen = torch.Generator().manual_seed(0)
    dtypes = mode.float_dtypes()
    yield from _fixed(mod, dtypes[0], gen)
    seed, sizes = random_sizes(*N_RANDOM)
    for n in sizes:
        x, y = (padded(t) for t in _pair(n, torch.float32, gen))
        yield _attempt(seeded(f"n={n} float32", seed), mod.add, (x, y), x + y, diagnose=_formula_diagnose(x, y),
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
