"""Grader for lesson 09, part 1: ``rmsnorm(x, weight, eps, residual)``, RMSNorm fused with the residual add.

Fixed shapes with and without the residual (lengths 1, 3, 1000, 1025; many rows; a 3-D input), cases
built so that each usual mistake changes the result: tiny values and a large eps (where the eps's place
shows), a row of zeros (eps forgotten: 0 / 0), large fp16 values (a fp16 sum of squares overflows
65504), a weight far from 1, a length that is not a power of two (the mean over BLOCK instead of H);
strided rows; then every layout the API accepts, each tensor with strides of its own (x with padded rows
and the residual contiguous, and the other way round; the weight strided; x column-major, which the
launcher copies; (B, T, H) views whose batches are not T rows apart, and whose rows are); the row
offsets in int64 (seen in the tracer: row * stride passes 2**31 on a tensor of more than 2**31
elements); then random lengths up to 20000 (a BLOCK or grid hard-coded to fit the fixed shapes fails
there). Expected values are float64 from the inputs: the sum rounded to x's dtype, as the lesson asks,
then normalized. Every launch is traced; outputs aliasing inputs and changed inputs fail.
"""

from __future__ import annotations

import torch

from .. import mode
from .core import (
    INPUT_PAD,
    Case,
    alias_case,
    graded_call,
    loaded_again,
    out_records,
    padded,
    random_sizes,
    refuses,
    row_padded,
    seeded,
    sliced_rows,
    storage_overlap,
    strided,
    tolerance,
    transposed,
    written_case,
)

# (shape, note); H = shape[-1]. "eps 0.1" comes before "tiny values": with eps that large, eps left out and
# eps outside the root give different results, so the first failure names the right one. Every H stays below 4096, so a BLOCK hard-coded to 4096 passes them all
# and fails at the random lengths.
SHAPES = [((5, 1000), ""), ((1, 1), ""), ((4, 3), ""), ((3, 1025), ""), ((300, 17), "many rows"),
          ((2, 3, 96), "3-D"), ((6, 257), "strided rows"), ((4, 500), "eps 0.1"), ((4, 700), "tiny values"),
          ((3, 384), "a row of zeros"), ((4, 3000), "large values"), ((5, 300), "weight far from 1")]
N_RANDOM = (3, 2, 20_000)  # random row lengths (the first in the top quarter), between these bounds
MAX_RANDOM_ELEMENTS = 40_000  # rows * H of a random case, to keep the interpreter quick


def _inputs(shape, note, dtype, gen):
    """x, residual, weight, eps for one case (x and residual padded, or strided rows)."""
    def randn(*s, scale=1.0):
        return (torch.randn(*s, generator=gen, dtype=torch.float64) * scale).to(dtype).to(mode.DEVICE)

    H = shape[-1]
    scale = {"tiny values": 1e-3, "large values": 60.0}.get(note, 1.0)  # x*x of 60s: a row sums to 1e7
    x, r = randn(*shape, scale=scale), randn(*shape, scale=scale)
    if note == "a row of zeros":
        x[1], r[1] = 0, 0
    w = 1 + 0.5 * torch.randn(H, generator=gen, dtype=torch.float64)
    if note == "weight far from 1":
        w = 3 * torch.rand(H, generator=gen, dtype=torch.float64) + 0.5
    w = w.to(dtype).to(mode.DEVICE)
    eps = 0.1 if note == "eps 0.1" else 1e-6
    if note == "strided rows":  # every other row of a bigger tensor: x.stride(0) == 2 * H
        return sliced_rows(x), sliced_rows(r), padded(w), eps
    return padded(x), padded(r), padded(w), eps


def _expected(x, w, eps, r, dtype):
    """(y, h) in float64: h = x + residual rounded to x's dtype (x itself without the residual)."""
    h = (x.double() + r.double()).to(dtype).double() if r is not None else x.double()
    y = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * w.double()
    return y.cpu(), h.cpu()


def _mistakes(x, w, eps, r, dtype):
    """(formula, hint) of the usual mistakes, each computed in float64 for comparison."""
    x64, w64 = x.double().cpu(), w.double().cpu()
    h = (x64 + r.double().cpu()).to(dtype).double() if r is not None else x64
    H = h.shape[-1]
    block = 1 << max(0, (H - 1).bit_length())
    ms = h.pow(2).mean(-1, keepdim=True)
    out = [
        (h * torch.sqrt(ms + eps) * w64,
         "y is x times sqrt(mean(x**2) + eps), where it should be divided by it: tl.rsqrt(mean + eps) is "
         "1 / sqrt(mean + eps), multiply by that (or divide by tl.sqrt(mean + eps))"),
        (h * torch.rsqrt(h.pow(2).sum(-1, keepdim=True) + eps) * w64,
         f"the sum of squares is not divided by H ({H}): the mean of squares is tl.sum(x * x, axis=0) / n_cols"),
        (h * torch.rsqrt(ms + eps) * w64 * w64,
         "the weight is applied twice: y = x * rstd * weight, one multiplication by the weight"),
        (h / (torch.sqrt(ms) + eps) * w64,
         "eps is added after the square root: 1 / (sqrt(mean) + eps) is not rsqrt(mean + eps). Add eps to the "
         "mean of squares, then take tl.rsqrt"),
        (h * torch.rsqrt(ms) * w64,
         "eps is missing: rstd = 1 / sqrt(mean(x**2) + eps), with eps added inside the square root"),
        (h * (torch.rsqrt(ms) + eps) * w64,
         "eps is outside the square root: rsqrt(mean) + eps is not rsqrt(mean + eps). "
         "Add eps to the mean of squares, then take tl.rsqrt"),
        (h * torch.rsqrt(h.pow(2).sum(-1, keepdim=True) / block + eps) * w64,
         f"the mean of squares is divided by BLOCK ({block}) instead of H ({H}): the masked lanes hold 0 "
         "but they are not values of the row. Divide the sum by n_cols"),
        (h * torch.rsqrt(ms + eps),
         "the weight is not applied: y = x * rstd * weight"),
        ((h * w64) * torch.rsqrt((h * w64).pow(2).mean(-1, keepdim=True) + eps),
         "the weight is applied before normalizing: the mean of squares must be over x (+ residual) "
         "alone; multiply by the weight after the scale by rstd"),
    ]
    if r is not None:
        xr = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps) * w64
        out[:0] = [
            (xr, "y normalizes x alone: add the residual first, and normalize the sum x + residual "
                 "(the one you return)"),
            (xr + r.double().cpu(), "y is normalize(x) * weight + residual: the residual is added after the norm. "
                                    "Add it first, h = x + residual, and normalize h"),
            (x64 * torch.rsqrt(ms + eps) * w64, "y is x (without the residual) scaled by the rstd of x + residual: "
                                                "normalize the sum itself, y = h * rstd * weight with h = x + residual"),
        ]
    out.append((h * torch.rsqrt(h.mean(-1, keepdim=True) + eps) * w64,
                "the mean is taken over x, not x * x: the mean of squares is tl.sum(x * x, axis=0) / n_cols"))
    return out


def _close(o, ref, dtype) -> bool:
    atol, rtol = tolerance(dtype)
    ok = torch.isclose(o, ref, atol=2 * atol, rtol=2 * rtol, equal_nan=True)  # NaN where the model has NaN
    return bool(ok.float().mean() > 0.99)


def _y_hint(x, w, eps, r, note, dtype, layout="", trace_note=""):
    def hint(o, e, wrong):
        nan = torch.isnan(o)
        if note == "a row of zeros" and nan[1].all() and not nan[0].any():
            return ("a row of zeros gives NaN: 0 * rsqrt(0) is 0 * inf. eps belongs inside the square root, "
                    "rsqrt(mean(x**2) + eps), so that it never divides by 0")
        if note == "large values" and dtype == torch.float16:
            rows = o.reshape(-1, o.shape[-1])
            if ((rows.abs() < 1e-3) | torch.isnan(rows)).all(dim=-1).any():
                return ("rows of large fp16 values come out 0 (or NaN): the sum of squares overflowed fp16's "
                        "largest value, 65504, to inf. Compute the statistics in fp32: x = x.to(tl.float32) "
                        "before squaring")
        if trace_note:
            return trace_note
        for ref, text in _mistakes(x, w, eps, r, dtype):
            if not nan.all() and _close(o, ref, dtype):
                return text
        return layout or _layout_hint(o, note)
    return hint


def _sum_hint(x, r, y_expected, note, dtype, layout="", y_out=None, h_expected=None, trace_note=""):
    def hint(o, e, wrong):
        if torch.isnan(o).all():
            return ("h = x + residual was never written: store the sum, rounded to its dtype, at "
                    "sum_ptr + row * out_row_stride + cols (inside if HAS_RESIDUAL)")
        if trace_note:
            return trace_note
        if (y_out is not None and h_expected is not None and _close(o, y_expected, dtype)
                and _close(y_out.double().cpu(), h_expected, dtype)):
            return ("y and h = x + residual are swapped: the sum went to y and the normalized row to h. Store the "
                    "sum at sum_ptr + ... and the normalized row at y_ptr + ...")
        for ref, text in ((x, "the sum you returned is x: add the residual (h = x + residual) and store that"),
                          (r, "the sum you returned is the residual: store x + residual"),
                          (2 * x.double(), "the sum you returned is 2 * x: the residual is read from x's pointer. Load "
                                           "it at res_ptr + row * res_row_stride + cols"),
                          (y_expected, "the sum you returned holds the normalized output: store h = x + residual "
                                       "before normalizing it (is the variable overwritten by x * rstd first?)")):
            if not torch.isnan(o).any() and _close(o, ref.double().cpu(), dtype):
                return text
        return layout or _layout_hint(o, note)
    return hint


def _layout_hint(o, note):
    if note == "strided rows":
        return ("a strided input is wrong while contiguous ones pass: find row i of x at x_ptr + i * x.stride(0) "
                "(and the residual's at its own stride), not at i * H")
    rows = o.reshape(-1, o.shape[-1])
    nan = torch.isnan(rows)
    nan_cols = nan.any(dim=0).nonzero().flatten()
    if len(nan_cols) and int(nan_cols[0]) > 0 and bool(nan[:, int(nan_cols[0]):].all()):
        return (f"columns from {int(nan_cols[0])} on were never written: BLOCK must cover the whole row "
                "(triton.next_power_of_2(H))")
    if nan.all(dim=1).any() and not nan.all():
        return "some rows were never written: launch one program per row (grid = (rows,))"
    return ""


def _rows_hint(n_rows):
    def hint(bad, default):
        if all(o.program[0] >= n_rows for o in bad):
            return (f"programs past the last row touched memory: there are {n_rows} rows, so launch exactly "
                    "(rows,) programs, or mask every load and store of a program whose row >= n_rows")
        return ""
    return hint


def _stride_hint(x, r):
    """``oob_hint``: y or the sum stored (or the weight loaded) at an input's row stride."""
    H = x.shape[-1]
    others = [] if x.dim() < 2 else [("x's", x.stride(-2))] + ([("the residual's", r.stride(-2))] if r is not None else [])

    def hint(bad, default):
        if bad and all(o.kind == "load" and o.tensor in ("w", "weight") for o in bad):
            return ("your kernel loads the weight past its end: the weight is one vector of H values that every row "
                    "shares. Load it at w_ptr + cols, with no row offset, masked by cols < n_cols")
        stores = [o for o in bad if o.kind == "store" and o.program[0] > 0]
        for who, s in others:
            if s == H or not stores:
                continue
            if all(((o.offsets - o.program[0] * s >= 0) & (o.offsets - o.program[0] * s < H)).all() for o in stores):
                names = sorted({o.tensor for o in stores})
                return (f"your kernel stores {' and '.join(names)} at row * {who} row stride ({s}): y and h are new "
                        f"contiguous (rows, H) tensors, whose rows are out_row_stride ({H} here) apart. Store at "
                        "y_ptr + row * out_row_stride + cols (and sum_ptr + row * out_row_stride + cols)")
        return ""
    return hint


def _same_rows_note(outs, traces, n_rows) -> str:
    """A hint when the tracer saw one program a row launched, but the programs stored the same rows (several
    times) and left others unwritten: the row is not tl.program_id(0)."""
    for t in outs:
        if not isinstance(t, torch.Tensor) or t.dim() < 1 or t.numel() == 0:
            continue
        for tr, i in out_records(t, traces):
            if len(tr.launches) != 1 or tr.launches[0].num_programs < n_rows:
                continue
            counts = tr.read_counts(i, kind="store").reshape(-1, t.shape[-1])
            written = (counts > 0).any(axis=1)
            if written.all() or not written.any() or counts.max() <= 1:
                continue
            rows = written.nonzero()[0]
            which = "row 0" if list(rows) == [0] else f"rows {', '.join(map(str, rows[:6]))}"
            return (f"the grid has a program for each of the {n_rows} rows, but they all stored {which} (up to "
                    f"{int(counts.max())} times) and the other rows were never written: each program's row is "
                    "tl.program_id(0), axis 0 (tl.program_id(1) is 0 on this 1-D grid)")
    return ""


def _error_hint(exc, default):
    if "arange's range must be a power of 2" in str(exc):
        return ("tl.arange(0, BLOCK) needs a power of two: BLOCK = triton.next_power_of_2(H), and the mask "
                "cols < n_cols switches off the lanes past the row")
    return ""


def graded(label, fn, x, w, eps, r, dtype, note="", layout=""):
    """One call of ``fn(x, w, eps, r)``: the sum (with the residual), then y, then the inputs untouched.
    ``layout``: the hint of a layout case, for a failure that no model of a mistake explains."""
    n_rows = x.numel() // x.shape[-1]
    rows_hint, stride_hint = _rows_hint(n_rows), _stride_hint(x, r)
    g = graded_call(label, fn, (x, w, eps, r),
                    oob_hint=lambda bad, hint: rows_hint(bad, hint) or stride_hint(bad, hint) or layout,
                    mask="cols < n_cols", error_hint=_error_hint)
    if isinstance(g, Case):
        return g
    out = g.out
    y_exp, h_exp = _expected(x, w, eps, r, dtype)
    if out is None:
        return Case(label, "todo", "rmsnorm returned None", "return the output: y, or (y, h) with the residual")
    if r is None:
        if isinstance(out, (tuple, list)):
            return Case(label, "fail", f"returned a {type(out).__name__} of {len(out)} without a residual",
                        "without a residual, rmsnorm returns y alone (a tensor); only with residual= it returns "
                        "(y, x + residual)")
        note_ = _same_rows_note([out], g.traces, n_rows)
        outs = [("y", out, y_exp, _y_hint(x, w, eps, r, note, dtype, layout, note_))]
    else:
        if not (isinstance(out, (tuple, list)) and len(out) == 2 and all(isinstance(t, torch.Tensor) for t in out)):
            what = type(out).__name__ + (f" of {len(out)}" if isinstance(out, (tuple, list)) else "")
            return Case(label, "fail", f"with a residual, rmsnorm returned a {what}, not two tensors",
                        "with residual= given, return both outputs: return y, h, where h = x + residual "
                        "(the next block's residual stream) is written by the same kernel")
        note_ = _same_rows_note(out, g.traces, n_rows)
        outs = [("h = x + residual", out[1], h_exp, _sum_hint(x, r, y_exp, note, dtype, layout, out[0], h_exp, note_)),
                ("y", out[0], y_exp, _y_hint(x, w, eps, r, note, dtype, layout, note_))]
        if storage_overlap(out[0], out[1]):
            return Case(label, "fail", "y and the sum share memory",
                        "y and h = x + residual are one tensor (or overlap): each needs its own output, "
                        "y, h = torch.empty_like(x), torch.empty_like(x)")
    for what, t, _, _ in outs:
        bad = alias_case(f"{label}: {what}", t, g.inputs, "rmsnorm")
        if bad is not None:
            if what != "y":
                bad.hint += (" (vLLM's fused_add_rms_norm updates the residual in place; this lesson's API "
                             "returns a new tensor for the sum)")
            return bad
    atol, rtol = tolerance(dtype)
    if dtype == torch.float32:
        rtol = 1e-4  # a GPU's tl.rsqrt is approximate, and a long row's fp32 sum rounds
    for what, t, expected, diagnose in outs:
        case = written_case(f"{label}: {what}", t, expected, g, dtype=dtype, atol=atol, rtol=rtol, diagnose=diagnose)
        if case.status != "pass":
            return case
    changed = g.snap.case(label, "rmsnorm")
    return changed or loaded_again(label, g.traces, READS) or Case(label, "pass")


#: How often the fused kernel loads an element: x and the residual once, the outputs never (the weight, once a
#: row, is left out).
READS = {"x": (1, "x's row is loaded more than once: load it once, keep it in registers (in fp32) for the sum of "
                  "squares and the normalization, as the lesson's kernel does; a second read is the traffic "
                  "fusing saves"),
         "res": (1, "the residual's row is loaded more than once: load it once, add it to x in registers"),
         "sum": (0, "the kernel loads back h = x + residual, which it only writes: keep the rounded sum in registers "
                    "after storing it, and normalize that"),
         "y": (0, "the kernel loads from y, which it only writes: compute y in registers and store it once")}


def _batch_sliced(t, extra=3, pad=5):
    """(B, T, H) values as ``big[:, :T, :H]`` of a (B, T + extra, H + pad) buffer whose gaps hold INPUT_PAD: rows
    H + pad apart, batches (T + extra)(H + pad) apart, so that no single row stride describes its rows."""
    B, T, H = t.shape
    big = torch.full((B, T + extra, H + pad), INPUT_PAD, dtype=t.dtype, device=t.device)
    view = big[:, :T, :H]
    view.copy_(t)
    return view


def _time_strided(t):
    """(B, T, H) values as every other time step of a (B, 2T, H) buffer: one row stride, 2H."""
    B, T, H = t.shape
    big = torch.full((B, 2 * T, H), INPUT_PAD, dtype=t.dtype, device=t.device)
    view = big[:, ::2]
    view.copy_(t)
    return view


def _rows_padded3(t, pad=5):
    """(B, T, H) values whose rows are H + pad apart (``big[..., :H]``): one row stride, H + pad."""
    return _batch_sliced(t, extra=0, pad=pad)


def _stride_words(t):
    return f"strides {tuple(t.stride())}"


def _two_strides(x, r):
    return (f"x and the residual have rows of different strides here (x: {_stride_words(x)}, residual: "
            f"{_stride_words(r)}), while inputs of one layout passed. Read each at its own row stride, "
            "x_ptr + row * x_row_stride and res_ptr + row * res_row_stride, with each tensor's own stride(0) passed "
            "by the launcher (the residual's is not x's)")


# (what, shape, x's layout, the residual's (None: no residual), the weight's, the hint of a failure)
LAYOUTS = [
    ("x rows padded, residual contiguous", (6, 257), row_padded, padded, padded, _two_strides),
    ("x contiguous, residual rows padded", (6, 257), padded, row_padded, padded, _two_strides),
    ("x every other row, residual rows padded", (6, 257), sliced_rows, lambda t: row_padded(t, pad=3), padded,
     _two_strides),
    ("weight strided (every other element)", (6, 257), padded, padded, strided,
     lambda x, r: "the weight is a strided view here (stride 2), and the kernel reads w_ptr + cols: the launcher "
                  "must pass weight.contiguous() (or the kernel read w_ptr + cols * the weight's stride)"),
    ("x column-major, residual contiguous", (6, 257), transposed, padded, padded,
     lambda x, r: f"x is column-major here ({_stride_words(x)}), and the kernel reads a row as contiguous columns: "
                  "the launcher must copy such an x first (x.contiguous() when x.stride(-1) != 1)"),
    ("3-D, x[:, :T] of a longer buffer (no single row stride), residual contiguous", (3, 5, 96), _batch_sliced,
     padded, padded,
     lambda x, r: f"x is a (B, T, H) view here ({_stride_words(x)}) whose batches are not T rows apart, so no single "
                  "row stride describes its rows. View it as (rows, H), copying when needed (x.reshape(-1, H), as "
                  "the lesson's as_rows does), and pass that view's stride(0): x.stride(-2) alone is right only when "
                  "the batches are T rows apart"),
    ("3-D, x[:, :T] of a longer buffer, no residual", (3, 5, 96), _batch_sliced, None, padded,
     lambda x, r: f"x is a (B, T, H) view here ({_stride_words(x)}) whose batches are not T rows apart, so no single "
                  "row stride describes its rows. View it as (rows, H), copying when needed (x.reshape(-1, H), as "
                  "the lesson's as_rows does), and pass that view's stride(0)"),
    ("3-D, x rows padded, residual every other time step", (3, 5, 96), _rows_padded3, _time_strided, padded,
     lambda x, r: f"x and the residual are (B, T, H) views here (x: {_stride_words(x)}, residual: "
                  f"{_stride_words(r)}), each with rows one stride apart, x's {x.stride(-2)} and the residual's "
                  f"{r.stride(-2)}. View each as (rows, H) (t.view(-1, H) keeps the stride) and pass each one's own "
                  "stride(0)"),
]


def _layout_cases(mod, gen):
    """Every layout the API accepts, each tensor with strides of its own (float32: the layout is the point)."""
    for what, shape, x_layout, r_layout, w_layout, hint in LAYOUTS:
        x, r, w, eps = _inputs(shape, "", torch.float32, gen)
        x, w = x_layout(x), w_layout(w)
        r = r_layout(r) if r_layout is not None else None
        label = f"{'x'.join(map(str, shape))} float32, {what}"
        yield graded(label, mod.rmsnorm, x, w, eps, r, torch.float32, layout=hint(x, r))


def _row_offsets_case(mod, gen):
    """Row offsets in int64: row * row_stride passes 2**31 on a tensor of more than 2**31 elements (seen in the
    tracer: the offsets added to a pointer into x, the residual or an output, past one row, must be int64)."""
    from .decode_attention import narrow_offsets  # the same watch as the paged pool's

    x, r, w, eps = _inputs((80, 1000), "", torch.float32, gen)
    label = "80x1000 float32, with residual: row offsets in int64 (a tensor of more than 2**31 elements)"
    # rows reach past 65536 elements here, and a row's own lanes never do (a BLOCK is at most MAX_COLS = 32768,
    # even a hard-coded one): an int32 offset that large holds row * stride
    narrow = narrow_offsets(mod.rmsnorm, (padded(x), padded(w), eps, padded(r)), 2 * 32768,
                            lambda info: info.numel == x.numel())
    if narrow is None:
        return None
    if not narrow:
        return Case(label, "pass")
    name, ty, top = max(narrow, key=lambda n: n[2])
    return Case(label, "fail", f"the tracer saw {ty} offsets up to {top} elements added to the pointer {name}",
                "the row offsets are computed in int32: row * x_row_stride passes 2**31 once the tensor holds more "
                "than 2**31 elements (262144 rows of 8192, a long prefill), and the address wraps around. Make the "
                "row int64 before multiplying: row = tl.program_id(0).to(tl.int64)")


def grade(mod):
    gen = torch.Generator().manual_seed(0)
    dtypes = [d for d in mode.float_dtypes() if d != torch.float32]
    for dtype in [torch.float32] + dtypes:
        for shape, note in SHAPES:
            if note == "large values" and dtype == torch.float32:
                continue  # fp32 holds these sums: the case is about fp16 (and bf16 on a GPU)
            x, r, w, eps = _inputs(shape, note, dtype, gen)
            base = f"{'x'.join(map(str, shape))} {str(dtype)[6:]}" + (f" ({note})" if note else "")
            for res in ((r, None) if note not in ("many rows", "3-D") else (r,)):
                label = base + (", with residual" if res is not None else ", no residual")
                yield graded(label, mod.rmsnorm, x, w, eps, res, dtype, note)
    yield from _layout_cases(mod, gen)
    case = _row_offsets_case(mod, gen)
    if case is not None:
        yield case
    seed, lengths = random_sizes(*N_RANDOM)
    for H in lengths:
        rows = max(1, min(600, MAX_RANDOM_ELEMENTS // H))
        x, r, w, eps = _inputs((rows, H), "", torch.float32, gen)
        yield graded(seeded(f"{rows}x{H} float32, with residual", seed), mod.rmsnorm, x, w, eps, r, torch.float32)
    dev = mode.DEVICE
    yield refuses("a weight of the wrong length raises ValueError", mod.rmsnorm,
                  torch.ones(2, 8, device=dev), torch.ones(7, device=dev),
                  hint="check weight: 1-D, of length H = x.shape[-1]; raise ValueError otherwise")
    yield refuses("a residual of another shape raises ValueError", mod.rmsnorm,
                  torch.ones(2, 8, device=dev), torch.ones(8, device=dev), 1e-6, torch.ones(3, 8, device=dev),
                  hint="check residual: the shape and dtype of x; raise ValueError otherwise")
    yield refuses("eps <= 0 raises ValueError", mod.rmsnorm, torch.ones(2, 8, device=dev),
                  torch.ones(8, device=dev), 0.0,
                  hint="eps must be > 0 (a row of zeros would divide by 0): raise ValueError for eps <= 0")
