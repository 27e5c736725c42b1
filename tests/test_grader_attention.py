"""The graders of lessons 05-07 catch the mistakes learners really make, each with a hint that names it,
and never crash, whatever the learner's code does.

Most mistakes are planted in torch code (the grader only sees the function, and torch keeps these tests
quick); the out-of-bounds ones need a real Triton launch, which the grader runs under the tracer: a
small copy kernel that stores far past the end of a zero-filled output, or loads past the end of its
input under a masked store. Each plant fails at its first wrong case, so a test grades only that far.
"""

import math
import types
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl
from helpers import assert_grader_catches, mutant
from helpers import copied_out_of_bounds as _copied

from tkcourse import check
from tkcourse.check.flash_attention import reference as fwd_reference
from tkcourse.check.flash_attention_backward import backward as model_backward

ROOT = Path(__file__).resolve().parents[1]


def _assert_caught(lesson, module, bug, hint):
    """A launcher that raises is an error case (with where it raised), every other plant a failing one."""
    if bug != "raises":
        return assert_grader_catches(lesson, module, bug, hint)
    rep = check.run(lesson, module=module, quiet=True)
    assert rep.status == "error" and "the launcher is broken" in rep.first_problem().detail, rep
    assert hint in rep.first_problem().hint, rep
    return rep


# ----- lesson 05: the online softmax -----------------------------------------------------------


def _streamed(x, block=1024, masked_zero=False, guard=True):
    """Softmax streamed block by block; ``masked_zero``: the last block's masked lanes load as 0;
    ``guard=False``: no 0 shift while the running max is -inf (NaN for a row starting with -inf)."""
    xd = x.double()
    n = xd.shape[1]
    if masked_zero and n % block:
        xd = torch.cat([xd, torch.zeros(xd.shape[0], block - n % block, dtype=xd.dtype, device=xd.device)], 1)
    m = torch.full((x.shape[0],), float("-inf"), dtype=torch.float64, device=x.device)
    l = torch.zeros_like(m)
    for j in range(0, xd.shape[1], block):
        b = xd[:, j:j + block]
        m_new = torch.maximum(m, b.amax(1))
        shift = torch.where(m_new == float("-inf"), 0.0, m_new) if guard else m_new
        l = l * torch.exp(m - shift) + torch.exp(b - shift[:, None]).sum(1)
        m = m_new
    return (torch.exp(xd[:, :n] - m[:, None]) / l[:, None]).to(x.dtype)


def _softmax_module(bug=None):
    def softmax(x):
        if x.dim() != 2 or x.numel() == 0:
            raise ValueError("x must be a non-empty 2-D tensor")
        if bug == "raises":
            raise RuntimeError("the launcher is broken")
        if bug == "columns assumed contiguous":  # row stride honoured, column stride taken as 1
            x = torch.as_strided(x, x.shape, (x.stride(0), 1))
        out = _streamed(x, masked_zero=bug == "masked lanes as 0", guard=bug != "no -inf guard")
        if bug == "grid of 8 rows":
            out[8:] = float("nan")  # rows past a hard-coded grid stay as the poison left them
        if bug == "in place":
            return x.copy_(out)
        if bug == "input changed":
            x.sub_(x.amax(1, keepdim=True))  # the row max subtracted in place: the caller's x changes
        if bug == "tuple":
            return out, out.amax(1)
        if bug == "fp32 output":
            return out.float()
        if bug in ("store far", "load past"):
            return _copied(out, bug)
        return out
    return types.SimpleNamespace(softmax=softmax, __name__="planted")


@pytest.mark.parametrize("bug, hint", [
    ("masked lanes as 0", "other=float('-inf')"),
    ("no -inf guard", "subtract 0 instead"),
    ("columns assumed contiguous", "x.contiguous()"),
    ("grid of 8 rows", "rows from 8 on were never written"),
    ("in place", "returned x itself"),
    ("input changed", "changed its input x"),
    ("tuple", "returns the output tensor alone"),
    ("fp32 output", "in the input's dtype"),
    ("raises", "your code raised"),
    ("store far", "far past the end of dst"),
    ("load past", "loads past the end"),
])
def test_online_softmax_grader_catches(bug, hint):
    _assert_caught("online_softmax", _softmax_module(bug), bug, hint)


def test_online_softmax_grader_passes_the_correct_plant():
    rep = check.run("online_softmax", module=_softmax_module(), quiet=True)
    assert rep.passed, rep


@triton.jit
def _online_softmax(x_ptr, out_ptr, x_row_stride, out_row_stride, n_cols, MASK_STORE: tl.constexpr,
                    RESCALE: tl.constexpr, BLOCK: tl.constexpr):
    """The lesson's two passes as a learner writes them, with two switches for the mistakes."""
    row = tl.program_id(0).to(tl.int64)
    x_row, out_row = x_ptr + row * x_row_stride, out_ptr + row * out_row_stride
    m = tl.full((), float("-inf"), tl.float32)
    l = tl.zeros((), tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        l = (l * tl.exp(m - shift) if RESCALE else l) + tl.sum(tl.exp(x - shift), axis=0)
        m = m_new
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        y = (tl.exp(x - m) / l).to(out_row.dtype.element_ty)
        if MASK_STORE:
            tl.store(out_row + cols, y, mask=cols < n_cols)
        else:
            tl.store(out_row + cols, y)  # the last row's last block runs past the end of out


def _triton_softmax_module(bug=None):
    def softmax(x):
        if x.dim() != 2 or x.numel() == 0:
            raise ValueError("x must be a non-empty 2-D tensor")
        if x.stride(1) != 1:
            x = x.contiguous()
        out = torch.zeros(x.shape, dtype=x.dtype, device=x.device)  # zero-filled: no canary after it
        _online_softmax[(x.shape[0],)](x, out, x.stride(0), out.stride(0), x.shape[1], MASK_STORE=bug != "store",
                                       RESCALE=bug != "rescale", BLOCK=1024)
        return out
    return types.SimpleNamespace(softmax=softmax, __name__="planted")


@pytest.mark.parametrize("bug, hint", [
    ("store", "stores past the end of out"),  # once a crash of the whole grader (free(): invalid pointer)
    ("rescale", "missing rescale"),
])
def test_online_softmax_grader_catches_a_triton_kernel(bug, hint):
    assert_grader_catches("online_softmax", _triton_softmax_module(bug), bug, hint)


def test_online_softmax_grader_passes_a_correct_triton_kernel():
    """Every case, traced: strided layouts, random sizes, a zero-filled output and no false alarm."""
    rep = check.run("online_softmax", module=_triton_softmax_module(), quiet=True)
    assert rep.passed, rep


@pytest.mark.parametrize("broken", [False, True])
def test_online_softmax_grader_on_a_gpu_grades_the_two_functions(monkeypatch, broken):
    """On a GPU, for a module whose softmax takes ``one_read`` (solutions.kernels.online_softmax_one_read), the grader
    grades the two passes traced (one_read=False: the one-read kernel's programs wait for each other, which a
    replay in the interpreter would turn into minutes of polling), the one-read plan untraced after them, and
    leaves the module as it found it, even when it stops early."""
    from tkcourse import mode

    monkeypatch.setattr(mode, "INTERPRET", False)  # the grader's view of a GPU; torch runs on the CPU
    seen = []
    mod = _softmax_module("masked lanes as 0" if broken else None)
    plain = mod.softmax

    def softmax(x, one_read=True):
        seen.append(one_read)
        return plain(x)
    mod.softmax = softmax
    rep = check.run("online_softmax", module=mod, quiet=True)
    assert mod.softmax is softmax and not hasattr(mod, "ONE_READ")
    if broken:
        assert rep.status == "fail" and seen == [False], rep
        return
    assert rep.passed, rep
    one_read = [c for c in rep.cases if "one-read" in c.label]
    assert len(one_read) == 3 and rep.cases[-1] is one_read[-1]
    assert seen[-3:] == [True] * 3 and not any(seen[:-3])


def test_online_softmax_grader_on_a_gpu_grades_a_module_without_one_read_as_it_is(monkeypatch):
    """The exercise's softmax takes no one_read: on a GPU too, every case calls it, traced, and no one-read case."""
    from tkcourse import mode

    monkeypatch.setattr(mode, "INTERPRET", False)
    rep = check.run("online_softmax", module=_softmax_module(), quiet=True)
    assert rep.passed, rep
    assert not any("one-read" in c.label for c in rep.cases)


# ----- lesson 06: attention forward ------------------------------------------------------------


def _attention_module(bug=None):
    def attention(q, k, v, causal=False, sm_scale=None):
        if q.shape != k.shape or q.shape != v.shape or q.dtype != k.dtype or q.dtype != v.dtype:
            raise ValueError("q, k, v must have one shape and dtype")
        D = q.shape[-1]
        scale = 1 / math.sqrt(D) if sm_scale is None else sm_scale
        if bug == "strides ignored":  # the storage read as if contiguous
            q, k, v = (torch.as_strided(t, t.shape, torch.empty(t.shape).stride()) for t in (q, k, v))
        if bug == "q scaled in place":
            q.mul_(scale)
            scale = 1.0
        diagonal = {"diagonal excluded": 0, "one future key": 2}.get(bug, 1)
        if bug == "exp2 without log2(e)":
            scale *= math.log(2)
        if bug == "first 64 keys" and not causal:  # the K/V loop bound hard-coded
            k, v = k[..., :64, :], v[..., :64, :]
        if bug == "batch 0 for all":
            q, k, v = (t[:1].expand_as(t) for t in (q, k, v))
        if bug == "keys past N unmasked" and not causal and q.shape[-2] % 16:
            pad = torch.zeros(*k.shape[:-2], -q.shape[-2] % 16, D, dtype=k.dtype, device=k.device)
            k, v = torch.cat([k, pad], -2), torch.cat([v, pad], -2)
        if bug == "not divided by l":
            s = (q.double() @ k.double().transpose(-1, -2)) * scale
            if causal:
                s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1), -math.inf)
            o = torch.exp(s - s.amax(-1, keepdim=True)) @ v.double()
        else:
            o = fwd_reference(q, k, v, causal, scale, diagonal=diagonal)
        o = o.to(q.dtype)
        if bug == "grid of 4 heads":
            o.view(-1, *o.shape[2:])[4:] = float("nan")
        if bug == "written over q":
            return q.copy_(o)
        if bug == "tuple":
            return o, o.sum(-1)
        if bug in ("store far", "load past"):
            return _copied(o, bug)
        return o
    return types.SimpleNamespace(attention=attention, __name__="planted")


@pytest.mark.parametrize("bug, hint", [
    ("diagonal excluded", "causal mask is off by one: query i must see key i"),
    ("one future key", "causal mask is off by one: query i also sees key i + 1"),
    ("exp2 without log2(e)", "log2(e)"),
    ("not divided by l", "never divided by l"),
    ("batch 0 for all", "batch 0's result"),
    ("keys past N unmasked", "keys past N count with score 0"),
    ("grid of 4 heads", "query rows are NaN"),
    ("strides ignored", "strided q, k or v"),
    ("q scaled in place", "changed its input q"),
    ("written over q", "returned q itself"),
    ("tuple", "attention returns o alone"),
    ("first 64 keys", "only the first 64 keys count"),
    ("store far", "far past the end of dst"),
    ("load past", "loads past the end of src"),
])
def test_attention_grader_catches(bug, hint):
    assert_grader_catches("flash_attention", _attention_module(bug), bug, hint)


def test_attention_grader_passes_the_correct_plant():
    rep = check.run("flash_attention", module=_attention_module(), quiet=True)
    assert rep.passed, rep


def test_attention_grader_catches_a_running_max_started_at_0():
    """Exact while some score reaches 0 (any max at or above the true one rescales alike): only a case whose
    scores all lie far below 0 sees it, where exp(s - 0) underflows and o = 0 / 0."""
    from tkcourse import stubs

    text = stubs.answer_text((ROOT / "solutions" / "flash_attention.py").read_text())
    mod = mutant(text, [('m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)', "m_i = tl.zeros([BLOCK_M], tl.float32)")],
                 "planted_max_at_0", "solutions/flash_attention.py")
    rep = assert_grader_catches("flash_attention", mod, "a running max started at 0", "Start it at -inf")
    assert "every score about -200" in rep.first_problem().label, rep


@pytest.mark.parametrize("hi", ["N", "tl.minimum((start_m + 2) * BLOCK_M, N) if CAUSAL else N"],
                         ids=["to N", "one block past"])
def test_attention_grader_catches_a_causal_loop_past_the_diagonal(hi):
    """Right values (the causal mask hides every later key), twice the work at long N: the tracer sees a key row
    loaded for a query block whose rows all come before it."""
    from tkcourse import stubs

    text = stubs.answer_text((ROOT / "solutions" / "flash_attention.py").read_text())
    mod = mutant(text, [("hi = tl.minimum((start_m + 1) * BLOCK_M, N) if CAUSAL else N", f"hi = {hi}")],
                 "planted_past_diagonal", "solutions/flash_attention.py")
    rep = assert_grader_catches("flash_attention", mod, "a causal loop past the diagonal",
                                "hi = tl.minimum((start_m + 1) * BLOCK_M, N)")
    bad = rep.first_problem()
    assert "causal" in bad.label and "past the diagonal" in bad.detail, rep


_DIAGONAL = ("start_n, tl.minimum(start_n + BLOCK_N, N), N, qk_scale, BLOCK_M, True)\n"
             "        dk, dv = attn_bwd_dkdv_loop(dk, dv, k, v, desc_q, desc_do, LSE, Delta, offs_n,\n"
             "                                     start_n + BLOCK_N, N, N, qk_scale, BLOCK_M, False)")


@pytest.mark.parametrize("edit", [
    ("start_n, tl.minimum(start_n + BLOCK_N, N), N, qk_scale, BLOCK_M, True)",
     "0, tl.minimum(start_n + BLOCK_N, N), N, qk_scale, BLOCK_M, True)"),
    (_DIAGONAL, "0, N, N, qk_scale, BLOCK_M, True)"),
], ids=["masked loop from 0", "one masked loop over every query"])
def test_backward_grader_catches_a_causal_loop_over_queries_before_the_keys(edit):
    """Right gradients (the mask zeroes every query before the keys), up to twice the work at long N: the tracer
    sees a query row loaded by a key block that starts after it."""
    from tkcourse import stubs

    text = stubs.answer_text((ROOT / "solutions" / "flash_attention_backward.py").read_text())
    mod = mutant(text, [edit], "planted_before_keys", "solutions/flash_attention_backward.py")
    rep = assert_grader_catches("flash_attention_backward", mod, "a causal loop over queries before the keys",
                                "then [start_n + BLOCK_N, N) with MASK=False")
    assert "the causal mask throws away whole" in rep.first_problem().detail, rep


def _forward_module(bug):
    """attention and attention_forward, correct but for the lse of attention_forward."""
    mod = _attention_module()

    def attention_forward(q, k, v, causal=False, sm_scale=None):
        o = mod.attention(q, k, v, causal, sm_scale)
        s = (q.double() @ k.double().transpose(-1, -2)) / math.sqrt(q.shape[-1])
        if causal:
            s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1), -math.inf)
        lse = torch.logsumexp(s, -1)
        lse = {"lse in base 2": lse / math.log(2), "lse is m": s.amax(-1), "lse in fp16": lse.half()}.get(bug, lse)
        return o if bug == "o only" else (o, lse.float() if bug != "lse in fp16" else lse)
    mod.attention_forward = attention_forward
    return mod


@pytest.mark.parametrize("bug, hint", [
    ("lse in base 2", "lse is in base 2"),
    ("lse is m", "only the running max"),
    ("lse in fp16", "lse is fp32"),
    ("o only", "returns the pair (o, lse)"),
])
def test_attention_forward_lse_graded(bug, hint):
    assert_grader_catches("flash_attention", _forward_module(bug), bug, hint)


def test_attention_forward_lse_passes_when_right():
    rep = check.run("flash_attention", module=_forward_module(None), quiet=True)
    assert rep.passed and any("lse" in c.label for c in rep.cases), rep


# ----- lesson 07: attention backward -----------------------------------------------------------


def _backward_module(bug=None):
    def attention_backward(do, q, k, v, o, lse, causal=False, sm_scale=None):
        if bug == "raises":
            raise RuntimeError("the launcher is broken")
        if bug == "strides ignored":
            q, k, v, do = (torch.as_strided(t, t.shape, torch.empty(t.shape).stride()) for t in (q, k, v, do))
        kw = {"lse in base 2": dict(lse_base2=True), "causal off by one": dict(diagonal=0)}.get(bug, {})
        dq, dk, dv = (g.to(q.dtype) for g in model_backward(q, k, v, do, causal, sm_scale, **kw))
        if bug == "dk without the scale":
            dk = dk / sm_scale
        if bug == "lse scaled in place":
            lse.mul_(1.4426950408889634)  # for tl.exp2, in the launcher: the caller's lse changes
        if bug == "order":
            return dq, dv, dk
        if bug == "dk is dv":
            dv = dk
        if bug == "dq written over q":
            dq = q.copy_(dq)
        if bug == "two":
            return dq, dk
        if bug in ("store far", "load past"):
            dq = _copied(dq, bug)
        return dq, dk, dv
    return types.SimpleNamespace(attention_backward=attention_backward, __name__="planted")


@pytest.mark.parametrize("bug, hint", [
    ("dk without the scale", "the scale is missing"),
    ("lse in base 2", "wrong lse"),
    ("order", "returns the gradients in the order (dq, dk, dv)"),
    ("dk is dv", "are one tensor"),
    ("lse scaled in place", "changed its input lse"),
    ("dq written over q", "returned q itself"),
    ("strides ignored", "a strided input"),
    ("two", "the three gradients"),
    ("raises", "your code raised"),
    ("causal off by one", "causal mask is off by one"),
    ("store far", "far past the end of dst"),
    ("load past", "loads past the end of src"),
])
def test_backward_grader_catches(bug, hint):
    _assert_caught("flash_attention_backward", _backward_module(bug), bug, hint)


def test_backward_grader_passes_the_correct_plant():
    rep = check.run("flash_attention_backward", module=_backward_module(), quiet=True)
    assert rep.passed, rep


def test_backward_grader_names_an_off_by_one_mask_in_the_learners_kernel():
    """The mistake as a learner writes it, in the kernel (not the grader's own model of it): pT kept only where
    key < query. The backward reads the forward's O for Δ, so the grader's model must too to recognise it."""
    from pathlib import Path

    from helpers import mutant

    source = (Path(__file__).parents[1] / "solutions" / "flash_attention_backward.py").read_text()
    mod = mutant(source, [("pT = tl.where(offs_m[None, :] >= offs_n[:, None], pT, 0.0)",
                           "pT = tl.where(offs_m[None, :] > offs_n[:, None], pT, 0.0)")],
                 "planted_backward_mask", "solutions/flash_attention_backward.py")
    assert_grader_catches("flash_attention_backward", mod, "causal mask off by one", "causal mask is off by one")


# ----- slips planted in the lessons' own kernels -------------------------------------------------


def _planted_kernel(lesson, old, new):
    """solutions/<lesson>.py as a learner who finished the exercise has it (``answer_text``), ``old`` replaced."""
    from pathlib import Path

    from helpers import mutant

    from tkcourse.stubs import answer_text

    source = answer_text((Path(__file__).parents[1] / "solutions" / f"{lesson}.py").read_text())
    return mutant(source, [(old, new)], f"planted_{lesson}_slip", f"solutions/{lesson}.py")


def test_attention_grader_names_l_not_rescaled():
    """acc rescaled by alpha, the running sum l_i not: the catch-all hint before, a missing rescale of l now."""
    mod = _planted_kernel("flash_attention", "l_i = l_i * alpha + tl.sum(p, axis=1)", "l_i = l_i + tl.sum(p, axis=1)")
    rep = assert_grader_catches("flash_attention", mod, "l not rescaled", "missing rescale of l")
    assert "l_i = l_i * alpha" in rep.first_problem().hint, rep


HEAD = "(bh // H).to(tl.int64) * stride_b + (bh % H).to(tl.int64) * stride_h"


@pytest.mark.parametrize("name, old, new, hint", [
    # with B = H the swapped offsets visit every head and the output is right: B 1 x H 2 stores past O's end
    ("batch and head swapped", HEAD, HEAD.replace("bh // H", "BH_MOD").replace("bh % H", "bh // H")
     .replace("BH_MOD", "bh % H"), "batch and head are swapped in the head's offset"),
    ("the strides swapped", HEAD, HEAD.replace("stride_b", "STRIDE").replace("stride_h", "stride_b")
     .replace("STRIDE", "stride_h"), "batch and head are swapped in the head's offset"),
    ("the causal loop stops before the diagonal block", "tl.minimum((start_m + 1) * BLOCK_M, N) if CAUSAL",
     "tl.minimum(start_m * BLOCK_M, N) if CAUSAL", "the causal key loop stops before the diagonal block"),
    ("lse with log2", "m_i + tl.log(l_i)", "m_i + tl.log2(l_i)", "lse takes tl.log2 of l_i"),
    ("lse without the head's row", "tl.store(LSE + bh.to(tl.int64) * N + offs_m", "tl.store(LSE + offs_m",
     "only the first (batch, head)'s lse row was written"),
    ("alpha the wrong way round", "alpha = tl.exp(m_i - m_new)", "alpha = tl.exp(m_new - m_i)",
     "in the first step m_i is still -inf"),
    ("p from the old max", "p = tl.exp(s - m_new[:, None])", "p = tl.exp(s - m_i[:, None])",
     "in the first step m_i is still -inf"),
    ("m_i never updated", "        m_i = m_new\n", "", "only the last key block counts: m_i stays -inf"),
    ("K loaded from Q", "k = tl.load(K + kv_offsets", "k = tl.load(Q + kv_offsets", "your kernel loads K from Q"),
    ("p not cast to v's dtype", "tl.dot(p.to(v.dtype), v)", "tl.dot(p, v)",
     "cast the fp32 one (the weights p, say) to the other's dtype"),
])
def test_attention_grader_names_the_learners_slip(name, old, new, hint):
    """Each got a hint naming another mistake (an unmasked tail, a NaN of any cause, any wrong lse, the lse mask)."""
    rep = assert_grader_catches("flash_attention", _planted_kernel("flash_attention", old, new), name, hint)
    assert "unmasked tail" not in rep.first_problem().hint and "mask offs_m < N" not in rep.first_problem().hint, rep


DKDV_DIAGONAL = "start_n, tl.minimum(start_n + BLOCK_N, N), N, qk_scale, BLOCK_M, {})"


@pytest.mark.parametrize("name, old, new, hint", [
    ("the diagonal loop launched with MASK=False",  # causal blocks still skipped, the diagonal unmasked
     DKDV_DIAGONAL.format(True), DKDV_DIAGONAL.format(False), "the diagonal block is not masked"),
    ("the scale inside the loop as well as after it",  # dk = right · sm_scale · log2(e)
     "dk += tl.dot(dsT.to(q.dtype), q)", "dk += tl.dot(dsT.to(q.dtype), q) * qk_scale",
     "the scale is applied twice, once as qk_scale"),
])
def test_backward_grader_names_the_learners_slip(name, old, new, hint):
    rep = assert_grader_catches("flash_attention_backward", _planted_kernel("flash_attention_backward", old, new),
                                name, hint)
    assert "dk" in rep.first_problem().label and "recompute P" not in rep.first_problem().hint, rep


DKDV_REST = "start_n + BLOCK_N, N, N, qk_scale, BLOCK_M, False)"


@pytest.mark.parametrize("name, old, new, hint", [
    ("the second loop from start_n", DKDV_REST, DKDV_REST.replace("start_n + BLOCK_N", "start_n"),
     "the diagonal rows run twice"),
    ("the second loop from start_n + BLOCK_M", DKDV_REST, DKDV_REST.replace("BLOCK_N", "BLOCK_M"),
     "starts at start_n + BLOCK_M"),
    ("the diagonal loop to start_n + BLOCK_M", DKDV_DIAGONAL.format(True),
     DKDV_DIAGONAL.format(True).replace("start_n + BLOCK_N", "start_n + BLOCK_M"), "stops at start_n + BLOCK_M"),
])
def test_backward_grader_names_causal_loops_that_overlap_or_leave_a_gap(name, old, new, hint):
    rep = assert_grader_catches("flash_attention_backward", _planted_kernel("flash_attention_backward", old, new),
                                name, hint)
    assert "the two causal loops overlap or leave a gap" in rep.first_problem().hint, rep


DKDV_LOOP = "for start_m in range(lo, hi, BLOCK_M):"
DKDV_WHOLE = "                                     0, N, N, qk_scale, BLOCK_M, False)"


@pytest.mark.parametrize("name, old, new, hint", [
    ("the second causal loop left out", "        dk, dv = attn_bwd_dkdv_loop(dk, dv, k, v, desc_q, desc_do, LSE, Delta, "
     "offs_n,\n                                     " + DKDV_REST + "\n", "", "the diagonal loop runs alone"),
    ("the diagonal mask reversed", "tl.where(offs_m[None, :] >= offs_n[:, None], pT, 0.0)",
     "tl.where(offs_m[None, :] <= offs_n[:, None], pT, 0.0)", "the diagonal block's mask is reversed"),
    ("the loop from query 0, not lo", DKDV_LOOP, DKDV_LOOP.replace("range(lo,", "range(0,"),
     "attn_bwd_dkdv_loop starts at query 0, not at its lo"),
    ("the non-causal loop from start_n", DKDV_WHOLE, DKDV_WHOLE.replace(" 0, N,", " start_n, N,"),
     "without a causal mask every query sees every key"),
])
def test_backward_grader_names_loops_that_miss_rows_or_mask_the_wrong_side(name, old, new, hint):
    """Each got the catch-all "recompute P": the loop model now also counts a loop left out, a reversed mask,
    a loop from 0 and a non-causal loop that skips the rows before start_n."""
    rep = assert_grader_catches("flash_attention_backward", _planted_kernel("flash_attention_backward", old, new),
                                name, hint)
    assert "recompute P" not in rep.first_problem().hint, rep


@pytest.mark.parametrize("name, old, new, hint", [
    ("dP from K", "dpT = tl.dot(v, do.T)", "dpT = tl.dot(k, do.T)", "dP = dO·Vᵀ takes V, not K"),
    ("dK from dO", "dk += tl.dot(dsT.to(q.dtype), q)", "dk += tl.dot(dsT.to(q.dtype), do)", "dK = dSᵀ·Q takes Q, not dO"),
    ("dV from Q", "dv += tl.dot(pT.to(do.dtype), do)", "dv += tl.dot(pT.to(do.dtype), q)", "dV = Pᵀ·dO takes dO, not Q"),
])
def test_backward_grader_names_a_product_of_the_wrong_tensor(name, old, new, hint):
    """Each got the catch-all "recompute P": a model now swaps the tensor of each of the loop's three products."""
    rep = assert_grader_catches("flash_attention_backward", _planted_kernel("flash_attention_backward", old, new),
                                name, hint)
    assert "recompute P" not in rep.first_problem().hint, rep


def test_backward_loop_model_of_the_right_loops_is_the_gradient():
    """The visits model with the launcher's blocks and the right loops gives the right dk and dv; its blocks are
    the given launcher's."""
    from solutions import flash_attention_backward as fb
    from tkcourse.check import flash_attention_backward as grader

    assert grader.DKDV_BLOCKS == (fb.DKDV_CONFIG["BLOCK_N"], fb.DKDV_CONFIG["BLOCK_M"])
    q, k, v, do = (torch.randn(1, 1, 150, 16, generator=torch.Generator().manual_seed(i)) for i in range(4))
    bn = grader.DKDV_BLOCKS[0]
    right = model_backward(q, k, v, do, True, 0.25)
    looped = model_backward(q, k, v, do, True, 0.25, loops=(bn, bn, bn))
    for a, b in zip(right, looped):
        torch.testing.assert_close(a, b)


def test_backward_grader_names_a_scaled_dv():
    """dv multiplied by sm_scale with dk: the catch-all 'recompute P' hint before, dV's missing scale now."""
    mod = _planted_kernel("flash_attention_backward", "    dk *= sm_scale  #", "    dv *= sm_scale\n    dk *= sm_scale  #")
    rep = assert_grader_catches("flash_attention_backward", mod, "dv scaled", "dV = Pᵀ·dO has no scale")
    assert "dv" in rep.first_problem().label, rep


def test_backward_models_of_the_new_slips():
    """The models: a diagonal block wider than N is no mask at all; an extra gain scales dq and dk only."""
    q, k, v, do = (torch.randn(1, 1, 40, 16, generator=torch.Generator().manual_seed(i)) for i in range(4))
    scale = 0.25
    unmasked = model_backward(q, k, v, do, True, scale, mask=False)
    for a, b in zip(model_backward(q, k, v, do, True, scale, diagonal_block=64), unmasked):
        torch.testing.assert_close(a, b)
    right = model_backward(q, k, v, do, True, scale)
    blocked = model_backward(q, k, v, do, True, scale, diagonal_block=16)
    same = torch.isclose(blocked[1], right[1]).all(-1).reshape(-1)  # per key: its column of P unchanged
    assert same.tolist() == [j % 16 == 0 for j in range(40)]  # a key sees the earlier queries of its block too
    gained = model_backward(q, k, v, do, True, scale, gain=2.0)
    torch.testing.assert_close(gained[0], 2 * right[0])
    torch.testing.assert_close(gained[1], 2 * right[1])
    torch.testing.assert_close(gained[2], right[2])
