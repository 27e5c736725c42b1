"""Grader for lesson 06: ``attention(q, k, v, causal=False, sm_scale=None)``, FlashAttention's forward."""

from __future__ import annotations

import math

import torch

from .. import mode
from .core import attempt, refuses

# (B, H, N, D, causal): N in {1, 17, 64, 100, 257}, D in {16, 64}; B, H > 1 to catch batch/head offsets
SHAPES = [(2, 2, 100, 16, False), (2, 2, 100, 16, True), (1, 1, 1, 16, False), (1, 2, 17, 64, True),
          (2, 1, 64, 64, False), (1, 1, 257, 16, True), (1, 1, 257, 64, False)]


def reference(q, k, v, causal=False, sm_scale=None):
    """Attention in float64 torch, materializing the N×N scores."""
    q, k, v = q.double(), k.double(), v.double()
    scale = 1 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        n = q.shape[-2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def _no_rescale(q, k, v, causal, scale, block):
    """The classic mistake: the running max grows but the accumulator is not rescaled."""
    q, k, v = q.double(), k.double(), v.double()
    n = q.shape[-2]
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    m = torch.full(s.shape[:-1], float("-inf"), dtype=torch.float64, device=s.device)
    l = torch.zeros_like(m)
    acc = torch.zeros(*s.shape[:-1], v.shape[-1], dtype=torch.float64, device=s.device)
    for j in range(0, n, block):
        sj = s[..., j:j + block]
        m_new = torch.maximum(m, sj.amax(-1))
        p = torch.exp(sj - m_new[..., None])
        l = l * torch.exp(m - m_new) + p.sum(-1)
        acc = acc + p @ v[..., j:j + block, :]  # missing: acc * exp(m - m_new)
        m = m_new
    return acc / l[..., None]


def _diagnose(q, k, v, causal):
    D = q.shape[-1]
    scale = 1 / math.sqrt(D)

    def hint(o, e, wrong):
        if torch.isnan(o).any():
            nan_rows = torch.isnan(o).any(-1)
            return (f"{int(nan_rows.sum())} query rows are NaN: never written (check the grid: cdiv(N, BLOCK_M) x B*H, "
                    "and the store mask offs_m < N), or 0/0 from a row whose keys were all masked")
        close = lambda ref: torch.allclose(o, ref.cpu(), atol=2e-2, rtol=2e-2)
        qc, kc, vc = q.cpu(), k.cpu(), v.cpu()
        for s, what in ((1.0, "no scale at all"), (1 / D, "1/D instead of 1/sqrt(D)"), (scale * scale, "the scale applied twice")):
            if close(reference(qc, kc, vc, causal, s)):
                return f"wrong scale ({what}): scores are (q·k) * sm_scale, with sm_scale = 1/sqrt(D) by default"
        if close(reference(qc, kc, vc, not causal, scale)):
            return ("the causal mask is " + ("ignored: query i may only see keys j <= i (mask the diagonal block, "
                    "skip blocks above it)" if causal else "applied although causal=False"))
        for block in (16, 32, 64, 128):
            if close(_no_rescale(qc, kc, vc, causal, scale, block)):
                return ("missing rescale: when the running max grows, multiply the accumulator (and l) by "
                        "exp(m_old - m_new) before adding p @ v")
        if causal:
            return "check the causal mask on the diagonal block (offs_m[:, None] >= offs_n[None, :]) and which blocks you skip"
        return ("check the mask of the last, partial K/V block (keys past N must get -inf scores) and the final "
                "division by l")
    return hint


def grade(mod):
    gen = torch.Generator().manual_seed(0)
    dtypes = [torch.float32, torch.float16]
    for dtype in dtypes:
        for B, H, N, D, causal in SHAPES if dtype == torch.float32 else SHAPES[:2]:
            label = f"B={B} H={H} N={N} D={D}{' causal' if causal else ''} {str(dtype)[6:]}"
            q, k, v = (torch.randn(B, H, N, D, generator=gen, dtype=torch.float64).to(dtype).to(mode.DEVICE)
                       for _ in range(3))
            expected = reference(q, k, v, causal)
            tol = 2e-3 if dtype == torch.float16 else (2e-5 if mode.INTERPRET else 1e-2)
            yield attempt(label, mod.attention, (q, k, v), expected, kwargs=dict(causal=causal), dtype=dtype,
                          atol=tol, rtol=tol * 5, diagnose=_diagnose(q, k, v, causal))
    q, k, v = (torch.randn(1, 1, 33, 16, generator=gen).to(mode.DEVICE) for _ in range(3))
    yield attempt("sm_scale is honoured", mod.attention, (q, k, v), reference(q, k, v, False, 0.3),
                  kwargs=dict(sm_scale=0.3), dtype=q.dtype, atol=1e-2 if not mode.INTERPRET else 2e-5, rtol=1e-4,
                  diagnose=lambda o, e, w: "pass sm_scale through to the kernel instead of 1/sqrt(D)")
    d, hint = mode.DEVICE, "validate q, k, v before launching"
    a = torch.ones(1, 1, 8, 16, device=d)
    yield refuses("mismatched shapes raise ValueError", mod.attention, a, torch.ones(1, 1, 9, 16, device=d), a, hint=hint)
    yield refuses("mismatched dtypes raise ValueError", mod.attention, a, a.half(), a, hint=hint)
