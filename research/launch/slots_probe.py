"""Probe (lessons 05 and 08, GPU only): the online softmax's exchange slots kept from call to call
against zeroing them before each launch (what the lean path did until then).

The one-read kernels tag their words per launch (``online_softmax_one_read.launch_tag``), so the lean
path keeps one set of slots per stream and launches no memset. The same kernel with the slots zeroed
before each launch (``zero_()``, then the kernel takes tag 1) is the earlier protocol's GPU and host
work. Its runs: ``logs/slots_probe_first.log`` (commit cf91f23: the tag compared at run time in the
wait, 96 registers a thread at 64 parts of 2048), ``_second`` (38512b5: two banks taken in turns,
bank-major, whose launches on bank 1 found their words cold), ``_third`` (the tag as a constant in
one of two copies of the exchange, as the code is now).
Asks, at the bench's three shapes (fp16), in one run:
K. right on repeated calls and on CUDA-graph replays of a graph captured on a stream whose slots
   were kept (no memset in the graph), with the tags alternating, and programs an SM (the third run
   captured after one warm-up call, where ``bench.capture`` makes two);
H. host microseconds a call (``tkcourse.bench.host_us_interleaved``: the bench's own timer, the
   three calls' bursts in turns): kept slots, zeroed slots, ``torch.softmax``;
G. GPU time: ``do_bench`` medians (L2 flushed before each call) of the three, five rounds taken in
   turns, and each replayed from a CUDA graph.

    PYTHONPATH=$PWD python3 research/launch/slots_probe.py OUT_DIR
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
import triton

from solutions import kernels as K
from solutions.kernels import online_softmax as K_online
from solutions.kernels import online_softmax_one_read as one
from tkcourse.bench.core import capture, graph_ms, host_us_interleaved, measure

out_dir = Path(sys.argv[1] if len(sys.argv) > 1 else "artifacts/slots_probe")
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
        errs.append((K_online.softmax(x).float() - ref).abs().max().item())
        (slots,) = K_online.kept_slots(x)
        tags.append(sorted(set(((slots >> 32) & 1).tolist())))
    graph, y = capture(lambda: K_online.softmax(x), on_warmup_stream=True)  # the graph keeps the stream's slots
    gerrs = []
    for _ in range(3):
        y.zero_()
        graph.replay()
        torch.cuda.synchronize()
        gerrs.append((y.float() - ref).abs().max().item())
    parts, part, warps = one.one_read_plan(N, x.device)
    lanes = one.persistent_lanes(x, y, parts, part, warps)
    kernel, sizes = (one.one_read_softmax_kernel, (N,)) if lanes is None else (one.lanes_softmax_kernel, (M, N))
    span = one.exchange_span(warps)
    fit = one.programs_per_sm(kernel, x, y, x.stride(0), y.stride(0), *sizes, slots, one.MAX_POLLS, span, PARTS=parts,
                              PART=part, FALLBACK_BLOCK=32 * warps, SPAN=span, num_warps=warps, device_index=x.device.index)
    print(f"K {M}x{N}: plan {parts} parts of {part} on {warps} warps, lanes {lanes}, {fit} programs an SM; eager "
          f"errors {errs}, tags {tags}, graph replay errors {gerrs}", flush=True)

    def zeroed(slots=slots):
        slots.zero_()
        return K_online.softmax(x)

    calls = {"kept": lambda: K_online.softmax(x), "zeroed": zeroed, "torch": lambda: torch.softmax(x, dim=-1)}
    host = dict(zip(calls, host_us_interleaved(list(calls.values()))))
    eager = {k: [] for k in calls}
    for _ in range(5):
        for k, fn in calls.items():
            eager[k].append(measure(fn)[0] * 1e3)
    med = {k: sorted(v)[2] for k, v in eager.items()}
    graphs = {k: graph_ms(fn) * 1e3 for k, fn in calls.items()}
    gbs = {k: 2 * x.numel() * x.element_size() / (us * 1e-6) / 1e9 for k, us in med.items()}
    row = dict(shape=f"{M}x{N}", plan=[parts, part, warps, lanes], programs_per_sm=fit, errors=errs, graph_errors=gerrs, tags=tags, host_us=host, eager_us=eager,
               eager_median_us=med, graph_us=graphs, gbs=gbs)
    rows.append(row)
    print(f"H {M}x{N}: host us kept {host['kept']:.2f}, zeroed {host['zeroed']:.2f}, torch {host['torch']:.2f} "
          f"(kept/torch {host['kept'] / host['torch']:.2f}x, zeroed/torch {host['zeroed'] / host['torch']:.2f}x)", flush=True)
    print(f"G {M}x{N}: eager us kept {med['kept']:.1f} ({gbs['kept']:.0f} GB/s), zeroed {med['zeroed']:.1f} "
          f"({gbs['zeroed']:.0f}), torch {med['torch']:.1f}; graph us kept {graphs['kept']:.1f}, "
          f"zeroed {graphs['zeroed']:.1f}, torch {graphs['torch']:.1f}", flush=True)
    K.forget()
(out_dir / "slots_probe.json").write_text(json.dumps(dict(stamp=stamp, rows=rows), indent=1))
print("done", flush=True)
