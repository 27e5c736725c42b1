"""The kernel library's attention with grouped-query heads and a query shorter than its keys.

q (B, Hq, N_Q, D), k and v (B, Hkv, N_KV, D), Hq a multiple of Hkv (MHA, GQA, MQA); causal attention
aligned to the end (query i sees keys j <= i + N_KV - N_Q, FlashAttention's convention). Forward,
backward and the autograd layer, against torch with the tolerance rule of FlashAttention's
``test_flash_attn_output``: the kernel's error against an upcast reference must be at most a few
times the error of the same torch maths run in the input's dtype (2x for the output, 3x for the
gradients), plus a small atol. The upcast reference is float64 here, so that an fp32 kernel is
measured against something finer than itself.
"""

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from solutions.kernels import attention as lean_attention
from solutions.kernels import attention_backward as fbt
from solutions.kernels import attention_forward as fat
from tkcourse import mode

#: atol beside the 2x/3x rule: fp32 tl.dot is exact in the interpreter and TF32 on a GPU, where torch's
#: fp32 matmul is not; fp16 rounds the output once.
ATOL = {torch.float32: 2e-5 if mode.INTERPRET else 5e-3, torch.float16: 2e-4}
#: assert_close's tolerances for an fp32 kernel against float64 (the same TF32 allowance on a GPU)
FP32 = dict(atol=1e-5, rtol=1e-5) if mode.INTERPRET else dict(atol=ATOL[torch.float32], rtol=ATOL[torch.float32])


def reference(q, k, v, causal=False, sm_scale=None):
    """Attention in torch, in the inputs' dtype: each KV head repeated for its query heads
    (``repeat_interleave``) and the causal mask drawn from the bottom right."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    s = (q @ k.transpose(-2, -1)) * scale
    if causal:
        s = s.masked_fill(causal_mask(q.shape[2], k.shape[2], q.device).logical_not(), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def causal_mask(n_q, n_kv, device="cpu"):
    """True where query i may see key j: j <= i + n_kv - n_q."""
    return torch.ones(n_q, n_kv, dtype=torch.bool, device=device).tril(n_kv - n_q)


def _inputs(B, Hq, Hkv, Nq, Nk, D, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, Hq, Nq, D, generator=g)
    k, v = (torch.randn(B, Hkv, Nk, D, generator=g) for _ in range(2))
    do = torch.randn(B, Hq, Nq, D, generator=g)
    return [t.to(dtype=dtype, device=mode.DEVICE) for t in (q, k, v, do)]


def _grads(f, q, k, v, do, causal):
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    o = f(q, k, v, causal=causal)
    o.backward(do)
    return o.detach(), q.grad, k.grad, v.grad


def _assert_within(name, got, ref, pt, factor, atol):
    err, base = (got.double() - ref).abs().max().item(), (pt.double() - ref).abs().max().item()
    assert got.shape == ref.shape and got.dtype == pt.dtype, name
    assert err <= factor * base + atol, f"{name}: error {err:.3g} > {factor} x torch's {base:.3g} + {atol:g}"


def check(B, Hq, Hkv, Nq, Nk, D, causal, dtype, attention=lean_attention.attention, seed=0):
    """The output (2x) and the three gradients (3x) of ``attention`` by the tolerance rule."""
    q, k, v, do = _inputs(B, Hq, Hkv, Nq, Nk, D, dtype, seed)
    got = _grads(attention, q, k, v, do, causal)
    ref = _grads(reference, *(t.double() for t in (q, k, v, do)), causal)
    pt = _grads(reference, q, k, v, do, causal)
    for name, g, r, p, factor in zip(("o", "dq", "dk", "dv"), got, ref, pt, (2, 3, 3, 3)):
        _assert_within(name, g, r, p, factor, ATOL[dtype])


HEADS = {"MHA": (4, 4), "MQA": (4, 1), "GQA": (6, 2)}
#: (N_Q, N_KV): a query shorter than its keys (a chunk after a KV cache), equal, one query (decode),
#: and longer (non-causal only). Lengths that are no multiple of the blocks: partial blocks, and
#: packed query blocks that straddle two heads.
LENGTHS = [(17, 40), (33, 33), (1, 45), (40, 17)]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("lengths", LENGTHS, ids=lambda n: f"Nq{n[0]}-Nk{n[1]}")
@pytest.mark.parametrize("heads", list(HEADS), ids=str)
def test_fp16_d64(heads, lengths, causal):
    if causal and lengths[0] > lengths[1]:
        pytest.skip("causal needs N_Q <= N_KV (test_errors checks the ValueError)")
    check(2, *HEADS[heads], *lengths, 64, causal, torch.float16)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads", list(HEADS), ids=str)
def test_fp32_d128(heads, causal):
    check(1, *HEADS[heads], 19, 37, 128, causal, torch.float32, seed=1)


@pytest.mark.parametrize("causal", [False, True])
def test_fp32_d64_and_the_ordinary_launch(causal):
    """The backward module's layer (the ordinary launch, no lean entry) gives the same answers."""
    check(2, 6, 2, 17, 40, 64, causal, torch.float32, attention=fbt.attention, seed=2)


def test_the_rule_catches_a_top_left_mask():
    """The tolerance rule is tight enough to see a causal mask drawn from the top left (torch's
    ``is_causal``), or dK, dV of one query head instead of the group's sum."""
    def top_left(q, k, v, causal):
        group = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)

    def first_head_only(q, k, v, causal):
        o = lean_attention.attention(q, k, v, causal=causal)
        return torch.cat([o[:, :1], o[:, 1:].detach()], dim=1)

    for planted in (top_left, first_head_only):
        with pytest.raises(AssertionError, match="error"):
            check(1, 4, 2, 9, 20, 16, True, torch.float32, attention=planted)


def test_reference_agrees_with_sdpa():
    """This file's reference against SDPA with ``enable_gqa`` and the same bottom-right mask."""
    q, k, v, _ = _inputs(2, 6, 2, 5, 9, 16, torch.float64)
    for causal in (False, True):
        mask = causal_mask(5, 9, q.device) if causal else None
        sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        torch.testing.assert_close(reference(q, k, v, causal), sdpa)


def test_lse_and_the_mask_alignment():
    """lse of each query row, (B, Hq, N_Q), natural log; N_Q = N_KV is the usual causal mask, and the
    last query of a shorter one sees every key."""
    q, k, v, _ = _inputs(1, 4, 2, 6, 10, 16, torch.float32)
    for causal in (False, True):
        o, lse = lean_attention.attention_forward(q, k, v, causal=causal, impl="tuned")
        kk = k.double().repeat_interleave(2, dim=1)
        s = q.double() @ kk.transpose(-2, -1) / 4.0
        if causal:
            s = s.masked_fill(causal_mask(6, 10, q.device).logical_not(), float("-inf"))
        assert lse.shape == (1, 4, 6) and lse.dtype == torch.float32
        torch.testing.assert_close(lse.double(), torch.logsumexp(s, -1), **FP32)
    assert causal_mask(3, 3).equal(torch.ones(3, 3, dtype=torch.bool).tril())
    assert causal_mask(2, 5)[-1].all() and causal_mask(2, 5)[0].sum() == 4


def test_lean_entries_and_host_made_descriptors():
    """A second call takes the kept entry; rows and keys that are multiples of the blocks read through
    host-made descriptors, with the same answer as the kernel's own."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    q, k, v, _ = _inputs(2, 4, 2, 16, 48, 16, torch.float32, seed=3)  # 2·16 packed rows, 48 keys
    assert isinstance(fat.gqa_descriptors(q, k, v, q, 32, 16)[0], TensorDescriptor)
    assert isinstance(fat.gqa_descriptors(q, k, v, q, 64, 16)[0], torch.Tensor)  # 32 rows: no 64-row blocks
    table = lean_attention.LEANS["fwd_gqa_fixed"]
    table.entries.clear()
    compiles = table.compiles
    for causal in (False, True):
        want = reference(*(t.double() for t in (q, k, v)), causal)
        for _ in range(2):
            o = lean_attention.attention_forward(q, k, v, causal, impl="tuned")[0]
            torch.testing.assert_close(o.double(), want, **FP32)
        inkernel = fat.attention_forward(q, k, v, causal=causal, host_descriptors=False)[0]
        torch.testing.assert_close(inkernel, o)
    assert table.compiles == compiles + 2  # one first call per causal, then hits


@pytest.mark.parametrize("config", [{"BLOCK_M": 16, "BLOCK_N": 32}, {"BLOCK_M": 64, "BLOCK_N": 16}])
def test_explicit_configs(config):
    """Any block shapes: causal ranges are computed per block, with no multiple of one another needed."""
    q, k, v, _ = _inputs(1, 3, 1, 21, 50, 16, torch.float32, seed=4)
    for causal in (False, True):
        o = fat.attention_forward(q, k, v, causal=causal, config=config)[0]
        torch.testing.assert_close(o.double(), reference(*(t.double() for t in (q, k, v)), causal), **FP32)
    do = torch.randn_like(q)
    o, lse = fat.attention_forward(q, k, v, causal=True)
    got = fbt.attention_backward(do, q, k, v, o, lse, True, dkdv_config=config, dq_config=config)
    want = _grads(reference, *(t.double() for t in (q, k, v, do)), True)[1:]
    for g, w in zip(got, want):
        torch.testing.assert_close(g.double(), w, **FP32)


def test_equal_shapes_keep_their_path():
    """q, k, v of one shape never take the grouped kernel."""
    q, k, v, _ = _inputs(1, 2, 2, 8, 8, 16, torch.float32)
    assert not fat.grouped(q, k, v) and fat.grouped(q, k[:, :1], v[:, :1]) and fat.grouped(q, k[:, :, :4], v[:, :, :4])


def _t(*shape):
    return torch.randn(*shape, device=mode.DEVICE)


@pytest.mark.parametrize("args, causal, message", [
    ((_t(1, 3, 8, 16), _t(1, 2, 8, 16), _t(1, 2, 8, 16)), False, "Hq must be a multiple of Hkv"),
    ((_t(2, 4, 8, 16), _t(1, 2, 8, 16), _t(1, 2, 8, 16)), False, "batch"),
    ((_t(1, 4, 8, 16), _t(1, 2, 8, 32), _t(1, 2, 8, 32)), False, "head dimension"),
    ((_t(1, 4, 9, 16), _t(1, 2, 8, 16), _t(1, 2, 8, 16)), True, "causal"),
    ((_t(1, 4, 8, 16), _t(1, 2, 8, 16), _t(1, 2, 9, 16)), False, "v has"),
    ((_t(1, 4, 8, 48), _t(1, 2, 8, 48), _t(1, 2, 8, 48)), False, "head dimension"),
])
def test_errors(args, causal, message):
    for f in (lean_attention.attention_forward, fat.attention_forward):
        with pytest.raises(ValueError, match=message):
            f(*args, causal=causal)
    with pytest.raises(ValueError, match=message):
        lean_attention.attention(*args, causal=causal)


def test_backward_and_impl_errors():
    q, k, v, do = _inputs(1, 4, 2, 8, 12, 16, torch.float32)
    o, lse = fat.attention_forward(q, k, v)
    with pytest.raises(ValueError, match="lse"):
        fbt.attention_backward(do, q, k, v, o, lse[:, :2], False)
    with pytest.raises(ValueError, match="Hq must be a multiple"):
        fbt.attention_backward(do, q, k[:, :1].expand(1, 3, 12, 16), v[:, :1].expand(1, 3, 12, 16), o, lse)
    with pytest.raises(ValueError, match="causal"):
        fbt.attention_backward(do, q, k[:, :, :4], v[:, :, :4], o, lse, True)
    with pytest.raises(ValueError, match="simple"):
        fat.attention_forward(q, k, v, impl="simple")
    with pytest.raises(ValueError, match="impl"):
        fat.attention_forward(q, k, v, impl="fast")


@settings(max_examples=12, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(B=st.integers(1, 2), Hkv=st.integers(1, 2), group=st.integers(1, 3), Nq=st.integers(1, 40),
       extra=st.integers(-20, 30), causal=st.booleans(), seed=st.integers(0, 2**16))
def test_forward_property(B, Hkv, group, Nq, extra, causal, seed):
    """Any heads, lengths and mask: the forward (fp32, D 16) equals float64 torch, or causal with
    N_Q > N_KV raises the ValueError that names ``causal``."""
    Nk = max(1, Nq + extra)
    q, k, v, _ = _inputs(B, Hkv * group, Hkv, Nq, Nk, 16, torch.float32, seed)
    if causal and Nq > Nk:
        with pytest.raises(ValueError, match="causal"):
            lean_attention.attention_forward(q, k, v, causal)
        return
    o = lean_attention.attention_forward(q, k, v, causal)[0]
    torch.testing.assert_close(o.double(), reference(*(t.double() for t in (q, k, v)), causal),
                               atol=ATOL[torch.float32], rtol=ATOL[torch.float32])


def test_gqa_backward_case_makes_its_tensors_on_first_call():
    """The benchmark's grouped backward case builds nothing until it runs (a filtered-out shape costs
    nothing), then each call is one more backward of the same forward."""
    from benchmarks.flash_attention import gqa_backward_case, gqa_shape_name

    calls = []

    def f(q, k, v, causal):
        calls.append(causal)
        return lean_attention.attention(q, k, v, causal=causal)

    case = gqa_backward_case("triton", f, 1, 4, 2, 16, 16, True, device=mode.DEVICE)
    assert case.shape == gqa_shape_name(1, 4, 2, 16, 16, True) == "B1-Hq4-Hkv2-N16-D16-causal" and calls == []
    case.fn()
    case.fn()
    assert calls == [True]


def test_grouped_query_forward_tunes_over_the_sweeps_winners():
    """The grouped-query forward's autotune list is the six tiles that won the equal-head sweeps, each
    one of ``FWD_CONFIGS`` (its warp-specialized tile included), so a prefill compiles six, not all."""
    from solutions.kernels import attention_forward as fat

    def tile(c):
        return (c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages, c.kwargs["WARP_SPECIALIZE"])

    assert {tile(c) for c in fat.GQA_FWD_CONFIGS} == fat.GQA_FWD_TILES
    assert len(fat.GQA_FWD_CONFIGS) == len(fat.GQA_FWD_TILES) < len(fat.FWD_CONFIGS)
    assert all(c in fat.FWD_CONFIGS for c in fat.GQA_FWD_CONFIGS)
    assert any(c.kwargs["WARP_SPECIALIZE"] for c in fat.GQA_FWD_CONFIGS)
