"""Lesson 12's pictures: schedules on one Hopper SM, as timelines of which unit does what, and when.

These timelines come from a small, explicit **model of the schedule**, not from a measurement: a tiny
discrete-event simulation in which a TMA load of one block takes ``load``, one MMA (a ``wgmma`` on the
tensor cores) takes ``mma``, a softmax phase ``softmax`` and a tile's epilogue ``epilogue``, all in units of
one MMA by default. Change the durations to see when each trick pays: the ladder of ``SCHEDULES`` adds one
idea at a time.

- ``serial``: one warpgroup issues the load of a K block, waits for it, multiplies, and repeats. Nothing
  overlaps: the tensor cores idle during every load.
- ``pipelined``: software pipelining with ``stages`` shared-memory buffers, as Triton's ``num_stages`` does:
  the loads for the first ``stages - 1`` blocks go out before the loop, and the loop body waits for block
  ``i``, issues its MMA, then issues the load of block ``i + stages - 1`` into the buffer that block
  ``i - 1`` has just freed. Loads overlap MMAs. The one warpgroup both loads and multiplies, so while it
  waits for data it cannot issue the next load either.
- ``warp_specialized``: a producer warp does nothing but issue TMA loads into a ring of ``stages`` buffers,
  each as soon as its slot is free (the consumer arrives on the slot's "empty" mbarrier when its MMA is
  done); one consumer warpgroup waits on each slot's "full" mbarrier (the TMA's transaction count) and
  multiplies. At equal durations it draws the same timeline as ``pipelined`` (software pipelining already
  hides a short load); when a load takes longer than ``stages - 1`` MMAs, the producer, never stuck behind
  a wait for data, keeps more loads in flight and the tensor cores busier. (Its other gains, fewer
  registers and instructions in the consumer, are outside this model.)
- ``pingpong``: attention as FlashAttention-3 schedules it: a producer and two consumer warpgroups, each with
  its own query tile, sharing each K, V block. A consumer's step is a tensor-core phase (``S = Q K^T`` and
  ``O += P V``) then a softmax phase on the CUDA cores. The two take turns on the tensor cores (a named
  barrier fixes the order), so one's softmax runs under the other's MMAs. It does twice the MMAs of the
  matmul schedules (two query tiles): compare its tensor-core utilisation, not its length.
- ``persistent``: a persistent matmul, one program walking ``tiles`` output tiles of ``steps`` K blocks
  each through one warp-specialized ring: while the consumer stores tile ``t`` (the epilogue), the producer
  already loads tile ``t + 1``. With ``persistent=False``, each tile is its own program (on an SM that holds
  one at a time): it starts with an empty ring and pays its loads' latency after the previous epilogue.

What the model keeps, because the hardware does: an MMA on a block starts only after that block's load
has landed; a load into a ring slot starts only after the MMA that read the slot ``stages`` loads earlier
has ended; the tensor cores run one MMA at a time. What it leaves out: bandwidth shared between loads (a
load here is latency, and several may be in flight), issue costs, launch overhead, clocks, jitter.

``simulate(name, ...)`` returns the ``Event``s of one schedule; ``makespan``, ``busy`` and ``utilisation``
measure them; ``plot_schedule`` draws one timeline and ``plot_ladder`` several on one time axis. Both
close the figure they return (see ``tkcourse.plots``).

One schedule is also **recorded**: proton's intra-kernel profile of the ping-pong attention on the H200
(``tkcourse/data/h200/proton/pingpong_schedule.json``). ``recorded_events`` reads one program's phases as
``Event``s, ``recorded_numbers`` and ``tensor_core_share`` measure them, and ``plot_recorded`` draws them
above the model's ping-pong given the recorded lengths, which shows what the model leaves out.
"""

from __future__ import annotations

import inspect
import math
import numbers
from dataclasses import dataclass

import matplotlib.pyplot as plt
from matplotlib.patches import Patch

SCHEDULES = ("serial", "pipelined", "warp_specialized", "pingpong", "persistent")

KINDS = ("load", "wait", "mma", "softmax", "epilogue")

#: Lanes, top to bottom. The TMA lane holds the loads in flight (several at once, one sub-row each).
TMA_ISSUED = "TMA (issued by warpgroup 0)"
TMA_PRODUCER = "TMA (producer warp)"
LANES = (TMA_ISSUED, TMA_PRODUCER, "warpgroup 0", "warpgroup 1")

#: Colour and legend text per kind.
STYLE = {
    "load": ("tab:blue", None, "TMA load, global → shared (in flight)"),
    "wait": ("0.9", "///", "waiting (on an mbarrier or the tensor cores)"),
    "mma": ("tab:orange", None, "MMA on the tensor cores (wgmma)"),
    "softmax": ("tab:green", None, "softmax on the CUDA cores"),
    "epilogue": ("tab:purple", None, "epilogue: store of the C tile"),
}

TITLES = {
    "serial": "serial: one warpgroup loads a K block, waits, multiplies; nothing overlaps",
    "pipelined": "pipelined (num_stages = {stages}): loads issued {ahead} step(s) ahead overlap the MMAs",
    "warp_specialized": "warp specialized: a producer warp fills a ring of {stages} buffers (full/empty mbarriers)",
    "pingpong": "ping-pong attention: two consumer warpgroups take turns on the tensor cores",
    "persistent": "persistent: one program walks {tiles} tiles; an epilogue overlaps the next tile's loads",
    "non-persistent": "non-persistent: {tiles} programs, one tile each; each pays its loads and epilogue alone",
}


@dataclass(frozen=True)
class Event:
    """One bar of a timeline: ``lane`` (the unit) does ``kind`` from ``start`` to ``end``; ``label`` is short
    (``"k3"``: K block 3; ``"KV3"``: attention's K, V block 3; ``"P3"``: the softmax that makes P from
    block 3's scores; ``"t1k3"``: tile 1's block 3; ``"C1"``: tile 1's store)."""

    lane: str
    kind: str
    start: float
    end: float
    label: str

    @property
    def duration(self) -> float:
        return self.end - self.start


def _positive(name: str, value, integer: bool) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral if integer else numbers.Real):
        kind = "an int" if integer else "a number"
        raise ValueError(f"{name} must be {kind} greater than 0 (got {value!r})")
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be greater than 0 and finite (got {value!r})")


class _Timeline:
    """The events of one simulation, with the wait a consumer spends before each thing it starts."""

    def __init__(self):
        self.events: list[Event] = []

    def add(self, lane, kind, start, duration, label) -> float:
        self.events.append(Event(lane, kind, start, start + duration, label))
        return start + duration

    def wait(self, lane, since, until, label) -> None:
        if until > since:
            self.events.append(Event(lane, "wait", since, until, label))


def _serial(tl, steps, load, mma):
    t = 0.0
    for i in range(steps):
        landed = tl.add(TMA_ISSUED, "load", t, load, f"k{i}")
        tl.wait("warpgroup 0", t, landed, f"wait k{i}")
        t = tl.add("warpgroup 0", "mma", landed, mma, f"k{i}")


def _pipelined(tl, steps, load, mma, stages):
    ahead = stages - 1
    landed = [0.0] * steps
    for j in range(min(ahead, steps)):  # the prologue: the first stages - 1 loads, before the loop
        landed[j] = tl.add(TMA_ISSUED, "load", 0.0, load, f"k{j}")
    free = 0.0  # when the warpgroup is next free
    for i in range(steps):
        if ahead == 0:  # one buffer: nothing can go ahead; the load of block i waits for MMA i - 1
            landed[i] = tl.add(TMA_ISSUED, "load", free, load, f"k{i}")
        start = max(free, landed[i])
        tl.wait("warpgroup 0", free, start, f"wait k{i}")
        free = tl.add("warpgroup 0", "mma", start, mma, f"k{i}")
        j = i + ahead  # its slot held block i - 1, whose MMA ended before this one started
        if ahead and j < steps:
            landed[j] = tl.add(TMA_ISSUED, "load", start, load, f"k{j}")


def _ring(tl, blocks, load, mma, stages, names, epilogue_after=None, restart_at=()):
    """A producer warp and one consumer warpgroup on a ring of ``stages`` slots, over ``blocks`` blocks.

    ``epilogue_after``: {block: (duration, label)}: the consumer stores a tile after that block's MMA.
    ``restart_at``: blocks that begin a new program: the ring starts empty after the last epilogue."""
    landed, mma_end = [0.0] * blocks, [0.0] * blocks
    free = 0.0
    epilogue_after = epilogue_after or {}
    first = 0  # the first block of the current program
    for i in range(blocks):
        if i == 0 or i in restart_at:
            first = i
            for j in range(i, min(i + stages, blocks)):  # an empty ring: every slot is free at once
                landed[j] = tl.add(TMA_PRODUCER, "load", free, load, names[j])
        start = max(free, landed[i])
        tl.wait("warpgroup 0", free, start, f"wait {names[i]}")
        free = mma_end[i] = tl.add("warpgroup 0", "mma", start, mma, names[i])
        j = i + stages  # the slot of block i is empty again: the producer refills it at once
        if j < blocks and j >= first + stages and not any(i < r <= j for r in restart_at):
            landed[j] = tl.add(TMA_PRODUCER, "load", mma_end[i], load, names[j])
        if i in epilogue_after:
            duration, label = epilogue_after[i]
            free = tl.add("warpgroup 0", "epilogue", free, duration, label)
    return mma_end


def _pingpong(tl, steps, load, mma, softmax, stages):
    landed = [0.0] * steps
    for j in range(min(stages, steps)):
        landed[j] = tl.add(TMA_PRODUCER, "load", 0.0, load, f"KV{j}")
    tensor_cores = 0.0  # when the tensor cores are next free
    free = [0.0, 0.0]  # when each consumer is next free
    for i in range(steps):
        for c in (0, 1):  # a fixed turn: warpgroup 0's MMAs of step i, then warpgroup 1's
            lane = f"warpgroup {c}"
            start = max(free[c], landed[i], tensor_cores)
            tl.wait(lane, free[c], start, f"wait KV{i}" if landed[i] >= tensor_cores else "wait tensor cores")
            tensor_cores = tl.add(lane, "mma", start, mma, f"KV{i}")
            free[c] = tl.add(lane, "softmax", tensor_cores, softmax, f"P{i}")
        j = i + stages  # both consumers have read block i: its slot is empty
        if j < steps:
            landed[j] = tl.add(TMA_PRODUCER, "load", tensor_cores, load, f"KV{j}")


def simulate(name: str, steps: int = 6, load: float = 1.0, mma: float = 1.0, softmax: float = 0.8,
             epilogue: float = 1.5, stages: int = 3, tiles: int = 3, *, persistent: bool = True) -> list[Event]:
    """The events of schedule ``name`` (one of ``SCHEDULES``), from the model described at the top of this module.

    ``steps``: K blocks per output tile (for ``pingpong``, K, V blocks per query tile); ``load``, ``mma``,
    ``softmax``, ``epilogue``: durations (``softmax`` is used by ``pingpong`` only, ``epilogue`` and
    ``tiles`` by ``persistent`` only); ``stages``: shared-memory buffers in the ring (``serial`` has one);
    ``persistent``: ``False`` draws the ``persistent`` schedule's baseline, one program per tile.

    Loads are listed in the order of their blocks, MMAs in the order they run: MMA ``i`` reads load ``i``
    (in ``pingpong``, MMAs ``2i`` and ``2i + 1``, one per consumer, both read load ``i``).
    Raises ValueError, naming the argument, for an unknown name or a duration, count or stage count that
    is not positive.
    """
    if name not in SCHEDULES:
        raise ValueError(f"name must be one of {SCHEDULES} (got {name!r})")
    for arg, value in (("load", load), ("mma", mma), ("softmax", softmax), ("epilogue", epilogue)):
        _positive(arg, value, integer=False)
    for arg, value in (("steps", steps), ("stages", stages), ("tiles", tiles)):
        _positive(arg, value, integer=True)
    if not isinstance(persistent, bool):
        raise ValueError(f"persistent must be True or False (got {persistent!r})")
    if not persistent and name != "persistent":
        raise ValueError(f"persistent=False is the baseline of the 'persistent' schedule only (got name={name!r})")
    tl = _Timeline()
    if name == "serial":
        _serial(tl, steps, load, mma)
    elif name == "pipelined":
        _pipelined(tl, steps, load, mma, stages)
    elif name == "warp_specialized":
        _ring(tl, steps, load, mma, stages, [f"k{i}" for i in range(steps)])
    elif name == "pingpong":
        _pingpong(tl, steps, load, mma, softmax, stages)
    else:
        names = [f"t{t}k{k}" for t in range(tiles) for k in range(steps)]
        stores = {t * steps + steps - 1: (epilogue, f"C{t}") for t in range(tiles)}
        restarts = () if persistent else tuple(t * steps for t in range(1, tiles))
        _ring(tl, tiles * steps, load, mma, stages, names, epilogue_after=stores, restart_at=restarts)
    return tl.events


#: ``simulate``'s default arguments, for the pictures' captions.
DEFAULTS = {k: p.default for k, p in inspect.signature(simulate).parameters.items() if k != "name"}


def makespan(events) -> float:
    """When the last event ends (0 for no events): the length of the schedule."""
    return max((e.end for e in events), default=0.0)


def busy(events, kind: str) -> float:
    """The summed duration of the events of ``kind``. ``busy(ev, "mma") / makespan(ev)`` is the share of the
    time the tensor cores work (the model never runs two MMAs at once, so the sum counts no time twice)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS} (got {kind!r})")
    return sum(e.duration for e in events if e.kind == kind)


def utilisation(events) -> float:
    """``busy(events, "mma") / makespan(events)``: how much of the time the tensor cores work."""
    span = makespan(events)
    return busy(events, "mma") / span if span else 0.0


def _title(name: str, kwargs: dict) -> str:
    d = {**DEFAULTS, **kwargs}
    key = "non-persistent" if name == "persistent" and not d["persistent"] else name
    return TITLES[key].format(stages=d["stages"], ahead=d["stages"] - 1, tiles=d["tiles"])


def _sub_rows(events) -> tuple[list[int], int]:
    """A sub-row for each event of one lane, so that events at the same time (loads in flight) stack."""
    ends: list[float] = []
    rows = []
    for e in events:
        for r, end in enumerate(ends):
            if end <= e.start + 1e-9:
                ends[r] = e.end
                rows.append(r)
                break
        else:
            ends.append(e.end)
            rows.append(len(ends) - 1)
    return rows, max(len(ends), 1)


def _draw(ax, events, xmax: float | None = None) -> list[str]:
    """Bars, one row per lane (top to bottom as in ``LANES``), with each bar's label where it fits.
    Returns the kinds drawn."""
    lanes = sorted({e.lane for e in events}, key=lambda s: (LANES.index(s) if s in LANES else len(LANES), s))
    span = xmax or makespan(events)
    ax.set_xlim(0, span * 1.02)
    ax.set_ylim(len(lanes) - 0.5, -0.5)  # the first lane on top
    box = ax.get_window_extent()
    points_per_unit = box.width * 72 / ax.figure.dpi / (span * 1.02)
    points_per_row = box.height * 72 / ax.figure.dpi / len(lanes)
    for y, lane in enumerate(lanes):
        mine = sorted((e for e in events if e.lane == lane), key=lambda e: (e.start, e.end))
        rows, n = _sub_rows(mine)
        height = 0.8 / n
        for e, r in zip(mine, rows):
            color, hatch, _ = STYLE[e.kind]
            top = y - 0.4 + r * height
            ax.barh(top + height / 2, e.duration, height * 0.92, left=e.start, color=color, hatch=hatch,
                    edgecolor="0.35" if e.kind == "wait" else "white", linewidth=0.5)
            fontsize = 7
            fits = (e.duration * points_per_unit >= 0.62 * fontsize * len(e.label) + 3
                    and height * points_per_row >= fontsize + 1)
            if e.kind != "wait" and fits:
                ax.text(e.start + e.duration / 2, top + height / 2, e.label, ha="center", va="center",
                        fontsize=fontsize, color="white")
    ax.set_yticks(range(len(lanes)), lanes, fontsize=8)
    ax.axvline(makespan(events), color="0.3", linestyle="--", linewidth=1)
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    for side in ("right", "top"):
        ax.spines[side].set_visible(False)
    return [k for k in KINDS if any(e.kind == k for e in events)]


def _legend_handles(kinds) -> list[Patch]:
    return [Patch(facecolor=STYLE[k][0], hatch=STYLE[k][1], edgecolor="0.35", label=STYLE[k][2]) for k in kinds]


def _numbers(events) -> str:
    return f"makespan {makespan(events):g} · tensor cores busy {utilisation(events):.0%}"


def _durations(kwargs: dict) -> str:
    d = {**DEFAULTS, **kwargs}
    return (f"load {d['load']:g}, MMA {d['mma']:g}, softmax {d['softmax']:g}, epilogue {d['epilogue']:g}; "
            f"{d['stages']} stages, {d['steps']} K blocks, {d['tiles']} tiles")


def plot_schedule(name: str, ax=None, **simulate_kwargs):
    """One schedule's timeline: a row per lane (a unit of the SM), a colour per kind of work, the makespan
    dashed, and the tensor cores' utilisation (``busy(mma) / makespan``) in the title. Keyword arguments
    go to ``simulate``. It is a model of the schedule (see this module), and the title says so."""
    events = simulate(name, **simulate_kwargs)
    fig = None
    if ax is None:
        lanes = len({e.lane for e in events})
        fig, ax = plt.subplots(figsize=(10, 0.7 * lanes + 2.2), layout="constrained")
    kinds = _draw(ax, events)
    ax.set_xlabel(f"time (one MMA = {simulate_kwargs.get('mma', DEFAULTS['mma']):g})")
    ax.set_title(f"{_title(name, simulate_kwargs)}\na model of the schedule, not a measurement · {_numbers(events)}",
                 fontsize=10)
    if fig is not None:  # below the axes, where it covers no bar
        fig.legend(handles=_legend_handles(kinds), fontsize=8, loc="outside lower center", ncol=3, frameon=False)
    else:  # someone else's figure: beside the axes
        ax.legend(handles=_legend_handles(kinds), fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    if fig is not None:
        plt.close(fig)  # returned, not shown twice (see tkcourse.plots)
        return fig
    return ax.figure


def plot_ladder(names=SCHEDULES, **simulate_kwargs):
    """The schedules ``names`` (default: all of ``SCHEDULES``, in teaching order) stacked on one time axis, so
    that each step down shows what one more idea removes from the timeline. Keyword arguments go to
    ``simulate`` for every schedule. A model of the schedules, not a measurement (the title says so)."""
    names = tuple(names)
    if not names:
        raise ValueError("names must name at least one schedule")
    runs = [simulate(n, **simulate_kwargs) for n in names]
    heights = [len({e.lane for e in ev}) for ev in runs]
    fig, axes = plt.subplots(len(names), 1, sharex=True, figsize=(11, 0.62 * sum(heights) + 0.75 * len(names) + 1.6),
                             height_ratios=heights, layout="constrained", squeeze=False)
    axes = axes[:, 0]
    xmax = max(makespan(ev) for ev in runs)
    kinds: set[str] = set()
    for ax, name, ev in zip(axes, names, runs):
        kinds.update(_draw(ax, ev, xmax=xmax))
        ax.set_title(f"{_title(name, simulate_kwargs)}  ({_numbers(ev)})", fontsize=9, loc="left")
    axes[-1].set_xlabel(f"time (one MMA = {simulate_kwargs.get('mma', DEFAULTS['mma']):g})")
    fig.suptitle("Schedules on one Hopper SM: a model of the schedule, not a measurement\n"
                 f"({_durations(simulate_kwargs)}; ping-pong is attention, with two query tiles)", fontsize=10)
    fig.legend(handles=_legend_handles([k for k in KINDS if k in kinds]), fontsize=8, loc="outside lower center",
               ncol=3, frameon=False)
    plt.close(fig)  # returned, not shown twice (see tkcourse.plots)
    return fig


# ----- the recorded schedule ---------------------------------------------------------------------------------

#: The recorded figure's lane of when the tensor cores ran (``tensor_core_intervals``).
TENSOR_CORES = "tensor cores (at most)"
#: Legend of the recorded phases: the consumer's ``pl.scope`` blocks (``gluon_attention.pingpong_consumer``).
RECORDED_LEGEND = {
    "wait": "waiting on mbarriers (K and V landed, its turn)",
    "mma": "its MMAs: issued, then waited for (behind the other warpgroup's)",
    "softmax": "softmax on the CUDA cores",
}


def recorded_events(causal: bool = False, cta: str | None = None, path=None) -> tuple[list[Event], dict]:
    """One CTA's recorded phases as ``Event``s (lanes "warpgroup 0" and "warpgroup 1", times in the file's unit)
    and ``{"run", "cta", "provenance", "unit"}``. ``cta`` None: the CTA with the most phases (the causal run's
    last query block has the most keys). Raises FileNotFoundError when nothing is recorded, ValueError for a
    run or CTA the file does not hold."""
    from ..bench.core import RECORDED_SCHEDULE, load_schedule_run

    data = load_schedule_run(path)
    if data is None:
        raise FileNotFoundError(f"no recorded schedule at {path or RECORDED_SCHEDULE} "
                                "(research/hopper/schedule_probe.py --record writes it)")
    runs = [r for r in data["runs"] if r["causal"] == causal]
    if not runs:
        raise ValueError(f"no {'causal' if causal else 'non-causal'} run recorded")
    run = runs[0]
    if cta is None:
        cta = max(run["ctas"], key=lambda c: sum(len(v) for v in run["ctas"][c].values()))
    if cta not in run["ctas"]:
        raise ValueError(f"cta must be one of {sorted(run['ctas'])} (got {cta!r})")
    names = {"mma": "MMA", "softmax": "softmax", "wait": ""}
    events = []
    for lane, phases in sorted(run["ctas"][cta].items()):
        last = -math.inf
        for kind, start, end in sorted(phases, key=lambda p: p[1]):
            # a phase spans its warpgroup's four warps, the first in to the last out: it may begin before the
            # previous one ended in a slower warp; drawn from that end, one bar after the other
            start = max(start, last)
            if end > start:
                events.append(Event(lane, kind, start, end, names[kind]))
                last = end
    return events, dict(run=run, cta=cta, provenance=data["provenance"], unit=data["unit"])


def tensor_core_intervals(events) -> list[tuple[float, float]]:
    """When the tensor cores ran, as far as the recorded phases say: a warpgroup's MMAs run from when it issued
    them, or when the MMAs issued before them were done if later, until its wait for them returned (the
    tensor cores take one warpgroup's MMAs at a time). An upper bound: the wait's return comes a little
    after the last MMA."""
    out: list[tuple[float, float]] = []
    free = -math.inf
    for e in sorted((e for e in events if e.kind == "mma"), key=lambda e: e.end):
        start = max(e.start, free)
        if e.end > start:
            out.append((start, e.end))
        free = max(free, e.end)
    return out


def tensor_core_share(events) -> float:
    """The tensor cores' busy share (``tensor_core_intervals``) from the first MMA's start to the last one's end:
    the same measure for a recorded schedule and a modelled one (whose MMAs never overlap)."""
    runs = tensor_core_intervals(events)
    window = runs[-1][1] - runs[0][0] if runs else 0.0
    return sum(b - a for a, b in runs) / window if window else 0.0


def recorded_numbers(events) -> dict:
    """Shares of the recorded time: each phase's share of a warpgroup's span (averaged over the warpgroups) and
    the tensor cores' busy share (``tensor_core_intervals``) from the first MMA to the last; the mean length
    of an MMA run and of a softmax phase."""
    lanes = sorted({e.lane for e in events})
    share = {}
    for kind in ("wait", "mma", "softmax"):
        parts = []
        for lane in lanes:
            mine = [e for e in events if e.lane == lane]
            span = max(e.end for e in mine) - min(e.start for e in mine)
            parts.append(sum(e.duration for e in mine if e.kind == kind) / span if span else 0.0)
        share[kind] = sum(parts) / len(parts)
    runs = tensor_core_intervals(events)
    soft = [e.duration for e in events if e.kind == "softmax"]
    return dict(share=share, tensor_cores=tensor_core_share(events),
                mma=sum(b - a for a, b in runs) / len(runs) if runs else 0.0,
                softmax=sum(soft) / len(soft) if soft else 0.0)


def plot_recorded(causal: bool = False, cta: str | None = None, path=None):
    """Lesson 12's ping-pong attention as the H200 ran it (proton's intra-kernel profile of one CTA, its two
    consumer warpgroups), above the model's ping-pong (``simulate("pingpong", ...)``) given the recorded
    lengths of an MMA run and a softmax phase, on one time axis. The titles give the shares
    (``recorded_numbers``) and the provenance."""
    events, meta = recorded_events(causal, cta, path)
    nums = recorded_numbers(events)
    steps = sum(1 for e in events if e.kind == "mma" and e.lane == "warpgroup 0")
    model_kw = dict(steps=max(steps, 1), mma=nums["mma"] or 1.0, softmax=nums["softmax"] or 1.0,
                    load=nums["mma"] or 1.0, stages=2)
    model = simulate("pingpong", **model_kw)
    t0 = min(e.start for e in events)
    heights = [3, len({e.lane for e in model})]
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(11, 5.2), height_ratios=heights,
                                      layout="constrained")
    shifted = [Event(e.lane, e.kind, e.start - t0, e.end - t0, e.label) for e in events]
    shifted += [Event(TENSOR_CORES, "mma", a - t0, b - t0, "") for a, b in tensor_core_intervals(events)]
    xmax = max(makespan(shifted), makespan(model))
    _draw(top, shifted, xmax=xmax)
    run, prov = meta["run"], meta["provenance"]
    share = nums["share"]
    top.set_title(f"recorded on the {prov['gpu'].split(' (')[0]} by proton: one CTA ({meta['cta']}) of "
                  f"{run['kernel']}, N {run['n']}, D {run.get('D', 128)}, {run.get('dtype', 'float16')}"
                  f"{', causal' if causal else ''}\na warpgroup's time: MMAs {share['mma']:.0%}, softmax "
                  f"{share['softmax']:.0%}, mbarrier waits {share['wait']:.0%} · tensor cores busy at most "
                  f"{nums['tensor_cores']:.0%} from the first MMA to the last (bottom lane)", fontsize=9, loc="left")
    _draw(bottom, model, xmax=xmax)
    bottom.set_title(f"the model with the recorded lengths (an MMA run {nums['mma']:.2f}, a softmax "
                     f"{nums['softmax']:.2f}): {makespan(model):.1f} long · tensor cores busy "
                     f"{tensor_core_share(model):.0%} from the first MMA to the last", fontsize=9, loc="left")
    bottom.set_xlabel(f"time ({meta['unit']})")
    fig.suptitle(f"Ping-pong attention: recorded, then modelled (torch {prov['torch']}, triton {prov['triton']}, "
                 f"{prov['date']})", fontsize=10)
    fig.legend(handles=[Patch(facecolor=STYLE[k][0], hatch=STYLE[k][1], edgecolor="0.35",
                              label=f"recorded: {RECORDED_LEGEND[k]}") for k in RECORDED_LEGEND]
               + _legend_handles(["load", "mma"]), fontsize=8, loc="outside lower center", ncol=2, frameon=False)
    plt.close(fig)  # returned, not shown twice (see tkcourse.plots)
    return fig
