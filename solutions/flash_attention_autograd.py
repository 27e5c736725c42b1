"""Lessons 06 and 07 joined: FlashAttention as a trainable layer, one ``torch.autograd.Function``.

The forward (lesson 06's ``attention_forward``) returns ``o`` and the row log-sum-exp ``lse``; the
Function saves q, k, v, o and lse (O(N) memory beyond the inputs, never the N×N probabilities), and
its backward hands them to lesson 07's ``attention_backward``, which recomputes P from ``lse``
(Dao et al., FlashAttention, 2022, section 3.1). This module is neither lesson's: it imports both,
so that lesson 06 stands without lesson 07. ``trainable(forward, backward)`` joins any pair with
those signatures (a learner's exercises, or the tuned step modules); ``attention`` joins the lessons'.
"""

import math

import torch

from .flash_attention import attention_forward
from .flash_attention_backward import attention_backward


class AttentionFunction(torch.autograd.Function):
    """``o`` of ``forward(q, k, v, causal=, sm_scale=, **options) -> (o, lse)``, whose gradient is
    ``backward(do, q, k, v, o, lse, causal, sm_scale) -> (dq, dk, dv)``."""

    @staticmethod
    def forward(ctx, q, k, v, causal, sm_scale, forward, backward, options):
        o, lse = forward(q, k, v, causal=causal, sm_scale=sm_scale, **options)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal = bool(causal)
        ctx.sm_scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else float(sm_scale)
        ctx.backward_fn = backward
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = ctx.backward_fn(do, q, k, v, o, lse, ctx.causal, ctx.sm_scale)
        return dq, dk, dv, None, None, None, None, None


def trainable(forward, backward):
    """``attention(q, k, v, causal=False, sm_scale=None, **options)``, differentiable: ``forward`` runs it
    (``options``, e.g. ``config``, go to it) and ``backward`` gives its gradients."""

    def attention(q, k, v, causal=False, sm_scale=None, **options):
        """FlashAttention: ``softmax(sm_scale · q kᵀ [causal mask]) v`` for q, k, v of shape (B, H, N, D),
        differentiable. ``sm_scale`` defaults to 1/sqrt(D); D is one of 16, 32, 64, 128; N >= 1."""
        return AttentionFunction.apply(q, k, v, causal, sm_scale, forward, backward, options)

    attention.forward, attention.backward = forward, backward  # whose code runs: see tkcourse.whose
    return attention


#: The lessons' trainable layer: lesson 06's kernel forward, lesson 07's backward.
attention = trainable(attention_forward, attention_backward)
