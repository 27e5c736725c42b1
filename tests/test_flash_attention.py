"""Lesson 06: FlashAttention forward, the lesson's kernel and the tuned step module, against float64 torch."""

import functools
import importlib.util

import pytest
import torch
from helpers import assert_grader_catches

from solutions import flash_attention as fa
from solutions.kernels import attention_forward as fat
from tkcourse import mode, stubs

# fp32 tl.dot is exact fp32 in the interpreter, TF32 on a GPU
ATOL32 = 2e-5 if mode.INTERPRET else 5e-3


def _qkv(B, H, N, D, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, N, D, generator=g).to(dtype=dtype, device=mode.DEVICE) for _ in range(3)]


def _forward(impl):
    """The lesson's ``attention_forward`` for "simple"; the tuned step module's for "tuned" and "auto"."""
    return fa.attention_forward if impl == "simple" else functools.partial(fat.attention_forward, impl=impl)


def _check(q, k, v, causal, impl, config=None, sm_scale=None, atol=ATOL32):
    o, lse = _forward(impl)(q, k, v, causal=causal, sm_scale=sm_scale, config=config)
    assert o.shape == q.shape and o.dtype == q.dtype
    assert lse.shape == q.shape[:3] and lse.dtype == torch.float32
    ro, rlse = fa.reference(*(t.double() for t in (q, k, v)), causal=causal, sm_scale=sm_scale, return_lse=True)
    torch.testing.assert_close(o.double(), ro, atol=atol, rtol=atol)
    torch.testing.assert_close(lse.double(), rlse, atol=atol, rtol=atol)  # natural log, per row
    return o


@pytest.mark.parametrize("impl", ["simple", "tuned"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("D", [16, 64])
@pytest.mark.parametrize("N", [1, 17, 64, 100])
def test_forward_matches_reference(N, D, causal, impl):
    _check(*_qkv(2, 2, N, D), causal, impl)  # B=2, H=2: a wrong batch or head offset shows


@pytest.mark.parametrize("impl", ["simple", "tuned"])
@pytest.mark.parametrize("D", [32, 128])
def test_other_head_dims(D, impl):
    for causal in (False, True):
        _check(*_qkv(2, 1, 33, D, seed=D), causal, impl)


@pytest.mark.parametrize("impl", ["simple", "tuned"])
def test_fp16(impl):
    for causal in (False, True):
        _check(*_qkv(2, 1, 100, 64, dtype=torch.float16), causal, impl, atol=2e-3)


@pytest.mark.parametrize("config", [
    {"BLOCK_M": 16, "BLOCK_N": 32},  # key blocks wider than query blocks
    {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3},
])
def test_tuned_with_explicit_config(config):
    for causal in (False, True):
        _check(*_qkv(2, 1, 100, 16), causal, "tuned", config=config)


@pytest.mark.parametrize("N", [128, 256])
def test_host_made_descriptors(N, monkeypatch):
    """N a multiple of the blocks: the launcher makes one descriptor of all heads (head bh from row
    bh·N), and the answer is the same as with the kernel's own descriptors, one per head."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    q, k, v = _qkv(2, 3, N, 16, seed=N)  # B·H = 6 heads: a wrong head offset shows
    assert isinstance(fat.descriptors(q, k, v, q, fat.HOST_DESCRIPTOR_MULTIPLE)[0], TensorDescriptor)
    assert not isinstance(fat.descriptors(q, k, v, q, 256)[0], TensorDescriptor) or N % 256 == 0
    host = {causal: _check(q, k, v, causal, "tuned") for causal in (False, True)}
    assert isinstance(fat.descriptors(q, k, v, q, 128, host=False)[0], torch.Tensor)
    for causal, o in host.items():  # the argument a probe passes to compare the two
        torch.testing.assert_close(fat.attention_forward(q, k, v, causal=causal, impl="tuned",
                                                         host_descriptors=False)[0], o)
    monkeypatch.setattr(fat, "HOST_DESCRIPTORS", False)
    assert isinstance(fat.descriptors(q, k, v, q, 128)[0], torch.Tensor)
    monkeypatch.setattr(fat, "HOST_DESCRIPTORS", True)
    monkeypatch.setattr(fat, "HOST_DESCRIPTOR_MAX_N", N - 1)  # longer sequences: the kernel makes its own
    assert isinstance(fat.descriptors(q, k, v, q, 128)[0], torch.Tensor)


def test_warp_specialized_config():
    """A warp-specialized K/V loop must be the kernel's only loop: non-causal, N a multiple of BLOCK_N."""
    config = {"BLOCK_M": 32, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2, "WARP_SPECIALIZE": True}
    _check(*_qkv(2, 2, 64, 16), False, "tuned", config=config)
    for N, causal in ((64, True), (50, False)):
        with pytest.raises(ValueError, match="WARP_SPECIALIZE"):
            fat.attention_forward(*_qkv(1, 1, N, 16), causal=causal, impl="tuned", config=config)


def test_simple_with_explicit_config_and_scale():
    _check(*_qkv(1, 2, 50, 32), True, "simple", config={"BLOCK_M": 16, "BLOCK_N": 16}, sm_scale=0.3)
    _check(*_qkv(1, 2, 50, 32), False, "tuned", sm_scale=0.3)


def test_tolerance_catches_common_mistakes():
    """The checks above are tight enough to see a forgotten mask, a wrong scale or a base-2 lse."""
    q, k, v = _qkv(2, 2, 64, 16)
    o, lse = fa.attention_forward(q, k, v, causal=False)
    ro, rlse = fa.reference(*(t.double() for t in (q, k, v)), causal=True, return_lse=True)
    assert (o.double() - ro).abs().max() > 100 * ATOL32  # causal mask forgotten
    wrong_scale = fa.reference(q, k, v, sm_scale=1.0)
    assert (wrong_scale.double() - fa.reference(q.double(), k.double(), v.double())).abs().max() > 100 * ATOL32
    assert (lse.double() / 0.6931471805599453 - fa.reference(q.double(), k.double(), v.double(),
                                                             return_lse=True)[1]).abs().max() > 100 * ATOL32


@pytest.mark.parametrize("args, message", [
    (lambda d: _qkv(1, 1, 8, 16)[:2] + [torch.randn(1, 1, 9, 16, device=d)], "shape"),
    (lambda d: _qkv(1, 1, 8, 16)[:2] + [torch.randn(1, 1, 8, 16, device=d, dtype=torch.float16)], "dtype"),
    (lambda d: [torch.randn(1, 8, 16, device=d)] * 3, "4-D"),
    (lambda d: _qkv(1, 1, 8, 48), "head dimension"),
    (lambda d: _qkv(1, 1, 8, 256), "head dimension"),
    (lambda d: _qkv(1, 1, 8, 16)[:2] + [[1.0]], "torch.Tensor"),
])
def test_bad_inputs_raise_valueerror(args, message):
    with pytest.raises(ValueError, match=message):
        fa.attention(*args(mode.DEVICE))


@pytest.mark.parametrize("kwargs, message", [
    ({"impl": "fast"}, "impl"),
    ({"config": {"BLOCK_M": 32}}, "BLOCK_N"),
    ({"config": {"BLOCK_M": 32, "BLOCK_N": 32, "warps": 4}}, "unknown"),
])
def test_bad_options_raise_valueerror(kwargs, message):
    with pytest.raises(ValueError, match=message):
        fat.attention_forward(*_qkv(1, 1, 8, 16), **kwargs)


@pytest.mark.skipif(not mode.INTERPRET, reason="bf16 is fine on a GPU")
def test_bf16_refused_in_interpreter():
    with pytest.raises(mode.UnsupportedInInterpreter, match="bfloat16"):
        fa.attention(*_qkv(1, 1, 8, 16, dtype=torch.bfloat16))


def test_lesson_module_runs_only_its_kernel():
    """The lesson's module (what the exercise is made from) has no tuned kernel to dispatch to, on a GPU
    either, and imports no later step or lesson; the tuned module refuses an unknown ``impl``."""
    assert not hasattr(fa, "attn_fwd_tuned") and not hasattr(fa, "use_tuned")
    imports = [line for line in open(fa.__file__).read().splitlines() if line.startswith(("import ", "from "))]
    assert not any("flash_attention_" in line for line in imports), imports
    _check(*_qkv(1, 2, 20, 16), True, "simple")
    with pytest.raises(ValueError, match="impl"):
        fat.attention_forward(*_qkv(1, 1, 8, 16), impl="fast")


def test_exercise_keeps_only_the_readable_kernel(tmp_path):
    text = stubs.expected("flash_attention")
    assert "def attn_fwd_tuned_loop" not in text and "tl.make_tensor_descriptor(Q" not in text
    assert "tl.exp(" not in text  # the simple kernel's body is the learner's
    path = tmp_path / "stub_flash_attention.py"  # from a file: on a GPU, @triton.jit reads the source
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("stub_flash_attention", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert not hasattr(mod, "attn_fwd_tuned") and not hasattr(mod, "use_tuned")  # it runs the learner's kernel


# ----- the grader catches planted mistakes, each with the hint that names it ------------------
# The mistakes are planted in torch code that computes attention block by block as the kernel does:
# the grader only sees the function, and torch keeps these tests quick in the interpreter.

import math  # noqa: E402
import types  # noqa: E402

from tkcourse import check  # noqa: E402
from tkcourse.check.flash_attention import _no_rescale  # noqa: E402
from tkcourse.check.flash_attention import reference as fwd_reference  # noqa: E402


def _fwd_module(bug):
    def attention(q, k, v, causal=False, sm_scale=None):
        if q.shape != k.shape or q.dtype != k.dtype:
            raise ValueError("q and k must match")
        scale = 1 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
        if bug == "scale":
            scale = 1 / q.shape[-1]
        if bug == "rescale":
            out = _no_rescale(q, k, v, causal, scale, 32)
        else:
            out = fwd_reference(q, k, v, causal if bug != "causal" else False, scale)
        return out.to(q.dtype)
    return types.SimpleNamespace(attention=attention, __name__="planted")


@pytest.mark.parametrize("name, bug, hint", [
    ("wrong scale", "scale", "wrong scale"),
    ("missing rescale", "rescale", "missing rescale"),
    ("causal mask ignored", "causal", "causal mask is ignored"),
])
def test_forward_grader_catches_planted_mistake(name, bug, hint):
    assert_grader_catches("flash_attention", _fwd_module(bug), name, hint)


def test_forward_grader_passes_a_correct_planted_function():
    assert check.run("flash_attention", module=_fwd_module(None), quiet=True).passed


@pytest.mark.skipif(mode.INTERPRET, reason="autotunes on a GPU")
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_autotuned_host_descriptors_match_torch_on_a_gpu(D, causal):
    """N = 1024: a multiple of every block, so the autotuned kernel reads through host-made descriptors
    whose block shapes the configs' pre-hook sets; a wrong shape or head offset shows here."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 1024, D, device="cuda", dtype=torch.float16) for _ in range(3))
    assert not isinstance(fat.descriptors(q, k, v, q, fat.HOST_DESCRIPTOR_MULTIPLE)[0], torch.Tensor)
    o, lse = fat.attention_forward(q, k, v, causal=causal)
    ro, rlse = fa.reference(q.float(), k.float(), v.float(), causal=causal, return_lse=True)
    torch.testing.assert_close(o.float(), ro, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(lse, rlse, atol=2e-2, rtol=2e-2)
