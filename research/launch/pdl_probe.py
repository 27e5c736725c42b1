"""Probe (lesson 08, GPU only): programmatic dependent launch (PDL) and the small kernels' tiles,
as the bench table times them (eager: ``do_bench``, the L2 flushed before each call; graph: one
replay, the same flush) and in chains of calls back to back, interleaved with the peer.

Why: on the H200, cuBLAS's 1024^3 kernel and SDPA's N512 forward took less time eager than
replayed from a graph (9.2 against 9.9 us; 12.4 against 13.2), the course's the other way round
(10.7 against 10.3). A kernel launched with PDL may be put on the SMs while the kernel before it
finishes, which a graph's first node cannot do; the course's kernels now have a ``PDL`` option.

M. Matmul 512^3, 1024^3, 2048^3 fp16/bf16: the lean path, its TMA kernel with and without PDL,
   against cuBLAS; with X, other 1024^3 tiles too (128x64, deeper pipelines). The first run also
   tried the loop warp-specialized (``tl.range(..., warp_specialize=True)``, a kernel option since
   removed): 25% slower at 64x128, and Triton 3.6 failed to compile it at 128x64.
A. Attention forward B1 H16 N512 D64, causal and not: the lean path, two configs with and without
   PDL, against SDPA's default.
C. Correctness with PDL where the kernel before writes the inputs and the kernel after reads the
   output, eager and in a CUDA graph.

Each case: eager, one call replayed from a graph, and CHAIN calls back to back in one graph (per
call), where a kernel launched with PDL can overlap the one before it. (The first run,
``logs/pdl_probe_first.log``, timed the chain eagerly instead: its "chain" column is the host's
pace, not the GPU's, and says nothing about PDL.)

    python research/launch/pdl_probe.py OUT_DIR [M A C]
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from solutions.kernels import attention as LA
from solutions import kernels as K
from solutions.kernels import attention as K_attention
from solutions.kernels import matmul as K_matmul
from solutions.kernels import matmul_small as small
from tkcourse.bench import capture, graph_ms, measure

OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "pdl_probe")
PARTS = set(sys.argv[2:]) or {"M", "A", "C"}
OUT.mkdir(parents=True, exist_ok=True)
ROWS: list[dict] = []
ROUNDS = 5
CHAIN = 8


def save():
    (OUT / "pdl_probe.json").write_text(json.dumps(ROWS, indent=1, default=str))


def chained(fn, n=CHAIN):
    def run():
        for _ in range(n):
            fn()
    return run


def compare(part, label, variants, peer="peer"):
    """Eager, graph and graph-chain times of each variant, ROUNDS times interleaved; medians."""
    times = {name: dict(eager=[], graph=[], chain=[]) for name in variants}
    for _ in range(ROUNDS):
        for name, fn in variants.items():
            t = times[name]
            t["eager"].append(measure(fn)[0] * 1e3)
            try:
                t["graph"].append(graph_ms(fn) * 1e3)
                t["chain"].append(graph_ms(chained(fn)) * 1e3 / CHAIN)
            except Exception as exc:  # noqa: BLE001
                t["graph_error"] = f"{type(exc).__name__}: {exc}"[:160]
    med = {n: {k: statistics.median(v) if v else None for k, v in t.items() if isinstance(v, list)}
           for n, t in times.items()}
    p = med[peer]
    for name, m in med.items():
        ratio = {k: (p[k] / m[k] if m[k] and p[k] else 0.0) for k in m}
        print(f"{part} {label:22s} {name:28s} eager {m['eager']:7.2f} ({ratio['eager']:.3f}x)  graph "
              f"{(m['graph'] or 0):7.2f} ({ratio['graph']:.3f}x)  graph chain {(m['chain'] or 0):7.2f} "
              f"({ratio['chain']:.3f}x)  eager {min(times[name]['eager']):.2f}-{max(times[name]['eager']):.2f}",
              flush=True)
        ROWS.append(dict(part=part, label=label, name=name, **m, ratios=ratio, eager_all=times[name]["eager"],
                         graph_all=times[name]["graph"], chain_all=times[name]["chain"],
                         graph_error=times[name].get("graph_error")))
    save()


def tma_variant(a, b, cfg, pdl):
    """A lean TMA entry of its own for (a, b) with ``cfg`` and PDL on or off: the hot path's call."""
    saved = (dict(small.TMA_CONFIGS), K_matmul.MATMUL_PDL)
    mnk = a.shape[0] * a.shape[1] * b.shape[1]
    bound = min(x for x in small.TMA_CONFIGS if mnk <= x)
    try:
        small.TMA_CONFIGS[bound] = cfg
        K_matmul.MATMUL_PDL = pdl
        K.forget()
        K_matmul.matmul(a, b)  # the first call makes the entry, the second its hot tuple
        K_matmul.matmul(a, b)
        ((e, template, ws),) = K_matmul.matmul_entries()
        assert ws == "tma" and e.tensor_descriptors, "not the TMA kernel's direct entry"
        assert bool(e.meta.get("PDL")) == pdl and e.pdl == pdl, "PDL not as asked"
        assert e.meta["BLOCK_M"] == cfg["BLOCK_M"] and e.meta["num_stages"] == cfg["num_stages"]
    finally:
        small.TMA_CONFIGS.clear()
        small.TMA_CONFIGS.update(saved[0])
        K_matmul.MATMUL_PDL = saved[1]
        K.forget()

    def call():
        c = torch.empty_like(template)
        e(a, b, c)
        return c
    return call


def err(x, ref):
    return float((x.float() - ref.float()).abs().max())


if "M" in PARTS:
    base = small.tma_config(1024**3)
    extra = [dict(BLOCK_M=128, BLOCK_N=64, BLOCK_K=64, GROUP_M=8, num_warps=4, num_stages=6),
             dict(BLOCK_M=128, BLOCK_N=64, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=6),
             dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=4, num_stages=7)]
    for dt in (torch.float16, torch.bfloat16):
        for n in (512, 1024, 2048):
            a = torch.randn(n, n, device="cuda", dtype=dt)
            b = torch.randn(n, n, device="cuda", dtype=dt)
            ref = a.float() @ b.float()
            cfg = small.tma_config(n**3)
            variants = {"peer": lambda a=a, b=b: torch.matmul(a, b), "lean": lambda a=a, b=b: K_matmul.matmul(a, b)}
            for pdl in (False, True):
                variants[f"tma pdl={int(pdl)}"] = tma_variant(a, b, cfg, pdl)
            if n == 1024 and "X" in PARTS:
                for c in extra:
                    tag = f"{c['BLOCK_M']}x{c['BLOCK_N']} w{c['num_warps']} s{c['num_stages']}"
                    for pdl in (False, True):
                        try:
                            fn = tma_variant(a, b, dict(c), pdl)
                            e = err(fn(), ref) / float(ref.abs().max())
                            print(f"M {tag} pdl={int(pdl)} rel err {e:.1e}", flush=True)
                            variants[f"{tag} pdl={int(pdl)}"] = fn
                        except Exception as exc:  # noqa: BLE001
                            print(f"M {tag} pdl={int(pdl)} failed: {type(exc).__name__} {str(exc)[:160]}", flush=True)
            for name, fn in variants.items():
                e = err(fn(), ref) / float(ref.abs().max())
                if e > 1e-2:
                    print(f"M {name} {n} WRONG rel err {e:.2e}", flush=True)
            compare("M", f"matmul {str(dt)[6:]} {n}", variants)

if "A" in PARTS:
    q, k, v = (torch.randn(1, 16, 512, 64, device="cuda", dtype=torch.float16) for _ in range(3))
    for causal in (False, True):
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        variants = {"peer": lambda c=causal: F.scaled_dot_product_attention(q, k, v, is_causal=c),
                    "lean": lambda c=causal: K_attention.attention_forward(q, k, v, causal=c)}
        saved = (dict(LA.ONE_WAVE_FWD_CONFIG), LA.FWD_PDL)
        for cfg in (dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=3),
                    dict(BLOCK_M=64, BLOCK_N=128, num_warps=4, num_stages=3)):
            for pdl in (False, True):
                try:
                    LA.ONE_WAVE_FWD_CONFIG.clear()
                    LA.ONE_WAVE_FWD_CONFIG.update(cfg)
                    LA.FWD_PDL = pdl
                    K.forget()
                    o, _ = K_attention.attention_forward(q, k, v, causal=causal)
                    (e,) = [x for x in LA.LEANS["fwd_fixed"].entries.values()]
                    tmpl = e.info[2]
                    name = f"{cfg['BLOCK_M']}x{cfg['BLOCK_N']} s{cfg['num_stages']} pdl={int(pdl)}"
                    if e.tensor_descriptors:
                        def fn(e=e, t=tmpl):
                            o, lse = torch.empty_like(q), torch.empty_like(t)
                            e(q, k, v, o, lse)
                            return o
                        o = fn()
                    else:
                        print(f"A {name}: entry is not a direct-descriptor entry", flush=True)
                        continue
                    print(f"A causal={causal} {name} err {err(o, ref):.1e}", flush=True)
                    variants[name] = fn
                finally:
                    LA.ONE_WAVE_FWD_CONFIG.clear()
                    LA.ONE_WAVE_FWD_CONFIG.update(saved[0])
                    LA.FWD_PDL = saved[1]
        K.forget()
        compare("A", f"attn N512 causal={int(causal)}", variants)

if "C" in PARTS:
    # The kernel before writes A (and Q); the kernel after reads C (and O). Eager and in a graph.
    saved = (K_matmul.MATMUL_PDL, LA.FWD_PDL)
    K_matmul.MATMUL_PDL = LA.FWD_PDL = True
    K.forget()
    try:
        for dt in (torch.float16, torch.bfloat16):
            x = torch.randn(1024, 1024, device="cuda", dtype=dt)
            b = torch.randn(1024, 1024, device="cuda", dtype=dt) / 32

            def chain():
                a = x * 2.0  # written by the kernel just before
                c = K_matmul.matmul(a, b)
                d = K_matmul.matmul(c, b)  # reads what the PDL kernel just wrote
                return d + 1.0

            ref = ((x.float() * 2) @ b.float() @ b.float()) + 1
            errs = [err(chain(), ref) / float(ref.abs().max()) for _ in range(20)]
            g, out = capture(chain)
            gerrs = []
            for i in range(20):
                x.copy_(torch.randn_like(x))
                ref = ((x.float() * 2) @ b.float() @ b.float()) + 1
                g.replay()
                gerrs.append(err(out, ref) / float(ref.abs().max()))
            print(f"C matmul chain {str(dt)[6:]}: eager max rel err {max(errs):.1e}, graph {max(gerrs):.1e}", flush=True)
            ROWS.append(dict(part="C", name=f"matmul chain {dt}", eager=max(errs), graph=max(gerrs)))
        q, k, v = (torch.randn(1, 16, 512, 64, device="cuda", dtype=torch.float16) for _ in range(3))
        for causal in (False, True):
            def achain():
                o, _ = K_attention.attention_forward(q * 1.0, k, v, causal=causal)
                o2, _ = K_attention.attention_forward(o, k, v, causal=causal)
                return o2 * 1.0
            ref = F.scaled_dot_product_attention(F.scaled_dot_product_attention(q, k, v, is_causal=causal), k, v,
                                                 is_causal=causal)
            errs = [err(achain(), ref) for _ in range(20)]
            print(f"C attention chain causal={causal}: max abs err {max(errs):.1e}", flush=True)
            ROWS.append(dict(part="C", name=f"attention chain causal={causal}", eager=max(errs)))
    finally:
        K_matmul.MATMUL_PDL, LA.FWD_PDL = saved
        K.forget()
    save()
