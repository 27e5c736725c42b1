"""Memory traffic, drawn: bytes moved against the minimum, access maps, and L2 reuse of a tiled matmul.

Every function returns a matplotlib Figure (closed, so a notebook shows it once, when returned);
``access_map_explorer`` returns an ipywidgets box with a slider over programs.
"""

from __future__ import annotations

import io

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import ListedColormap

from .. import traffic as tr

_READ_HATCH, _WRITE_HATCH = None, "///"


def _figure(nrows=1, ncols=1, figsize=(7, 4), **kw):
    fig, axes = plt.subplots(nrows, ncols, figsize=figsize, squeeze=False, **kw)
    plt.close(fig)  # returned, not shown twice
    return fig, axes


def _scale(nbytes: float) -> tuple[float, str]:
    for div, unit in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if nbytes >= div:
            return div, unit
    return 1.0, "bytes"


# ---------------------------------------------------------------------------------------------
# Bytes moved
# ---------------------------------------------------------------------------------------------


def _as_traffic(v):
    if isinstance(v, (list, tuple)):
        return tr.combine(list(v))
    if not hasattr(v, "rows"):
        raise TypeError(f"expected a Trace, a list of Traces or an EagerTraffic, got {type(v).__name__}")
    return v


def bytes_bar(versions: dict, minimum=None, title: str | None = None, ax=None):
    """Bytes each version moves, stacked per tensor (read solid, written hatched), beside the minimum.

    ``versions``: ``{"label": Trace | [Trace, ...] | EagerTraffic}``; a list is a pipeline of several
    kernels, summed (``traffic.combine``). ``minimum``: bytes (an int), a ``{tensor: bytes}`` dict, or None
    for the smallest minimum among the versions (each input read once, each output written once).
    The bar heights are in ``fig.bytes_bar_totals`` (label -> bytes), for checking.
    """
    if not versions:
        raise ValueError("bytes_bar needs at least one version")
    items = [(label, _as_traffic(v)) for label, v in versions.items()]
    if minimum is None:
        best = min(items, key=lambda kv: kv[1].minimum_bytes)[1]
        min_rows = [(f"{name} (min)", r, w) for name, r, w in best.minimum_rows()]
    elif isinstance(minimum, dict):
        min_rows = [(f"{k} (min)", int(v), 0) for k, v in minimum.items()]
    else:
        min_rows = [("minimum", int(minimum), 0)]
    min_total = sum(r + w for _, r, w in min_rows)
    fig = None
    if ax is None:
        fig, axes = _figure(figsize=(max(5.0, 1.6 * (len(items) + 1) + 3), 4.2))
        ax = axes[0, 0]
    bars = [(label, t.rows()) for label, t in items] + [("minimum", [(n.removesuffix(" (min)"), r, w)
                                                                     for n, r, w in min_rows])]
    totals = {label: sum(r + w for _, r, w in rows) for label, rows in bars}
    div, unit = _scale(max(totals.values()) or 1)
    names = list(dict.fromkeys(name for _, rows in bars for name, _, _ in rows))
    cmap = plt.get_cmap("tab20" if len(names) > 10 else "tab10")
    colors = {n: cmap(i % cmap.N) for i, n in enumerate(names)}
    seen = set()
    for x, (label, rows) in enumerate(bars):
        bottom = 0.0
        for name, r, w in rows:
            for nbytes, hatch, what in ((r, _READ_HATCH, "read"), (w, _WRITE_HATCH, "written")):
                if nbytes <= 0:
                    continue
                key = (name, what)
                ax.bar(x, nbytes / div, bottom=bottom / div, color=colors[name], hatch=hatch, edgecolor="white",
                       linewidth=0.5, label=f"{name} {what}" if key not in seen else None,
                       alpha=0.45 if label == "minimum" else 1.0)
                seen.add(key)
                bottom += nbytes
        ratio = f"\n{totals[label] / min_total:.2g}x min" if min_total and label != "minimum" else ""
        ax.text(x, totals[label] / div, f"{tr.fmt_bytes(totals[label])}{ratio}", ha="center", va="bottom",
                fontsize=8)
    if min_total:
        ax.axhline(min_total / div, color="k", linestyle="--", linewidth=1)
    ax.set_xticks(range(len(bars)), [label for label, _ in bars])
    ax.set_ylabel(f"bytes moved ({unit})")
    ax.set_ylim(0, max(totals.values()) / div * 1.22)
    ax.set_title(title or "Bytes read (solid) and written (hatched) per tensor, against the minimum", fontsize=10)
    handles, labels = ax.get_legend_handles_labels()
    if len(labels) <= 24:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.grid(True, axis="y", alpha=0.3)
    out = fig if fig is not None else ax.figure
    out.bytes_bar_totals = totals
    out.tight_layout()
    return out


# ---------------------------------------------------------------------------------------------
# Access maps
# ---------------------------------------------------------------------------------------------


def _layout(values: np.ndarray, wrap: int | None):
    """A tensor's per-element values as a 2-D image: vectors as a strip (wrapped when long), N-D as rows x last."""
    if values.ndim == 0:
        values = values.reshape(1)
    if values.ndim == 1:
        n = values.size
        if wrap is None:  # a few rows of a power of two: long enough to read, tall enough to see
            wrap = n if n <= 2048 else int(2 ** np.ceil(np.log2(n / 8)))
        rows = -(-n // wrap)
        img = np.full(rows * wrap, -2, dtype=np.int64)  # -2: past the end of the vector (padding of the image)
        img[:n] = values
        return img.reshape(rows, wrap), wrap
    return values.reshape(-1, values.shape[-1]), None


def access_map(trace, tensors=None, program: int | None = None, launch: int = 0, color: str = "program",
               wrap: int | None = None):
    """Which program touched which elements of each tensor: loads (left) and stores (right).

    Vectors are a strip (wrapped every ``wrap`` elements when long), 2-D tensors a grid (N-D: rows x last
    dim). ``color="program"``: colored by the (first) program to touch each element; ``"count"``: by how many
    times it was touched (re-reads show up). ``program``: highlight that program's elements (red), others grey.
    White: never touched. The images are in ``fig.access_images`` ((tensor, kind) -> 2-D array, -1 untouched).
    """
    if isinstance(trace, (list, tuple)):
        trace = tr.combine(list(trace))
    names = [t.name for t in trace.tensors] if tensors is None else (
        [tensors] if isinstance(tensors, str) else list(tensors))
    lz = trace.launches[launch]
    nprog = lz.num_programs
    images, panels = {}, []  # panels: the (tensor, kind) pairs with any access; the others are only named
    for name in names:
        for kind in ("load", "store"):
            if color == "count":
                vals = trace.read_counts(name, kind)
                images[name, kind] = _layout(np.where(vals == 0, -1, vals), wrap)[0]
            else:
                images[name, kind] = _layout(trace.owner_map(name, kind, launch=launch), wrap)[0]
            if (images[name, kind] >= 0).any():
                panels.append((name, kind))
    untouched = [f"{name} {kind}s" for name in names for kind in ("load", "store") if (name, kind) not in panels]
    two_d = [len(trace.tensor(n).shape) > 1 for n, _ in panels]
    ncols = 2 if any(two_d) and len(panels) > 1 else 1  # 2-D tensors side by side, strips one under another
    nrows = max(1, -(-len(panels) // ncols))
    heights = []
    for r in range(nrows):
        row_panels = panels[r * ncols:(r + 1) * ncols]
        heights.append(max((2.6 if len(trace.tensor(n).shape) > 1 else 0.55 + 0.22 * images[n, k].shape[0])
                           for n, k in row_panels) if row_panels else 1.0)
    fig, axes = _figure(nrows, ncols, figsize=(11 if ncols == 2 or not any(two_d) else 7, 0.9 + 1.25 * sum(heights)),
                        gridspec_kw={"height_ratios": heights})
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    for index, (name, kind) in enumerate(panels):
        t = trace.tensor(name)
        ax = axes.flat[index]
        if color == "count":
            vals = trace.read_counts(name, kind)
            vals = np.where(vals == 0, -1, vals)
        else:
            vals = trace.owner_map(name, kind, launch=launch)
        highlight = None
        if program is not None:
            hit = np.zeros(t.numel, dtype=bool)
            hit[trace.program_elements(program, name, kind, launch)] = True
            highlight = hit.reshape(t.shape)
        img, w = _layout(vals, wrap)
        touched = img >= 0
        if highlight is not None:
            hl, _ = _layout(highlight.astype(np.int64), wrap)
            shown = np.where(hl > 0, 2, np.where(touched, 1, 0)).astype(float)
            shown[img == -2] = np.nan
            cm = ListedColormap(["white", "0.82", "crimson"])
            ax.imshow(shown, cmap=cm, vmin=0, vmax=2, aspect="auto", interpolation="nearest")
            n_hl = int(highlight.sum())
            label = f"{name} {kind}s: program {program} touches {n_hl} element{'s' * (n_hl != 1)}"
        else:
            data = np.ma.masked_less(img.astype(float), 0)
            if color == "count":
                cm = plt.get_cmap("magma_r").copy()
                vmin, vmax = 0, max(2, int(img.max()))
                label = f"{name} {kind}s: times each element was {'read' if kind == 'load' else 'written'}"
            else:
                cm = plt.get_cmap("tab10" if nprog <= 10 else "tab20" if nprog <= 20 else "viridis").copy()
                vmin, vmax = -0.5, (cm.N - 0.5 if nprog <= 20 else max(nprog - 1, 1))
                label = f"{name} {kind}s, colored by program id ({nprog} programs)"
            cm = cm.with_extremes(bad="white")
            im = ax.imshow(data, cmap=cm, vmin=vmin, vmax=vmax, aspect="auto", interpolation="nearest")
            if color == "count" or nprog > 20:
                fig.colorbar(im, ax=ax, fraction=0.04, pad=0.01)
            elif nprog <= 10:  # a key: which color is which program
                from matplotlib.patches import Patch

                ax.legend(handles=[Patch(color=cm(i), label=f"pid {i}") for i in range(nprog)], fontsize=7,
                          loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
        ax.set_title(label, fontsize=9)
        if w is not None:
            ax.set_xlabel(f"element (rows of {w})" if img.shape[0] > 1 else "element")
            if img.shape[0] == 1:
                ax.set_yticks([])
            else:
                ax.set_ylabel(f"row of {w}")
        else:
            ax.set_xlabel("column")
            ax.set_ylabel("row" if len(t.shape) <= 2 else "row (leading dims flattened)")
    fig.suptitle(f"{lz.kernel}: access map, grid {lz.grid[:3]}"
                 + (f" (not drawn, never touched: {', '.join(untouched)})" if untouched else ""), fontsize=10)
    fig.access_images = images
    fig.tight_layout()
    return fig


def access_map_explorer(trace, tensors=None, launch: int = 0, color: str = "program", static: bool = True):
    """A slider over the programs of one launch that redraws ``access_map`` highlighting the chosen program.

    Returns an ``ipywidgets.VBox`` (slider, a line of per-program bytes, the picture); ``box.slider``,
    ``box.image`` and ``box.info`` are its parts. ``static``: also display the picture of program 0 as a
    plain figure, which a rendering without a kernel (GitHub, nbviewer, HTML) shows in the widget's place.
    """
    import ipywidgets as w

    from .blocks import show_static

    if isinstance(trace, (list, tuple)):
        trace = tr.combine(list(trace))
    if static:
        show_static(access_map(trace, tensors, program=0, launch=launch, color=color),
                    "*Program 0 (where the slider below starts; it needs a running notebook):*")
    lz = trace.launches[launch]
    per = trace.per_program(launch)
    slider = w.IntSlider(value=0, min=0, max=max(lz.num_programs - 1, 0), description="program",
                         continuous_update=False)
    image = w.Image(format="png")
    info = w.HTML()

    def redraw(*_):
        p = slider.value
        fig = access_map(trace, tensors, program=p, launch=launch, color=color)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=80)
        image.value = buf.getvalue()
        row = per[p]
        info.value = (f"program {p} of {lz.num_programs}: read {tr.fmt_bytes(row['read'])}, "
                      f"wrote {tr.fmt_bytes(row['written'])}")

    slider.observe(redraw, names="value")
    redraw()
    box = w.VBox([slider, info, image])
    box.slider, box.image, box.info, box.redraw = slider, image, info, redraw
    return box


# ---------------------------------------------------------------------------------------------
# L2 reuse in a tiled matmul
# ---------------------------------------------------------------------------------------------


def program_order_map(M_tiles: int = 8, N_tiles: int = 8, group_sizes=(1, 4), wave: int | None = None):
    """The tiles of C numbered in launch order, for each ``GROUP_M``; ``wave``: shade the first wave of programs.

    The numbers are ``traffic.program_order``: the same pid -> (pid_m, pid_n) arithmetic as the kernel.
    """
    fig, axes = _figure(1, len(group_sizes), figsize=(3.6 * len(group_sizes), 3.8))
    for ax, g in zip(axes[0], group_sizes):
        order = np.zeros((M_tiles, N_tiles), dtype=np.int64)
        for pid, (pm, pn) in enumerate(tr.program_order(M_tiles, N_tiles, g)):
            order[pm, pn] = pid
        ax.imshow(order, cmap="Blues_r" if wave is None else "Greys", vmin=0, vmax=M_tiles * N_tiles * 1.3,
                  interpolation="nearest")
        if wave is not None:
            first = np.ma.masked_where(order >= wave, np.ones_like(order, dtype=float))
            ax.imshow(first, cmap=ListedColormap(["orange"]), alpha=0.7, interpolation="nearest")
            rows, cols = np.unique(np.nonzero(order < wave)[0]).size, np.unique(np.nonzero(order < wave)[1]).size
            ax.set_xlabel(f"first {wave} programs: {rows} A row-tiles + {cols} B column-tiles", fontsize=8)
        if M_tiles * N_tiles <= 256:
            for (i, j), v in np.ndenumerate(order):
                ax.text(j, i, str(v), ha="center", va="center", fontsize=7 if M_tiles * N_tiles > 64 else 9)
        ax.set_title("row-major (GROUP_M = 1)" if g == 1 else f"grouped, GROUP_M = {g}", fontsize=10)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle("Launch order of the programs over the tiles of C", fontsize=10)
    fig.tight_layout()
    return fig


def l2_reuse(M: int = 4096, N: int = 4096, K: int = 4096, BLOCK_M: int = 128, BLOCK_N: int = 128,
             BLOCK_K: int = 64, group_sizes=(1, 2, 4, 8, 16, 32), cache_sizes=(2 << 20, 8 << 20, 32 << 20),
             itemsize: int = 2, concurrent: int = 132):
    """HBM traffic (as a multiple of the minimum) and L2 hit rate against ``GROUP_M``, one line per cache size.

    Simulates ``traffic.simulate_l2``: an LRU over the A/B tile loads, ``concurrent`` programs at a time
    stepping through K together. ``fig.l2_results`` holds the ``L2Result`` of every point.
    """
    fig, axes = _figure(1, 2, figsize=(11, 4))
    ax_t, ax_h = axes[0]
    results = {}
    for cache in cache_sizes:
        rs = [tr.simulate_l2(M, N, K, BLOCK_M, BLOCK_N, BLOCK_K, g, cache, itemsize, concurrent)
              for g in group_sizes]
        results[cache] = rs
        label = f"cache {tr.fmt_bytes(cache).replace(' ', '')} ({cache / 2**20:g} MiB)"
        ax_t.plot(group_sizes, [r.excess for r in rs], marker="o", label=label)
        ax_h.plot(group_sizes, [100 * r.hit_rate for r in rs], marker="o", label=label)
    no_cache = results[cache_sizes[0]][0].requested_bytes / results[cache_sizes[0]][0].minimum_bytes
    ax_t.axhline(1.0, color="k", linestyle="--", linewidth=1)
    ax_t.text(group_sizes[0], 1.0, " minimum: A and B read once", va="bottom", fontsize=8)
    ax_t.set_title(f"HBM reads of A and B (no cache: {no_cache:.0f}x the minimum)", fontsize=10)
    ax_t.set_ylabel("bytes read from HBM / minimum")
    # A group of GROUP_M tile rows holds GROUP_M * N_tiles programs. While that is no more than the programs
    # running at once, every wave still spans all N_tiles strips of B, as row-major order does (and its
    # ragged end cuts across GROUP_M strips of A instead of one): grouping cannot help there.
    n_tiles = -(-N // BLOCK_N)
    small = [g for g in group_sizes if g * n_tiles <= concurrent]
    ax_t.set_ylim(0, max(r.excess for rs in results.values() for r in rs) * 1.3)
    if small:
        for ax in (ax_t, ax_h):
            ax.axvspan(group_sizes[0] / 1.3, max(small) * 1.3, color="0.9", zorder=0)
        ax_t.text(group_sizes[0] / 1.25, ax_t.get_ylim()[1], f" GROUP_M x {n_tiles} tiles <= {concurrent}:\n"
                  " a wave still reads every strip of B", va="top", fontsize=7, color="0.3")
    ax_h.set_title("L2 hit rate of the tile loads", fontsize=10)
    ax_h.set_ylabel("hits (%)")
    ax_h.set_ylim(0, 100)
    for ax in (ax_t, ax_h):
        ax.set_xscale("log", base=2)
        ax.set_xticks(list(group_sizes), [str(g) for g in group_sizes])
        ax.set_xlabel("GROUP_M (1 = row-major order)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"L2 reuse, C = A @ B with M={M}, N={N}, K={K}; tiles {BLOCK_M}x{BLOCK_N}x{BLOCK_K}, "
                 f"{itemsize} B elements, {concurrent} programs at a time (an LRU model)", fontsize=10)
    fig.l2_results = results
    fig.tight_layout()
    return fig
