"""Lesson 07: FlashAttention backward (dQ, dK, dV), the lesson's and the tuned step, against float64 torch autograd."""

import functools
import math

import pytest
import torch
from helpers import assert_grader_catches

from solutions import flash_attention as fa
from solutions import flash_attention_autograd as fag
from solutions import flash_attention_backward as fb
from solutions.kernels import attention_backward as fbt
from tkcourse import mode, stubs

ATOL32 = 5e-5 if mode.INTERPRET else 1e-2  # fp32 tl.dot: exact fp32 in the interpreter, TF32 on a GPU
FWD_ATOL32 = 2e-5 if mode.INTERPRET else 5e-3  # the forward's output alone (tests/test_flash_attention.py)


def _tensors(B, H, N, D, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, N, D, generator=g).to(dtype=dtype, device=mode.DEVICE) for _ in range(4)]


def _reference(do, q, k, v, causal, sm_scale=None):
    return fb.reference_backward(*(t.double() for t in (do, q, k, v)), causal=causal, sm_scale=sm_scale)


def _assert_grads(got, want, atol=ATOL32):
    for name, g, w in zip(("dq", "dk", "dv"), got, want):
        assert g.dtype != torch.float64 and g.shape == w.shape, name
        torch.testing.assert_close(g.double(), w, atol=atol, rtol=atol, msg=lambda m, n=name: f"{n}: {m}")


def _attention(impl):
    """The lessons' trainable layer for "simple"; the tuned step modules' (with that ``impl``) otherwise."""
    return fag.attention if impl == "simple" else functools.partial(fbt.attention, impl=impl)


def _autograd(q, k, v, do, causal, impl="simple", sm_scale=None):
    q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
    _attention(impl)(q, k, v, causal=causal, sm_scale=sm_scale).backward(do)
    return q.grad, k.grad, v.grad


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("D", [16, 64])
@pytest.mark.parametrize("N", [1, 17, 64, 100])
def test_gradients_match_reference(N, D, causal):
    q, k, v, do = _tensors(2, 2 if N <= 64 else 1, N, D)  # B=2 (and H=2): a wrong batch or head offset shows
    _assert_grads(_autograd(q, k, v, do, causal), _reference(do, q, k, v, causal))


@pytest.mark.parametrize("D", [32, 128])
def test_other_head_dims(D):
    q, k, v, do = _tensors(2, 1, 33, D, seed=D)
    for causal in (False, True):
        _assert_grads(_autograd(q, k, v, do, causal), _reference(do, q, k, v, causal))


def test_after_tuned_forward_and_with_a_scale():
    q, k, v, do = _tensors(2, 1, 50, 16, seed=1)
    for causal in (False, True):
        _assert_grads(_autograd(q, k, v, do, causal, impl="tuned"), _reference(do, q, k, v, causal))
    _assert_grads(_autograd(q, k, v, do, True, sm_scale=0.3), _reference(do, q, k, v, True, sm_scale=0.3))


def test_attention_is_differentiable_and_takes_views():
    q, k, v = (t.transpose(1, 2).contiguous().transpose(1, 2).requires_grad_() for t in _tensors(2, 3, 20, 16)[:3])
    assert not q.is_contiguous()
    o = fag.attention(q, k, v, causal=True)  # lesson 07 makes it trainable
    assert o.requires_grad
    torch.testing.assert_close(o.double(), fa.reference(q.double(), k.double(), v.double(), causal=True),
                               atol=FWD_ATOL32, rtol=FWD_ATOL32)


def test_fp16():
    q, k, v, do = _tensors(2, 1, 40, 64, dtype=torch.float16)
    for causal in (False, True):
        _assert_grads(_autograd(q, k, v, do, causal), _reference(do, q, k, v, causal), atol=1e-2)


@pytest.mark.parametrize("dkdv, dq", [
    ({"BLOCK_N": 32, "BLOCK_M": 16}, {"BLOCK_M": 32, "BLOCK_N": 16}),  # several steps on the diagonal
    ({"BLOCK_N": 16, "BLOCK_M": 16, "num_warps": 4, "num_stages": 3}, {"BLOCK_M": 16, "BLOCK_N": 16}),
])
def test_explicit_configs(dkdv, dq):
    q, k, v, do = _tensors(2, 1, 40, 16, seed=2)
    for causal in (False, True):
        o, lse = fa.attention_forward(q, k, v, causal=causal)
        got = fb.attention_backward(do, q, k, v, o, lse, causal, dkdv_config=dkdv, dq_config=dq)
        _assert_grads(got, _reference(do, q, k, v, causal))


def test_lse_is_natural_log_logsumexp():
    """The backward's contract: lse = logsumexp(scale · q kᵀ) in natural log, as torch computes it."""
    q, k, v, do = _tensors(1, 2, 40, 16, seed=3)
    o, lse = fa.reference(q, k, v, causal=True, return_lse=True)
    _assert_grads(fb.attention_backward(do, q, k, v, o, lse.float(), True), _reference(do, q, k, v, True))


def test_expanded_gradient():
    """``o.sum().backward()`` hands the backward a stride-0 dO."""
    q, k, v, _ = (t.requires_grad_() for t in _tensors(1, 2, 24, 16, seed=4))
    fag.attention(q, k, v, causal=True).sum().backward()
    want = _reference(torch.ones_like(q), q.detach(), k.detach(), v.detach(), True)
    _assert_grads((q.grad, k.grad, v.grad), want)


def test_tolerance_catches_common_mistakes():
    """Δ missing, the causal mask forgotten, the scale applied twice, a base-2 lse: each fails the check."""
    q, k, v, do = _tensors(2, 2, 64, 16, seed=5)
    o, lse = fa.attention_forward(q, k, v, causal=True)
    want = _reference(do, q, k, v, True)
    scale = 1 / math.sqrt(16)
    mistakes = {
        "delta missing": fb.attention_backward(do, q, k, v, torch.zeros_like(o), lse, True),
        "causal mask forgotten": fb.attention_backward(do, q, k, v, o, lse, False),
        "lse in base 2": fb.attention_backward(do, q, k, v, o, lse / 0.6931471805599453, True),
    }
    dq, dk, dv = fb.attention_backward(do, q, k, v, o, lse, True)
    mistakes["scale applied twice"] = (dq * scale, dk * scale, dv)
    for name, got in mistakes.items():
        with pytest.raises(AssertionError):
            _assert_grads(got, want)
            pytest.fail(f"{name} was not caught")


@pytest.mark.parametrize("change, message", [
    (lambda t: {**t, "lse": t["lse"].half()}, "lse has dtype"),
    (lambda t: {**t, "lse": t["lse"][:, :, :4]}, "lse must be"),
    (lambda t: {**t, "do": t["do"][:, :, :4]}, "shape"),
    (lambda t: {**t, "do": t["do"].half()}, "dtype"),
])
def test_bad_inputs_raise_valueerror(change, message):
    q, k, v, do = _tensors(1, 1, 8, 16)
    o, lse = fa.attention_forward(q, k, v)
    t = change(dict(do=do, q=q, k=k, v=v, o=o, lse=lse))
    with pytest.raises(ValueError, match=message):
        fb.attention_backward(t["do"], t["q"], t["k"], t["v"], t["o"], t["lse"])


def test_bad_config_raises_valueerror():
    q, k, v, do = _tensors(1, 1, 8, 16)
    o, lse = fa.attention_forward(q, k, v)
    with pytest.raises(ValueError, match="BLOCK_M"):
        fb.attention_backward(do, q, k, v, o, lse, dkdv_config={"BLOCK_N": 16})
    with pytest.raises(ValueError, match="BLOCK_M"):
        fb.attention_backward(do, q, k, v, o, lse, dq_config={"BLOCK_N": 16})


def test_exercise_leaves_the_dkdv_kernel_to_the_learner():
    text = stubs.expected("flash_attention_backward")
    compile(text, "stub_flash_attention_backward.py", "exec")
    assert "dsT = pT * (dpT - delta" not in text and "dk *= sm_scale" not in text
    assert "attn_bwd_dq_loop" in text  # the dQ kernel is given


# ----- the grader catches planted mistakes, each with the hint that names it ------------------

import types  # noqa: E402

from tkcourse import check  # noqa: E402
from tkcourse.check.flash_attention_backward import backward as model_backward  # noqa: E402


def _bwd_module(**mistake):
    def attention_backward(do, q, k, v, o, lse, causal=False, sm_scale=None):
        dq, dk, dv = model_backward(q, k, v, do, causal, sm_scale, **mistake)
        return dq.to(q.dtype), dk.to(q.dtype), dv.to(q.dtype)
    return types.SimpleNamespace(attention_backward=attention_backward, __name__="planted")


@pytest.mark.parametrize("name, mistake, hint", [
    ("delta missing", dict(delta=False), "Δ is missing"),
    ("scale applied twice", dict(scale_power=2), "applied twice"),
    ("causal mask forgotten", dict(mask=False), "causal mask is forgotten"),
])
def test_backward_grader_catches_planted_mistake(name, mistake, hint):
    assert_grader_catches("flash_attention_backward", _bwd_module(**mistake), name, hint)


def test_backward_grader_passes_a_correct_planted_function():
    assert check.run("flash_attention_backward", module=_bwd_module(), quiet=True).passed


@pytest.mark.skipif(mode.INTERPRET, reason="compares with SDPA on a GPU")
@pytest.mark.parametrize("D", [16, 32, 64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_gradients_match_sdpa_on_a_gpu(D, causal):
    """N not a multiple of any block and above AUTOTUNE_MIN_N, so the autotuned kernels run."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 1000, D, device="cuda", dtype=torch.float16, requires_grad=True) for _ in range(3))
    do = torch.randn_like(q)
    fbt.attention(q, k, v, causal=causal).backward(do)  # the tuned forward and the autotuned backward
    ours = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal).backward(do)
    for name, a, t in zip("qkv", ours, (q, k, v)):
        torch.testing.assert_close(a, t.grad, atol=2e-2, rtol=2e-2, msg=lambda m, name=name: f"d{name}: {m}")
