"""Property-based tests (Hypothesis) over each API's argument space: shapes, strides, dtypes, configs.

Every call either returns the right answer (against torch) or raises ValueError/TypeError whose
message names an argument that is wrong: never another exception, never a silent wrong result.
Each strategy draws an argument together with whether it is valid, so the test knows which of the
two outcomes it must see. Sizes stay small for Triton's interpreter; examples are derandomized
(the same on every run, in CI too) and few enough that the whole file takes well under a minute.
"""

import json
import math

import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from solutions import autotune as sol_at
from solutions import flash_attention_backward as fb
from solutions import matmul as mm
from solutions import softmax as sm
from solutions import vector_add as va
from solutions.kernels import (
    attention_forward as fa,  # the full API (impl=, WARP_SPECIALIZE); "simple" runs the lesson file
)
from solutions.kernels import online_softmax_split as osm  # parts= lives in the split step; it re-exports reference
from tkcourse import autotune as at
from tkcourse import bench, mode


def _settings(n):
    return settings(max_examples=n, deadline=None, derandomize=True, database=None, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def valid(*values):
    """Draws ``(value, True)`` from ``values``."""
    return st.sampled_from(values).map(lambda v: (v, True))


def invalid(*values):
    """Draws ``(value, False)`` from ``values``."""
    return st.sampled_from(values).map(lambda v: (v, False))


def _not_pow2(lo, hi):
    return st.integers(lo, hi).filter(lambda v: v < 1 or v & (v - 1)).map(lambda v: (v, False))


JUNK = invalid(2.0, 16.0, "16", None, True, [16], float("nan"))  # wrong types for an int argument


def arg(good, *bad):
    """An argument: from ``good`` five times in six, else from one of the ``bad`` strategies, so that
    most examples run the kernel and every argument is still often wrong on its own."""
    return st.integers(0, 5).flatmap(lambda i: st.one_of(*bad) if i == 0 else good)


def outcome(call, expect_ok: bool, bad_names):
    """Run ``call``; a valid call must return, an invalid one raise ValueError/TypeError naming a bad argument."""
    try:
        out = call()
    except (ValueError, TypeError) as e:
        assert not expect_ok, f"valid arguments raised {type(e).__name__}: {e}"
        assert any(n in str(e) for n in bad_names), f"{type(e).__name__} does not name any of {bad_names}: {e}"
        event("refused")
        return None
    assert expect_ok, f"invalid arguments ({', '.join(bad_names)}) were accepted"
    event("ran")
    return out


def tensor(shape, dtype, seed, strided=False):
    """A seeded normal tensor; ``strided``: a view of every other row (or element) of a larger one."""
    g = torch.Generator().manual_seed(seed)
    if strided:
        big = torch.randn(shape[0] * 2, *shape[1:], generator=g).to(dtype)
        return big[::2].to(mode.DEVICE)
    return torch.randn(*shape, generator=g).to(dtype).to(mode.DEVICE)


DTYPES = st.sampled_from([torch.float32, torch.float16])


# ----- lesson 01 ---------------------------------------------------------------------------------


@_settings(50)
@given(n=st.integers(1, 300), dtype=DTYPES, strided=st.booleans(), seed=st.integers(0, 9),
       block=arg(valid(1, 16, 128, 1024, 1 << 20), _not_pow2(-4, 2000), invalid(1 << 21), JUNK))
def test_add(n, dtype, strided, seed, block):
    x, y = tensor((n,), dtype, seed, strided), tensor((n,), dtype, seed + 1)
    out = outcome(lambda: va.add(x, y, BLOCK=block[0]), block[1], ["BLOCK"])
    if out is not None:
        torch.testing.assert_close(out, x + y, rtol=0, atol=0)


# ----- lesson 02 -----------------------------------------------------------------------------------


@_settings(25)
@given(rows=st.integers(1, 12), cols=st.integers(1, 700), dtype=DTYPES, seed=st.integers(0, 9),
       layout=st.sampled_from(["contiguous", "strided rows", "transposed"]))
def test_softmax(rows, cols, dtype, seed, layout):
    if layout == "transposed":
        x = tensor((cols, rows), dtype, seed).t()  # columns not contiguous: the launcher copies
    else:
        x = tensor((rows, cols), dtype, seed, strided=layout == "strided rows")
    tol = dict(rtol=2e-3, atol=1e-5) if dtype == torch.float16 else dict(rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(sm.softmax(x), sm.reference(x), **tol)


# ----- lesson 03 -----------------------------------------------------------------------------------

BLOCK_16_512 = arg(valid(16, 32), invalid(8, 24, 0, -16, 1024), JUNK)


@st.composite
def matmul_configs(draw):
    if draw(st.booleans()):
        return None, True, []
    values = {"BLOCK_M": draw(BLOCK_16_512), "BLOCK_N": draw(BLOCK_16_512), "BLOCK_K": draw(BLOCK_16_512),
              "GROUP_M": draw(arg(valid(1, 2, 3, 8), invalid(0, -1, 257), JUNK)),
              "num_warps": draw(arg(valid(1, 4, 8), invalid(0, 3, 64), JUNK)),
              "num_stages": draw(arg(valid(1, 2, 3), invalid(0, 9), JUNK))}
    config = {k: v for k, (v, _) in values.items()}
    bad = [f"config['{k}']" for k, (_, ok) in values.items() if not ok]
    shape = draw(st.sampled_from(["whole"] * 8 + ["missing", "extra"]))
    if shape == "missing":
        del config[draw(st.sampled_from(sorted(config)))]
        bad.append("missing")
    elif shape == "extra":
        config["BLOCK_SIZE_M"] = 16
        bad.append("unknown")
    return config, not bad, bad


@_settings(50)
@given(M=st.integers(1, 40), N=st.integers(1, 40), K=st.integers(1, 40), dtype=DTYPES, seed=st.integers(0, 9),
       transposed=st.booleans(), cfg=matmul_configs())
def test_matmul(M, N, K, dtype, seed, transposed, cfg):
    config, ok, bad = cfg
    a = tensor((K, M), dtype, seed).t() if transposed else tensor((M, K), dtype, seed)
    b = tensor((K, N), dtype, seed + 1)
    out = outcome(lambda: mm.matmul(a, b, config=config), ok, bad)
    if out is not None:
        ref = a.double() @ b.double()
        tol = 1e-2 if dtype == torch.float16 else (1e-4 if mode.INTERPRET else 2e-2)
        torch.testing.assert_close(out.double(), ref, atol=tol * math.sqrt(K), rtol=tol)


def test_matmul_rejects_mismatched_inner_dimensions():
    with pytest.raises(ValueError, match="inner dimensions"):
        mm.matmul(tensor((4, 5), torch.float32, 0), tensor((6, 4), torch.float32, 1))


# ----- lesson 04 -----------------------------------------------------------------------------------

INT_OR_JUNK = arg(st.integers(1, 5000).map(lambda v: (v, True)), invalid(0, -7), JUNK)


@st.composite
def autotune_configs(draw):
    configs, ok, bad = [], True, []
    for i in range(draw(st.integers(0, 4))):
        c, fine = {}, True
        for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_stages"):
            v, good = draw(arg(valid(16, 32, 64, 128, 256, 2, 3), invalid(0, -1, 2.5, "64", None)))
            c[k] = v
            fine &= good
        c["GROUP_M"], c["num_warps"] = 8, 4
        if draw(st.integers(0, 9)) == 0:
            del c["BLOCK_K"]
            fine = False
        configs.append(c)
        if not fine:
            ok = False
            bad.append(f"configs[{i}]")
    return configs, ok, bad


@_settings(150)
@given(cfgs=autotune_configs(), M=INT_OR_JUNK, N=INT_OR_JUNK, K=INT_OR_JUNK,
       dtype_bytes=arg(valid(1, 2, 4), invalid(0, 16), JUNK))
def test_autotune_prune(cfgs, M, N, K, dtype_bytes):
    configs, _, bad = cfgs
    args = {"M": M, "N": N, "K": K, "dtype_bytes": dtype_bytes}
    bad = bad + [k for k, (_, good) in args.items() if not good]
    kept = outcome(lambda: sol_at.prune(configs, M[0], N[0], K[0], dtype_bytes=dtype_bytes[0]), not bad, bad)
    if kept is not None:
        assert all(any(c is k for c in configs) for k in kept)  # a subset, in order
        assert [c for c in configs if any(c is k for k in kept)] == kept
        for c in kept:
            assert sol_at.shared_memory_bytes(c, dtype_bytes[0]) <= 227 * 1024


@_settings(100)
@given(n=arg(st.integers(-5, 1 << 40).map(lambda v: (v, True)), JUNK))
def test_next_pow2(n):
    p = outcome(lambda: sol_at.next_pow2(n[0]), n[1], ["n"])
    if p is not None:
        assert p >= max(1, n[0]) and p & (p - 1) == 0 and (p == 1 or p // 2 < n[0])


# ----- lesson 05 -----------------------------------------------------------------------------------


@_settings(40)
@given(rows=st.integers(1, 4), cols=st.integers(1, 400), dtype=DTYPES, seed=st.integers(0, 9), strided=st.booleans(),
       parts=arg(valid(None, 1, 2, 4), _not_pow2(-2, 2000), invalid(2048), JUNK.filter(lambda v: v[0] is not None)),
       block=arg(valid(None, 16, 64, 1024), _not_pow2(-2, 2000), invalid(1 << 17),
                       JUNK.filter(lambda v: v[0] is not None)))
def test_online_softmax(rows, cols, dtype, seed, strided, parts, block):
    x = tensor((rows, cols), dtype, seed, strided)
    bad = [name for name, (_, ok) in (("parts", parts), ("block", block)) if not ok]
    out = outcome(lambda: osm.softmax(x, parts=parts[0], block=block[0]), not bad, bad)
    if out is not None:
        tol = dict(rtol=2e-3, atol=1e-5) if dtype == torch.float16 else dict(rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(out, osm.reference(x), **tol)


# ----- lessons 06 and 07 ------------------------------------------------------------------------------

BLOCK_16_256 = arg(valid(16, 32), invalid(8, 24, 0, 512), JUNK)
SCALES = arg(valid(None, 0.25, 1, -0.5), invalid("0.5", float("nan"), math.inf, True))
CAUSAL = arg(valid(True, False, 0, 1), invalid("no", 2, None))


@st.composite
def attention_configs(draw, name="config"):
    if draw(st.booleans()):
        return None, []
    values = {"BLOCK_M": draw(BLOCK_16_256), "BLOCK_N": draw(BLOCK_16_256)}
    if draw(st.booleans()):
        values["num_warps"] = draw(arg(valid(1, 4), invalid(0, 6), JUNK))
    return {k: v for k, (v, _) in values.items()}, [f"{name}['{k}']" for k, (_, ok) in values.items() if not ok]


@_settings(40)
@given(B=st.integers(1, 2), H=st.integers(1, 2), N=st.integers(1, 40), D=arg(valid(16, 32), invalid(24)),
       dtype=DTYPES, seed=st.integers(0, 9), strided=st.booleans(), causal=CAUSAL, sm_scale=SCALES,
       cfg=attention_configs(), impl=arg(valid("simple", "tuned", "auto"), invalid("fast")))
def test_attention_forward(B, H, N, D, dtype, seed, strided, causal, sm_scale, cfg, impl):
    q, k, v = (tensor((B, H, N, D[0]), dtype, seed + i, strided and i != 1) for i in range(3))
    config, bad = cfg
    args = {"head dimension": D, "causal": causal, "sm_scale": sm_scale, "impl": impl}
    bad = bad + [n for n, (_, ok) in args.items() if not ok]
    got = outcome(lambda: fa.attention_forward(q, k, v, causal=causal[0], sm_scale=sm_scale[0], impl=impl[0],
                                               config=config), not bad, bad)
    if got is not None:
        o, lse = got
        ref_o, ref_lse = fa.reference(q.double(), k.double(), v.double(), bool(causal[0]), sm_scale[0],
                                      return_lse=True)
        tol = 2e-2 if dtype == torch.float16 else (1e-4 if mode.INTERPRET else 5e-3)
        torch.testing.assert_close(o.double(), ref_o, atol=tol, rtol=tol)
        torch.testing.assert_close(lse.double(), ref_lse, atol=tol, rtol=tol)


@_settings(20)
@given(N=st.integers(1, 40), seed=st.integers(0, 9), causal=CAUSAL, sm_scale=SCALES,
       dkdv=attention_configs("dkdv_config"), dq=attention_configs("dq_config"))
def test_attention_backward(N, seed, causal, sm_scale, dkdv, dq):
    q, k, v, do = (tensor((1, 2, N, 16), torch.float32, seed + i) for i in range(4))
    (dkdv_config, bad_dkdv), (dq_config, bad_dq) = dkdv, dq
    bad = bad_dkdv + bad_dq + [n for n, (_, ok) in (("causal", causal), ("sm_scale", sm_scale)) if not ok]
    if not bad and causal[0]:  # causal: a program's tile must be whole steps of its loop
        if dkdv_config and dkdv_config["BLOCK_N"] % dkdv_config["BLOCK_M"]:
            bad.append("dkdv_config['BLOCK_N']")
        if dq_config and dq_config["BLOCK_M"] % dq_config["BLOCK_N"]:
            bad.append("dq_config['BLOCK_M']")
    c = bool(causal[0]) if causal[1] else False
    o, lse = fa.attention_forward(q, k, v, causal=c, sm_scale=sm_scale[0] if sm_scale[1] else None)
    got = outcome(lambda: fb.attention_backward(do, q, k, v, o, lse, causal[0], sm_scale[0], dkdv_config=dkdv_config,
                                                dq_config=dq_config), not bad, bad)
    if got is not None:
        ref = fb.reference_backward(*(t.double() for t in (do, q, k, v)), causal=c, sm_scale=sm_scale[0])
        tol = 1e-4 if mode.INTERPRET else 1e-2
        for g, r in zip(got, ref):
            torch.testing.assert_close(g.double(), r, atol=tol, rtol=tol)


# ----- loaders of recorded data: any damage is their own format error ---------------------------------


@_settings(150)
@given(cut=st.integers(0, 2000), junk=st.binary(max_size=8), at_=st.integers(0, 2000))
def test_bench_loader_never_crashes(tmp_path_factory, cut, junk, at_):
    text = bench.RECORDED.read_bytes()[:2000]
    text = text[:text.rindex(b"\n") + 1]  # the header and whole rows
    damaged = text[:at_] + junk + text[at_:]
    damaged = damaged[:cut] if cut < len(damaged) else damaged
    path = tmp_path_factory.mktemp("bench") / "t.csv"
    path.write_bytes(damaged)
    try:
        rows = bench.load_records(path)
    except bench.RecordsFormatError as e:
        assert str(path) in str(e)
        event("refused")
        return
    event("loaded")
    for r in rows:  # what loads is typed and in range
        assert all(isinstance(r[k], float) and math.isfinite(r[k]) and r[k] >= 0 for k in ("median", "p20", "p80", "ms"))
        assert all(isinstance(r[k], int) and r[k] >= 0 for k in ("bytes", "flops"))


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-10, 10**6) | st.floats(allow_nan=False)
                           | st.text(max_size=5), lambda kids: st.lists(kids, max_size=3)
                           | st.dictionaries(st.text(max_size=5), kids, max_size=3), max_leaves=6)


@pytest.fixture(scope="module")
def recorded_sweep():
    return json.loads(sorted(at.SWEEPS.glob("*.json"))[0].read_text())


@_settings(150)
@given(data=st.data())
def test_sweep_loader_never_crashes(tmp_path_factory, recorded_sweep, data):
    d = json.loads(json.dumps(recorded_sweep))
    d["results"] = d["results"][:4]
    for _ in range(data.draw(st.integers(1, 3))):  # replace or drop a field, at the top or in an entry
        entries = d.get("results") if isinstance(d.get("results"), list) and d["results"] else None
        target = d if entries is None or data.draw(st.booleans()) else data.draw(st.sampled_from(entries))
        if not isinstance(target, dict) or not target:
            continue
        key = data.draw(st.sampled_from(sorted(target)))
        if data.draw(st.booleans()):
            del target[key]
        else:
            target[key] = data.draw(JSON_VALUES)
    path = tmp_path_factory.mktemp("sweep") / "s.json"
    path.write_text(json.dumps(d))
    try:
        s = at.load_sweep(path)
    except at.SweepFormatError as e:
        assert str(path) in str(e)
        event("refused")
        return
    event("loaded")
    s.table()  # what loads can be shown
    assert at.load_sweep(s.save(path)).to_dict() == s.to_dict()
