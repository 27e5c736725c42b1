"""What limits the int4 matmul at one row: the same weight read four ways, each timed three ways, in one run.

    PYTHONPATH=$PWD python3 research/int4/limit_probe.py [--dtype bf16] [--shapes 8192x8192 ...]

Why: every config of the sixth sweep ran within a few percent of every other at M 1 (``sweep_sixth.jsonl``),
as if one limit were common to all, and at 124-150% of a copy of the same bytes. Kernels (each at M 1):

- ``course``: ``kernels.int4_matmul`` on its recorded config (``CONFIGS[1]``), launched as ``run`` does;
- ``read``: a kernel that only reads the packed weight and scales (an xor of the words, a value a program):
  the floor of reading these bytes in Triton, grids of 2 to 8 programs an SM;
- ``cublas`` (``x @ w.T`` on the 16-bit weight) and ``copy`` (``benchmarks/int4_matmul.py``'s: half the bytes
  read, half written), the table's peers.

The first run (logs ``limit_probe_first_*.log``, the tree of the commit that added this file) also timed
three variants of the kernel since removed: its dequantization replaced by moves (wrong values, the same
loads, MMAs and stores: what the dequantization's instructions cost), the bias of the bit trick taken off
after the MMA, and the weight's tiles loaded by the TMA from a tensor descriptor.

Timings, each a CUDA graph replay (``tkcourse.bench.graph_ms``' way):

- ``zero flush``: the L2 flushed by zeroing a 256 MB buffer before each replay (``do_bench``'s way, the
  table's): the L2 is left full of dirty lines, which the kernel's reads must write back to evict;
- ``read flush``: flushed by reading that buffer instead: no line of the kernel's data in the L2, and no
  dirty line either, as a model's decode step finds it (the previous layer's weights, read, not written);
- ``back to back``: no flush (a 30 MB weight may then sit in the 50 MB L2: not a model's case).
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
# isort: off
import tkcourse  # noqa: E402, F401  (first: the mode, before triton is imported)
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
# isort: on

from benchmarks.int4_matmul import GROUP, int4_bytes  # noqa: E402
from solutions import int4_matmul as lesson  # noqa: E402
from solutions.kernels import int4_matmul as fast  # noqa: E402
from tkcourse.bench import graph_ms  # noqa: E402


@triton.jit
def read_kernel(w_ptr, out_ptr, n_words, per_program, BLOCK: tl.constexpr):
    """Reads ``per_program`` int32 words from ``pid * per_program`` (masked at ``n_words``), BLOCK at a time."""
    pid = tl.program_id(0)
    start = pid.to(tl.int64) * per_program
    acc = tl.zeros([BLOCK], tl.int32)
    for i in range(0, per_program, BLOCK):
        offs = start + i + tl.arange(0, BLOCK)
        acc ^= tl.load(w_ptr + offs, mask=offs < n_words, other=0)
    tl.store(out_ptr + pid, tl.xor_sum(acc, axis=0))


def read_call(words: torch.Tensor, programs: int, block: int, warps: int):
    n = words.numel()
    per = triton.cdiv(triton.cdiv(n, programs), block) * block
    grid = (triton.cdiv(n, per),)
    out = torch.empty(grid[0], dtype=torch.int32, device=words.device)
    return lambda: read_kernel[grid](words, out, n, per, BLOCK=block, num_warps=warps)


def timed(fn, flush: str, rep: int = 40) -> float:
    """Median microseconds of ``fn`` replayed from a CUDA graph, after the given flush."""
    if flush == "back to back":
        return triton.testing.do_bench_cudagraph(fn, rep=rep) * 1e3
    return graph_ms(fn, rep=rep, flush=flush.split()[0]) * 1e3


def problem(shape: str, M: int, dtype):
    """(N, K, the 16-bit weight, its packed int4 and scales, x of M rows, the reference output) for
    ``shape`` "NxK", drawn as ``main`` draws its first M."""
    N, K = map(int, shape.split("x"))
    g = torch.Generator(device="cpu").manual_seed(0)
    w = (torch.randn(N, K, generator=g) * 0.02).to(dtype).cuda()
    packed, scales = lesson.quantize(w, GROUP)
    x = torch.randn(M, K, generator=g).to(dtype).cuda()
    return N, K, w, packed, scales, x, lesson.reference(x, packed, scales, GROUP).float()


def time_rows(rows: dict, ref, show: int):
    """Checks each kernel's output against ``ref`` (not cuBLAS's nor a read's), times the right ones with the
    zeroing flush, and prints the fastest ``show`` and the recorded config's rows against cuBLAS."""
    out = []
    for name, fn in rows.items():
        try:
            if name != "cublas" and not name.startswith("read"):
                err = ((fn().float() - ref).abs().max() / ref.abs().max()).item()
                if err > 1e-2:
                    print(f"  {name}: WRONG rel err {err:.1e}", flush=True)
                    continue
            out.append((timed(fn, "zero flush"), name))
        except Exception as e:  # noqa: BLE001 (say what failed, and go on)
            print(f"  {name}: {type(e).__name__}: {str(e)[:160]}", flush=True)
    cub = dict((n, t) for t, n in out)["cublas"]
    for t, name in sorted(out)[:show] + [o for o in out if o[1].startswith("recorded")]:
        print(f"  {name:32s} {t:7.1f} us  {cub / t:5.2f}x cuBLAS", flush=True)


def structure(args, dtype):
    """``--structure``: the recorded M 1 tile with the loop's plumbing varied, zero flush (the table's method):
    stages (1: plain loads, no ``cp.async``; with ``PREFETCH`` the next step's bytes in registers), warps,
    rows a program and the split (x2: twice ``auto_split``'s), beside the read floor and cuBLAS."""
    base = dict(fast.CONFIGS[1])
    variants = {"recorded": base}
    for st in (1, 2, 5):
        for bn in (32, 64):
            for w in (4,):
                for pf in ((False, True) if st <= 2 else (False,)):
                    variants[f"s{st} bn{bn} w{w}{' pf' if pf else ''}"] = dict(base, num_stages=st, BLOCK_N=bn,
                                                                             num_warps=w, PREFETCH=pf)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for shape in args.shapes:
        N, K, w, packed, scales, x, ref = problem(shape, 1, dtype)
        words = packed.view(torch.int32).flatten()
        rows = {"cublas": lambda: x @ w.T, "read 8/SM b2048 w4": read_call(words, 8 * sms, 2048, 4)}
        for name, c in variants.items():
            split = fast.plan(1, N, K, GROUP, c, sms)["SPLIT_K"]
            for mult in ((1, 2) if name != "recorded" else (1,)):
                cc = dict(c, SPLIT_K=min(split * mult, (K // 2) // c["BLOCK_K"]))
                rows[f"{name} split {cc['SPLIT_K']}"] = (lambda cc: lambda: fast.run(x, packed, scales, GROUP, cc))(cc)
        print(f"structure M1 N{N} K{K} {args.dtype}", flush=True)
        time_rows(rows, ref, show=12)


def prefill(args, dtype):
    """``--prefill``: configs for M 128 beside the recorded one (the weight as the MMA's left operand, which
    ``wgmma`` takes from registers; 64-row tiles; splits), zero flush, against cuBLAS."""
    cfg = fast.config
    variants = {"recorded": dict(fast.CONFIGS[1 << 62])}
    for st in (3, 4):
        variants[f"swap 128x128 w8 s{st}"] = cfg(128, 128, 64, 0, True, 8, st, deq=3)
        variants[f"swap 128x64 w4 s{st}"] = cfg(128, 64, 64, 0, True, 4, st, deq=3)
        variants[f"x-left 128x64 w4 s{st}"] = cfg(128, 64, 64, 0, False, 4, st, deq=3)
        variants[f"swap 64x128 w8 s{st}"] = cfg(64, 128, 64, 0, True, 8, st, deq=3)
    variants["swap 128x128 w8 s3 k128"] = cfg(128, 128, 128, 0, True, 8, 3, deq=3)
    variants["swap 128x256 w8 s3"] = cfg(128, 256, 64, 0, True, 8, 3, deq=3)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for shape in args.shapes:
        N, K, w, packed, scales, x, ref = problem(shape, 128, dtype)
        rows = {"cublas": lambda: x @ w.T}
        for name, c in variants.items():
            split = fast.plan(128, N, K, GROUP, c, sms)["SPLIT_K"]
            for sp in sorted({split, max(1, split // 2), split * 2}):
                cc = dict(c, SPLIT_K=sp)
                rows[f"{name} split {sp}"] = (lambda cc: lambda: fast.run(x, packed, scales, GROUP, cc))(cc)
        print(f"prefill M128 N{N} K{K} {args.dtype}", flush=True)
        time_rows(rows, ref, show=14)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"))
    ap.add_argument("--shapes", nargs="+", default=["8192x8192", "14336x4096", "4096x14336", "28672x8192"])
    ap.add_argument("--m", type=int, nargs="+", default=[1])
    ap.add_argument("--structure", action="store_true", help="vary the loop's plumbing at M 1 (``structure``)")
    ap.add_argument("--prefill", action="store_true", help="configs at M 128 (``prefill``)")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs a GPU: the interpreter's times say nothing of one")
        return 0
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    flushes = ("zero flush", "read flush", "back to back")
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, args.dtype, flush=True)
    if args.structure:
        return structure(args, dtype)
    if args.prefill:
        return prefill(args, dtype)
    for shape in args.shapes:
        N, K = map(int, shape.split("x"))
        g = torch.Generator(device="cpu").manual_seed(0)
        w = (torch.randn(N, K, generator=g) * 0.02).to(dtype).cuda()
        packed, scales = lesson.quantize(w, GROUP)
        for M in args.m:
            x = torch.randn(M, K, generator=g).to(dtype).cuda()
            ref = lesson.reference(x, packed, scales, GROUP).float()
            cfg = dict(fast.CONFIGS[min(b for b in fast.CONFIGS if M <= b)])
            moved = int4_bytes(M, N, K, x.element_size())
            src = torch.empty(moved // 2, dtype=torch.uint8, device="cuda")
            dst = torch.empty_like(src)
            words = torch.cat([packed.view(torch.uint8).flatten(), scales.view(torch.uint8).flatten()])
            words = words[: words.numel() // 4 * 4].view(torch.int32)
            kernels = {"course": lambda: fast.run(x, packed, scales, GROUP, cfg)}
            err = ((kernels["course"]().float() - ref).abs().max() / ref.abs().max()).item()
            print(f"  course M{M} {shape}: rel err {err:.1e}", flush=True)
            sms = torch.cuda.get_device_properties(0).multi_processor_count
            for per_sm in (2, 4, 8):
                for block, warps in ((2048, 4), (4096, 8)):
                    kernels[f"read {per_sm}/SM b{block} w{warps}"] = read_call(words, per_sm * sms, block, warps)
            kernels["cublas"] = lambda: x @ w.T
            kernels["copy"] = lambda: dst.copy_(src)
            print(f"M{M} N{N} K{K} {args.dtype}: {moved / 1e6:.1f} MB moved")
            print(f"  {'kernel':24s}" + "".join(f"{f:>14s}" for f in flushes) + "   GB/s (read flush)")
            for name, fn in kernels.items():
                try:
                    t = [timed(fn, f) for f in flushes]
                except Exception as e:  # noqa: BLE001
                    print(f"  {name:24s} {type(e).__name__}: {str(e)[:200]}", flush=True)
                    continue
                print(f"  {name:24s}" + "".join(f"{v:14.1f}" for v in t) + f"   {moved / t[1] / 1e3:8.0f}", flush=True)
            del kernels
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
