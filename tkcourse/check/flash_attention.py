"""Grader for lesson 06: ``attention(q, k, v, causal=False, sm_scale=None)``, FlashAttention's forward.

Every graded call runs under the tracer and is checked for aliasing and modified inputs (``core.attempt``).
The cases, in order: tiny but awkward shapes (N not a multiple of any block, N = 1, D of 16/32/64, causal
and not, several batches and heads), fp16; strided layouts that callers really hand over (q, k, v as
(B, N, H, D) tensors transposed to (B, H, N, D), as a linear layer's output is split into heads; a head
dimension sliced from a wider tensor; k and v shared by all heads through a stride-0 expand), which
``attention`` must compute, as the solution does by making them contiguous; seeded random B, H, N, D,
which defeat a grid or loop bound hard-coded to the fixed shapes; ``sm_scale``; then what it must refuse.
"""

from __future__ import annotations

import math

import torch

from .. import mode, traffic
from .core import (
    Case,
    alias_case,
    attempt,
    compare,
    error_case,
    never_stored,
    oob_case,
    quarters,
    random_sizes,
    refuses,
    rows_loaded_past,
    seeded,
    traced_call,
)

# (B, H, N, D, causal): N in {1, 17, 45, 64, 100, 257}, D in {16, 32, 64}; B, H > 1 to catch batch/head offsets
SHAPES = [(2, 2, 100, 16, False), (2, 2, 100, 16, True), (1, 1, 1, 16, False), (1, 2, 17, 64, True),
          (2, 1, 64, 64, False), (1, 1, 257, 16, True), (1, 1, 257, 64, False), (2, 1, 45, 32, True)]
# (B, H, N, D, causal, layout)
LAYOUTS = [(2, 3, 37, 16, True, "(B, N, H, D) transposed"), (1, 2, 50, 32, False, "head dim sliced"),
           (2, 2, 33, 16, True, "k, v shared by heads (stride 0)")]
# the edge masks that out-of-bounds hints name, in the names of the exercise's kernel
MASK = ("offs_m[:, None] < N on the query rows (the Q load and the O store; offs_m < N for the lse store) and, "
        "with cols = start_n + tl.arange(0, BLOCK_N) the block's keys, cols[:, None] < N on the K and V loads")


def scores(q, k, scale, causal, *, diagonal=1):
    """The N×N scaled scores in float64, -inf where causal attention masks a key. ``diagonal``: the first
    diagonal of masked (future) keys, 1 by the definition; 0 and 2 reproduce a causal mask off by one."""
    s = (q.double() @ k.double().transpose(-1, -2)) * scale
    if causal:
        n = q.shape[-2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=s.device).triu(diagonal), float("-inf"))
    return s


def reference(q, k, v, causal=False, sm_scale=None, *, diagonal=1):
    """Attention in float64 torch, materializing the N×N scores (``scores``)."""
    scale = 1 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    return torch.softmax(scores(q, k, scale, causal, diagonal=diagonal), dim=-1) @ v.double()


def _unnormalized(q, k, v, causal, scale):
    """The classic mistake: the accumulator is never divided by l (o = Σ exp(s - m) v)."""
    s = scores(q, k, scale, causal)
    return torch.exp(s - s.amax(-1, keepdim=True)) @ v.double()


def _first_keys(q, k, v, scale, keys):
    """Causal attention that sees only the first ``keys`` keys (a loop bound hard-coded)."""
    q, k, v = q.double(), k.double(), v.double()
    n = q.shape[-2]
    s = (q @ k.transpose(-1, -2)) * scale
    masked = torch.ones(n, n, dtype=torch.bool, device=s.device).triu(1)
    masked[:, keys:] = True
    return torch.softmax(s.masked_fill(masked, float("-inf")), dim=-1) @ v


def _diagonal_skipped(q, k, v, scale, block):
    """Causal attention whose key loop stops before the diagonal block (hi = start_m * BLOCK_M): the rows of query
    block i see the keys of blocks 0..i-1 only, and the first block's rows none (0/0, NaN)."""
    q, k, v = q.double(), k.double(), v.double()
    n = q.shape[-2]
    s = (q @ k.transpose(-1, -2)) * scale
    rows = torch.arange(n, device=s.device)
    seen = rows[None, :] < (rows[:, None] // block) * block
    return torch.softmax(s.masked_fill(~seen, float("-inf")), dim=-1) @ v


def _last_block(q, k, v, causal, scale, block):
    """Attention over the last key block a query block visits (a running max stuck at -inf makes alpha = 0 at every
    step, so each step wipes what came before)."""
    s = scores(q, k, scale, causal)
    n = q.shape[-2]
    rows = torch.arange(n)
    last = (((rows // block + 1) * block).clamp(max=n) - 1) // block * block if causal else \
        torch.full((n,), (n - 1) // block * block)
    cols = torch.arange(n)
    s = s.masked_fill(cols[None, :] < last[:, None].to(s.device), float("-inf"))
    return torch.softmax(s, dim=-1) @ v.double()


def _first_step_nan(out, expected, traces) -> str:
    """``attempt``'s ``trace_hint``: every element of O stored, every one NaN, which the first step makes when it
    subtracts m_i while m_i is still -inf."""
    if not (isinstance(out, torch.Tensor) and out.numel() and bool(torch.isnan(out).all())):
        return ""
    never = never_stored(out, traces)
    if never is None or bool(never.any()):
        return ""
    return ("every output is NaN, and your kernel stored each one: in the first step m_i is still -inf, so "
            "anything that subtracts m_i there is exp(+inf) = inf, and 0 * inf or inf / inf is NaN. The rescale is "
            "alpha = tl.exp(m_i - m_new) (old minus new, at most 1), and the block's weights p = tl.exp(s - "
            "m_new[:, None]), with the new max")


def _unmasked_tail(q, k, v, scale, block):
    """The classic mistake: keys past N (loaded as 0 in the last, partial block) get score 0, not -inf."""
    n = q.shape[-2]
    pad = -n % block
    if not pad:
        return None
    z = torch.zeros(*k.shape[:-2], pad, k.shape[-1], dtype=k.dtype, device=k.device)
    return reference(q, torch.cat([k, z], -2), torch.cat([v, z], -2), False, scale)


def _no_rescale(q, k, v, causal, scale, block, forget="acc"):
    """The classic mistake: the running max grows but ``forget`` ("acc" or "l"), the accumulator or the
    running sum, is not rescaled."""
    q, k, v = q.double(), k.double(), v.double()
    n = q.shape[-2]
    s = scores(q, k, scale, causal)
    m = torch.full(s.shape[:-1], float("-inf"), dtype=torch.float64, device=s.device)
    l = torch.zeros_like(m)
    acc = torch.zeros(*s.shape[:-1], v.shape[-1], dtype=torch.float64, device=s.device)
    for j in range(0, n, block):
        sj = s[..., j:j + block]
        m_new = torch.maximum(m, sj.amax(-1))
        p = torch.exp(sj - m_new[..., None])
        alpha = torch.exp(m - m_new)
        l = (l if forget == "l" else l * alpha) + p.sum(-1)  # missing: l * alpha
        acc = (acc if forget == "acc" else acc * alpha[..., None]) + p @ v[..., j:j + block, :]  # missing: acc * alpha
        m = m_new
    return acc / l[..., None]


def _diagnose(q, k, v, causal, note=""):
    D = q.shape[-1]
    scale = 1 / math.sqrt(D)

    def hint(o, e, wrong):
        qc, kc, vc = q.cpu(), k.cpu(), v.cpu()
        close = lambda ref: ref is not None and torch.allclose(o, ref.cpu(), atol=2e-2, rtol=2e-2)
        if causal and q.shape[-2] > 1:
            if torch.allclose(o[..., 1:, :], reference(qc, kc, vc, True, scale, diagonal=0)[..., 1:, :],
                              atol=2e-2, rtol=2e-2):
                return ("the causal mask is off by one: query i must see key i itself. With "
                        "cols = start_n + tl.arange(0, BLOCK_N) the block's keys, keep the scores where "
                        "offs_m[:, None] >= cols[None, :] (>=, not >); row 0 then has its one key, not none")
            if close(reference(qc, kc, vc, True, scale, diagonal=2)):
                return ("the causal mask is off by one: query i also sees key i + 1, a future key. With "
                        "cols = start_n + tl.arange(0, BLOCK_N) the block's keys, keep the scores where "
                        "offs_m[:, None] >= cols[None, :], exactly")
        if causal and torch.isnan(o).any():
            for block in (16, 32, 64, 128):
                model = _diagonal_skipped(qc, kc, vc, scale, block)
                if block < q.shape[-2] and torch.allclose(o, model.to(o.dtype), atol=2e-2, rtol=2e-2, equal_nan=True):
                    return ("the causal key loop stops before the diagonal block: each query block sees only the "
                            "blocks before it, and the first block's rows see no key at all (0/0: NaN). The loop "
                            "must end at hi = tl.minimum((start_m + 1) * BLOCK_M, N), past this block's own rows, "
                            "with the diagonal block masked by offs_m[:, None] >= cols[None, :]")
        if torch.isnan(o).any():
            nan_rows = torch.isnan(o).any(-1)
            return (f"{int(nan_rows.sum())} query rows are NaN: never written (check the grid: cdiv(N, BLOCK_M) x B*H, "
                    "and the store mask offs_m < N), or 0/0 from a row whose keys were all masked")
        if q.shape[0] > 1 and close(reference(qc[:1], kc[:1], vc[:1], causal, scale).expand_as(o)):
            return ("every batch got batch 0's result: the head's offset must be (bh // H) * stride_b + "
                    "(bh % H) * stride_h, with bh = tl.program_id(1) running over all B * H heads")
        for s, what in ((1.0, "no scale at all"), (1 / D, "1/D instead of 1/sqrt(D)"), (scale * scale, "the scale applied twice")):
            if close(reference(qc, kc, vc, causal, s)):
                return f"wrong scale ({what}): scores are (q·k) * sm_scale, with sm_scale = 1/sqrt(D) by default"
        if close(reference(qc, kc, vc, causal, scale * math.log(2))):
            return ("tl.exp2 without log2(e): exp2(x) is 2**x = exp(x · ln 2), so with exp2 multiply the scores "
                    "by log2(e) = 1.4427 (fold it into sm_scale), or use tl.exp")
        if close(reference(qc, qc, vc, causal, scale)):
            return "your kernel loads K from Q: k = tl.load(K + kv_offsets, ...), the same offsets as v, from K's pointer"
        for block in (16, 32, 64, 128):
            if q.shape[-2] > block and close(_last_block(qc, kc, vc, causal, scale, block)):
                return ("only the last key block counts: m_i stays -inf (m_i = m_new is missing at the end of the "
                        "loop body), so alpha = exp(m_i - m_new) is 0 and wipes acc and l_i at every step")
        if close(_unnormalized(qc, kc, vc, causal, scale)):
            return "the output is never divided by l: o = acc / l_i[:, None] once the loop is done"
        for keys in (32, 64, 128, 256):
            if keys < q.shape[-2] and close(reference(qc, kc[..., :keys, :], vc[..., :keys, :], False, scale)
                                            if not causal else _first_keys(qc, kc, vc, scale, keys)):
                return (f"only the first {keys} keys count: the K/V loop must run over the whole sequence, "
                        "range(0, hi, BLOCK_N) with hi = N (or the causal bound), not a fixed number of steps")
        if not causal and any(close(_unmasked_tail(qc, kc, vc, scale, b)) for b in (16, 32, 64, 128)):
            return ("keys past N count with score 0: in the last, partial K/V block set their scores to -inf "
                    "(tl.where(cols[None, :] < N, s, float('-inf')), with cols = start_n + tl.arange(0, BLOCK_N)), "
                    "masking the loads is not enough")
        if close(reference(qc, kc, vc, not causal, scale)):
            return ("the causal mask is " + ("ignored: query i may only see keys j <= i (mask the diagonal block, "
                    "skip blocks above it)" if causal else "applied although causal=False"))
        for block in (16, 32, 64, 128):
            if close(_no_rescale(qc, kc, vc, causal, scale, block)):
                return ("missing rescale: when the running max grows, multiply the accumulator (and l) by "
                        "exp(m_old - m_new) before adding p @ v")
            if close(_no_rescale(qc, kc, vc, causal, scale, block, forget="l")):
                return ("missing rescale of l: when the running max grows, the running sum shrinks as the "
                        "accumulator does: l_i = l_i * alpha + tl.sum(p, axis=1), with alpha = exp(m_i - m_new), "
                        "the alpha that rescales acc (acc = acc * alpha[:, None] + tl.dot(p, v))")
        if note == "strided":
            return ("a strided q, k or v is wrong while contiguous ones pass: the kernel reads all three with "
                    "one set of strides, so attention_forward makes them contiguous (prepare) before your "
                    "launch; pass the strides of q after that step, q.stride(0), q.stride(1), q.stride(2)")
        if causal:
            return ("check the causal mask on the diagonal block (offs_m[:, None] >= cols[None, :], with "
                    "cols = start_n + tl.arange(0, BLOCK_N)) and which blocks you skip (hi)")
        return ("check the mask of the last, partial K/V block (keys past N must get -inf scores) and the final "
                "division by l")
    return hint  # core's compare turns a diagnosis that raises into no hint


def _oob_hint(q):
    """Out-of-bounds stores of O that a head offset with batch and head swapped makes: program bh stores its rows at
    (bh % H) * stride_b + (bh // H) * stride_h. With B = H that still visits every head (the output is right), and
    with H = 1 it is the same offset, so only B != H shows it, as stores past O's end (o is contiguous, as
    ``attention`` allocates it)."""
    B, H, N, D = q.shape

    def hint(bad, default):
        stores = [o for o in bad if o.kind == "store" and o.derived and o.numel == B * H * N * D]
        if H < 2 or not stores:
            return ""
        for o in stores:
            bh = o.program[1]
            swapped = (bh % H) * H * N * D + (bh // H) * N * D
            if not 0 <= int(o.offsets.min()) - swapped < N * D:
                return ""
        return ("the program of batch-head bh stores into the rows of another (batch, head), past the end of O: "
                "batch and head are swapped in the head's offset. It is (bh // H) * stride_b + (bh % H) * stride_h "
                "(bh // H the batch, bh % H the head). With B = H the swapped offsets still reach every head, so "
                "only a case with B != H shows it")
    return hint


#: How often the forward loads an element: a query once (its block stays on chip for the whole key loop), the
#: outputs never. K and V are read once by each query block, as the algorithm has it.
READS = {"Q": (1, "the Q block is loaded more than once: load it once, before the loop over the keys, and keep it "
                  "on chip; only K and V change from step to step. Loading it in the loop reads it N / BLOCK_N times"),
         "O": (0, "the kernel loads from o, which it only writes: acc holds the running sum until the one store"),
         "LSE": (0, "the kernel loads from lse, which it only writes: m_i and l_i hold it until the one store")}


PAST_THE_DIAGONAL = ("causal: a query block's last row is (start_m + 1) * BLOCK_M - 1, and every key after it is "
                     "masked for all of its rows, so those key blocks are work thrown away (half of it at long N): "
                     "stop the loop there, hi = tl.minimum((start_m + 1) * BLOCK_M, N) if CAUSAL else N")


def _past_the_diagonal(N):
    """``attempt``'s ``then`` for a causal case: a failing case when the kernel loaded a key row for a query block
    whose rows all come before it (a loop to N where causal attention stops at the diagonal). Each key row may be
    loaded by the query blocks that reach its key block, from the launch's own BLOCK_M and BLOCK_N."""
    def reach(ln, j):
        bm, bn = ln.arg("BLOCK_M"), ln.arg("BLOCK_N")
        if not (isinstance(bm, int) and isinstance(bn, int) and bm > 0 and bn > 0 and ln.grid[0] == -(-N // bm)):
            return None  # not the exercise's launch (query blocks on axis 0): nothing to compare with
        return sum((m + 1) * bm > (j // bn) * bn for m in range(ln.grid[0]))  # query blocks whose loop gets here
    return lambda label, traces: rows_loaded_past(label, traces, "K", N, reach, "key blocks past the diagonal, all "
                                                  "masked", PAST_THE_DIAGONAL)


def _graded(label, mod, q, k, v, causal, dtype, note="", sm_scale=None, loose=1):
    """One graded call; ``loose`` widens the tolerance that many times, for a case whose data leaves fp32 less room."""
    expected = reference(q, k, v, causal, sm_scale)
    tol = loose * (2e-3 if dtype == torch.float16 else (2e-5 if mode.INTERPRET else 1e-2))
    kwargs = dict(causal=causal) if sm_scale is None else dict(causal=causal, sm_scale=sm_scale)
    case = attempt(label, mod.attention, (q, k, v), expected, kwargs=kwargs, dtype=dtype, atol=tol, rtol=tol * 5,
                   mask=MASK, oob_hint=_oob_hint(q), trace_hint=_first_step_nan, reads=READS,
                   then=_past_the_diagonal(q.shape[2]) if causal else None,
                   diagnose=_diagnose(q, k, v, causal, note) if sm_scale is None else
                   (lambda o, e, w: "pass sm_scale through to the kernel instead of 1/sqrt(D)"))
    if case.status == "fail" and case.detail.startswith("returned a tuple"):
        case.hint = ("attention returns o alone (attention_forward is the one that returns (o, lse)): "
                     "return o from attention")
    return case


def _lse_diagnose(q, k, v, causal):
    def hint(o, e, wrong):
        try:
            ln2 = math.log(2)
            if torch.allclose(o, e / ln2, atol=1e-3, rtol=1e-3):
                return ("lse is in base 2 (log2-sum-exp2): the backward needs the natural log. Store "
                        "m_i + tl.log(l_i), or with exp2 scores convert back: (m_i + tl.log2(l_i)) * ln(2)")
            s = scores(q, k, 1 / math.sqrt(q.shape[-1]), causal).cpu()
            if torch.allclose(o, s.amax(-1), atol=1e-3, rtol=1e-3):
                return "lse is only the running max m_i: add the log of the sum, lse = m_i + tl.log(l_i)"
            if torch.allclose(o, e - s.amax(-1), atol=1e-3, rtol=1e-3):
                return "lse is only log(l_i): add the running max, lse = m_i + tl.log(l_i)"
            m = s.amax(-1)
            if torch.allclose(o, m + (e - m) / ln2, atol=1e-3, rtol=1e-3):
                return ("lse takes tl.log2 of l_i where the natural log belongs: m_i is in natural units (the scores "
                        "went through tl.exp), so lse = m_i + tl.log(l_i)")
            written = ~torch.isnan(o).reshape(-1)
            n = o.shape[-1]
            if o.numel() > n and bool(written[:n].all()) and not bool(written[n:].any()):
                return ("only the first (batch, head)'s lse row was written: every program stored its rows there. "
                        "Each (batch, head) bh has its own row of N values: store at LSE + bh * N + offs_m")
            if torch.isnan(o).any():
                return "parts of lse were never written: store m_i + tl.log(l_i) for every row < N (mask offs_m < N)"
        except Exception:  # noqa: BLE001  (a diagnosis never crashes the grader)
            return ""
        return ("lse is wrong: it is the natural-log log-sum-exp of each row's scaled, masked scores, "
                "m_i + tl.log(l_i), fp32, one value per query row at LSE + bh * N + row")
    return hint


def _graded_forward(label, mod, q, k, v, causal):
    """``attention_forward(q, k, v, causal)`` returns ``(o, lse)``; lesson 07's backward needs that lse."""
    expected_o = reference(q, k, v, causal)
    expected_lse = torch.logsumexp(scores(q, k, 1 / math.sqrt(q.shape[-1]), causal), dim=-1)
    try:
        got, allocs, _ = traced_call(mod.attention_forward, q, k, v, causal=causal)
    except traffic.OutOfBoundsError as exc:
        return oob_case(label, exc, fn=mod.attention_forward, mask=MASK)
    except Exception as exc:
        return error_case(label, exc)
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return Case(label, "fail", f"attention_forward returned a {type(got).__name__}, not (o, lse)",
                    "attention_forward returns the pair (o, lse): return o, lse")
    o, lse = got
    for what in (o, lse):
        bad = alias_case(label, what, dict(q=q, k=k, v=v), "attention_forward")
        if bad is not None:
            return bad
    tol = 2e-5 if mode.INTERPRET else 1e-2
    case = compare(label + ": o", o, expected_o, dtype=q.dtype, atol=tol, rtol=tol * 5, allocs=allocs,
                   diagnose=_diagnose(q, k, v, causal))
    if case.status != "pass":
        return case
    case = compare(label + ": lse", lse, expected_lse, dtype=torch.float32, atol=tol * 10, rtol=tol * 5,
                   allocs=allocs, diagnose=_lse_diagnose(q, k, v, causal))
    if case.detail.startswith("output dtype"):
        case.hint = "lse is fp32 whatever q's dtype: torch.empty((B, H, N), dtype=torch.float32, device=q.device)"
    return case


def _layout(B, H, N, D, layout, gen):
    """q, k, v in one of the layouts of LAYOUTS, on the mode's device."""
    make = lambda *shape: torch.randn(*shape, generator=gen).to(mode.DEVICE)
    if layout.startswith("(B, N, H, D)"):
        return [make(B, N, H, D).transpose(1, 2) for _ in range(3)]
    if layout == "head dim sliced":  # q = big[..., :D], rows of big 8 elements wider than D
        return [make(B, H, N, D + 8)[..., :D] for _ in range(3)]
    q = make(B, H, N, D)
    k, v = (make(B, 1, N, D).expand(B, H, N, D) for _ in range(2))
    return [q, k, v]


#: How far below zero every score of ``_low_scores_case`` lies: exp(-200) underflows fp32 to 0.
LOW_SCORE = 200


def _low_scores_case(mod, gen):
    """Every score about -LOW_SCORE: a running max started at 0 rather than -inf stays the max, exp(s - 0)
    underflows to 0 for every key, l = 0 and o = 0 / 0. With scores near zero that slip is exact, since any max
    at or above the true one rescales the sums alike, so no other case sees it."""
    B, H, N, D = 1, 2, 100, 32
    q, k, v = (t.to(mode.DEVICE) for t in quarters(*(torch.randn(B, H, N, D, generator=gen) for _ in range(3))))
    q[..., 0] = -round(LOW_SCORE * math.sqrt(D) * 4) / 4  # q·k / sqrt(D) about -LOW_SCORE, give or take a few
    k[..., 0] = 1.0
    case = _graded(f"B={B} H={H} N={N} D={D} float32, every score about -{LOW_SCORE}", mod, q, k, v, False,
                   torch.float32, loose=10 if mode.INTERPRET else 1)
    if case.status == "fail" and any(w in case.detail for w in ("NaN", "nan", "inf")):
        case.hint = (f"every score lies about {LOW_SCORE} below zero, so a running max started at 0 stays the max and "
                     "exp(s - 0) underflows to 0 for every key: l = 0 and o = 0 / 0. Start it at -inf, "
                     "m_i = tl.full([BLOCK_M], float('-inf'), tl.float32); with scores near zero a 0 there is "
                     "harmless, since any max at or above the true one rescales acc and l alike")
    return case


def grade(mod):
    gen = torch.Generator().manual_seed(0)
    dtypes = [torch.float32, torch.float16]
    for dtype in dtypes:
        for B, H, N, D, causal in SHAPES if dtype == torch.float32 else SHAPES[:2]:
            label = f"B={B} H={H} N={N} D={D}{' causal' if causal else ''} {str(dtype)[6:]}"
            q, k, v = (torch.randn(B, H, N, D, generator=gen, dtype=torch.float64).to(dtype).to(mode.DEVICE)
                       for _ in range(3))
            yield _graded(label, mod, q, k, v, causal, dtype)
    if hasattr(mod, "attention_forward"):  # the lse that lesson 07 reads
        for B, H, N, D, causal in ((2, 2, 100, 16, False), (1, 2, 45, 32, True)):
            q, k, v = (torch.randn(B, H, N, D, generator=gen).to(mode.DEVICE) for _ in range(3))
            label = f"attention_forward B={B} H={H} N={N} D={D}{' causal' if causal else ''} float32"
            yield _graded_forward(label, mod, q, k, v, causal)
    yield _low_scores_case(mod, gen)
    for B, H, N, D, causal, layout in LAYOUTS:
        q, k, v = _layout(B, H, N, D, layout, gen)
        label = f"B={B} H={H} N={N} D={D}{' causal' if causal else ''} float32, {layout}"
        yield _graded(label, mod, q, k, v, causal, torch.float32, "strided")
    seed, ns = random_sizes(2, 1, 300)
    rng = torch.Generator().manual_seed(seed)
    for i, N in enumerate(ns):
        B, H = (int(t) for t in torch.randint(1, 4, (2,), generator=rng))
        D = (16, 32, 64)[int(torch.randint(0, 3, (1,), generator=rng))]
        causal = i % 2 == 1
        q, k, v = (torch.randn(B, H, N, D, generator=rng).to(mode.DEVICE) for _ in range(3))
        label = seeded(f"B={B} H={H} N={N} D={D}{' causal' if causal else ''} float32", seed)
        yield _graded(label, mod, q, k, v, causal, torch.float32)
    q, k, v = (torch.randn(1, 1, 33, 16, generator=gen).to(mode.DEVICE) for _ in range(3))
    yield _graded("sm_scale is honoured", mod, q, k, v, False, torch.float32, sm_scale=0.3)
    d, hint = mode.DEVICE, "validate q, k, v before launching"
    a = torch.ones(1, 1, 8, 16, device=d)
    yield refuses("mismatched shapes raise ValueError", mod.attention, a, torch.ones(1, 1, 9, 16, device=d), a, hint=hint)
    yield refuses("mismatched dtypes raise ValueError", mod.attention, a, a.half(), a, hint=hint)
