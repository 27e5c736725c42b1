"""Lesson 09, part 1: the fused RMSNorm (+ residual add) matches torch, reads strided rows, refuses bad
input; its grader catches each planted mistake with the hint that names it."""

import types
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl
from helpers import assert_grader_catches, mutant
from helpers import randn as _randn

from solutions import rmsnorm as lesson
from tkcourse import check, mode

DEV = mode.DEVICE


def _tol(dtype):
    # one rounding of the output: fp16 keeps 11 bits, bf16 8 (a GPU runs bf16; the interpreter refuses it)
    return {torch.float16: dict(rtol=2e-3, atol=2e-3), torch.bfloat16: dict(rtol=1e-2, atol=1e-2)}.get(
        dtype, dict(rtol=1e-4, atol=1e-5))


def _rms64(h, w, eps):
    h = h.double()
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * w.double()


@pytest.mark.parametrize("dtype", mode.float_dtypes())
@pytest.mark.parametrize("shape", [(5, 1), (4, 3), (6, 1000), (3, 1025), (2, 3, 96)])
def test_matches_float64(shape, dtype):
    x, r = _randn(*shape, dtype=dtype, seed=1), _randn(*shape, dtype=dtype, seed=2)
    w = (1 + 0.5 * _randn(shape[-1], seed=3)).to(dtype)
    y = lesson.rmsnorm(x, w)
    assert y.dtype == dtype and y.shape == x.shape
    torch.testing.assert_close(y.double(), _rms64(x, w, 1e-6), **_tol(dtype))
    y, h = lesson.rmsnorm(x, w, residual=r)
    h_exp = (x.double() + r.double()).to(dtype)
    assert torch.equal(h, h_exp)  # one rounding of an exact fp64 sum: the kernel adds in fp32
    torch.testing.assert_close(y.double(), _rms64(h_exp, w, 1e-6), **_tol(dtype))


@pytest.mark.parametrize("dtype", mode.float_dtypes())
def test_reference_and_eager_agree_with_float64(dtype):
    x, r = _randn(7, 300, dtype=dtype, seed=4), _randn(7, 300, dtype=dtype, seed=5)
    w = (1 + 0.5 * _randn(300, seed=6)).to(dtype)
    for fn in (lesson.reference, lesson.eager_rmsnorm):
        y, h = fn(x, w, 1e-5, r)
        torch.testing.assert_close(y.double(), _rms64(h, w, 1e-5), rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(lesson.reference(x, w, 1e-5).double(), _rms64(x, w, 1e-5), **_tol(dtype))


def test_fp32_statistics_survive_large_fp16_values():
    x = _randn(3, 4096, dtype=torch.float16, scale=60.0)
    assert torch.isinf((x * x).sum(-1, dtype=torch.float16)).all()  # fp16 statistics would overflow
    w = torch.ones(4096, dtype=torch.float16, device=DEV)
    torch.testing.assert_close(lesson.rmsnorm(x, w).double(), _rms64(x, w, 1e-6), rtol=2e-3, atol=2e-3)


def test_eps_inside_the_root_and_zero_rows():
    x = torch.zeros(2, 64, device=DEV)
    assert torch.equal(lesson.rmsnorm(x, torch.ones(64, device=DEV)), x)  # no 0 / 0
    x = _randn(2, 64, scale=1e-3)
    w = torch.ones(64, device=DEV)
    torch.testing.assert_close(lesson.rmsnorm(x, w, eps=1e-6).double(), _rms64(x, w, 1e-6), rtol=1e-4, atol=1e-6)


def test_strided_rows_are_read_in_place_and_outputs_are_new():
    base, rbase = _randn(20, 300), _randn(20, 300, seed=9)
    x, r = base[::3, 5:262], rbase[::3, 5:262]
    w = _randn(257, seed=7)
    y, h = lesson.rmsnorm(x, w, residual=r)
    torch.testing.assert_close(h, x + r)
    torch.testing.assert_close(y.double(), _rms64(x + r, w, 1e-6), rtol=1e-4, atol=1e-5)
    assert y.is_contiguous() and h.is_contiguous() and h.data_ptr() not in (x.data_ptr(), r.data_ptr())
    xt = _randn(64, 9).t()  # columns strided: copied first
    torch.testing.assert_close(lesson.rmsnorm(xt, torch.ones(64, device=DEV)).double(),
                               _rms64(xt, torch.ones(64, device=DEV), 1e-6), rtol=1e-4, atol=1e-5)


def test_weight_may_be_fp32_for_fp16_x():
    x = _randn(4, 100, dtype=torch.float16)
    w = 1 + _randn(100, seed=3)
    torch.testing.assert_close(lesson.rmsnorm(x, w).double(), _rms64(x, w, 1e-6), rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("args, error, message", [
    (lambda: (torch.ones(2, 8, device=DEV), torch.ones(7, device=DEV)), ValueError, "length H"),
    (lambda: (torch.ones(2, 8, device=DEV), torch.ones(2, 8, device=DEV)), ValueError, "1-D"),
    (lambda: (torch.ones(2, 8, device=DEV), torch.ones(8, device=DEV), 0.0), ValueError, "eps"),
    (lambda: (torch.ones(2, 8, device=DEV), torch.ones(8, device=DEV), -1e-5), ValueError, "eps"),
    (lambda: (torch.ones(2, 8, device=DEV), torch.ones(8, device=DEV), "1e-6"), TypeError, "eps"),
    (lambda: (torch.ones(2, 8, device=DEV), torch.ones(8, device=DEV), 1e-6, torch.ones(3, 8, device=DEV)),
     ValueError, "shape"),
    (lambda: (torch.ones(2, 8, device=DEV), torch.ones(8, device=DEV), 1e-6,
              torch.ones(2, 8, dtype=torch.float16, device=DEV)), ValueError, "dtype"),
    (lambda: (torch.ones(2, 8, dtype=torch.int32, device=DEV), torch.ones(8, device=DEV)), ValueError, "dtype"),
    (lambda: (torch.ones(2, 8, dtype=torch.float16, device=DEV), torch.ones(8, dtype=torch.float64, device=DEV)),
     ValueError, "dtype"),
    (lambda: (torch.ones(0, 8, device=DEV), torch.ones(8, device=DEV)), ValueError, "empty"),
    (lambda: (torch.ones(1, lesson.MAX_COLS + 1, device=DEV), torch.ones(lesson.MAX_COLS + 1, device=DEV)),
     ValueError, "MAX_COLS"),
    (lambda: ([1.0, 2.0], torch.ones(2, device=DEV)), ValueError, "torch.Tensor"),
])
def test_bad_input_is_refused(args, error, message):
    with pytest.raises(error, match=message):
        lesson.rmsnorm(*args())


@pytest.mark.skipif(mode.INTERPRET, reason="needs a second device: a GPU")
def test_weight_on_another_device_is_refused():
    with pytest.raises(ValueError, match="weight is on cpu.*move it"):
        lesson.rmsnorm(torch.ones(2, 8, device=DEV), torch.ones(8))


@pytest.mark.skipif(not mode.INTERPRET, reason="bf16 is fine on a GPU")
def test_bf16_refused_in_interpreter():
    with pytest.raises(mode.UnsupportedInInterpreter):
        lesson.rmsnorm(torch.ones(2, 4, dtype=torch.bfloat16), torch.ones(4, dtype=torch.bfloat16))


# ----- the grader catches planted mistakes, each with the hint that names it ------------------


@triton.jit
def _planted(x_ptr, r_ptr, w_ptr, y_ptr, h_ptr, x_stride, r_stride, n_rows, n_cols, eps,
             HAS_RES: tl.constexpr, BLOCK: tl.constexpr, BUG: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)  # row * stride can pass 2**31 on a big tensor
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    xs = n_cols if BUG == "contiguous" else x_stride
    rs = n_cols if BUG == "contiguous" else r_stride
    x = tl.load(x_ptr + row * xs + cols, mask=mask, other=0.0)
    if HAS_RES:
        r = tl.load(r_ptr + row * rs + cols, mask=mask, other=0.0)
        if BUG != "no_add":
            x = (x.to(tl.float32) + r.to(tl.float32)).to(h_ptr.dtype.element_ty)
        if BUG != "store_normalized":
            tl.store(h_ptr + row * n_cols + cols, x, mask=mask)
    if BUG != "fp16_stats":
        x = x.to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    if BUG == "weight_first":
        x = x * w
    n = BLOCK if BUG == "mean_block" else n_cols
    ms = tl.sum(x * x, axis=0) / n
    if BUG == "eps_outside":
        rstd = tl.rsqrt(ms) + eps
    elif BUG == "no_eps":
        rstd = tl.rsqrt(ms.to(tl.float32))
    else:
        rstd = tl.rsqrt(ms.to(tl.float32) + eps)
    y = x * rstd
    if BUG == "store_normalized":
        x = y * w  # the variable reused: the "sum" stored below is the normalized row
        tl.store(h_ptr + row * n_cols + cols, x.to(h_ptr.dtype.element_ty), mask=mask)
    if BUG != "weight_first" and BUG != "no_weight":
        y = y * w
    store_mask = cols <= n_cols if BUG == "store_le" else mask
    tl.store(y_ptr + row * n_cols + cols, y.to(y_ptr.dtype.element_ty), mask=store_mask)


def _module(bug="none", block=None, grid=None, returns="both", torch_sum=False, into_residual=False):
    """A planted ``rmsnorm``: ``grid(rows)`` programs, ``block`` hard-coded, ``returns`` "y" drops the sum,
    ``torch_sum`` adds in torch (the kernel then normalizes x alone), ``into_residual`` writes the sum over
    the residual and returns it (vLLM's in-place convention)."""
    def rmsnorm(x, weight, eps=1e-6, residual=None):
        if weight.shape != (x.shape[-1],) or eps <= 0 or (residual is not None and residual.shape != x.shape):
            raise ValueError("bad input")
        H = x.shape[-1]
        x2 = x.reshape(-1, H) if x.stride(-1) == 1 else x.contiguous().reshape(-1, H)
        r2 = residual.reshape(-1, H) if residual is not None else x2
        y = torch.empty(x2.shape, dtype=x.dtype, device=x.device)
        h = r2 if into_residual else torch.empty_like(y)
        BLOCK = block or triton.next_power_of_2(H)
        n_rows = x2.shape[0]
        has_res = residual is not None and not torch_sum
        _planted[(grid(n_rows) if grid else n_rows,)](x2, r2, weight.contiguous(), y, h, x2.stride(0), r2.stride(0), n_rows, H,
                                                    eps, HAS_RES=has_res, BLOCK=BLOCK, BUG=bug)
        y = y.view(x.shape)
        if residual is None:
            return y
        if torch_sum:
            return y, x + residual
        return y if returns == "y" else (y, h.view(x.shape))
    return types.SimpleNamespace(rmsnorm=rmsnorm, __name__="planted")


@pytest.mark.parametrize("name, module, hint", [
    ("eps outside the root", _module("eps_outside"), "eps is outside the square root"),
    ("eps forgotten", _module("no_eps"), "eps is missing"),
    ("statistics in fp16", _module("fp16_stats"), "Compute the statistics in fp32"),
    ("mean over BLOCK, not H", _module("mean_block"), "divided by BLOCK"),
    ("residual not added", _module("no_add"), "the sum you returned is x"),
    ("the sum added in torch, x normalized", _module(torch_sum=True), "y normalizes x alone"),
    ("the sum not returned", _module(returns="y"), "return both outputs"),
    ("the sum written after normalizing", _module("store_normalized"), "holds the normalized output"),
    ("weight not applied", _module("no_weight"), "the weight is not applied"),
    ("weight applied before normalizing", _module("weight_first"), "the weight is applied before normalizing"),
    ("rows past the end", _module(grid=lambda n: triton.cdiv(n, 8) * 8), "programs past the last row"),
    ("first rows only", _module(grid=lambda n: min(n, 2)), "some rows were never written"),
    ("strided rows read as contiguous", _module("contiguous"), "x.stride(0)"),
    ("the sum written over the residual", _module(into_residual=True), "returned residual itself"),
    ("BLOCK too small", _module(block=512), "BLOCK must cover the whole row"),
    ("store one past the end", _module("store_le"), "past the end"),
])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the fp16 overflow is the point
def test_grader_catches_planted_mistake(name, module, hint):
    assert_grader_catches("rmsnorm", module, name, hint)


def test_hard_coded_block_is_caught_at_a_seeded_random_length():
    rep = assert_grader_catches("rmsnorm", _module(block=4096), "hard-coded BLOCK", "BLOCK must cover the whole row")
    assert "TKCOURSE_CHECK_SEED=" in rep.first_problem().label


def test_hard_coded_grid_is_caught_at_a_seeded_random_shape():
    rep = assert_grader_catches("rmsnorm", _module(grid=lambda n: min(n, 300)), "hard-coded grid",
                                "some rows were never written")
    assert "TKCOURSE_CHECK_SEED=" in rep.first_problem().label


def test_grader_passes_a_correct_planted_kernel_and_the_solution():
    assert check.run("rmsnorm", module=_module(), quiet=True).passed
    assert check.run("rmsnorm", module=lesson, quiet=True).passed


def test_grader_survives_a_kernel_that_returns_garbage():
    mod = types.SimpleNamespace(rmsnorm=lambda x, w, eps=1e-6, residual=None: "y", __name__="planted")
    rep = check.run("rmsnorm", module=mod, quiet=True)
    assert rep.status == "fail", rep


# ----- layouts: the solution's source with one mistake written in, run through the grader ---------

SOURCE = (Path(__file__).resolve().parents[1] / "solutions" / "rmsnorm.py").read_text()


def _mutant(*edits, name="planted_rmsnorm"):
    """solutions/rmsnorm.py with each ``(old, new)`` of ``edits`` applied (each ``old`` found exactly once)."""
    return mutant(SOURCE, edits, name, "solutions/rmsnorm.py")


LAYOUT_MISTAKES = [
    ("the kernel reads the residual at x's row stride", [("res_ptr + row * res_row_stride", "res_ptr + row * x_row_stride")],
     "x rows padded, residual contiguous", "the residual's is not x's"),
    ("the launcher passes x's row stride for the residual", [("x2.stride(0), r2.stride(0)", "x2.stride(0), x2.stride(0)")],
     "x rows padded, residual contiguous", "the residual's is not x's"),
    ("a strided weight read as contiguous", [("    weight = weight.contiguous()\n", "")],
     "weight strided", "weight.contiguous()"),
    ("a column-major x not copied", [("if t.stride(-1) != 1:", "if False:")],
     "x column-major", "copy such an x first"),
    ("a 3-D x read at x.stride(-2)",
     [("    x2 = as_rows(x)\n    r2 = as_rows(residual) if residual is not None else x2",
       "    x2 = x if x.stride(-1) == 1 else x.contiguous()\n    r2 = residual if residual is not None else x2"),
      ("x2.stride(0), r2.stride(0)", "x2.stride(-2), r2.stride(-2)"), ("n_rows = x2.shape[0]", "n_rows = x2.numel() // H")],
     "3-D, x[:, :T] of a longer buffer", "no single row stride describes its rows"),
    ("int32 row offsets", [("row = tl.program_id(0).to(tl.int64)", "row = tl.program_id(0)")],
     "row offsets in int64", "row = tl.program_id(0).to(tl.int64)"),
]


@pytest.mark.parametrize("name, edits, where, hint", LAYOUT_MISTAKES, ids=[m[0] for m in LAYOUT_MISTAKES])
def test_grader_catches_a_layout_mistake(name, edits, where, hint):
    rep = assert_grader_catches("rmsnorm", _mutant(*edits), name, hint)
    assert where in rep.first_problem().label, rep


def test_grader_passes_a_faithful_copy():
    assert check.run("rmsnorm", module=_mutant(), quiet=True).passed


# ----- more learner's mistakes, written into the solution: each is caught and its hint names it -----------

LOAD_X = "x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0)"
LOAD_R = "r = tl.load(res_ptr + row * res_row_stride + cols, mask=mask, other=0.0)"
ADD = "x = (x.to(tl.float32) + r.to(tl.float32)).to(sum_ptr.dtype.element_ty)"
STORE_H = "tl.store(sum_ptr + row * out_row_stride + cols, x, mask=mask)"
STORE_Y = "tl.store(y_ptr + row * out_row_stride + cols, y.to(y_ptr.dtype.element_ty), mask=mask)"
MEAN = "mean_sq = tl.sum(x * x, axis=0) / n_cols"
RSTD = "rstd = tl.rsqrt(mean_sq + eps)"
SCALE = "y = x * rstd * w "

KERNEL_MISTAKES = [
    ("tl.sqrt for tl.rsqrt", [(RSTD, "rstd = tl.sqrt(mean_sq + eps)")], "where it should be divided by it"),
    ("the sum of squares, not the mean", [(MEAN, "mean_sq = tl.sum(x * x, axis=0)")], "is not divided by H"),
    ("the mean of x, not of x * x", [(MEAN, "mean_sq = tl.sum(x, axis=0) / n_cols")], "not x * x"),
    ("the weight applied twice", [(SCALE, "y = x * rstd * w * w ")], "the weight is applied twice"),
    ("eps after the square root", [(RSTD, "rstd = 1.0 / (tl.sqrt(mean_sq) + eps)")],
     "eps is added after the square root"),
    ("the sum never stored", [(STORE_H, "pass")], "h = x + residual was never written"),
    ("the residual added after the norm",
     [(ADD, ADD.replace("x = ", "h = ")), (STORE_H, STORE_H.replace(", x,", ", h,")),
      (SCALE, SCALE + "\n    if HAS_RESIDUAL:\n        y = y + r.to(tl.float32)\n    ")],
     "the residual is added after the norm"),
    ("x scaled by the sum's rstd",
     [(ADD, ADD.replace("x = ", "h = ")),
      (STORE_H, STORE_H.replace(", x,", ", h,") + "\n        hf = h.to(tl.float32)\n    else:\n        hf = x.to(tl.float32)"),
      (MEAN, "mean_sq = tl.sum(hf * hf, axis=0) / n_cols")], "scaled by the rstd of x + residual"),
    ("the residual read from x's pointer", [(LOAD_R, LOAD_R.replace("res_ptr + row * res_row_stride",
                                                                    "x_ptr + row * x_row_stride"))],
     "the residual is read from x's pointer"),
    ("y and the sum stored to each other's pointer",
     [(STORE_H, STORE_H.replace("sum_ptr", "y_ptr")), (STORE_Y, STORE_Y.replace("y_ptr + row", "sum_ptr + row"))],
     "are swapped"),
    ("x read at the residual's row stride", [(LOAD_X, LOAD_X.replace("x_row_stride", "res_row_stride"))],
     "the residual's is not x's"),
    ("y stored at x's row stride", [(STORE_Y, STORE_Y.replace("out_row_stride", "x_row_stride"))],
     "stores y at row * x's row stride"),
    ("the sum stored at x's row stride", [(STORE_H, STORE_H.replace("out_row_stride", "x_row_stride"))],
     "stores sum at row * x's row stride"),
    ("the weight read at the row's offset", [("tl.load(w_ptr + cols", "tl.load(w_ptr + row * x_row_stride + cols")],
     "the weight is one vector of H values"),
    ("the row from program_id(1)", [("row = tl.program_id(0).to(tl.int64)", "row = tl.program_id(1).to(tl.int64)")],
     "tl.program_id(1) is 0 on this 1-D grid"),
    ("BLOCK = H", [("BLOCK = triton.next_power_of_2(H)  #", "BLOCK = H  #")], "tl.arange(0, BLOCK) needs a power of two"),
    ("the masks with <=", [("mask = cols < n_cols ", "mask = cols <= n_cols ")], "<= where < belongs"),
]


@pytest.mark.parametrize("name, edits, hint", KERNEL_MISTAKES, ids=[m[0] for m in KERNEL_MISTAKES])
def test_grader_names_a_kernel_mistake(name, edits, hint):
    assert_grader_catches("rmsnorm", _mutant(*edits), name, hint)
