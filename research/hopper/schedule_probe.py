"""Proton's intra-kernel profile of lesson 12's ping-pong attention on an H100/H200: which warpgroup does what,
and when. Lesson 12 draws its schedules from a model (``tkcourse/plots/schedule.py``); this records one.

    PYTHONPATH=$PWD python3 research/hopper/schedule_probe.py OUT_DIR [--n 1024] [--causal]

Runs ``gluon_attention.attention_forward(..., kernel=attention_pingpong_kernel)`` once under proton's
instrumentation backend, which compiles the scopes of ``pingpong_consumer`` ("wait", "mma", "softmax": each a
phase of a step of the key loop; without proton they compile to nothing), at B 1, H 1, N tokens, D 128, fp16
(N / 128 programs). Writes proton's Chrome trace (``OUT_DIR/pingpong.chrome_trace``) and, per track of the
trace (proton names one a CTA and warpgroup), its scopes as ``[name, start, end]`` from the track's first
record (``OUT_DIR/schedule.json``), checks the output against torch, and prints each scope's share of a
track's time and the first track's first phases.
"""

import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch
import triton
import triton.profiler as proton

import tkcourse  # noqa: F401  (the mode, before any kernel is defined)
from solutions.kernels import gluon_attention as ga


def run(n, causal):
    q, k, v = (torch.randn(1, 1, n, 128, device="cuda", dtype=torch.float16) for _ in range(3))
    return ga.attention_forward(q, k, v, causal, kernel=ga.attention_pingpong_kernel), ga.reference(q, k, v, causal)


def tracks(trace: dict) -> dict:
    """``{track: [[name, start, end], ...]}`` from a Chrome trace's complete events, times from the track's first."""
    out = defaultdict(list)
    for e in trace.get("traceEvents", []):
        if e.get("ph") == "X":
            out[f"{e.get('pid')}/{e.get('tid')}"].append([e["name"], float(e["ts"]), float(e["ts"]) + float(e["dur"])])
    for events in out.values():
        events.sort(key=lambda x: x[1])
        t0 = events[0][1]
        for x in events:
            x[1] -= t0
            x[2] -= t0
    return dict(out)


def main(argv):
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    n = int(argv[argv.index("--n") + 1]) if "--n" in argv else 1024
    causal = "--causal" in argv
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, time.strftime("%FT%TZ", time.gmtime()),
          f"N {n}{' causal' if causal else ''}")
    proton.start(str(out / "pingpong"), data="trace", backend="instrumentation",
                 mode=proton.mode.Default(granularity="warp_group"))
    o, ref = run(n, causal)
    torch.cuda.synchronize()
    proton.finalize()
    print("max |o - torch|:", (o.float() - ref.float()).abs().max().item())
    files = sorted(out.glob("pingpong*"))
    print("written:", ", ".join(f.name for f in files))
    trace_file = next((f for f in files if "trace" in f.name), None)
    if trace_file is None:
        print("no Chrome trace written")
        return 1
    per_track = tracks(json.loads(trace_file.read_text()))
    (out / "schedule.json").write_text(json.dumps(dict(n=n, causal=causal, tracks=per_track), indent=1))
    print(f"{len(per_track)} tracks; each scope's share of a track's span, averaged over tracks:")
    share = defaultdict(list)
    for events in per_track.values():
        span = max(e[2] for e in events) or 1.0
        totals = defaultdict(float)
        for name, a, b in events:
            totals[name] += b - a
        for name, t in totals.items():
            share[name].append(t / span)
    for name, xs in sorted(share.items()):
        print(f"  {name:10s} {sum(xs) / len(xs):6.1%} over {len(xs)} tracks")
    for track, events in list(per_track.items())[:2]:
        print(track, " ".join(f"{name}[{a:.0f},{b:.0f}]" for name, a, b in events[:12]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
