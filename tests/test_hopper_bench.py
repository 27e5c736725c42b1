"""Lesson 12's benchmark (``benchmarks/hopper.py``) and the Gluon launchers' checks, on any machine: the cases
are built (their tensors are made only when a case is first measured), never run, and the launchers
refuse what they cannot take before anything reaches Triton."""

from __future__ import annotations

import ast
import collections
import time
from pathlib import Path

import pytest
import torch

from benchmarks import hopper
from solutions.kernels import gluon_attention as ga
from solutions.kernels import gluon_matmul as gm
from tkcourse.bench import attention_flops, matmul_flops

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def rows():
    """``{(kernel, shape, dtype): [cases]}`` in the order ``cases()`` gives them, and the seconds it took."""
    start = time.perf_counter()
    out = collections.defaultdict(list)
    for c in hopper.cases():
        out[(c.kernel, c.shape, c.dtype)].append(c)
    return out, time.perf_counter() - start


def test_cases_are_built_without_tensors(rows):
    """Building every case makes no tensor (on a GPU none is allocated) and takes well under a second."""
    before = torch.cuda.memory_allocated() if torch.cuda.is_available() else 0
    _, seconds = rows
    list(hopper.cases())
    assert seconds < 2.0
    assert (torch.cuda.memory_allocated() if torch.cuda.is_available() else 0) == before


def test_every_shape_has_its_peer_and_unique_providers(rows):
    groups, _ = rows
    assert {kernel for kernel, _, _ in groups} == set(hopper.PEERS)
    for (kernel, shape, dtype), cs in groups.items():
        names = [c.provider for c in cs]
        assert hopper.PEERS[kernel] in names, (kernel, shape, dtype, names)
        assert len(set(names)) == len(names), (kernel, shape, dtype, names)


def test_matmul_rows():
    groups = collections.defaultdict(list)
    for c in hopper.cases():
        if c.kernel == hopper.MATMUL_KERNEL:
            groups[(c.shape, c.dtype)].append(c)
    assert set(groups) == {(f"{n}x{n}x{n}", d) for n in (2048, 4096, 8192) for d in ("float16", "bfloat16")}
    for (shape, _), cs in groups.items():
        n = int(shape.split("x")[0])
        assert [c.provider for c in cs] == ["gluon_ws", "gluon", "persistent", "cublas"]
        assert all(c.flops == matmul_flops(n, n, n) and c.metric == "TFLOP/s" for c in cs)


def test_attention_rows():
    """Lesson 06's shapes and names, fp16 and bf16; every Gluon rung at each (they all take D 64 and 128 and
    N a multiple of 128) beside cuDNN; the course's Triton forward at its dtypes and head dims, after the rest."""
    cs = [c for c in hopper.cases() if c.kernel == hopper.ATTENTION_KERNEL]
    shapes = {(c.shape, c.dtype) for c in cs}
    expected = {(f"B{16384 // n}-H{2048 // d}-N{n}-D{d}{suffix}", dt) for n in (1024, 4096, 16384) for d in (64, 128)
                for suffix in ("", "-causal") for dt in ("float16", "bfloat16")}
    assert shapes == expected
    by_shape = collections.defaultdict(list)
    for c in cs:
        by_shape[(c.shape, c.dtype)].append(c.provider)
        B, H, N, D = (int(part[1:]) for part in c.shape.split("-")[:4])
        assert c.flops == attention_flops(B, H, N, D, c.shape.endswith("-causal"))
    for (shape, dtype), names in by_shape.items():
        gluon = [n for n in names if n.startswith("gluon_")]
        assert gluon == list(hopper.GLUON_RUNGS) and "sdpa-cudnn" in names, (shape, dtype, names)
        with_triton = (dtype in [str(d).replace("torch.", "") for d in hopper.TRITON_DTYPES]
                       and int(shape.split("-")[3][1:]) in hopper.TRITON_HEAD_DIMS)
        assert names.count("triton") == with_triton, (shape, dtype, names)
    providers = [c.provider for c in cs]
    first_triton = providers.index("triton")
    assert set(providers[first_triton:]) == {"triton"}  # last: a run stopped by its time limit loses only them


def test_a_rung_that_cannot_take_a_shape_is_left_out():
    assert list(hopper.attention_providers(1, 2, 192, 64, torch.float16)) == ["sdpa-cudnn"]  # N not a multiple of 128
    assert list(hopper.attention_providers(1, 2, 256, 96, torch.float16)) == ["sdpa-cudnn"]  # D 96
    assert list(hopper.attention_providers(1, 2, 256, 64, torch.bfloat16)) == [*hopper.GLUON_RUNGS, "sdpa-cudnn"]


def test_the_lessons_matmul_is_imported_at_its_first_call():
    """``solutions/hopper.py`` may not exist yet: the benchmark names it only inside a function."""
    tree = ast.parse((ROOT / "benchmarks" / "hopper.py").read_text())
    top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert not [n for n in top if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("solutions")]
    assert not [a.name for n in top if isinstance(n, ast.Import) for a in n.names if a.name.startswith("solutions")]


def test_gluon_cases_reach_the_launchers():
    """A matmul case's call goes through its launcher: on CPU tensors, the launcher's error."""
    for c in hopper.matmul_cases(torch.float16, 64, device="cpu"):
        if c.provider.startswith("gluon"):
            with pytest.raises(ValueError, match="is on cpu"):
                c.fn()


@pytest.mark.parametrize("launch", [gm.matmul, gm.matmul_ws], ids=["matmul", "matmul_ws"])
def test_matmul_launchers_say_what_is_wrong(launch):
    a = torch.randn(64, 32, dtype=torch.float16)
    b = torch.randn(32, 48, dtype=torch.float16)
    with pytest.raises(ValueError, match=r"a is on cpu.*\.cuda\(\)"):
        launch(a, b)
    with pytest.raises(ValueError, match="float16 or bfloat16"):
        launch(a.float(), b)
    with pytest.raises(ValueError, match="a has dtype torch.float16 but b has torch.bfloat16"):
        launch(a, b.bfloat16())
    with pytest.raises(ValueError, match="K"):
        launch(a, b.T)
    with pytest.raises(ValueError, match="multiples of 8"):
        launch(a[:, :30], b[:30])
    with pytest.raises(ValueError, match="must be 2-D"):
        launch(a[None], b)
    with pytest.raises(ValueError, match="torch.Tensor"):
        launch([[1.0]], b)
    with pytest.raises(ValueError, match="STAGES"):
        launch(a, b, config=dict(gm.CONFIG, STAGES=1))


def test_attention_launcher_says_what_is_wrong():
    q = torch.randn(1, 4, 256, 64, dtype=torch.float16)
    kv = torch.randn(1, 2, 256, 64, dtype=torch.float16)
    for _, kernel, _ in ga.RUNGS:
        with pytest.raises(ValueError, match=r"q is on cpu.*\.cuda\(\)"):
            ga.attention_forward(q, q, q, kernel=kernel)
    with pytest.raises(ValueError, match="overlapped and ping-pong rungs take grouped-query heads"):
        ga.attention_forward(q, kv, kv)  # the warp-specialized rung: one K/V head a query head
    with pytest.raises(ValueError, match="q is on cpu"):
        ga.attention_forward(q, kv, kv, kernel=ga.attention_overlap_kernel)
    with pytest.raises(ValueError, match="N = 192"):
        ga.attention_forward(q[:, :, :192], q[:, :, :192], q[:, :, :192])
    with pytest.raises(ValueError, match="head dims 64 or 128"):
        ga.attention_forward(q[..., :32], q[..., :32], q[..., :32])
    with pytest.raises(ValueError, match="float16 or bfloat16"):
        ga.attention_forward(q.float(), q.float(), q.float())
    with pytest.raises(ValueError, match="k is"):
        ga.attention_forward(q, q[:, :, :128], q[:, :, :128])
    with pytest.raises(TypeError, match="causal"):
        ga.attention_forward(q, q, q, causal="yes")
    with pytest.raises(ValueError, match="16 \\* num_warps"):
        ga.attention_forward(q, q, q, config=dict(BLOCK_M=64, BLOCK_N=128, STAGES=2, num_warps=8))
    with pytest.raises(ValueError, match="only the ping-pong rung writes the log-sum-exp, not the warp-specialized"):
        ga.attention_forward(q, q, q, return_lse=True)
    with pytest.raises(TypeError, match="return_lse"):
        ga.attention_forward(q, q, q, kernel=ga.attention_pingpong_kernel, return_lse="yes")


def test_descriptors_need_no_gpu():
    """``research/hopper/compile_check.py`` builds the launch's descriptors from CPU tensors."""
    a = torch.empty(256, 128, dtype=torch.bfloat16)
    descs = gm.descriptors(a, torch.empty(128, 512, dtype=torch.bfloat16), torch.empty(256, 512, dtype=torch.bfloat16))
    assert [d.block_shape for d in descs] == [[128, 64], [64, 256], [128, 256]]
    q = torch.empty(1, 2, 256, 64, dtype=torch.float16)
    assert [d.block_shape for d in ga.descriptors(q, q, q, q, ga.PP_CONFIG)] == [[64, 64], [128, 64], [128, 64], [64, 64]]


def test_launch_plan_needs_no_gpu():
    """``launch_plan``, the one home of a Gluon attention launch's grid, arguments and constexprs (the lesson's
    launcher and the kernel library's lean entry both take it): two query tiles a ping-pong program, one K/V head
    for ``GROUP`` query heads, the config's constexprs and none of its blocks."""
    q, kv = torch.empty(2, 8, 256, 64, dtype=torch.float16), torch.empty(2, 2, 256, 64, dtype=torch.float16)
    grid, args, meta = ga.launch_plan(q, kv, kv, q, True, 0.125, ga.attention_pingpong_kernel, ga.PP_CONFIG)
    assert grid == (256 // 128, 16) and args[4:] == (256, 0.125)
    assert [d.block_shape for d in args[:4]] == [[64, 64], [128, 64], [128, 64], [64, 64]]
    assert meta == dict(STAGES=ga.PP_CONFIG["STAGES"], num_warps=ga.PP_CONFIG["num_warps"], CAUSAL=True, GROUP=4)
    grid, args, meta = ga.launch_plan(q, q, q, q, False, 0.125, ga.attention_ws_kernel, ga.CONFIG)
    assert grid == (256 // ga.CONFIG["BLOCK_M"], 16) and "GROUP" not in meta and meta["CAUSAL"] is False


def test_pingpong_reverse_order_is_a_config_key():
    """``REVERSE`` (the ping-pong rung's query tiles heaviest first, ``research/hopper/order_probe.py``): a config
    key the checks take and the launch passes on as a constexpr; off unless asked for, in the kernel and in both
    partitions, so that the default launch is the one recorded."""
    q = torch.empty(1, 4, 512, 64, dtype=torch.float16)
    pp = ga.attention_pingpong_kernel
    assert ga.shape_problem(1, 4, 4, 512, 64, torch.float16, pp, dict(ga.PP_CONFIG, REVERSE=True)) is None
    assert ga.shape_problem(1, 4, 4, 512, 64, torch.float16, pp, dict(ga.PP_CONFIG, REVERSE=0)) is None
    with pytest.raises(TypeError, match=r"config\['REVERSE'\] must be True or False"):
        ga.shape_problem(1, 4, 4, 512, 64, torch.float16, pp, dict(ga.PP_CONFIG, REVERSE="yes"))
    grid, _, meta = ga.launch_plan(q, q, q, q, True, 0.125, pp, dict(ga.PP_CONFIG, REVERSE=True))
    assert grid == (512 // 128, 4) and meta["REVERSE"] is True and meta["CAUSAL"] is True
    assert "REVERSE" not in ga.launch_plan(q, q, q, q, True, 0.125, pp, ga.PP_CONFIG)[2]
    for fn in (pp, ga.pingpong_consumer, ga.pingpong_producer):
        assert [p.default for p in fn.params if p.name == "REVERSE"] == [False], fn
        assert [p.default for p in fn.params if p.name == "PERSISTENT"] == [False], fn


def test_the_library_launches_the_pingpong_rung_persistent():
    """``LIBRARY_CONFIG``: the lesson's ping-pong tile with ``PERSISTENT`` (one program an SM dealt tile after
    tile), a constexpr of the launch; the plan's grid is one column of at most the GPU's SMs (on CPU tensors,
    where no launch follows, a program a tile)."""
    assert ga.LIBRARY_CONFIG == dict(ga.PP_CONFIG, PERSISTENT=True)
    q = torch.empty(2, 8, 1024, 64, dtype=torch.float16)
    grid, _, meta = ga.launch_plan(q, q, q, q, True, 0.125, ga.attention_pingpong_kernel, ga.LIBRARY_CONFIG)
    assert grid == (1024 // 128 * 16, 1) and meta["PERSISTENT"] is True
    assert ga.shape_problem(2, 8, 8, 1024, 64, torch.float16, ga.attention_pingpong_kernel, ga.LIBRARY_CONFIG) is None


def test_the_routed_pingpong_attention_never_rewrites_a_wgmma_operand_in_flight():
    """The library's ping-pong attention (both launches, a program a tile and persistent; every dtype, head dim
    and mask), compiled for sm_90a in a process of its own: no write of a wgmma's register operand (P, for P V) before the wgmma is retired
    (``research/hopper/wgmma_races.py``), the race that gave wrong int4 sums on the H200."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    run = subprocess.run([sys.executable, str(root / "research/hopper/compile_check.py"), "--pingpong",
                          "--persistent"],
                         capture_output=True, text=True, timeout=600, cwd=root)
    assert run.returncode == 0, run.stderr[-2000:]
    lines = [line for line in run.stdout.splitlines() if line.startswith("ping-pong")]
    assert len(lines) == 16 and all(line.endswith("register-operand races: none") for line in lines), run.stdout
    assert sum(" persistent " in line for line in lines) == 8, run.stdout
