"""Grader for lesson 07: ``attention_backward(do, q, k, v, o, lse, causal, sm_scale) -> (dq, dk, dv)``.

The forward's ``o`` and ``lse`` (natural log, fp32, (B, H, N)) come from a float64 torch reference, so
this lesson is graded on its own, whatever state lesson 06's exercise is in.
"""

from __future__ import annotations

import math

import torch

from .. import mode
from .core import Case, call, compare, error_case

SHAPES = [(2, 2, 100, 16, False), (1, 2, 100, 16, True), (1, 1, 1, 16, False), (1, 1, 17, 64, True),
          (2, 1, 64, 32, False), (1, 1, 257, 16, True)]


def backward(q, k, v, do, causal, scale, *, delta=True, mask=True, scale_power=1):
    """dq, dk, dv in float64 by the lesson's formulas, with switches that reproduce the classic mistakes."""
    q, k, v, do = (t.double().cpu() for t in (q, k, v, do))
    n = q.shape[-2]
    s = (q @ k.transpose(-1, -2)) * scale
    causal_mask = torch.ones(n, n, dtype=torch.bool).triu(1)
    lse = torch.logsumexp(s.masked_fill(causal_mask, float("-inf")) if causal else s, dim=-1)
    p = torch.exp(s - lse[..., None])
    if causal and mask:
        p = p.masked_fill(causal_mask, 0.0)
    o = p @ v
    dv = p.transpose(-1, -2) @ do
    dp = do @ v.transpose(-1, -2)
    d = (do * o).sum(-1, keepdim=True) if delta else 0.0
    ds = p * (dp - d)
    g = scale ** scale_power
    return ds @ k * g, ds.transpose(-1, -2) @ q * g, dv


def forward(q, k, v, causal, scale):
    """o and lse (natural log, fp32) in float64 torch."""
    qd, kd, vd = q.double(), k.double(), v.double()
    s = (qd @ kd.transpose(-1, -2)) * scale
    if causal:
        n = q.shape[-2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    return (torch.softmax(s, -1) @ vd).to(q.dtype), lse.float()


def _diagnose(q, k, v, do, causal, scale, which):
    idx = {"dq": 0, "dk": 1, "dv": 2}[which]

    def hint(o, e, wrong):
        if torch.isnan(o).any():
            return (f"parts of {which} were never written (NaN): check the grid (a program per K/V block for dk, dv; "
                    "per Q block for dq) and the store masks for rows past N")
        close = lambda **kw: torch.allclose(o, backward(q, k, v, do, causal, scale, **kw)[idx], atol=2e-2, rtol=2e-2)
        if close(delta=False):
            return "Δ is missing: dS = P ∘ (dP − Δ) with Δ = rowsum(dO ∘ O), one value per query row"
        if close(scale_power=2):
            return "the scale is applied twice: P already includes it; dQ = dS·K·scale and dK = dSᵀ·Q·scale, once"
        if close(scale_power=0):
            return "the scale is missing: dQ = dS·K·scale and dK = dSᵀ·Q·scale"
        if causal and close(mask=False):
            return ("the causal mask is forgotten in the backward: recompute P with keys j > i masked "
                    "(P = 0 there), as in the forward")
        return f"{which} is wrong: recompute P = exp(scale·QKᵀ − lse) exactly as the forward, then follow the formulas"
    return hint


def grade(mod):
    gen = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.float16):
        for B, H, N, D, causal in SHAPES if dtype == torch.float32 else SHAPES[:2]:
            label = f"B={B} H={H} N={N} D={D}{' causal' if causal else ''} {str(dtype)[6:]}"
            q, k, v, do = (torch.randn(B, H, N, D, generator=gen, dtype=torch.float64).to(dtype).to(mode.DEVICE)
                           for _ in range(4))
            scale = 1 / math.sqrt(D)
            o, lse = forward(q, k, v, causal, scale)
            expected = backward(q, k, v, do, causal, scale)
            try:
                grads, allocs = call(mod.attention_backward, do, q, k, v, o, lse, causal, scale)
            except Exception as exc:
                yield error_case(label, exc)
                return
            if grads is None or len(grads) != 3:
                yield Case(label, "todo", "attention_backward did not return (dq, dk, dv)", "return the three gradients")
                return
            tol = 1e-2 if dtype == torch.float16 else (1e-4 if mode.INTERPRET else 2e-2)
            for which, got, exp in zip(("dk", "dv", "dq"), (grads[1], grads[2], grads[0]), (expected[1], expected[2], expected[0])):
                case = compare(f"{label}: {which}", got, exp.to(dtype), dtype=dtype, allocs=allocs, atol=tol, rtol=tol * 5,
                               diagnose=_diagnose(q, k, v, do, causal, scale, which))
                yield case
                if case.status != "pass":
                    return
