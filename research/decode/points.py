"""What the decode sweeps (``stages_probe.py``, ``allheads_probe.py``) share: a shape's cache and its
providers (a copy of the same bytes, SDPA, the library) timed first; then each point checked against the
reference and timed in a CUDA graph under the table's flush (``graph_ms``) beside them; the rows written as
JSON; the best points of each shape printed last."""

import json
from pathlib import Path

import torch

from benchmarks import decode_attention as bench
from solutions.kernels import decode_attention as fast
from tkcourse.bench import graph_ms, kernel_copy

#: Every shape a sweep takes by name: the bench's and its spread ones (``B1-N32768``, ...).
LENS = dict(bench.SHAPES, **bench.SPREAD_SHAPES)


def shape(name: str, rows: list):
    """``(q, k, v, seq_lens, table)`` of shape ``name`` (page 16, pages spread), the SDPA reference in fp32 and
    the providers' times in us (``copy``, ``sdpa``, ``library``), printed and appended to ``rows``."""
    q, k, v, seq_lens, table = bench.paged_cache(LENS[name], bench.SPREAD_PAGE_SIZE)
    kc, vc = bench.contiguous_cache(k, seq_lens, table), bench.contiguous_cache(v, seq_lens, table)
    ref = bench.sdpa(q, kc, vc).float()
    dst = torch.empty_like(k)
    base = {"copy": graph_ms(lambda: kernel_copy(k, dst), rep=80) * 1e3,
            "sdpa": graph_ms(lambda: bench.sdpa(q, kc, vc), rep=80) * 1e3,
            "library": graph_ms(lambda: fast.decode_attention(q, k, v, seq_lens, table), rep=80) * 1e3}
    print(f"{name}: " + ", ".join(f"{p} {us:.1f} us ({base['copy'] / us:.3f} of a copy)" for p, us in base.items()),
          flush=True)
    rows.append(dict(kind="providers", shape=name, **{p: round(us, 2) for p, us in base.items()}))
    return (q, k, v, seq_lens, table), ref, base


def with_plan(name: str, rows: list):
    """``shape(name, rows)`` and the library's plan for that shape, printed and kept in the shape's row:
    ``(q, k, v, seq_lens, table), ref, base, plan``."""
    tensors, ref, base = shape(name, rows)
    q, k, _, _, table = tensors
    plan = fast.plan_of(q, k, table)
    print(f"{name}: the library's plan {plan}", flush=True)
    rows[-1]["plan"] = [plan.block_n, plan.splits, plan.num_warps, plan.num_stages]
    return tensors, ref, base, plan


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
