"""Grader for lesson 10: ``matmul(x, packed, scales, group_size)``, ``x @ dequantize(packed, scales).T`` with
the weights unpacked inside the kernel.

The layout graded (the lesson's): ``packed`` (N, K/2) uint8, byte ``k`` of row ``n`` holding ``q[n, k]`` in its
low nibble and ``q[n, K/2 + k]`` in its high nibble, each a signed 4-bit value; ``scales`` (N, K/group_size),
``scales[n, c // group_size]`` scaling column ``c``. The grader makes its inputs with its own torch code
(never ``solutions/``): random weights quantized to every value from -7 to 7, so a nibble read without its
sign is wrong wherever the weight is negative.

The cases, in order: one row (decode) with every size a multiple of any block, so that a mistake of the
unpacking or of the scales is the first thing seen; K/2 not a multiple of BLOCK_K with N a multiple of
every BLOCK_N (a missing K mask reads past a row of bytes), then N not a multiple of BLOCK_N with K/2 a
multiple of every BLOCK_K (a missing N mask reads rows past N); M over BLOCK_M and odd with both edges
ragged; group sizes 32, 64 and 128 (and 16); strided rows of x; a 3-D x; long sums of positive values in
fp16, where an fp16 accumulator loses digits that an fp32 one keeps; seeded random sizes; then what must be
refused. fp16 everywhere, and bf16 again on a GPU (the interpreter has no bf16).
Expected values are float64 from the inputs. A wrong result gets a hint from the models of the usual
mistakes below, each a float64 computation of what that mistake returns (a weight tile not transposed among
them: tl.dot takes it where BLOCK_N == BLOCK_K, as in the exercise, and the values come out wrong instead of
a shape error), nibbles unpacked other wrong ways (``nibble_mistakes``), and slips of the K loop's offsets and of
acc, which depend on BLOCK_K (``STEPPED``, tried for several); an output rounded to bfloat16 is named from its
values. An out-of-bounds access found by the tracer gets a hint that names the mask (or the group index) from
where it landed, a store past y's end the store's mask, and a usual error of the unpacking (an int8 constant out
of range, tl.dot's operands of two dtypes) a hint of its own.

What the tests use besides ``grade``: ``quantize``, ``nibbles``, ``weight`` and ``expected`` (the layout and
the models of ``MISTAKES``, in torch), ``inputs`` (one case's padded inputs) and ``close``.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .. import mode
from .core import at_pitch, attempt, padded, random_sizes, refuses, row_padded, seeded, sliced_rows

QMAX = 7  # symmetric 4-bit values, -7 .. 7
PAD_BYTE = 0x88  # after the packed bytes (and in no graded weight): two nibbles of -8, which quantizing never gives

# (M, N, K, group_size, note): M of 1, odd, over BLOCK_M; N and K/2 ragged one at a time, then together
FIXED = [(1, 64, 256, 64, "decode: one row"),
         (16, 64, 96, 32, "K/2 = 48 bytes a row"),  # 48: no BLOCK_K of 32 or more divides it; N does not pad
         (3, 75, 256, 128, "N = 75"),  # 75: no BLOCK_N divides it; K/2 = 128 does not pad
         (37, 40, 352, 32, "M = 37, N = 40, K/2 = 176"),
         (5, 96, 512, 128, ""),
         (2, 48, 128, 16, ""),
         (6, 48, 256, 64, "x's rows strided"),
         (4, 40, 192, 64, "x every other row"),
         ((2, 3), 32, 128, 32, "3-D x")]
ACC = (4, 32, 4096, 128)  # long sums of positive values: an fp16 accumulator rounds every partial sum
N_RANDOM_M, N_RANDOM_N = (2, 1, 48), (2, 1, 200)


def quantize(w: torch.Tensor, group_size: int):
    """``(packed, scales)`` of ``w`` (N, K) in the lesson's layout, made here with torch (the grader never
    uses ``solutions/``)."""
    N, K = w.shape
    groups = w.double().reshape(N, K // group_size, group_size)
    scales = (groups.abs().amax(-1) / QMAX).to(w.dtype)
    s = scales.double().unsqueeze(-1)
    q = torch.where(s > 0, torch.round(groups / torch.where(s > 0, s, 1.0)), 0.0).clamp(-QMAX, QMAX)
    q = q.to(torch.int16).reshape(N, K)
    lo, hi = q[:, : K // 2] & 0xF, q[:, K // 2:] & 0xF
    return (lo | (hi << 4)).to(torch.uint8), scales


def nibbles(packed: torch.Tensor):
    """``(lo, hi, lo_unsigned, hi_unsigned)``: each (N, K/2), as int64 on the CPU."""
    b = packed.detach().cpu().to(torch.int64)
    lo_u, hi_u = b & 0xF, (b >> 4) & 0xF
    return lo_u - ((lo_u & 8) << 1), hi_u - ((hi_u & 8) << 1), lo_u, hi_u


def weight(packed, scales, group_size, mistake: str = "") -> torch.Tensor:
    """The float64 weight (N, K) the kernel multiplies by, right (``mistake`` empty) or as a mistake gives it
    (one of ``MISTAKES``, or ``"nibbles <low form> <high form>"``, forms of ``LOW_FORMS`` and ``HIGH_FORMS``)."""
    lo, hi, lo_u, hi_u = nibbles(packed)
    if mistake.startswith("nibbles "):
        _, low, high = mistake.split(" ")
        lo, hi = LOW_FORMS[low][0](lo, lo_u), HIGH_FORMS[high][0](hi, hi_u, lo_u)
        mistake = ""
    N, half = lo.shape
    K, groups = 2 * half, scales.shape[1]
    if mistake in ("low unsigned", "both unsigned"):
        lo = lo_u
    if mistake in ("high unsigned", "both unsigned"):
        hi = hi_u
    q = torch.cat([hi, lo] if mistake == "swapped" else [lo, hi], dim=1).double()
    if mistake == "interleaved":  # byte k read as columns 2k and 2k + 1
        q = torch.stack([lo, hi], dim=2).reshape(N, K).double()
    if mistake == "no high half":
        q[:, half:] = 0
    s = scales.detach().double().cpu()
    col = torch.arange(K)
    group = col // group_size
    if mistake == "high half, low scales":
        group = torch.where(col < half, col, col - half) // group_size
    if mistake == "group + 1":
        group = group + 1
    if mistake == "group + 1, low half":
        group = torch.where(col < half, group + 1, group)
    if mistake == "group - 1, high half":
        group = torch.where(col < half, group, group - 1)
    if mistake == "high group from the low one":  # (K/2 + k) // GROUP taken as K/2 // GROUP + k // GROUP
        group = torch.where(col < half, group, half // group_size + (col - half) // group_size)
    if mistake == "row scale":
        group = torch.zeros_like(group)
    if mistake == "no scales":
        return q
    if mistake == "divided by the scales":
        return q / s[:, group]
    s = torch.cat([s, torch.zeros(N, 1, dtype=s.dtype)], dim=1)  # group + 1 past the last reads 0 (masked)
    return q * s[:, group.clamp(max=groups)]


# a nibble unpacked another way: (its value from the signed and the unsigned nibble, what the code did). The high
# form also takes the low nibble: b >> 3 brings in bit 3, the low nibble's sign.
LOW_FORMS = {
    "right": (lambda s, u: s, ""),
    "unsigned": (lambda s, u: u, "b & 0xF is 0 .. 15, without the sign"),
    "by3": (lambda s, u: 2 * s, "(b << 4) >> 3 shifts back by 3, not 4, which doubles the value"),
    "unshifted": (lambda s, u: 16 * s, "b << 4 alone leaves the nibble in bits 4-7, 16 times its value: shift it "
                                       "back by 4, (b << 4) >> 4"),
    "offset8": (lambda s, u: u - 8, "(b & 0xF) - 8 reads the nibble as offset binary (0 .. 15 standing for -8 .. 7), "
                                    "but it is two's complement: 0 .. 7 are themselves, 8 .. 15 are -8 .. -1"),
    "minus8": (lambda s, u: s - 8, "((b << 4) >> 4) - 8: the sign-extended nibble is already the value, -8 .. 7, "
                                   "and subtracting 8 moves every weight"),
}
HIGH_FORMS = {
    "right": (lambda s, u, lo_u: s, ""),
    "unsigned": (lambda s, u, lo_u: u, "(b >> 4) & 0xF is 0 .. 15, without the sign"),
    "by3": (lambda s, u, lo_u: 2 * s + (lo_u >> 3), "b >> 3 shifts by 3, not 4: it doubles the nibble and brings in "
                                                   "bit 3, the low nibble's sign"),
    "offset8": (lambda s, u, lo_u: u - 8, "((b >> 4) & 0xF) - 8 reads the nibble as offset binary (0 .. 15 standing "
                                          "for -8 .. 7), but it is two's complement: 0 .. 7 are themselves, 8 .. 15 "
                                          "are -8 .. -1"),
    "minus8": (lambda s, u, lo_u: s - 8, "(b >> 4) - 8: b >> 4 on the int8 byte is already the signed value, -8 .. 7, "
                                         "and subtracting 8 moves every weight"),
}
NIBBLES_RIGHT = ("a nibble is a 4-bit two's complement value, -8 .. 7: on the byte read as int8 the low one is "
                 "(b << 4) >> 4 and the high one b >> 4, both arithmetic shifts by 4")


def nibble_mistakes():
    """``(mistake, hint)`` for each pair of ways to unpack the two nibbles that ``MISTAKES`` does not name already
    (one of them right, or both read without their sign)."""
    for low, (_, lo_words) in LOW_FORMS.items():
        for high, (_, hi_words) in HIGH_FORMS.items():
            if {low, high} <= {"right", "unsigned"}:
                continue
            if low == high == "offset8":
                text = ("neither nibble is unpacked right: (b & 0xF) - 8 and ((b >> 4) & 0xF) - 8 read them as offset "
                        "binary (0 .. 15 standing for -8 .. 7), but they are two's complement: 0 .. 7 are themselves, "
                        "8 .. 15 are -8 .. -1")
            elif high == "right":
                text = f"the low nibble is unpacked wrong: {lo_words}"
            elif low == "right":
                text = f"the high nibble is unpacked wrong: {hi_words}"
            else:
                text = f"neither nibble is unpacked right: the low one, {lo_words}; the high one, {hi_words}"
            yield f"nibbles {low} {high}", f"{text}. {NIBBLES_RIGHT[0].upper()}{NIBBLES_RIGHT[1:]}"


UNTRANSPOSED = {"not transposed": (True, True), "low tile not transposed": (True, False),
                "high tile not transposed": (False, True)}  # which of the two tl.dot calls lacks its tl.trans
BLOCK = 32  # the exercise's BLOCK_N == BLOCK_K: a tile not transposed is square there, so tl.dot takes it


def _untransposed_dot(xh: torch.Tensor, wh: torch.Tensor, block: int) -> torch.Tensor:
    """What ``tl.dot(x_part, w_part)`` adds up over the K loop, the (BLOCK_N, BLOCK_K) weight tile not transposed,
    with BLOCK_N == BLOCK_K == ``block``: for the tile of rows n0.. and the step of bytes k0.., y[m, n0 + j] gets
    sum_i x[m, k0 + i] * w[n0 + i, k0 + j]. ``xh`` (M, K/2) and ``wh`` (N, K/2) are one half each; rows past N and
    bytes past K/2 are masked to 0."""
    M, half = xh.shape
    N = wh.shape[0]
    nb, kb = -(-N // block), -(-half // block)
    xp = torch.zeros(M, kb * block, dtype=xh.dtype)
    xp[:, :half] = xh
    wp = torch.zeros(nb * block, kb * block, dtype=wh.dtype)
    wp[:N, :half] = wh
    y = torch.einsum("mbi,aibj->maj", xp.reshape(M, kb, block), wp.reshape(nb, block, kb, block))
    return y.reshape(M, nb * block)[:, :N]


# mistakes of the K loop's offsets and of acc, whose result depends on BLOCK_K (``block``): what each step reads
STEPPED = {
    "k without k0": ("every step reads the same bytes: k = offs_k leaves out the step's start. Byte k of a step is "
                     "k = k0 + offs_k (k0 runs over 0, BLOCK_K, 2 BLOCK_K, .. < K/2), for the bytes, their scales and "
                     "both loads of x"),
    "k0 times BLOCK_K": ("only the first step's bytes count: k = k0 * BLOCK_K + offs_k jumps past the row after step "
                         "0, where the mask turns every load off. k0 already counts bytes (range(0, K/2, BLOCK_K) "
                         "steps by BLOCK_K), so k = k0 + offs_k"),
    "x low at offs_k": ("the low nibbles multiply the same part of x at every step: x[:, offs_k] in place of "
                        "x[:, k]. The low nibble of byte k (k = k0 + offs_k) multiplies x[:, k]"),
    "x high at offs_k": ("the high nibbles multiply the same part of x at every step: x[:, K/2 + offs_k] in place of "
                         "x[:, K/2 + k]. The high nibble of byte k (k = k0 + offs_k) multiplies x[:, K/2 + k]"),
    "x both at offs_k": ("both loads of x read the same columns at every step: offs_k in place of k = k0 + offs_k. "
                         "Step k0 multiplies x[:, k] by the low nibbles and x[:, K/2 + k] by the high ones"),
    "acc = low": ("only the last step counts: acc = tl.dot(x_lo, ...) throws away what the steps before added. "
                  "Add each product to acc: acc += tl.dot(x_lo, tl.trans(w_lo)), then acc += tl.dot(x_hi, "
                  "tl.trans(w_hi))"),
    "acc = high": ("only the last step's high nibbles count: acc = tl.dot(x_hi, ...) throws away the low nibbles' "
                   "product and every step before. Add each product to acc: acc += tl.dot(x_hi, tl.trans(w_hi))"),
}


def _stepped(x2: torch.Tensor, w: torch.Tensor, block: int, mistake: str) -> torch.Tensor:
    """What the K loop adds up with the mistake ``mistake`` of ``STEPPED``, BLOCK_K == ``block``: ``x2`` (M, K) and
    ``w`` (N, K), float64; a byte k >= K/2 is masked off, with its scales and x."""
    half = x2.shape[1] // 2
    offs = torch.arange(block)
    y = torch.zeros(x2.shape[0], w.shape[0], dtype=x2.dtype)
    for k0 in range(0, half, block):
        k = {"k without k0": offs, "k0 times BLOCK_K": k0 * block + offs}.get(mistake, k0 + offs)
        ok = k < half
        k, o = k[ok], offs[ok]
        x_lo = o if mistake in ("x low at offs_k", "x both at offs_k") else k
        x_hi = half + (o if mistake in ("x high at offs_k", "x both at offs_k") else k)
        lo, hi = x2[:, x_lo] @ w[:, k].T, x2[:, x_hi] @ w[:, half + k].T
        y = {"acc = low": lo + hi, "acc = high": hi}.get(mistake, y + lo + hi)
    return y


def expected(x, packed, scales, group_size, mistake: str = "", block: int = BLOCK) -> torch.Tensor:
    """``x @ w.T`` in float64 on the CPU, (..., N); ``mistake``: what that mistake returns instead (``block``: the
    tiles' BLOCK_N == BLOCK_K, for a weight tile not transposed)."""
    K = x.shape[-1]
    half = K // 2
    x2 = x.detach().reshape(-1, K).double().cpu()
    w = weight(packed, scales, group_size,
               "" if mistake in ("x's first half twice", *UNTRANSPOSED, *STEPPED) else mistake)
    if mistake in STEPPED:
        y = _stepped(x2, w, block, mistake)
    elif mistake == "x's first half twice":  # the high nibbles multiplied by x[:, k], not x[:, K/2 + k]
        y = x2[:, :half] @ (w[:, :half] + w[:, half:]).T
    elif mistake in UNTRANSPOSED:
        y = torch.zeros(x2.shape[0], w.shape[0], dtype=x2.dtype)
        for part, untransposed in zip((slice(None, half), slice(half, None)), UNTRANSPOSED[mistake]):
            xh, wh = x2[:, part], w[:, part]
            y += _untransposed_dot(xh, wh, block) if untransposed else xh @ wh.T
    else:
        y = x2 @ w.T
    return y.reshape(*x.shape[:-1], w.shape[0])


MISTAKES = [
    ("swapped", "the nibbles are swapped: the low nibble (bits 0-3) of byte k is column k, in the first half of the "
                "row, and the high nibble (bits 4-7) is column K/2 + k"),
    ("low unsigned", "the low nibble is not sign-extended: b & 0xF gives 0 .. 15, where 8 .. 15 stand for -8 .. -1. "
                     "Move bits 0-3 to the top of the int8 (b << 4), then shift back by 4: an arithmetic shift "
                     "copies bit 3, the nibble's sign, into bits 4-7"),
    ("high unsigned", "the high nibble lost its sign: (b >> 4) & 0xF (or a shift of the byte read as uint8) is a "
                      "logical shift, 0 .. 15. The byte is passed as int8, so b >> 4 alone is an arithmetic shift "
                      "that fills bits 4-7 with the sign"),
    ("both unsigned", "neither nibble is sign-extended: they are 4-bit two's complement values, -8 .. 7. The low one: "
                      "(b << 4) >> 4 on the int8 byte; the high one: b >> 4 (arithmetic shifts, no & 0xF)"),
    ("interleaved", "the layout is not interleaved: byte k holds columns k (low nibble) and K/2 + k (high nibble), "
                    "not 2k and 2k + 1. Load x[:, k] for the low nibbles and x[:, K/2 + k] for the high ones"),
    ("x's first half twice", "the high nibbles multiply the wrong part of x: the high nibble of byte k is column "
                             "K/2 + k, so it multiplies x[:, K/2 + k] (the second of the two loads of x)"),
    ("no high half", "only the low nibbles count: each byte holds two weights. Dequantize the high nibbles too and "
                     "add their product with x[:, K/2 + k] to acc"),
    ("row scale", "one scale for the whole row (scales[n, 0]?): each group of GROUP columns has its own, and column "
                  "c's is scales[n, c // GROUP]"),
    ("high half, low scales", "the high nibbles get the low half's scales: the high nibble of byte k is column "
                              "K/2 + k, so its group is (K/2 + k) // GROUP, not k // GROUP"),
    ("group + 1", "the group index is off by one: column c's scale is scales[n, c // GROUP], groups 0 .. "
                  "K/GROUP - 1"),
    ("group + 1, low half", "the low nibbles' group index is off by one: the low nibble of byte k is column k, whose "
                            "scale is scales[n, k // GROUP] (groups 0 .. K/GROUP - 1), not k // GROUP + 1"),
    ("group - 1, high half", "the high nibbles' group index is off by one: the high nibble of byte k is column K/2 + k, "
                             "whose scale is scales[n, (K/2 + k) // GROUP], not one group less"),
    ("high group from the low one", "the high nibbles' scales are off where K/2 is not a multiple of GROUP, as here: "
                                    "the high nibble of byte k is column K/2 + k, whose group is (K/2 + k) // GROUP, "
                                    "worked out for each byte k. K/2 // GROUP + k // GROUP, or one group for a whole "
                                    "step, differ from it there"),
    ("no scales", "the scales are not applied: the weight is q * scale, with scale = scales[n, c // GROUP]"),
    ("divided by the scales", "the weights are divided by their scales: quantizing divided w by the scale, "
                              "q = round(w / scale), so dequantizing multiplies, w = q * scales[n, c // GROUP]"),
    ("not transposed", "the weight tiles are not transposed: a dequantized tile is (BLOCK_N, BLOCK_K), and "
                       "tl.dot(x_part, w_part) needs (BLOCK_K, BLOCK_N); it ran only because BLOCK_N == BLOCK_K here. Add "
                       "tl.dot(x_lo, tl.trans(w_lo)) and tl.dot(x_hi, tl.trans(w_hi)) to acc"),
    ("low tile not transposed", "the low nibbles' weight tile is not transposed: it is (BLOCK_N, BLOCK_K), and "
                                "tl.dot(x_lo, w_lo) needs (BLOCK_K, BLOCK_N); it ran only because BLOCK_N == BLOCK_K "
                                "here. Add tl.dot(x_lo, tl.trans(w_lo)) to acc"),
    ("high tile not transposed", "the high nibbles' weight tile is not transposed: it is (BLOCK_N, BLOCK_K), and "
                                 "tl.dot(x_hi, w_hi) needs (BLOCK_K, BLOCK_N); it ran only because BLOCK_N == "
                                 "BLOCK_K here. Add tl.dot(x_hi, tl.trans(w_hi)) to acc"),
]


def close(o: torch.Tensor, m: torch.Tensor, rtol: float) -> bool:
    """``o`` is finite and within ``rtol`` of ``m``'s largest magnitude (at least 1) everywhere."""
    top = float(m.abs().max()) if m.numel() else 0.0
    return bool(torch.isfinite(o).all()) and float((o - m).abs().max()) <= rtol * max(top, 1.0)


def _at_other_pitch(x, packed, scales, group_size):
    """``(tensor, stride, part, y)`` for each row stride of another tensor that keeps x, the bytes or the scales
    read inside the tensor (a larger one the tracer catches), in both loads of x or of the scales or in one
    (``part``: "", "low" or "high"): ``y`` (M, N) float64 is what the kernel then computes."""
    N, K = packed.shape[0], x.shape[-1]
    half = K // 2
    x2 = x.detach().reshape(-1, K)
    M, x_row = x2.shape[0], x2.stride(0)
    xd, w = x2.double().cpu(), weight(packed, scales, group_size)

    def halves(xa, wa, part):
        lo = (xa if part != "high" else xd)[:, :half] @ (wa if part != "high" else w)[:, :half].T
        return lo + (xa if part != "low" else xd)[:, half:] @ (wa if part != "low" else w)[:, half:].T

    for v in sorted(_strides(x, N, K, group_size)):
        if 0 < v < x_row and M > 1 and v != K:  # K itself: contiguous rows assumed, which _layout names
            xa = x2.as_strided((M, K), (v, 1), x2.storage_offset()).double().cpu()
            for part in ("", "low", "high"):
                yield "x", v, part, halves(xa, w, part)
        if 0 < v < half and N > 1:
            yield "w", v, "", xd @ weight(packed.as_strided((N, half), (v, 1), packed.storage_offset()), scales,
                                          group_size).T
        if 0 < v < K // group_size and N > 1:
            ws = weight(packed, scales.as_strided(scales.shape, (v, 1), scales.storage_offset()), group_size)
            for part in ("", "low", "high"):
                yield "s", v, part, halves(xd, ws, part)


def _diagnose(x, packed, scales, group_size, layout: str = ""):
    K = x.shape[-1]

    def hint(o, e, wrong):
        cast = _cast_hint(o, e, x.dtype)
        if cast:
            return cast
        if o.numel() and bool((o == 0).all()) and bool((e != 0).any()):
            return ("the output is all 0: nothing reaches acc. Is the K loop's body still the stub? Each step adds "
                    "tl.dot(x part, dequantized weight part transposed) to acc, for the low and the high nibbles")
        for mistake, text in MISTAKES:
            for block in (BLOCK, 16, 64, 128) if mistake in UNTRANSPOSED else (BLOCK,):  # the tiles the learner chose
                m = expected(x, packed, scales, group_size, mistake, block)
                if close(o, m, 2e-2) and not close(m, e, 5e-2):
                    return text
        for mistake, text in (*nibble_mistakes(), *((m, STEPPED[m]) for m in STEPPED)):
            for block in (BLOCK, 16, 64, 128) if mistake in STEPPED else (BLOCK,):  # the BLOCK_K the learner chose
                m = expected(x, packed, scales, group_size, mistake, block)
                if close(o, m, 2e-2) and not close(m, e, 5e-2):
                    return text
        for t, v, part, m in _at_other_pitch(x, packed, scales, group_size):
            if close(o.reshape(m.shape), m, 2e-2) and not close(m, e.reshape(m.shape), 5e-2):
                own = {"x": x.reshape(-1, K).stride(0), "w": K // 2, "s": K // group_size}[t]
                return _stride_hint(t, v, own, _strides(x, packed.shape[0], K, group_size), part)
        if layout:
            return layout
        if close(o, e, 3e-2):  # every value near, none right enough: precision, not a formula
            return "small errors all over, no wrong formula: " + PRECISION
        return ""
    return hint


PRECISION = ("digits lost in a long sum? Keep acc in fp32 (acc = tl.zeros(..., dtype=tl.float32); tl.dot's default "
             "out_dtype is fp32, and acc += tl.dot(...) keeps it) and round to x's dtype only at the store. An fp16 "
             "accumulator rounds every partial sum; dequantize in fp32 and cast the tile to "
             "x's dtype once")


def _acc_hint(o, e, wrong):
    return _cast_hint(o, e, torch.float16) or PRECISION


def _strides(x, N, K, group_size) -> dict:
    """The row stride of each tensor the kernel takes, by value: ``{value: words}`` naming every argument of
    that value (two may agree, K/2 = N say), for a hint that says whose stride was used."""
    x_row = x.stride(-2) if x.dim() > 1 else K
    names = [(x_row, "x's row stride, stride_xm" + " = K" * (x_row == K)), (K // 2, "packed's row stride, stride_wn = K/2"),
             (K // group_size, "the scales' row stride, stride_sn = K/GROUP"), (N, "y's row stride, stride_ym = N")]
    if x_row != K:
        names.append((K, "K"))
    out: dict = {}
    for v, words in names:
        out.setdefault(v, []).append(words)
    return {v: " or ".join(w) for v, w in out.items()}


# per tensor: (its name, its own row stride, where its row n starts)
_OWN = {"x": ("x", "x's row stride stride_xm (x2.stride(0))", "row m of x starts at x_ptr + m * stride_xm"),
        "w": ("packed (the bytes)", "packed's row stride stride_wn (K/2 bytes)",
              "row n of packed starts at w_ptr + n * stride_wn"),
        "s": ("the scales", "the scales' row stride stride_sn (K/GROUP)",
              "row n of the scales starts at s_ptr + n * stride_sn")}
_LOADS = {"x": {"low": " in the load of x[:, k]", "high": " in the load of x[:, K/2 + k]"},
          "s": {"low": " in the load of the low nibbles' scales", "high": " in the load of the high nibbles' scales"}}


def _stride_hint(t: str, got: int, own: int, strides: dict, part: str = "") -> str:
    name, stride, start = _OWN[t]
    lead = "" if strides[got] == "K" else "another tensor's row stride: "
    return (f"{lead}the rows of {name} are read {got} elements apart{_LOADS.get(t, {}).get(part, '')} "
            f"({got} is {strides[got]}), but {stride} is {own} here. Each tensor has its own row stride, passed by "
            f"the launcher as that tensor's .stride(0): {start}")


def _past_rows(offs, row: int, n: int) -> bool:
    """The offsets past the end are exactly rows n .. of the last tile of some BLOCK (16 .. 1024) under the
    tensor's own row length: what a missing edge mask reads, and nothing else does."""
    rows = set((offs // row).tolist())
    for b in (16, 32, 64, 128, 256, 512, 1024):
        if rows == set(range(n, -(-n // b) * b)):
            return True
    return False


def _other_stride(offs, own: int, rows: int, cols: int, strides: dict) -> int:
    """The stride of another tensor that puts every offset ``offs`` in a row below ``rows`` at a column below
    ``cols``, and in two rows at least (0: none does)."""
    for v in sorted(strides):
        if v == own or v <= 0 or len(set((offs // v).tolist())) < 2:
            continue
        if at_pitch(offs, v, rows, cols):
            return v
    return 0


# a scale's group index written another way than c // GROUP: (what, its largest value over bytes k < K/2)
def _group_forms(half: int, g: int):
    return [("(K/2 + k) // GROUP + K/GROUP: the high half's groups counted again from K/GROUP", (2 * half - 1) // g + 2 * half // g),
            ("K/2 + k // GROUP: K/2 added after the division, not before it", half + (half - 1) // g),
            ("k * GROUP: a multiplication where k // GROUP belongs", (half - 1) * g),
            ("k % GROUP: the position inside the group, not the group", min(g, half) - 1),
            ("k or K/2 + k: the column, not divided by GROUP", 2 * half - 1)]


def _group_hint(index: int, groups: int, half: int, group_size: int) -> str:
    """The hint for a scale read outside the scales, whose group index reached ``index``."""
    formula = (f"The scale of column c is scales[n, c // GROUP], groups 0 .. K/GROUP - 1 = {groups - 1}: the low "
               "nibble of byte k is column k, the high nibble column K/2 + k, so their groups are k // GROUP and "
               "(K/2 + k) // GROUP")
    if index in (-1, groups):
        return f"the scales are read outside the tensor: is the group index off by one? It reaches {index}. {formula}"
    named = [words for words, v in _group_forms(half, group_size) if v == index]
    said = f" (is it {named[0]}?)" if named else ""
    return f"the scales are read outside the tensor: a group index reaches {index}{said}. {formula}"


def _oob_hint(M, N, K, group_size, x):
    """The mistake an out-of-bounds access points to, from where it landed: rows of bytes, scales or x past N
    or M (a mask), a byte past K/2 (the K mask), another tensor's row stride, a scale's group outside
    0 .. K/GROUP - 1 (named when its largest value fits a usual way of writing it), a part of x past K."""
    half, groups = K // 2, K // group_size
    x_numel = x.numel()
    x_row = x.stride(-2) if x.dim() > 1 else K
    strides = _strides(x, N, K, group_size)

    def which(o) -> str:
        """"w", "s" or "x": by the kernel's argument name, else (a renamed argument) by the element count."""
        if o.tensor in ("w", "s", "x"):
            return o.tensor
        sizes = {N * half: "w", N * groups: "s", x_numel: "x"}
        return sizes.get(o.numel, o.tensor) if len(sizes) == 3 else o.tensor

    def hint(bad, default):
        stores = [o for o in bad if o.kind == "store" and o.derived]
        if stores and len(stores) == len(bad):
            return _store_hint(np.concatenate([o.offsets for o in stores]).astype("int64"), M, N)
        loads = [o for o in bad if o.kind == "load" and o.derived]
        if not loads or len(loads) < len(bad):
            return ""  # a store with a load, or an address in no tensor: the general hints say it
        mask_k = (f"a step reads past the end of a row: K/2 = {half} bytes a row here, not a multiple of BLOCK_K, so "
                  "the last step's bytes k >= K/2 are not in the row. Mask k < K/2 on every load of the step: the "
                  "bytes, their scales and both parts of x (other=0)")
        mask_n = (f"the last tile of N reads rows past N = {N}: mask offs_n < N on the loads of the bytes and of the "
                  "scales (other=0); the store's mask covers only the store")
        mask_m = f"x is read in rows past M = {M}: mask offs_m < M on both loads of x (other=0.0), as well as k < K/2"
        steps_pass = half % 64 != 0  # a step of BLOCK_K <= 64 can run past K/2: a missing K mask shows
        offs = {}
        for o in loads:
            offs.setdefault(which(o), []).append(o.offsets.astype("int64"))
        offs = {t: np.concatenate(v) for t, v in offs.items()}
        if "s" in offs and int(offs["s"].min()) < 0:
            return _group_hint(int(offs["s"].min()), groups, half, group_size)  # row 0's lanes: the index itself
        for t, rows, row, cols in (("w", N, half, half), ("s", N, groups, groups), ("x", M, x_row, K)):
            if t not in offs:
                continue
            o = offs[t]
            past = o[o >= (N * row if t != "x" else x_numel)]
            if past.size and _past_rows(past, row, rows):
                if t == "x" and M * K == x_numel:
                    return mask_m
                if t != "x":
                    return mask_n
            other = _other_stride(o, row, rows, cols, strides)
            if other:
                return _stride_hint(t, other, row, strides)
        if "w" in offs:
            over = int(offs["w"].max()) - N * half
            if over < half and steps_pass:
                return mask_k
            return (f"the bytes are read past the end of packed ({over + 1} elements past it), and no mask or "
                    "another tensor's stride explains it: the bytes of a step are at w_ptr + offs_n[:, None] * "
                    "stride_wn + k[None, :], with k = k0 + offs_k < K/2")
        if "s" in offs:
            if steps_pass:
                return mask_k
            top = int(offs["s"].max()) - (N - 1) * groups  # the last row's lanes: the largest group index
            return _group_hint(top, groups, half, group_size)
        if "x" in offs:
            o = offs["x"]
            over = int(o.max()) - x_numel
            if over >= K or (int(o.min()) >= x_numel and M * K == x_numel and over >= K // 2):
                return mask_m
            if steps_pass:
                return mask_k
            return (f"x is read past the end of its last row, though K/2 = {half} is a multiple of BLOCK_K here, so "
                    "no step runs past K/2: a column of x is K or more. The low nibbles multiply x[:, k], the high "
                    "ones x[:, K/2 + k] (x_ptr + offs_m[:, None] * stride_xm + (half + k)[None, :]), k < K/2")
        return ""
    return hint


Y_MASK = "y_mask = (offs_m < M)[:, None] & (offs_n < N)[None, :]"


def _store_hint(offs, M: int, N: int) -> str:
    """The hint for stores past the end of y (M, N) at ``offs``: rows past M (every column of row M stored) or, the
    N mask missing, the columns n >= N of the last row (a part of row M's first BLOCK_N columns)."""
    past = offs[offs >= M * N] - M * N
    if not past.size or int(past.max()) >= 1024 * max(N, 1):
        return ""
    if set(range(N)) <= set(past.tolist()):
        return (f"your kernel stores rows past M = {M}: the last tile of rows runs past the end of y. Mask the store "
                f"with both edges, {Y_MASK}")
    if int(past.max()) < 1024:
        return (f"your kernel stores columns past N = {N}: in the last tile of N, column n >= N of row m is at "
                "m * N + n, the start of row m + 1 (past the end of y for the last row, where the tracer caught it; "
                f"in the other rows over values other programs store). Mask the store with both edges, {Y_MASK}")
    return ""


def _cast_hint(o, e, dtype) -> str:
    """An fp16 output rounded to bfloat16 on its way (acc.to(tl.bfloat16) stored into fp16): every value is a
    bfloat16, which the right result's values are not."""
    if dtype != torch.float16 or not o.numel() or not bool(torch.isfinite(o).all()):
        return ""

    def bf16(t):
        return bool((t.to(torch.bfloat16).double() == t).all())

    if bf16(o) and not bf16(e.to(torch.float16).double()) and close(o, e, 2e-2):
        return ("every value of your output is a bfloat16 (8 bits of mantissa) where y is float16 (11 bits): acc is "
                "cast to bfloat16 at the store (acc.to(tl.bfloat16)?). Cast it to y's own dtype, "
                "acc.to(y_ptr.dtype.element_ty), so fp16 and bf16 inputs each get their own")
    return ""


def _error_hint(exc, default) -> str:
    """An error of the interpreter or the compiler that a usual slip of the unpacking gives."""
    text = f"{exc} {exc.__cause__!r}"
    if "out of range for type int8" in text:
        return ("a constant that does not fit an int8 (0xF0 is 240) meets the bytes, which are int8, -128 .. 127. The "
                "high nibble needs no mask: b >> 4 is an arithmetic shift that keeps its sign; the low one is "
                "(b << 4) >> 4")
    if "same dtype" in text or "must have the same dtype" in text:
        return ("tl.dot takes two operands of one dtype: cast each dequantized tile to x's dtype, "
                "(lo.to(tl.float32) * s_lo).to(x_lo.dtype), not to a fixed dtype, nor leave it in fp32")
    return ""


def _bytes_padded(packed: torch.Tensor) -> torch.Tensor:
    """A contiguous copy of ``packed`` followed in memory by bytes of ``PAD_BYTE``."""
    flat = packed.contiguous().reshape(-1)
    buf = torch.full((flat.numel() + 4096,), PAD_BYTE, dtype=torch.uint8, device=packed.device)
    buf[: flat.numel()] = flat
    return buf[: flat.numel()].view(packed.shape)


def inputs(M, N, K, group_size, dtype, gen, positive: bool = False):
    """``(x, packed, scales)`` on the mode's device, each padded (x as the note of its case lays it out)."""
    shape = M if isinstance(M, tuple) else (M,)
    if positive:
        x = torch.rand(*shape, K, generator=gen, dtype=torch.float64)
        w = torch.rand(N, K, generator=gen, dtype=torch.float64)
    else:
        x = torch.randn(*shape, K, generator=gen, dtype=torch.float64)
        w = torch.randn(N, K, generator=gen, dtype=torch.float64) / math.sqrt(K)
    packed, scales = quantize(w.to(dtype), group_size)
    return x.to(dtype).to(mode.DEVICE), packed.to(mode.DEVICE), scales.to(mode.DEVICE)


def _tolerance(dtype):
    # the output is rounded once to x's dtype; the weight is dequantized in x's dtype before tl.dot
    return (5e-3, 5e-3) if dtype == torch.float16 else (3e-2, 3e-2)


def _label(M, N, K, group_size, dtype, note=""):
    m = "x".join(map(str, M)) if isinstance(M, tuple) else M
    return f"M={m} N={N} K={K} group {group_size} {str(dtype)[6:]}" + (f" ({note})" if note else "")


def _layout(x):
    if x.dim() == 2 and x.stride(0) != x.shape[1]:
        return (f"x's rows are strided here (stride {x.stride(0)} between rows, not K = {x.shape[1]}), and contiguous "
                "inputs passed: row m of x is at x_ptr + m * stride_xm")
    return ""


#: What steps that load nothing mean here: a K loop past the packed row's K/2 bytes.
IDLE_HINT = ("the K loop runs past the packed row: it steps over its K/2 bytes, for k0 in range(0, K // 2, BLOCK_K) "
             "(range(0, K, BLOCK_K) takes twice as many steps). The steps past the row load nothing, every lane "
             "masked off, and still take their time")


def _graded(label, mod, x, packed, scales, group_size, dtype, **kw):
    M = x.numel() // x.shape[-1]
    N, K = packed.shape[0], x.shape[-1]
    atol, rtol = kw.pop("tol", _tolerance(dtype))
    diagnose = kw.pop("diagnose", None) or _diagnose(x, packed, scales, group_size, _layout(x))
    return attempt(label, mod.matmul, (x, packed, scales, group_size), expected(x, packed, scales, group_size),
                   dtype=dtype, atol=atol, rtol=rtol, diagnose=diagnose, oob_hint=_oob_hint(M, N, K, group_size, x),
                   error_hint=_error_hint, idle=IDLE_HINT,
                   mask="(offs_m < M) on x, (offs_n < N) on the bytes and scales, k < K/2 on every load of a step")


def _fixed(mod, dtype, gen):
    for M, N, K, G, note in FIXED:
        x, packed, scales = inputs(M, N, K, G, dtype, gen)
        if note == "x's rows strided":
            x = row_padded(x)
        elif note == "x every other row":
            x = sliced_rows(x)
        else:
            x = padded(x)
        yield _graded(_label(M, N, K, G, dtype, note), mod, x, _bytes_padded(packed), padded(scales), G, dtype)


def _acc_case(mod, gen):
    M, N, K, G = ACC
    x, packed, scales = inputs(M, N, K, G, torch.float16, gen, positive=True)
    label = _label(M, N, K, G, torch.float16, "positive values: an fp16 accumulator loses digits")
    return _graded(label, mod, padded(x), _bytes_padded(packed), padded(scales), G, torch.float16,
                   tol=(0.0, 1.5e-3), diagnose=_acc_hint)


def _random(mod, dtype, gen):
    seed, ms = random_sizes(*N_RANDOM_M)
    _, ns = random_sizes(*N_RANDOM_N, seed=seed + 1)
    rng = torch.Generator().manual_seed(seed)
    for M, N in zip(ms, ns):
        G = (32, 64, 128)[int(torch.randint(0, 3, (1,), generator=rng))]
        K = G * int(torch.randint(1, 9, (1,), generator=rng))
        x, packed, scales = inputs(M, N, K, G, dtype, gen)
        yield _graded(seeded(_label(M, N, K, G, dtype), seed), mod, padded(x), _bytes_padded(packed), padded(scales),
                      G, dtype)


def grade(mod):
    gen = torch.Generator().manual_seed(0)
    dtypes = [d for d in mode.float_dtypes() if d != torch.float32]
    for dtype in dtypes:
        yield from _fixed(mod, dtype, gen)
        if dtype == torch.float16:
            yield _acc_case(mod, gen)
        yield from _random(mod, dtype, gen)
    x, packed, scales = inputs(1, 40, 128, 32, torch.float16, gen)
    hint = "check the arguments before launching and raise ValueError naming the one that is wrong"
    d = mode.DEVICE
    bad = [("K not a multiple of group_size", (x, packed, scales, 48)),
           ("scales of the wrong shape", (x, packed, scales[:, :2], 32)),
           ("x whose K is not twice packed's width", (x[:, :96], packed, scales, 32)),
           ("packed that is not uint8", (x, packed.to(torch.int16), scales, 32)),
           ("x in fp32", (x.float(), packed, scales, 32)),
           ("scales in an integer dtype", (x, packed, torch.ones(40, 4, dtype=torch.int32, device=d), 32))]
    for what, args in bad:
        yield refuses(f"{what} raises ValueError", mod.matmul, *args, hint=hint)

