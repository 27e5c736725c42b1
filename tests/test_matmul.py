"""Lesson 03: the tiled matmul matches torch on ragged shapes, strided inputs and any config."""

import pytest
import torch
from helpers import assert_grader_catches
from helpers import randn as _randn

from solutions import matmul as lesson
from tkcourse import mode

DEV = mode.DEVICE


def _tol(dtype, K):
    if dtype == torch.float32:  # exact fp32 in the interpreter; TF32 (10-bit mantissa) on a GPU
        return dict(rtol=1e-4, atol=1e-4) if mode.INTERPRET else dict(rtol=1e-2, atol=1e-2 * K**0.5)
    return dict(rtol=1e-2, atol=1e-2)  # fp16 / bf16: one rounding of the fp32 sum


def _assert_matmul(c, a, b):
    assert c.dtype == a.dtype and c.shape == (a.shape[0], b.shape[1])
    torch.testing.assert_close(c, lesson.reference(a, b), **_tol(a.dtype, a.shape[1]))


@pytest.mark.parametrize("dtype", mode.float_dtypes())
@pytest.mark.parametrize("M, N, K", [(1, 1, 1), (3, 5, 7), (17, 31, 13), (127, 61, 257), (97, 193, 67)])
def test_matches_torch(M, N, K, dtype):
    a, b = _randn(M, K, dtype=dtype, seed=1), _randn(K, N, dtype=dtype, seed=2)
    _assert_matmul(lesson.matmul(a, b), a, b)


@pytest.mark.parametrize("which", ["a", "b", "both"])
def test_transposed_inputs_need_no_copy(which):
    M, N, K = 37, 53, 71
    a = _randn(K, M).t() if which in ("a", "both") else _randn(M, K)
    b = _randn(N, K, seed=3).t() if which in ("b", "both") else _randn(K, N, seed=3)
    assert not (a.is_contiguous() and b.is_contiguous())
    _assert_matmul(lesson.matmul(a, b), a, b)


def test_sliced_inputs():
    a = _randn(80, 90)[::2, 3:62]  # (40, 59), row stride 180
    b = _randn(59, 150, seed=4)[:, ::3]  # (59, 50), column stride 3
    _assert_matmul(lesson.matmul(a, b), a, b)


@pytest.mark.parametrize("config", [
    dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=1, num_warps=1, num_stages=1),
    dict(BLOCK_M=64, BLOCK_N=16, BLOCK_K=64, GROUP_M=8, num_warps=4, num_stages=3),  # BLOCK_K > K
    dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=16, GROUP_M=3, num_warps=2, num_stages=2),  # group larger than the grid
])
def test_explicit_config_is_used(config):
    a, b = _randn(41, 43, seed=5), _randn(43, 29, seed=6)
    _assert_matmul(lesson.matmul(a, b, config=config), a, b)


def test_config_lists():
    for c in lesson.CONFIGS + [lesson.DEFAULT_INTERPRETER_CONFIG]:
        assert set(c) == set(lesson.CONFIG_KEYS)
        assert all(c[k] & (c[k] - 1) == 0 for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K"))
    c = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3)
    assert lesson.shared_memory_bytes(c, 2) == (128 * 64 + 64 * 256) * 2 * 3 == 147_456


@pytest.mark.parametrize("a, b, message", [
    (lambda: _randn(4, 5), lambda: _randn(6, 3), "inner dimensions"),
    (lambda: _randn(4, 5), lambda: _randn(5, 3, dtype=torch.float16), "dtype"),
    (lambda: _randn(4), lambda: _randn(4, 3), "2-D"),
    (lambda: _randn(0, 5), lambda: _randn(5, 3), "empty"),
])
def test_bad_input_raises_valueerror(a, b, message):
    with pytest.raises(ValueError, match=message):
        lesson.matmul(a(), b())


@pytest.mark.parametrize("config, message", [
    (dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=1, num_warps=1), "missing: num_stages"),
    (dict(BLOCK_SIZE_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=1, num_warps=1, num_stages=1), "unknown: BLOCK_SIZE_M"),
])
def test_bad_config_raises_valueerror(config, message):
    with pytest.raises(ValueError, match=message):
        lesson.matmul(_randn(4, 4), _randn(4, 4), config=config)


@pytest.mark.skipif(not mode.INTERPRET, reason="bf16 is fine on a GPU")
def test_bf16_refused_in_interpreter():
    a = torch.ones(4, 4, dtype=torch.bfloat16)
    with pytest.raises(mode.UnsupportedInInterpreter):
        lesson.matmul(a, a)


# ----- the shapes above catch the classic launch mistakes ------------------------------------


def _launch(a, b, grid, strides=None):
    M, K = a.shape
    N = b.shape[1]
    c = torch.zeros(M, N, dtype=a.dtype, device=a.device)
    cfg = lesson.DEFAULT_INTERPRETER_CONFIG
    s = strides or (a.stride(0), a.stride(1), b.stride(0), b.stride(1))
    lesson.matmul_kernel[(grid(M, N, cfg),)](a, b, c, M, N, K, *s, c.stride(0), c.stride(1), **cfg)
    return c


def test_planted_mistakes_are_caught():
    a, b = _randn(37, 45, seed=7), _randn(45, 50, seed=8)
    full = lambda M, N, c: -(-M // c["BLOCK_M"]) * -(-N // c["BLOCK_N"])  # noqa: E731
    _assert_matmul(_launch(a, b, full), a, b)  # done right, the hand launch passes
    with pytest.raises(AssertionError):  # grid rounded down: the ragged last tiles are never computed
        _assert_matmul(_launch(a, b, lambda M, N, c: (M // c["BLOCK_M"]) * (N // c["BLOCK_N"])), a, b)
    at = _randn(45, 37, seed=7).t()
    with pytest.raises(AssertionError):  # strides assumed contiguous: a transposed A is read wrong
        _assert_matmul(_launch(at, b, full, strides=(at.shape[1], 1, b.stride(0), b.stride(1))), at, b)


# ----- the grader catches planted mistakes, each with the hint that names it ------------------

import types  # noqa: E402

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from tkcourse import check  # noqa: E402


@triton.jit
def _grader_planted(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
             BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, BUG: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    if BUG == "contiguous":  # assumes a row-major layout instead of using the strides
        sam, sak, sbk, sbn = K, 1, N, 1
    if BUG == "f16acc":
        acc = tl.zeros((BM, BN), dtype=tl.float16)
    else:
        acc = tl.zeros((BM, BN), dtype=tl.float32)
    steps = K // BK if BUG == "kfloor" else 20 if BUG == "hardk" else tl.cdiv(K, BK)
    for k in range(0, steps):
        ks = k * BK + rk
        k_ok = (ks < K) if BUG != "kunmasked" else (ks >= 0)
        a = tl.load(a_ptr + rm[:, None] * sam + ks[None, :] * sak, mask=(rm[:, None] < M) & k_ok[None, :], other=0.0)
        b = tl.load(b_ptr + ks[:, None] * sbk + rn[None, :] * sbn, mask=k_ok[:, None] & (rn[None, :] < N), other=0.0)
        if BUG == "noacc":
            acc = tl.dot(a, b, input_precision="ieee")
        elif BUG == "f16acc":
            acc += tl.dot(a, b, out_dtype=tl.float16)
        else:
            acc += tl.dot(a, b, input_precision="ieee")
    if BUG == "storeunmasked":
        tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc.to(c_ptr.dtype.element_ty))
    else:
        tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc.to(c_ptr.dtype.element_ty),
                 mask=(rm[:, None] < M) & (rn[None, :] < N))


def _matmul_module(bug, grid_m=None, alloc=None):
    def matmul(a, b, config=None):
        if a.shape[1] != b.shape[0] or a.dtype != b.dtype:
            raise ValueError("shapes or dtypes")
        M, K = a.shape
        N = b.shape[1]
        c = (alloc or torch.empty)((M, N), dtype=a.dtype, device=a.device)
        BM, BN, BK = (config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]) if config else (32, 32, 16)
        grid = ((grid_m or triton.cdiv)(M, BM), triton.cdiv(N, BN))
        _grader_planted[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                       BM=BM, BN=BN, BK=BK, BUG=bug)
        return c
    return types.SimpleNamespace(matmul=matmul, __name__="planted")


@pytest.mark.parametrize("name, module, hint", [
    ("K loop rounds down", _matmul_module("kfloor"), "last, partial K block is missing"),
    ("strides ignored", _matmul_module("contiguous"), "index with both strides"),
    ("edge tiles not launched", _matmul_module("none", grid_m=lambda m, b: max(1, m // b)), "were never written"),
    ("no accumulation", _matmul_module("noacc"), "accumulate"),
    # classes the fixed shapes and torch.empty canaries alone let through (issue 17)
    ("K loop hard-coded to 20 steps", _matmul_module("hardk"), "a number of steps typed in fits one K only"),
    ("K loads unmasked", _matmul_module("kunmasked"), "the ragged last K block"),
    ("edge tile stored unmasked into a zero-filled c", _matmul_module("storeunmasked", alloc=torch.zeros),
     "mask the store with both edges"),
    ("fp16 accumulator", _matmul_module("f16acc"), "accumulate in fp32"),
])
def test_grader_catches_planted_mistake(name, module, hint):
    assert_grader_catches("matmul", module, name, hint)


GRID = 'return (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)'


def test_grader_catches_a_grid_that_only_square_tiles_hide():
    """The default config's tiles are square: a grid that counts M's tiles with BLOCK_N (and N's with BLOCK_M)
    passes every case but the one whose config's tiles are not square, and its hint says so."""
    from pathlib import Path

    from helpers import mutant

    swapped = GRID.replace('(M, meta["BLOCK_M"])', '(M, meta["BLOCK_N"])').replace('(N, meta["BLOCK_N"])',
                                                                                 '(N, meta["BLOCK_M"])')
    module = mutant(Path("solutions/matmul.py").read_text(), [(GRID, swapped)], "planted_matmul_grid",
                    "solutions/matmul.py")
    bad = assert_grader_catches("matmul", module, "the grid's blocks swapped").first_problem()
    assert "tiles not square" in bad.label and "cdiv(M, meta['BLOCK_M'])" in bad.hint, bad


def test_grader_passes_a_correct_planted_kernel():
    assert check.run("matmul", module=_matmul_module("none"), quiet=True).passed


# ---- the kernel library's decode plan (``solutions.kernels.matmul.MATMUL_DECODE``) ----
def test_decode_config_fills_the_sms_and_fits_the_workspace():
    """Split-K doubles until the programs are twice the SMs, never below 4 K steps a split nor above
    ``DECODE_MAX_SPLIT``; every plan's partials fit the shared split-K workspace."""
    from solutions.kernels import matmul_small as small

    for M in (1, 3, 8, 16):
        for N, K in ((64, 4096), (200, 1100), (4096, 4096), (4096, 14336), (28672, 4096), (128256, 4096)):
            cfg = small.decode_config(M, N, K, 132)
            tiles = triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"])
            steps = triton.cdiv(K, cfg["BLOCK_K"])
            split = cfg["SPLIT_K"]
            assert 1 <= split <= small.DECODE_MAX_SPLIT and split & (split - 1) == 0
            if split > 1:  # each doubling was needed, and left at least 4 steps a split
                assert tiles * split // 2 < 2 * 132 and steps // split >= 4
            if split < small.DECODE_MAX_SPLIT:  # it stopped for a reason
                assert tiles * split >= 2 * 132 or steps // (2 * split) < 4
            ws, counts = small.workspace(M, N, "cpu")
            assert ws.numel() >= tiles * split * cfg["BLOCK_M"] * cfg["BLOCK_N"] and counts.numel() >= tiles
    small._WORKSPACE.clear()
    assert small.decode_config(1, 4096, 4096, 132)["SPLIT_K"] == 8  # 64 tiles: 8 splits of 4 steps


@pytest.mark.parametrize("M", [1, 5, 16, 17])
def test_decode_plan_matches_torch(monkeypatch, M):
    """With ``MATMUL_DECODE`` on, one to 16 rows take the 16-row split-K tiles (ragged N and K), twice
    in a row (the counters are back at zero after each call); 17 rows keep the ordinary plan."""
    from solutions.kernels import decode_plan
    from solutions.kernels import matmul as fast

    a = _randn(M, 1100, dtype=torch.float32, seed=M)
    b = _randn(1100, 200, dtype=torch.float32, seed=M + 1)
    monkeypatch.setattr(fast, "MATMUL_DECODE", True)
    monkeypatch.setitem(decode_plan._SMS, (a.device.type, a.device.index), 8)  # 4 tiles want 4 splits
    fast.forget()
    try:
        want = a.double() @ b.double()
        tol = 2e-3 if mode.INTERPRET else 6e-2  # on a GPU tl.dot multiplies fp32 as tf32 (10-bit mantissas)
        for _ in range(2):
            torch.testing.assert_close(fast.matmul(a, b).double(), want, atol=tol, rtol=2e-3)
        decode = [e for e in fast._MM_FIXED.entries.values() if e.info == "decode"]
        assert len(decode) == (1 if M <= 16 else 0)
        if decode:
            assert decode[0].meta["BLOCK_M"] == 16 and decode[0].meta["SPLIT_K"] == 2  # 9 steps: 2 splits of 4+
    finally:
        fast.forget()
