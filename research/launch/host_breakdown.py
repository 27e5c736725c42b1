"""Probe (lesson 08, GPU only): where a lean call's host time goes, piece by piece, and the kernels
that the host targets and the small-problem targets depend on.

Asks, on one GPU in one run:
A. Host time of the lean launchers against the torch peers, with entries calling the C launch
   function directly (``launch_lean.DIRECT``) and through ``CompiledKernel.run``; each repeated and
   interleaved with its peer, so drift between cases shows; and the pieces of one call (the key,
   the table lookup, the output's allocation, the stream, the launch with tensors or with ints).
B. The online softmax with self-resetting slots (RESET, gone since: the kernels tag their words per
   launch, ``slots_probe.py``): correct on repeated calls and in CUDA graph replays, the slots left
   zero, and its host time. (Rerun today, its "slots left nonzero" counts tagged words, not errors.)
C. Attention forward at B1 H16 N512 D64: host-made descriptors kept by a direct entry against
   in-kernel ones, against SDPA's backends: host, eager and graph time, and the error.
D. Matmul 1024^3 fp16/bf16 tiles in CUDA graphs against cuBLAS, interleaved.
E. Each lean call as the bench table times it (host, eager, graph) beside its peer, three times
   interleaved, after the trims A pointed to (``torch.empty_like`` of a template, the TMA matmul).
T. TMA matmul tiles (``kernels.matmul_small.matmul_tma``) at 512^3, 1024^3 and 2048^3 in CUDA graphs
   against cuBLAS and the pointer kernel's best tile.

S. Attention forward at B1 H16 N512 D64: each of the small-N configs the lean path tunes over, in
   CUDA graphs, causal and not, against SDPA (which config the autotuner should find).
O. The online softmax's host time at each bench shape, lean against torch.

    python research/launch/host_breakdown.py OUT_DIR [A B C D E T S O]
"""

from __future__ import annotations

import gc
import json
import sys
import time
from pathlib import Path

import torch
import triton

from solutions.kernels import lean as launch_lean
from solutions import kernels as K
from solutions.kernels import attention as K_attention
from solutions.kernels import matmul as K_matmul
from solutions.kernels import online_softmax as K_online
from solutions.kernels import softmax as K_softmax
from solutions.kernels import vector_add as K_add
from solutions.kernels import matmul_small as small
from solutions.kernels.lean import tensor_key
from tkcourse.bench import graph_ms, host_us, measure

OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "host_breakdown")
PARTS = set(sys.argv[2:]) or {"A", "B", "C", "D", "E", "T", "S", "O"}
OUT.mkdir(parents=True, exist_ok=True)
ROWS: list[dict] = []


def host(fn, n=2000, burst=10):
    """Median, p20 and p80 over bursts of the host microseconds per call, gc off (as timeit)."""
    fn()
    torch.cuda.synchronize()
    per = []
    was = gc.isenabled()
    gc.disable()
    try:
        for _ in range(n // burst):
            t0 = time.perf_counter()
            for _ in range(burst):
                fn()
            per.append((time.perf_counter() - t0) / burst * 1e6)
            torch.cuda.synchronize()
    finally:
        if was:
            gc.enable()
    per.sort()
    return per[len(per) // 2], per[len(per) // 5], per[4 * len(per) // 5]


def row(part, name, fn, gpu=False):
    med, p20, p80 = host(fn)
    r = dict(part=part, name=name, host_us=med, p20=p20, p80=p80, bench_host_us=host_us(fn))
    if gpu:
        r["eager_us"] = measure(fn)[0] * 1e3
        try:
            r["graph_us"] = graph_ms(fn) * 1e3
        except Exception as exc:  # noqa: BLE001
            r["graph_us"] = None
            r["graph_error"] = f"{type(exc).__name__}: {exc}"[:200]
    ROWS.append(r)
    extra = "".join(f"  {k} {r[k]:7.2f}" for k in ("eager_us", "graph_us") if r.get(k) is not None)
    print(f"{part} {name:58s} host {med:7.2f} [{p20:6.2f} {p80:6.2f}] bench {r['bench_host_us']:6.2f}{extra}",
          flush=True)
    return r


def tile_time(part, matmul, a, b, cfg, ref):
    """``(graph microseconds, relative error)`` of ``matmul(a, b, cfg)``, or None (said why) if it fails."""
    try:
        c = matmul(a, b, cfg)
        err = ((c.float() - ref).abs().max() / ref.abs().max()).item()
        return graph_ms(lambda: matmul(a, b, cfg)) * 1e3, err
    except Exception as exc:  # noqa: BLE001
        print(f"{part} {cfg} failed: {type(exc).__name__} {str(exc)[:100]}", flush=True)
        return None


def paths(direct: bool):
    launch_lean.DIRECT = direct
    K.forget()


def save():
    (OUT / "host_breakdown.json").write_text(json.dumps(ROWS, indent=1))


dev = torch.device("cuda")
print(f"# {torch.cuda.get_device_name()} torch {torch.__version__} triton {triton.__version__} "
      f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", flush=True)

if "A" in PARTS:
    x = torch.randn(4096, 1024, dtype=torch.float16, device=dev)
    xa, ya = torch.randn(4096, device=dev), torch.randn(4096, device=dev)
    mats = {(dt, n): (torch.randn(n, n, dtype=dt, device=dev), torch.randn(n, n, dtype=dt, device=dev))
            for dt, n in ((torch.float16, 512), (torch.bfloat16, 1024))}
    for rep in range(3):
        for direct in (True, False):
            paths(direct)
            tag = "direct" if direct else "run"
            row("A", f"softmax 4096x1024 lean {tag} #{rep}", lambda: K_softmax.softmax(x))
            row("A", f"add 4096 lean {tag} #{rep}", lambda: K_add.add(xa, ya))
            for (dt, n), (a, b) in mats.items():
                row("A", f"matmul {str(dt)[6:]} {n} lean {tag} #{rep}", lambda a=a, b=b: K_matmul.matmul(a, b))
        row("A", f"softmax 4096x1024 torch #{rep}", lambda: torch.softmax(x, dim=-1))
        row("A", f"add 4096 torch #{rep}", lambda: torch.add(xa, ya))
        for (dt, n), (a, b) in mats.items():
            row("A", f"matmul {str(dt)[6:]} {n} cuBLAS #{rep}", lambda a=a, b=b: a @ b)
    save()
    # the pieces of the softmax call, direct entries
    paths(True)
    K_softmax.softmax(x)
    key = tensor_key(x)
    lean = K.LEANS["softmax"]
    e = lean.get(key)
    out = torch.empty_like(x)
    print("softmax entry:", type(e).__name__, flush=True)
    from triton.runtime import driver

    stream = driver.active.get_current_stream
    row("A", "piece: tensor_key(x)", lambda: tensor_key(x))
    row("A", "piece: lean.get(key)", lambda: lean.get(key))
    row("A", "piece: stream lookup", lambda: stream(0))
    row("A", "piece: torch.empty(shape, dtype, device)", lambda: torch.empty(x.shape, dtype=x.dtype, device=x.device))
    row("A", "piece: torch.empty_like", lambda: torch.empty_like(x))
    row("A", "piece: x.new_empty(shape)", lambda: x.new_empty(x.shape))
    template = torch.empty((), dtype=x.dtype, device=x.device).expand(x.shape)
    row("A", "piece: torch.empty_like(expanded template)", lambda: torch.empty_like(template))
    row("A", "piece: entry(x, out)", lambda: e(x, out))
    row("A", "piece: entry(x.data_ptr(), out.data_ptr())", lambda: e(x.data_ptr(), out.data_ptr()))
    if hasattr(e, "launch"):
        g, f, pk, tail, co, pd = e.grid, e.function, e.packed, e.tail, e.coop, e.pdl
        px, po = x.data_ptr(), out.data_ptr()
        s0 = stream(0)
        row("A", "piece: C launch, all fixed, ints", lambda: e.launch(g[0], g[1], g[2], s0, f, co, pd, None, None, pk,
                                                                        None, None, None, px, po, *tail))
        row("A", "piece: C launch, all fixed, tensors", lambda: e.launch(g[0], g[1], g[2], s0, f, co, pd, None, None,
                                                                           pk, None, None, None, x, out, *tail))
    paths(False)
    K_softmax.softmax(x)
    e2 = lean.get(key)
    print("softmax entry without DIRECT:", type(e2).__name__, flush=True)
    row("A", "piece: run entry(x, out)", lambda: e2(x, out))
    row("A", "piece: empty loop (lambda: None)", lambda: None)
    paths(True)
    save()

if "B" in PARTS:
    paths(True)
    for M, N in ((4096, 32768), (1024, 131072), (256, 262144), (64, 8192)):
        x = torch.randn(M, N, dtype=torch.float16, device=dev)
        ref = torch.softmax(x.float(), dim=-1)
        errs = [(K_online.softmax(x).float() - ref).abs().max().item() for _ in range(3)]
        slots = K_online.kept_slots(x)
        left = [int(s.abs().sum().item()) for s in slots]
        # graph replays
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            K_online.softmax(x)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = K_online.softmax(x)
        gerrs = []
        for _ in range(3):
            y.zero_()
            graph.replay()
            torch.cuda.synchronize()
            gerrs.append((y.float() - ref).abs().max().item())
        print(f"B online {M}x{N}: eager errors {errs}, graph errors {gerrs}, slots left nonzero {left}", flush=True)
        ROWS.append(dict(part="B", name=f"online {M}x{N} check", eager_errors=errs, graph_errors=gerrs, slots_left=left))
        if N >= 32768 or M == 64:
            row("B", f"online softmax {M}x{N} lean", lambda: K_online.softmax(x), gpu=True)
            row("B", f"online softmax {M}x{N} torch", lambda: torch.softmax(x, dim=-1), gpu=True)
    save()

if "C" in PARTS:
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = (torch.randn(1, 16, 512, 64, dtype=torch.float16, device=dev) for _ in range(3))
    for causal in (False, True):
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
        for hd in (None, False):
            paths(True)
            o, _ = K_attention.attention_forward(q, k, v, causal=causal, host_descriptors=hd)
            err = (o.float() - ref).abs().max().item()
            e = [en for lean in K.LEANS.values() for en in lean.entries.values()]
            kinds = sorted({type(en).__name__ for en in e})
            r = row("C", f"attn causal={causal} host_descriptors={hd} lean {kinds}",
                    lambda hd=hd: K_attention.attention_forward(q, k, v, causal=causal, host_descriptors=hd), gpu=True)
            r["error"] = err
            print(f"   error {err:.2e}", flush=True)
        for name, backends in (("default", None), ("cudnn", [SDPBackend.CUDNN_ATTENTION]),
                               ("flash", [SDPBackend.FLASH_ATTENTION])):
            def sdpa(backends=backends):
                if backends is None:
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                with sdpa_kernel(backends):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            row("C", f"attn causal={causal} SDPA {name}", sdpa, gpu=True)
    save()

if "D" in PARTS:
    configs = [(64, 128, 64, 1, 4, 5, 8), (64, 128, 64, 1, 4, 4, 8), (64, 128, 128, 1, 4, 3, 8), (64, 64, 128, 1, 4, 3, 8),
               (128, 64, 64, 1, 4, 4, 8), (128, 128, 64, 1, 8, 3, 8), (128, 128, 64, 2, 8, 3, 8), (128, 64, 64, 1, 8, 4, 8),
               (64, 128, 64, 1, 4, 5, 1), (64, 256, 64, 1, 8, 3, 8), (128, 128, 128, 2, 8, 3, 8), (64, 128, 32, 1, 4, 6, 8),
               (128, 128, 64, 2, 4, 4, 8), (64, 64, 64, 2, 4, 4, 8), (128, 256, 64, 4, 8, 3, 8), (64, 128, 64, 2, 4, 4, 8)]
    for dt in (torch.float16, torch.bfloat16):
        a, b = torch.randn(1024, 1024, dtype=dt, device=dev), torch.randn(1024, 1024, dtype=dt, device=dev)
        ref = (a.float() @ b.float())
        for rep in range(2):
            res = []
            cub = graph_ms(lambda: a @ b) * 1e3
            for bm, bn, bk, split, w, st, gm in configs:
                cfg = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=gm, SPLIT_K=split, num_warps=w, num_stages=st)
                timed = tile_time("D", small.matmul, a, b, cfg, ref)
                if timed:
                    res.append((timed[0], (bm, bn, bk, split, w, st, gm), timed[1]))
            cub2 = graph_ms(lambda: a @ b) * 1e3
            res.sort()
            lean_t = graph_ms(lambda: K_matmul.matmul(a, b)) * 1e3
            print(f"D {str(dt)[6:]} 1024 #{rep}: cuBLAS graph {cub:.2f}/{cub2:.2f} us, lean {lean_t:.2f}; best "
                  + "; ".join(f"{c} {t:.2f} ({min(cub, cub2) / t:.2f}x)" for t, c, _ in res[:6]), flush=True)
            ROWS.append(dict(part="D", name=f"matmul {str(dt)[6:]} 1024 tiles #{rep}", cublas_graph_us=[cub, cub2],
                             lean_graph_us=lean_t, tiles=[dict(graph_us=t, config=c, rel_error=e) for t, c, e in res]))
    save()

if "T" in PARTS:
    tma = [(64, 64, 128, 4, 3), (64, 64, 64, 4, 4), (64, 128, 64, 4, 3), (64, 128, 64, 4, 4), (64, 128, 64, 4, 5),
           (128, 64, 64, 4, 4), (64, 128, 128, 4, 3), (128, 128, 64, 4, 3), (128, 128, 64, 8, 3), (128, 128, 64, 8, 4),
           (128, 256, 64, 8, 3), (128, 128, 128, 8, 3), (64, 256, 64, 4, 3), (128, 64, 128, 4, 3)]
    pointer = {512: (64, 64, 128, 1, 4, 3), 1024: (64, 128, 64, 1, 4, 5), 2048: (128, 256, 64, 1, 8, 3)}
    for n in (512, 1024, 2048):
        for dt in (torch.float16, torch.bfloat16):
            a, b = torch.randn(n, n, dtype=dt, device=dev), torch.randn(n, n, dtype=dt, device=dev)
            ref = a.float() @ b.float()
            cub = graph_ms(lambda: a @ b) * 1e3
            bm, bn, bk, split, w, st = pointer[n]
            pcfg = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, SPLIT_K=split, num_warps=w, num_stages=st)
            ptr = graph_ms(lambda: small.matmul(a, b, pcfg)) * 1e3
            res = []
            for bm, bn, bk, w, st in tma:
                cfg = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, num_warps=w, num_stages=st)
                timed = tile_time(f"T {n}", small.matmul_tma, a, b, cfg, ref)
                if timed:
                    res.append((timed[0], (bm, bn, bk, w, st), timed[1]))
            cub2 = graph_ms(lambda: a @ b) * 1e3
            res.sort()
            best = min(cub, cub2)
            print(f"T {str(dt)[6:]} {n}: cuBLAS {cub:.2f}/{cub2:.2f} us, pointer {pointer[n]} {ptr:.2f} "
                  f"({best / ptr:.2f}x); TMA " + "; ".join(f"{c} {t:.2f} ({best / t:.2f}x, err {e:.1e})"
                                                          for t, c, e in res[:5]), flush=True)
            ROWS.append(dict(part="T", name=f"tma {str(dt)[6:]} {n}", cublas_graph_us=[cub, cub2], pointer_graph_us=ptr,
                             tiles=[dict(graph_us=t, config=c, rel_error=e) for t, c, e in res]))
    save()

if "E" in PARTS:
    import torch.nn.functional as F

    paths(True)
    x = torch.randn(4096, 1024, dtype=torch.float16, device=dev)
    xo = torch.randn(4096, 32768, dtype=torch.float16, device=dev)
    xa, ya = torch.randn(4096, device=dev), torch.randn(4096, device=dev)
    q, k, v = (torch.randn(1, 16, 512, 64, dtype=torch.float16, device=dev) for _ in range(3))
    pairs = [("softmax 4096x1024", lambda: K_softmax.softmax(x), lambda: torch.softmax(x, dim=-1)),
             ("online 4096x32768", lambda: K_online.softmax(xo), lambda: torch.softmax(xo, dim=-1)),
             ("add 4096", lambda: K_add.add(xa, ya), lambda: torch.add(xa, ya))]
    for n in (512, 1024, 2048):
        for dt in (torch.float16, torch.bfloat16):
            a, b = torch.randn(n, n, dtype=dt, device=dev), torch.randn(n, n, dtype=dt, device=dev)
            pairs.append((f"matmul {str(dt)[6:]} {n}", lambda a=a, b=b: K_matmul.matmul(a, b), lambda a=a, b=b: a @ b))
    for causal in (False, True):
        pairs.append((f"attn N512 causal={causal}", lambda c=causal: K_attention.attention_forward(q, k, v, causal=c),
                      lambda c=causal: F.scaled_dot_product_attention(q, k, v, is_causal=c)))
    for rep in range(3):
        for name, course, peer in pairs:
            rc = row("E", f"{name} lean #{rep}", course, gpu=True)
            rp = row("E", f"{name} peer #{rep}", peer, gpu=True)
            print(f"E {name} #{rep}: host {rc['host_us'] / rp['host_us']:.2f}x peer, eager {rp['eager_us'] / rc['eager_us']:.2f}x,"
                  f" graph {(rp['graph_us'] or 0) / (rc['graph_us'] or 1):.2f}x", flush=True)
    save()

if "S" in PARTS:
    import torch.nn.functional as F

    from solutions.kernels import attention_forward as fat
    from solutions.kernels import attention as lat

    q, k, v = (torch.randn(1, 16, 512, 64, dtype=torch.float16, device=dev) for _ in range(3))
    for causal in (False, True):
        sdpa = graph_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)) * 1e3
        res = []
        for c in lat.SMALL_N_FWD_CONFIGS:
            cfg = dict(c.kwargs, num_warps=c.num_warps, num_stages=c.num_stages)
            try:
                t = graph_ms(lambda cfg=cfg: fat.attention_forward(q, k, v, causal, config=cfg, host_descriptors=True)) * 1e3
            except Exception as exc:  # noqa: BLE001
                print(f"S {cfg} failed: {type(exc).__name__} {str(exc)[:120]}", flush=True)
                continue
            res.append((t, cfg))
        res.sort(key=lambda r: r[0])
        print(f"S causal={causal}: SDPA graph {sdpa:.2f} us; " + "; ".join(
            f"{c['BLOCK_M']}x{c['BLOCK_N']} w{c['num_warps']} s{c['num_stages']} {t:.2f} ({sdpa / t:.2f}x)" for t, c in res),
            flush=True)
        ROWS.append(dict(part="S", name=f"attn small-N configs causal={causal}", sdpa_graph_us=sdpa,
                         configs=[dict(graph_us=t, config={k: v for k, v in c.items() if k != "pre_hook"}) for t, c in res]))
    save()

if "O" in PARTS:
    paths(True)
    for M, N in ((4096, 32768), (1024, 131072), (256, 262144)):
        x = torch.randn(M, N, dtype=torch.float16, device=dev)
        for rep in range(2):
            row("O", f"online {M}x{N} lean #{rep}", lambda: K_online.softmax(x))
            row("O", f"online {M}x{N} torch #{rep}", lambda: torch.softmax(x, dim=-1))
        del x
        torch.cuda.empty_cache()
    save()
save()
print("done", flush=True)
