"""The one-pass attention backward (``research/attention/atomic_backward.py``): dK and dV on chip,
dQ added into fp32 by atomics, for every shape the library's forward takes (MHA, GQA, MQA, N_Q != N_KV,
causal aligned to the end), by FlashAttention's tolerance rule (``test_attention_gqa.check``)."""

import pytest
import torch
from test_attention_gqa import _inputs, check

from research.attention import atomic_backward as aba
from solutions.flash_attention_autograd import trainable
from solutions.kernels import attention_backward as fbt
from solutions.kernels import attention_forward as fat
from tkcourse import mode

one_pass = trainable(fat.attention_forward, aba.attention_backward)


@pytest.mark.parametrize("heads, lengths, causal", [
    ((4, 4), (33, 33), False), ((4, 4), (33, 33), True), ((6, 2), (17, 40), False), ((6, 2), (17, 40), True),
    ((4, 1), (1, 45), True), ((4, 2), (40, 17), False),  # causal needs N_Q <= N_KV
], ids=["MHA", "MHA-causal", "GQA-short-q", "GQA-short-q-causal", "MQA-decode-causal", "GQA-long-q"])
def test_fp16_d64(heads, lengths, causal):
    check(2, *heads, *lengths, 64, causal, torch.float16, attention=one_pass)


@pytest.mark.parametrize("causal", [False, True], ids=["plain", "causal"])
def test_fp32_d128_several_programs_a_head(causal):
    """More key blocks than one program and more query blocks than one step (the interpreter's config is
    32 keys by 16 queries): the staggered starts wrap round, and several programs add into each dQ row."""
    check(1, 4, 2, 70, 100, 128, causal, torch.float32, attention=one_pass, seed=3)


@pytest.mark.parametrize("config", [{"BLOCK_N": 16, "BLOCK_M": 32}, {"BLOCK_N": 64, "BLOCK_M": 16}])
def test_explicit_configs_agree_with_the_two_pass_backward(config):
    """Any tile shape, the causal diagonal cut at any place: the same gradients as lesson 07's two kernels."""
    q, k, v, do = _inputs(1, 4, 2, 45, 77, 32, torch.float32, seed=4)
    o, lse = fat.attention_forward(q, k, v, True)
    got = aba.attention_backward(do, q, k, v, o, lse, True, config=config)
    ref = fbt.attention_backward(do, q, k, v, o, lse, True)
    for name, g, r in zip(("dq", "dk", "dv"), got, ref):
        torch.testing.assert_close(g, r, atol=2e-5, rtol=1e-4, msg=name)


def test_the_rule_catches_a_missing_dq_share():
    """The check is not blind to dQ: leaving out one key block's adds (here: dQ of a half-length key
    range) fails it. A stand-in for a kernel that skips the atomics of its masked blocks."""
    q, k, v, do = _inputs(1, 2, 2, 40, 40, 32, torch.float32, seed=5)
    o, lse = fat.attention_forward(q, k, v, True)
    dq, _, _ = aba.attention_backward(do, q, k, v, o, lse, True)
    ref, _, _ = fbt.attention_backward(do, q, k, v, o, lse, True)
    torch.testing.assert_close(dq, ref, atol=2e-5, rtol=1e-4)
    o2, lse2 = fat.attention_forward(q, k[:, :, :20], v[:, :, :20], False)
    partial, _, _ = aba.attention_backward(do, q, k[:, :, :20], v[:, :, :20], o2, lse2, False)
    assert (partial - ref).abs().max() > 1e-2


@pytest.mark.parametrize("args, message", [
    (dict(lse=torch.zeros(1, 2, 8, dtype=torch.float64)), "lse"),
    (dict(config={"BLOCK_N": 24, "BLOCK_M": 16}), "BLOCK_N"),
    (dict(do=torch.zeros(1, 2, 9, 16)), "do"),
])
def test_errors_name_the_argument(args, message):
    q, k, v, do = _inputs(1, 2, 1, 8, 8, 16, torch.float32)
    o, lse = fat.attention_forward(q, k, v, False)
    call = dict(do=do, q=q, k=k, v=v, o=o, lse=lse)
    config = args.pop("config", None)
    call.update({n: t.to(mode.DEVICE) for n, t in args.items()})
    with pytest.raises(ValueError, match=message):
        aba.attention_backward(**call, causal=False, config=config)
