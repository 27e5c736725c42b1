"""Where one call's time goes on a GPU: the host's wall clock against the GPU's CUDA events.

A launch is asynchronous: ``fn()`` returns once the host has queued the work, and the GPU runs it
later. So a wall clock around ``fn()`` measures the host (Python, the launcher, the driver), CUDA
events recorded on the stream around it measure what the GPU saw, and a CUDA graph replay measures
the GPU's work with no host in the way. ``host_and_gpu_time`` puts them side by side (lesson 08).
"""

from __future__ import annotations

import time
from typing import Callable

from .core import graph_ms, host_us, measure, refuse_in_interpreter


def host_and_gpu_time(fn: Callable[[], object], n: int = 50) -> dict:
    """Microseconds of one call of ``fn``, measured five ways (GPU only; refuses in the interpreter):

    * ``host_us``: from the call to its return, calls queued in short bursts (``bench.host_us``);
    * ``wall_once_us``: the same for one call alone on an idle GPU (median of ``n``);
    * ``event_us``: CUDA events recorded on the stream just before and after that one call: from the
      moment the idle GPU could start until it finished the call's last kernel, so the host's launch
      latency plus the GPU's work;
    * ``sync_us``: wall clock from that call until ``torch.cuda.synchronize()`` returned;
    * ``eager_us``: ``do_bench``'s median, each call after an L2 clear that hides host time shorter than
      the clear (the bench table's ``ms``); ``graph_us``: the call replayed from a CUDA graph (``graph_ms``), the GPU alone,
      or None where the call cannot be captured.
    """
    refuse_in_interpreter()
    import torch

    fn()
    torch.cuda.synchronize()
    walls, events, syncs = [], [], []
    for _ in range(n):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        start.record()
        fn()
        end.record()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        walls.append((t1 - t0) * 1e6)
        syncs.append((t2 - t0) * 1e6)
        events.append(start.elapsed_time(end) * 1e3)
    try:
        graph = graph_ms(fn) * 1e3
    except Exception:  # noqa: BLE001  (a call a CUDA graph cannot capture)
        graph = None
    med = lambda v: sorted(v)[len(v) // 2]  # noqa: E731
    return {"host_us": host_us(fn), "wall_once_us": med(walls), "event_us": med(events), "sync_us": med(syncs),
            "eager_us": measure(fn)[0] * 1e3, "graph_us": graph}
