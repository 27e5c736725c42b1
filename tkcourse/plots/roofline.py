"""The roofline: the device's two ceilings, and each course kernel placed by arithmetic intensity and rate.

A kernel that does ``flops`` arithmetic on ``bytes`` of memory traffic (the analytic minimum) has arithmetic
intensity ``flops / bytes``. It cannot beat ``bandwidth * intensity`` (the slanted roof: memory-bound)
nor the matmul rate (the flat roof: compute-bound); the ridge point between them is where a kernel
needs ``peak / bandwidth`` FLOPs per byte to keep the tensor cores busy.
"""

from __future__ import annotations

import math
import re

import matplotlib.pyplot as plt
import numpy as np

from ..bench.summary import provider_label

#: Used only when neither a GPU nor the recorded table can give the ceilings.
H200_FALLBACK = {
    "copy_GBps": 4250.0,
    "matmul_TFLOPs": 700.0,
    "source": "H200 figures recorded for the course (device copy 4.25 TB/s, cuBLAS fp16 matmul ~700 TFLOP/s "
              "dense); constants, as no GPU and no recorded table were available",
}

#: Rough FLOPs per element for memory-bound kernels, whose rows carry ``flops = 0``.
FLOPS_PER_ELEMENT = {"vector_add": 1, "softmax": 5, "online_softmax": 5}

_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "float8": 1, "int8": 1}


def device_ceilings(records=None, measure: bool | None = None) -> dict:
    """``{"copy_GBps", "matmul_TFLOPs", "source"}``: measured now on a GPU (``measure``, default: when one is
    present), else from the records' ``copy`` and cuBLAS matmul rows, else ``H200_FALLBACK``."""
    from .. import mode

    if measure is None:
        measure = not mode.INTERPRET
    if measure:
        from ..bench import peaks

        return peaks.measured()
    try:
        from ..bench import peaks

        out = peaks.recorded(records)
        if not math.isnan(out["matmul_TFLOPs"]):
            return out
        return {**out, "matmul_TFLOPs": H200_FALLBACK["matmul_TFLOPs"],
                "source": out["source"] + "; matmul ceiling: constant (no cuBLAS row)"}
    except (ImportError, FileNotFoundError, LookupError, ValueError):
        return dict(H200_FALLBACK)


def _elements(shape: str) -> int:
    n = 1
    for part in str(shape).split("x"):
        n *= int(part)
    return n


def _infer(row: dict, flops_per_element: dict) -> tuple[int, int, str]:
    """(flops, bytes, note) of a record, filling what the row leaves at 0 from its kernel and shape."""
    flops, nbytes, note = int(row.get("flops") or 0), int(row.get("bytes") or 0), ""
    item = _ITEMSIZE.get(str(row.get("dtype")), 2)
    kernel, shape = str(row["kernel"]), str(row["shape"])
    if not nbytes:
        m = re.fullmatch(r"(\d+)x(\d+)x(\d+)", shape)
        a = re.match(r"B(\d+)-H(\d+)-N(\d+)-D(\d+)", shape)
        if kernel.startswith("matmul") and m:
            M, N, K = map(int, m.groups())
            nbytes, note = (M * K + K * N + M * N) * item, "bytes: read A, B, write C"
        elif kernel.startswith("attention") and a:
            B, H, N, D = map(int, a.groups())
            tensors = 8 if "bwd" in kernel else 4  # fwd: q, k, v, o; bwd: q, k, v, o, do, dq, dk, dv
            nbytes, note = tensors * B * H * N * D * item, f"bytes: {tensors} B*H*N*D tensors"
    if not flops and kernel in flops_per_element:
        try:
            flops = flops_per_element[kernel] * _elements(shape)
            note = f"flops: ~{flops_per_element[kernel]} per element"
        except ValueError:
            pass
    return flops, nbytes, note


def placements(records, kernels=None, largest_only: bool = True, flops_per_element=None) -> tuple[list, list]:
    """Points of the roofline from result rows: ``([{kernel, provider, shape, intensity, tflops, note}], skipped)``.

    ``largest_only``: one point per (kernel, provider, dtype), its largest problem (least launch overhead).
    """
    fpe = {**FLOPS_PER_ELEMENT, **(flops_per_element or {})}
    points, skipped = [], []
    for r in records:
        if r.get("metric") not in ("GB/s", "TFLOP/s") or r.get("kernel") == "copy":
            continue
        if kernels is not None and r["kernel"] not in kernels:
            continue
        flops, nbytes, note = _infer(r, fpe)
        if not flops or not nbytes:
            skipped.append(f"{r['kernel']}/{r['provider']} {r['shape']}")
            continue
        intensity = flops / nbytes
        rate = float(r["median"])
        tflops = rate if r["metric"] == "TFLOP/s" else rate * 1e9 * intensity / 1e12
        points.append(dict(kernel=r["kernel"], provider=r["provider"], shape=r["shape"], dtype=r.get("dtype", ""),
                           intensity=intensity, tflops=tflops, flops=flops, bytes=nbytes, note=note))
    if largest_only:
        best: dict[tuple, dict] = {}
        for p in points:
            key = (p["kernel"], p["provider"], p["dtype"])
            if key not in best or p["flops"] + p["bytes"] > best[key]["flops"] + best[key]["bytes"]:
                best[key] = p
        points = list(best.values())
    return points, sorted(set(skipped))


def roofline(records=None, ceilings: dict | None = None, kernels=None, largest_only: bool = True, ax=None,
             flops_per_element=None, title: str | None = None):
    """The roofline with each kernel of ``records`` (result rows; default: the recorded H200 table).

    ``ceilings``: ``{"copy_GBps", "matmul_TFLOPs", "source"}`` (default: ``device_ceilings(records)``: measured
    on a GPU, else recorded). Points: color per kernel, marker per provider. ``fig.roofline_points`` holds
    them, ``fig.roofline_ceilings`` the ceilings.
    """
    if records is None:
        try:
            from ..bench import load_records

            records = load_records()
        except (ImportError, FileNotFoundError):
            records = []
    records = list(records)
    c = ceilings or device_ceilings(records)
    bw, peak = c["copy_GBps"] * 1e9, c["matmul_TFLOPs"] * 1e12  # bytes/s, FLOP/s
    ridge = peak / bw
    points, skipped = placements(records, kernels, largest_only, flops_per_element)
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(10.5, 5.5))
        plt.close(fig)
    xs = [p["intensity"] for p in points]
    lo = min(xs + [ridge]) / 8
    hi = max(xs + [ridge]) * 8
    x = np.logspace(np.log10(lo), np.log10(hi), 256)
    ax.plot(x, np.minimum(bw * x, peak) / 1e12, color="k", linewidth=2, label="_roof")
    ax.axvline(ridge, color="0.6", linestyle=":", linewidth=1)
    ax.text(ridge * 1.1, math.sqrt(bw * lo * peak) / 1e12, f"ridge: {ridge:.0f} FLOP/B", ha="left", va="center",
            fontsize=8, color="0.3")
    ax.text(ridge / 40, bw * ridge / 40 * 3 / 1e12, f"slanted roof: copy bandwidth {c['copy_GBps'] / 1000:.2f} TB/s",
            ha="right", va="bottom", fontsize=8, color="0.2")
    ax.text(ridge, peak / 1e12 * 1.15, f"fp16 matmul {c['matmul_TFLOPs']:.0f} TFLOP/s", ha="right", va="bottom",
            fontsize=8, color="0.2")
    kernel_names = list(dict.fromkeys(p["kernel"] for p in points))
    providers = list(dict.fromkeys(p["provider"] for p in points))
    colors = {k: plt.get_cmap("tab10")(i % 10) for i, k in enumerate(kernel_names)}
    markers = dict(zip(providers, "os^Dv<>Ph*X"))
    for p in points:
        ax.scatter(p["intensity"], p["tflops"], color=colors[p["kernel"]], marker=markers[p["provider"]], s=50,
                   edgecolor="k", linewidth=0.5, zorder=3)
    # One label per kernel (not per point): its providers' share of the roof above them, stacked in a
    # column on the free side of the roof, with a line to the kernel's points.
    groups = {k: [p for p in points if p["kernel"] == k] for k in kernel_names}
    memory = sorted((k for k in groups if groups[k][0]["intensity"] < ridge),
                    key=lambda k: -max(p["tflops"] for p in groups[k]))
    if memory:
        m_x = max(p["intensity"] for k in memory for p in groups[k]) * 2.5
        m_y = min(max(p["tflops"] for p in groups[k]) for k in memory) * 2
    compute = sorted((k for k in groups if k not in memory), key=lambda k: groups[k][0]["intensity"])
    line = 1.42  # one text line of the labels, as a factor on the log axis; labels stack by their lines
    for side, names in (("memory", memory), ("compute", compute)):
        below = 0.0  # lines of the labels already placed on this side
        for k in names:
            g = groups[k]
            several = len({q["dtype"] for q in g}) > 1
            shares = [f"{provider_label(p['provider'])}{' ' + p['dtype'].replace('bfloat', 'bf').replace('float', 'fp') if several else ''}"
                      f" {100 * p['tflops'] / (min(bw * p['intensity'], peak) / 1e12):.0f}%"
                      for p in sorted(g, key=lambda p: -p["tflops"])]
            lines = ["; ".join(shares[i:i + 2]) for i in range(0, len(shares), 2)]
            anchor = max(g, key=lambda p: p["tflops"])
            if side == "memory":  # a column below the slanted roof, right of the points
                xy_text = (m_x, m_y * 1.5 / line ** below)
            else:  # below the flat roof, right of the ridge, one under another
                xy_text = (ridge * 1.4, peak / 1e12 / 2.5 / line ** below)
            below += len(lines) + 1.6
            ax.annotate("\n".join([k] + lines), (anchor["intensity"], anchor["tflops"]), xytext=xy_text, fontsize=7,
                        color=colors[k], ha="left", va="top",
                        arrowprops=dict(arrowstyle="-", color=colors[k], linewidth=0.6, shrinkA=0, shrinkB=4),
                        bbox=dict(boxstyle="round,pad=0.2", facecolor="white", edgecolor="none", alpha=0.8))
    for k in kernel_names:
        ax.scatter([], [], color=colors[k], marker="o", label=k)
    for pr in providers:
        ax.scatter([], [], color="w", edgecolor="k", marker=markers[pr], label=provider_label(pr))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(min([bw * lo] + [p["tflops"] * 1e12 for p in points]) / 1e12 / 2, peak / 1e12 * 2.5)
    ax.set_xlabel("arithmetic intensity (FLOP per byte of minimum traffic)")
    ax.set_ylabel("TFLOP/s")
    ax.grid(True, which="both", alpha=0.2)
    ax.text(0.01, 0.99, " labels: each provider's rate, as % of the roof at its intensity", transform=ax.transAxes,
            fontsize=7, va="top", color="0.3")
    if points:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)  # beside the axes: the labels fill them
    gpu = next((r.get("gpu") for r in records if r.get("gpu")), "")
    ax.set_title((title or f"Roofline{' of ' + gpu if gpu else ''}") + f"\nceilings: {c['source']}", fontsize=9)
    out = fig if fig is not None else ax.figure
    out.roofline_points, out.roofline_ceilings, out.roofline_skipped = points, c, skipped
    if skipped:
        out.text(0.01, 0.01, f"not placed (no FLOP or byte count): {', '.join(skipped[:6])}"
                 + (" ..." if len(skipped) > 6 else ""), fontsize=6, color="0.4")
    return out
