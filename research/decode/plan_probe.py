"""GPU check of the fast decode attention's plan (``solutions/kernels/decode_plan.py``): right first, then
timed against SDPA and a copy, eagerly and in a CUDA graph, with a sweep of split counts where the plan
spreads one sequence over the SMs.

    PYTHONPATH=$PWD python3 research/decode/plan_probe.py [OUT_DIR] [--full]

By default (under 2 minutes) the plan's two rules side by side: at every shape of ``COMPARE`` the
first rule's plan (``decode_plan.plan(..., rule="v1")``, launched through ``config=``) and the current
one (through ``config=`` and the lean path), each checked right first, then timed in CUDA graphs
beside SDPA and a copy (the lean path and the copy eagerly too); OUT_DIR gets plan_compare.json.
``--full`` runs the first run's parts below before it:

1. Correctness (fp16 against SDPA on the same cache laid out contiguously, or the float32 torch
   reference at mixed lengths): the five timed shapes at page 16; page sizes 1, 16, 64 and head dims
   64, 128, 256 on a mixed batch; the values the host does not check (a page outside the pool, a
   length of 0, a length past the table): that row NaN, the others right, and the CUDA context alive.
   A CUDA graph replay of the lean path, right.
2. Timings (``do_bench`` medians, eager and ``do_bench_cudagraph``) of the lean path, SDPA and a copy of
   the K cache (read + written = the KV bytes) at B1x4096, B1x32768, B64x1024, B32x8192, B8x32768,
   page 16; and the lean path's host time a call (a loop of calls, then one sync).
3. A sweep of split counts (and, at B64x1024, tokens a step, warps, stages) in CUDA graphs, through
   ``config=``, beside the plan's own choice.

Each part in its own try/except; the whole under about 4 minutes (``BUDGET_S``: later sweep points are
skipped). The compact table is printed last; OUT_DIR gets plan_probe.json.
"""

import json
import sys
import time
import traceback
from pathlib import Path

import torch
import triton

import tkcourse  # noqa: F401  (the mode, before any kernel is defined)
from benchmarks import decode_attention as bench
from solutions import decode_attention as lesson
from solutions.kernels import decode_attention as fast
from solutions.kernels import decode_plan

T0 = time.time()
BUDGET_S = 200  # no new sweep point after this many seconds
HQ, HKV, D = 32, 8, 128
SHAPES = {"B1-N4096": [4096], "B1-N32768": [32768], "B64-N1024": [1024] * 64, "B32-N8192": [8192] * 32,
          "B8-N32768": [32768] * 8}
#: The old-vs-new comparison's shapes (page 16): the timed ones, the mixed batch, and B 1 x 1024 and
#: B 16 x 8192, where the rules differ too.
COMPARE = {"B1-N1024": [1024], **SHAPES, "mixed": bench.mixed_lengths(), "B16-N8192": [8192] * 16}
COMPARE_BUDGET_S = 100  # no new comparison shape after this many seconds of the comparison
LOG = []


def say(*a):
    line = " ".join(str(x) for x in a)
    LOG.append(line)
    print(line, flush=True)


def part(name, fn, *args):
    """Run one part; a failure is printed with its traceback and the probe goes on."""
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001  (each part stands alone)
        say(f"PART FAILED {name}: {type(e).__name__}: {str(e)[:300]}")
        traceback.print_exc()
        return None


def err_vs_sdpa(out, args):
    q, k, v, seq_lens, table = args
    kc, vc = bench.contiguous_cache(k, seq_lens, table), bench.contiguous_cache(v, seq_lens, table)
    ref = bench.sdpa(q, kc, vc)
    return (out.float() - ref.float()).abs().max().item()


def err_vs_reference(out, args):
    return (out.float() - lesson.reference(*args).float()).abs().max().item()


def correctness():
    rows = []

    def check(label, out, err, atol=4e-3):
        ok = err <= atol and not bool(torch.isnan(out).any())
        rows.append((label, ok, err))
        say(f"{'ok  ' if ok else 'FAIL'} {label}: max abs error {err:.2e}")

    for name, lens in SHAPES.items():
        args = bench.paged_cache(lens, 16)
        out = fast.decode_attention(*args)
        check(f"{name}-P16 vs SDPA (plan {fast.plan_of(args[0], args[1], args[4])})", out, err_vs_sdpa(out, args))
        del args
        torch.cuda.empty_cache()
    for ps in (1, 16, 64):
        for d in (64, 128, 256):
            for dtype in (torch.float16, torch.bfloat16):
                args = bench.paged_cache([1, 77, 1000, 5003], ps, Hq=HQ, Hkv=HKV, D=d, dtype=dtype, seed=ps + d)
                out = fast.decode_attention(*args)
                check(f"mixed lengths page {ps} D {d} {str(dtype)[6:]}", out, err_vs_reference(out, args),
                      atol=4e-3 if dtype == torch.float16 else 3e-2)
                args1 = bench.paged_cache([3000], ps, Hq=HQ, Hkv=HKV, D=d, dtype=dtype, seed=ps + d)
                out = fast.decode_attention(*args1)
                check(f"B1 page {ps} D {d} {str(dtype)[6:]} vs SDPA", out, err_vs_sdpa(out, args1),
                      atol=4e-3 if dtype == torch.float16 else 3e-2)
    # fp32 (tl.dot in TF32 on a GPU): one shape, loose tolerance
    args = bench.paged_cache([100, 2000], 16, Hq=HQ, Hkv=HKV, D=128, dtype=torch.float32)
    out = fast.decode_attention(*args)
    check("fp32 D 128", out, err_vs_reference(out, args), atol=2e-2)
    # the configs the sweep launches go through the ordinary path: right too
    args = bench.paged_cache([4096], 16)
    for splits in (1, 3, 32):
        out = fast.decode_attention(*args, config=dict(BLOCK_N=128, num_warps=4, num_stages=3, splits=splits))
        check(f"B1-N4096 config splits {splits}", out, err_vs_sdpa(out, args))
    return rows


def bounds():
    """Bad values: that row NaN, the others right, nothing read outside (the context survives a sync)."""
    rows = []
    base = bench.paged_cache([500, 3000, 40], 16, seed=7)
    q, k, v, seq_lens, table = base
    cap = table.shape[1] * 16
    used = -(-int(seq_lens[1]) // 16)  # pages of sequence 1: a bad entry among them
    cases = {"page -1": ("table", (1, used // 2), -1), "page = num_pages": ("table", (1, 0), k.shape[0]),
             "page 2**30": ("table", (1, used - 1), 2**30), "length 0": ("lens", 1, 0), "length -3": ("lens", 1, -3),
             "length past the table": ("lens", 1, cap + 1)}
    ref = lesson.reference(*base)
    for label, (what, where, value) in cases.items():
        for hint in (None, 4096):
            t, s = table.clone(), seq_lens.clone()
            (t if what == "table" else s)[where] = value
            out = fast.decode_attention(q, k, v, s, t, max_seq_len=hint)
            torch.cuda.synchronize()  # an illegal address would raise here
            nan_row = bool(torch.isnan(out[1]).all())
            others = (out[[0, 2]].float() - ref[[0, 2]].float()).abs().max().item()
            ok = nan_row and others <= 4e-3
            rows.append((f"{label} hint {hint}", ok, others))
            say(f"{'ok  ' if ok else 'FAIL'} bounds {label} (max_seq_len {hint}): row NaN {nan_row}, others {others:.2e}")
    return rows


def graph_check():
    args = bench.paged_cache([300, 4000], 16)
    fast.decode_attention(*args)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fast.decode_attention(*args)
    args[0].copy_(torch.randn_like(args[0]))  # the replay must read the new q
    g.replay()
    torch.cuda.synchronize()
    err = err_vs_reference(out, args)
    say(f"{'ok  ' if err < 4e-3 else 'FAIL'} CUDA graph replay with a new q: {err:.2e}")
    return err < 4e-3


def host_us(fn, n=200):
    fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    host = (time.perf_counter() - t) / n * 1e6
    torch.cuda.synchronize()
    return host


def timings():
    rows = []
    for name, lens in SHAPES.items():
        row = {"shape": f"{name}-P16"}
        for c in bench.shape_cases(name, lens, 16):
            eager = triton.testing.do_bench(c.fn, warmup=25, rep=100) * 1e3
            graph = triton.testing.do_bench_cudagraph(c.fn, rep=100) * 1e3
            row[c.provider] = dict(eager=round(eager, 1), graph=round(graph, 1), bytes=c.bytes)
            if c.provider == "triton":
                row["host_us"] = round(host_us(c.fn), 1)
        args = bench.paged_cache(lens, 16)
        row["plan"] = str(fast.plan_of(args[0], args[1], args[4]))
        del args
        torch.cuda.empty_cache()
        rows.append(row)
        t, s, cp = row.get("triton", {}), row.get("sdpa", {}), row.get("copy", {})
        say(f"time {row['shape']}: triton {t} sdpa {s} copy {cp} host {row.get('host_us')} us; {row['plan']}")
    return rows


def sweep():
    """Split counts at the spread shapes (and blocks at B64x1024), in CUDA graphs, through config=."""
    rows = []
    points = {"B1-N4096": [dict(BLOCK_N=128, num_warps=4, num_stages=3, splits=s) for s in (4, 8, 12, 16, 24, 32)]
              + [dict(BLOCK_N=64, num_warps=4, num_stages=3, splits=s) for s in (16, 32, 64)],
              "B1-N32768": [dict(BLOCK_N=128, num_warps=4, num_stages=3, splits=s) for s in (8, 16, 24, 32, 33, 48, 64)],
              "B64-N1024": [dict(BLOCK_N=bn, num_warps=w, num_stages=st, splits=s)
                            for bn, w, st in ((128, 4, 3), (128, 4, 2), (64, 4, 3), (64, 4, 2), (128, 8, 3))
                            for s in (1, 2)],
              "B8-N32768": [dict(BLOCK_N=128, num_warps=4, num_stages=3, splits=s) for s in (2, 4, 5)]}
    for name, cfgs in points.items():
        args = bench.paged_cache(SHAPES[name], 16)
        moved = bench.kv_bytes(args[1], args[3])
        own = fast.plan_of(args[0], args[1], args[4])
        for cfg in [None] + cfgs:
            if time.time() - T0 > BUDGET_S:
                say(f"sweep {name}: budget spent, skipping the rest")
                break
            fn = lambda a=args, c=cfg: fast.decode_attention(*a, config=c)  # noqa: E731
            try:
                us = triton.testing.do_bench_cudagraph(fn, rep=50) * 1e3
            except Exception as e:  # noqa: BLE001  (a config that fails to compile or launch)
                say(f"sweep {name} {cfg}: {type(e).__name__} {str(e)[:120]}")
                continue
            label = f"plan {own.block_n}/{own.num_warps}/{own.num_stages} splits {own.splits}" if cfg is None else (
                f"{cfg['BLOCK_N']}/{cfg['num_warps']}/{cfg['num_stages']} splits {cfg['splits']}")
            rows.append(dict(shape=name, config=label, us=round(us, 2), tbps=round(moved / us * 1e-6, 3)))
            say(f"sweep {name} {label}: {us:.1f} us, {moved / us * 1e-6:.2f} TB/s")
        args = None
        torch.cuda.empty_cache()
    return rows


def _label(p):
    return f"{p.block_n}/{p.num_warps}/{p.num_stages} x{p.splits}"


def _config(p):
    return dict(BLOCK_N=p.block_n, splits=p.splits, num_warps=p.num_warps, num_stages=p.num_stages,
                combine_warps=p.combine_warps)


def compare():
    """At each COMPARE shape: the first rule's plan and the current one, right, then timed."""
    rows = []
    t0 = time.time()
    for name, lens in COMPARE.items():
        if time.time() - t0 > COMPARE_BUDGET_S:
            say(f"compare {name}: budget spent, skipping the rest")
            continue
        args = fns = None
        try:
            args = bench.paged_cache(lens, 16)
            q, k, v, seq_lens, table = args
            B, Hq, D = q.shape
            old = decode_plan.plan(B, k.shape[2], D, q.element_size(), k.shape[1], table.shape[1], q.device, rule="v1")
            new = fast.plan_of(q, k, table)
            row = dict(shape=f"{name}-P16", old_plan=_label(old), new_plan=_label(new), same=old == new)
            uniform = len(set(lens)) == 1
            err = err_vs_sdpa if uniform else err_vs_reference
            row["err_old"] = err(fast.decode_attention(*args, config=_config(old)), args)
            row["err_new"] = err(fast.decode_attention(*args), args)
            row["ok"] = row["err_old"] <= 4e-3 and row["err_new"] <= 4e-3
            moved = bench.kv_bytes(k, seq_lens) + 2 * q.numel() * q.element_size()
            copied = 2 * k.numel() * k.element_size()
            dst = torch.empty_like(k)
            fns = {"old": lambda: fast.decode_attention(*args, config=_config(old)),
                   "new_config": lambda: fast.decode_attention(*args, config=_config(new)),
                   "new": lambda: fast.decode_attention(*args), "copy": lambda: dst.copy_(k)}
            if uniform:
                kc, vc = bench.contiguous_cache(k, seq_lens, table), bench.contiguous_cache(v, seq_lens, table)
                fns["sdpa"] = lambda: bench.sdpa(q, kc, vc)
            for key, fn in fns.items():
                if key == "new_config" and old == new:
                    continue  # the same launch as "old"
                row[f"{key}_us"] = round(triton.testing.do_bench_cudagraph(fn, rep=100) * 1e3, 2)
            for key in ("new", "copy"):
                row[f"{key}_eager_us"] = round(triton.testing.do_bench(fns[key], warmup=25, rep=100) * 1e3, 2)
            for key in ("old", "new"):  # bandwidth over the copy's; SDPA's time over ours (>= 1: as fast)
                row[f"{key}_of_copy"] = round((moved / row[f"{key}_us"]) / (copied / row["copy_us"]), 3)
                if "sdpa_us" in row:
                    row[f"{key}_vs_sdpa"] = round(row["sdpa_us"] / row[f"{key}_us"], 3)
            row["new_eager_of_copy"] = round((moved / row["new_eager_us"]) / (copied / row["copy_eager_us"]), 3)
            rows.append(row)
            say(f"{'ok  ' if row['ok'] else 'FAIL'} compare {row['shape']}: old {row['old_plan']} {row['old_us']} us, "
                f"new {row['new_plan']} {row['new_us']} us (config {row.get('new_config_us', '=old')}), "
                f"sdpa {row.get('sdpa_us', '-')}, copy {row['copy_us']}; "
                f"errors {row['err_old']:.1e} / {row['err_new']:.1e}; {time.time() - t0:.0f} s")
        except Exception as e:  # noqa: BLE001  (one shape stands alone)
            say(f"compare {name} FAILED: {type(e).__name__}: {str(e)[:300]}")
            traceback.print_exc()
        args = fns = None
        torch.cuda.empty_cache()
    return rows


def print_compare(rows):
    print("\n| shape | old plan (BLOCK_N/warps/stages x splits) | new plan | old graph us | new graph us "
          "(lean; config) | SDPA graph us | copy graph us | of a copy, old / new | vs SDPA, old / new | "
          "new eager us, of a copy |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['shape']} | {r['old_plan']} | {r['new_plan']}{' (same)' if r['same'] else ''} | {r['old_us']} | "
              f"{r['new_us']}; {r.get('new_config_us', '=old')} | {r.get('sdpa_us', '-')} | {r['copy_us']} | "
              f"{r['old_of_copy']:.2f} / {r['new_of_copy']:.2f} | "
              f"{r.get('old_vs_sdpa', '-')} / {r.get('new_vs_sdpa', '-')} | "
              f"{r['new_eager_us']}, {r['new_eager_of_copy']:.2f} |")


def main(out_dir=None, full=False):
    say(torch.cuda.get_device_name(0), "SMs", decode_plan.sm_count("cuda"), "torch", torch.__version__,
        "triton", triton.__version__)
    result = {}
    if full:
        result["correctness"] = part("correctness", correctness)
        result["bounds"] = part("bounds", bounds)
        result["graph"] = part("graph", graph_check)
        result["timings"] = part("timings", timings)
        result["sweep"] = part("sweep", sweep)
    result["compare"] = part("compare", compare)
    if out_dir:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / ("plan_probe.json" if full else "plan_compare.json")).write_text(json.dumps(result, indent=1, default=str))
    if full:
        print_full(result)
    bad = [r["shape"] for r in result["compare"] or [] if not r["ok"]]
    print(f"\ntotal {time.time() - T0:.0f} s; comparison: {len(result['compare'] or [])} shapes, "
          f"{len(bad)} wrong {bad if bad else ''}")
    print_compare(result["compare"] or [])


def print_full(result):
    bad = [r for rows in (result["correctness"] or [], result["bounds"] or []) for r in rows if not r[1]]
    print(f"\ntotal {time.time() - T0:.0f} s; correctness: {len(bad)} failures"
          f"{'' if result['correctness'] is not None and result['bounds'] is not None else ' (a part failed)'}"
          f"; graph replay {'ok' if result['graph'] else 'FAILED'}\n")
    for label, ok, err in bad:
        print(f"FAIL {label}: {err:.2e}")
    print("| shape | plan | triton eager / graph us | SDPA eager / graph us | copy eager / graph us | "
          "triton/SDPA (eager, graph) | triton/copy (graph) | host us |")
    print("|---|---|---|---|---|---|---|---|")
    for r in result["timings"] or []:
        t, s, c = r.get("triton", {}), r.get("sdpa", {}), r.get("copy", {})
        ratio = lambda a, b, k: f"{b[k] / a[k]:.2f}" if a.get(k) and b.get(k) else "-"
        # speed relative to SDPA: SDPA's time over ours (>= 1: as fast or faster); to the copy: bytes/time
        cp = (f"{(t['bytes'] / t['graph']) / (c['bytes'] / c['graph']):.2f}" if t.get("graph") and c.get("graph")
              else "-")
        plan = r["plan"].replace("Plan(", "").split(", num_warps")[0]
        print(f"| {r['shape']} | {plan} | {t.get('eager')} / {t.get('graph')} | {s.get('eager', '-')} / "
              f"{s.get('graph', '-')} | {c.get('eager')} / {c.get('graph')} | {ratio(t, s, 'eager')}, "
              f"{ratio(t, s, 'graph')} | {cp} | {r.get('host_us')} |")
    if result["sweep"]:
        print("\n| shape | config (BLOCK_N/warps/stages) | graph us | TB/s |\n|---|---|---|---|")
        for r in result["sweep"]:
            print(f"| {r['shape']} | {r['config']} | {r['us']} | {r['tbps']} |")


if __name__ == "__main__":
    if not torch.cuda.is_available():
        sys.exit("plan_probe.py needs a GPU")
    argv = [a for a in sys.argv[1:] if a != "--full"]
    main(argv[0] if argv else None, full="--full" in sys.argv[1:])
