"""The Hopper int4 kernel at prefill sizes (``solutions.kernels.gluon_int4``) and the library's route to it
(``kernels.int4_matmul`` sends ``MIN_M`` + 1 to ``MAX_M`` rows there on an H100/H200). On a CPU: the plan (the
split keeps one wave), the launch's arguments and descriptors, x's column order for ``PERMUTE_K``, that the
route is never taken, and that both kernels compile for sm_90a (Triton's wheel carries ptxas). On a Hopper GPU:
the routed calls give the lesson's answer, keep one entry a key, leave the split's tiles and counters at zero
and replay in a CUDA graph, and both kernels give the lesson's answer and the same bits call after call."""

import pytest
import torch

from solutions import int4_matmul as lesson
from solutions.kernels import gluon_int4 as gi
from solutions.kernels import int4_matmul as fast
from tkcourse import mode

HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
hopper_only = pytest.mark.skipif(not HOPPER or mode.INTERPRET, reason="Gluon's wgmma runs on an H100/H200 only")


def _problem(M, N, K, G=128, dtype=torch.float16, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(N, K, generator=g) * K ** -0.5).to(dtype).to(device)
    x = torch.randn(M, K, generator=g).to(dtype).to(device)
    packed, scales = lesson.quantize(w, G)
    return x, packed, scales


def _err(y, x, packed, scales, G=128):
    exact = x.double() @ lesson.dequantize(packed, scales, G).double().T
    return ((y.double() - exact).abs().max() / exact.abs().max()).item()


@pytest.mark.parametrize("N,K,want", [(8192, 8192, 2), (4096, 14336, 4), (14336, 4096, 1), (28672, 8192, 1),
                                      (512, 1024, 2)])
def test_the_split_keeps_one_wave(N, K, want):
    """As many programs a tile as keep them all in one wave of 132, each with 4 steps or more."""
    split = gi.split_for(128, N, K, sms=132)
    tiles = N // 128
    assert split == want and tiles * split <= max(132, tiles)
    assert (K // 2) // 64 // split >= 4 or split == 1


def test_launch_plans_the_grid_and_a_zeroed_workspace_without_a_gpu():
    gi.forget()
    x, packed, scales = _problem(100, 1024, 2048)
    y = torch.empty(100, 1024, dtype=x.dtype)
    grid, args, static, meta = gi.launch(x, packed.view(torch.int8), scales, y, 128, sms=132)
    split = meta["SPLIT_K"]
    assert split == gi.split_for(100, 1024, 2048, sms=132) == 4  # 8 tiles, 16 steps: 4 a program
    assert grid == (8 * split,) and static == (100, 1024, 2048, scales.stride(0), 1024)
    ws, counts = args[4], args[5]
    assert ws.numel() >= 8 * 128 * 128 and not ws.any() and counts.numel() >= 8 and not counts.any()
    descs = gi.descriptors(x, packed.view(torch.int8))
    assert [list(d.block_shape) for d in descs] == [[128, 64], [128, 64]]


def test_permute_k_puts_each_column_where_the_weights_byte_is_read():
    """``PERMUTE_K``: the weight's byte at offset o of its row is read as column k (the shared layout's bases),
    so x's column k must be x's original column o."""
    bases = gi._permuted_bytes(128, 64).offset_bases
    x = torch.arange(2 * 128, dtype=torch.float32).reshape(1, 256)
    xp = gi.permute_k(x)
    for o in range(64):
        k = sum(bases[b][1] for b in range(6) if o >> b & 1)
        for block in range(4):
            assert xp[0, 64 * block + k] == x[0, 64 * block + o]


def test_the_route_is_never_taken_off_hopper():
    x, packed, scales = _problem(100, 256, 1024)
    assert not gi.takes(x, packed, scales, 128)  # CPU tensors
    assert not fast._gluon_takes(x, packed, scales, 128)
    if not HOPPER:  # here the library's Triton kernel answers, and the Gluon kernel's Lean is never made
        y = fast.matmul(x.to(mode.DEVICE), packed.to(mode.DEVICE), scales.to(mode.DEVICE), 128)
        assert _err(y.cpu(), x, packed, scales) < 2e-3
        assert "int4_gluon" not in fast.LEANS


@hopper_only
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("M,N,K", [(gi.MIN_M + 1, 256, 1024), (100, 512, 4096), (128, 384, 2048),
                                   (128, 2048, 2048), (200, 256, 1024), (gi.MAX_M, 512, 2048)])
def test_routed_rows_give_the_lessons_answer_and_keep_one_entry(M, N, K, dtype):
    fast.forget()
    x, packed, scales = _problem(M, N, K, dtype=dtype, device="cuda")
    assert gi.takes(x, packed, scales, 128)
    lean = fast._gluon_lean()
    before = lean.compiles
    first, again = fast.matmul(x, packed, scales, 128), fast.matmul(x, packed, scales, 128)
    assert lean.compiles == before + 1  # the second call took the kept entry
    assert torch.equal(first, again) and _err(first, x, packed, scales) < 1e-2  # the same bits each call
    for ws, counts in gi._WS.values():  # the split's counters and atomic tiles are back at zero
        assert not counts.any()
    ws, _ = gi._WS.get((x.device, True), (torch.zeros(1),))
    assert not ws.any()
    x3 = x.reshape(1, M, K)
    assert fast.matmul(x3, packed, scales, 128).shape == (1, M, N)


@hopper_only
@pytest.mark.parametrize("M", [gi.MIN_M, gi.MAX_M + 1])
def test_rows_outside_the_route_take_the_triton_kernel(M):
    fast.forget()
    x, packed, scales = _problem(M, 256, 1024, device="cuda")
    assert not gi.takes(x, packed, scales, 128)
    y = fast.matmul(x, packed, scales, 128)
    assert _err(y, x, packed, scales) < 1e-2
    assert "int4_gluon" not in fast.LEANS or not fast.LEANS["int4_gluon"].entries


@hopper_only
def test_a_routed_call_replays_in_a_cuda_graph():
    fast.forget()
    x, packed, scales = _problem(128, 512, 4096, device="cuda")
    eager = fast.matmul(x, packed, scales, 128)  # the first call, outside the graph
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = fast.matmul(x, packed, scales, 128)
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, eager)


@pytest.mark.parametrize("pingpong", [False, True])
@pytest.mark.parametrize("dtype,split", [("fp16", 1), ("bf16", 2), ("fp16", 4)])
def test_the_kernel_compiles_for_hopper_on_any_machine(dtype, split, pingpong):
    """What only a GPU run found once (a PTX string in a module global that was not a constexpr) fails here:
    ``research/int4/compile_check.py --gluon`` builds the kernel for sm_90a with the library's DEQ 3 PTX, in a
    process of its own (compiling needs the interpreter off). Its wgmma take their left operand from
    registers, ptxas does not serialize them, and the split's epilogue adds by atomics for two partials only."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    cmd = [sys.executable, str(root / "research/int4/compile_check.py"), "--gluon", "--split", str(split),
           "--dtype", dtype]
    run = subprocess.run(cmd + (["--pingpong"] if pingpong else []), capture_output=True, text=True, timeout=300,
                         cwd=root)
    assert run.returncode == 0, run.stderr[-2000:]
    line = run.stdout.strip().splitlines()[-1]
    assert "serialized: no" in line and "left operand from registers: yes" in line, line
    assert f"atomic adds: {'yes' if split == 2 else 'no'}" in line, line
    # a wgmma's register operand is rewritten only after the wgmma is done (research/hopper/wgmma_races.py)
    assert "wgmma left in flight by a wait: none" in line and "register-operand races: none" in line, line


@hopper_only
@pytest.mark.parametrize("pingpong", [False, True])
@pytest.mark.parametrize("M,N,K,split,stages", [(1, 256, 512, 1, 3), (128, 256, 1024, 4, 4), (128, 2048, 2048, 2, 4),
                                                (128, 2048, 2048, 4, 4), (100, 512, 4096, 8, 4)])
def test_both_kernels_give_the_same_bits_call_after_call(M, N, K, split, stages, pingpong):
    """Both rungs at splits 1 to 8 and 3 or 4 stages, three calls each: the lesson's answer and the same bits.
    These are the cases where a wait that left a step's wgmma in flight while the next step's operand was
    dequantized into the same registers gave wrong sums, different from call to call, on the H200."""
    x, packed, scales = _problem(M, N, K, dtype=torch.bfloat16, device="cuda")
    config = dict(gi.CONFIG, PINGPONG=pingpong, SPLIT_K=split, STAGES=stages)
    ys = [gi.matmul(x, packed, scales, 128, config) for _ in range(3)]
    assert all(torch.equal(ys[0], y) for y in ys[1:]) and _err(ys[0], x, packed, scales) < 1e-2
    for _, counts in gi._WS.values():
        assert not counts.any()
