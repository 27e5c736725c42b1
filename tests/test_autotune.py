"""Lesson 04: the sweep runner, the sweep file schema, the heatmaps and the pruning reference."""

import json
import math
from pathlib import Path

import matplotlib.pyplot as plt
import pytest
import torch
import triton
import triton.language as tl
from helpers import assert_grader_catches

from solutions import autotune as sol
from tkcourse import autotune as at
from tkcourse import mode
from tkcourse.plots import heatmap as hm

SWEEP_FILES = sorted(at.SWEEPS.glob("*.json")) if at.SWEEPS.exists() else []


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


# ----- a small kernel of our own (solutions/matmul.py is not needed here) --------------------


@triton.jit
def _tiny_matmul(a_ptr, b_ptr, c_ptr, M, N, K,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def tiny_matmul(a, b, config):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty(M, N, device=a.device, dtype=torch.float32)
    grid = (triton.cdiv(M, config["BLOCK_M"]), triton.cdiv(N, config["BLOCK_N"]))
    _tiny_matmul[grid](a, b, c, M, N, K, BLOCK_M=config["BLOCK_M"], BLOCK_N=config["BLOCK_N"],
                       BLOCK_K=config["BLOCK_K"], num_warps=config["num_warps"], num_stages=config["num_stages"])
    return c


# ----- synthetic sweeps -----------------------------------------------------------------------


def synthetic(shape="64x64x64", skip=(), fail=(), rate=None):
    """A sweep over BM {16,32} x BN {16,32,64} x BK {16,32} x w {4} x s {2,3}: configs in ``skip`` are
    absent, those in ``fail`` failed; the rest run at ``rate(config)`` TFLOP/s."""
    M, N, K = map(int, shape.split("x"))
    flops = 2 * M * N * K
    rate = rate or (lambda c: c["BLOCK_M"] * 10 + c["BLOCK_N"] + c["BLOCK_K"] / 100 + c["num_stages"])
    results = []
    for c in at.config_space(BLOCK_M=[16, 32], BLOCK_N=[16, 32, 64], BLOCK_K=[16, 32], num_warps=[4],
                             num_stages=[2, 3]):
        if any(all(c[k] == v for k, v in s.items()) for s in skip):
            continue
        if any(all(c[k] == v for k, v in f.items()) for f in fail):
            results.append(at.Result(c, reason="out of shared memory", error="OutOfResources: out of resource"))
            continue
        ms = flops / (rate(c) * 1e9)
        results.append(at.Result(c, ms=ms, p20=ms * 0.95, p80=ms * 1.1, compile_s=0.5))
    return at.Sweep("matmul", shape, "float16", results, flops=flops, bytes=(M * K + K * N + M * N) * 2,
                    gpu="NVIDIA H200", sms=132, triton="3.6.0", torch="2.11.0", date="2025-01-01",
                    command="synthetic", warmup=10, rep=25)


def test_config_space_is_the_cartesian_product():
    space = at.config_space(BLOCK_M=[64, 128], BLOCK_N=(32, 64, 128), num_warps=4)
    assert len(space) == 6 and space[0] == {"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 4}
    assert {(c["BLOCK_M"], c["BLOCK_N"]) for c in space} == {(m, n) for m in (64, 128) for n in (32, 64, 128)}
    with pytest.raises(ValueError, match="no values"):
        at.config_space(BLOCK_M=[])


# ----- the runner -----------------------------------------------------------------------------


def test_runner_survives_failing_configs_and_records_why():
    from triton.runtime.errors import OutOfResources

    configs = at.config_space(BLOCK=[1, 2, 3, 4, 5])

    def make_fn(cfg):
        if cfg["BLOCK"] == 2:
            raise ValueError("BLOCK must be a power of two")

        def fn():
            if cfg["BLOCK"] == 3:
                raise OutOfResources(262144, 232448, "shared memory")
            return cfg["BLOCK"]
        return fn

    def check(out):
        assert out != 4, "planted wrong answer"

    s = at.sweep(make_fn, configs, kernel="toy", shape=(8,), dtype=torch.float32, bytes=1000, rep=1,
                 progress=False, check=check)
    assert [r.ok for r in s.results] == [True, False, False, False, True]
    by = {r.config["BLOCK"]: r for r in s.results}
    assert by[2].reason == "ValueError: BLOCK must be a power of two"
    assert by[3].reason.startswith("out of shared memory") and "262144" in by[3].reason
    assert by[3].error.startswith("OutOfResources")
    assert by[4].reason.startswith("wrong result") and "planted" in by[4].reason
    assert by[1].ms > 0 and by[1].p20 <= by[1].ms <= by[1].p80
    assert s.dtype == "float32" and s.shape == "8" and s.metric == "GB/s"
    assert s.timings_meaningful == (not mode.INTERPRET)
    assert "failed x1: out of shared memory" in s.table()


def test_runner_stops_when_the_gpu_context_is_lost():
    def make_fn(cfg):
        def fn():
            if cfg["a"] == 2:
                raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return fn

    s = at.sweep(make_fn, at.config_space(a=[1, 2, 3, 4]), kernel="k", shape="1", dtype="float32", rep=1,
                 progress=False)
    assert [r.config["a"] for r in s.results] == [1, 2] and not s.results[1].ok
    assert "2 configs not run" in s.notes[0] and "note:" in s.table()


def test_interrupt_keeps_what_was_done():
    def make_fn(cfg):
        if cfg["a"] == 3:
            raise KeyboardInterrupt
        return lambda: None

    s = at.sweep(make_fn, at.config_space(a=[1, 2, 3, 4]), kernel="k", shape="1", dtype="float32", rep=1,
                 progress=False)
    assert len(s.results) == 2 and "interrupted after 2 of 4" in s.notes[0]


def test_runner_refuses_duplicate_configs():
    with pytest.raises(ValueError, match="twice"):
        at.sweep(lambda c: (lambda: None), [{"a": 1}, {"a": 1}], kernel="k", shape="1", dtype="float32",
                 progress=False)


def test_progress_callback_and_lines(capsys):
    seen = []
    at.sweep(lambda c: (lambda: None), at.config_space(a=[1, 2]), kernel="k", shape="1", dtype="float32",
             rep=1, progress=lambda i, n, r: seen.append((i, n, r.ok)))
    assert seen == [(1, 2, True), (2, 2, True)]
    at.sweep(lambda c: (lambda: None), at.config_space(a=[1, 2]), kernel="k", shape="1", dtype="float32",
             rep=1, progress="lines")
    assert "[  2/2] a=2" in capsys.readouterr().out


def test_live_sweep_of_a_tiny_kernel(tmp_path):
    """A handful of real configs at a tiny shape: in the interpreter, timed by the wall clock."""
    M, N, K = 32, 32, 16
    a = torch.randn(M, K, device=mode.DEVICE)
    b = torch.randn(K, N, device=mode.DEVICE)
    ref = a @ b

    def check(out):  # tl.dot uses TF32 for fp32 inputs on a GPU
        tol = 1e-4 if mode.INTERPRET else 2e-2
        torch.testing.assert_close(out, ref, atol=tol, rtol=tol)

    configs = at.config_space(BLOCK_M=[16, 32], BLOCK_N=[16, 32], BLOCK_K=[16], num_warps=[4], num_stages=[2])
    configs.append(dict(BLOCK_M=16, BLOCK_N=24, BLOCK_K=16, num_warps=4, num_stages=2))  # not a power of two
    s = at.sweep(lambda cfg: (lambda: tiny_matmul(a, b, cfg)), configs, kernel="tiny_matmul", shape=(M, N, K),
                 dtype="float32", flops=2 * M * N * K, rep=1, progress=False, check=check,
                 baseline=lambda: a @ b)
    assert len(s.ok) == 4 and len(s.failed) == 1, s.table()
    assert s.failed[0].config["BLOCK_N"] == 24
    if mode.INTERPRET:
        assert "power of 2" in s.failed[0].error
    assert all(r.ms > 0 for r in s.ok) and s.baseline["ms"] > 0
    loaded = at.load_sweep(s.save(tmp_path))
    assert loaded.to_dict() == s.to_dict()
    fig = hm.heatmap(loaded, rows=None, cols=None)
    title = fig._suptitle.get_text()
    if mode.INTERPRET:
        assert not s.timings_meaningful and "meaningless" in title and "CPU" in s.gpu
    else:
        assert s.timings_meaningful and "meaningless" not in title


# ----- files ----------------------------------------------------------------------------------


def test_save_load_round_trip(tmp_path):
    s = synthetic(fail=[{"BLOCK_M": 32, "BLOCK_N": 64}])
    s.baseline = {"provider": "torch", "ms": 0.01, "p20": 0.009, "p80": 0.012}
    s.notes.append("a note")
    path = s.save(tmp_path)
    assert path.name == "matmul_float16_64x64x64.json"
    back = at.load_sweep(path)
    assert back.to_dict() == s.to_dict()
    assert [r.config for r in back.results] == [r.config for r in s.results]
    assert back.best().config == s.best().config
    assert back.failed[0].reason == "out of shared memory"
    for a, b in zip(back.ok, s.ok):
        assert math.isclose(a.ms, b.ms, rel_tol=1e-5)
    assert at.load_sweeps(tmp_path)[0].shape == "64x64x64"
    assert s.save(tmp_path / "named.json").name == "named.json"


def _mutate(d, fn):
    d = json.loads(json.dumps(d))
    fn(d)
    return d


MALFORMED = [
    ("no schema", lambda d: d.pop("schema"), "no 'schema' key"),
    ("other schema", lambda d: d.update(schema="tkcourse.sweep/99"), "tkcourse.sweep/99"),
    ("missing key", lambda d: d.pop("gpu"), "missing key 'gpu'"),
    ("wrong type", lambda d: d.update(flops="lots"), "'flops' must be an integer or null"),
    ("bad shape", lambda d: d.update(shape="64 by 64"), "'shape'"),
    ("metric mismatch", lambda d: d.update(metric="GB/s"), "'metric' is 'GB/s'"),
    ("no results", lambda d: d.update(results=[]), "'results' is empty"),
    ("bad status", lambda d: d["results"][2].update(status="fine"), "results[2]: 'status'"),
    ("negative time", lambda d: d["results"][1].update(ms=-1.0), "results[1]"),
    ("times out of order", lambda d: d["results"][3].update(p20=1e9), "results[3]"),
    ("failed without error", lambda d: d["results"][-1].pop("error"), "'error'"),
    ("keys differ", lambda d: d["results"][4]["config"].pop("num_warps"), "results[4]: config keys"),
    ("duplicate", lambda d: d["results"].append(d["results"][0]), "appears twice"),
    ("no config", lambda d: d["results"][0].pop("config"), "results[0] has no 'config'"),
]


@pytest.mark.parametrize("name, mutate, message", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_sweep_files_say_what_is_wrong(tmp_path, name, mutate, message):
    good = synthetic(fail=[{"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 32, "num_stages": 3}]).to_dict()
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(_mutate(good, mutate)))
    with pytest.raises(at.SweepFormatError) as e:
        at.load_sweep(path)
    assert message in str(e.value) and str(path) in str(e.value)


def test_not_json_and_not_an_object(tmp_path):
    path = tmp_path / "x.json"
    path.write_text("{ not json")
    with pytest.raises(at.SweepFormatError, match="not valid JSON"):
        at.load_sweep(path)
    path.write_text("[1, 2]")
    with pytest.raises(at.SweepFormatError, match="JSON object"):
        at.load_sweep(path)


@pytest.mark.parametrize("path", SWEEP_FILES or [None], ids=[p.name for p in SWEEP_FILES] or ["none"])
def test_recorded_sweeps_validate(path):
    if path is None:
        pytest.skip(f"no recorded sweeps in {at.SWEEPS} yet (record them on a GPU: python -m tkcourse.autotune)")
    s = at.load_sweep(path)
    assert path.name == s.filename()
    assert s.timings_meaningful, "recorded sweeps come from a GPU"
    assert s.ok, "every config failed"


# ----- heatmaps -------------------------------------------------------------------------------


def _facet(fig, title):
    return next(ax for ax in fig.axes if ax.get_title() == title)


def test_heatmap_cells_best_marker_and_hatching():
    s = synthetic(skip=[{"BLOCK_M": 16, "BLOCK_N": 64}],  # untested in every facet
                  fail=[{"BLOCK_M": 32, "BLOCK_N": 16, "num_stages": 3},  # whole cell failed
                        {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32, "num_stages": 2}])  # half a cell failed
    fig = hm.heatmap(s)
    facets = [ax for ax in fig.axes if ax.get_title().startswith("num_warps")]
    assert sorted(ax.get_title() for ax in facets) == ["num_warps=4, num_stages=2", "num_warps=4, num_stages=3"]
    ax = _facet(fig, "num_warps=4, num_stages=3")
    img = ax.images[0].get_array()  # rows: BLOCK_M 16, 32 (bottom up); columns: BLOCK_N 16, 32, 64
    assert img.shape == (2, 3)
    for yi, bm in enumerate((16, 32)):
        for xi, bn in enumerate((16, 32, 64)):
            if (bm, bn) in ((16, 64), (32, 16)):
                assert img.mask[yi, xi], f"cell BM{bm} BN{bn} must be blank"
            else:  # the best over BLOCK_K, i.e. BK32: rate = 10 BM + BN + 0.32 + 3
                assert not img.mask[yi, xi]
                assert img[yi, xi] == pytest.approx(10 * bm + bn + 0.32 + 3)
    hatched = [p for p in ax.patches if p.get_gid() == "failed"]
    assert [(p.get_x() + 0.5, p.get_y() + 0.5) for p in hatched] == [(0, 1)] and hatched[0].get_hatch()
    assert not [p for p in _facet(fig, "num_warps=4, num_stages=2").patches if p.get_gid() == "failed"]
    partly = [t for t in _facet(fig, "num_warps=4, num_stages=2").texts if t.get_gid() == "partly-failed"]
    assert len(partly) == 1 and partly[0].get_text() == "×1"
    # the best config, BM32 BN64 BK32 s3, is starred (and boxed) in its cell, and only there
    assert s.best().config == dict(BLOCK_M=32, BLOCK_N=64, BLOCK_K=32, num_warps=4, num_stages=3)
    stars = [(a, ln) for a in fig.axes for ln in a.lines if ln.get_gid() == "best"]
    assert len(stars) == 1 and stars[0][0] is ax
    x, y = stars[0][1].get_xydata()[0]
    assert round(x) == 2 and round(y) == 1
    box = next(p for p in ax.patches if p.get_gid() == "best-box")
    assert (box.get_x() + 0.5, box.get_y() + 0.5) == (2, 1)
    title = fig._suptitle.get_text()
    assert "best over BLOCK_K" in title and "BM32 BN64 BK32 w4 s3" in title and "meaningless" not in title
    assert "3 of" in title  # 1 + 2 failed configs


def test_heatmap_other_metric_and_facets():
    s = synthetic()
    fig = hm.heatmap(s, metric="ms", rows="BLOCK_K", cols=None)
    titles = sorted(ax.get_title() for ax in fig.axes if ax.get_title())
    assert titles == ["BLOCK_K=16", "BLOCK_K=32"]
    best = s.best("ms")
    assert best.config == s.best().config  # fastest is fastest, in any metric
    with pytest.raises(ValueError, match="not a config key"):
        hm.heatmap(s, x="BLOCK_Q")
    no_flops = synthetic()
    no_flops.flops = None
    with pytest.raises(ValueError, match="TFLOP/s"):
        hm.heatmap(no_flops, metric="TFLOP/s")


def test_heatmap_headless_render(tmp_path):
    s = synthetic(fail=[{"BLOCK_M": 32}])
    fig = hm.heatmap(s)
    fig.savefig(tmp_path / "h.png")
    assert (tmp_path / "h.png").stat().st_size > 1000


def test_best_vs_shape_fraction_of_best():
    big = synthetic("128x128x128")
    # at the skinny shape small BLOCK_M wins, so the big shape's best config reaches a known fraction
    skinny = synthetic("16x128x128", rate=lambda c: (400 if c["BLOCK_M"] == 16 else 100) + c["BLOCK_N"]
                       + c["num_stages"])
    partly = synthetic("64x64x64", fail=[{"BLOCK_M": 32, "BLOCK_N": 64}])
    fig = hm.best_vs_shape([skinny, big, partly])
    ax_table, ax_bars = fig.axes[0], fig.axes[1]
    labels = [t.get_text() for t in ax_bars.get_xticklabels()]
    assert labels == ["64³", "128³", "16x128x128"]  # squares by size, then the rest
    fixed = big.best().config
    assert fixed["BLOCK_M"] == 32 and fixed["BLOCK_N"] == 64
    heights = [b.get_height() for b in ax_bars.patches]
    expected_skinny = (100 + 64 + 3) / (400 + 64 + 3)
    assert heights[1] == pytest.approx(1.0)
    assert heights[2] == pytest.approx(expected_skinny)
    assert heights[0] == 0.0 and "failed" in [t.get_text() for t in ax_bars.texts]
    assert any(t.get_text() == "16" for t in ax_table.texts)  # skinny best: BLOCK_M 16
    fig2 = hm.best_vs_shape([big, skinny], fixed=[fixed, skinny.best().config])
    assert len(fig2.axes[1].patches) == 4
    with pytest.raises(ValueError, match="one kernel and dtype"):
        other = synthetic()
        other.dtype = "float32"
        hm.best_vs_shape([big, other])


def test_explorer_redraws_on_change(tmp_path):
    pytest.importorskip("ipywidgets")
    for shape in ("64x64x64", "128x128x128"):
        synthetic(shape).save(tmp_path)
    box = hm.explorer(tmp_path)
    first = box.figure
    assert first is not None and "64x64x64" in first._suptitle.get_text()
    box.controls["shape"].value = "128x128x128"
    assert box.figure is not first and "128x128x128" in box.figure._suptitle.get_text()
    box.controls["metric"].value = "GB/s"
    assert "GB/s" in box.figure._suptitle.get_text()
    box.controls["rows"].value = "BLOCK_K"
    box.controls["cols"].value = "(none)"
    assert sorted(ax.get_title() for ax in box.figure.axes if ax.get_title()) == ["BLOCK_K=16", "BLOCK_K=32"]


# ----- the exercise: config space and pruning -------------------------------------------------


def test_config_space_is_big_enough():
    space = sol.config_space()
    assert len(space) >= 60
    keys = {"BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages"}
    assert all(set(c) == keys for c in space)
    assert len({tuple(sorted(c.items())) for c in space}) == len(space), "duplicate configs"
    assert all(v & (v - 1) == 0 for c in space for k, v in c.items() if k.startswith("BLOCK")), "powers of two"
    assert min(c["BLOCK_M"] for c in space) <= 16, "skinny problems (M = 16) need a small BLOCK_M"


def test_shared_memory_estimate():
    c = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3)
    assert sol.shared_memory_bytes(c, 2) == (128 * 64 + 64 * 256) * 2 * 3


def test_prune_keeps_the_best_and_drops_what_cannot_fit():
    space = sol.config_space()
    best = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=32, GROUP_M=8, num_warps=4, num_stages=3)
    assert best in space
    kept = sol.prune(space, 4096, 4096, 4096)
    assert best in kept and kept == [c for c in space if c in kept], "keeps order"
    assert all(sol.shared_memory_bytes(c) <= 227 * 1024 for c in kept)
    assert len(kept) < len(space), "something in the space must not fit in 227 KiB"
    tight = 48 * 1024
    kept_tight = sol.prune(space, 4096, 4096, 4096, smem_limit=tight)
    assert len(kept_tight) <= len(space) // 2
    assert all(sol.shared_memory_bytes(c) <= tight for c in kept_tight) and kept_tight
    assert all(sol.shared_memory_bytes(c) > tight for c in space if c not in kept_tight)
    # fp32 doubles the bytes, so fewer configs fit
    assert len(sol.prune(space, 4096, 4096, 4096, dtype_bytes=4)) < len(kept)


def test_prune_drops_tiles_larger_than_the_problem():
    space = sol.config_space()
    skinny = sol.prune(space, 16, 4096, 4096)
    assert skinny and all(c["BLOCK_M"] == 16 for c in skinny)
    small = sol.prune(space, 100, 64, 32)
    assert small and all(c["BLOCK_M"] <= 128 and c["BLOCK_N"] <= 64 and c["BLOCK_K"] <= 32 for c in small)
    assert sol.next_pow2(100) == 128 and sol.next_pow2(128) == 128 and sol.next_pow2(1) == 1


def test_early_config_prune_for_triton_autotune():
    space = sol.config_space()
    configs = sol.to_triton_configs(space)
    assert configs[0].kwargs == {k: space[0][k] for k in sol.CONSTEXPRS} and configs[0].num_stages == 3
    a = torch.empty(16, 4096, dtype=torch.float16)
    kept = sol.early_config_prune(configs, {"a_ptr": a, "M": 16, "N": 4096, "K": 4096})
    assert kept and all(c.kwargs["BLOCK_M"] == 16 for c in kept)
    assert len(kept) == len(sol.prune(space, 16, 4096, 4096))
    # nothing fits: one config (the smallest) is kept, so the autotuner still has one to run
    assert len(sol.early_config_prune(configs, {"M": 16, "N": 16, "K": 16}, smem_limit=1)) == 1
    with pytest.raises(KeyError, match="M, N and K"):
        sol.early_config_prune(configs, {"x": 1})


# ----- the command line -----------------------------------------------------------------------


def test_cli_dry_run_lists_the_space(capsys):
    assert at.main(["matmul", "--shapes", "16x4096x4096,4096x4096x4096", "--dry-run", "--prune"]) == 0
    out = capsys.readouterr().out
    assert "matmul 16x4096x4096: " in out and "BM16 BN64 BK32 G8 w4 s3" in out
    assert at.main(["matmul", "--shapes", "64x64x64", "--dry-run", "--axes", "GROUP_M=1,8"]) == 0
    assert f"{2 * len(sol.config_space())} configs" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        at.main(["matmul", "--shapes", "64x64", "--dry-run"])


@pytest.mark.skipif(not mode.INTERPRET, reason="on a GPU the command runs for real")
def test_cli_refuses_big_work_in_the_interpreter(capsys):
    assert at.main(["matmul", "--shapes", "4096x4096x4096"]) == 1
    assert "No GPU" in capsys.readouterr().out


def test_cli_tiny_run_with_the_course_matmul(tmp_path, capsys):
    pytest.importorskip("solutions.matmul")
    rc = at.main(["matmul", "--shapes", "32x32x32", "--dtype", "float32", "--out", str(tmp_path), "--rep", "1",
                  "--axes", "BLOCK_M=16,32 BLOCK_N=32 BLOCK_K=16 GROUP_M=8 num_warps=4 num_stages=3",
                  "--allow-interpreter"])
    assert rc == 0
    s = at.load_sweep(Path(tmp_path) / "matmul_float32_32x32x32.json")
    assert len(s.results) == 2 and s.ok, s.table()
    assert "best config" in capsys.readouterr().out


# ----- the grader: passes the reference, names each planted mistake ---------------------------

import functools  # noqa: E402
import types  # noqa: E402

from tkcourse import check  # noqa: E402
from tkcourse.check import autotune as grader  # noqa: E402


def _est(c, db):
    return (c["BLOCK_M"] * c["BLOCK_K"] + c["BLOCK_K"] * c["BLOCK_N"]) * db * c["num_stages"]


def _fits(c, M, N, K, pow2=sol.next_pow2, floor=16):
    return all(c[b] <= max(floor, pow2(d)) for b, d in (("BLOCK_M", M), ("BLOCK_N", N), ("BLOCK_K", K)))


def _prune_by(keep):
    """A prune that keeps ``keep(config, M, N, K, dtype_bytes, smem_limit)``."""
    def prune(configs, M, N, K, dtype_bytes=2, smem_limit=227 * 1024):
        return [c for c in configs if keep(c, M, N, K, dtype_bytes, smem_limit)]
    return prune


def _planted(prune=None, config_space=None):
    return types.SimpleNamespace(config_space=config_space or sol.config_space, prune=prune or sol.prune,
                                 __name__="planted")


@functools.lru_cache(maxsize=1)
def _best_est():  # loading the sweep files takes a second: once, not once per config
    return _est(grader.recorded_best()[0], 2)


PLANTED_PRUNES = [
    ("estimate forgets num_stages",
     _prune_by(lambda c, M, N, K, db, L: _est(c, db) // c["num_stages"] <= L and _fits(c, M, N, K)),
     "forgets num_stages"),
    ("comparison the wrong way round",
     _prune_by(lambda c, M, N, K, db, L: _est(c, db) > L and _fits(c, M, N, K)), "wrong way round"),
    ("strict < at the limit",
     _prune_by(lambda c, M, N, K, db, L: _est(c, db) < L and _fits(c, M, N, K)), "exactly smem_limit"),
    ("dtype_bytes ignored",
     _prune_by(lambda c, M, N, K, db, L: _est(c, 2) <= L and _fits(c, M, N, K)), "dtype_bytes ignored"),
    ("a fixed limit just below the best config",  # ignores smem_limit: prunes the best config
     _prune_by(lambda c, M, N, K, db, L: _est(c, db) < _best_est() and _fits(c, M, N, K)),
     "pruned the best config"),
    ("tiles larger than the problem kept",
     _prune_by(lambda c, M, N, K, db, L: _est(c, db) <= L), "tiles larger than the problem"),
    ("BLOCK_M > M instead of next_pow2",
     _prune_by(lambda c, M, N, K, db, L: _est(c, db) <= L and _fits(c, M, N, K, pow2=int)), "next_pow2"),
    ("no 16 floor for the tiles",
     _prune_by(lambda c, M, N, K, db, L: _est(c, db) <= L and _fits(c, M, N, K, floor=1)), "the tiles start at 16"),
    ("M and N swapped",
     _prune_by(lambda c, M, N, K, db, L: _est(c, db) <= L and _fits(c, N, M, K)), "its own dimension"),
    ("order lost",
     lambda configs, *a, **k: sorted(sol.prune(configs, *a, **k), key=lambda c: _est(c, 2)), "original order"),
    # classes that only a check of the input catches (issue 17)
    ("pruned in place and returned", lambda configs, *a, **k: _in_place(configs, *a, **k), "returned its input list"),
    ("removed from the caller's list, a copy returned",
     lambda configs, *a, **k: list(_in_place(configs, *a, **k)), "changed the list it was given"),
    ("num_stages clamped in the caller's dicts", lambda configs, *a, **k: _clamping(configs, *a, **k),
     "changed a config dict"),
    # a finished prune that the stub's check once took for the stub, and one the lesson's cells cannot read
    ("every config when none fits", lambda configs, *a, **k: sol.prune(configs, *a, **k) or list(configs),
     "when none fits it returns the empty list"),
    ("a tile as large as the rule allows dropped (>= for >)",
     _prune_by(lambda c, M, N, K, db, L: _est(c, db) <= L and _fits(c, M, N, K)
               and c["BLOCK_K"] < max(16, 1 << (K - 1).bit_length())), ">, not >="),
    ("BLOCK_K compared with N", _prune_by(lambda c, M, N, K, db, L: _est(c, db) <= L and _fits(c, M, N, N)),
     "its own dimension"),
    ("a generator returned", lambda configs, *a, **k: (c for c in sol.prune(configs, *a, **k)),
     "return a list of the config dicts"),
]


def _in_place(configs, M, N, K, dtype_bytes=2, smem_limit=227 * 1024):
    keep = sol.prune(list(configs), M, N, K, dtype_bytes, smem_limit)
    configs[:] = keep
    return configs


def _clamping(configs, M, N, K, dtype_bytes=2, smem_limit=227 * 1024):
    for c in configs:  # "fix" the configs that do not fit by dropping stages: changes the caller's dicts
        while c["num_stages"] > 1 and _est(c, dtype_bytes) > smem_limit:
            c["num_stages"] -= 1
    return sol.prune([dict(c) for c in configs], M, N, K, dtype_bytes, smem_limit)


def test_grader_passes_the_solution():
    rep = check.run("autotune", module=sol, quiet=True)
    assert rep.passed, str(rep)
    assert len(rep.cases) >= 12


@pytest.mark.parametrize("name, prune, hint", PLANTED_PRUNES, ids=[p[0] for p in PLANTED_PRUNES])
def test_grader_catches_planted_prune(name, prune, hint):
    rep = assert_grader_catches("autotune", _planted(prune), name, hint)
    assert rep.first_problem().label.startswith("prune"), rep.first_problem().label
    assert hint in str(rep)


def test_grader_names_the_reversed_comparison_and_the_pruned_best():
    rep = check.run("autotune", module=_planted(PLANTED_PRUNES[1][1]), quiet=True)
    bad = rep.first_problem()
    assert "pruned the best config" in bad.hint and "wrong way round" in bad.hint
    assert "missing from prune's answer" in bad.detail


def test_grader_stub_prune_is_not_done():
    rep = check.run("autotune", module=_planted(lambda configs, *a, **k: list(configs)), quiet=True)
    assert rep.status == "todo" and "TODO" in rep.first_problem().hint
    rep = check.run("autotune", module=_planted(lambda *a, **k: None), quiet=True)
    assert rep.status == "todo"
    rep = check.run("autotune", module=_planted(lambda *a, **k: 1 / 0), quiet=True)
    assert rep.status == "error" and "ZeroDivisionError" in rep.first_problem().detail


def _space(**change):
    space = sol.config_space()
    for k, v in change.items():
        space = v(space)
    return lambda: space


PLANTED_SPACES = [
    ("empty (the stub)", lambda: [], "todo", "fill in config_space"),
    ("too small", _space(cut=lambda s: s[:24]), "fail", "too small"),
    ("a duplicate", _space(dup=lambda s: s + [dict(s[3])]), "fail", "duplicate"),
    ("a missing key", _space(key=lambda s: [{k: v for k, v in c.items() if k != "GROUP_M"} for c in s]), "fail",
     "exactly these six keys"),
    ("BLOCK_N not a power of two", _space(p2=lambda s: [{**c, "BLOCK_N": 96} if c["BLOCK_N"] == 64 else c for c in s]),
     "fail", "power of two"),
    ("no BLOCK_M for skinny problems", _space(big=lambda s: [c for c in s if c["BLOCK_M"] > 16]), "fail",
     "BLOCK_M = 16"),
]


@pytest.mark.parametrize("name, space, status, hint", PLANTED_SPACES, ids=[p[0] for p in PLANTED_SPACES])
def test_grader_catches_planted_config_space(name, space, status, hint):
    rep = check.run("autotune", module=_planted(config_space=space), quiet=True)
    assert rep.status == status, f"{name}:\n{rep}"
    assert hint in rep.first_problem().hint, f"{name}: hint was {rep.first_problem().hint!r}"


def test_grader_catches_a_wrong_shared_memory_estimate():
    forgot = types.SimpleNamespace(config_space=sol.config_space, prune=sol.prune, __name__="planted",
                                   shared_memory_bytes=lambda c, db=2: _est(c, db) // c["num_stages"])
    rep = check.run("autotune", module=forgot, quiet=True)
    assert rep.status == "fail" and "forgets num_stages" in rep.first_problem().hint
    stub = types.SimpleNamespace(config_space=sol.config_space, prune=sol.prune, __name__="planted",
                                 shared_memory_bytes=lambda c, db=2: 0)
    assert check.run("autotune", module=stub, quiet=True).status == "todo"


def test_grader_uses_the_recorded_best_config(tmp_path, monkeypatch):
    """With a recorded 4096³ fp16 sweep, the case keeps *its* fastest config (one not in the grader's space)."""
    best = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=5)
    slower = dict(best, num_stages=3)
    flops = 2 * 4096**3
    results = [at.Result(best, ms=0.2, p20=0.19, p80=0.21), at.Result(slower, ms=0.3, p20=0.29, p80=0.31),
               at.Result(dict(best, BLOCK_N=512), reason="out of shared memory", error="OutOfResources: x")]
    at.Sweep("matmul", "4096x4096x4096", "float16", results, flops=flops, bytes=3 * 4096**2 * 2, gpu="NVIDIA H200",
             sms=132, triton="3.6.0", torch="2.11.0", date="2026-01-01", command="test").save(tmp_path)
    monkeypatch.setattr(at.format, "SWEEPS", tmp_path)
    config, why = grader.recorded_best()
    assert config == best and "recorded sweep" in why and "NVIDIA H200" in why
    rep = check.run("autotune", module=sol, quiet=True)
    assert rep.passed and "BM128 BN128 BK64 G8 w8 s5" in str(rep)
    drops_it = _prune_by(lambda c, M, N, K, db, L: sol.prune([c], M, N, K, db, L) and c["num_stages"] < 5)
    bad = check.run("autotune", module=_planted(drops_it), quiet=True).first_problem()
    assert "pruned the best config" in bad.hint and "recorded sweep" in bad.hint


def test_grader_falls_back_without_recorded_sweeps(tmp_path, monkeypatch):
    monkeypatch.setattr(at.format, "SWEEPS", tmp_path / "none")
    config, why = grader.recorded_best()
    assert config == grader.FALLBACK_BEST and "known-good" in why
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "matmul_float16_4096x4096x4096.json").write_text("{ not json")
    monkeypatch.setattr(at.format, "SWEEPS", tmp_path / "bad")
    config, why = grader.recorded_best()
    assert config == grader.FALLBACK_BEST and "did not load" in why


def test_grader_rules_match_the_brief():
    """The grader's own rules: more than half of its space is over the tight limit, and the size rule."""
    fits = grader.expected_prune(grader.SPACE, 4096, 4096, 4096, 2, grader.TIGHT)
    assert len(fits) <= len(grader.SPACE) // 2
    assert any(grader.smem(c, 2) == grader.TIGHT for c in fits), "a config exactly at the limit must be kept"
    assert all(c["BLOCK_M"] == 16 for c in grader.expected_prune(grader.SPACE, 16, 4096, 4096, 2, grader.H200_SMEM))


def test_heatmap_rate_scale_starts_at_zero():
    s = synthetic()
    fig = hm.heatmap(s)  # the default metric is a rate: its colours read from zero, not from the worst config
    norms = [ax.images[0].norm for ax in fig.axes if ax.images]
    assert norms and all(n.vmin == 0 for n in norms) and all(n.vmax > 0 for n in norms)


def test_show_explorer_shows_a_still_picture_beside_the_widget(tmp_path, monkeypatch):
    pytest.importorskip("ipywidgets")
    import IPython.display

    synthetic("64x64x64").save(tmp_path)
    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda *objs, **_: shown.extend(objs))
    box = hm.show_explorer(tmp_path)
    at = next(i for i, o in enumerate(shown) if o is box)  # the live widget, then a caption and the still figure
    assert any("still picture" in str(getattr(o, "data", "")) for o in shown[at:])
    assert shown[-1] is box.figure and at < len(shown) - 1 and "64x64x64" in box.figure._suptitle.get_text()
