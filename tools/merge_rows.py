"""Merge a GPU run's bench rows into the recorded table: a row of the same kernel, provider, shape,
dtype and metric replaces the older one in place, a new one goes at the end, the others stay as
they are (byte for byte). ``--kernel`` and ``--shape`` choose which of the run's rows to take, so
that rows of a run that measured something since changed can be left out; every provider of a
chosen shape comes from the same run, so each ratio stays within one run.

    python3 tools/merge_rows.py tkcourse/data/h200/bench.csv OUT/bench.csv --kernel vector_add copy

``--compare`` changes nothing: it prints, for each row of the run that the table also holds, the run's
value over the table's (the median, and the CUDA-graph time where both have one), to say whether
recorded figures still hold after a change to the code behind them.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

KEY = ("kernel", "provider", "shape", "dtype", "metric")


def read(path: Path) -> tuple[list[str], list[dict]]:
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def merge(table: Path, run: Path, kernels=None, shapes=None) -> tuple[int, int]:
    """(replaced, added) rows; ``kernels``/``shapes``: take only the run's rows of these."""
    header, rows = read(table)
    run_header, new = read(run)
    if run_header != header:
        raise SystemExit(f"{run}: columns {run_header} are not the table's {header}")
    chosen = [r for r in new if (not kernels or r["kernel"] in kernels) and (not shapes or r["shape"] in shapes)]
    where = {tuple(r[k] for k in KEY): i for i, r in enumerate(rows)}
    replaced = added = 0
    for r in chosen:
        i = where.get(tuple(r[k] for k in KEY))
        if i is None:
            where[tuple(r[k] for k in KEY)] = len(rows)
            rows.append(r)
            added += 1
        else:
            rows[i] = r
            replaced += 1
    with open(table, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=header)  # "\r\n" rows, as write_records writes them
        w.writeheader()
        w.writerows(rows)
    return replaced, added


def compare(table: Path, run: Path, kernels=None, shapes=None, providers=("triton",)) -> list[tuple]:
    """``(kernel, provider, shape, dtype, metric, median run/table, graph time run/table or None)`` for each
    row of the run (of ``providers``; all when empty) that the table holds under the same key."""
    _, rows = read(table)
    _, new = read(run)
    recorded = {tuple(r[k] for k in KEY): r for r in rows}
    out = []
    for r in new:
        old = recorded.get(tuple(r[k] for k in KEY))
        if old is None or (kernels and r["kernel"] not in kernels) or (shapes and r["shape"] not in shapes) \
                or (providers and r["provider"] not in providers):
            continue
        graph = (float(r["graph_ms"]) / float(old["graph_ms"])
                 if r.get("graph_ms") and old.get("graph_ms") and float(old["graph_ms"]) > 0 else None)
        out.append((*(r[k] for k in KEY), float(r["median"]) / float(old["median"]), graph))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("table", type=Path)
    p.add_argument("run", type=Path)
    p.add_argument("--kernel", nargs="*", help="only these kernels' rows of the run")
    p.add_argument("--shape", nargs="*", help="only these shapes' rows of the run")
    p.add_argument("--compare", action="store_true", help="change nothing: each row's run/table ratio")
    a = p.parse_args(argv)
    if a.compare:
        for *key, median, graph in compare(a.table, a.run, a.kernel, a.shape):
            print(f"{' '.join(key):<60} median {median:5.3f}  graph {'-' if graph is None else f'{graph:5.3f}'}")
        return 0
    replaced, added = merge(a.table, a.run, a.kernel, a.shape)
    print(f"{a.table}: {replaced} rows replaced, {added} added from {a.run}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
