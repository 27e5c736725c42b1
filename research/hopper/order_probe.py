"""H200 A/B of one of the ping-pong attention forward's switches, the key off against on, with SDPA's cuDNN
backend as the yardstick, all in one run. ``--key REVERSE`` (the default): the order of the causal query
tiles, today's (program m takes a head's m-th pair) against heaviest first (the m-th from the end, which
read the most keys). ``--key MASK_ALL``: the causal mask on every key block against on the diagonal's only.
``--key PERSISTENT``: a program a tile against one program an SM taking tile after tile (heaviest first when
causal), the next tile's loads under this one's last block. ``--key EARLY``: each warpgroup's softmax after
both its GEMMs are done against as soon as its S is (its P V still running).
A new switch of ``attention_pingpong_kernel`` goes in ``KEYS`` (``research/README.md`` has the runs,
among them one of a switch measured and taken out again).

    PYTHONPATH=$PWD python3 research/hopper/order_probe.py [C] [T] [--key REVERSE|MASK_ALL|PERSISTENT|EARLY] \
        [--causal causal|plain|both] [--persistent] [--on KEY ...] [--rounds 5] [--budget 300] [--dtype float16|bfloat16] [--out OUT.json]

C. Correctness on the GPU first: the key off and on against ``gluon_attention.reference`` (max abs error)
   and against each other (each switch changes which program computes a tile or when, never the
   arithmetic, so the outputs and log-sum-exps must match bit for bit), causal (and one case not), D 64 and
   128, MHA and GQA, N a few tiles a head (an odd count among them).
T. Time (``--causal``: causal only by default): lesson 06's shapes (B 16 x H 16 x N 1024, B 4 x H 16 x N
   4096; D 128 and 64), the grouped-query Hq 32, Hkv 8, D 128, N 4096 at B 1 and 4, and B 1 x H 16 x N
   16384 x D 128. Each kernel through ``gluon_attention.attention_forward(...,
   kernel=attention_pingpong_kernel, config=dict(PP_CONFIG, KEY=...))``, cuDNN through
   ``sdpa_kernel(SDPBackend.CUDNN_ATTENTION)``.

Runs of this rung move by about 5% from one run to the next, more than a change may be worth, so the three
are interleaved: each round times off, on and cuDNN once each (their order rotated from round to round),
replayed from a CUDA graph (``tkcourse.bench.graph_ms``) and eagerly (``triton.testing.do_bench``, which at
the smaller shapes also counts the launcher's Python checks: read the graph column there). Each row reports
the medians over rounds, the per-round ratio on / off (its min, median and max: below 1, the key on is
faster) and, per round, cuDNN's time over each kernel's (``x cuDNN`` as ``research/README.md``'s rows give
it: above 1, faster than cuDNN).

A total budget (``--budget`` seconds, checked before each round) stops it where it is; what was measured is
printed. Each case runs in try/except; the compact table is printed last. Without a GPU it says so and exits 0.
"""

import argparse
import itertools
import json
import statistics
import sys
import time

# isort: off
import tkcourse  # noqa: F401  (first: the mode, before triton is imported)
import torch
import triton
# isort: on

from solutions.kernels import gluon_attention as ga
from tkcourse.bench import graph_ms

T0 = time.time()
#: (B, Hq, Hkv, N, D, causal) of the correctness check: 3, 8, 4 and 16 pairs of query tiles a head
CHECK_CASES = ((2, 4, 4, 384, 64, True), (2, 4, 4, 1024, 128, True), (1, 8, 2, 1024, 64, True),
               (2, 8, 2, 512, 128, True), (1, 4, 4, 384, 128, False),
               (4, 16, 4, 2048, 128, True), (4, 16, 16, 2048, 64, False))  # 512 tiles: many a program
#: (B, Hq, Hkv, N, D) of the timed shapes, all causal
SHAPES = ((16, 16, 16, 1024, 128), (4, 16, 16, 4096, 128), (16, 16, 16, 1024, 64), (4, 16, 16, 4096, 64),
          (1, 32, 8, 4096, 128), (4, 32, 8, 4096, 128), (1, 16, 16, 16384, 128))
NAMES = ("off", "on", "cudnn")
#: the masks each shape is timed with (``--causal``)
CAUSAL_MODES = {"causal": (True,), "plain": (False,), "both": (False, True)}
#: the config key under test (``--key``): the ping-pong rung's boolean switches
KEYS = ("REVERSE", "MASK_ALL", "PERSISTENT", "EARLY")
KEY = "REVERSE"
BASE = dict(ga.PP_CONFIG)  # the config the key is switched on (``--persistent``: the library's persistent one)


def log(msg):
    print(f"[{time.time() - T0:6.1f}s] {msg}", flush=True)


def over_budget(args) -> bool:
    return time.time() - T0 > args.budget


def pingpong(q, k, v, causal, on, return_lse=False):
    return ga.attention_forward(q, k, v, causal, kernel=ga.attention_pingpong_kernel,
                                config=dict(BASE, **{KEY: on}), return_lse=return_lse)


def cudnn(q, k, v, causal):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                                enable_gqa=q.shape[1] != k.shape[1])


def label(B, Hq, Hkv, N, D, causal=True):
    heads = f"H{Hq}" if Hq == Hkv else f"Hq{Hq}-Hkv{Hkv}"
    return f"B{B}-{heads}-N{N}-D{D}{'-causal' if causal else ''}"


def check_case(B, Hq, Hkv, N, D, causal, dtype):
    g = torch.Generator(device="cuda").manual_seed(N * 31 + D + Hkv)
    q = torch.randn(B, Hq, N, D, device="cuda", dtype=dtype, generator=g)
    k, v = (torch.randn(B, Hkv, N, D, device="cuda", dtype=dtype, generator=g) for _ in range(2))
    ref = ga.reference(q, k, v, causal)
    o_off, lse_off = pingpong(q, k, v, causal, False, return_lse=True)
    o_on, lse_on = pingpong(q, k, v, causal, True, return_lse=True)
    err_off = (o_off.float() - ref.float()).abs().max().item()
    err_on = (o_on.float() - ref.float()).abs().max().item()
    same = torch.equal(o_off, o_on) and torch.equal(lse_off, lse_on)
    diff = (o_off.float() - o_on.float()).abs().max().item()
    tol = 1e-2 if dtype == torch.float16 else 3e-2
    ok = same and err_off <= tol and err_on <= tol
    return ok, dict(err_off=err_off, err_on=err_on, identical=same, diff=diff, tol=tol)


def part_check(args, dtype):
    out = []
    for B, Hq, Hkv, N, D, causal in CHECK_CASES:
        name = f"{label(B, Hq, Hkv, N, D, causal)} {str(dtype)[6:]}"
        if over_budget(args):
            log(f"skip {name}: over budget")
            continue
        row = dict(case=name)
        try:
            ok, notes = check_case(B, Hq, Hkv, N, D, causal, dtype)
            row.update(notes, ok=ok)
            log(f"{'ok  ' if ok else 'FAIL'} {name}: vs reference off {notes['err_off']:.1e} on "
                f"{notes['err_on']:.1e} (tol {notes['tol']:.0e}); {KEY} on vs off "
                f"{'identical' if notes['identical'] else 'DIFFER by %.1e' % notes['diff']}")
        except Exception as e:  # noqa: BLE001 (say what failed, and go on)
            row.update(ok=False, note=f"{type(e).__name__}: {str(e)[:300]}")
            log(f"FAIL {name}: {row['note']}")
        out.append(row)
    log(f"checked: {sum(r['ok'] for r in out)} of {len(out)} pass")
    return out


def spread(xs):
    return dict(min=min(xs), median=statistics.median(xs), max=max(xs)) if xs else None


def time_case(args, B, Hq, Hkv, N, D, dtype, causal=True):
    """Rounds of the key off, on and cuDNN, each once a round by graph and eagerly; stops at the budget."""
    q = torch.randn(B, Hq, N, D, device="cuda", dtype=dtype)
    k, v = (torch.randn(B, Hkv, N, D, device="cuda", dtype=dtype) for _ in range(2))
    fns = {"off": lambda: pingpong(q, k, v, causal, False), "on": lambda: pingpong(q, k, v, causal, True),
           "cudnn": lambda: cudnn(q, k, v, causal)}
    ref = fns["cudnn"]()
    row = {f"diff_{name}": (fns[name]().float() - ref.float()).abs().max().item() for name in ("off", "on")}
    row["tflop"] = 4 * B * Hq * N * N * D / (2 if causal else 1) / 1e12
    graph = {name: [] for name in NAMES}
    eager = {name: [] for name in NAMES}
    try:
        for r in range(args.rounds):
            if over_budget(args):
                row["note"] = f"budget reached after {r} of {args.rounds} rounds"
                break
            for name in NAMES[r % 3:] + NAMES[:r % 3]:  # rotated: no kernel always right after another
                graph[name].append(graph_ms(fns[name], rep=args.graph_rep))
                eager[name].append(triton.testing.do_bench(fns[name], warmup=10, rep=args.eager_rep))
    except Exception as e:  # noqa: BLE001 (keep the rounds done)
        row["note"] = f"round {r + 1}: {type(e).__name__}: {str(e)[:300]}"
    done = min(len(xs) for t in (graph, eager) for xs in t.values())  # whole rounds only
    graph, eager = ({name: xs[:done] for name, xs in t.items()} for t in (graph, eager))
    row.update(rounds=done, graph_ms=graph, eager_ms=eager)
    for kind, t in (("graph", graph), ("eager", eager)):
        row[f"{kind}_median_ms"] = {name: statistics.median(xs) if xs else None for name, xs in t.items()}
        row[f"{kind}_on_over_off"] = spread([b / a for a, b in zip(t["off"], t["on"])])
        for name in ("off", "on"):
            row[f"{kind}_{name}_x_cudnn"] = spread([c / x for x, c in zip(t[name], t["cudnn"])])
    return row


def _fmt(s, digits=3):
    return "-" if s is None else f"{s['min']:.{digits}f}/{s['median']:.{digits}f}/{s['max']:.{digits}f}"


def part_time(args, dtype):
    rows = []
    for (B, Hq, Hkv, N, D), causal in itertools.product(args.shape or SHAPES, CAUSAL_MODES[args.causal]):
        name = label(B, Hq, Hkv, N, D, causal)
        row = dict(shape=name, dtype=str(dtype)[6:])
        if over_budget(args):
            row["note"] = "not run: over budget"
            log(f"skip {name}: over budget")
            rows.append(row)
            continue
        try:
            row.update(time_case(args, B, Hq, Hkv, N, D, dtype, causal))
            if row["rounds"]:
                g, e = row["graph_median_ms"], row["eager_median_ms"]
                log(f"{name} {row['dtype']} ({row['rounds']} rounds): graph ms off {g['off']:.3f} on "
                    f"{g['on']:.3f} cudnn {g['cudnn']:.3f}; on/off graph "
                    f"{_fmt(row['graph_on_over_off'])} eager {_fmt(row['eager_on_over_off'])}; "
                    f"x cuDNN graph {row['graph_off_x_cudnn']['median']:.2f} -> "
                    f"{row['graph_on_x_cudnn']['median']:.2f}, eager {row['eager_off_x_cudnn']['median']:.2f}"
                    f" -> {row['eager_on_x_cudnn']['median']:.2f}; max diff to cuDNN off "
                    f"{row['diff_off']:.1e} on {row['diff_on']:.1e}"
                    + (f"; {row['note']}" if "note" in row else ""))
            else:
                log(f"{name}: {row.get('note', 'no rounds')}")
        except Exception as e:  # noqa: BLE001 (say what failed, and go on)
            row["note"] = f"{type(e).__name__}: {str(e)[:300]}"
            log(f"FAIL {name}: {row['note']}")
        rows.append(row)
        torch.cuda.empty_cache()
    return rows


def table(rows):
    print(f"| shape | dtype | rounds | graph ms {KEY} off / on / cuDNN | on / off graph min/med/max "
          "| on / off eager min/med/max | x cuDNN graph off -> on | x cuDNN eager off -> on |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if not r.get("rounds"):
            print(f"| {r['shape']} | {r['dtype']} | 0 | {r.get('note', '-')} | | | | |")
            continue
        g = r["graph_median_ms"]
        print(f"| {r['shape']} | {r['dtype']} | {r['rounds']}{' *' if 'note' in r else ''} | {g['off']:.3f} / "
              f"{g['on']:.3f} / "
              f"{g['cudnn']:.3f} | {_fmt(r['graph_on_over_off'])} | {_fmt(r['eager_on_over_off'])} | "
              f"{r['graph_off_x_cudnn']['median']:.2f} -> {r['graph_on_x_cudnn']['median']:.2f} | "
              f"{r['eager_off_x_cudnn']['median']:.2f} -> {r['eager_on_x_cudnn']['median']:.2f} |")
    if any(r.get("rounds") and "note" in r for r in rows):
        print("* fewer rounds than asked: the log and --out say why")


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("parts", nargs="*", metavar="C|T", help="C (check), T (time); default both")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds a shape (default 5)")
    p.add_argument("--budget", type=float, default=300.0, help="seconds in all, checked before each round (300)")
    p.add_argument("--dtype", default="float16", choices=("float16", "bfloat16"), help="default float16")
    p.add_argument("--graph-rep", type=int, default=30, help="graph_ms's timed replays a measurement (30)")
    p.add_argument("--eager-rep", type=int, default=50, help="do_bench's milliseconds a measurement (50)")
    p.add_argument("--out", help="write every number (each round's too) to this JSON file")
    p.add_argument("--persistent", action="store_true",
                   help="switch the key on the library's persistent launch (LIBRARY_CONFIG), not PP_CONFIG")
    p.add_argument("--on", action="append", default=[], choices=KEYS, metavar="KEY",
                   help="another switch, on for both sides of the A/B (repeatable)")
    p.add_argument("--key", default="REVERSE", choices=KEYS, help="the switch to A/B (default REVERSE)")
    p.add_argument("--shape", action="append", type=lambda s: tuple(int(x) for x in s.split(",")), metavar="B,HQ,HKV,N,D",
                   help="time this shape instead of SHAPES (repeatable)")
    p.add_argument("--causal", default="causal", choices=tuple(CAUSAL_MODES),
                   help="time causal (default), plain (not causal) or both")
    args = p.parse_args(argv)
    if set(args.parts) - {"C", "T"}:  # not argparse's choices: Python 3.11 refuses nargs="*" empty with them
        p.error(f"parts: C or T, not {' '.join(args.parts)}")
    return args


def main(argv):
    global KEY, BASE
    args = parse(argv)
    KEY = args.key
    BASE = dict(ga.LIBRARY_CONFIG if args.persistent else ga.PP_CONFIG, **{key: True for key in args.on})
    parts = args.parts or ["C", "T"]
    if not torch.cuda.is_available():
        print("order_probe needs a GPU (an H100/H200): none here, nothing run")
        return 0
    if torch.cuda.get_device_capability() != (9, 0):
        print(f"order_probe needs a Hopper GPU (sm_90), not {torch.cuda.get_device_name()}: nothing run")
        return 0
    dtype = getattr(torch, args.dtype)
    header = (f"{torch.cuda.get_device_name()} torch {torch.__version__} triton {triton.__version__} "
              f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {args.dtype} key {KEY} {args.causal}{' persistent' if args.persistent else ''}{''.join(' on ' + k for k in args.on)} rounds {args.rounds} "
              f"budget {args.budget:.0f}s")
    print(header, flush=True)
    result = dict(header=header, argv=list(argv))
    if "C" in parts:
        result["check"] = part_check(args, dtype)
        if not all(r["ok"] for r in result["check"]):
            log("WARNING: a check failed; the times below are of kernels that may be wrong")
    if "T" in parts:
        result["time"] = part_time(args, dtype)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
        log(f"wrote {args.out}")
    if "check" in result:
        print(f"check: {sum(r['ok'] for r in result['check'])} of {len(result['check'])} pass "
              f"({', '.join(r['case'] for r in result['check'] if not r['ok']) or 'none failed'})")
    if "time" in result:
        print(header)
        table(result["time"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
