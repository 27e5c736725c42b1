"""Lesson 08's picture: for each benchmarked call, the host's time against the GPU's, from the bench table.

Three bars a call: ``host_us`` (from the call to its return), the eager time ``ms`` (the call as a
learner makes it: host and GPU together) and ``graph_ms`` (the same call replayed from a CUDA graph:
the GPU alone). Where the eager bar is as long as the host bar and far past the graph bar, the host
sets the speed; where eager and graph agree, the GPU does.
"""

from __future__ import annotations

import matplotlib.pyplot as plt

from ..bench.summary import provider_label
from .bench import provenance_label

BARS = (("host_us", 1.0, "host: call to return", "tab:orange"),
        ("ms", 1e3, "eager: as a learner calls it", "tab:blue"),
        ("graph_ms", 1e3, "CUDA graph: the GPU alone", "tab:green"))


def timed_rows(rows) -> list[dict]:
    """The rows that carry a host time (rows recorded before the column existed do not)."""
    return [r for r in rows if r.get("host_us") is not None]


def host_vs_gpu(rows, title: str = "where a call's time goes", labels: dict | None = None, ax=None):
    """Horizontal bars, microseconds on a log axis, one group per (kernel, shape, dtype, provider).

    ``labels``: text per provider (``{"triton": "reference kernel (triton)"}``; others in plain words,
    ``tkcourse.bench.summary.provider_label``). Raises ValueError when
    no row has a host time.
    """
    rows = timed_rows(rows)
    if not rows:
        raise ValueError("no row of this table has a host time (host_us): it was recorded before the column existed")
    rows = sorted(rows, key=lambda r: (r["kernel"], r["shape"], r["dtype"], r["provider"] != "triton", r["provider"]))
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(8, 0.55 * len(rows) + 1.6))
    height = 0.26
    for k, (column, scale, text, color) in enumerate(BARS):
        ys = [i + (k - 1) * height for i in range(len(rows))]
        vals = [(r.get(column) or float("nan")) * scale for r in rows]
        ax.barh(ys, vals, height, label=text, color=color)
        for y, v in zip(ys, vals):
            if v == v:
                ax.text(v, y, f" {v:.1f}", va="center", fontsize=7)
    names = [f"{r['kernel']} {r['shape']} {r['dtype']}\n{(labels or {}).get(r['provider']) or provider_label(r['provider'])}" for r in rows]
    ax.set_yticks(range(len(rows)), names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlim(left=0.5)  # every bar starts at the same place, so lengths compare as ratios
    ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("microseconds per call (log scale)")
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(title + "\n" + provenance_label(rows), fontsize=10)
    if fig is not None:
        fig.tight_layout()
        plt.close(fig)  # returned, not shown twice (see tkcourse.plots)
        return fig
    return ax.figure
