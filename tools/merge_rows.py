"""Merge a GPU run's bench rows into the recorded table: a row of the same kernel, provider, shape,
dtype and metric replaces the older one in place, a new one goes at the end, the others stay as
they are (byte for byte). ``--kernel`` and ``--shape`` choose which of the run's rows to take, so
that rows of a run that measured something since changed can be left out; every provider of a
chosen shape comes from the same run, so each ratio stays within one run.

    python3 tools/merge_rows.py tkcourse/data/h200/bench.csv OUT/bench.csv --kernel vector_add copy
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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("table", type=Path)
    p.add_argument("run", type=Path)
    p.add_argument("--kernel", nargs="*", help="only these kernels' rows of the run")
    p.add_argument("--shape", nargs="*", help="only these shapes' rows of the run")
    a = p.parse_args(argv)
    replaced, added = merge(a.table, a.run, a.kernel, a.shape)
    print(f"{a.table}: {replaced} rows replaced, {added} added from {a.run}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
