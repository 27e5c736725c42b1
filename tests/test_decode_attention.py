"""Lesson 09, part 2: decode attention over a paged KV cache, its grader and its benchmark's helpers.

The kernels (the lesson's launcher and the tuned one) against float64 torch on shuffled pools; the
grader on planted mistakes, each caught with a hint that names it (most planted in torch, through the
grader's own models of the mistakes; one in a Triton combine kernel; the out-of-bounds ones in a small
Triton copy that the tracer watches); and the grader never crashing whatever the function does.
"""

import math
import types

import pytest
import torch
import triton
import triton.language as tl
from helpers import assert_grader_catches
from helpers import copied_out_of_bounds as _copied

from solutions import decode_attention as da
from solutions.kernels import decode_attention as dat
from tkcourse import check, mode
from tkcourse.check.decode_attention import paged
from tkcourse.check.decode_attention import reference as model

ATOL32 = 2e-5 if mode.INTERPRET else 1e-2  # fp32 tl.dot is TF32 on a GPU


def _inputs(lens, ps=16, Hq=8, Hkv=2, D=64, dtype=torch.float32, seed=0):
    return paged(lens, ps, Hq, Hkv, D, dtype, torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("fn", [da.decode_attention, dat.tuned_decode_attention, dat.decode_attention],
                         ids=["lesson", "tuned", "lean"])
@pytest.mark.parametrize("lens, ps, Hq, Hkv, D", [
    ([37, 100], 16, 8, 2, 64), ([1], 16, 4, 4, 64), ([200, 1, 64], 32, 8, 1, 128), ([130, 70], 64, 16, 2, 128),
])
def test_matches_float64_reference(fn, lens, ps, Hq, Hkv, D):
    args = _inputs(lens, ps, Hq, Hkv, D)
    out = fn(*args)
    assert out.shape == args[0].shape and out.dtype == args[0].dtype
    torch.testing.assert_close(out.double().cpu(), model(*args), atol=ATOL32, rtol=ATOL32)
    torch.testing.assert_close(da.reference(*(t.double() if t.is_floating_point() else t for t in args)).cpu(),
                               model(*args))  # the solution's torch reference is the grader's too


def test_fp16_and_sm_scale():
    args = _inputs([90, 33], dtype=torch.float16)
    torch.testing.assert_close(da.decode_attention(*args).double().cpu(), model(*args), atol=2e-3, rtol=2e-3)
    args = _inputs([40, 7], seed=1)
    torch.testing.assert_close(da.decode_attention(*args, sm_scale=0.3).double().cpu(), model(*args, sm_scale=0.3),
                               atol=ATOL32, rtol=ATOL32)


@pytest.mark.parametrize("config", [{"BLOCK_N": 32, "splits": 3}, {"BLOCK_N": 16, "splits": 1},
                                    {"BLOCK_N": 64, "num_warps": 8, "num_stages": 3}])
def test_tuned_with_explicit_config(config):
    """Any split count (one split: the combine of a single partial) and tokens a step less or more than a page."""
    args = _inputs([100, 250, 3], ps=32)
    torch.testing.assert_close(dat.decode_attention(*args, config=config).double().cpu(), model(*args),
                               atol=ATOL32, rtol=ATOL32)


def test_tuned_split_counts():
    """The plan's splits (``kernels.decode_plan``, more in tests/test_decode_plan.py): a few for a big batch,
    as the H200 sweeps found, and at B 1 two programs on most of 132 SMs."""
    from solutions.kernels.decode_plan import split_count

    assert split_count(256, 64, 132, 8192) == 3 and split_count(64, 256, 132, 32768) == 4
    assert split_count(256, 120, 132, 15360) == 5 and split_count(8, 32, 132, 4096) == 32


@pytest.mark.parametrize("change, words", [
    (lambda a: a[3].fill_(0), "seq_lens"), (lambda a: a[3].fill_(10_000), "seq_lens"),
    (lambda a: a[4].fill_(-1), "outside the pool"), (lambda a: a[4].fill_(a[1].shape[0]), "outside the pool"),
])
def test_lesson_checks_the_values(change, words):
    args = list(_inputs([20, 9]))
    change(args)
    with pytest.raises(ValueError, match=words):
        da.decode_attention(*args)


# ----- the grader ------------------------------------------------------------------------------


@triton.jit
def _combine_unscaled(M, L, ACC, O, HEAD_DIM: tl.constexpr, SPLITS: tl.constexpr, BLOCK_S: tl.constexpr):
    """The lesson's combine with the classic mistake: the splits' sums added as they are."""
    bh = tl.program_id(0)
    s = tl.arange(0, BLOCK_S)
    d = tl.arange(0, HEAD_DIM)
    l_s = tl.load(L + bh * SPLITS + s, mask=s < SPLITS, other=0.0)
    acc = tl.load(ACC + (bh * SPLITS + s)[:, None] * HEAD_DIM + d[None, :], mask=s[:, None] < SPLITS, other=0.0)
    tl.store(O + bh * HEAD_DIM + d, (tl.sum(acc, axis=0) / tl.sum(l_s, axis=0)).to(O.dtype.element_ty))


SPLIT = 32  # tokens per split of the planted splits


def _module(bug=None):
    def decode_attention(q, k_cache, v_cache, seq_lens, block_table, sm_scale=None):
        if bug != "no checks":
            scale = da.check_inputs(q, k_cache, v_cache, seq_lens, block_table, sm_scale, check_values=False)
        else:
            return torch.zeros_like(q)
        if bug == "raises":
            raise RuntimeError("the launcher is broken")
        if bug == "triton combine without rescale":
            kernel, da.decode_combine = da.decode_combine, _combine_unscaled
            try:
                return da.launch(q, k_cache, v_cache, seq_lens, block_table, scale, 16, None, {}, {})
            finally:
                da.decode_combine = kernel
        B, Hq, D = q.shape
        ps = k_cache.shape[1]
        lens = [int(n) for n in seq_lens]
        t = block_table
        arange = torch.arange(t.shape[1], device=t.device)
        kw = {"page p + 1": dict(table=torch.cat([t[:, 1:], t[:, :1]], 1)), "physical + 1": dict(table=t + 1),
              "table skipped": dict(table=arange.expand_as(t)),
              "last page unmasked": dict(lens=[-(-n // ps) * ps for n in lens]),
              "whole table row": dict(lens=[t.shape[1] * ps] * B),
              "gqa h % Hkv": dict(kv_head=lambda h, hq, hkv: h % hkv),
              "no scale": dict(sm_scale=1.0), "exp2 without log2(e)": dict(sm_scale=scale * math.log(2)),
              "no rescale": dict(split=SPLIT, rescale=False),
              "last split dropped": dict(lens=[n // SPLIT * SPLIT if n > SPLIT else n for n in lens])}.get(bug, {})
        kw.setdefault("sm_scale", scale)
        o = model(q, k_cache, v_cache, seq_lens, block_table, **kw).to(q.dtype).to(q.device)
        if bug == "rows past 4 unwritten":
            o.view(-1, D)[4:] = float("nan")
        if bug == "table changed":
            block_table.add_(0).view(-1)[0] += 1  # the launcher edits the caller's block table
        if bug == "written over q":
            return q.copy_(o)
        if bug == "tuple":
            return o, o
        if bug == "fp32 output":
            return o.float() if q.dtype != torch.float32 else o.double()
        if bug in ("store far", "load past"):
            return _copied(o, bug)
        return o
    return types.SimpleNamespace(decode_attention=decode_attention, __name__="planted")


@pytest.mark.parametrize("bug, hint", [
    ("page p + 1", "not block_table[b, p + 1]"),
    ("physical + 1", "block_table[b, p] itself, not one more"),
    ("table skipped", "the block table is skipped"),
    ("last page unmasked", "ignored in its last, partial page"),
    ("whole table row", "keys past seq_lens[b] count"),
    ("gqa h % Hkv", "not h % Hkv"),
    ("no scale", "no scale at all"),
    ("exp2 without log2(e)", "log2(e) = 1.4427"),
    ("no rescale", "partials combined without rescaling"),
    ("triton combine without rescale", "partials combined without rescaling"),
    ("last split dropped", "the last, partial split is dropped"),
    ("rows past 4 unwritten", "rows are NaN"),
    ("table changed", "changed its input block_table"),
    ("written over q", "returned q itself"),
    ("tuple", "returns a tuple"),
    ("fp32 output", "wrong output dtype"),
    ("store far", "far past the end of dst"),
    ("load past", "loads past the end of src"),
    ("no checks", None),
])
def test_grader_catches(bug, hint):
    rep = assert_grader_catches("decode_attention", _module(bug), bug, hint)
    if bug == "no checks":  # zeros for every input: wrong at once, with the generic hint
        assert "block-table lookup" in rep.first_problem().hint, rep


def test_grader_catches_a_launcher_without_checks():
    """A launcher that computes on bad input instead of raising fails the refusal cases."""
    mod = _module()
    plain = mod.decode_attention
    mod.decode_attention = lambda q, k, v, sl, bt, sm_scale=None: (
        plain(q, k, v, sl, bt, sm_scale) if k.shape == v.shape and q.shape[1] % k.shape[2] == 0 else torch.zeros_like(q))
    rep = assert_grader_catches("decode_attention", mod, "no checks", "raise ValueError")
    assert "different shapes" in rep.first_problem().label, rep


def test_grader_reports_a_raising_launcher_as_an_error():
    rep = check.run("decode_attention", module=_module("raises"), quiet=True)
    assert rep.status == "error" and "the launcher is broken" in rep.first_problem().detail, rep


def test_grader_never_crashes():
    for fn in (lambda *a, **k: None, lambda *a, **k: [1, 2], lambda *a, **k: torch.zeros(3)):
        rep = check.run("decode_attention", module=types.SimpleNamespace(decode_attention=fn, __name__="odd"), quiet=True)
        assert rep.status in ("todo", "fail") and rep.first_problem() is not None, rep
    rep = check.run("decode_attention", module=types.SimpleNamespace(__name__="empty"), quiet=True)
    assert rep.status == "error" and "lacks a name" in rep.first_problem().hint, rep


def test_grader_passes_the_correct_plant_and_the_solutions():
    for mod in (_module(), da, dat):
        rep = check.run("decode_attention", module=mod, quiet=True)
        assert rep.passed, rep


def test_graded_block_tables_are_shuffled_pages_of_the_pool():
    q, k, v, seq_lens, table = _inputs([37, 100])
    assert table.shape == (2, 8) and len(set(table.flatten().tolist())) == table.numel()  # distinct pages
    assert int(table.max()) < k.shape[0] - 1  # the last page is in no table
    assert not torch.equal(table.flatten().cpu(), torch.arange(table.numel()))


# ----- the benchmark's helpers -------------------------------------------------------------------


def test_benchmark_cache_is_a_shuffled_pool():
    from benchmarks import decode_attention as bench

    assert abs(sum(bench.mixed_lengths()) - bench.TOKENS) < 64
    q, k, v, seq_lens, table = bench.paged_cache([40, 17], 16, Hq=4, Hkv=2, D=64, dtype=torch.float32, device=mode.DEVICE)
    assert k.shape[0] == 3 + 2 and sorted(table[0, :3].tolist() + table[1, :2].tolist()) == list(range(5))
    kc = bench.contiguous_cache(k, seq_lens, table)  # (B, Hkv, N, D): sequence 0's 40 tokens in order
    assert kc.shape == (2, 2, 40, 64)
    assert torch.equal(kc[0, :, 17], k[int(table[0, 1]), 1]) and torch.equal(kc[1, :, 16], k[int(table[1, 1]), 0])
    assert bench.kv_bytes(k, seq_lens) == 2 * 57 * 2 * 64 * 4
