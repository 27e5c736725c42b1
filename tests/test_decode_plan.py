"""Lesson 09's fast decode attention (``solutions.kernels.decode_attention``): its plan from the work and
the SM count, page sizes from 1, head dims 64/128/256, and inputs whose values it does not trust.

In the interpreter, small sizes: the SM count is injected (``decode_plan._SMS``) so that a batch of one
sequence spreads over several splits; the tracer watches that no load or store leaves its tensor.
"""

import pytest
import torch

from solutions.kernels import decode_attention as dat
from solutions.kernels import decode_plan as dp
from tkcourse import mode, traffic
from tkcourse.check.decode_attention import paged
from tkcourse.check.decode_attention import reference as model

TOL = {torch.float32: 2e-5 if mode.INTERPRET else 1e-2, torch.float16: 2e-3}


def _inputs(lens, ps=16, Hq=8, Hkv=2, D=64, dtype=torch.float32, seed=0):
    return paged(lens, ps, Hq, Hkv, D, dtype, torch.Generator().manual_seed(seed))


def _close(out, args, **kw):
    tol = TOL[args[0].dtype]
    torch.testing.assert_close(out.double().cpu(), model(*args, **kw), atol=tol, rtol=tol)


@pytest.fixture
def sms(monkeypatch):
    """``sms(n)``: the plan sees ``n`` SMs on this device (entries made before are dropped)."""
    def set_sms(n):
        dat.forget()
        monkeypatch.setitem(dp._SMS, (torch.device(mode.DEVICE).type, torch.device(mode.DEVICE).index), n)
    yield set_sms
    dat.forget()


# ----- the plan ---------------------------------------------------------------------------------


def test_batch_regime_keeps_the_measured_split_counts():
    """B 32 x 8192, B 8 x 32768 and the mixed batch (capacity 15360) at Hkv 8 on 132 SMs: the H200
    sweeps' counts, under both rules; B 64 x 1024 fills the SMs at one split (one kernel, no combine)."""
    steps = lambda n: -(-n // 128)
    for rule in dp.RULES:
        assert dp.split_count(32 * 8, steps(8192), 132, 8192, rule) == 3
        assert dp.split_count(8 * 8, steps(32768), 132, 32768, rule) == 4
        assert dp.split_count(32 * 8, steps(15360), 132, 15360, rule) == 5
        assert dp.split_count(64 * 8, steps(1024), 132, 1024, rule) == 1


def test_spread_regime_puts_two_programs_an_sm_at_batch_one():
    """B 1 (8 KV heads) on 132 SMs: 32 splits of 32768 tokens (256 programs, two an SM, as the H200
    sweep found fastest) and of 4096 (one step each: the second program an SM beats a second step);
    a short sequence takes one-step splits, a one-step one one split."""
    assert dp.split_count(8, 256, 132, 32768) == 32
    assert dp.split_count(8, 32, 132, 4096) == 32
    assert dp.split_count(8, 8, 132, 1024) == 8
    assert dp.split_count(8, 1, 132, 100) == 1
    for pairs, steps in [(1, 1000), (3, 77), (40, 64), (100, 500), (8, 1024)]:
        s = dp.split_count(pairs, steps, 132)
        assert 1 <= s <= min(steps, dp.MAX_SPLITS)
        per = -(-steps // s)
        assert -(-steps // per) == s  # no empty split: ties go to the count that fills them


def test_first_rule_still_reachable():
    """``rule="v1"``: the first H200 run's plan (16 splits at B 1, the full tile at B 64 x 1024)."""
    assert dp.split_count(8, 32, 132, 4096, rule="v1") == 16
    assert dp.split_count(8, 256, 132, 32768, rule="v1") == 16
    assert dp.split_count(8, 8, 132, 1024, rule="v1") == 4
    old = dp.plan(64, 8, 128, 2, 16, 64, "cuda", num_sms=132, rule="v1")
    assert (old.block_n, old.splits) == (128, 1)
    with pytest.raises(ValueError, match="rule"):
        dp.split_count(8, 32, 132, 4096, rule="v3")


# (B, tokens a sequence) -> (tokens a step, splits) on 132 SMs, fp16 D 128, Hkv 8, page 16
NEW_PLANS = {(1, 4096): (128, 32), (1, 32768): (128, 32), (64, 1024): (64, 1),
             (32, 8192): (128, 3), (8, 32768): (128, 4), (32, 15360): (128, 5)}


@pytest.mark.parametrize("B, tokens", list(NEW_PLANS), ids=[f"B{b}x{n}" for b, n in NEW_PLANS])
def test_plan_at_the_measured_shapes(B, tokens, monkeypatch):
    """The plan on a GPU of 132 SMs (injected: no GPU needed): more splits at B 1, a 64-token step at
    B 64 x 1024, and B 32 x 8192, B 8 x 32768 and the mixed batch (capacity 15360) as the first rule
    had them (the recorded rows), warps and stages unchanged."""
    monkeypatch.setitem(dp._SMS, ("cuda", None), 132)
    p = dp.plan(B, 8, 128, 2, 16, tokens // 16, "cuda")
    assert (p.block_n, p.splits) == NEW_PLANS[(B, tokens)]
    assert (p.num_warps, p.num_stages) == (dp.NUM_WARPS, dp.NUM_STAGES)
    old = dp.plan(B, 8, 128, 2, 16, tokens // 16, "cuda", num_sms=132, rule="v1")
    if B >= 8:  # the batch regime: split counts as before
        assert old.splits == p.splits
    if (B, tokens) != (64, 1024):
        assert old.block_n == p.block_n == 128


def test_half_tile_only_for_short_programs_of_the_batch_regime():
    """The 64-token step: programs of at most SHORT_STEPS full steps, in the batch regime only (B 1's
    one-step splits keep the full tile); D 256 halves its 64-token tile; the interpreter keeps 16."""
    short = dp.plan(64, 8, 128, 2, 16, 64, "cuda", num_sms=132)
    assert short.block_n == 64 and short.block_s == 1
    long = dp.plan(64, 8, 128, 2, 16, (dp.SHORT_STEPS + 1) * 128 // 16, "cuda", num_sms=132)
    assert long.block_n == 128
    assert dp.plan(1, 8, 128, 2, 16, 256, "cuda", num_sms=132).block_n == 128
    assert dp.plan(64, 8, 256, 2, 16, 64, "cuda", num_sms=132).block_n == 32
    assert dp.plan(64, 8, 128, 2, 16, 64, "cpu", num_sms=132).block_n == dp.INTERPRETER_BLOCK_N


def test_plan_is_cached_per_key():
    dp._plan.cache_clear()
    for _ in range(3):
        dp.plan(1, 8, 128, 2, 16, 256, "cuda", num_sms=132)
    info = dp._plan.cache_info()
    assert info.misses == 1 and info.hits == 2


def test_plan_tokens_a_step_follow_the_tile():
    assert dp.block_n_for(128, 2) == 128 and dp.block_n_for(256, 2) == 64 and dp.block_n_for(64, 2) == 128
    assert dp.block_n_for(128, 4) == 64 and dp.block_n_for(256, 4) == 32
    assert dp.block_n_for(256, 2, interpreter=True) == dp.INTERPRETER_BLOCK_N


def test_plan_from_capacity_or_hint():
    """The bound on the lengths is the table's capacity unless the caller gives a tighter one."""
    wide = dp.plan(32, 8, 128, 2, 16, 8192, "cpu", num_sms=132)  # a table of 128k tokens a sequence
    hinted = dp.plan(32, 8, 128, 2, 16, 8192, "cpu", max_seq_len=8192, num_sms=132)
    assert wide.splits > hinted.splits


# ----- results -----------------------------------------------------------------------------------


def test_batch_one_long_sequence_spreads_over_splits(sms):
    """B 1 with few pairs and a small SM count: several splits, each reading its share of the
    sequence (the tracer counts K rows a program), and the lesson's result."""
    sms(8)
    args = _inputs([700], ps=16, Hq=4, Hkv=2, D=64)
    plan = dat.plan_of(args[0], args[1], args[4])
    assert plan.splits > 2
    with traffic.capture(stop_on_oob=True) as traces:
        out = dat.decode_attention(*args)
    _close(out, args)
    per = -(-(-(-700 // dp.INTERPRETER_BLOCK_N)) // plan.splits) * dp.INTERPRETER_BLOCK_N  # tokens a split, at most
    reads = [traces[0].program_elements((0, s, 0), "K").size for s in range(plan.splits)]
    assert min(reads) > 0 and max(reads) <= per * 64


def test_a_table_wider_than_the_sequence_still_spreads(sms):
    """Capacity 4x the length: the plan counts on the capacity, the kernel sizes the splits from the
    real length, so every split works."""
    sms(8)
    q, k, v, seq_lens, table = _inputs([700], ps=16, Hq=4, Hkv=1, D=64)
    wide = torch.cat([table, torch.zeros(1, 3 * table.shape[1], dtype=table.dtype, device=table.device)], 1)
    args = (q, k, v, seq_lens, wide)
    plan = dat.plan_of(q, k, wide)
    with traffic.capture(stop_on_oob=True) as traces:
        out = dat.decode_attention(*args)
    _close(out, args)
    reads = [traces[0].program_elements((0, s, 0), "K").size for s in range(plan.splits)]
    assert plan.splits > 1 and min(reads) > 0


@pytest.mark.parametrize("ps", [1, 2, 4, 8, 16, 32, 64, 128])
def test_every_page_size(ps, sms):
    sms(4)
    args = _inputs([37, 130, 1], ps=ps, Hq=8, Hkv=2, D=64)
    _close(dat.decode_attention(*args), args)


@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_head_dims(D, dtype, sms):
    sms(4)
    args = _inputs([70, 5], ps=8, Hq=4, Hkv=1, D=D, dtype=dtype)
    _close(dat.decode_attention(*args), args)
    _close(dat.tuned_decode_attention(*args, config={"BLOCK_N": 16, "splits": 3}), args)


def test_hint_below_the_real_length_is_still_right(sms):
    """``max_seq_len`` only plans: a length past it is attended in full."""
    sms(4)
    args = _inputs([300, 40], ps=16)
    _close(dat.decode_attention(*args, max_seq_len=20), args)
    _close(dat.decode_attention(*args, max_seq_len=300), args)
    with pytest.raises(ValueError, match="max_seq_len"):
        dat.decode_attention(*args, max_seq_len=0)


def test_one_compile_per_key_and_hint_bucket(sms):
    sms(4)
    args = _inputs([50, 20])
    lean = dat.LEANS["decode_split"]
    before = lean.compiles
    for hint in (None, None, 100, 120, 128):  # 100, 120 and 128 share the bucket 128
        _close(dat.decode_attention(*args, max_seq_len=hint), args)
    assert lean.compiles == before + 2


# ----- values the host does not check --------------------------------------------------------


def _bad(case, args):
    q, k, v, seq_lens, table = (t.clone() for t in args)
    cap = table.shape[1] * k.shape[1]
    if case == "page -1":
        table[1, 0] = -1
    elif case == "page past the pool":
        table[1, (int(seq_lens[1]) - 1) // k.shape[1]] = k.shape[0]
    elif case == "page far past":
        table[1, 1] = 2**30
    elif case == "length 0":
        seq_lens[1] = 0
    elif case == "length -5":
        seq_lens[1] = -5
    elif case == "length past the table":
        seq_lens[1] = cap + 1
    return q, k, v, seq_lens, table


@pytest.mark.parametrize("splits", [1, 3], ids=["one kernel", "split and combine"])
@pytest.mark.parametrize("case", ["page -1", "page past the pool", "page far past", "length 0", "length -5",
                                  "length past the table"])
def test_bad_values_flag_their_row_and_read_nothing_outside(case, splits, sms):
    """Sequence 1 gets a NaN row (every head, every d); sequences 0 and 2 are right; the tracer sees no
    load or store outside a tensor (the interpreter would read real host memory there)."""
    sms(4)
    good = _inputs([40, 75, 9], ps=16, Hq=4, Hkv=2, D=64)
    args = _bad(case, good)
    with traffic.capture(stop_on_oob=True):
        out = (dat.decode_attention(*args) if splits == 1 else
               dat.tuned_decode_attention(*args, config={"BLOCK_N": 16, "splits": splits}))
    assert torch.isnan(out[1]).all()
    keep = [0, 2]
    q, k, v, seq_lens, table = args
    want = model(q[keep], k, v, seq_lens[keep], table[keep])
    torch.testing.assert_close(out[keep].double().cpu(), want, atol=TOL[torch.float32], rtol=TOL[torch.float32])


def test_page_outside_the_pool_past_the_length_is_ignored(sms):
    """Entries past a sequence's pages are never read: junk there flags nothing."""
    sms(4)
    q, k, v, seq_lens, table = _inputs([40, 75], ps=16)
    table[0, 3:] = -7
    _close(dat.decode_attention(q, k, v, seq_lens, table), (q, k, v, seq_lens, table))


@pytest.mark.parametrize("what, shapes, words", [
    ("D 96", dict(D=96), "head dimension"),
    ("D 32", dict(D=32), "head dimension"),
])
def test_unsupported_shapes_raise(what, shapes, words):
    args = _inputs([20, 9], **shapes)
    with pytest.raises(ValueError, match=words):
        dat.decode_attention(*args)


def test_page_size_not_a_power_of_two_raises():
    q, k, v, seq_lens, table = _inputs([20, 9], ps=16)
    with pytest.raises(ValueError, match="power of two"):
        dat.decode_attention(q, k[:, :12], v[:, :12], seq_lens, table)


@pytest.mark.skipif(mode.INTERPRET, reason="CUDA graphs need a GPU")
def test_graph_capture_replays_right():
    args = _inputs([300, 4000], ps=16, Hq=32, Hkv=8, D=128, dtype=torch.float16)
    dat.decode_attention(*args)  # compile and keep the entry outside the capture
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = dat.decode_attention(*args)
    g.replay()
    torch.cuda.synchronize()
    _close(out, args)
