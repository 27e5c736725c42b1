"""H200: whether the library's attention forward and SDPA's cuDNN backend run at the same SM clock when timed
the way ``tkcourse bench`` times them, or whether one of them is held back by the GPU's power limit.

Why. In the bench run of 2026-12-04 13:23 UTC (``hopper/logs/bench_early_persistent.*``) the library's forward
at the grouped-query B 4 x Hq 32 x Hkv 8 x N 4096 x D 128 shape took 1.82 ms a call eagerly (its p20 and p80
601 and 677 TFLOP/s: two speeds) and 1.95 ms replayed from a CUDA graph (100 replays back to back), where
``order_probe.py`` (30 replays, interleaved with cuDNN) had it at 1.81 ms; cuDNN read 1.86 ms both ways. A
kernel that keeps the tensor cores busier draws more power, and past the board's limit the SM clock drops:
long runs of one kernel would then read slower than short interleaved ones, and the two speeds would be two
clocks. This probe measures each kernel at several run lengths while ``nvidia-smi`` samples the SM clock, the
power draw and the temperature every 50 ms, and prints, per measurement, the median time beside the median
clock and power seen while it ran.

    PYTHONPATH=$PWD python3 research/hopper/power_probe.py [--shape B,HQ,HKV,N,D[,causal] ...] [--reps 30 100 300]
        [--out OUT.json]

Each kernel: ``kernels.attention.attention_forward`` (the route, lean launch) and SDPA under
``sdpa_kernel(SDPBackend.CUDNN_ATTENTION)`` with ``enable_gqa``, fp16, replayed from a CUDA graph by
``tkcourse.bench.graph_ms`` (the zeroing flush before each replay) at each ``--reps``, the two kernels taking
turns at each length. Without a GPU, or without ``nvidia-smi``, it says so and exits 0.

First run 2026-12-04 16:39 UTC (``logs/power_probe_first.*``): both kernels met the same clock at each length
(1965-1980 MHz at 30 replays, 1620 at 100 and 300); the hypothesis above does not hold.
"""

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time

# isort: off
import tkcourse  # noqa: F401  (first: the mode, before triton is imported)
import torch
import triton
# isort: on

from tkcourse.bench import graph_ms

SHAPES = ((4, 32, 8, 4096, 128, False), (4, 32, 8, 4096, 128, True), (4, 16, 16, 4096, 128, False))
QUERY = "timestamp,clocks.sm,power.draw,temperature.gpu"


class Sampler:
    """``nvidia-smi`` in the background, a line every 50 ms: ``(seconds since the epoch, MHz, W, C)``."""

    def __init__(self):
        self.proc = subprocess.Popen(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits",
                                      "-lms", "50"], stdout=subprocess.PIPE, text=True)
        self.rows = []

    def stop(self):
        self.proc.terminate()
        out, _ = self.proc.communicate(timeout=10)
        self.rows = samples(out)
        return self.rows


def samples(text):
    """``nvidia-smi``'s lines (``2026/12/04 13:23:11.123, 1980, 650.12, 60``: local time) as ``(seconds since
    the epoch, MHz, W, C)``; a line cut short when the sampler was stopped is left out."""
    rows = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        try:
            whole, _, frac = parts[0].partition(".")
            stamp = time.mktime(time.strptime(whole, "%Y/%m/%d %H:%M:%S")) + (float("0." + frac) if frac else 0.0)
            rows.append((stamp, float(parts[1]), float(parts[2]), float(parts[3])))
        except (ValueError, IndexError):
            continue
    return rows


def window(rows, t0, t1):
    """Median SM clock, power and temperature of the samples taken between t0 and t1 (None if none)."""
    inside = [r for r in rows if t0 <= r[0] <= t1]
    if not inside:
        return None
    return {key: statistics.median(r[i] for r in inside) for i, key in ((1, "mhz"), (2, "watts"), (3, "celsius"))}


def kernels(B, Hq, Hkv, N, D, causal):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from solutions.kernels import attention as lib

    q = torch.randn(B, Hq, N, D, device="cuda", dtype=torch.float16)
    k, v = (torch.randn(B, Hkv, N, D, device="cuda", dtype=torch.float16) for _ in range(2))

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                                    enable_gqa=Hq != Hkv)

    return {"library": lambda: lib.attention_forward(q, k, v, causal), "cudnn": cudnn}


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", action="append", metavar="B,HQ,HKV,N,D[,causal]",
                   type=lambda s: (*(int(x) for x in s.split(",")[:5]), "causal" in s.split(",")[5:]))
    p.add_argument("--reps", type=int, nargs="+", default=[30, 100, 300], help="graph replays a measurement")
    p.add_argument("--out", help="write every measurement and sample to this JSON file")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("power_probe needs a GPU (an H100/H200): none here, nothing run")
        return 0
    if shutil.which("nvidia-smi") is None:
        print("power_probe needs nvidia-smi on the PATH: none here, nothing run")
        return 0
    print(f"{torch.cuda.get_device_name()} torch {torch.__version__} triton {triton.__version__} "
          f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} reps {args.reps}", flush=True)
    sampler = Sampler()
    time.sleep(0.5)  # a first sample before the first kernel
    spans = []
    for shape in args.shape or SHAPES:
        fns = kernels(*shape)
        for reps in args.reps:
            for name, fn in fns.items():
                t0 = time.time()
                ms = graph_ms(fn, rep=reps)
                spans.append(dict(shape=list(shape), kernel=name, reps=reps, ms=ms, t0=t0, t1=time.time()))
    rows = sampler.stop()
    print("shape | kernel | replays | graph ms | SM MHz | W | C")
    print("|---|---|---|---|---|---|---|")
    for s in spans:
        w = window(rows, s["t0"], s["t1"]) or dict(mhz=float("nan"), watts=float("nan"), celsius=float("nan"))
        s.update(w)
        B, Hq, Hkv, N, D, causal = s["shape"]
        print(f"| B{B}-Hq{Hq}-Hkv{Hkv}-N{N}-D{D}{'-causal' if causal else ''} | {s['kernel']} | {s['reps']} | "
              f"{s['ms']:.3f} | {w['mhz']:.0f} | {w['watts']:.0f} | {w['celsius']:.0f} |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(spans=spans, samples=rows), f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
