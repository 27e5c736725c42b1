"""Issue 19: bad input gets a clear error that names the argument, never a deep Triton error or a
silently wrong result; every loader of recorded data names the file and the place it is wrong."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import randn

from solutions import flash_attention_backward as fb
from solutions import matmul as mm
from solutions import vector_add as va
from solutions.kernels import (
    attention_forward as fa,  # the full API (impl=, WARP_SPECIALIZE); "simple" runs the lesson file
)
from solutions.kernels import online_softmax_split as osm  # parts= lives in the split step; it re-exports reference
from tkcourse import autotune as at
from tkcourse import bench
from tkcourse.errors import UserError

ROOT = Path(__file__).resolve().parent.parent
GOOD_MATMUL = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=1, num_warps=4, num_stages=2)


# ----- the solutions' arguments -----------------------------------------------------------------


@pytest.mark.parametrize("BLOCK, error, words", [
    (1000, ValueError, "BLOCK must be a power of two from 1 to 1048576, got 1000 (try 512 or 1024)"),
    (0, ValueError, "BLOCK must be a power of two"),  # was ZeroDivisionError inside triton.cdiv
    (-4, ValueError, "BLOCK must be a power of two"),
    (1 << 21, ValueError, "BLOCK must be a power of two from 1 to 1048576"),
    (256.0, TypeError, "BLOCK must be an int"),
    ("256", TypeError, "BLOCK must be an int"),
    (True, TypeError, "BLOCK must be an int"),
    (None, TypeError, "BLOCK must be an int"),
])
def test_add_refuses_a_bad_block(BLOCK, error, words):
    x = randn(100)
    with pytest.raises(error) as e:
        va.add(x, x, BLOCK=BLOCK)
    assert words in str(e.value)


def test_add_takes_numpy_and_torch_integers():
    import numpy as np

    x, y = randn(70, seed=1), randn(70, seed=2)
    for block in (np.int64(32), torch.tensor(64)):
        torch.testing.assert_close(va.add(x, y, BLOCK=block), x + y)


@pytest.mark.parametrize("key, value, error, words", [
    ("BLOCK_M", 24, ValueError, "config['BLOCK_M'] must be a power of two from 16 to 512, got 24 (try 16 or 32)"),
    ("BLOCK_K", 8, ValueError, "config['BLOCK_K'] must be a power of two from 16"),
    ("BLOCK_N", 32.0, TypeError, "config['BLOCK_N'] must be an int"),
    ("GROUP_M", 0, ValueError, "config['GROUP_M'] must be an int from 1 to 256, got 0"),  # was a wrong matrix
    ("GROUP_M", -1, ValueError, "config['GROUP_M']"),
    ("num_warps", 3, ValueError, "config['num_warps'] must be a power of two from 1 to 32"),
    ("num_stages", 0, ValueError, "config['num_stages'] must be an int from 1 to 8"),
])
def test_matmul_refuses_a_bad_config_value(key, value, error, words):
    a, b = randn(20, 24), randn(24, 28)
    with pytest.raises(error) as e:
        mm.matmul(a, b, config={**GOOD_MATMUL, key: value})
    assert words in str(e.value)


def test_matmul_config_not_a_dict():
    with pytest.raises(TypeError, match="config must be a dict"):
        mm.matmul(randn(4, 4), randn(4, 4), config=[16, 16, 16, 1, 4, 2])


def test_a_checked_config_is_remembered_by_type_too():
    """The launcher caches a config that passed; 32.0 == 32 must not pass as the cached 32."""
    a, b = randn(20, 24), randn(24, 28)
    torch.testing.assert_close(mm.matmul(a, b, config=GOOD_MATMUL), a @ b, atol=1e-4, rtol=1e-4)
    with pytest.raises(TypeError, match="BLOCK_M"):
        mm.matmul(a, b, config={**GOOD_MATMUL, "BLOCK_M": 16.0})


def test_attention_takes_numpy_scalars():
    import numpy as np

    q, k, v = (randn(1, 1, 20, 16, seed=s) for s in range(3))
    o = fa.attention(q, k, v, causal=np.True_, sm_scale=np.float32(0.3), config={"BLOCK_M": np.int64(16), "BLOCK_N": 16})
    torch.testing.assert_close(o, fa.reference(q, k, v, True, 0.3), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("impl", ["simple", "tuned"])
@pytest.mark.parametrize("config, error, words", [
    ({"BLOCK_M": 24, "BLOCK_N": 16}, ValueError, "config['BLOCK_M'] must be a power of two from 16 to 256, got 24"),
    ({"BLOCK_M": 16, "BLOCK_N": 512}, ValueError, "config['BLOCK_N'] must be a power of two from 16 to 256"),
    ({"BLOCK_M": 16, "BLOCK_N": 16, "num_warps": 0}, ValueError, "config['num_warps']"),
    ({"BLOCK_M": 16, "BLOCK_N": 16, "WARP_SPECIALIZE": "yes"}, TypeError, "config['WARP_SPECIALIZE']"),
    ({"BLOCK_M": 16}, ValueError, "missing: BLOCK_N"),
    ("fast", TypeError, "config must be a dict"),
])
def test_attention_refuses_a_bad_config(impl, config, error, words):
    q, k, v = (randn(1, 1, 20, 16, seed=s) for s in range(3))
    with pytest.raises(error) as e:
        fa.attention(q, k, v, config=config, impl=impl)
    assert words in str(e.value)


@pytest.mark.parametrize("sm_scale, causal, error, name", [
    ("0.5", False, TypeError, "sm_scale"),
    (float("nan"), False, ValueError, "sm_scale"),
    (math.inf, False, ValueError, "sm_scale"),
    (True, False, TypeError, "sm_scale"),
    (None, "no", TypeError, "causal"),  # bool("no") is True: a causal mask nobody asked for
    (None, 2, TypeError, "causal"),
])
def test_attention_refuses_a_bad_scale_or_causal(sm_scale, causal, error, name):
    q, k, v = (randn(1, 1, 20, 16, seed=s) for s in range(3))
    with pytest.raises(error, match=name):
        fa.attention(q, k, v, causal=causal, sm_scale=sm_scale)
    o, lse = fa.attention_forward(q, k, v)
    with pytest.raises(error, match=name):
        fb.attention_backward(randn(1, 1, 20, 16, seed=9), q, k, v, o, lse, causal=causal, sm_scale=sm_scale)


@pytest.mark.parametrize("which, config, causal, words", [
    ("dkdv_config", {"BLOCK_N": 24, "BLOCK_M": 16}, False, "dkdv_config['BLOCK_N'] must be a power of two"),
    ("dq_config", {"BLOCK_M": 16, "BLOCK_N": 12}, False, "dq_config['BLOCK_N'] must be a power of two"),
    ("dkdv_config", {"BLOCK_N": 16, "BLOCK_M": 32}, True, "dkdv_config['BLOCK_N'] to be a multiple of"),
    ("dq_config", {"BLOCK_M": 16, "BLOCK_N": 32}, True, "dq_config['BLOCK_M'] to be a multiple of"),
])
def test_backward_refuses_a_bad_config(which, config, causal, words):
    q, k, v, do = (randn(1, 1, 20, 16, seed=s) for s in range(4))
    o, lse = fa.attention_forward(q, k, v, causal=causal)
    with pytest.raises(ValueError) as e:
        fb.attention_backward(do, q, k, v, o, lse, causal, **{which: config})
    assert words in str(e.value)


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(parts=2.0), TypeError, "parts must be an int"),  # was TypeError: unsupported operand for &
    (dict(parts=0), ValueError, "parts must be a power of two"),  # was taken for "automatic"
    (dict(parts=3), ValueError, "parts must be a power of two from 1 to 1024, got 3 (try 2 or 4)"),
    (dict(block=100), ValueError, "block must be a power of two"),
    (dict(block=0), ValueError, "block must be a power of two"),
    (dict(block="64"), TypeError, "block must be an int"),
])
def test_online_softmax_refuses_bad_parts_and_block(kwargs, error, words):
    with pytest.raises(error) as e:
        osm.softmax(randn(3, 50), **kwargs)
    assert words in str(e.value)


def test_step_states_refuses_a_bad_block():
    with pytest.raises(ValueError, match="block must be an int at least 1"):
        osm.step_states(randn(10), 0)
    with pytest.raises(TypeError, match="block"):
        osm.step_states(randn(10), 2.5)


def test_autotune_solution_refuses_bad_arguments():
    from solutions import autotune as sol

    with pytest.raises(TypeError, match="n must be an int"):
        sol.next_pow2(2.5)  # int(2.5) would have said 2
    with pytest.raises(ValueError, match=r"configs\[0\] lacks BLOCK_K"):
        sol.prune([dict(BLOCK_M=16, BLOCK_N=16, num_stages=2)], 16, 16, 16)
    with pytest.raises(ValueError, match="M must be an int at least 1"):
        sol.prune([], 0, 16, 16)
    with pytest.raises(TypeError, match="configs must be a list"):
        sol.prune(GOOD_MATMUL, 16, 16, 16)
    with pytest.raises(ValueError, match="dtype_bytes"):
        sol.shared_memory_bytes(GOOD_MATMUL, 0)


# ----- regenerating exercises ----------------------------------------------------------------------
# (tests/test_stubs.py: unique backups, exercises/__init__.py, a damaged manifest, an unknown lesson)


# ----- the bench table -----------------------------------------------------------------------------


def _table(tmp_path, rows=None):
    row = dict(kernel="vector_add", provider="triton", shape="1048576", dtype="float32", metric="GB/s",
               median=1618.1728, p20=1565.3504, p80=1666.1694, ms=0.007776, bytes=12582912, flops=0,
               gpu="NVIDIA H200", triton="3.6.0", torch="2.11", date="2026-11-29", command="python -m tkcourse bench")
    return bench.write_records(rows or [row, {**row, "provider": "torch"}], tmp_path / "t.csv"), row


def test_recorded_table_loads():
    rows = bench.load_records()
    assert rows and all(r["metric"] in bench.METRICS for r in rows)


def test_bench_table_cut_in_the_middle_of_a_row(tmp_path):
    path, _ = _table(tmp_path)
    text = path.read_text()
    cut = text.index("12582912", text.index("vector_add,torch")) + 3  # the second row ends "...,125"
    path.write_text(text[:cut])
    with pytest.raises(bench.RecordsFormatError, match=r"line 3: the file ends in the middle of a row"):
        bench.load_records(path)
    path.write_text(text[:cut] + "\n")  # cut, then a newline: still too few fields
    with pytest.raises(bench.RecordsFormatError, match=r"line 3: the row stops before 'flops'"):
        bench.load_records(path)


@pytest.mark.parametrize("field, value, words", [
    ("median", -3.0, "median is -3.0, expected a finite number >= 0"),
    ("ms", 0.0, "ms is 0.0; a measured GB/s row needs it > 0"),
    ("p80", "inf", "p80 is inf"),
    ("bytes", "-5", "bytes is '-5', expected a whole number >= 0"),
    ("bytes", "1.5e6", "bytes is '1.5e6'"),
    ("metric", "GiB/s", "metric is 'GiB/s'"),
    ("kernel", "", "kernel is empty"),
    ("date", "yesterday", "date is 'yesterday'"),
])
def test_bench_table_bad_fields_are_named(tmp_path, field, value, words):
    _, row = _table(tmp_path)
    path, _ = _table(tmp_path, [row, {**row, field: value}])
    with pytest.raises(bench.RecordsFormatError) as e:
        bench.load_records(path)
    assert words in str(e.value) and "line 3" in str(e.value) and str(path) in str(e.value)


def test_bench_table_that_is_no_table(tmp_path):
    with pytest.raises(bench.RecordsFormatError, match="is a folder"):
        bench.load_records(tmp_path)
    p = tmp_path / "bin.csv"
    p.write_bytes(b"kernel,provider\n\xff\xfe\n")
    with pytest.raises(bench.RecordsFormatError, match="line 2: not UTF-8"):
        bench.load_records(p)
    with pytest.raises(FileNotFoundError, match="tkcourse bench") as e:
        bench.load_records(tmp_path / "none.csv")
    assert isinstance(e.value, UserError)


# ----- sweep files -----------------------------------------------------------------------------


def _sweep_dict():
    return at.load_sweep(sorted(at.SWEEPS.glob("*.json"))[0]).to_dict()


def test_every_recorded_sweep_loads():
    assert len(at.load_sweeps()) == len(list(at.SWEEPS.glob("*.json"))) > 0


@pytest.mark.parametrize("content, words", [
    (b'{"schema": "tkcourse.sweep/1", "kernel": "m\xe9"}', "not UTF-8 text (byte 0xe9"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deep"),
    (b'{"schema": "tkcourse.sweep/1", "flops": NaN}', "NaN is not a JSON number"),
    (b'"a string"', "expected a JSON object at the top"),
    (b"null", "expected a JSON object at the top"),
])
def test_sweep_files_that_are_no_sweep(tmp_path, content, words):
    p = tmp_path / "bad.json"
    p.write_bytes(content)
    with pytest.raises(at.SweepFormatError) as e:
        at.load_sweep(p)
    assert words in str(e.value) and str(p) in str(e.value)


def test_sweep_path_that_is_a_folder_or_missing(tmp_path):
    with pytest.raises(at.SweepFormatError, match="is a folder"):
        at.load_sweep(tmp_path)
    with pytest.raises(FileNotFoundError):
        at.load_sweep(tmp_path / "none.json")
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(at.SweepFormatError, match="is a file, not a folder"):
        at.load_sweeps(tmp_path / "x.json")


def test_one_bad_file_in_a_folder_is_named(tmp_path):
    d = _sweep_dict()
    (tmp_path / "good.json").write_text(json.dumps(d))
    d["results"][3]["ms"] = -1
    (tmp_path / "broken.json").write_text(json.dumps(d))
    with pytest.raises(at.SweepFormatError) as e:
        at.load_sweeps(tmp_path)
    assert "broken.json" in str(e.value) and "results[3]: 'ms' must be > 0" in str(e.value)
    (tmp_path / "broken.json").unlink()
    (tmp_path / "dir.json").mkdir()  # a folder that looks like a sweep file
    with pytest.raises(at.SweepFormatError, match="dir.json"):
        at.load_sweeps(tmp_path)


@pytest.mark.parametrize("mutate, words", [
    (lambda d: d["results"][0]["config"].update(BLOCK_M=[16]), "results[0].config: 'BLOCK_M' must be"),
    (lambda d: d.update(notes="one note"), "'notes' must be a list"),
    (lambda d: d.update(sms=-1), "'sms' must be >= 0"),
    (lambda d: d.update(baseline={"ms": 1.0}), "baseline: missing key 'p20'"),
    (lambda d: d["results"][1].update(compile_s="slow"), "results[1]: 'compile_s'"),
])
def test_schema_errors_name_the_key(tmp_path, mutate, words):
    d = _sweep_dict()
    mutate(d)
    p = tmp_path / "s.json"
    p.write_text(json.dumps(d))
    with pytest.raises(at.SweepFormatError) as e:
        at.load_sweep(p)
    assert words in str(e.value)


# ----- python -m tkcourse.autotune ----------------------------------------------------------------


def _autotune(*args):
    return subprocess.run([sys.executable, "-m", "tkcourse.autotune", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)


def test_autotune_command_prints_a_mistake_in_one_line():
    r = _autotune("matmul", "--shapes", "64x64", "--dry-run")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().count("\n") == 0 and "shape '64x64': expected 3 positive integers" in r.stderr
    r = _autotune("matmul", "--shapes", "32x32x32", "--dry-run", "--axes", "GROUP_M=a", "--debug")
    assert r.returncode != 0 and "Traceback" in r.stderr and "must be integers" in r.stderr


def test_autotune_main_mistakes_exit_2(capsys):
    for argv in (["matmul", "--dry-run", "--axes", "NOPE=1"], ["attention", "--shapes", "1x1x0x16", "--dry-run"]):
        with pytest.raises(SystemExit) as e:
            at.main(argv)
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("python -m tkcourse.autotune: error:") and err.count("\n") == 1


def test_oversized_files_are_refused(tmp_path, monkeypatch):
    path, _ = _table(tmp_path)
    monkeypatch.setattr(bench.core, "MAX_RECORDS_BYTES", 100)
    with pytest.raises(bench.RecordsFormatError, match="more than a results table holds"):
        bench.load_records(path)
    p = tmp_path / "s.json"
    p.write_text(json.dumps(_sweep_dict()))
    monkeypatch.setattr(at.format, "MAX_SWEEP_BYTES", 100)
    with pytest.raises(at.SweepFormatError, match="more than a sweep holds"):
        at.load_sweep(p)
