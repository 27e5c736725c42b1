"""Grader for lesson 07: ``attention_backward(do, q, k, v, o, lse, causal, sm_scale) -> (dq, dk, dv)``.

The forward's ``o`` and ``lse`` (natural log, fp32, (B, H, N)) come from a float64 torch reference, so
this lesson is graded on its own, whatever state lesson 06's exercise is in.

Every graded call runs under the tracer (an out-of-bounds load or store is a failing case, never
performed), and is checked for gradients that alias an input or each other and for inputs that the
call changed. The cases: tiny awkward shapes, fp16; strided layouts (q, k, v, o as (B, N, H, D)
tensors transposed to (B, H, N, D); a stride-0 dO, which ``o.sum().backward()`` hands over), which
``attention_backward`` must compute, as the solution does by making them contiguous; seeded random
B, H, N, D, which defeat a grid or loop bound hard-coded to the fixed shapes.
"""

from __future__ import annotations

import math

import torch

from .. import mode, traffic
from .core import (
    Case,
    Snapshot,
    alias_case,
    compare,
    error_case,
    oob_case,
    random_sizes,
    rows_loaded_past,
    seeded,
    storage_overlap,
    traced_call,
)
from .flash_attention import scores

LOG2E = 1.4426950408889634  # qk_scale = sm_scale · log2(e)
SHAPES = [(2, 2, 100, 16, False), (1, 2, 100, 16, True), (1, 1, 1, 16, False), (1, 1, 17, 64, True),
          (2, 1, 64, 32, False), (1, 1, 257, 16, True)]
# (B, H, N, D, causal, layout)
LAYOUTS = [(2, 2, 37, 16, True, "(B, N, H, D) transposed"), (1, 2, 24, 16, False, "dO of stride 0")]
NAMES = ("dq", "dk", "dv")
#: (BLOCK_N, BLOCK_M) of the dK/dV kernel as the lesson's given launcher runs it (``DKDV_CONFIG``): the loop
#: models of the causal case count query rows in these blocks.
DKDV_BLOCKS = (64, 32)
# the edge masks that out-of-bounds hints name
MASK = ("offs_m < N on the query rows of lse and Δ in attn_bwd_dkdv_loop (other=0); the given tensor descriptors, "
        "of shape [N, HEAD_DIM], clip the tiles of Q, K, V, dO, dK and dV at row N themselves")


def backward(q, k, v, do, causal, scale, *, delta=True, mask=True, scale_power=1, lse_base2=False, diagonal=1,
             gain=1.0, diagonal_block=None, loops=None, operands="vqd"):
    """dq, dk, dv in float64 by the lesson's formulas, with switches that reproduce the classic mistakes
    (``lse_base2``: P recomputed as exp2(s·log2(e) − lse), with the natural-log lse taken for a base-2 one;
    ``diagonal``: P zeroed from this diagonal on, 1 by the definition, 0 or 2 a causal mask off by one;
    ``gain``: dq and dk multiplied by it as well, an extra factor such as qk_scale; ``diagonal_block``: the
    dK/dV programs' BLOCK_N keys, whose diagonal block is left unmasked while the query blocks before it are
    skipped: P zeroed only where the query comes before its key's block; ``loops``: (diag_len, rest_from,
    block_n[, how]), the dK/dV program of the keys from start_n visits the queries [start_n, start_n + diag_len)
    masked (none when not causal) and [start_n + rest_from, N) unmasked (none when rest_from is None), each visit
    adding its terms to dk and dv (dq is another kernel's); ``how``: "reversed", the mask keeps query <= key;
    "from 0", each loop starts at query 0 instead of its lo); ``operands``: the tensors that dP = dO·Vᵀ, dK = dSᵀ·Q and
    dV = Pᵀ·dO take, "vqd" by the formulas, a letter changed for another ("k" for V in dP, "d" for Q in dK, "q" for
    dO in dV))."""
    q, k, v, do = (t.double().cpu() for t in (q, k, v, do))
    n = q.shape[-2]
    s = (q @ k.transpose(-1, -2)) * scale
    causal_mask = torch.ones(n, n, dtype=torch.bool).triu(1)
    lse = torch.logsumexp(s.masked_fill(causal_mask, float("-inf")) if causal else s, dim=-1)
    # O is the forward's whatever the mistake: the backward reads the O the forward wrote (Δ = rowsum(dO ∘ O))
    p_forward = torch.exp(s - lse[..., None])
    o = (p_forward.masked_fill(causal_mask, 0.0) if causal else p_forward) @ v
    p = torch.exp(s - lse[..., None] * (math.log(2) if lse_base2 else 1.0))
    if causal and mask and diagonal_block:
        rows, cols = torch.arange(n)[:, None], torch.arange(n)[None, :]
        p = p.masked_fill(rows < cols // diagonal_block * diagonal_block, 0.0)
    elif causal and mask:
        p = p.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(diagonal), 0.0)
    named = {"v": v, "k": k, "q": q, "d": do}
    dp = do @ named[operands[0]].transpose(-1, -2)
    d = (do * o).sum(-1, keepdim=True) if delta else 0.0
    g = scale ** scale_power * gain
    ds = p * (dp - d)
    if loops:  # how many times each (query, key) is visited by the key's program, as its loops run
        diag_len, rest_from, block_n, *how = loops
        rows, cols = torch.arange(n)[:, None], torch.arange(n)[None, :]
        start = cols // block_n * block_n
        first = torch.zeros_like(start) if how == ["from 0"] else start
        kept = rows <= cols if how == ["reversed"] else rows >= cols
        visits = ((rows >= first) & (rows < start + diag_len) & kept).double() if causal else 0.0
        if rest_from is not None:
            visits = visits + (rows >= (first if how == ["from 0"] else start + rest_from)).double()
        pv = p_forward * visits  # P before any mask: each visit masks (or not) by itself
        return ds @ k * g, (pv * (dp - d)).transpose(-1, -2) @ q * g, pv.transpose(-1, -2) @ do
    return ds @ k * g, ds.transpose(-1, -2) @ named[operands[1]] * g, p.transpose(-1, -2) @ named[operands[2]]


def forward(q, k, v, causal, scale):
    """o and lse (natural log, fp32) in float64 torch."""
    s = scores(q, k, scale, causal)  # lesson 06's grader: the same masked scores
    return (torch.softmax(s, -1) @ v.double()).to(q.dtype), torch.logsumexp(s, dim=-1).float()


def _diagnose(q, k, v, do, causal, scale, which, note=""):
    idx = NAMES.index(which)

    def hint(o, e, wrong):
        if torch.isnan(o).any():
            if which == "dq":
                return ("dq has NaN entries while dk and dv passed: dq comes from the given attn_bwd_dq and "
                        "attention_backward; if you changed them, put them back as the exercise has them")
            return (f"{which} has NaN entries: a NaN or an infinity entered the sums of attn_bwd_dkdv_loop. Load lse "
                    "and Δ with mask=offs_m < N, other=0.0, so that rows past N add nothing, and recompute pT "
                    "with lse in base 2, exp2(dot(k, q.T) * qk_scale - lse2[None, :]): a wrong exponent overflows "
                    "to inf, and inf · 0 is NaN")
        right = backward(q, k, v, do, causal, scale)
        for j, other in enumerate(NAMES):
            if j != idx and torch.allclose(o, right[j].to(o.dtype), atol=2e-2, rtol=2e-2):
                return (f"your {which} is the expected {other}: the two are swapped. attn_bwd_dkdv_loop takes "
                        "and returns (dk, dv) in that order, so call it as dk, dv = attn_bwd_dkdv_loop(dk, dv, "
                        "k, v, ...); attention_backward (given) returns the gradients in the order (dq, dk, dv)")
        close = lambda **kw: torch.allclose(o, backward(q, k, v, do, causal, scale, **kw)[idx], atol=2e-2, rtol=2e-2)
        if close(delta=False):
            return "Δ is missing: dS = P ∘ (dP − Δ) with Δ = rowsum(dO ∘ O), one value per query row"
        for operands, what in (("kqd", "dP = dO·Vᵀ takes V, not K: dpT = tl.dot(v, do.T)"),
                               ("vdd", "dK = dSᵀ·Q takes Q, not dO: dk += tl.dot(dsT.to(q.dtype), q)"),
                               ("vqq", "dV = Pᵀ·dO takes dO, not Q: dv += tl.dot(pT.to(do.dtype), do)")):
            if which != "dq" and close(operands=operands):
                return f"{which} is wrong because a product takes another tensor: {what}"
        if close(scale_power=2):
            return "the scale is applied twice: P already includes it; dQ = dS·K·scale and dK = dSᵀ·Q·scale, once"
        if which == "dk" and close(gain=scale * LOG2E):
            return ("the scale is applied twice, once as qk_scale: dk += dot(dsT, q) * qk_scale in the loop and then "
                    "dk *= sm_scale gives scale²·log2(e). qk_scale = sm_scale·log2(e) belongs only in the exponent of "
                    "exp2; in attn_bwd_dkdv_loop add dot(dsT.to(q.dtype), q) with no scale, and multiply dk by "
                    "sm_scale once, after the loops")
        if which == "dk" and close(gain=LOG2E):
            return ("dk is scaled by qk_scale = sm_scale·log2(e), not sm_scale: log2(e) belongs only in the "
                    "exponent of exp2; multiply dk by sm_scale once, after the loops")
        if close(scale_power=0):
            return ("the scale is missing: dQ = dS·K·scale and dK = dSᵀ·Q·scale (the chain rule through "
                    "S = scale·QKᵀ; dV = Pᵀ·dO has none)")
        if close(lse_base2=True):
            return ("P is recomputed with the wrong lse: lse is a natural log, so P = exp(scale·qkᵀ − lse); with "
                    "tl.exp2 both terms need log2(e): exp2(scale·qkᵀ·log2(e) − lse·log2(e))")
        if causal and (close(diagonal=0) or close(diagonal=2)):
            return ("the causal mask is off by one: query i sees keys j <= i, key i itself included. Zero pT "
                    "(keys along the first axis) where key > query: tl.where(offs_m[None, :] >= offs_n[:, None], "
                    "pT, 0.0)")
        if which != "dq" and causal and any(close(diagonal_block=b) for b in (16, 32, 64, 128, 256) if b < q.shape[-2]):
            return ("the diagonal block is not masked: the query blocks before start_n are skipped as they must be, "
                    "but the loop over the diagonal rows [start_n, min(start_n + BLOCK_N, N)) must run with "
                    "MASK=True, so that pT is zeroed where key > query (tl.where(offs_m[None, :] >= "
                    "offs_n[:, None], pT, 0.0)); only the rows after it, [start_n + BLOCK_N, N), run with MASK=False")
        if causal and which != "dq":
            bn, bm = DKDV_BLOCKS
            for diag_len, rest_from, what in ((bn, 0, "the second loop starts at start_n, so the diagonal rows run twice"),
                                              (bn, bm, "the second loop starts at start_n + BLOCK_M, not + BLOCK_N"),
                                              (bm, bn, "the diagonal loop stops at start_n + BLOCK_M, not + BLOCK_N")):
                if close(loops=(diag_len, rest_from, bn)):
                    return (f"the two causal loops overlap or leave a gap: {what}. The diagonal rows [start_n, "
                            "min(start_n + BLOCK_N, N)) run once with MASK=True, then [start_n + BLOCK_N, N) with "
                            "MASK=False: every query row once")
        if which != "dq":
            bn = DKDV_BLOCKS[0]
            models = ((bn, None, bn, "the diagonal loop runs alone: the query rows after the diagonal block, [start_n + "
                       "BLOCK_N, N), see these keys too. A second attn_bwd_dkdv_loop over them, with MASK=False, adds "
                       "their terms"),
                      (bn, bn, bn, "reversed", "the diagonal block's mask is reversed: it must keep pT where the query "
                       "comes at or after the key, tl.where(offs_m[None, :] >= offs_n[:, None], pT, 0.0), and zero it "
                       "where key > query"),
                      (bn, bn, bn, "from 0", "attn_bwd_dkdv_loop starts at query 0, not at its lo: loop over "
                       "range(lo, hi, BLOCK_M), so each call covers only the rows it is given"))
            for *model, what in models:
                if causal and close(loops=tuple(model)):
                    return what
            if not causal and close(loops=(0, 0, bn)):
                return ("without a causal mask every query sees every key: the program of the keys from start_n "
                        "must loop over all the query rows, one attn_bwd_dkdv_loop over [0, N) with MASK=False, "
                        "not from start_n")
        if causal and close(mask=False):
            return ("the causal mask is forgotten: in attn_bwd_dkdv_loop, if MASK, zero pT where key > query "
                    "(tl.where(offs_m[None, :] >= offs_n[:, None], pT, 0.0)), and in attn_bwd_dkdv run the "
                    "diagonal rows [start_n, min(start_n + BLOCK_N, N)) with MASK=True")
        r = right[idx].double().to(o.device)
        factor = float((o.double() * r).sum() / (r * r).sum().clamp_min(1e-30))
        if abs(factor - 1) > 0.05 and torch.allclose(o.double(), factor * r, atol=2e-2, rtol=2e-2):
            if which == "dv":
                return (f"your dv is the expected one times {factor:.4g}: dV = Pᵀ·dO has no scale (sm_scale and "
                        "qk_scale belong in the exponent of P and in dk, dq), so accumulate dot(pT.to(do.dtype), do) "
                        "and scale nothing")
            return (f"your {which} is the expected one times {factor:.4g}: a factor is applied where it does not "
                    "belong, or left out: dQ = dS·K·scale and dK = dSᵀ·Q·scale, each scaled once, dV = Pᵀ·dO not at all")
        if note == "strided":
            return ("a strided input (q, k, v, o transposed, or a stride-0 dO) gives a wrong result while "
                    "contiguous ones pass: the given check_inputs makes every tensor contiguous (prepare) "
                    "before the kernels run, and the kernels assume it; if you changed that, put it back")
        return f"{which} is wrong: recompute P = exp(scale·QKᵀ − lse) exactly as the forward, then follow the formulas"
    return hint  # core's compare turns a diagnosis that raises into no hint


BEFORE_THE_KEYS = ("causal: no query before start_n sees this program's keys (query i sees keys j <= i), so query "
                   "blocks before start_n are masked whole, work thrown away (half of it at long N): loop over "
                   "[start_n, min(start_n + BLOCK_N, N)) with MASK=True, then [start_n + BLOCK_N, N) with MASK=False")


def _before_the_keys(label, traces, N) -> Case | None:
    """A failing case when a causal attn_bwd_dkdv loaded a query row for a key block that comes after it (a loop
    from 0 where causal attention starts at the block's first key): query row i may be loaded by the key blocks
    that start at or before it, from the launch's own BLOCK_N; None otherwise."""
    def reach(ln, i):
        bn = ln.arg("BLOCK_N")
        if ln.kernel != "attn_bwd_dkdv" or not (isinstance(bn, int) and bn > 0 and ln.grid[0] == -(-N // bn)):
            return None  # not the exercise's launch (key blocks on axis 0): nothing to compare with
        return min(ln.grid[0], i // bn + 1)  # key blocks that start at or before query i
    return rows_loaded_past(label, traces, "Q", N, reach, "query blocks the causal mask throws away whole",
                            BEFORE_THE_KEYS)


def _graded(label, mod, q, k, v, do, causal, dtype, note=""):
    """The cases of one call, dk, dv, then dq, stopping at the first that fails."""
    D = q.shape[-1]
    scale = 1 / math.sqrt(D)
    o, lse = forward(q, k, v, causal, scale)
    expected = backward(q, k, v, do, causal, scale)
    inputs = dict(do=do, q=q, k=k, v=v, o=o, lse=lse)
    snap = Snapshot(inputs)
    try:
        grads, allocs, traces = traced_call(mod.attention_backward, do, q, k, v, o, lse, causal, scale)
    except traffic.OutOfBoundsError as exc:
        yield oob_case(label, exc, fn=mod.attention_backward, mask=MASK)
        return
    except Exception as exc:
        yield error_case(label, exc)
        return
    if grads is None:
        yield Case(label, "todo", "attention_backward returned None",
                   "attention_backward (given) returns the three gradients, return dq, dk, dv: if you changed it, "
                   "put that line back")
        return
    if (not isinstance(grads, (tuple, list)) or len(grads) != 3
            or not all(isinstance(g, torch.Tensor) for g in grads)):
        what = f"a {type(grads).__name__}" + (f" of {len(grads)}" if isinstance(grads, (tuple, list)) else "")
        yield Case(label, "fail", f"attention_backward returned {what}, not three tensors (dq, dk, dv)",
                   "attention_backward (given) returns the three gradients as a tuple of tensors, return dq, dk, "
                   "dv: if you changed it, put that line back")
        return
    for which, g in zip(NAMES, grads):
        bad = alias_case(f"{label}: {which}", g, inputs, "attention_backward")
        if bad is not None:
            yield bad
            return
    for i in range(3):
        for j in range(i + 1, 3):
            if storage_overlap(grads[i], grads[j]):
                yield Case(f"{label}: {NAMES[i]}, {NAMES[j]}", "fail",
                           f"{NAMES[i]} and {NAMES[j]} share memory",
                           f"{NAMES[i]} and {NAMES[j]} are one tensor (or overlap): each gradient needs its own "
                           "output, and the given attention_backward makes one for each (dq, dk, dv = "
                           "torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)); if you changed "
                           "that, put it back")
                return
    tol = 1e-2 if dtype == torch.float16 else (1e-4 if mode.INTERPRET else 2e-2)
    for which in ("dk", "dv", "dq"):
        i = NAMES.index(which)
        case = compare(f"{label}: {which}", grads[i], expected[i].to(dtype), dtype=dtype, allocs=allocs, atol=tol,
                       rtol=tol * 5, diagnose=_diagnose(q, k, v, do, causal, scale, which, note))
        if case.status != "pass":
            yield case
            return
        yield case
    if causal:
        wasted = _before_the_keys(f"{label}: dk, dv causal", traces, q.shape[2])
        if wasted is not None:
            yield wasted
            return
    changed = snap.case(f"{label}: inputs unchanged", "attention_backward")
    if changed is not None:
        if "lse" in changed.detail:
            changed.hint += ("; to use tl.exp2, multiply lse by log2(e) inside the kernel, on the loaded "
                             "values, not lse itself in the launcher")
        yield changed


def _layout(B, H, N, D, layout, gen):
    make = lambda *shape: torch.randn(*shape, generator=gen).to(mode.DEVICE)
    if layout.startswith("(B, N, H, D)"):
        return [make(B, N, H, D).transpose(1, 2) for _ in range(4)]
    q, k, v = (make(B, H, N, D) for _ in range(3))
    return [q, k, v, make(1, 1, 1, 1).expand(B, H, N, D)]  # o.sum().backward(): dO is ones, stride 0


def grade(mod):
    gen = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.float16):
        for B, H, N, D, causal in SHAPES if dtype == torch.float32 else SHAPES[:2]:
            label = f"B={B} H={H} N={N} D={D}{' causal' if causal else ''} {str(dtype)[6:]}"
            q, k, v, do = (torch.randn(B, H, N, D, generator=gen, dtype=torch.float64).to(dtype).to(mode.DEVICE)
                           for _ in range(4))
            yield from _graded(label, mod, q, k, v, do, causal, dtype)
    for B, H, N, D, causal, layout in LAYOUTS:
        q, k, v, do = _layout(B, H, N, D, layout, gen)
        label = f"B={B} H={H} N={N} D={D}{' causal' if causal else ''} float32, {layout}"
        yield from _graded(label, mod, q, k, v, do, causal, torch.float32, "strided")
    seed, ns = random_sizes(2, 1, 200)
    rng = torch.Generator().manual_seed(seed)
    for i, N in enumerate(ns):
        B, H = (int(t) for t in torch.randint(1, 4, (2,), generator=rng))
        D = (16, 32, 64)[int(torch.randint(0, 3, (1,), generator=rng))]
        causal = i % 2 == 0
        q, k, v, do = (torch.randn(B, H, N, D, generator=rng).to(mode.DEVICE) for _ in range(4))
        label = seeded(f"B={B} H={H} N={N} D={D}{' causal' if causal else ''} float32", seed)
        yield from _graded(label, mod, q, k, v, do, causal, torch.float32)
