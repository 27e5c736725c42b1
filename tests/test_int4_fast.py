"""The fast int4 path (``solutions.kernels.int4_matmul``): every variant its sweep measures gives the lesson's
answer, the plan keeps its promises, split-K leaves its counters at zero, and the lean launch keys what the
compile depends on. In the interpreter the PTX dequantization (``DEQ`` 2) runs as the same trick in Triton."""

import pytest
import torch

from solutions import int4_matmul as lesson
from solutions.kernels import int4_matmul as fast
from tkcourse import mode

DEV = mode.DEVICE
config = fast.config

VARIANTS = {
    "dot": config(16, 32, 32, 1, False, 4, 1),
    "dot split-K 3": config(16, 32, 32, 3, False, 4, 1),
    "swapped": config(16, 32, 64, 1, True, 4, 1),
    "swapped split-K 2": config(16, 32, 32, 2, True, 4, 1),
    "conversions": config(16, 32, 32, 2, False, 4, 1, deq=0),
    "bit trick in Triton": config(16, 32, 32, 1, False, 4, 1, deq=1),
    "leaner PTX (its Triton twin here)": config(16, 32, 32, 2, False, 8, 1, deq=3),
    "prefetch": config(16, 32, 32, 2, False, 4, 1, prefetch=True),
    "fma": config(4, 16, 32, 1, False, 4, 1, dot=False, deq=1),
    "fma split-K 2, conversions": config(4, 16, 64, 2, False, 4, 1, dot=False, deq=0),
    "large tile": config(64, 32, 64, 1, False, 4, 1),
    "swapped, 8 columns, scaled after": config(8, 32, 32, 2, True, 4, 1, post_scale=True),
    "scaled after, early scales": config(16, 32, 32, 1, False, 4, 1, post_scale=True, early_scales=True),
    "swapped, early scales": config(8, 16, 64, 1, True, 4, 1, early_scales=True),
    "split by the work": config(8, 16, 32, 0, True, 4, 1, post_scale=True),
    "one-row GEMV": config(1, 32, 32, 1, False, 4, 1, dot=False, deq=1),
    "one-row GEMV split-K 2, PTX": config(1, 16, 64, 2, False, 4, 1, dot=False, deq=2),
    "swapped in pairs": config(16, 32, 32, 1, True, 4, 1, parts=2),
    "swapped in pairs, split-K 2, scaled after": config(16, 32, 64, 2, True, 4, 1, post_scale=True, parts=2),
    "swapped in fours": config(32, 32, 32, 1, True, 4, 1, parts=4),
    "swapped in fours, split-K 2, scaled after": config(32, 16, 64, 2, True, 4, 1, post_scale=True, parts=4),
}


def _problem(M, N, K, G, dtype=torch.float16, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(N, K, generator=g) * K ** -0.5).to(dtype).to(DEV)
    x = torch.randn(M, K, generator=g).to(dtype).to(DEV)
    packed, scales = lesson.quantize(w, G)
    return x, packed, scales


def _err(y, x, packed, scales, G):
    exact = x.double() @ lesson.dequantize(packed, scales, G).double().T
    return ((y.double() - exact).abs().max() / exact.abs().max()).item()


@pytest.mark.parametrize("name", list(VARIANTS))
@pytest.mark.parametrize("M,N,K,G", [(1, 40, 256, 64), (3, 33, 384, 32), (20, 70, 512, 128)])
def test_every_variant_gives_the_lessons_answer(name, M, N, K, G):
    x, packed, scales = _problem(M, N, K, G)
    cfg = VARIANTS[name]
    if not cfg["DOT"] and M > 4 and cfg["BLOCK_M"] > 1:
        cfg = dict(cfg, BLOCK_M=4)  # several tiles of M
    y = fast.run(x, packed, scales, G, cfg)
    assert y.shape == (M, N) and y.dtype == x.dtype
    assert _err(y, x, packed, scales, G) < 2e-3, name


def test_a_planted_nibble_swap_is_caught():
    """The test above can fail: the same check on a weight whose halves are swapped."""
    x, packed, scales = _problem(2, 24, 256, 64)
    swapped = ((packed >> 4) | (packed << 4)).to(torch.uint8)
    y = fast.run(x, swapped, scales, 64, VARIANTS["dot"])
    assert _err(y, x, packed, scales, 64) > 0.05


@pytest.mark.parametrize("M,K,G", [(1, 256, 64), (16, 384, 128), (200, 8192, 128), (5, 96, 32)])
def test_the_plan_keeps_its_promises(M, K, G):
    cfg = fast.plan(M, 4096, K, G)
    assert G % cfg["BLOCK_K"] == 0 and (K // 2) % cfg["BLOCK_K"] == 0 and cfg["BLOCK_K"] >= 16
    assert cfg["BLOCK_M"] >= ((8 if cfg["SWAP"] else 16) if cfg["DOT"] else 1) and cfg["BLOCK_M"] & (cfg["BLOCK_M"] - 1) == 0
    assert 1 <= cfg["SPLIT_K"] <= (K // 2) // cfg["BLOCK_K"]


@pytest.mark.parametrize("M,N,K,want", [(1, 8192, 8192, 4), (1, 14336, 4096, 2), (1, 4096, 14336, 8),
                                         (4, 28672, 8192, 4), (1, 64, 256, 1)])
def test_split_zero_gives_each_small_program_about_eight_steps(M, N, K, want):
    """The H200's fastest splits at batch 1 (steps of 128 bytes): 4 at 8192 x 8192, 2 at 14336 x 4096."""
    cfg = fast.plan(M, N, K, 128, config(8, 64, 128, 0, True, 4, 3), sms=132)
    assert cfg["SPLIT_K"] == want


@pytest.mark.parametrize("N,K,want", [(4096, 4096, 4), (6144, 4096, 4), (1024, 4096, 4), (4096, 1024, 1)])
def test_split_zero_gives_a_small_weight_two_programs_an_sm(N, K, want):
    """A model's small projections (64 or 96 tiles of 64 rows) split past eight steps a program, down to
    four, until the programs fill 132 SMs twice; the 16-row tile keeps the split by steps alone."""
    assert fast.plan(1, N, K, 128, config(8, 64, 128, 0, True, 4, 3), sms=132)["SPLIT_K"] == want
    assert fast.plan(16, 4096, 4096, 128, config(16, 64, 128, 0, False, 4, 3), sms=132)["SPLIT_K"] == 2


def test_up_to_eight_rows_take_the_swapped_tile_sixteen_two_of_them_and_32_four():
    assert all(fast.plan(M, 4096, 4096, 128)["SWAP"] and fast.plan(M, 4096, 4096, 128)["PARTS"] == 1 for M in (1, 4, 5, 8))
    for M in (9, 16):
        cfg = fast.plan(M, 4096, 4096, 128)
        assert cfg["SWAP"] and cfg["PARTS"] == 2 and cfg["BLOCK_M"] == 16
    # parts of 8 columns need 8 rows of x each in the tile, whatever M; without SWAP there is nothing to part
    assert fast.plan(1, 4096, 4096, 128, config(16, 64, 128, 0, True, 4, 3, parts=2))["BLOCK_M"] == 16
    assert fast.plan(3, 4096, 4096, 128, config(32, 64, 128, 0, True, 4, 3, parts=4))["BLOCK_M"] == 32
    for M in (17, 32):  # a decode batch of 17 to 32: four MMAs of 8 columns, K split as at 16 rows
        cfg = fast.plan(M, 4096, 4096, 128)
        assert cfg["SWAP"] and cfg["PARTS"] == 4 and cfg["BLOCK_M"] == 32 and cfg["SPLIT_K"] == 2
    assert not fast.plan(33, 4096, 4096, 128)["SWAP"]
    assert fast.plan(16, 4096, 4096, 128, config(16, 64, 128, 0, False, 4, 3, parts=2))["PARTS"] == 1
    with pytest.raises(ValueError, match="PARTS = 3"):
        fast.plan(24, 4096, 4096, 128, config(32, 64, 128, 0, True, 4, 3, parts=3))


@pytest.mark.parametrize("N,K,want", [(8192, 8192, 2), (4096, 14336, 4), (14336, 4096, 1), (28672, 8192, 1)])
def test_split_zero_fills_the_sms_once_at_prefill(N, K, want):
    cfg = fast.plan(128, N, K, 128, config(128, 128, 64, 0, False, 8, 3), sms=132)
    assert cfg["SPLIT_K"] == want


def test_a_group_too_small_for_a_step_is_refused():
    with pytest.raises(ValueError, match="group_size"):
        fast.plan(1, 64, 64, 8)


def test_split_k_counters_are_zero_after_each_call():
    fast.forget()
    x, packed, scales = _problem(2, 48, 512, 64)
    for _ in range(2):  # the second call reuses the counters: they must be back at zero
        y = fast.run(x, packed, scales, 64, VARIANTS["dot split-K 3"])
        assert _err(y, x, packed, scales, 64) < 2e-3
    ws, counts = next(iter(fast._WORKSPACE.values()))
    assert int(counts.abs().sum()) == 0


def test_lean_calls_match_and_key_each_layout():
    fast.forget()
    table = fast.LEANS["int4_matmul"]
    x, packed, scales = _problem(3, 40, 256, 64)
    first, again = fast.matmul(x, packed, scales, 64), fast.matmul(x, packed, scales, 64)
    assert torch.equal(first, again) and _err(first, x, packed, scales, 64) < 2e-3
    assert len(table.entries) == 1
    x3 = x.reshape(1, 3, 256)  # another shape: another entry, the same answer, the leading dims kept
    y3 = fast.matmul(x3, packed, scales, 64)
    assert y3.shape == (1, 3, 40) and torch.equal(y3[0], first) and len(table.entries) == 2
    fast.matmul(x[:, :], packed, scales, 32 * 2)  # the same key again: no new entry
    assert len(table.entries) == 2


def test_bad_arguments_are_the_lessons_errors():
    x, packed, scales = _problem(2, 16, 128, 64)
    with pytest.raises(ValueError, match="x"):
        fast.matmul(x[:, :64], packed, scales, 64)
    with pytest.raises(ValueError, match="scales"):
        fast.matmul(x, packed, scales[:, :1], 64)
    with pytest.raises(ValueError, match="group_size"):
        fast.matmul(x, packed, scales, 48)


def test_fp32_scales_give_the_same_answer_and_follow_in_place_writes(monkeypatch):
    fast.forget()
    monkeypatch.setattr(fast, "FP32_SCALES", True)
    x, packed, scales = _problem(3, 40, 256, 64)
    y = fast.matmul(x, packed, scales, 64)
    assert _err(y, x, packed, scales, 64) < 2e-3 and torch.equal(fast.matmul(x, packed, scales, 64), y)
    assert fast.scales32(scales) is fast.scales32(scales)  # kept, not remade
    scales.mul_(2)  # an in-place write: the copy is remade, and the result doubles
    assert torch.allclose(fast.matmul(x, packed, scales, 64).float(), 2 * y.float(), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_the_kernel_compiles_for_hopper_on_any_machine(dtype):
    """The recorded decode tile, with its PTX dequantization (``DEQ`` 3, which the interpreter never runs),
    compiled for sm_90a by ``research/int4/compile_check.py`` in a process of its own (it compiles, so it
    turns the interpreter off): what only a GPU run once found (a PTX string that was not a constexpr)
    fails here."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    run = subprocess.run([sys.executable, str(root / "research/int4/compile_check.py"), "recorded", "--dtype", dtype],
                         capture_output=True, text=True, timeout=300, cwd=root)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "sm_90a" in run.stdout and "mma.sync" in run.stdout and "LOP3" in run.stdout


_DTYPES = [torch.float16, torch.float32] + ([] if mode.INTERPRET else [torch.bfloat16])  # the interpreter has no bf16


@pytest.mark.parametrize("dtype", _DTYPES)
@pytest.mark.parametrize("N,K,G", [(33, 256, 64), (8, 96, 32), (40, 512, 128)])
def test_the_dequantize_kernel_is_the_lessons_bit_for_bit(dtype, N, K, G):
    g = torch.Generator().manual_seed(N)
    w = (torch.randn(N, K, generator=g) * 3).to(dtype).to(DEV)
    packed, scales = lesson.quantize(w, G)
    assert torch.equal(fast.dequantize(packed, scales, G), lesson.dequantize(packed, scales, G))
    # into another dtype: the fp32 product rounded once to it
    want = lesson.dequantize(packed, scales.float(), G).to(torch.float16)
    assert torch.equal(fast.dequantize(packed, scales, G, torch.float16), want)
    with pytest.raises(ValueError, match="group_size"):
        fast.dequantize(packed, scales, 48)


def test_many_rows_go_to_cublas_on_the_dequantized_weight(monkeypatch):
    fast.forget()
    monkeypatch.setattr(fast, "DENSE_MIN_M", 5)
    table = fast.LEANS["int4_matmul"]
    x, packed, scales = _problem(6, 40, 256, 64)
    want = (x.float() @ fast.dequantize(packed, scales, 64, x.dtype).float().T).to(x.dtype)
    for _ in range(2):  # the first call routes the key, the second finds it routed
        y = fast.matmul(x.reshape(2, 3, 256), packed, scales, 64)
        assert y.shape == (2, 3, 40) and _err(y.reshape(6, 40), x, packed, scales, 64) < 2e-3
        torch.testing.assert_close(y.reshape(6, 40), want, rtol=2e-3, atol=2e-3)
    assert len(fast._DENSE) == 1 and not table.entries  # no int4 kernel entry for it
    fast.matmul(x[:4], packed, scales, 64)  # fewer rows: the int4 kernel, as before
    assert len(table.entries) == 1 and len(fast._DENSE) == 1
    fast.forget()
    assert not fast._DENSE


def test_the_dense_route_without_room_for_the_16_bit_weight_runs_the_int4_kernel(monkeypatch):
    fast.forget()
    monkeypatch.setattr(fast, "DENSE_MIN_M", 5)

    def no_room(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 112.00 MiB")
    monkeypatch.setattr(fast, "dequantize", no_room)
    x, packed, scales = _problem(6, 40, 256, 64)
    for _ in range(2):  # routed on the first call, and the second finds the key routed
        y = fast.matmul(x, packed, scales, 64)
        assert y.shape == (6, 40) and _err(y, x, packed, scales, 64) < 2e-3
    assert len(fast._DENSE) == 1
    fast.forget()


def test_the_dense_route_starts_at_dense_min_m():
    fast.forget()
    assert fast.DENSE_MIN_M is not None
    _, packed, scales = _problem(1, 16, 64, 32)
    x = torch.randn(fast.DENSE_MIN_M, 64, device=DEV).to(torch.float16)
    for rows in (fast.DENSE_MIN_M - 1, fast.DENSE_MIN_M):
        y = fast.matmul(x[:rows], packed, scales, 32)
        assert _err(y, x[:rows], packed, scales, 32) < 2e-3
    assert len(fast._DENSE) == 1 and len(fast.LEANS["int4_matmul"].entries) == 1  # the smaller call: a kernel
    fast.forget()
