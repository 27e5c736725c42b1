"""What the decode sweeps (``stages_probe.py``, ``allheads_probe.py``) share: one point checked against a
reference, then timed in a CUDA graph under the table's flush (``graph_ms``) beside the copy and SDPA of the
same run; the rows written as JSON; the best points of each shape printed last."""

import json
from pathlib import Path

from tkcourse.bench import graph_ms


def measure(fn, ref, point: dict, shape: str, copy_us: float, sdpa_us: float, rows: list) -> None:
    """Time ``fn`` (its output checked against ``ref`` first) and append its row to ``rows``; a point that does
    not compile or fit is printed and left out."""
    label = "/".join(str(v) for v in point.values())
    try:
        err = (fn().float() - ref).abs().max().item()
        us = graph_ms(fn, rep=40) * 1e3
    except Exception as e:  # noqa: BLE001  (a point that does not compile or fit)
        print(f"  {label}: {type(e).__name__} {str(e)[:100]}", flush=True)
        return
    row = dict(kind="point", shape=shape, **point, err=err, us=round(us, 2), of_copy=round(copy_us / us, 3),
               x_sdpa=round(sdpa_us / us, 3))
    rows.append(row)
    print(f"  {label}: err {err:.1e}  {us:.1f} us  {row['of_copy']:.3f} of a copy  {row['x_sdpa']:.3f}x sdpa", flush=True)


def finish(rows: list, out: str | None, name: str, shapes: list, keys: tuple) -> None:
    """``OUT/name.json`` when ``out`` is given; then the four fastest points of each shape."""
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / f"{name}.json").write_text(json.dumps(rows, indent=1))
    print(f"\nshape        best points ({'/'.join(keys)}: of a copy, x sdpa)")
    for shape in shapes:
        best = sorted((r for r in rows if r["kind"] == "point" and r["shape"] == shape), key=lambda r: r["us"])[:4]
        print(f"{shape:12s} " + "  ".join("/".join(str(r[k]) for k in keys) + f": {r['of_copy']:.3f}, {r['x_sdpa']:.2f}x"
                                          for r in best))
