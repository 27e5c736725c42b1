"""Compile ``solutions.kernels.int4_matmul``'s kernel for an H100/H200 (sm_90a) on a machine with no GPU, and
count what its main loop does: the TTGIR's loads (streamed by ``cp.async`` or waited on) and the SASS's
instructions a thread a step. No device time: Triton compiles for a target given by hand, and the wheel
ships ``ptxas`` and ``cuobjdump``.

    python research/int4/compile_check.py [CONFIG ...] [--dtype bf16|fp16] [--fp32-scales] [--out DIR]
    python research/int4/compile_check.py --gluon [--pingpong] [--split N] [--dtype bf16|fp16] [--block-m M]
        [--stages S]

CONFIG: ``recorded`` (``CONFIGS[1]``), ``deq3``, ``deq3w8``, ``large``, ``swap``, ``gemv``, ``gemv32``,
``gemv_deq1``, ``m16``, ``left16``, ``pair16``, ``pair16_128``, ``quad32``, ``quad32_w8``, ``swap128``; default all. ``--gluon``: the Hopper prefill kernel
(``solutions/kernels/gluon_int4.py``, ``--pingpong`` its ping-pong rung) at M 128, 8192 x 8192, one line:
its shared memory, registers, spills, whether ptxas serializes its wgmma (warning C7514), whether they take
their left operand from registers, whether its split-K adds by atomics, the waits that leave wgmma in
flight, and the writes of a wgmma's register operand while it may run (``research/hopper/wgmma_races.py``).
To check against the Triton the GPU machine runs (3.6), install that wheel apart and put it first on the
path:
``pip download triton==3.6.0 --no-deps -d W && pip install --no-deps --target T W/triton-*.whl`` then
``PYTHONPATH=T python research/int4/compile_check.py``.
"""
import argparse
import collections
import os
import re
import subprocess
import sys
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "0"  # compile for the GPU even without one (tkcourse would pick the interpreter)
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from research.hopper import wgmma_races  # noqa: E402
from solutions.kernels import gluon_int4 as gi  # noqa: E402
from solutions.kernels import int4_matmul as fast  # noqa: E402

CONFIGS = {
    "recorded": fast.CONFIGS[1],
    "deq3": dict(fast.CONFIGS[1], DEQ=3),
    "deq3w8": dict(fast.CONFIGS[1], DEQ=3, num_warps=8),
    "large": fast.CONFIGS[1 << 62],
    "swap": fast.config(16, 64, 128, 2, True, 4, 4),
    "gemv": fast.config(1, 64, 128, 2, False, 4, 3, dot=False, deq=2),
    "gemv32": fast.config(1, 32, 128, 2, False, 4, 3, dot=False, deq=2),
    "gemv_deq1": fast.config(1, 64, 128, 2, False, 4, 3, dot=False, deq=1),
    "m16": fast.CONFIGS[16],
    "left16": fast.config(16, 128, 128, 0, False, 4, 3, deq=3, post_scale=True),  # CONFIGS[16] before PARTS
    # 16 rows of x as two mma.sync of 8 columns on the same dequantized weight (``PARTS`` 2), 32 as four
    "pair16": fast.config(16, 64, 128, 0, True, 4, 3, deq=3, post_scale=True, parts=2),
    "pair16_128": fast.config(16, 128, 128, 0, True, 4, 3, deq=3, post_scale=True, parts=2),
    "quad32": fast.config(32, 64, 128, 0, True, 4, 3, deq=3, post_scale=True, parts=4),
    "quad32_w8": fast.config(32, 128, 128, 0, True, 8, 3, deq=3, post_scale=True, parts=4),
    "swap128": fast.config(128, 128, 64, 0, True, 8, 4, deq=3),  # M 128 with the weight as wgmma's register operand
    "large_swap": fast.config(128, 128, 64, 0, True, 8, 3, deq=3),
    "large_swap_ps": fast.config(128, 128, 64, 0, True, 8, 3, deq=3, post_scale=True),
    "large_swap4": fast.config(128, 64, 64, 0, True, 4, 3, deq=3),
}


def compile_one(cfg: dict, dtype: str, fp32_scales: bool):
    # as the plan launches it at 8192 x 8192 (SPLIT_K 0 resolved, BLOCK_M what its own rows or 128 rows need)
    c = fast.plan(cfg["BLOCK_M"] if cfg["BLOCK_M"] <= 32 else 128, 8192, 8192, 128, cfg)
    warps, stages = c.pop("num_warps"), c.pop("num_stages")
    sig = {"x_ptr": f"*{dtype}", "w_ptr": "*i8", "s_ptr": "*fp32" if fp32_scales else f"*{dtype}", "y_ptr": f"*{dtype}",
           "ws_ptr": "*fp32", "count_ptr": "*i32", "M": "i32", "N": "i32", "K": "i32", "stride_xm": "i32",
           "stride_wn": "i32", "stride_sn": "i32", "stride_ym": "i32"}
    consts = dict(GROUP=128, **c)
    # what a launch at the bench shapes specializes: every pointer, N, K and stride a multiple of 16 (the
    # scales' row stride K/128 too), but M, which the kernel asks Triton not to specialize
    runtime = list(sig)
    aligned = [i for i, name in enumerate(runtime) if name != "M"]
    for param in fast.int4_mm_kernel.params:  # constexprs left at their defaults (triton 3.7 wants them named)
        if param.is_constexpr and param.name not in consts:
            consts[param.name] = param.default
    sig.update({k: "constexpr" for k in consts})
    sig = {name: sig[name] for name in fast.int4_mm_kernel.arg_names}  # in the kernel's order
    src = ASTSource(fast.int4_mm_kernel, sig, constexprs=consts, attrs={(i,): [["tt.divisibility", 16]] for i in aligned})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=warps, num_stages=stages))


def compile_gluon(dtype: str, split: int, pingpong: bool = False, block_m: int | None = None,
                  stages: int | None = None):
    """``gluon_int4``'s kernel as ``gluon_int4.launch`` launches it on x (128, 8192) and an 8192 x 8192 weight;
    ``block_m`` and ``stages`` in place of ``CONFIG``'s."""
    import torch
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import mangle_type

    tdt = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    config = dict(gi.CONFIG, SPLIT_K=split, PINGPONG=pingpong)
    config.update({k: v for k, v in (("BLOCK_M", block_m), ("STAGES", stages)) if v})
    x, w = torch.empty(128, 8192, dtype=tdt), torch.empty(8192, 4096, dtype=torch.int8)
    xd, wd = gi.descriptors(x, w, config)
    sig = dict(x_desc=mangle_type(xd), w_desc=mangle_type(wd), s_ptr=f"*{dtype}", y_ptr=f"*{dtype}", ws_ptr="*fp32",
               count_ptr="*i32", M="i32", N="i32", K="i32", stride_sn="i32", stride_ym="i32")
    _, _, _, meta = gi.launch(x, w, torch.empty(8192, 64, dtype=tdt), torch.empty(128, 8192, dtype=tdt), 128, config,
                              sms=132)
    kernel = gi.kernel_for(config)
    consts = {p.name: meta.get(p.name, p.default) for p in kernel.params if p.is_constexpr}
    sig.update({name: "constexpr" for name in consts})
    src = GluonASTSource(kernel, {n: sig[n] for n in kernel.arg_names}, constexprs=consts,
                         attrs={(i,): [["tt.divisibility", 16]] for i in range(2, 11) if i != 6})  # all but M
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=meta["num_warps"]))


def gluon_report(dtype: str, split: int, pingpong: bool, workdir: Path, block_m=None, stages=None) -> str:
    k = compile_gluon(dtype, split, pingpong, block_m, stages)
    ptx = k.asm["ptx"]
    bindir = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    (workdir / "g.ptx").write_text(ptx)
    info = subprocess.run([bindir / "ptxas", "-arch=sm_90a", "-v", "-o", workdir / "g.cubin", workdir / "g.ptx"],
                          capture_output=True, text=True).stderr
    regs = re.search(r"Used (\d+) registers", info)
    spills = max((int(b) for b in re.findall(r"(\d+) bytes spill stores", info)), default=0)
    mma = [line for line in ptx.splitlines() if "wgmma.mma_async" in line]
    # the operands after the accumulator: a list of registers (the left one), then a descriptor (the right)
    from_registers = bool(mma) and all(re.search(r"\}, \{%r\d+(,%r\d+){3}\}, %rd\d+", line) for line in mma)
    atomic = bool(re.search(r"atom\.global\.[\w.]*add\.(?:v2\.)?f32", ptx))
    # a wait that leaves wgmma in flight lets the next step's dequantization rewrite their operand's registers
    pending = sorted({int(n) for n in re.findall(r"wgmma\.wait_group\.sync\.aligned (\d+)", ptx)} - {0})
    races = len(wgmma_races.races(wgmma_races.sass_of(workdir / "g.cubin")))
    yes = {True: "yes", False: "no"}
    tile = f" BLOCK_M {block_m}" if block_m else ""
    tile += f" STAGES {stages}" if stages else ""
    return (f"gluon {'pingpong' if pingpong else 'default'}{tile} split {split} {dtype}: shared {k.metadata.shared} B, "
            f"{regs and regs.group(1)} registers, spills {spills} B, wgmma x{len(mma)}, serialized: "
            f"{yes['C7514' in info]}, left operand from registers: {yes[from_registers]}, atomic adds: {yes[atomic]}, "
            f"wgmma left in flight by a wait: {', '.join(map(str, pending)) or 'none'}, "
            f"register-operand races: {races or 'none'}")


def loop_counts(ptx: str, workdir: Path):
    """(registers, instructions in the longest loop, the commonest opcodes there) of the PTX's SASS."""
    bindir = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    (workdir / "k.ptx").write_text(ptx)
    info = subprocess.run([bindir / "ptxas", "-arch=sm_90a", "-v", "-o", workdir / "k.cubin", workdir / "k.ptx"],
                          capture_output=True, text=True).stderr
    regs = re.search(r"Used (\d+) registers", info)
    sass = subprocess.run([bindir / "cuobjdump", "-sass", workdir / "k.cubin"], capture_output=True, text=True).stdout
    ins = [(int(m.group(1), 16), m.group(2).strip()) for m in re.finditer(r"/\*([0-9a-f]{4})\*/\s+(.*?);", sass)]
    back = [(int(m.group(1), 16), a) for a, t in ins if (m := re.search(r"BRA (0x[0-9a-f]+)", t)) and int(m.group(1), 16) < a]
    if not back:
        return regs and int(regs.group(1)), 0, []
    start, end = max(back, key=lambda p: p[1] - p[0])
    loop = [t for a, t in ins if start <= a <= end]
    ops = collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", t).split()[0].split(".")[0] for t in loop)
    return regs and int(regs.group(1)), len(loop), ops.most_common(8)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("configs", nargs="*", default=list(CONFIGS))
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"))
    ap.add_argument("--fp32-scales", action="store_true")
    ap.add_argument("--out", default="/tmp/int4_compile")
    ap.add_argument("--gluon", action="store_true", help="the Hopper prefill kernel (gluon_int4) instead")
    ap.add_argument("--pingpong", action="store_true", help="with --gluon: its ping-pong rung")
    ap.add_argument("--split", type=int, default=1, help="with --gluon: SPLIT_K")
    ap.add_argument("--block-m", type=int, default=None, help="with --gluon: BLOCK_M (rows of x a tile)")
    ap.add_argument("--stages", type=int, default=None, help="with --gluon: STAGES")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.gluon:
        print(f"triton {triton.__version__}, sm_90a")
        print(gluon_report(args.dtype, args.split, args.pingpong, out, args.block_m, args.stages))
        return
    print(f"triton {triton.__version__}, sm_90a, {args.dtype}, scales {'fp32' if args.fp32_scales else args.dtype}")
    for name in args.configs:
        k = compile_one(CONFIGS[name], args.dtype, args.fp32_scales)
        (out / f"{name}.ttgir").write_text(k.asm["ttgir"])
        ttgir = k.asm["ttgir"]
        regs, n, ops = loop_counts(k.asm["ptx"], out)
        ptx = k.asm["ptx"]
        # wgmma's waits: "pendings = 0" in the loop is an MMA waited for before the next step's work begins
        waits = re.findall(r"warp_group_dot_wait.*?pendings = (\d+)", ttgir)
        mma = (f"wgmma x{ptx.count('wgmma.mma_async')}, waits leave {sorted(set(map(int, waits)))} in flight"
               if "wgmma.mma_async" in ptx else f"mma.sync x{ptx.count('mma.sync')}")
        print(f"{name:9s} shared {k.metadata.shared:6d} B, {regs} registers; loads streamed "
              f"{ttgir.count('async_copy_global_to_local')}, waited on {ttgir.count('tt.load')}; {mma}; "
              f"loop {n} instructions a thread a step: {ops}")


if __name__ == "__main__":
    main()
