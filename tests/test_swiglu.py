"""The SwiGLU product in one launch (solutions/kernels/swiglu.py): silu(gate) * up in float64 on awkward
shapes, of one fused (..., 2F) output or two tensors, strided rows and columns, the refusals, one lean
entry per key."""

import pytest
import torch
from helpers import randn

from solutions import kernels
from solutions.kernels import swiglu as S
from tkcourse import mode

DEV = mode.DEVICE


def _tol(dtype):
    # one rounding of the output: fp16 keeps 11 bits; fp32 maths otherwise
    return dict(rtol=2e-3, atol=2e-3) if dtype == torch.float16 else dict(rtol=1e-5, atol=1e-6)


def _swiglu64(gate, up):
    g, u = gate.double().cpu(), up.double().cpu()
    return g * torch.sigmoid(g) * u


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("shape", [(1,), (5,), (1, 1), (3, 37), (2, 3, 1025), (4, 2048)])
def test_two_tensors_match_float64(shape, dtype):
    gate, up = randn(*shape, dtype=dtype, scale=3, seed=1), randn(*shape, dtype=dtype, seed=2)
    g0, u0 = gate.clone(), up.clone()
    for _ in range(2):  # the first call and the kept entry
        out = S.swiglu(gate, up)
        assert out.shape == gate.shape and out.dtype == dtype and out.is_contiguous()
        torch.testing.assert_close(out.double().cpu(), _swiglu64(gate, up), **_tol(dtype))
    assert torch.equal(gate, g0) and torch.equal(up, u0)
    torch.testing.assert_close(out, S.swiglu_reference(gate, up), **_tol(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("shape", [(2,), (1, 2 * 37), (3, 5, 2 * 1000), (8, 2 * 1536)])
def test_fused_halves_match_float64(shape, dtype):
    gate_up = randn(*shape, dtype=dtype, scale=3, seed=3)
    F = shape[-1] // 2
    for _ in range(2):
        out = S.swiglu(gate_up)
        assert out.shape == (*shape[:-1], F) and out.dtype == dtype
        torch.testing.assert_close(out.double().cpu(), _swiglu64(gate_up[..., :F], gate_up[..., F:]), **_tol(dtype))
    torch.testing.assert_close(out, S.eager_swiglu(gate_up), **_tol(dtype))  # what a model computes


def test_strided_rows_and_columns():
    base = randn(6, 4, 2 * 50, seed=4)
    cases = [(base[::2],), (base.transpose(0, 1),),  # rows of one stride; rows no single stride describes
             (randn(2 * 50, 7, seed=5).T,),  # strided columns: copied
             (base[..., :50], base[..., 50:]),  # two halves of one tensor, rows strided
             (randn(40, 9, seed=6).T, randn(9, 40, seed=7))]  # one strided, one contiguous
    for args in cases:
        want = _swiglu64(*args) if len(args) == 2 else _swiglu64(*args[0].chunk(2, -1))
        for _ in range(2):
            torch.testing.assert_close(S.swiglu(*args).double().cpu(), want, **_tol(torch.float32))


def test_bad_inputs_name_the_argument():
    g = randn(3, 8)
    cases = [((randn(3, 7),), "gate_up"), ((g, randn(3, 9)), "shape"), ((g, g.half()), "dtype"),
             (([1.0, 2.0],), "gate_up"), ((g, [1.0]), "up"), ((torch.empty(0, 4, device=DEV),), "gate_up"),
             ((g.long(),), "gate_up")]
    for args, match in cases:
        with pytest.raises(ValueError, match=match):
            S.swiglu(*args)


def test_one_lean_entry_per_key():
    table = kernels.LEANS["swiglu"]
    S.forget()
    compiles = table.compiles
    x = randn(4, 2 * 96, seed=8)
    S.swiglu(x)
    S.swiglu(x.clone())  # same properties: the same entry
    assert len(table.entries) == 1 and table.compiles == compiles + 1
    S.swiglu(x.half())  # dtype
    S.swiglu(x[:2])  # shape
    S.swiglu(x[::2])  # row stride
    buf = torch.empty(x.numel() + 1, device=DEV)
    S.swiglu(buf[1:].view(x.shape).copy_(x))  # a pointer 4 bytes past alignment
    S.swiglu(x[:, :96], x[:, 96:])  # two tensors
    assert len(table.entries) == 6 and table.compiles == compiles + 6
    assert len({key[3] for key in table.entries}) == 2  # data_ptr() & 15 told apart
