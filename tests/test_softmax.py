"""Lesson 02: the fused softmax matches torch on awkward shapes, strided rows and huge inputs."""

import pytest
import torch
import triton
import triton.language as tl
from helpers import assert_grader_catches, assert_softmax
from helpers import randn as _randn

from solutions import softmax as lesson
from tkcourse import mode

DEV = mode.DEVICE


def _assert_softmax(out, x):
    assert_softmax(out, x, lesson.reference)


@pytest.mark.parametrize("dtype", mode.float_dtypes())
@pytest.mark.parametrize("n_cols", [1, 3, 17, 1000, 1025])
def test_matches_torch(n_cols, dtype):
    x = _randn(5, n_cols, dtype=dtype, scale=3.0)
    _assert_softmax(lesson.softmax(x), x)


def test_longest_row_and_many_rows():
    x = _randn(2, lesson.MAX_COLS, scale=3.0)
    _assert_softmax(lesson.softmax(x), x)
    x = _randn(300, 7, dtype=torch.float16)
    _assert_softmax(lesson.softmax(x), x)


def test_large_magnitudes_do_not_overflow():
    x = _randn(4, 300, scale=200.0) + 1e4  # exp(x) is inf in fp32: the max must be subtracted first
    assert torch.isinf(torch.exp(x)).any()
    _assert_softmax(lesson.softmax(x), x)
    xh = _randn(4, 300, dtype=torch.float16, scale=30.0)  # exp(x) overflows fp16 past x = 11
    assert torch.isinf(torch.exp(xh)).any()
    _assert_softmax(lesson.softmax(xh), xh)


def test_strided_rows_are_read_in_place():
    base = _randn(20, 300)
    x = base[::3, 5:262]  # row stride 900, 257 contiguous columns
    assert not x.is_contiguous() and x.stride(1) == 1
    _assert_softmax(lesson.softmax(x), x)
    b = _randn(1, 64).expand(6, 64)  # row stride 0: six views of one row
    _assert_softmax(lesson.softmax(b), b)


def test_strided_columns_are_copied():
    x = _randn(130, 9).t()  # column stride 9
    assert x.stride(1) != 1
    _assert_softmax(lesson.softmax(x), x)


def test_naive_softmax_matches():
    x = _randn(6, 100, scale=5.0)
    torch.testing.assert_close(lesson.naive_softmax(x), lesson.reference(x), rtol=1e-5, atol=1e-7)


def test_row_too_long_points_to_lesson_05():
    x = torch.zeros(1, lesson.MAX_COLS + 1, device=DEV)
    with pytest.raises(ValueError, match="online"):
        lesson.softmax(x)


@pytest.mark.parametrize("bad, message", [
    (lambda: torch.ones(8, device=DEV), "2-D"),
    (lambda: torch.ones(0, 4, device=DEV), "empty"),
    (lambda: torch.ones(2, 4, dtype=torch.int32, device=DEV), "dtype"),
])
def test_bad_input_raises_valueerror(bad, message):
    with pytest.raises(ValueError, match=message):
        lesson.softmax(bad())


@pytest.mark.skipif(not mode.INTERPRET, reason="bf16 is fine on a GPU")
def test_bf16_refused_in_interpreter():
    with pytest.raises(mode.UnsupportedInInterpreter):
        lesson.softmax(torch.ones(2, 4, dtype=torch.bfloat16))


# ----- the inputs above catch the classic mistakes -------------------------------------------


@triton.jit
def _planted(x_ptr, out_ptr, x_row_stride, n_cols, BLOCK: tl.constexpr, SUB_MAX: tl.constexpr, FILL: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=cols < n_cols, other=FILL).to(tl.float32)
    if SUB_MAX:
        x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    tl.store(out_ptr + row * n_cols + cols, num / tl.sum(num, axis=0), mask=cols < n_cols)


def _run_planted(x, sub_max, fill):
    out = torch.empty_like(x)
    _planted[(x.shape[0],)](x, out, x.stride(0), x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]),
                            SUB_MAX=sub_max, FILL=fill)
    return out


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the overflow is the point
def test_planted_mistakes_are_caught():
    good = _randn(3, 17, scale=3.0)
    _assert_softmax(_run_planted(good, True, float("-inf")), good)  # the planted kernel done right passes
    big = _randn(3, 17, scale=200.0)
    with pytest.raises(AssertionError):  # no max subtracted: exp overflows to inf, inf / inf = nan
        _assert_softmax(_run_planted(big, False, float("-inf")), big)
    with pytest.raises(AssertionError):  # masked lanes filled with 0: exp(0 - max) joins the sum
        _assert_softmax(_run_planted(good, True, 0.0), good)


# ----- the grader catches planted mistakes, each with the hint that names it ------------------

import types  # noqa: E402

from tkcourse import check  # noqa: E402


@triton.jit
def _grader_planted(x_ptr, out_ptr, x_stride, out_stride, n_cols, BLOCK: tl.constexpr, BUG: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    stride = n_cols if BUG == "stride" else x_stride
    other = 0.0 if BUG == "other" else float("-inf")
    if BUG == "loadnomask":  # the loaded lanes past the row are then masked out by hand: the load is not
        x = tl.load(x_ptr + row * stride + cols).to(tl.float32)
        x = tl.where(mask, x, float("-inf"))
    else:
        x = tl.load(x_ptr + row * stride + cols, mask=mask, other=other).to(tl.float32)
    z = x if BUG == "nomax" else x - tl.max(x, axis=0)
    num = tl.exp2(z) if BUG == "exp2" else tl.exp(z)  # exp2 without the log2(e) factor: 2**z
    y = num / tl.sum(x, axis=0) if BUG == "sum_x" else num / tl.sum(num, axis=0)
    store_mask = cols <= n_cols if BUG == "store_le" else mask
    out_row = row * out_stride * 1000 if BUG == "far" else row * x_stride if BUG == "out_x_stride" else row * out_stride
    tl.store(out_ptr + out_row + cols, y.to(out_ptr.dtype.element_ty), mask=store_mask)


def _softmax_module(bug, block=None, rows=None, contiguous=True, alloc=None, into=None, inplace=False, col_strides=False):
    """A planted ``softmax``; ``alloc(x)`` makes the output, ``into="x"`` writes over x and returns it,
    ``inplace`` subtracts the row max from x in place first ("for stability")."""
    def softmax(x):
        if x.shape[1] > 32768:
            raise ValueError("too long: see lesson 05 (online softmax)")
        if contiguous and x.stride(1) != 1:
            x = x.contiguous()
        if inplace:
            x -= x.max(dim=1, keepdim=True).values
        out = x if into == "x" else alloc(x) if alloc else torch.empty_like(x)
        BLOCK = block or triton.next_power_of_2(x.shape[1])
        grid = (rows(x.shape[0]) if rows else x.shape[0],)
        strides = (x.stride(1), out.stride(1)) if col_strides else (x.stride(0), out.stride(0))
        _grader_planted[grid](x, out, *strides, x.shape[1], BLOCK=min(BLOCK, triton.next_power_of_2(x.shape[1])), BUG=bug)
        return out
    return types.SimpleNamespace(softmax=softmax, __name__="planted")


@pytest.mark.parametrize("name, module, hint", [
    ("no max subtraction", _softmax_module("nomax"), "Subtract the row max"),
    ("masked lanes loaded as 0", _softmax_module("other"), "masked lanes count in the sum"),
    ("row stride ignored", _softmax_module("stride"), "x.stride(0)"),
    ("BLOCK too small", _softmax_module("none", block=512), "BLOCK must cover the whole row"),
    ("first rows only", _softmax_module("none", rows=lambda m: min(m, 2)), "some rows were never written"),
    # classes the fixed shapes and torch.empty canaries alone let through (issue 17)
    ("transposed x read as row-major", _softmax_module("none", contiguous=False), "x = x.contiguous()"),
    ("result written over x, x returned", _softmax_module("none", into="x"), "returned x itself"),
    ("row max subtracted from x in place", _softmax_module("none", inplace=True), "changed its input x"),
    ("store one past the end of a zero-filled output", _softmax_module("store_le", alloc=torch.zeros_like),
     "stores one element past the end of out"),
    ("loads past the end under a masked store", _softmax_module("loadnomask"), "loads past the end of x"),
    ("tl.exp2 without log2(e)", _softmax_module("exp2"), "tl.exp2(x) needs x * log2(e)"),
    # mistakes whose first hints named another (a masked store, the row loop, the masked lanes)
    ("out's row found with x's stride", _softmax_module("out_x_stride"), "stores whole blocks past the end of out"),
    ("divided by the sum of x", _softmax_module("sum_x"), "divide by the sum of the exponentials"),
    ("the column strides passed for the rows", _softmax_module("none", col_strides=True), "the rows overlap"),
])
def test_grader_catches_planted_mistake(name, module, hint):
    assert_grader_catches("softmax", module, name, hint)


def test_hard_coded_block_is_caught_at_a_seeded_random_shape():
    rep = assert_grader_catches("softmax", _softmax_module("none", block=2048), "hard-coded BLOCK",
                                "BLOCK must cover the whole row")
    assert "TKCOURSE_CHECK_SEED=" in rep.first_problem().label


def test_grader_survives_a_store_far_past_a_zero_filled_output():
    """Once this crashed the grading process (free(): invalid pointer): the tracer masks the stores off."""
    rep = check.run("softmax", module=_softmax_module("far", alloc=torch.zeros_like), quiet=True)
    assert rep.status == "fail" and "far past the end of out" in rep.first_problem().hint, rep


def test_grader_passes_a_correct_planted_kernel():
    assert check.run("softmax", module=_softmax_module("none"), quiet=True).passed
