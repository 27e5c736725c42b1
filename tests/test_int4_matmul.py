"""Lesson 10: weight-only int4 matmul. quantize / dequantize round trip, the layout, the kernel against float64,
the refusals; and the grader against the solution with one learner's mistake written in at a time, each caught
with the hint that names it."""

import types
from pathlib import Path

import pytest
import torch
from helpers import assert_grader_catches, assert_grader_reports, mutant
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from solutions import int4_matmul as lesson
from tkcourse import check, mode, stubs
from tkcourse.check import int4_matmul as grader

DEV = mode.DEVICE


def _weights(N, K, dtype=torch.float16, seed=0, scale=None):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(N, K, generator=g) * (scale or K ** -0.5)).to(dtype).to(DEV)


def _x(M, K, dtype=torch.float16, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(M, K, generator=g).to(dtype).to(DEV)


# ----- quantize, the layout, dequantize -----------------------------------------------------------------


@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(N=st.integers(1, 9), groups=st.integers(1, 4), group_size=st.sampled_from([2, 8, 32, 64, 128]),
       scale=st.sampled_from([1e-3, 0.1, 3.0]), seed=st.integers(0, 2 ** 16),
       dtype=st.sampled_from([torch.float16, torch.bfloat16, torch.float32]))
def test_round_trip_error_is_at_most_half_a_step(N, groups, group_size, scale, seed, dtype):
    """Each weight comes back within scale / 2 of itself, the scale of its own group (plus the rounding of the
    result to the scales' dtype): quantize and dequantize are torch, so this runs in any mode."""
    K = groups * group_size
    w = _weights(N, K, dtype, seed, scale)
    packed, scales = lesson.quantize(w, group_size)
    assert packed.shape == (N, K // 2) and packed.dtype == torch.uint8
    assert scales.shape == (N, groups) and scales.dtype == dtype
    back = lesson.dequantize(packed, scales, group_size)
    assert back.shape == w.shape and back.dtype == dtype
    step = scales.float().repeat_interleave(group_size, dim=1)
    rounding = back.float().abs() * torch.finfo(dtype).eps  # back is rounded once to dtype
    err = (back.float() - w.float()).abs()
    assert bool((err <= step / 2 * (1 + 1e-3) + rounding + 1e-12).all()), float((err - step / 2).max())


def test_the_layout_low_nibbles_then_high_nibbles():
    """Byte j of row n: q[n, j] in bits 0-3, q[n, j + K/2] in bits 4-7, two's complement."""
    q = torch.tensor([[-7, -1, 0, 7, 3, -4, 1, -8 + 1]], dtype=torch.float32)
    packed, scales = lesson.quantize(q.to(DEV).half(), group_size=8)
    assert float(scales[0, 0]) == 1.0  # max |q| / 7
    lo, hi = q[0, :4].to(torch.int64) & 0xF, q[0, 4:].to(torch.int64) & 0xF
    assert packed[0].cpu().tolist() == (lo | (hi << 4)).tolist()
    assert torch.equal(lesson.unpack(packed).cpu(), q.to(torch.int8))
    assert torch.equal(grader.weight(packed, scales, 8), q.double())  # the grader's own unpacking agrees


def test_quantized_values_are_symmetric_and_never_minus_eight():
    w = _weights(16, 256, seed=3)
    q = lesson.unpack(lesson.quantize(w, 64)[0])
    assert int(q.min()) >= -7 and int(q.max()) <= 7 and {-7, 7} <= set(q.unique().tolist())


def test_a_group_of_zeros_has_scale_zero_and_comes_back_zero():
    w = _weights(2, 128)
    w[1, 64:] = 0
    packed, scales = lesson.quantize(w, 64)
    assert float(scales[1, 1]) == 0.0
    assert bool((lesson.dequantize(packed, scales, 64)[1, 64:] == 0).all())


# ----- the kernel ---------------------------------------------------------------------------------------


def _tol(dtype):
    return dict(rtol=5e-3, atol=5e-3) if dtype == torch.float16 else dict(rtol=3e-2, atol=3e-2)


@pytest.mark.parametrize("dtype", [d for d in mode.float_dtypes() if d != torch.float32])
@pytest.mark.parametrize("M, N, K, G", [(1, 64, 256, 64), (5, 75, 96, 32), (37, 40, 352, 32), (3, 33, 512, 128)])
def test_matmul_matches_float64(M, N, K, G, dtype):
    w, x = _weights(N, K, dtype), _x(M, K, dtype)
    packed, scales = lesson.quantize(w, G)
    y = lesson.matmul(x, packed, scales, G)
    assert y.shape == (M, N) and y.dtype == dtype
    exact = grader.expected(x, packed, scales, G)
    torch.testing.assert_close(y.double().cpu(), exact, **_tol(dtype))
    torch.testing.assert_close(lesson.reference(x, packed, scales, G).double().cpu(), exact, **_tol(dtype))


def test_matmul_reads_strided_and_3d_x():
    w = _weights(40, 128)
    packed, scales = lesson.quantize(w, 32)
    big = _x(6, 200)
    x = big[::2, 10:138]  # rows 400 apart, not contiguous
    torch.testing.assert_close(lesson.matmul(x, packed, scales, 32).double().cpu(),
                               grader.expected(x, packed, scales, 32), rtol=5e-3, atol=5e-3)
    x3 = _x(6, 128).view(2, 3, 128)
    y3 = lesson.matmul(x3, packed, scales, 32)
    assert y3.shape == (2, 3, 40)
    torch.testing.assert_close(y3.double().cpu(), grader.expected(x3, packed, scales, 32), rtol=5e-3, atol=5e-3)


def test_matmul_is_close_to_the_16_bit_weights():
    """The point of the scheme: the int4 product stays near the fp16 one (the quantization error, not a bug)."""
    w, x = _weights(64, 512), _x(4, 512)
    packed, scales = lesson.quantize(w, 128)
    y, exact = lesson.matmul(x, packed, scales, 128).float(), (x.float() @ w.float().T)
    assert float((y - exact).norm() / exact.norm()) < 0.15


def _wxs(M=2, N=8, K=64, G=32):
    w = _weights(N, K)
    packed, scales = lesson.quantize(w, G)
    return _x(M, K), packed, scales


@pytest.mark.parametrize("make, message", [
    (lambda x, p, s: (x, p, s, 48), "group_size"),
    (lambda x, p, s: (x, p, s, 33), "group_size must be even"),
    (lambda x, p, s: (x, p, s[:, :1], 32), "scales has shape"),
    (lambda x, p, s: (x, p, s.reshape(-1), 32), "scales must be a 2-D"),
    (lambda x, p, s: (x, p, s.to(torch.int32), 32), "scales must be float16"),
    (lambda x, p, s: (x[:, :48], p, s, 32), "x has shape"),
    (lambda x, p, s: (x.float(), p, s, 32), "x must be float16 or bfloat16"),
    (lambda x, p, s: (x, p.view(torch.int8), s, 32), "packed must be a 2-D uint8"),
    (lambda x, p, s: (x, p.reshape(-1), s, 32), "packed must be a 2-D uint8"),
    (lambda x, p, s: (x[:0], p, s, 32), "x is empty"),
    (lambda x, p, s: (x, p, s, 32, 8), "BLOCK_M"),
    (lambda x, p, s: (x, p, s, 32, 16, 48), "BLOCK_N"),
])
def test_bad_input_is_refused_naming_the_argument(make, message):
    with pytest.raises(ValueError, match=message):
        lesson.matmul(*make(*_wxs()))


@pytest.mark.parametrize("call, message", [
    (lambda: lesson.quantize(torch.ones(4, 96, dtype=torch.float16), 64), "not a multiple of group_size"),
    (lambda: lesson.quantize(torch.ones(4, 96, dtype=torch.int32), 32), "w must be float16"),
    (lambda: lesson.quantize(torch.ones(96, dtype=torch.float16), 32), "w must be a 2-D"),
    (lambda: lesson.dequantize(torch.zeros(4, 16, dtype=torch.uint8), torch.ones(4, 3), 32), "scales has shape"),
])
def test_quantize_and_dequantize_refuse_naming_the_argument(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.skipif(not mode.INTERPRET, reason="bf16 is fine on a GPU")
def test_bf16_refused_in_the_interpreter():
    x, packed, scales = _wxs()
    with pytest.raises(mode.UnsupportedInInterpreter):
        lesson.matmul(x.bfloat16(), packed, scales.bfloat16(), 32)


# ----- the grader: the solution with one mistake written in ---------------------------------------------

SOURCE = stubs.answer_text((Path(__file__).resolve().parents[1] / "solutions" / "int4_matmul.py").read_text())
S_LO = "s_ptr + offs_n[:, None] * stride_sn + (k // GROUP)[None, :]"
S_HI = "s_ptr + offs_n[:, None] * stride_sn + ((half + k) // GROUP)[None, :]"
LO = "lo = (b << 4) >> 4"
HI = "hi = b >> 4"
X_HI = "x_ptr + offs_m[:, None] * stride_xm + (half + k)[None, :]"
W = "w_ptr + offs_n[:, None] * stride_wn + k[None, :]"
G_LO, G_HI = "(k // GROUP)[None, :]", "((half + k) // GROUP)[None, :]"
STRIDES = "x2.stride(0), w.stride(0), scales.stride(0), y.stride(0)"
DOT_LO, DOT_HI = "acc += tl.dot(x_lo, tl.trans(w_lo))", "acc += tl.dot(x_hi, tl.trans(w_hi))"
X_LO = "x_ptr + offs_m[:, None] * stride_xm + k[None, :]"
Y_MASK = "y_mask = (offs_m < M)[:, None] & (offs_n < N)[None, :]"


def _mutant(*edits, name="planted_int4"):
    return mutant(SOURCE, edits, name, "solutions/int4_matmul.py")


PLANTED = [
    ("nibble order swapped", [(LO, "lo = b >> 4"), (HI + "  #", "hi = (b << 4) >> 4  #")], "the nibbles are swapped"),
    ("low nibble not sign-extended", [(LO, "lo = b & 0xF")], "the low nibble is not sign-extended"),
    ("high nibble by a logical shift", [(HI + "  #", "hi = (b >> 4) & 0xF  #")], "the high nibble lost its sign"),
    ("neither nibble sign-extended", [(LO, "lo = b & 0xF"), (HI + "  #", "hi = (b >> 4) & 0xF  #")],
     "neither nibble is sign-extended"),
    ("one scale per row", [(S_LO, "s_ptr + offs_n[:, None] * stride_sn + 0 * k[None, :]"),
                           (S_HI, "s_ptr + offs_n[:, None] * stride_sn + 0 * k[None, :]")], "one scale for the whole row"),
    ("group index off by one", [("(k // GROUP)[None, :]", "(k // GROUP + 1)[None, :]"),
                                ("((half + k) // GROUP)[None, :]", "((half + k) // GROUP + 1)[None, :]")],
     "is the group index off by one"),
    ("group index off by one, below", [("(k // GROUP)[None, :]", "(k // GROUP - 1)[None, :]"),
                                       ("((half + k) // GROUP)[None, :]", "((half + k) // GROUP - 1)[None, :]")],
     "is the group index off by one"),
    ("the high half with the low half's scales", [(S_HI, S_LO)], "the high nibbles get the low half's scales"),
    ("group index off by one, low half only", [("(k // GROUP)[None, :]", "(k // GROUP + 1)[None, :]")],
     "the low nibbles' group index is off by one"),
    ("group index one less, high half only", [("((half + k) // GROUP)[None, :]", "((half + k) // GROUP - 1)[None, :]")],
     "the high nibbles' group index is off by one"),
    ("the high half's group as K/2 // GROUP + k // GROUP",  # right while K/2 is a multiple of GROUP
     [("((half + k) // GROUP)[None, :]", "(half // GROUP + k // GROUP)[None, :]")],
     "the high nibbles' scales are off where K/2 is not a multiple of GROUP"),
    ("K not masked", [("k_ok = k < half", "k_ok = k < k0 + BLOCK_K")], "Mask k < K/2 on every load"),
    ("N not masked", [("n_ok = offs_n < N", "n_ok = offs_n >= 0")], "mask offs_n < N"),
    ("M not masked on x", [("x_mask = (offs_m < M)[:, None] & k_ok[None, :]", "x_mask = k_ok[None, :]")],
     "rows past M"),
    ("the high half forgotten", [("        " + DOT_HI + "\n", "")], "only the low nibbles count"),
    ("the high nibbles times x's first half", [("x_ptr + offs_m[:, None] * stride_xm + (half + k)[None, :]",
                                                "x_ptr + offs_m[:, None] * stride_xm + k[None, :]")],
     "the high nibbles multiply the wrong part of x"),
    ("the scales not applied", [("lo.to(tl.float32) * s_lo", "lo.to(tl.float32)"),
                                ("hi.to(tl.float32) * s_hi", "hi.to(tl.float32)")], "the scales are not applied"),
    ("accumulating in fp16", [("acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
                               "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float16)"),
                              (DOT_LO, DOT_LO[:-1] + ", out_dtype=tl.float16)"),
                              (DOT_HI, DOT_HI[:-1] + ", out_dtype=tl.float16)")], "digits lost in a long sum"),
    ("x's rows read as contiguous", [("offs_m[:, None] * stride_xm", "offs_m[:, None] * K", 2)],
     "x's rows are strided here"),
    # another tensor's row stride, in the kernel's pointer arithmetic or passed by the launcher: named, not a mask
    ("x's rows at y's row stride", [("offs_m[:, None] * stride_xm", "offs_m[:, None] * stride_ym", 2)],
     "the rows of x are read 64 elements apart (64 is y's row stride, stride_ym = N)"),
    ("x's high half at y's row stride", [(X_HI, X_HI.replace("stride_xm", "stride_ym"))],
     "64 elements apart in the load of x[:, K/2 + k]"),
    ("the scales at packed's row stride", [("offs_n[:, None] * stride_sn", "offs_n[:, None] * stride_wn", 2)],
     "the rows of the scales are read 128 elements apart (128 is packed's row stride"),
    ("the bytes at the scales' row stride", [(W, W.replace("stride_wn", "stride_sn"))],
     "the rows of packed (the bytes) are read 4 elements apart (4 is the scales' row stride"),
    ("the bytes' rows K apart", [(W, W.replace("stride_wn", "K"))],
     "the rows of packed (the bytes) are read 256 elements apart (256 is x's row stride, stride_xm = K)"),
    ("the launcher passes y's row stride for x's", [(STRIDES, STRIDES.replace("x2.stride(0),", "y.stride(0),"))],
     "another tensor's row stride: the rows of x are read 64"),
    ("the launcher passes packed's row stride for the scales'",
     [(STRIDES, STRIDES.replace("scales.stride(0)", "w.stride(0)"))], "another tensor's row stride: the rows of the scales"),
    # a group index outside the scales, named from the largest index read, not a mask
    ("the high group counted from K/GROUP", [(G_HI, "((half + k) // GROUP + K // GROUP)[None, :]")],
     "a group index reaches 7 (is it (K/2 + k) // GROUP + K/GROUP"),
    ("the high group as K/2 + k // GROUP", [(G_HI, "(half + k // GROUP)[None, :]")],
     "K/2 added after the division"),
    ("the low group as k * GROUP", [(G_LO, "(k * GROUP)[None, :]")], "a multiplication where k // GROUP belongs"),
    ("the low group as k % GROUP", [(G_LO, "(k % GROUP)[None, :]")], "the position inside the group"),
    ("x's high half at K + k", [(X_HI, X_HI.replace("(half + k)", "(K + k)"))], "a column of x is K or more"),
    ("the loop body left empty", [(SOURCE[SOURCE.index("        k = k0 + offs_k"):SOURCE.index("    y_mask")],
                                   "        pass\n")], "the output is all 0"),
    # BLOCK_N == BLOCK_K (32) by default: tl.dot takes the untransposed (BLOCK_N, BLOCK_K) tile, no shape error
    ("the weight tiles not transposed", [(DOT_LO, "acc += tl.dot(x_lo, w_lo)"), (DOT_HI, "acc += tl.dot(x_hi, w_hi)")],
     "the weight tiles are not transposed"),
    ("the low tile not transposed", [(DOT_LO, "acc += tl.dot(x_lo, w_lo)")],
     "the low nibbles' weight tile is not transposed"),
    ("the high tile not transposed", [(DOT_HI, "acc += tl.dot(x_hi, w_hi)")],
     "the high nibbles' weight tile is not transposed"),
    # a nibble unpacked another wrong way: each named from a model of what it computes
    ("the low nibble shifted back by 3", [(LO, "lo = (b << 4) >> 3")], "(b << 4) >> 3 shifts back by 3"),
    ("the high nibble shifted by 3", [(HI + "  #", "hi = b >> 3  #")], "b >> 3 shifts by 3, not 4"),
    ("the low nibble not shifted back", [(LO, "lo = b << 4")], "b << 4 alone leaves the nibble in bits 4-7"),
    ("the low nibble as offset binary", [(LO, "lo = (b & 0xF) - 8")],
     "the low nibble is unpacked wrong: (b & 0xF) - 8 reads the nibble as offset binary"),
    ("the low nibble sign-extended, then minus 8", [(LO, "lo = ((b << 4) >> 4) - 8")],
     "the sign-extended nibble is already the value"),
    ("the high nibble as offset binary", [(HI + "  #", "hi = ((b >> 4) & 0xF) - 8  #")],
     "the high nibble is unpacked wrong: ((b >> 4) & 0xF) - 8"),
    ("both nibbles as offset binary", [(LO, "lo = (b & 0xF) - 8"), (HI + "  #", "hi = ((b >> 4) & 0xF) - 8  #")],
     "neither nibble is unpacked right: (b & 0xF) - 8 and ((b >> 4) & 0xF) - 8"),
    ("the high nibble masked with 0xF0", [(HI + "  #", "hi = (b & 0xF0) >> 4  #")], "(0xF0 is 240)"),
    # the K loop's offsets and acc: models that depend on BLOCK_K
    ("k without k0", [("k = k0 + offs_k  #", "k = offs_k  #")], "every step reads the same bytes"),
    ("k0 taken as a step count", [("k = k0 + offs_k  #", "k = k0 * BLOCK_K + offs_k  #")],
     "k0 already counts bytes"),
    ("x's low part at offs_k", [(X_LO, X_LO.replace("k[None, :]", "offs_k[None, :]"))],
     "the low nibbles multiply the same part of x at every step"),
    ("x's high part at K/2 + offs_k", [(X_HI, X_HI.replace("(half + k)", "(half + offs_k)"))],
     "the high nibbles multiply the same part of x at every step"),
    ("both loads of x at offs_k", [(X_LO, X_LO.replace("k[None, :]", "offs_k[None, :]")),
                                   (X_HI, X_HI.replace("(half + k)", "(half + offs_k)"))],
     "both loads of x read the same columns at every step"),
    ("acc = for the low nibbles' dot", [(DOT_LO, DOT_LO.replace("+=", "="))], "only the last step counts"),
    ("acc = for the high nibbles' dot", [(DOT_HI, DOT_HI.replace("+=", "="))], "only the last step's high nibbles count"),
    ("the weights divided by the scales", [("lo.to(tl.float32) * s_lo", "lo.to(tl.float32) / s_lo"),
                                           ("hi.to(tl.float32) * s_hi", "hi.to(tl.float32) / s_hi")],
     "the weights are divided by their scales"),
    ("one scale per step, the step's first group", [(G_LO, "(k0 // GROUP + 0 * k)[None, :]"),
                                                    (G_HI, "((half + k0) // GROUP + 0 * k)[None, :]")],
     "or one group for a whole step"),
    ("the tiles dequantized to bf16", [("(lo.to(tl.float32) * s_lo).to(x_lo.dtype)", "(lo.to(tl.float32) * s_lo).to(tl.bfloat16)"),
                                       ("(hi.to(tl.float32) * s_hi).to(x_hi.dtype)", "(hi.to(tl.float32) * s_hi).to(tl.bfloat16)")],
     "tl.dot takes two operands of one dtype"),
    # the store: its cast and its mask
    ("acc stored as bf16", [("acc.to(y_ptr.dtype.element_ty)", "acc.to(tl.bfloat16)")],
     "every value of your output is a bfloat16"),
    ("the store not masked on N", [(Y_MASK, "y_mask = (offs_m < M)[:, None]")], "your kernel stores columns past N = 75"),
    ("the store not masked on M", [(Y_MASK, "y_mask = (offs_n < N)[None, :]")], "your kernel stores rows past M = 1"),
]


@pytest.mark.parametrize("name, edits, hint", PLANTED, ids=[p[0] for p in PLANTED])
def test_grader_catches_planted_mistake(name, edits, hint):
    assert_grader_catches("int4_matmul", _mutant(*edits), name, hint)


def test_each_planted_mistake_gets_its_own_hint():
    hints = [p[2] for p in PLANTED]
    assert len(set(hints)) >= len(hints) - 1  # the two off-by-one groups share theirs


def test_the_faithful_copy_and_the_solution_pass():
    assert check.run("int4_matmul", module=_mutant(), quiet=True).passed
    assert check.run("int4_matmul", module=lesson, quiet=True).passed


@pytest.mark.parametrize("fn, words", [
    (lambda x, p, s, g=128: (_ for _ in ()).throw(RuntimeError("boom")), "boom"),
    (lambda x, p, s, g=128: torch.full((*x.shape[:-1], p.shape[0]), float("nan"), dtype=x.dtype), "NaN"),
    (lambda x, p, s, g=128: torch.zeros(3, dtype=x.dtype), "output shape"),
    (lambda x, p, s, g=128: "y", "not a torch.Tensor"),
    (lambda x, p, s, g=128: None, "returned None"),
    (lambda x, p, s, g=128: (x @ torch.ones(x.shape[-1], p.shape[0], dtype=x.dtype, device=x.device), 1), "tuple"),
])
def test_grader_never_crashes_whatever_the_kernel_does(fn, words):
    assert_grader_reports("int4_matmul", fn, words)


def test_the_grader_models_each_mistake_apart():
    """No two models of a mistake give the same result on a graded input, so a hint names one mistake (K/2 = 96 not
    a multiple of the group, where the high half's group taken from the low one's shows)."""
    g = torch.Generator().manual_seed(0)
    x, packed, scales = grader.inputs(3, 64, 192, 64, torch.float16, g)
    ys = {m: grader.expected(x, packed, scales, 64, m) for m, _ in (*grader.MISTAKES, *grader.nibble_mistakes())}
    ys.update({m: grader.expected(x, packed, scales, 64, m) for m in grader.STEPPED})
    ys[""] = grader.expected(x, packed, scales, 64)
    names = list(ys)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert not grader.close(ys[a], ys[b], 5e-2), (a, b)


def test_tiles_not_transposed_are_named_whatever_square_tile_the_launcher_picks():
    """With BLOCK_N == BLOCK_K == 64 (not the exercise's 32) a missing tl.trans still runs, and is still named."""
    planted = _mutant((DOT_LO, "acc += tl.dot(x_lo, w_lo)"), (DOT_HI, "acc += tl.dot(x_hi, w_hi)"),
                      ("BLOCK_N: int = 32, BLOCK_K: int = 32", "BLOCK_N: int = 64, BLOCK_K: int = 64"))
    assert_grader_catches("int4_matmul", planted, "tiles of 64 not transposed", "the weight tiles are not transposed")


def test_the_precision_hint_blames_only_what_the_grader_catches():
    """tl.dot(..., out_dtype=tl.float16) added to an fp32 acc rounds only each step's own products, which no case
    can tell from fp32: the precision hint names the fp16 accumulator, not out_dtype."""
    assert "fp16 accumulator" in grader.PRECISION and "out_dtype=tl.float16" not in grader.PRECISION
    if mode.INTERPRET:  # what the interpreter computes; a GPU's fp16 dot may round differently
        planted = _mutant((DOT_LO, DOT_LO[:-1] + ", out_dtype=tl.float16)"),
                          (DOT_HI, DOT_HI[:-1] + ", out_dtype=tl.float16)"))
        assert check.run("int4_matmul", module=planted, quiet=True).passed


def test_small_errors_everywhere_are_named_as_precision():
    """No model of a mistake fits an output off by about 1% everywhere: the hint speaks of precision (on a GPU an
    fp16 accumulator may show there before the long sum of positive values)."""
    def noisy(x, packed, scales, group_size=128):
        y = lesson.reference(x, packed, scales, group_size).float()
        g = torch.Generator().manual_seed(0)
        return (y * (1 + 0.01 * torch.randn(y.shape, generator=g).to(y.device))).to(x.dtype)

    rep = check.run("int4_matmul", module=types.SimpleNamespace(matmul=noisy, __name__="planted"), quiet=True)
    assert rep.status == "fail" and "small errors all over" in rep.first_problem().hint, rep
