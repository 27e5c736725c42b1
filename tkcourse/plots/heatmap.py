"""Pictures of sweeps (lesson 04): BLOCK_M x BLOCK_N heatmaps, the best config across shapes, an explorer.

Every function returns a matplotlib Figure and draws nothing on screen by itself (headless-safe).
In a heatmap a cell is colored by the best rate of the configs that share it, failed cells are
hatched, untested cells are blank, and the sweep's best config has a star.
"""

from __future__ import annotations

import math
import textwrap

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Rectangle

from ..autotune import Sweep, config_label, higher_is_better, load_sweeps

FACET_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages")


def _is_square(s: Sweep) -> bool:
    return len(set(s.dims)) == 1


def _shape_label(s: Sweep) -> str:
    d = s.dims
    return f"{d[0]}³" if len(d) == 3 and _is_square(s) else s.shape


def cell_grid(sweep: Sweep, x: str, y: str, where: dict, metric: str):
    """``(values, status, n_failed, xs, ys)`` for one facet: values[yi, xi] is the best rate (NaN when
    none ran); status[yi, xi] is "ok", "failed" (every config of the cell failed) or "" (not tested);
    n_failed[yi, xi] counts the cell's failed configs."""
    axes = sweep.axes
    xs, ys = axes[x], axes[y]
    values = np.full((len(ys), len(xs)), np.nan)
    status = np.full((len(ys), len(xs)), "", dtype=object)
    n_failed = np.zeros((len(ys), len(xs)), dtype=int)
    better = max if higher_is_better(metric) else min
    for r in sweep.results:
        c = r.config
        if any(c.get(k) != v for k, v in where.items()):
            continue
        yi, xi = ys.index(c[y]), xs.index(c[x])
        if r.ok:
            v = sweep.rate(r, metric)
            values[yi, xi] = v if math.isnan(values[yi, xi]) else better(values[yi, xi], v)
            status[yi, xi] = "ok"
        else:
            n_failed[yi, xi] += 1
            if status[yi, xi] == "":
                status[yi, xi] = "failed"
    return values, status, n_failed, xs, ys


def _fmt(v: float) -> str:
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}" if abs(v) >= 0.1 else f"{v:.1e}"


def heatmap(sweep: Sweep, *, metric: str | None = None, x: str = "BLOCK_N", y: str = "BLOCK_M",
            rows: str | None = "num_warps", cols: str | None = "num_stages", annotate: bool = True):
    """``y`` x ``x`` grids of a sweep, one subplot per (``rows``, ``cols``) value, colored by ``metric``.

    Configs that differ only in other keys (e.g. BLOCK_K, GROUP_M) share a cell, which shows the
    best of them (the title says so). Hatched: every config of the cell failed; blank: not tested;
    star: the sweep's best config. One color scale for all subplots.
    """
    metric = sweep._check_metric(metric)
    axes = sweep.axes
    for name, key in (("x", x), ("y", y)):
        if key not in axes:
            raise ValueError(f"{name}={key!r} is not a config key of this sweep; keys: {list(axes)}")
    rows = rows if rows in axes and rows not in (x, y) else None
    cols = cols if cols in axes and cols not in (x, y, rows) else None
    row_vals, col_vals = (axes[rows] if rows else [None]), (axes[cols] if cols else [None])
    hidden = [k for k, v in axes.items() if k not in (x, y, rows, cols) and len(v) > 1]

    width = max(7.0, 2.2 + 0.75 * len(axes[x]) * len(col_vals))
    fig, grid = plt.subplots(len(row_vals), len(col_vals), squeeze=False, layout="constrained",
                             figsize=(width, 2.0 + 0.6 * len(axes[y]) * len(row_vals)))
    ok_rates = [sweep.rate(r, metric) for r in sweep.ok]
    vmin, vmax = (min(ok_rates), max(ok_rates)) if ok_rates else (0.0, 1.0)
    if higher_is_better(metric) and vmin > 0:
        vmin = 0.0  # a rate's scale starts at zero, so that colours compare like the numbers do
    if vmin == vmax:
        vmin, vmax = vmin * 0.9 - 1e-12, vmax * 1.1 + 1e-12
    # untested / failed cells: blank
    cmap = plt.get_cmap("viridis" if higher_is_better(metric) else "viridis_r").with_extremes(bad=(1, 1, 1, 0))
    best = sweep.best(metric)
    image = None
    for ri, rv in enumerate(row_vals):
        for ci, cv in enumerate(col_vals):
            ax = grid[ri][ci]
            where = {k: v for k, v in ((rows, rv), (cols, cv)) if k is not None}
            values, status, n_failed, xs, ys = cell_grid(sweep, x, y, where, metric)
            image = ax.imshow(np.ma.masked_invalid(values), cmap=cmap, vmin=vmin, vmax=vmax, origin="lower",
                              aspect="auto", interpolation="nearest")
            for yi in range(len(ys)):
                for xi in range(len(xs)):
                    if status[yi, xi] == "failed":
                        ax.add_patch(Rectangle((xi - 0.5, yi - 0.5), 1, 1, fill=False, hatch="///",
                                               edgecolor="0.55", linewidth=0, gid="failed"))
                    elif status[yi, xi] == "ok" and annotate:
                        v = values[yi, xi]
                        light = (v - vmin) / (vmax - vmin) > 0.6 if higher_is_better(metric) else \
                            (v - vmin) / (vmax - vmin) < 0.4
                        ax.text(xi, yi, _fmt(v), ha="center", va="center", fontsize=7,
                                color="black" if light else "white")
                    if status[yi, xi] == "ok" and n_failed[yi, xi]:  # some of the cell's configs failed
                        # top left, inside the cell: the star sits top right, the number in the middle
                        ax.text(xi - 0.44, yi + 0.42, f"×{n_failed[yi, xi]}", ha="left", va="top", fontsize=6,
                                color="crimson", gid="partly-failed",
                                bbox=dict(boxstyle="square,pad=0.1", facecolor="white", edgecolor="none"))
            if best is not None and all(best.config.get(k) == v for k, v in where.items()):
                bx, by = xs.index(best.config[x]), ys.index(best.config[y])
                ax.plot([bx + 0.3], [by + 0.28], marker="*", markersize=13, markerfacecolor="gold",
                        markeredgecolor="crimson", markeredgewidth=1, linestyle="none", gid="best")
                ax.add_patch(Rectangle((bx - 0.5, by - 0.5), 1, 1, fill=False, edgecolor="crimson", linewidth=2.5,
                                       gid="best-box"))
            ax.set_xticks(range(len(xs)), [str(v) for v in xs])
            ax.set_yticks(range(len(ys)), [str(v) for v in ys])
            ax.set_xlim(-0.5, len(xs) - 0.5)
            ax.set_ylim(-0.5, len(ys) - 0.5)
            if ri == len(row_vals) - 1:
                ax.set_xlabel(x)
            if ci == 0:
                ax.set_ylabel(y)
            facet = ", ".join(f"{k}={v}" for k, v in where.items())
            if facet:
                ax.set_title(facet, fontsize=9)
    fig.colorbar(image, ax=grid.ravel().tolist(), label=metric, shrink=0.9)
    lines = [f"{sweep.title()}: {metric} by {y} x {x}"
             + (f", best over {', '.join(hidden)} in each cell" if hidden else "")]
    if best is not None:
        lines.append(f"★ best: {config_label(best.config)} = {_fmt(sweep.rate(best, metric))} {metric}"
                     + (f" ({sweep.baseline.get('provider', 'baseline')}: {_fmt(sweep.baseline_rate(metric))})"
                        if sweep.baseline else ""))
    else:
        lines.append("every config failed")
    lines.append(f"{len(sweep.failed)} of {len(sweep.results)} configs failed (hatched: the whole cell; "
                 "×n: n of the cell's configs); blank: not tested")
    lines.append(sweep.provenance())
    fig.suptitle(_wrap(lines, width), fontsize=9, color="black" if sweep.timings_meaningful else "darkred")
    return fig


def _wrap(lines, width_in: float) -> str:
    """Title lines wrapped to the figure's width (about 14 characters an inch at font size 9)."""
    return "\n".join(textwrap.fill(line, int(width_in * 14)) for line in lines)


# ------------------------------------------------------------------------------------------
# across shapes
# ------------------------------------------------------------------------------------------


def _one_family(sweeps) -> list[Sweep]:
    sweeps = list(sweeps)
    if not sweeps:
        raise ValueError("no sweeps given")
    kinds = {(s.kernel, s.dtype) for s in sweeps}
    if len(kinds) > 1:
        raise ValueError(f"sweeps of one kernel and dtype please; got {sorted(kinds)} "
                         "(filter with load_sweeps(kernel=..., dtype=...))")
    # squares by size first, then the odd shapes (skinny ones) by size
    return sorted(sweeps, key=lambda s: (not _is_square(s), math.prod(s.dims)))


def best_vs_shape(sweeps, *, fixed: dict | list[dict] | None = None, metric: str | None = None):
    """How the best config moves with the problem shape, and what one fixed config loses.

    Left: the best config of each shape, one column per shape (cells whose value differs from the
    previous shape are outlined), with the best rate on top. Right: fraction of each shape's best
    reached by ``fixed`` (default: the best config of the largest shape; a list gives several bars).
    """
    sweeps = _one_family(sweeps)
    metric = metric or sweeps[0].metric
    bests = [s.best(metric) for s in sweeps]
    if fixed is None:
        largest = max((s for s, b in zip(sweeps, bests) if b is not None), key=lambda s: math.prod(s.dims), default=None)
        if largest is None:
            raise ValueError("every config failed at every shape: nothing to compare")
        fixed = [largest.best(metric).config]
    fixed = [fixed] if isinstance(fixed, dict) else list(fixed)

    keys = [k for k in FACET_KEYS if any(b and k in b.config for b in bests)]
    keys += [k for b in bests if b for k in b.config if k not in keys]
    width = max(8.0, 4 + 1.9 * len(sweeps))
    fig, (ax_t, ax_f) = plt.subplots(1, 2, figsize=(width, 4.4), layout="constrained",
                                     gridspec_kw={"width_ratios": [1.1, 1]})

    # left: a table of best configs, colored by log2 of each value within its row
    table = np.full((len(keys), len(sweeps)), np.nan)
    for j, b in enumerate(bests):
        for i, k in enumerate(keys):
            if b is not None and isinstance(b.config.get(k), (int, float)) and b.config[k] > 0:
                table[i, j] = math.log2(b.config[k])
    span = np.nanmax(table, axis=1, keepdims=True) - np.nanmin(table, axis=1, keepdims=True)
    norm = (table - np.nanmin(table, axis=1, keepdims=True)) / np.where(span > 0, span, 1)
    ax_t.imshow(np.ma.masked_invalid(norm), cmap="Blues", vmin=-0.3, vmax=1.3, aspect="auto")
    for j, b in enumerate(bests):
        for i, k in enumerate(keys):
            text = "failed" if b is None else str(b.config.get(k, "-"))
            ax_t.text(j, i, text, ha="center", va="center", fontsize=9)
            if j > 0 and b is not None and bests[j - 1] is not None and b.config.get(k) != bests[j - 1].config.get(k):
                ax_t.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="crimson", linewidth=1.5))
    ax_t.set_yticks(range(len(keys)), keys)
    ax_t.set_xticks(range(len(sweeps)), [f"{_shape_label(s)}\n{_fmt(s.rate(b, metric)) if b else '-'} {metric}"
                                        for s, b in zip(sweeps, bests)], fontsize=8)
    ax_t.set_title("best config per shape (red: changed from the shape before)", fontsize=9)

    # right: fraction of best reached by each fixed config
    bar_w = 0.8 / len(fixed)
    xs = np.arange(len(sweeps))
    for f_i, cfg in enumerate(fixed):
        fracs, notes = [], []
        for s, b in zip(sweeps, bests):
            r = s.get(cfg)
            if b is None or r is None or not r.ok:
                fracs.append(0.0)
                notes.append("not tested" if r is None else "failed")
            else:
                rb, rf = s.rate(b, metric), s.rate(r, metric)
                fracs.append(rf / rb if higher_is_better(metric) else rb / rf)
                notes.append("")
        pos = xs - 0.4 + bar_w * (f_i + 0.5)
        bars = ax_f.bar(pos, fracs, width=bar_w * 0.9, label=config_label(cfg), gid=f"fixed-{f_i}")
        for x, frac, note, bar in zip(pos, fracs, notes, bars):
            ax_f.text(x, (frac if not note else 0) + 0.02, note or f"{frac:.0%}", ha="center", va="bottom",
                      fontsize=8, rotation=90 if note else 0)
    ax_f.axhline(1.0, color="0.3", linestyle="--", linewidth=1)
    ax_f.set_xticks(xs, [_shape_label(s) for s in sweeps], fontsize=8)
    ax_f.set_ylim(0, 1.15)
    ax_f.set_ylabel("fraction of that shape's best")
    ax_f.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.12), title="one config for every shape", title_fontsize=8)
    ax_f.set_title("what tuning once costs elsewhere", fontsize=9)
    s0 = sweeps[0]
    fig.suptitle(_wrap([f"{s0.kernel} {s0.dtype}: the best config depends on the shape", s0.provenance()], width),
                 fontsize=9,
                 color="black" if all(s.timings_meaningful for s in sweeps) else "darkred")
    return fig


# ------------------------------------------------------------------------------------------
# explorer
# ------------------------------------------------------------------------------------------


def _choose(dropdown, options, default=None):
    """Set a dropdown's options, keeping its value when it is still there (else ``default``, else the first)."""
    old = dropdown.value
    if list(dropdown.options) != list(options):
        dropdown.options = options
    for want in (old, default, options[0] if options else None):
        if want in options:
            dropdown.value = want
            return


def show_explorer(sweeps=None):
    """Display ``explorer(sweeps)`` and, below it, a still picture of its first view; return the widget.

    A widget draws nothing where no Python kernel runs (GitHub, nbviewer, an HTML export): the still
    picture is what those pages show, and in a live notebook it stays the explorer's starting point.
    """
    from IPython.display import Markdown, display

    box = explorer(sweeps)
    display(box)
    if box.figure is not None:
        s = box.current()
        display(Markdown(f"*The explorer's first view as a still picture, for pages that show no widgets: "
                         f"{s.kernel} {s.shape} {s.dtype}, {box.controls['metric'].value}.*"))
        display(box.figure)
    return box


def explorer(sweeps=None):
    """Dropdowns (kernel, dtype, shape, metric, x/y/rows/cols) that redraw ``heatmap``.

    ``sweeps``: a list of Sweeps, or a folder of sweep files (default: the recorded ones).
    Returns the widget; ``widget.redraw()`` draws again and ``widget.figure`` is the last figure
    (``show_explorer`` also displays that figure, for pages without widgets).
    """
    import ipywidgets as w
    from IPython.display import display

    if sweeps is None or not isinstance(sweeps, (list, tuple)):
        sweeps = load_sweeps(sweeps)
    sweeps = list(sweeps)
    if not sweeps:
        raise ValueError("no sweeps to explore: record some with `python -m tkcourse.autotune` on a GPU")

    def family(kernel, dtype):
        return _one_family([s for s in sweeps if s.kernel == kernel and s.dtype == dtype])

    kernel = w.Dropdown(options=sorted({s.kernel for s in sweeps}), description="kernel")
    dtype = w.Dropdown(description="dtype")
    shape = w.Dropdown(description="shape")
    metric = w.Dropdown(description="metric")
    facet = {name: w.Dropdown(description=name, layout=w.Layout(width="200px"))
             for name in ("x", "y", "rows", "cols")}
    defaults = {"x": "BLOCK_N", "y": "BLOCK_M", "rows": "num_warps", "cols": "num_stages"}
    out = w.Output()
    info = w.HTML()
    busy = [False]

    def current() -> Sweep:
        return next(s for s in family(kernel.value, dtype.value) if s.shape == shape.value)

    def refresh_options(*_):
        if busy[0]:
            return
        busy[0] = True
        try:
            _choose(dtype, sorted({s.dtype for s in sweeps if s.kernel == kernel.value}))
            _choose(shape, [s.shape for s in family(kernel.value, dtype.value)])
            s = current()
            _choose(metric, s.metrics())
            keys = list(s.axes)
            for name, dd in facet.items():
                _choose(dd, keys if name in ("x", "y") else ["(none)"] + keys, defaults[name])
        finally:
            busy[0] = False
        redraw()

    def redraw(*_):
        if busy[0]:
            return
        s = current()
        args = {k: (None if d.value == "(none)" else d.value) for k, d in facet.items()}
        with out:
            out.clear_output(wait=True)
            try:
                fig = heatmap(s, metric=metric.value, **args)
            except ValueError as e:
                print(e)
                return
            box.figure = fig
            display(fig)
            plt.close(fig)
        best = s.best(metric.value)
        info.value = f"<pre>{s.table(top=5, metric=metric.value)}</pre>" if best else "every config failed"

    kernel.observe(refresh_options, names="value")
    dtype.observe(refresh_options, names="value")
    shape.observe(refresh_options, names="value")
    metric.observe(redraw, names="value")
    for dd in facet.values():
        dd.observe(redraw, names="value")
    box = w.VBox([w.HBox([kernel, dtype, shape, metric]), w.HBox(list(facet.values())), out, info])
    box.figure = None
    box.redraw = redraw
    box.current = current
    box.controls = {"kernel": kernel, "dtype": dtype, "shape": shape, "metric": metric, **facet}
    refresh_options()
    return box
