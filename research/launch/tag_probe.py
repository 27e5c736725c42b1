"""Probe (lessons 05 and 08, GPU only): the online softmax's exchange words kept from call to call,
tagged per launch, against zeroing them before each launch (what the lean path did until then).

The one-read kernels tag their words (``online_softmax_one_read.launch_tag``), so the lean path keeps
one set of slots per stream and launches no memset. The same kernel with the slots zeroed before
each launch (``zero_()``, then the kernel finds tag 1) is the earlier protocol's GPU and host work.
Asks, at the bench's three shapes (fp16), in one run:
K. right on repeated calls and on CUDA-graph replays of a graph captured on a stream whose slots
   were kept (no memset in the graph), with the tags alternating;
H. host microseconds a call (``tkcourse.bench.host_us_interleaved``: the bench's own timer, the
   three calls' bursts in turns): kept slots, zeroed slots, ``torch.softmax``;
G. GPU time: ``do_bench`` medians (L2 flushed before each call) of the three, five rounds taken in
   turns, and each replayed from a CUDA graph.

    PYTHONPATH=$PWD python3 research/launch/tag_probe.py OUT_DIR
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
import triton

from solutions import launch_lean_kernels as K
from tkcourse.bench.core import graph_ms, host_us_interleaved, measure

out_dir = Path(sys.argv[1] if len(sys.argv) > 1 else "artifacts/tag_probe")
out_dir.mkdir(parents=True, exist_ok=True)
stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
print(f"# {torch.cuda.get_device_name()} torch {torch.__version__} triton {triton.__version__} {stamp}", flush=True)
rows = []
for M, N in ((4096, 32768), (1024, 131072), (256, 262144)):
    x = torch.randn(M, N, dtype=torch.float16, device="cuda")
    ref = torch.softmax(x.float(), dim=-1)
    K.forget()
    errs, tags = [], []
    for _ in range(3):
        errs.append((K.online_softmax(x).float() - ref).abs().max().item())
        (slots,) = K.kept_slots(x)
        tags.append(sorted(set(((slots >> 32) & 1).tolist())))
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        K.online_softmax(x)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        y = K.online_softmax(x)
    gerrs = []
    for _ in range(3):
        y.zero_()
        graph.replay()
        torch.cuda.synchronize()
        gerrs.append((y.float() - ref).abs().max().item())
    print(f"K {M}x{N}: eager errors {errs}, tags {tags}, graph replay errors {gerrs}", flush=True)

    def zeroed(slots=slots):
        slots.zero_()
        return K.online_softmax(x)

    calls = {"kept": lambda: K.online_softmax(x), "zeroed": zeroed, "torch": lambda: torch.softmax(x, dim=-1)}
    host = dict(zip(calls, host_us_interleaved(list(calls.values()))))
    eager = {k: [] for k in calls}
    for _ in range(5):
        for k, fn in calls.items():
            eager[k].append(measure(fn)[0] * 1e3)
    med = {k: sorted(v)[2] for k, v in eager.items()}
    graphs = {k: graph_ms(fn) * 1e3 for k, fn in calls.items()}
    gbs = {k: 2 * x.numel() * x.element_size() / (us * 1e-6) / 1e9 for k, us in med.items()}
    row = dict(shape=f"{M}x{N}", errors=errs, graph_errors=gerrs, tags=tags, host_us=host, eager_us=eager,
               eager_median_us=med, graph_us=graphs, gbs=gbs)
    rows.append(row)
    print(f"H {M}x{N}: host us kept {host['kept']:.2f}, zeroed {host['zeroed']:.2f}, torch {host['torch']:.2f} "
          f"(kept/torch {host['kept'] / host['torch']:.2f}x, zeroed/torch {host['zeroed'] / host['torch']:.2f}x)", flush=True)
    print(f"G {M}x{N}: eager us kept {med['kept']:.1f} ({gbs['kept']:.0f} GB/s), zeroed {med['zeroed']:.1f} "
          f"({gbs['zeroed']:.0f}), torch {med['torch']:.1f}; graph us kept {graphs['kept']:.1f}, "
          f"zeroed {graphs['zeroed']:.1f}, torch {graphs['torch']:.1f}", flush=True)
    K.forget()
(out_dir / "tag_probe.json").write_text(json.dumps(dict(stamp=stamp, rows=rows), indent=1))
print("done", flush=True)
