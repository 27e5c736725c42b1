"""The block programming model, drawn: which program handles which elements (lessons 00 and 01)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Rectangle


def program_map(n: int, BLOCK: int, ax=None, max_cells: int = 128):
    """A strip of ``n`` elements colored by the program that handles each one.

    The grid has ``cdiv(n, BLOCK)`` programs; program ``pid`` covers offsets
    ``pid * BLOCK + arange(0, BLOCK)``, and lanes at or past ``n`` are masked off (hatched).
    """
    if n < 1 or BLOCK < 1:
        raise ValueError(f"n and BLOCK must be at least 1 (got n={n}, BLOCK={BLOCK})")
    grid = -(-n // BLOCK)
    lanes = grid * BLOCK
    if lanes > max_cells:
        raise ValueError(f"{lanes} lanes are too many to draw; keep grid * BLOCK <= {max_cells}")
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(min(14, 2 + lanes * 0.16), 2.3))
    cmap = plt.get_cmap("tab10")
    for i in range(lanes):
        pid, masked = i // BLOCK, i >= n
        ax.add_patch(Rectangle((i, 0), 1, 1, facecolor="white" if masked else cmap(pid % 10),
                               edgecolor="0.3", hatch="///" if masked else None, linewidth=0.6))
    for pid in range(grid):
        ax.text(pid * BLOCK + BLOCK / 2, 1.25, f"pid {pid}", ha="center", va="bottom", fontsize=8)
        ax.plot([pid * BLOCK, pid * BLOCK], [-0.1, 1.1], color="k", linewidth=1.5)
    ax.axvline(n, color="crimson", linewidth=2)
    ax.text(n, -0.35, f"n = {n}", color="crimson", ha="center", va="top", fontsize=9)
    ax.set_xlim(-0.5, lanes + 0.5)
    ax.set_ylim(-0.9, 1.8)
    ax.set_yticks([])
    ax.set_xticks(np.arange(0, lanes + 1, BLOCK))
    ax.set_xlabel("element offset")
    ax.set_title(f"grid = cdiv({n}, {BLOCK}) = {grid} programs; {lanes - n} masked lane(s) hatched")
    for side in ("left", "right", "top"):
        ax.spines[side].set_visible(False)
    if fig is not None:
        plt.close(fig)  # returned, not shown twice (see tkcourse.plots)
        return fig
    return ax.figure


def show_static(fig, caption: str) -> None:
    """Display ``fig`` as a plain picture with a caption, when running under IPython.

    A widget shows nothing where no kernel runs (GitHub, nbviewer, an HTML export): the explorers call
    this first, so that the saved notebook keeps a picture of their starting state beside the widget.
    """
    try:
        from IPython import get_ipython
        from IPython.display import Markdown, display
    except ImportError:
        return
    if get_ipython() is None:
        return
    display(Markdown(caption))
    display(fig)


def program_map_explorer(n: int = 37, BLOCK: int = 8, static: bool = True):
    """Sliders for n and BLOCK that redraw ``program_map`` (an ipywidgets box).

    ``static``: also display the picture of the starting state (n, BLOCK), for renderings without a kernel.
    """
    import ipywidgets as w
    from IPython.display import display

    if static:
        show_static(program_map(n, BLOCK), f"*The picture for n = {n}, BLOCK = {BLOCK} (what the sliders below "
                                           "start at; they need a running notebook):*")

    n_slider = w.IntSlider(value=n, min=1, max=100, description="n")
    b_drop = w.Dropdown(options=[2, 4, 8, 16, 32], value=BLOCK, description="BLOCK")
    out = w.Output()

    def redraw(*_):
        with out:
            out.clear_output(wait=True)
            fig = program_map(n_slider.value, b_drop.value)
            display(fig)
            plt.close(fig)

    n_slider.observe(redraw, names="value")
    b_drop.observe(redraw, names="value")
    redraw()
    box = w.VBox([w.HBox([n_slider, b_drop]), out])
    return box
