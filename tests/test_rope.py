"""RoPE on q and k in one launch (solutions/kernels/rope.py): the Llama formula in float64 on awkward
shapes and strides, in place on views of a fused QKV output, the tables, the refusals, one lean entry
per key."""

import math

import pytest
import torch
from helpers import randn

from solutions import kernels
from solutions.kernels import rope as R
from tkcourse import mode

DEV = mode.DEVICE


def _tol(dtype):
    # one rounding of each output: fp16 keeps 11 bits (values up to ~4 here); fp32 maths otherwise
    return dict(rtol=2e-3, atol=4e-3) if dtype == torch.float16 else dict(rtol=1e-5, atol=1e-5)


def _rope64(x, positions, D, theta=500000.0):
    """The Llama formula in float64, angles from scratch: x * cos + rotate_half(x) * sin."""
    inv = theta ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    ang = positions.double().cpu()[..., None] * inv  # (B, T, D/2)
    c, s = torch.cat([ang.cos()] * 2, -1)[:, :, None], torch.cat([ang.sin()] * 2, -1)[:, :, None]
    x = x.double().cpu()
    rot = torch.cat([-x[..., D // 2:], x[..., :D // 2]], -1)
    return x * c + rot * s


def _inputs(B, T, HQ, HKV, D, dtype, max_pos=300, seed=0):
    q, k = randn(B, T, HQ, D, dtype=dtype, seed=seed), randn(B, T, HKV, D, dtype=dtype, seed=seed + 1)
    g = torch.Generator().manual_seed(seed + 2)
    positions = torch.randint(0, max_pos, (B, T), generator=g).to(DEV)
    cos, sin = R.rope_tables(max_pos, D, device=DEV)
    return q, k, cos, sin, positions


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("B,T,HQ,HKV,D", [(1, 1, 4, 2, 8), (2, 5, 3, 3, 10), (3, 7, 6, 2, 64), (2, 1, 1, 1, 2),
                                          (1, 3, 33, 1, 16)])
def test_matches_float64_and_leaves_inputs_alone(B, T, HQ, HKV, D, dtype):
    q, k, cos, sin, positions = _inputs(B, T, HQ, HKV, D, dtype)
    q0, k0 = q.clone(), k.clone()
    for _ in range(2):  # the first call and the kept entry
        qo, ko = R.rope(q, k, cos, sin, positions)
        assert qo.shape == q.shape and ko.shape == k.shape and qo.dtype == dtype and qo.is_contiguous()
        torch.testing.assert_close(qo.double().cpu(), _rope64(q, positions, D), **_tol(dtype))
        torch.testing.assert_close(ko.double().cpu(), _rope64(k, positions, D), **_tol(dtype))
    assert torch.equal(q, q0) and torch.equal(k, k0)
    for got, want in zip((qo, ko), R.rope_reference(q, k, cos, sin, positions)):
        torch.testing.assert_close(got, want, **_tol(dtype))


def test_position_zero_is_the_identity_and_rotations_compose():
    q, k, cos, sin, _ = _inputs(1, 4, 2, 2, 16, torch.float32)
    zero = torch.zeros(1, 4, dtype=torch.int64, device=DEV)
    qo, ko = R.rope(q, k, cos, sin, zero)
    torch.testing.assert_close(qo, q), torch.testing.assert_close(ko, k)
    # a rotation keeps each pair's length, and q.k depends only on the distance of the two positions
    p, d = torch.tensor([[5, 9, 40, 41]], device=DEV), 3
    q1, k1 = R.rope(q, k, cos, sin, p)
    q2, k2 = R.rope(q, k, cos, sin, p + d)
    torch.testing.assert_close((q1 * k1).sum(-1), (q2 * k2).sum(-1), rtol=1e-4, atol=1e-4)


def test_in_place_on_views_of_a_fused_qkv_output():
    """A decode step's q and k are views of one (B, T, (Hq + 2 Hkv) * D) projection output: rotated in
    place there, v untouched, and the same tensors returned."""
    B, T, HQ, HKV, D = 2, 3, 4, 2, 8
    qkv = randn(B, T, (HQ + 2 * HKV) * D, seed=5)
    heads = qkv.view(B, T, HQ + 2 * HKV, D)
    q, k, v = heads[:, :, :HQ], heads[:, :, HQ:HQ + HKV], heads[:, :, HQ + HKV:]
    _, _, cos, sin, positions = _inputs(B, T, HQ, HKV, D, torch.float32)
    want_q, want_k = _rope64(q, positions, D), _rope64(k, positions, D)
    q0, k0, v0 = q.clone(), k.clone(), v.clone()
    for _ in range(2):  # the first call and the kept entry, each on the unrotated values
        q.copy_(q0), k.copy_(k0)
        qo, ko = R.rope(q, k, cos, sin, positions, inplace=True)
        assert qo is q and ko is k
        torch.testing.assert_close(q.double().cpu(), want_q, **_tol(torch.float32))
        torch.testing.assert_close(k.double().cpu(), want_k, **_tol(torch.float32))
        assert torch.equal(v, v0)


def test_strided_inputs_shared_positions_and_tables_in_the_input_dtype():
    B, T, HQ, HKV, D = 2, 5, 3, 2, 12
    q = randn(B, HQ, T, D, seed=7).transpose(1, 2)  # (B, T, H, D) from a (B, H, T, D) layout
    k = randn(B, T, HKV, 2 * D, seed=8)[..., ::2]  # strided last dim: copied first
    row = torch.tensor([0, 3, 17, 200, 299], device=DEV)
    positions = row[None].expand(B, T)  # one row of positions for every sequence: stride 0 over B
    cos, sin = R.rope_tables(300, D, device=DEV)
    for _ in range(2):
        qo, ko = R.rope(q, k, cos, sin, positions)
        torch.testing.assert_close(qo.double().cpu(), _rope64(q, positions, D), **_tol(torch.float32))
        torch.testing.assert_close(ko.double().cpu(), _rope64(k, positions, D), **_tol(torch.float32))
    qh, kh = q.half(), k.half()
    ch, sh = R.rope_tables(300, D, device=DEV, dtype=torch.float16)
    qo, ko = R.rope(qh, kh, ch, sh, positions.int())
    torch.testing.assert_close(qo.double().cpu(), _rope64(qh, positions, D), rtol=4e-3, atol=8e-3)


def test_hf_formula_is_the_reference():
    q, k, cos, sin, positions = _inputs(2, 3, 4, 2, 8, torch.float32)
    c, s = cos[positions], sin[positions]
    c, s = torch.cat([c, c], -1)[:, :, None], torch.cat([s, s], -1)[:, :, None]
    for got, want in zip(R.hf_rope(q, k, c, s), R.rope(q, k, cos, sin, positions)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_positions_past_the_tables_leave_their_token_unrotated():
    q, k, cos, sin, _ = _inputs(1, 3, 2, 1, 8, torch.float32, max_pos=16)
    positions = torch.tensor([[-1, 5, 16]], device=DEV)
    qo, _ = R.rope(q, k, cos, sin, positions)
    torch.testing.assert_close(qo[:, 0], q[:, 0]), torch.testing.assert_close(qo[:, 2], q[:, 2])
    assert not torch.allclose(qo[:, 1], q[:, 1])


def test_tables():
    cos, sin = R.rope_tables(50, 8, theta=10000.0)
    assert cos.shape == sin.shape == (50, 4) and cos.dtype == torch.float32
    p, i = 37, 3
    assert math.isclose(cos[p, i].item(), math.cos(p * 10000.0 ** (-2 * i / 8)), rel_tol=1e-6, abs_tol=1e-7)
    assert math.isclose(sin[p, i].item(), math.sin(p * 10000.0 ** (-2 * i / 8)), rel_tol=1e-6, abs_tol=1e-7)
    for bad, name in ((dict(max_pos=0, D=8), "max_pos"), (dict(max_pos=4, D=7), "D"), (dict(max_pos=4.0, D=8), "max_pos")):
        with pytest.raises(ValueError, match=name):
            R.rope_tables(**bad)


def test_bad_inputs_name_the_argument():
    q, k, cos, sin, positions = _inputs(2, 3, 4, 2, 8, torch.float32)
    cases = [
        ((q[0], k, cos, sin, positions), "q"),
        ((q, k[:1], cos, sin, positions), "k must be"),
        ((q[..., :7], k[..., :7], cos[:, :3], sin[:, :3], positions), "even"),
        ((q, k, cos[:, :3], sin[:, :3], positions), "cos and sin"),
        ((q, k, cos.double(), sin.double(), positions), "cos"),
        ((q, k, cos, sin, positions.float()), "positions"),
        ((q, k, cos, sin, positions[:, :2]), "positions"),
        ((q, k, cos, sin, [[0, 1, 2], [0, 1, 2]]), "positions"),
        ((q, k, cos, sin, None), "positions"),
        ((q.tolist(), k, cos, sin, positions), "q"),
    ]
    for args, match in cases:
        with pytest.raises(ValueError, match=match):
            R.rope(*args)
    strided = randn(2, 3, 4, 16, seed=9)[..., ::2]
    with pytest.raises(ValueError, match="inplace"):
        R.rope(strided, k, cos, sin, positions, inplace=True)
    with pytest.raises(ValueError, match="inplace"):
        R.rope(q, k, cos, sin, positions, inplace="yes")
    with pytest.raises(ValueError, match="inplace"):
        R.rope(q, k, cos, sin, positions, inplace=[True])


def test_one_lean_entry_per_key():
    table = kernels.LEANS["rope"]
    R.forget()
    q, k, cos, sin, positions = _inputs(2, 3, 4, 2, 16, torch.float32)
    compiles = table.compiles
    R.rope(q, k, cos, sin, positions)
    R.rope(q.clone(), k.clone(), cos, sin, positions + 1)  # same properties, other values: the same entry
    assert len(table.entries) == 1 and table.compiles == compiles + 1
    R.rope(q.half(), k.half(), cos, sin, positions)  # dtype
    R.rope(q[:1], k[:1], cos, sin, positions[:1])  # shape
    R.rope(q, k, cos, sin, positions.int())  # positions' dtype
    R.rope(q.transpose(1, 2).contiguous().transpose(1, 2), k, cos, sin, positions)  # strides
    buf = torch.empty(q.numel() + 1, device=DEV)
    shifted = buf[1:].view(q.shape).copy_(q)  # a pointer 4 bytes past alignment
    R.rope(shifted, k, cos, sin, positions)
    R.rope(q.clone(), k.clone(), cos, sin, positions, inplace=True)  # in place
    assert len(table.entries) == 7 and table.compiles == compiles + 7
    assert len({key[3] for key in table.entries}) == 2  # q's data_ptr() & 15 told apart
