"""Pictures of the results table: rate against size, one line per provider, with provenance."""

from __future__ import annotations

import matplotlib.pyplot as plt

from ..bench.core import select
from ..bench.summary import provider_label


def provenance_label(rows) -> str:
    """Where and when ``rows`` were measured: every GPU, date and version among them, not only the first's."""
    if not rows:
        return ""

    def each(key):
        return " and ".join(sorted({str(r.get(key)) for r in rows}))

    return f"measured on {each('gpu')}, {each('date')}, triton {each('triton')}, torch {each('torch')}"


def rate_vs_size(rows, kernel: str, dtype: str | None = None, ax=None, title: str | None = None,
                 labels: dict | None = None):
    """Rate (the rows' metric) against problem size for each provider of ``kernel``.

    ``labels``: legend text per provider (e.g. ``{"triton": tkcourse.whose(mod).legend("kernel")}``; others in
    plain words, ``tkcourse.bench.summary.provider_label``); the rate axis starts at zero, so heights compare as ratios.
    """
    rows = select(rows, kernel=kernel, **({"dtype": dtype} if dtype else {}))
    if not rows:
        raise ValueError(f"no rows for kernel {kernel!r}" + (f" and dtype {dtype}" if dtype else ""))
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(7, 4))
    for provider in sorted({r["provider"] for r in rows}, key=lambda p: (p != "triton", p)):
        pr = sorted(select(rows, provider=provider), key=lambda r: _size(r["shape"]))
        xs = [_size(r["shape"]) for r in pr]
        ax.plot(xs, [r["median"] for r in pr], marker="o", label=(labels or {}).get(provider) or provider_label(provider))
        ax.fill_between(xs, [r["p20"] for r in pr], [r["p80"] for r in pr], alpha=0.2)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("problem size (elements)")
    ax.set_ylabel(rows[0]["metric"])
    ax.set_ylim(bottom=0, top=max(float(r["p80"] or r["median"]) for r in rows) * 1.12)
    ax.grid(True, alpha=0.3)
    ax.legend()
    ax.set_title((title or kernel) + "\n" + provenance_label(rows), fontsize=10)
    if fig is not None:
        plt.close(fig)  # returned, not shown twice (see tkcourse.plots)
        return fig
    return ax.figure


def _size(shape: str) -> int:
    n = 1
    for part in str(shape).split("x"):
        n *= int(part)
    return n
