"""Memory traffic: the tracer's byte counts equal counts made by hand, bad accesses are reported (not run),
the L2 model reproduces a case worked by hand, and every figure is built headless with the right content."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import matplotlib
import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from solutions.vector_add import add, add_kernel
from tkcourse import traffic
from tkcourse.plots import roofline as roof_plots
from tkcourse.plots import traffic as plots

matplotlib.use("Agg")
ROOT = Path(__file__).resolve().parent.parent
cdiv = triton.cdiv


# ----- small kernels written here (the lessons' own are tested in their files) ---------------------------


@triton.jit
def _softmax_rows(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr, PASSES: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=-float("inf"))
    m = tl.max(x, axis=0)
    if PASSES == 2:  # a wasteful version that reads the row again
        x = tl.load(x_ptr + row * stride + cols, mask=mask, other=-float("inf"))
    e = tl.exp(x - m)
    tl.store(out_ptr + row * stride + cols, e / tl.sum(e, axis=0), mask=mask)


@triton.jit
def _row_max(x_ptr, m_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))
    tl.store(m_ptr + row, tl.max(x, axis=0))


@triton.jit
def _normalize(x_ptr, m_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))
    e = tl.exp(x - tl.load(m_ptr + row))
    tl.store(out_ptr + row * n_cols + cols, e / tl.sum(e, axis=0), mask=cols < n_cols)


@triton.jit
def _matmul(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
            BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_m, num_pid_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    num_pid_in_group = GROUP_M * num_pid_n
    first_pid_m = (pid // num_pid_in_group) * GROUP_M
    group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)  # not min(): 3.6's interpreter refuses it
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    rm, rn, rk = pid_m * BM + tl.arange(0, BM), pid_n * BN + tl.arange(0, BN), tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        kk = k * BK + rk
        a = tl.load(a_ptr + rm[:, None] * sam + kk[None, :] * sak, mask=(rm[:, None] < M) & (kk[None, :] < K),
                    other=0.0)
        b = tl.load(b_ptr + kk[:, None] * sbk + rn[None, :] * sbn, mask=(kk[:, None] < K) & (rn[None, :] < N),
                    other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def _unmasked_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr, SHIFT: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)  # no mask: the last program runs off the end
    x = tl.load(x_ptr + offsets + SHIFT)
    tl.store(out_ptr + offsets, x + tl.load(y_ptr + offsets))


@triton.jit
def _desc_scale(x_ptr, y_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    pm, pn = tl.program_id(0), tl.program_id(1)
    xd = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    yd = tl.make_tensor_descriptor(y_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    yd.store([pm * BM, pn * BN], xd.load([pm * BM, pn * BN]) * 2)


def trace_matmul(M, N, K, B=16, GROUP_M=1):
    a, b, c = torch.randn(M, K), torch.randn(K, N), torch.empty(M, N)
    t = traffic.trace(_matmul, (cdiv(M, B) * cdiv(N, B),), a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride(),
                      BM=B, BN=B, BK=B, GROUP_M=GROUP_M)
    return t, a, b, c


def trace_add(n, BLOCK=256, dtype=torch.float32):
    x, y = torch.randn(n, dtype=dtype), torch.randn(n, dtype=dtype)
    out = torch.empty_like(x)
    return traffic.trace(add_kernel, (cdiv(n, BLOCK),), x, y, out, n, BLOCK=BLOCK), x, y, out


# ----- counted bytes -----------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 17, 1000, 1024])
def test_vector_add_moves_12_bytes_an_element(n):
    t, x, y, out = trace_add(n)
    torch.testing.assert_close(out, x + y)  # the traced launch is the launch
    s = t.summary()
    assert [r["tensor"] for r in s.rows[:3]] == ["x", "y", "out"]
    assert (s["x"]["read"], s["y"]["read"], s["out"]["written"]) == (4 * n, 4 * n, 4 * n)
    assert (s["x"]["written"], s["out"]["read"]) == (0, 0)
    assert t.total_bytes == t.minimum_bytes == 12 * n
    assert s["x"]["reread"] == 1.0 and not t.out_of_bounds
    assert t.grid == (cdiv(n, 256), 1, 1)
    # each element belongs to program offset // BLOCK
    np.testing.assert_array_equal(t.owner_map("x"), np.arange(n) // 256)
    np.testing.assert_array_equal(t.program_elements(0, "out", "store"), np.arange(min(n, 256)))
    assert "total" in str(s) and "= 1 x the minimum" in s.notes[0]


def test_a_launch_keeps_its_scalar_arguments():
    """What a launcher passed, by name: ints and constexprs (tensors are not scalars); a name not passed reads as
    the default given."""
    t, *_ = trace_add(1000)
    launch = t.launches[0]
    assert launch.arg("n") == 1000 and launch.arg("BLOCK") == 256 and launch.arg("x_ptr") is None
    assert launch.arg("nosuch", "none") == "none"
    assert traffic.combine([t, t]).launches[1].arg("BLOCK") == 256


def test_vector_add_fp16_is_6_bytes_an_element():
    t, *_ = trace_add(300, BLOCK=128, dtype=torch.float16)
    assert (t.read_bytes, t.written_bytes) == (2 * 2 * 300, 2 * 300)


@pytest.mark.parametrize("M, N", [(1, 1), (5, 17), (33, 100)])
def test_row_softmax_bytes(M, N):
    x, out = torch.randn(M, N), torch.empty(M, N)
    BLOCK = triton.next_power_of_2(N)
    one = traffic.trace(_softmax_rows, (M,), x, out, N, x.stride(0), BLOCK=BLOCK, PASSES=1)
    torch.testing.assert_close(out, torch.softmax(x, dim=1))
    assert (one.read_bytes, one.written_bytes, one.minimum_bytes) == (4 * M * N, 4 * M * N, 8 * M * N)
    two = traffic.trace(_softmax_rows, (M,), x, out, N, x.stride(0), BLOCK=BLOCK, PASSES=2)
    assert two.read_bytes == 2 * 4 * M * N and two.summary()["x"]["reread"] == 2.0
    np.testing.assert_array_equal(two.read_counts("x"), np.full((M, N), 2))


def test_naive_pipeline_pays_for_its_intermediate():
    M, N = 6, 20
    x, m, out = torch.randn(M, N), torch.empty(M), torch.empty(M, N)
    t1 = traffic.trace(_row_max, (M,), x, m, N, BLOCK=32)
    t2 = traffic.trace(_normalize, (M,), x, m, out, N, BLOCK=32)
    torch.testing.assert_close(out, torch.softmax(x, dim=1))
    naive = traffic.combine([t1, t2], name="naive")
    s = naive.summary()
    assert s["x"]["read"] == 2 * 4 * M * N and s["m"]["role"] == "intermediate"
    assert (s["m"]["written"], s["m"]["read"], s["m"]["min_read"] + s["m"]["min_written"]) == (4 * M, 4 * M, 0)
    assert naive.minimum_bytes == 2 * 4 * M * N  # read x once, write out once: the fused kernel's traffic
    assert naive.total_bytes == 3 * 4 * M * N + 2 * 4 * M
    assert len(naive.launches) == 2 and naive.num_programs == 2 * M


@pytest.mark.parametrize("M, N, K", [(16, 16, 16), (50, 40, 70), (33, 17, 9)])
def test_tiled_matmul_bytes_include_partial_tiles(M, N, K):
    t, a, b, c = trace_matmul(M, N, K)
    torch.testing.assert_close(c, a @ b, atol=1e-3, rtol=1e-3)
    s = t.summary()
    # every program reads its A row-panel (BM x K) and B column-panel (K x BN); masked lanes excluded
    assert s["a"]["read"] == 4 * M * K * cdiv(N, 16)
    assert s["b"]["read"] == 4 * K * N * cdiv(M, 16)
    assert s["c"]["written"] == 4 * M * N and s["c"]["read"] == 0
    assert s["a"]["reread"] == cdiv(N, 16) and s["b"]["reread"] == cdiv(M, 16)
    assert t.minimum_bytes == 4 * (M * K + K * N + M * N)
    assert not t.out_of_bounds


def test_strided_tensor_is_mapped_to_its_own_elements():
    M, N, K = 50, 40, 70
    a, b, c = torch.randn(K, M).t(), torch.randn(K, N), torch.empty(M, N)  # A transposed: strides (1, M)
    t = traffic.trace(_matmul, (cdiv(M, 16) * cdiv(N, 16),), a, b, c, M, N, K, *a.stride(), *b.stride(),
                      *c.stride(), BM=16, BN=16, BK=16, GROUP_M=1)
    torch.testing.assert_close(c, a @ b, atol=1e-3, rtol=1e-3)
    assert t.tensor("a").stride == (1, M) and t.summary()["a"]["read"] == 4 * M * K * cdiv(N, 16)
    np.testing.assert_array_equal(t.read_counts("a"), np.full((M, K), cdiv(N, 16)))
    np.testing.assert_array_equal(t.owner_map("a")[:, 0], np.arange(M) // 16 * cdiv(N, 16))  # row tile's first pid


def test_matmul_tile_order_matches_program_order():
    """The L2 model's program order is the kernel's own: the traced A/B tile loads, in launch order."""
    M, N, K, B, G = 64, 48, 32, 16, 2
    t, *_ = trace_matmul(M, N, K, B, GROUP_M=G)
    seen = []
    for acc in t.accesses:
        name = t.tensors[acc.tensor].name
        if acc.kind == "load":
            rows, cols = np.divmod(t.tensor(name).linear_index(acc.offsets), t.tensor(name).shape[1])
            seen.append((name, rows.min() // B, cols.min() // B))
    keys, _ = traffic.matmul_tile_loads(M, N, K, B, B, B, G, 4, concurrent=1)
    mt, kt, nt = M // B, K // B, N // B
    expect = [("a", k // kt, k % kt) if k < mt * kt else ("b", (k - mt * kt) // nt, (k - mt * kt) % nt)
              for k in keys.tolist()]
    assert seen == expect


def test_tensor_descriptor_loads_and_stores_are_counted():
    M, N = 20, 36  # partial tiles in both dimensions
    x, y = torch.randn(M, N), torch.zeros(M, N)
    t = traffic.trace(_desc_scale, (cdiv(M, 16), cdiv(N, 16)), x, y, M, N, BM=16, BN=16)
    torch.testing.assert_close(y, 2 * x)
    assert (t.read_bytes, t.written_bytes) == (4 * M * N, 4 * M * N) and not t.out_of_bounds
    assert t.owner_map("y", "store")[17, 33] == 1 + 2 * 2  # program (1, 2), x fastest


def test_capture_traces_a_launcher():  # on a GPU too: the launch is replayed in the interpreter on CPU copies
    x, y = torch.randn(3000, device=traffic.mode.DEVICE), torch.randn(3000, device=traffic.mode.DEVICE)
    with traffic.capture() as traces:
        out = add(x, y)
    torch.testing.assert_close(out, x + y)
    assert len(traces) == 1 and traces[0].total_bytes == 12 * 3000


def test_autotuned_kernel_uses_a_config():
    tuned = triton.autotune([triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})], key=["n"])(add_kernel)
    x, y, out = torch.randn(200), torch.randn(200), torch.empty(200)
    t = traffic.trace(tuned, lambda meta: (cdiv(200, meta["BLOCK"]),), x, y, out, 200)
    assert t.grid == (4, 1, 1) and t.total_bytes == 12 * 200


# ----- out of bounds: reported, never run -------------------------------------------------------------------


def test_out_of_bounds_is_reported_with_program_and_offset():
    n, BLOCK = 1000, 256
    x, y, out = torch.randn(n), torch.randn(n), torch.zeros(n)
    t = traffic.trace(_unmasked_add, (cdiv(n, BLOCK),), x, y, out, n, BLOCK=BLOCK, SHIFT=0)
    bad = {(o.kind, o.tensor): o for o in t.out_of_bounds}
    assert set(bad) == {("load", "x"), ("load", "y"), ("store", "out")}
    for o in bad.values():
        assert o.program == (3, 0, 0) and o.offset == 1000
        np.testing.assert_array_equal(o.offsets, np.arange(1000, 1024))
    assert "program (3, 0, 0)" in str(bad["load", "x"]) and "past the end of x" in str(bad["load", "x"])
    torch.testing.assert_close(out, x + y)  # the in-bounds lanes ran
    assert t.read_bytes == 2 * 4 * n  # the masked-off lanes moved nothing
    with pytest.raises(IndexError, match="program"):
        t.check()
    assert "OUT-OF-BOUNDS" in repr(t) and "out-of-bounds" in "\n".join(t.summary().notes)


@pytest.mark.parametrize("shift, offset", [(-1, -1), (10**9, 10**9)])
def test_out_of_bounds_before_start_or_far_away(shift, offset):
    n = 64
    x, y, out = torch.randn(n), torch.randn(n), torch.zeros(n)
    t = traffic.trace(_unmasked_add, (1,), x, y, out, n, BLOCK=64, SHIFT=shift)
    (o,) = [o for o in t.out_of_bounds if o.kind == "load"]
    assert o.program == (0, 0, 0) and o.offset == offset and o.tensor == "x"
    assert ("before the start" if shift < 0 else "past the end") in str(o)


@triton.jit
def _raw_address_load(addr, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    raw = addr.to(tl.pointer_type(tl.float32))  # an integer made into a pointer: no argument's address
    tl.store(out_ptr + offsets, tl.load(raw + offsets))


@pytest.mark.skipif(not traffic.mode.INTERPRET, reason="an integer address is a CPU address only in the interpreter")
def test_raw_address_is_reported_in_no_argument():
    """A load from an address that no pointer argument led to is not "past the end of out"."""
    elsewhere, out = torch.randn(16), torch.zeros(16)
    t = traffic.trace(_raw_address_load, (1,), elsewhere.data_ptr(), out, BLOCK=16)
    (o,) = t.out_of_bounds
    assert o.kind == "load" and not o.derived and o.where == "in no argument"
    assert "lie in no tensor argument" in str(o) and "past the end" not in str(o)
    assert bool((out == 0).all())  # masked off: nothing was read from that address
    with pytest.raises(traffic.OutOfBoundsError, match="no tensor argument"):
        with traffic.capture(stop_on_oob=True):
            _raw_address_load[(1,)](elsewhere.data_ptr(), out, BLOCK=16)


@triton.jit
def _raw_only(addr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    raw = addr.to(tl.pointer_type(tl.float32))
    tl.store(raw + offsets, tl.full((BLOCK,), 1.0, tl.float32))


@pytest.mark.skipif(not traffic.mode.INTERPRET, reason="an integer address is a CPU address only in the interpreter")
def test_raw_store_with_no_tensor_argument_is_reported_and_not_performed():
    victim = torch.zeros(16)
    t = traffic.trace(_raw_only, (1,), victim.data_ptr(), BLOCK=16)
    (o,) = t.out_of_bounds
    assert o.kind == "store" and not o.derived and "no tensor argument at all" in str(o)
    assert not victim.any()


def test_capture_stop_on_oob_raises_before_the_next_launch():
    n = 100
    x, y, out = torch.randn(n), torch.randn(n), torch.zeros(n)
    with pytest.raises(traffic.OutOfBoundsError) as info:
        with traffic.capture(stop_on_oob=True) as traces:
            _unmasked_add[(1,)](x, y, out, n, BLOCK=128, SHIFT=0)
            _unmasked_add[(1,)](x, y, out, n, BLOCK=64, SHIFT=0)  # never reached
    assert len(traces) == 1 and info.value.trace is traces[0]
    assert {o.tensor for o in info.value.out_of_bounds} == {"x", "y", "out"}
    assert all(o.derived and o.where == "past the end" for o in info.value.out_of_bounds)


def test_compiled_mode_kernels_are_traced_in_the_interpreter(tmp_path):
    """What a GPU machine does: a JITFunction (and its @jit helpers, reached through its globals or passed to it as
    a tl.constexpr argument) re-run in the interpreter on CPU copies."""
    code = textwrap.dedent("""
        import tkcourse.mode, torch, triton, triton.language as tl
        from tkcourse import traffic
        assert not tkcourse.mode.INTERPRET
        @triton.jit
        def twice(v):
            return v * 2
        @triton.jit
        def k(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
            off = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(o_ptr + off, twice(tl.load(x_ptr + off, mask=off < n)), mask=off < n)
        @triton.jit
        def row_softmax(x_ptr, o_ptr, n, BLOCK: tl.constexpr):  # tl.max, tl.sum: triton's own @jit functions
            off = tl.arange(0, BLOCK)
            x = tl.load(x_ptr + off, mask=off < n, other=-float("inf"))
            e = tl.exp(x - tl.max(x, axis=0))
            tl.store(o_ptr + off, e / tl.sum(e, axis=0), mask=off < n)
        @triton.jit
        def apply(x_ptr, o_ptr, n, FN: tl.constexpr, BLOCK: tl.constexpr):  # a helper passed as an argument
            off = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(o_ptr + off, FN(tl.load(x_ptr + off, mask=off < n)), mask=off < n)
        @triton.jit
        def twice_again(v):  # reaches twice through its globals
            return twice(v)
        assert type(k).__name__ == "JITFunction"
        x, o = torch.randn(100), torch.zeros(100)
        t = traffic.trace(k, (4,), x, o, 100, BLOCK=32)
        assert (t.read_bytes, t.written_bytes) == (400, 400), t
        t = traffic.trace(apply, (4,), x, o, 100, FN=twice_again, BLOCK=32)
        assert (t.read_bytes, t.written_bytes) == (400, 400), t
        assert type(twice_again).__name__ == "JITFunction"
        core_before = dict(vars(tl.core))
        tensor_before = dict(vars(tl.core.tensor))
        t = traffic.trace(row_softmax, (1,), x, o, 100, BLOCK=128)
        assert (t.read_bytes, t.written_bytes) == (400, 400), t
        assert type(tl.max).__name__ == "JITFunction"  # restored
        # the interpreter's patches of triton.language do not outlive the trace (a GPU compiles next)
        leaked = [k for k, v in vars(tl.core).items() if core_before.get(k) is not v and not hasattr(v, "__path__")
                  and type(v).__name__ != "module"]
        leaked += [k for k, v in vars(tl.core.tensor).items() if tensor_before.get(k) is not v]
        assert not leaked, leaked
        assert type(k).__name__ == "JITFunction" and type(twice).__name__ == "JITFunction"
        print("OK")
    """)
    script = tmp_path / "compiled_mode.py"  # @triton.jit needs its source in a file
    script.write_text(code)
    env = {**os.environ, "TRITON_INTERPRET": "0", "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr[-2000:]


# ----- torch eager -------------------------------------------------------------------------------------


def test_eager_counter_sums_each_ops_bytes():
    M, N = 8, 100
    x = torch.randn(M, N)
    with traffic.count_eager() as c:
        xt = x.t()  # a view: free
        m = xt.t().amax(dim=1, keepdim=True)
        e = (x - m).exp()
        out = e / e.sum(dim=1, keepdim=True)
    torch.testing.assert_close(out, torch.softmax(x, dim=1))
    assert [o["op"] for o in c.ops] == ["amax", "sub", "exp", "sum", "div"]
    full, row = 4 * M * N, 4 * M
    assert c.read_bytes == 5 * full + 2 * row and c.written_bytes == 3 * full + 2 * row
    assert c.minimum_bytes == 2 * full
    assert "amax" in str(c.summary())


# ----- L2 model ---------------------------------------------------------------------------------------


def test_program_order_is_tutorial_grouping():
    assert traffic.program_order(2, 3, 1) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    assert traffic.program_order(4, 4, 2)[:8] == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2), (0, 3), (1, 3)]
    assert traffic.program_order(3, 2, 2) == [(0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (2, 1)]  # short last group
    assert sorted(traffic.program_order(5, 7, 3)) == [(m, n) for m in range(5) for n in range(7)]


def test_l2_lru_worked_by_hand():
    """4 x 4 tiles of C, one K step, 1-byte tiles, a cache of 3 tiles.

    Row-major: each row of C misses its A tile once and all four B tiles (the B tiles of the previous row
    were evicted): 5 misses and 3 hits per row, 20 misses in all. GROUP_M = 2 walks two rows column by
    column; the A pair and the current B tile fit: 9 misses and 7 hits per group, 18 misses in all.
    """
    row = traffic.simulate_l2(4, 4, 1, 1, 1, 1, GROUP_M=1, cache_bytes=3, itemsize=1)
    grouped = traffic.simulate_l2(4, 4, 1, 1, 1, 1, GROUP_M=2, cache_bytes=3, itemsize=1)
    assert (row.hits, row.misses, row.hbm_bytes, row.requested_bytes, row.minimum_bytes) == (12, 20, 20, 32, 8)
    assert (grouped.hits, grouped.misses, grouped.hbm_bytes) == (14, 18, 18)
    assert row.hit_rate == 12 / 32 and grouped.excess == 18 / 8
    # a cache that holds all 8 tiles: every tile read once
    assert traffic.simulate_l2(4, 4, 1, 1, 1, 1, cache_bytes=8, itemsize=1).hbm_bytes == 8
    # explicit loads, tiles of different sizes: A(4) B(2) A(4) -> with 6 bytes the second A hits
    r = traffic.simulate_l2(0, 0, 0, loads=[("A", 4), ("B", 2), ("A", 4)], cache_bytes=6)
    assert (r.hits, r.hbm_bytes) == (1, 6)


def test_partial_tiles_and_waves():
    keys, sizes = traffic.matmul_tile_loads(5, 3, 4, 2, 2, 2, GROUP_M=1, itemsize=1, concurrent=2)
    # 3 x 2 tiles of C, 2 K steps; waves of 2 programs interleave per K step; edge tiles are smaller
    assert keys[:8].tolist() == [0, 6, 0, 7, 1, 8, 1, 9]
    assert sizes[:4].tolist() == [4, 4, 4, 2] and sizes[-4:].tolist() == [2, 4, 2, 2]
    # A panels: rows (2, 2, 1) x K=4, once per column of C tiles (2); B panels: K=4 x cols (2, 1), 3 times
    assert int(sizes.sum()) == 5 * 4 * 2 + 4 * 3 * 3 == traffic.simulate_l2(5, 3, 4, 2, 2, 2, itemsize=1).requested_bytes


# ----- figures -----------------------------------------------------------------------------------------


def test_bytes_bar_stacks_tensors_against_the_minimum():
    M, N = 6, 20
    x, m, out = torch.randn(M, N), torch.empty(M), torch.empty(M, N)
    naive = [traffic.trace(_row_max, (M,), x, m, N, BLOCK=32), traffic.trace(_normalize, (M,), x, m, out, N, BLOCK=32)]
    fused = traffic.trace(_softmax_rows, (M,), x, out, N, N, BLOCK=32, PASSES=1)
    with traffic.count_eager() as eager:
        torch.softmax(x, dim=1)
    fig = plots.bytes_bar({"naive (2 kernels)": naive, "fused": fused, "torch": eager})
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["naive (2 kernels)", "fused", "torch", "minimum"]
    totals = fig.bytes_bar_totals
    assert totals == {"naive (2 kernels)": 3 * 4 * M * N + 8 * M, "fused": 8 * M * N, "torch": 8 * M * N,
                      "minimum": 8 * M * N}
    heights = {}
    for p in ax.patches:  # stacked segments: their heights sum to each bar's total
        x0 = round(p.get_x() + p.get_width() / 2)
        heights[x0] = heights.get(x0, 0) + p.get_height()
    scale = 1e3  # kB
    assert [round(heights[i] * scale) for i in range(4)] == list(totals.values())
    labels = ax.get_legend_handles_labels()[1]
    assert {"x read", "m written", "m read", "out written"} <= set(labels)
    assert "kB" in ax.get_ylabel() and any("1.6x min" in t.get_text() for t in ax.texts)


def test_access_map_strip_grid_and_highlight():
    t, *_ = trace_add(1000)
    fig = plots.access_map(t)
    strip = fig.access_images["x", "load"]
    assert strip.shape == (1, 1000)
    np.testing.assert_array_equal(strip[0], np.arange(1000) // 256)
    assert (fig.access_images["x", "store"] == -1).all()
    assert any("x loads" in a.get_title() for a in fig.axes)
    one = plots.access_map(t, tensors="out", program=2)  # out is only stored: its one panel is the store
    assert len(one.axes) == 1 and "program 2 touches 256 elements" in one.axes[0].get_title()
    mm, *_ = trace_matmul(50, 40, 70)
    fig = plots.access_map(mm, tensors=["a", "c"], color="count")
    np.testing.assert_array_equal(fig.access_images["a", "load"], np.full((50, 70), 3))
    grid = plots.access_map(mm, tensors="c").access_images["c", "store"]
    assert grid.shape == (50, 40) and grid[0, 0] == 0 and grid[49, 39] == 11 and grid[0, 16] == 1


def test_access_map_explorer_redraws_per_program():
    t, *_ = trace_add(1000)
    box = plots.access_map_explorer(t, tensors=["x"])
    assert box.slider.max == 3 and box.image.value[:4] == b"\x89PNG"
    first = box.image.value
    box.slider.value = 3
    assert box.image.value != first and "program 3 of 4" in box.info.value and "928 B" in box.info.value


def test_program_order_map_numbers_tiles_in_launch_order():
    fig = plots.program_order_map(4, 4, group_sizes=(1, 2), wave=4)
    left, right = fig.axes[:2]
    cell = lambda ax, i, j: next(t.get_text() for t in ax.texts if t.get_position() == (j, i))
    assert cell(left, 1, 0) == "4" and cell(right, 1, 0) == "1" and cell(right, 0, 1) == "2"
    assert "2 A row-tiles + 2 B column-tiles" in right.get_xlabel()
    assert "1 A row-tiles + 4 B column-tiles" in left.get_xlabel()


def test_l2_reuse_plot_matches_the_simulation():
    fig = plots.l2_reuse(512, 512, 512, 64, 64, 64, group_sizes=(1, 2, 4), cache_sizes=(64 << 10, 256 << 10),
                         concurrent=8)
    traffic_ax, hits_ax = fig.axes[:2]
    assert len(traffic_ax.get_lines()) == 3  # two cache sizes and the minimum line
    for line, cache in zip(traffic_ax.get_lines(), (64 << 10, 256 << 10)):
        expect = [traffic.simulate_l2(512, 512, 512, 64, 64, 64, g, cache, 2, 8).excess for g in (1, 2, 4)]
        np.testing.assert_allclose(line.get_ydata(), expect)
    assert "GROUP_M" in hits_ax.get_xlabel() and "hit" in hits_ax.get_title()


RECORDS = [
    dict(kernel="copy", provider="torch", shape="536870912", dtype="float32", metric="GB/s", median=4000.0,
         bytes=1 << 32, flops=0, gpu="NVIDIA H200", date="2026-01-01", triton="3.6.0", torch="2.11"),
    dict(kernel="matmul", provider="cublas", shape="4096x4096x4096", dtype="float16", metric="TFLOP/s",
         median=650.0, bytes=0, flops=2 * 4096**3, gpu="NVIDIA H200"),
    dict(kernel="matmul", provider="triton", shape="4096x4096x4096", dtype="float16", metric="TFLOP/s",
         median=520.0, bytes=0, flops=2 * 4096**3, gpu="NVIDIA H200"),
    dict(kernel="vector_add", provider="triton", shape="1048576", dtype="float32", metric="GB/s", median=2000.0,
         bytes=12 << 20, flops=0, gpu="NVIDIA H200"),
    dict(kernel="vector_add", provider="triton", shape="67108864", dtype="float32", metric="GB/s", median=3600.0,
         bytes=12 << 26, flops=0, gpu="NVIDIA H200"),
]


def test_roofline_ceilings_and_points():  # the records' ceilings, also on a GPU (where the default measures live)
    fig = roof_plots.roofline(RECORDS, ceilings=roof_plots.device_ceilings(RECORDS, measure=False))
    c = fig.roofline_ceilings
    assert (c["copy_GBps"], c["matmul_TFLOPs"]) == (4000.0, 650.0) and "recorded on NVIDIA H200" in c["source"]
    ax = fig.axes[0]
    x, y = ax.get_lines()[0].get_data()
    np.testing.assert_allclose(y, np.minimum(4000e9 * x, 650e12) / 1e12)
    pts = {(p["kernel"], p["provider"]): p for p in fig.roofline_points}
    assert set(pts) == {("matmul", "cublas"), ("matmul", "triton"), ("vector_add", "triton")}
    mm = pts["matmul", "triton"]
    assert mm["intensity"] == pytest.approx(2 * 4096**3 / (3 * 4096 * 4096 * 2)) and mm["tflops"] == 520.0
    va = pts["vector_add", "triton"]  # the largest size only; 1 FLOP per 12 bytes
    assert va["intensity"] == pytest.approx(1 / 12) and va["tflops"] == pytest.approx(3600e9 / 12 / 1e12)
    texts = " ".join(t.get_text() for t in ax.texts)
    assert "matmul\ncuBLAS 100%; course, fastest path 80%" in texts and "vector_add\ncourse, fastest path 90%" in texts
    assert "ridge: 16" in texts  # providers in plain words (tkcourse.bench.summary.PROVIDERS)


def test_roofline_falls_back_to_recorded_constants():
    c = roof_plots.device_ceilings([], measure=False)
    assert (c["copy_GBps"], c["matmul_TFLOPs"]) == (4250.0, 700.0) and "constants" in c["source"]
    fig = roof_plots.roofline([], ceilings=c)
    assert fig.roofline_points == [] and "4.25 TB/s" in " ".join(t.get_text() for t in fig.axes[0].texts)
