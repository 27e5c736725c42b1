"""Probe (GPU only, under 2 minutes): the small kernels of a decode step behind lean launches, against
the torch ops a model runs.

Asks, on one GPU in one run:
C. Correctness in fp16 and bf16 of RoPE (new tensors and in place on views of a fused QKV output),
   SwiGLU (fused and two tensors), RMSNorm + residual and the fused softmax, against their torch
   references; and a CUDA graph of RoPE and SwiGLU replayed after the inputs (positions included)
   changed in place, as a captured decode step replays them.
H. Each row of ``benchmarks/decode_step.py``: host microseconds a call (``host_us_interleaved``: the
   row's providers in turns), eager (``do_bench``'s median) and CUDA-graph microseconds, and the ratio of
   the course's kernel to torch's op last (host: the figure the lean launch is for; under 1.5 is the goal).
P. The softmax's lean call at 4096 x 1024 fp16 in pieces, interleaved with torch.softmax: the key, the
   table lookup, the launch-hook check, the output's allocation, the kept entry's launch alone, the
   whole call. What the Python around the launch costs, against what torch's own call costs.

    python research/launch/small_kernels_probe.py [OUT_DIR] [C H P]

Prints a table; with OUT_DIR, writes ``small_kernels_probe.json`` there too.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
import triton

from benchmarks import decode_step as ds
from solutions import kernels as K
from solutions import rmsnorm as rn
from solutions import softmax as sm
from solutions.kernels import lean as launch_lean
from solutions.kernels.rmsnorm import rmsnorm
from solutions.kernels.rope import rope, rope_reference, rope_tables
from solutions.kernels.softmax import softmax
from solutions.kernels.swiglu import swiglu, swiglu_reference
from tkcourse.bench import graph_ms, host_us_interleaved, measure

ARGS = [a for a in sys.argv[1:] if a not in ("C", "H", "P")]
OUT = Path(ARGS[0]) if ARGS else None
PARTS = {a for a in sys.argv[1:] if a in ("C", "H", "P")} or {"C", "H", "P"}
ROWS: list[dict] = []
DEV = torch.device("cuda")
TOL = {torch.float16: dict(rtol=4e-3, atol=8e-3), torch.bfloat16: dict(rtol=2e-2, atol=4e-2)}


def check(name, got, want, dtype):
    try:
        torch.testing.assert_close(got.float(), want.float(), **TOL[dtype])
        ok, err = True, (got.float() - want.float()).abs().max().item()
    except AssertionError as exc:
        ok, err = False, str(exc).splitlines()[-1][:120]
    ROWS.append(dict(part="C", name=name, dtype=str(dtype)[6:], ok=ok, err=err))
    print(f"C {name:44s} {str(dtype)[6:]:9s} {'ok' if ok else 'WRONG'}  max err {err}", flush=True)


def part_c():
    for dtype in (torch.float16, torch.bfloat16):
        B, T, HQ, HKV, D = 3, 5, 32, 8, 128
        q = torch.randn(B, T, HQ, D, dtype=dtype, device=DEV)
        k = torch.randn(B, T, HKV, D, dtype=dtype, device=DEV)
        cos, sin = rope_tables(4096, D, device=DEV)
        pos = torch.randint(0, 4096, (B, T), device=DEV)
        want = rope_reference(q, k, cos, sin, pos)
        for _ in range(2):
            got = rope(q, k, cos, sin, pos)
        check("rope q (3, 5, 32, 128)", got[0], want[0], dtype)
        check("rope k (3, 5, 8, 128)", got[1], want[1], dtype)
        qkv = torch.randn(B, T, (HQ + 2 * HKV) * D, dtype=dtype, device=DEV)
        heads = qkv.view(B, T, HQ + 2 * HKV, D)
        qv, kv, vv = heads[:, :, :HQ], heads[:, :, HQ:HQ + HKV], heads[:, :, HQ + HKV:]
        want, v0 = rope_reference(qv, kv, cos, sin, pos), vv.clone()
        rope(qv, kv, cos, sin, pos, inplace=True)
        check("rope in place on a fused qkv: q", qv, want[0], dtype)
        check("rope in place on a fused qkv: k", kv, want[1], dtype)
        check("rope in place on a fused qkv: v untouched", vv, v0, dtype)
        gu = torch.randn(8, 2 * 14336, dtype=dtype, device=DEV) * 3
        for _ in range(2):
            got = swiglu(gu)
        check("swiglu fused (8, 2 x 14336)", got, swiglu_reference(gu), dtype)
        g, u = torch.randn(5, 3, 1000, dtype=dtype, device=DEV), torch.randn(5, 3, 1000, dtype=dtype, device=DEV)
        check("swiglu two tensors (5, 3, 1000)", swiglu(g, u), swiglu_reference(g, u), dtype)
        x, r = torch.randn(8, 4096, dtype=dtype, device=DEV), torch.randn(8, 4096, dtype=dtype, device=DEV)
        w = 1 + 0.1 * torch.randn(4096, dtype=dtype, device=DEV)
        for _ in range(2):
            y, h = rmsnorm(x, w, 1e-6, residual=r)
        want = rn.reference(x, w, 1e-6, r)
        check("rmsnorm + residual (8, 4096): y", y, want[0], dtype)
        check("rmsnorm + residual (8, 4096): h", h, want[1], dtype)
        xs = torch.randn(4096, 1024, dtype=dtype, device=DEV)
        for _ in range(2):
            got = softmax(xs)
        check("softmax (4096, 1024)", got, sm.reference(xs), dtype)
        # a captured decode step: new inputs written in place, the graph replayed
        q1, k1 = torch.randn(8, 1, HQ, D, dtype=dtype, device=DEV), torch.randn(8, 1, HKV, D, dtype=dtype, device=DEV)
        p1 = torch.arange(8, device=DEV)[:, None] + 100
        g1 = torch.randn(8, 2 * 14336, dtype=dtype, device=DEV)
        rope(q1, k1, cos, sin, p1), swiglu(g1)  # warm: the entries exist before the capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            qo, ko = rope(q1, k1, cos, sin, p1)
            so = swiglu(g1)
        for step in range(3):
            q1.normal_(), k1.normal_(), g1.normal_(), p1.add_(1 + step)
            graph.replay()
            torch.cuda.synchronize()
        want = rope_reference(q1, k1, cos, sin, p1)
        check("graph replay: rope q at new positions", qo, want[0], dtype)
        check("graph replay: rope k at new positions", ko, want[1], dtype)
        check("graph replay: swiglu of new inputs", so, swiglu_reference(g1), dtype)


def part_h():
    print(f"\n{'kernel':16s} {'shape':22s} {'dtype':9s} {'provider':15s} {'host us':>8s} {'eager us':>9s} "
          f"{'graph us':>9s} {'host x torch':>13s}", flush=True)
    cases = list(ds.cases())
    groups: list[list] = []
    for c in cases:  # a row: consecutive cases of one kernel, shape and dtype
        if groups and (groups[-1][0].kernel, groups[-1][0].shape, groups[-1][0].dtype) == (c.kernel, c.shape, c.dtype):
            groups[-1].append(c)
        else:
            groups.append([c])
    for group in groups:
        hosts = host_us_interleaved([c.fn for c in group])
        res = []
        for c, host in zip(group, hosts):
            eager = measure(c.fn)[0] * 1e3
            try:
                graph = graph_ms(c.fn) * 1e3
            except Exception:  # noqa: BLE001
                graph = None
            res.append((c, host, eager, graph))
        torch_host = next((h for c, h, _, _ in res if c.provider == "torch"), None)
        for c, host, eager, graph in res:
            ratio = host / torch_host if torch_host else None
            ROWS.append(dict(part="H", kernel=c.kernel, shape=c.shape, dtype=c.dtype, provider=c.provider,
                             host_us=host, eager_us=eager, graph_us=graph, host_ratio=ratio))
            g = f"{graph:9.2f}" if graph is not None else f"{'-':>9s}"
            rr = f"{ratio:12.2f}x" if ratio is not None and c.provider != "torch" else f"{'':13s}"
            print(f"{c.kernel:16s} {c.shape:22s} {c.dtype:9s} {c.provider:15s} {host:8.2f} {eager:9.2f} {g} {rr}",
                  flush=True)


def part_p():
    x = torch.randn(4096, 1024, dtype=torch.float16, device=DEV)
    softmax(x)
    table = K.LEANS["softmax"]
    key = (x.dtype, x.shape, x.stride(), x.data_ptr() & 15, x.get_device())
    e = table.entries[key]
    out = torch.empty_like(x)
    xp, op = x.data_ptr(), out.data_ptr()
    entries, hooks_on = table.entries, launch_lean.hooks_on
    pieces = [("the key (inline tuple)", lambda: (x.dtype, x.shape, x.stride(), x.data_ptr() & 15, x.get_device())),
              ("table lookup (dict.get)", lambda: entries.get(key)),
              ("launch-hook check", hooks_on),
              ("torch.empty_like(x)", lambda: torch.empty_like(x)),
              (f"kept entry ({type(e).__name__}) launch, ints", lambda: e(xp, op)),
              ("whole lean call softmax(x)", lambda: softmax(x)),
              ("torch.softmax(x, dim=-1)", lambda: torch.softmax(x, dim=-1)),
              ("empty loop", lambda: None)]
    hosts = host_us_interleaved([fn for _, fn in pieces])
    print(f"\nP softmax 4096x1024 fp16, pieces of one lean call (DIRECT={launch_lean.DIRECT}), host us:", flush=True)
    for (name, _), h in zip(pieces, hosts):
        ROWS.append(dict(part="P", name=name, host_us=h))
        print(f"P {name:44s} {h:7.2f}", flush=True)


start = time.time()
print(f"# {torch.cuda.get_device_name()} torch {torch.__version__} triton {triton.__version__} "
      f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", flush=True)
if "C" in PARTS:
    part_c()
if "H" in PARTS:
    part_h()
if "P" in PARTS:
    part_p()
wrong = [r for r in ROWS if r["part"] == "C" and not r["ok"]]
print(f"\n{len(wrong)} wrong of {sum(r['part'] == 'C' for r in ROWS)} checks; {time.time() - start:.0f} s", flush=True)
if OUT is not None:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "small_kernels_probe.json").write_text(json.dumps(ROWS, indent=1, default=str))
