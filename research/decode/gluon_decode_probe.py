"""GPU probe of the Gluon decode prototype (``gluon_decode.py``, TMA ring + warp specialization): is it right,
and how near a same-size copy does it come where the library's Triton split kernel stops at 0.73-0.76 of it
(B 1 x 32768, page 16; a kernel that only reads the cache reaches 0.85, the target is 0.80).

    PYTHONPATH=$PWD python3 research/decode/gluon_decode_probe.py [C] [T] [--budget 300] [--out OUT.json]

``C``: correctness against SDPA on contiguous copies (fp32) and beside the library (``kernels.decode_attention``):
B 1 x 4096, B 1 x 32768, B 4 x 1024 and B 4 ragged, pages 16 and 64, fp16 and bf16, Hq 32 / Hkv 8 / D 128, and
one D 64 case; the prototype at its defaults (the library's split count), at one split (it writes the output
itself) and at many splits (some of them empty); plus three cases of untrusted values: NaN in the cache past
a sequence's end, table entries outside the pool past a sequence's pages, a zero length (a NaN row
expected). A max abs error and ok/FAIL a case; a case that raises is reported, and the rest still run.

``T``: B 1 x 32768 and B 1 x 4096 (page 16, fp16, Hq 32 / Hkv 8 / D 128): the copy, a read-only kernel
(``spread_probe.read_fn``), SDPA, the library, then the prototype over a sweep (tokens a step 64/128, ring
slots 3..6 that fit, splits 8/16/32/64, the register cap where two programs an SM fit), each point checked
against SDPA first, timed in CUDA graphs under both flushes (``tkcourse.bench.graph_ms``; ``spread_probe.py``
says why two). Fractions of the copy's speed, and a compact table last. No point starts after ``--budget`` s.

Neither given: both. Without a GPU it says so and exits 0 (the interpreter runs no Gluon).
"""

import argparse
import datetime
import json
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # the checkout
sys.path.insert(0, str(HERE))  # research/decode: gluon_decode, spread_probe
# isort: off
import tkcourse  # noqa: E402, F401  (first: the mode, before triton is imported)
import torch  # noqa: E402
import triton  # noqa: E402
# isort: on

FLUSHES = ("zero", "read")
TOL = {torch.float16: 5e-3, torch.bfloat16: 3e-2}  # max abs error against fp32 SDPA (outputs are O(0.1))
HQ, HKV = 32, 8


def _reference(q, k, v, seq_lens, table):
    """SDPA in fp32 on contiguous copies, a sequence at a time (ragged lengths: no padding)."""
    from benchmarks import decode_attention as bench

    outs = []
    for b in range(q.shape[0]):
        n = int(seq_lens[b])
        sl = seq_lens[b:b + 1]
        kc = bench.contiguous_cache(k, sl, table[b:b + 1]).float()
        vc = bench.contiguous_cache(v, sl, table[b:b + 1]).float()
        assert kc.shape[2] == n
        outs.append(bench.sdpa(q[b:b + 1].float(), kc, vc))
    return torch.cat(outs)


def _err(out, ref):
    return (out.float() - ref).abs().max().item()


def correctness(rows):
    import gluon_decode as gd

    from benchmarks import decode_attention as bench
    from solutions.kernels import decode_attention as fast

    print("\n== C: correctness (max abs error against fp32 SDPA; the library's beside it) ==", flush=True)
    shapes = [("B1x4096", [4096]), ("B1x32768", [32768]), ("B4x1024", [1024] * 4),
              ("B4 ragged", [1024, 517, 77, 1])]
    cases = [(name, lens, page, dtype, 128) for name, lens in shapes for page in (16, 64)
             for dtype in (torch.float16, torch.bfloat16)]
    cases.append(("B1x4096", [4096], 16, torch.float16, 64))
    fails = 0
    for name, lens, page, dtype, D in cases:
        label = f"{name} page {page} {str(dtype)[6:]} D {D}"
        try:
            q, k, v, seq_lens, table = bench.paged_cache(lens, page, Hq=HQ, Hkv=HKV, D=D, dtype=dtype)
            ref = _reference(q, k, v, seq_lens, table)
            lib = _err(fast.decode_attention(q, k, v, seq_lens, table), ref)
            plan = fast.plan_of(q, k, table).splits
            errs = {}
            for what, splits in (("plan", None), ("1 split", 1), ("64 splits", 64)):
                errs[what] = _err(gd.decode_attention(q, k, v, seq_lens, table, splits=splits), ref)
            torch.cuda.synchronize()
            ok = all(e <= TOL[dtype] for e in errs.values())  # NaN compares False: FAIL
            fails += not ok
            print(f"{label:36s} library {lib:.1e} | prototype " + "  ".join(f"{w} {e:.1e}" for w, e in errs.items())
                  + f"  (plan: {plan} splits)  {'ok' if ok else 'FAIL'}", flush=True)
            rows.append(dict(kind="check", case=label, library=lib, plan_splits=plan, ok=ok, **errs))
        except Exception as e:  # noqa: BLE001  (report and go on)
            fails += 1
            print(f"{label:36s} RAISED {type(e).__name__}: {str(e)[:300]}", flush=True)
            traceback.print_exc(limit=3)
            rows.append(dict(kind="check", case=label, ok=False, error=f"{type(e).__name__}: {e}"[:500]))
    fails += untrusted(rows)
    print(f"C: {fails} failing case(s)", flush=True)
    return fails


def untrusted(rows):
    """Values the kernel must not trust: NaN in the cache past each sequence's end (masked tokens of the last
    step, K's score -inf and V's row zeroed), table entries outside the pool past each sequence's pages (clamped;
    only masked tokens read them), and a zero length (that row NaN, the others right)."""
    import gluon_decode as gd

    from benchmarks import decode_attention as bench

    fails = 0
    lens = [1000, 517, 77, 33]
    for what in ("NaN past the end", "bad table entries past the pages", "zero length"):
        label = f"B4 ragged page 16 fp16: {what}"
        try:
            q, k, v, seq_lens, table = bench.paged_cache(lens, 16, Hq=HQ, Hkv=HKV, D=128, dtype=torch.float16)
            ref = _reference(q, k, v, seq_lens, table)
            expect_nan = torch.zeros(len(lens), dtype=torch.bool)
            if what == "NaN past the end":
                for b, n in enumerate(lens):
                    last = int(table[b, (n - 1) // 16])
                    k[last, n % 16 or 16:] = float("nan")
                    v[last, n % 16 or 16:] = float("nan")
            elif what == "bad table entries past the pages":
                for b, n in enumerate(lens):
                    table[b, -(-n // 16):] = (-5 if b % 2 else 10 ** 6)
            else:
                seq_lens[2] = 0
                expect_nan[2] = True
            errs = {}
            for name, splits in (("plan", None), ("1 split", 1), ("64 splits", 64)):
                out = gd.decode_attention(q, k, v, seq_lens, table, splits=splits).float()
                nan_rows = out.isnan().flatten(1).any(1).cpu()
                good = ~expect_nan
                errs[name] = (_err(out[good.to(out.device)], ref[good.to(ref.device)])
                              if bool((nan_rows == expect_nan).all()) else float("nan"))
            ok = all(e <= TOL[torch.float16] for e in errs.values())
            fails += not ok
            print(f"{label:52s} " + "  ".join(f"{w} {e:.1e}" for w, e in errs.items()) + f"  {'ok' if ok else 'FAIL'}"
                  + ("" if ok else " (nan: the NaN rows were not the expected ones)"), flush=True)
            rows.append(dict(kind="check", case=label, ok=ok, **errs))
        except Exception as e:  # noqa: BLE001
            fails += 1
            print(f"{label:52s} RAISED {type(e).__name__}: {str(e)[:300]}", flush=True)
            rows.append(dict(kind="check", case=label, ok=False, error=f"{type(e).__name__}: {e}"[:500]))
    return fails


def sweep_points():
    """(block_n, stages, splits, maxnreg): the defaults first (with the library's split count, filled in later),
    then tokens a step 64/128, ring slots 3..8 that fit beside the merge's scratch, splits 8..64; the register
    cap of 128 (two programs an SM) only where two programs' rings fit."""
    import gluon_decode as gd

    d = gd.DEFAULTS
    points = [(d["block_n"], d["stages"], None, d["maxnreg"])]
    for block_n in (64, 128):
        for stages in range(3, 9):
            ring = gd.smem_bytes(128, block_n, stages)
            if ring + 8192 > gd.SMEM_LIMIT:  # the lanes' merge at the end takes ~8 KB of scratch
                continue
            caps = (128, None) if 2 * (ring + 9216) <= 228 * 1024 and block_n == 64 else (None,)
            for splits in (8, 16, 32, 64):
                for cap in caps:
                    points.append((block_n, stages, splits, cap))
    return points


def timing(rows, budget, t0):
    import gluon_decode as gd
    from spread_probe import read_fn

    from benchmarks import decode_attention as bench
    from solutions.kernels import decode_attention as fast
    from tkcourse.bench import graph_ms

    print("\n== T: timing (CUDA graphs; microseconds, and the speed as a fraction of a copy's) ==", flush=True)
    shapes = {}
    for lens in (32768, 4096):
        name = f"B1x{lens}"
        q, k, v, seq_lens, table = bench.paged_cache([lens], 16, Hq=HQ, Hkv=HKV, D=128, dtype=torch.float16)
        kc, vc = bench.contiguous_cache(k, seq_lens, table), bench.contiguous_cache(v, seq_lens, table)
        ref = bench.sdpa(q, kc, vc).float()
        plan = fast.plan_of(q, k, table)
        dst = torch.empty_like(k)
        fns = {"copy": (lambda d, s: lambda: d.copy_(s))(dst, k), "read": read_fn(k, v),
               "sdpa": (lambda a, b, c: lambda: bench.sdpa(a, b, c))(q, kc, vc),
               "library": (lambda a, b, c, d, e: lambda: fast.decode_attention(a, b, c, d, e))(q, k, v, seq_lens, table)}
        print(f"{name}, page 16: library plan {plan}; library max |diff| against SDPA "
              f"{_err(fns['library'](), ref):.1e}", flush=True)
        base = {}
        for flush in FLUSHES:
            t = {p: graph_ms(fn, rep=80, flush=flush) * 1e3 for p, fn in fns.items()}
            base[flush] = t
            for p, us in t.items():
                rows.append(dict(kind="provider", shape=name, name=p, flush=flush, us=round(us, 2),
                                 of_copy=round(t["copy"] / us, 3)))
                print(f"{name:9s} {flush:4s} flush  {p:8s} {us:8.1f} us  {t['copy'] / us:.3f} of a copy", flush=True)
        shapes[name] = dict(inputs=(q, k, v, seq_lens, table), ref=ref, plan=plan, base=base)

    points = sweep_points()
    stopped = False
    for point in points:
        for name, sh in shapes.items():
            if time.time() - t0 > budget:
                stopped = True
                break
            block_n, stages, splits, cap = point
            splits = sh["plan"].splits if splits is None else splits
            key = f"{block_n}/{stages}/{splits}/{cap or '-'}"
            if any(r.get("kind") == "sweep" and r["shape"] == name and r["point"] == key for r in rows):
                continue  # the defaults' point again
            fn = (lambda t, bn, st, sp, mr: lambda: gd.decode_attention(*t, splits=sp, block_n=bn, stages=st,
                                                                         maxnreg=mr))(sh["inputs"], block_n, stages,
                                                                                      splits, cap)
            try:
                err = _err(fn(), sh["ref"])
                if not err <= TOL[torch.float16]:
                    print(f"{name:9s} {key:16s} err {err:.1e}: WRONG, not timed", flush=True)
                    rows.append(dict(kind="sweep", shape=name, point=key, err=err, wrong=True))
                    continue
                t = {f: graph_ms(fn, rep=40, flush=f) * 1e3 for f in FLUSHES}
            except Exception as e:  # noqa: BLE001  (a point that does not compile, fit or launch)
                print(f"{name:9s} {key:16s} {type(e).__name__}: {str(e)[:160]}", flush=True)
                rows.append(dict(kind="sweep", shape=name, point=key, error=f"{type(e).__name__}: {e}"[:300]))
                continue
            row = dict(kind="sweep", shape=name, point=key, block_n=block_n, stages=stages, splits=splits, maxnreg=cap,
                       default=point == points[0], err=err, **{f"us_{f}": round(t[f], 2) for f in FLUSHES},
                       **{f"of_copy_{f}": round(sh["base"][f]["copy"] / t[f], 3) for f in FLUSHES})
            rows.append(row)
            print(f"{name:9s} {key:16s}{' (defaults)' if row['default'] else ''} err {err:.1e}  " + "  ".join(
                f"{f} {t[f]:7.1f} us {row[f'of_copy_{f}']:.3f}" for f in FLUSHES), flush=True)
        if stopped:
            print(f"budget of {budget:.0f} s spent: the rest of the sweep skipped", flush=True)
            break

    print("\nblock_n/stages/splits/maxnreg   zero flush us (of copy)   read flush us (of copy)   (best 10 a shape, by read)")
    for name, sh in shapes.items():
        print(f"-- {name}, page 16, fp16, Hq 32 / Hkv 8 / D 128")
        for p in ("copy", "read", "sdpa", "library"):
            z, r = sh["base"]["zero"][p], sh["base"]["read"][p]
            print(f"   {p:28s} {z:8.1f} ({sh['base']['zero']['copy'] / z:.3f})       "
                  f"{r:8.1f} ({sh['base']['read']['copy'] / r:.3f})")
        sweep = sorted((r for r in rows if r.get("kind") == "sweep" and r["shape"] == name and "us_read" in r),
                       key=lambda r: r["us_read"])
        for r in sweep[:10]:
            print(f"   {r['point'] + (' defaults' if r['default'] else ''):28s} {r['us_zero']:8.1f} ({r['of_copy_zero']:.3f})"
                  f"       {r['us_read']:8.1f} ({r['of_copy_read']:.3f})")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("parts", nargs="*", help="C: correctness, T: timing (default: both)")
    ap.add_argument("--budget", type=float, default=300.0, help="no new sweep point after this many seconds")
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    args = ap.parse_args(argv)
    parts = {p.upper() for p in args.parts} or {"C", "T"}
    if parts - {"C", "T"}:
        ap.error(f"parts are C and T, got {sorted(parts - {'C', 'T'})}")
    if not torch.cuda.is_available():
        print("needs a GPU: the prototype is Gluon for Hopper (sm_90), which Triton's interpreter does not run")
        return 0
    t0 = time.time()
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    print(f"{torch.cuda.get_device_name()} | torch {torch.__version__} | triton {triton.__version__} | {now}", flush=True)
    import gluon_decode as gd

    print("prototype defaults:", gd.DEFAULTS, flush=True)
    rows = [dict(kind="header", gpu=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                 utc=now, defaults=gd.DEFAULTS)]
    fails = 0
    try:
        if "C" in parts:
            fails = correctness(rows)
        if "T" in parts:
            timing(rows, args.budget, t0)
    finally:
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(rows, indent=1, default=lambda o: None if o is None else str(o)))
            print(f"rows written to {args.out}")
    print(f"done in {time.time() - t0:.0f} s; {fails} failing correctness case(s)"
          + ("" if "C" in parts else " (C not run)"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
