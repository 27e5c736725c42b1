"""Proton's intra-kernel profile of lesson 12's ping-pong attention on an H100/H200: which warpgroup does what,
and when. Lesson 12 draws its schedules from a model (``tkcourse/plots/schedule.py``); this records one.

    PYTHONPATH=$PWD python3 research/hopper/schedule_probe.py OUT_DIR [--n 1024] [--causal]

Runs ``gluon_attention.attention_forward(..., kernel=attention_pingpong_kernel)`` once under proton's
instrumentation backend, which compiles the scopes of ``pingpong_consumer`` ("wait", "mma", "softmax": each a
phase of a step of the key loop; without proton they compile to nothing), at B 1, H 1, N tokens, D 128, fp16
(N / 128 programs). Writes proton's Chrome trace (``OUT_DIR/pingpong.chrome_trace``) and each consumer
warpgroup's phases per CTA (``warpgroups``, below; ``OUT_DIR/schedule.json``), checks the output against
torch, and prints each phase's share of a warpgroup's time and the first CTA's first phases.

    python3 research/hopper/schedule_probe.py --record tkcourse/data/h200/proton/pingpong_schedule.json \
        RUN_DIR [RUN_DIR ...] --provenance GPU TORCH TRITON DATE COMMIT

writes what lesson 12 draws (``tkcourse.bench.core.load_schedule_run``) from runs' traces (no GPU needed):
per CTA, each consumer warpgroup's phases, each phase from the first of its four warps to enter it to the
last to leave it, in thousands of cycles from the CTA's first record (the trace's microseconds at its
nominal 1000 MHz are cycles / 1000). Warps 0-3 run the first consumer (``gl.warp_specialize``'s default
partition), warps 4-7 the second; the producer warp has no scopes.
"""

import json
import sys
import time
from collections import defaultdict
from pathlib import Path

# isort: off
import tkcourse  # noqa: F401  (first: the mode, before triton is imported)
import torch
import triton
import triton.profiler as proton
# isort: on

from solutions.kernels import gluon_attention as ga


def run(n, causal):
    q, k, v = (torch.randn(1, 1, n, 128, device="cuda", dtype=torch.float16) for _ in range(3))
    return ga.attention_forward(q, k, v, causal, kernel=ga.attention_pingpong_kernel), ga.reference(q, k, v, causal)


def warpgroups(trace: dict) -> dict:
    """``{cta: {"warpgroup 0": [[phase, start, end], ...], "warpgroup 1": [...]}}`` from a Chrome trace (module
    docstring): a warpgroup's i-th phase spans its four warps' i-th records."""
    by_warp = defaultdict(list)
    for e in trace.get("traceEvents", []):
        if e.get("ph") == "X":
            cta = e["pid"].rsplit(" ", 1)[-1]  # "... Core124 CTA0" -> "CTA0"
            warp = int(e["tid"].split()[1])  # "warp 3 (line 0)" -> 3
            by_warp[(cta, warp)].append((float(e["ts"]), float(e["ts"]) + float(e["dur"]), e["name"]))
    out: dict = defaultdict(dict)
    for cta in sorted({c for c, _ in by_warp}, key=lambda c: int(c[3:])):
        t0 = min(a for (c, _), evs in by_warp.items() if c == cta for a, _, _ in evs)
        for wg in (0, 1):
            warps = [sorted(by_warp[(cta, w)]) for w in range(4 * wg, 4 * wg + 4) if (cta, w) in by_warp]
            if not warps:
                continue
            count = min(len(w) for w in warps)
            out[cta][f"warpgroup {wg}"] = [
                [warps[0][i][2], round(min(w[i][0] for w in warps) - t0, 3), round(max(w[i][1] for w in warps) - t0, 3)]
                for i in range(count) if all(w[i][2] == warps[0][i][2] for w in warps)]
    return dict(out)


def record(argv):
    """``--record PACKAGE_JSON RUN_DIR ... --provenance GPU TORCH TRITON DATE COMMIT`` (module docstring)."""
    target = Path(argv[0])
    at = argv.index("--provenance")
    gpu, torch_v, triton_v, date, commit = argv[at + 1: at + 6]
    runs = []
    for run_dir in map(Path, argv[1:at]):
        meta = json.loads((run_dir / "schedule.json").read_text())
        trace = json.loads((run_dir / "pingpong.chrome_trace").read_text())
        runs.append(dict(kernel="attention_pingpong_kernel", B=1, H=1, n=meta["n"], D=128, dtype="float16",
                         causal=meta["causal"], ctas=warpgroups(trace)))
    doc = dict(provenance=dict(gpu=gpu, torch=torch_v, triton=triton_v, date=date, commit=commit,
                               command="PYTHONPATH=$PWD python3 research/hopper/schedule_probe.py OUT [--causal], then "
                                       "--record (research/hopper/schedule_probe.py's docstring)"),
               unit="thousand cycles", runs=runs)
    target.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{target}: {len(runs)} runs, " + ", ".join(f"{len(r['ctas'])} CTAs" for r in runs))
    return 0


def main(argv):
    if argv and argv[0] == "--record":
        return record(argv[1:])
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    n = int(argv[argv.index("--n") + 1]) if "--n" in argv else 1024
    causal = "--causal" in argv
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, time.strftime("%FT%TZ", time.gmtime()),
          f"N {n}{' causal' if causal else ''}")
    # warp granularity: a warp-specialized kernel takes no coarser one; the record buffer in shared memory
    # first, then in global memory (the kernel's own buffers may leave no room for it)
    for buffer in ("shared", "global"):
        proton.start(str(out / "pingpong"), data="trace", backend="instrumentation",
                     mode=proton.mode.Default(granularity="warp", buffer_type=buffer))
        try:
            o, ref = run(n, causal)
            torch.cuda.synchronize()
            break
        except Exception as err:  # a compile the instrumentation breaks: say so, try the next buffer
            print(f"buffer {buffer}: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")
            o = None
        finally:
            proton.finalize()
    if o is None:
        return 1
    print("record buffer:", buffer)
    print("max |o - torch|:", (o.float() - ref.float()).abs().max().item())
    files = sorted(out.glob("pingpong*"))
    print("written:", ", ".join(f.name for f in files))
    trace_file = next((f for f in files if "trace" in f.name), None)
    if trace_file is None:
        print("no Chrome trace written")
        return 1
    ctas = warpgroups(json.loads(trace_file.read_text()))
    (out / "schedule.json").write_text(json.dumps(dict(n=n, causal=causal, ctas=ctas), indent=1))
    lanes = [phases for wgs in ctas.values() for phases in wgs.values()]
    print(f"{len(ctas)} CTAs; each phase's share of a warpgroup's span, averaged over {len(lanes)} warpgroups:")
    share = defaultdict(float)
    for phases in lanes:
        span = (max(p[2] for p in phases) - min(p[1] for p in phases)) or 1.0
        for name, a, b in phases:
            share[name] += (b - a) / span / len(lanes)
    for name, x in sorted(share.items()):
        print(f"  {name:10s} {x:6.1%}")
    first = next(iter(ctas), None)
    for wg, phases in (ctas[first].items() if first else ()):
        print(first, wg, " ".join(f"{name}[{a:.2f},{b:.2f}]" for name, a, b in phases[:12]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
