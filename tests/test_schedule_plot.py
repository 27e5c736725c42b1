"""Lesson 12's schedule model: each schedule keeps the hardware's rules (a block is multiplied only after it
has landed, a ring slot is refilled only after its MMA, one MMA at a time on the tensor cores), each idea
of the ladder shortens the timeline or fills the tensor cores, and the pictures are built headless."""

import json
import math
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from matplotlib.figure import Figure

from tkcourse.plots import schedule as sch

matplotlib.use("Agg")


def _of(events, kind):
    return [e for e in events if e.kind == kind]


def _readers(name, events):
    """For each load (in block order), the MMAs that read its slot: one, or one per consumer in ping-pong."""
    loads, mmas = _of(events, "load"), _of(events, "mma")
    per = 2 if name == "pingpong" else 1
    assert len(mmas) == per * len(loads)
    return [(load, mmas[per * i:per * i + per]) for i, load in enumerate(loads)]


def _overlap(a, b) -> bool:
    return a.start < b.end and b.start < a.end


def _check_rules(name, events, stages):
    """The rules every schedule must keep; ``stages`` is the ring's size (1 for ``serial``)."""
    assert all(e.end > e.start for e in events), "an event of no length"
    assert all(e.kind in sch.KINDS for e in events)
    mmas = sorted(_of(events, "mma"), key=lambda e: e.start)
    for a, b in zip(mmas, mmas[1:]):
        assert b.start >= a.end - 1e-9, f"two MMAs on the tensor cores at once: {a} and {b}"
    readers = _readers(name, events)
    for load, reads in readers:
        for m in reads:
            assert m.start >= load.end - 1e-9, f"MMA {m} starts before its block landed ({load})"
    released = [max(m.end for m in reads) for _, reads in readers]  # the slot is empty again
    for j, (load, _) in enumerate(readers):
        if j >= stages:
            assert load.start >= released[j - stages] - 1e-9, f"load {j} overwrote a slot still being read"
        in_flight = sum(1 for (l2, _), free in zip(readers, released) if l2.start <= load.start < free)
        assert in_flight <= stages, f"{in_flight} blocks held in a ring of {stages} at t={load.start}"
    for lane in {e.lane for e in events if e.kind != "load"}:  # a warpgroup does one thing at a time
        mine = sorted((e for e in events if e.lane == lane), key=lambda e: e.start)
        for a, b in zip(mine, mine[1:]):
            assert b.start >= a.end - 1e-9, f"{lane} does two things at once: {a} and {b}"


def test_schedules_in_teaching_order():
    assert sch.SCHEDULES == ("serial", "pipelined", "warp_specialized", "pingpong", "persistent")
    for name in sch.SCHEDULES:
        events = sch.simulate(name)
        assert events and all(isinstance(e, sch.Event) for e in events)
        with pytest.raises(AttributeError):  # frozen
            events[0].start = 0.0


@pytest.mark.parametrize("name", sch.SCHEDULES)
@pytest.mark.parametrize("stages", [1, 2, 3, 5])
def test_rules_hold(name, stages):
    events = sch.simulate(name, stages=stages, load=2.5)
    _check_rules(name, events, 1 if name == "serial" else stages)


def test_serial_overlaps_nothing():
    events = sch.simulate("serial", steps=5)
    assert not any(_overlap(l, m) for l in _of(events, "load") for m in _of(events, "mma"))
    assert sch.makespan(events) == pytest.approx(5 * (1.0 + 1.0))
    assert sch.utilisation(events) == pytest.approx(0.5)


@pytest.mark.parametrize("steps", [3, 4, 8])
def test_pipelining_shortens_the_timeline(steps):
    serial, piped = sch.simulate("serial", steps=steps), sch.simulate("pipelined", steps=steps)
    assert sch.makespan(serial) > sch.makespan(piped)
    assert any(_overlap(l, m) for l in _of(piped, "load") for m in _of(piped, "mma")), "no load overlaps an MMA"


def test_warp_specialization_keeps_the_tensor_cores_at_least_as_busy():
    for load in (0.5, 1.0, 2.0):  # short loads: software pipelining hides them as well
        assert sch.utilisation(sch.simulate("warp_specialized", load=load)) >= \
            sch.utilisation(sch.simulate("pipelined", load=load)) - 1e-12
    # a long load: the pipelined warpgroup, waiting for data, cannot issue the next load; a producer can
    assert sch.utilisation(sch.simulate("warp_specialized", load=3.0)) > \
        sch.utilisation(sch.simulate("pipelined", load=3.0))


def test_pingpong_takes_turns_and_hides_softmax():
    events = sch.simulate("pingpong")
    mmas = _of(events, "mma")
    assert not any(_overlap(a, b) for i, a in enumerate(mmas) for b in mmas[i + 1:])
    lanes = ("warpgroup 0", "warpgroup 1")
    assert {e.lane for e in mmas} == set(lanes)
    for me, other in (lanes, lanes[::-1]):
        mine = [e for e in events if e.kind == "softmax" and e.lane == me]
        theirs = [e for e in mmas if e.lane == other]
        assert any(_overlap(s, m) for s in mine for m in theirs), f"{me}'s softmax never hides under {other}'s MMAs"


@pytest.mark.parametrize("tiles", [2, 3, 5])
def test_persistent_beats_one_program_per_tile(tiles):
    persistent = sch.simulate("persistent", tiles=tiles)
    alone = sch.simulate("persistent", tiles=tiles, persistent=False)
    assert sch.makespan(persistent) < sch.makespan(alone)
    assert len(_of(persistent, "epilogue")) == tiles
    store = _of(persistent, "epilogue")[0]  # tile 0's store overlaps tile 1's loads
    assert any(_overlap(store, l) and l.label.startswith("t1") for l in _of(persistent, "load"))
    assert sch.makespan(sch.simulate("persistent", tiles=1)) == sch.makespan(
        sch.simulate("persistent", tiles=1, persistent=False))


def test_makespan_and_busy():
    ev = [sch.Event("TMA (producer warp)", "load", 0.0, 1.0, "k0"), sch.Event("warpgroup 0", "mma", 1.0, 2.5, "k0"),
          sch.Event("warpgroup 0", "mma", 3.0, 4.0, "k1")]
    assert sch.makespan(ev) == 4.0 and sch.makespan([]) == 0.0
    assert sch.busy(ev, "mma") == 2.5 and sch.busy(ev, "softmax") == 0.0
    assert sch.utilisation(ev) == pytest.approx(2.5 / 4.0)
    with pytest.raises(ValueError, match="kind"):
        sch.busy(ev, "gemm")


@pytest.mark.parametrize("kwargs, word", [
    ({"name": "flash"}, "name"), ({"name": "serial", "steps": 0}, "steps"), ({"name": "serial", "steps": 2.5}, "steps"),
    ({"name": "pipelined", "stages": 0}, "stages"), ({"name": "pipelined", "stages": True}, "stages"),
    ({"name": "serial", "load": -1.0}, "load"), ({"name": "serial", "mma": 0}, "mma"),
    ({"name": "pingpong", "softmax": float("nan")}, "softmax"), ({"name": "persistent", "epilogue": math.inf}, "epilogue"),
    ({"name": "persistent", "tiles": 0}, "tiles"), ({"name": "serial", "load": "1"}, "load"),
    ({"name": "serial", "persistent": False}, "persistent"),
])
def test_bad_input_names_the_argument(kwargs, word):
    with pytest.raises(ValueError, match=word):
        sch.simulate(**kwargs)


def test_plot_schedule():
    for name in sch.SCHEDULES:
        fig = sch.plot_schedule(name)
        assert isinstance(fig, Figure) and len(fig.axes) == 1
        title = fig.axes[0].get_title()
        assert "model" in title and "busy" in title and "%" in title
        assert fig.axes[0].get_xlabel() == "time (one MMA = 1)"
        plt.close(fig)
    fig, ax = plt.subplots()
    assert sch.plot_schedule("persistent", ax=ax, persistent=False, tiles=2) is fig
    assert "non-persistent" in ax.get_title()
    plt.close(fig)


def test_plot_ladder():
    fig = sch.plot_ladder()
    assert isinstance(fig, Figure) and len(fig.axes) == len(sch.SCHEDULES)
    assert "model" in fig.get_suptitle()
    assert len({ax.get_xlim() for ax in fig.axes}) == 1  # one time axis
    plt.close(fig)
    fig = sch.plot_ladder(("serial", "pipelined"), steps=4, load=2.0)
    assert len(fig.axes) == 2
    plt.close(fig)
    with pytest.raises(ValueError, match="name"):
        sch.plot_ladder(("serial", "fast"))


DURATION = st.floats(0.1, 5.0, allow_nan=False, allow_infinity=False)


@settings(max_examples=150, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sch.SCHEDULES), steps=st.integers(1, 9), load=DURATION, mma=DURATION, softmax=DURATION,
       epilogue=DURATION, stages=st.integers(1, 5), tiles=st.integers(1, 4))
def test_any_durations_keep_the_rules(name, steps, load, mma, softmax, epilogue, stages, tiles):
    kw = dict(steps=steps, load=load, mma=mma, softmax=softmax, epilogue=epilogue, stages=stages, tiles=tiles)
    events = sch.simulate(name, **kw)
    _check_rules(name, events, 1 if name == "serial" else stages)
    assert 0 < sch.utilisation(events) <= 1 + 1e-9
    if name == "pipelined":  # each idea of the ladder never lengthens the matmul's timeline
        ws, serial = sch.simulate("warp_specialized", **kw), sch.simulate("serial", **kw)
        assert sch.makespan(serial) + 1e-9 >= sch.makespan(events) >= sch.makespan(ws) - 1e-9
    if name == "persistent" and tiles >= 2:
        assert sch.makespan(events) < sch.makespan(sch.simulate(name, **kw, persistent=False))


# ----- the recorded schedule (proton's profile of the ping-pong kernel on the H200) -----------------------------

@pytest.mark.parametrize("causal", [False, True])
def test_recorded_schedule_loads_and_draws(causal):
    events, meta = sch.recorded_events(causal)
    assert {e.lane for e in events} == {"warpgroup 0", "warpgroup 1"}
    assert {e.kind for e in events} == {"wait", "mma", "softmax"}
    for lane in ("warpgroup 0", "warpgroup 1"):  # one phase after the other in a lane
        mine = sorted((e for e in events if e.lane == lane), key=lambda e: e.start)
        assert all(a.end <= b.start + 1e-9 for a, b in zip(mine, mine[1:]))
    nums = sch.recorded_numbers(events)
    assert 0.8 < sum(nums["share"].values()) <= 1.0 + 1e-9  # the rest: between the scopes
    assert 0 < nums["tensor_cores"] <= 1 and nums["mma"] > 0 and nums["softmax"] > 0
    fig = sch.plot_recorded(causal)
    assert isinstance(fig, Figure) and meta["provenance"]["gpu"].split(" (")[0] in fig.axes[0].get_title(loc="left")


@pytest.mark.parametrize("causal", [False, True])
def test_recorded_tensor_core_runs_lie_inside_mma_phases_and_never_overlap(causal):
    events, _ = sch.recorded_events(causal)
    runs = sch.tensor_core_intervals(events)
    mmas = [e for e in events if e.kind == "mma"]
    assert len(runs) == len(mmas)
    assert all(a < b for a, b in runs)
    assert all(b1 <= a2 + 1e-9 for (_, b1), (a2, _) in zip(runs, runs[1:]))
    assert all(any(m.start - 1e-9 <= a and b <= m.end + 1e-9 for m in mmas) for a, b in runs)


@pytest.mark.parametrize("causal", [False, True])
def test_lesson_12_reading_of_the_recorded_schedule_holds(causal):
    """What lesson 12 says beside the figure: the recorded turns take longer than the model's with the same
    lengths, and its tensor cores are busy a smaller share of the time from the first MMA to the last."""
    events, _ = sch.recorded_events(causal)
    nums = sch.recorded_numbers(events)
    steps = sum(1 for e in events if e.kind == "mma" and e.lane == "warpgroup 0")
    model = sch.simulate("pingpong", steps=steps, mma=nums["mma"], softmax=nums["softmax"], load=nums["mma"], stages=2)
    span = max(e.end for e in events) - min(e.start for e in events)
    assert span > sch.makespan(model)
    assert nums["tensor_cores"] < sch.tensor_core_share(model)


def test_recorded_schedule_errors_name_the_problem(tmp_path):
    from tkcourse.bench.core import RecordsFormatError

    with pytest.raises(FileNotFoundError, match="schedule_probe"):
        sch.recorded_events(path=tmp_path / "none.json")
    with pytest.raises(ValueError, match="cta must be one of"):
        sch.recorded_events(cta="CTA99")
    bad = tmp_path / "bad.json"
    good = json.loads(Path(sch_data()).read_text())
    good["runs"][0]["ctas"]["CTA0"]["warpgroup 0"][0][0] = "nap"
    bad.write_text(json.dumps(good))
    with pytest.raises(RecordsFormatError, match="bad.json"):
        sch.recorded_events(path=bad)
    only_causal = tmp_path / "causal.json"
    good = json.loads(Path(sch_data()).read_text())
    good["runs"] = [r for r in good["runs"] if r["causal"]]
    only_causal.write_text(json.dumps(good))
    with pytest.raises(ValueError, match="non-causal"):
        sch.recorded_events(path=only_causal)


def sch_data():
    from tkcourse.bench.core import RECORDED_SCHEDULE

    return RECORDED_SCHEDULE
