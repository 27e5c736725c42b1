"""Small reports: ``fmt_bytes`` and ``Table``, the rows every traffic summary prints and shows."""

from __future__ import annotations

import html

import numpy as np

__all__ = ["fmt_bytes", "Table"]


def fmt_bytes(n: float) -> str:
    """``1234567 -> '1.23 MB'`` (powers of 1000, as bandwidths are quoted)."""
    n = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.3g} {unit}"
        n /= 1000
    return f"{n:.3g} TB"  # pragma: no cover


class Table:
    """Rows of a small report: ``print`` it, show it in a notebook, or read ``.rows`` (a list of dicts)."""

    def __init__(self, columns: list[str], rows: list[dict], title: str = "", notes: list[str] | None = None):
        self.columns, self.rows, self.title, self.notes = list(columns), list(rows), title, list(notes or [])

    def __len__(self):
        return len(self.rows)

    def __iter__(self):
        return iter(self.rows)

    def __getitem__(self, i):
        if isinstance(i, str):  # a row by its first column ("tensor")
            for row in self.rows:
                if row[self.columns[0]] == i:
                    return row
            raise KeyError(i)
        return self.rows[i]

    @staticmethod
    def _cell(v) -> str:
        if isinstance(v, bool):
            return str(v)
        if isinstance(v, (int, np.integer)):
            return f"{int(v):,}"
        if isinstance(v, (float, np.floating)):
            return "-" if np.isnan(v) else f"{v:.3g}"
        return str(v)

    def __str__(self) -> str:
        cells = [[self._cell(r.get(c, "")) for c in self.columns] for r in self.rows]
        widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(self.columns)]
        line = lambda vals: "  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(vals, widths)))
        out = ([self.title] if self.title else []) + [line(self.columns), line(["-" * w for w in widths])]
        out += [line(row) for row in cells] + self.notes
        return "\n".join(out)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(c)}</th>" for c in self.columns)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(self._cell(r.get(c, '')))}</td>" for c in self.columns)
                       + "</tr>" for r in self.rows)
        cap = f"<caption>{html.escape(self.title)}</caption>" if self.title else ""
        notes = "".join(f"<br><small>{html.escape(n)}</small>" for n in self.notes)
        return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{notes}"

