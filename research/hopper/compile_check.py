"""Compile the Gluon kernels of the Hopper lesson (``solutions/kernels/gluon_matmul.py`` and
``gluon_attention.py``) for an H100/H200 (sm_90a) on a machine with no GPU:
that they build, their shared memory, how many wgmma and waits their PTX holds, and whether ptxas
serializes their wgmma (its warning C7514: a non-wgmma instruction reads an accumulator while a wgmma may
be in flight, and every wgmma of the kernel then waits for the one before).

    python research/hopper/compile_check.py [--pingpong [--persistent] [--early]] [--backward]

Each attention line ends with the count of writes of a wgmma's register operand while that wgmma may still
run (``wgmma_races.py``). ``--pingpong``: only the routed ping-pong attention rung (8 compiles);
``--pingpong --persistent``: its persistent launch too (one program an SM, tile after tile: the library's at short
lengths); ``--pingpong --early``: each launch with ``EARLY`` on too, with ptxas's registers and spills.
``--backward``: the library's Gluon attention backward (``gluon_attention_backward.py``) at fp16/bf16 x
D 64/128 x causal or not, with ptxas's registers and spills.

With the GPU machine's Triton (3.6) installed apart, ``PYTHONPATH=T python ...`` checks that version
(``research/int4/compile_check.py`` says how to install it).
"""
import inspect
import itertools
import os
import re
import sys
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "0"  # compile for the GPU even without one
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout, for solutions/

import torch  # noqa: E402
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.experimental.gluon._runtime import GluonASTSource  # noqa: E402
from triton.runtime.jit import mangle_type  # noqa: E402

from research.hopper import wgmma_races  # noqa: E402
from solutions.kernels import gluon_attention as ga  # noqa: E402
from solutions.kernels import gluon_attention_backward as gab  # noqa: E402
from solutions.kernels import gluon_matmul as gm  # noqa: E402


def compile_matmul(dtype=torch.float16, cfg=gm.CONFIG, M=4096, N=4096, K=4096, kernel=None):
    a, b, c = (torch.empty(shape, dtype=dtype) for shape in ((M, K), (K, N), (M, N)))  # CPU: only their types
    descs = gm.descriptors(a, b, c, cfg)
    sig = {name: mangle_type(d) for name, d in zip(("a_desc", "b_desc", "c_desc"), descs)}
    sig["K"] = "i32"
    meta = {k: v for k, v in cfg.items() if not k.startswith("BLOCK") and k != "num_warps"}
    sig.update({k: "constexpr" for k in meta} | {"num_warps": "constexpr"})
    src = GluonASTSource(kernel or gm.matmul_kernel, sig, constexprs=dict(meta, num_warps=cfg["num_warps"]),
                         attrs={(3,): [["tt.divisibility", 16]]})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=cfg["num_warps"]))


def compile_attention(dtype=torch.float16, cfg=ga.CONFIG, B=2, H=4, N=4096, D=128, causal=False, kernel=None):
    q = torch.empty(B, H, N, D, dtype=dtype)
    descs = ga.descriptors(q, q, q, q, cfg)
    sig = {name: mangle_type(d) for name, d in zip(("q_desc", "k_desc", "v_desc", "o_desc"), descs)}
    sig.update(N="i32", sm_scale="fp32", CAUSAL="constexpr", STAGES="constexpr", num_warps="constexpr")
    consts = dict(CAUSAL=causal, STAGES=cfg["STAGES"], num_warps=cfg["num_warps"])
    kernel = kernel or ga.attention_fwd_kernel
    for key in ("MASK_ALL", "REVERSE", "PERSISTENT", "EARLY"):  # the ping-pong rung's switches, where the config sets them
        if key in cfg:
            sig[key], consts[key] = "constexpr", cfg[key]
    if "GROUP" in kernel.arg_names:  # grouped-query heads: one K/V head for 4 here
        sig["GROUP"], consts["GROUP"] = "constexpr", 4
    if "LSE" in kernel.arg_names:  # the ping-pong rung writes each row's log-sum-exp
        sig["LSE"] = "*fp32"
    for param in kernel.params:  # constexprs left at their defaults (triton 3.7 takes no default here)
        if param.is_constexpr and param.name not in sig and param.default is not inspect.Parameter.empty:
            sig[param.name], consts[param.name] = "constexpr", param.default
    sig = {name: sig[name] for name in kernel.arg_names if name in sig}  # in the kernel's order
    src = GluonASTSource(kernel, sig, constexprs=consts,
                         attrs={(4,): [["tt.divisibility", 16]]})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=cfg["num_warps"]))


def compile_backward(dtype=torch.float16, D=128, causal=False, cfg=gab.CONFIG, B=2, H=4, N=4096):
    """The Gluon attention backward compiled for sm_90a from CPU tensors' types (no GPU needed)."""
    q = torch.empty(B, H, N, D, dtype=dtype)
    lse = torch.empty(B, H, N, dtype=torch.float32)
    descs = gab.descriptors(q, q, q, q, q, q, lse, lse, cfg)
    names = ("q_desc", "k_desc", "v_desc", "do_desc", "dk_desc", "dv_desc", "lse_desc", "delta_desc")
    sig = {name: mangle_type(d) for name, d in zip(names, descs)}
    sig.update(DQ="*fp32", N="i32", sm_scale="fp32", CAUSAL="constexpr", STAGES="constexpr", STAGGER="constexpr",
               num_warps="constexpr")
    consts = dict(CAUSAL=causal, STAGES=cfg["STAGES"], STAGGER=cfg["STAGGER"], num_warps=cfg["num_warps"])
    kernel = gab.attention_bwd_kernel
    sig = {name: sig[name] for name in kernel.arg_names}
    src = GluonASTSource(kernel, sig, constexprs=consts,
                         attrs={(8,): [["tt.divisibility", 16]], (9,): [["tt.divisibility", 16]]})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=cfg["num_warps"]))


def ptxas_summary(ptx: str) -> str:
    """ptxas -v's registers and spills of each function, C7514 / C7512 (serialized wgmma; C7512 for want of
    registers) and the SASS's wgmma register-operand races."""
    info, sass = ptxas(ptx)
    used = re.findall(r"Used (\d+) registers", info)
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", info)
    spill = ", ".join(f"{st}/{ld}" for st, ld in spills) or "?"
    races = wgmma_races.races(sass)
    serial = [c for c in ("C7514", "C7512") if c in info]
    return (f"registers {'/'.join(used) or '?'} at launch, spill stores/loads {spill} bytes"
            f"{', SERIALIZED by ptxas (' + ', '.join(serial) + ')' if serial else ', wgmma not serialized'}"
            f", wgmma register-operand races: {len(races) if races else 'none'}")


def ptxas(ptx: str) -> tuple[str, str]:
    """``(ptxas -v's report, the cubin's SASS)`` of the PTX for sm_90a, with the tools Triton's wheel carries."""
    import subprocess
    import tempfile

    ptxas_bin = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "k.ptx").write_text(ptx)
        info = subprocess.run([ptxas_bin, "-arch=sm_90a", "-v", "-o", Path(tmp) / "k.cubin", Path(tmp) / "k.ptx"],
                              capture_output=True, text=True).stderr
        return info, wgmma_races.sass_of(Path(tmp) / "k.cubin")


def report(ptx: str) -> str:
    """What ptxas says of the PTX: serialized wgmma, and register operands rewritten in flight."""
    info, sass = ptxas(ptx)
    n = len(wgmma_races.races(sass))
    return (f"{', SERIALIZED by ptxas (C7514)' if 'C7514' in info else ''}"
            f", wgmma register-operand races: {n if n else 'none'}")


def main(argv=()):
    print("triton", triton.__version__)
    if "--backward" in argv:
        for dtype, D, causal in itertools.product((torch.float16, torch.bfloat16), gab.HEAD_DIMS, (False, True)):
            k = compile_backward(dtype, D, causal)
            print(f"backward {str(dtype)[6:]} D {D}{' causal' if causal else ''}: shared {k.metadata.shared} bytes, "
                  f"{ptxas_summary(k.asm['ptx'])}", flush=True)
        return
    if "--pingpong" in argv:
        launches = [("", ga.PP_CONFIG)] + ([(" persistent", ga.LIBRARY_CONFIG)] if "--persistent" in argv else [])
        if "--early" in argv:  # each softmax under its own warpgroup's last P V
            launches += [(f"{how} early", dict(cfg, EARLY=True)) for how, cfg in launches]
        for (how, cfg), dtype, D, causal in itertools.product(launches, (torch.float16, torch.bfloat16), (64, 128),
                                                              (False, True)):
            k = compile_attention(dtype, cfg, D=D, causal=causal, kernel=ga.attention_pingpong_kernel)
            what = f", {ptxas_summary(k.asm['ptx'])}" if "--early" in argv else report(k.asm["ptx"])
            print(f"ping-pong{how} {str(dtype)[6:]} D {D}{' causal' if causal else ''}: shared {k.metadata.shared} "
                  f"bytes{what}", flush=True)
        return
    rungs = (("pipelined", gm.matmul_kernel, gm.CONFIG), ("persistent, warp-specialized", gm.matmul_ws_kernel, gm.WS_CONFIG))
    for (name, kernel, cfg), dtype in itertools.product(rungs, (torch.float16, torch.bfloat16)):
        k = compile_matmul(dtype, cfg, kernel=kernel)
        ptx = k.asm["ptx"]
        print(f"{name} {str(dtype)[6:]}: shared {k.metadata.shared} bytes, "
              f"wgmma {len(re.findall(r'wgmma.mma_async', ptx))}, wgmma.wait_group {len(re.findall(r'wgmma.wait_group', ptx))}, "
              f"TMA loads {len(re.findall(r'cp.async.bulk.tensor', ptx))}, mbarrier waits "
              f"{len(re.findall(r'mbarrier.try_wait', ptx))}")
    attention = (("attention", ga.attention_fwd_kernel, ga.CONFIG),
                 ("attention, warp-specialized", ga.attention_ws_kernel, ga.CONFIG),
                 ("attention, overlapped", ga.attention_overlap_kernel, ga.CONFIG),
                 ("attention, ping-pong", ga.attention_pingpong_kernel, ga.PP_CONFIG),
                 ("attention, ping-pong, diagonal masked only", ga.attention_pingpong_kernel,
                  dict(ga.PP_CONFIG, MASK_ALL=False)))
    for (name, kernel, cfg), dtype, D, causal in itertools.product(attention, (torch.float16, torch.bfloat16),
                                                                   (64, 128), (False, True)):
        k = compile_attention(dtype, cfg, D=D, causal=causal, kernel=kernel)
        ptx = k.asm["ptx"]
        print(f"{name} {str(dtype)[6:]} D {D}{' causal' if causal else ''}: shared {k.metadata.shared} bytes, "
              f"wgmma {len(re.findall(r'wgmma.mma_async', ptx))}, wgmma.wait_group {len(re.findall(r'wgmma.wait_group', ptx))}"
              f"{report(ptx)}")


if __name__ == "__main__":
    main(sys.argv[1:])
