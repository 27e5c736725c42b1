"""Seeing memory traffic: which bytes a kernel reads and writes, measured from the kernel itself.

The course's central claim is that traffic to HBM decides a kernel's speed. This module measures it:

* ``trace(kernel, grid, *args, **kwargs) -> Trace``: run one launch in Triton's interpreter with every
  ``tl.load``/``tl.store`` intercepted and record, per program, which tensor argument it touched, which
  elements (masked-off lanes excluded) and how many bytes. Out-of-bounds lanes (an address inside no
  tensor argument) are masked off *before* they reach memory and reported, so a learner's indexing bug
  gives a report, never a crash or garbage. Works in compiled mode too (on a GPU): the launch is re-run
  in the interpreter on CPU copies of the tensor arguments, so give it small sizes.
* ``capture()``: a context manager that traces every kernel launch inside it (e.g. a launcher such as
  ``solutions.vector_add.add(x, y)``, or a naive pipeline of several kernels).
* ``combine(traces)``: several launches summed as one pipeline (an intermediate tensor written by one
  kernel and read by a later one costs traffic but no minimum).
* ``count_eager()``: a torch dispatch mode that sums the bytes each aten op reads and writes, for torch
  eager code that cannot be traced (e.g. a naive ``torch`` softmax).
* ``simulate_l2(...)`` / ``program_order(...)``: an LRU cache simulated over a tiled matmul's tile loads,
  in the program order the kernel computes (row-major or grouped by ``GROUP_M``).

Only ``tkcourse.mode`` is imported from the course (first, so the mode is set before triton loads).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import html
import inspect
import os
import sys
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np
import torch

from . import mode  # noqa: F401  (decides TRITON_INTERPRET; triton itself is imported where it is used)

__all__ = [
    "TensorInfo", "Access", "OutOfBounds", "OutOfBoundsError", "Launch", "Trace", "Table", "TraceError",
    "trace", "capture", "combine", "minimum_bytes", "fmt_bytes",
    "EagerTraffic", "count_eager",
    "program_order", "L2Result", "simulate_l2", "matmul_tile_loads",
]


class TraceError(RuntimeError):
    """The launch could not be traced (not a Triton kernel, tensors too large, ...)."""


class OutOfBoundsError(IndexError):
    """A launch under ``capture(stop_on_oob=True)`` touched memory outside its tensor arguments.

    ``.trace`` is that launch's ``Trace``; ``.out_of_bounds`` its bad accesses (masked off, never run).
    """

    def __init__(self, trace: "Trace"):
        self.trace, self.out_of_bounds = trace, list(trace.out_of_bounds)
        more = f" (and {len(self.out_of_bounds) - 1} more)" if len(self.out_of_bounds) > 1 else ""
        super().__init__(f"{self.out_of_bounds[0]}{more}")


# ---------------------------------------------------------------------------------------------
# Formatting
# ---------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------
# What a trace holds
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TensorInfo:
    """A tensor argument of a traced launch (its name is the argument's, less a ``_ptr``/``_desc`` suffix)."""

    name: str
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: str
    itemsize: int
    key: tuple = field(repr=False, compare=False)  # identity across launches: (data_ptr, shape, stride, dtype)

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize

    @property
    def span(self) -> int:
        """Storage elements from the first to the last element (the tensor's footprint; ``numel`` if contiguous)."""
        if self.numel == 0:
            return 0
        return 1 + sum((s - 1) * st for s, st in zip(self.shape, self.stride))

    def linear_index(self, offsets: np.ndarray) -> np.ndarray:
        """Element offsets (from the first element, in storage) -> row-major index into ``shape`` (-1: a gap)."""
        offsets = np.asarray(offsets, dtype=np.int64)
        contiguous = all(st == int(np.prod(self.shape[i + 1:], dtype=np.int64))
                         for i, st in enumerate(self.stride) if self.shape[i] > 1)
        if contiguous:
            return np.where((offsets >= 0) & (offsets < self.numel), offsets, -1)
        pos = _storage_to_index(self.shape, self.stride)
        inside = (offsets >= 0) & (offsets < self.span)
        out = np.full(offsets.shape, -1, dtype=np.int64)
        out[inside] = pos[offsets[inside]]
        return out


@functools.lru_cache(maxsize=32)
def _storage_to_index(shape: tuple, stride: tuple) -> np.ndarray:
    """For a strided tensor: storage offset (from its first element) -> row-major index, -1 for gaps."""
    storage = np.zeros(1, dtype=np.int64)
    for s, st in zip(shape, stride):
        storage = (storage[:, None] + np.arange(s, dtype=np.int64)[None, :] * st).reshape(-1)
    pos = np.full(int(storage.max()) + 1 if storage.size else 0, -1, dtype=np.int64)
    pos[storage] = np.arange(storage.size)
    pos.setflags(write=False)
    return pos


@dataclass(frozen=True, eq=False)
class Access:
    """One ``tl.load`` or ``tl.store`` of one program, restricted to one tensor and to its active lanes."""

    kind: str  # "load" or "store" (an atomic counts as both)
    program: tuple[int, int, int]  # (pid0, pid1, pid2)
    tensor: int  # index into Trace.tensors
    offsets: np.ndarray = field(repr=False)  # element offsets from the tensor's first element, one per lane
    itemsize: int  # bytes per element of the access (the pointer's element type)
    launch: int = 0  # index into Trace.launches

    @property
    def nbytes(self) -> int:
        return int(self.offsets.size) * self.itemsize


@dataclass(frozen=True, eq=False)
class OutOfBounds:
    """Lanes of one load/store whose address lies inside no tensor argument (they were masked off, not run).

    ``tensor`` is the argument the pointer was computed from (``x_ptr + offsets``); for a raw address
    that no argument's pointer led to (an integer cast to a pointer, say), ``derived`` is False and
    ``tensor`` is only the nearest argument.
    """

    kind: str
    program: tuple[int, int, int]
    tensor: str  # the tensor argument the pointer came from, else the nearest one
    offsets: np.ndarray = field(repr=False)  # element offsets relative to that tensor's first element
    numel: int  # that tensor's element count
    kernel: str = ""
    launch: int = 0
    derived: bool = True  # the pointer was computed from ``tensor``'s pointer argument

    @property
    def offset(self) -> int:
        """The first bad element offset (``>= numel``: past the end; negative: before the start)."""
        return int(self.offsets[0])

    @property
    def where(self) -> str:
        """"past the end", "before the start", "outside" (both sides), or "in no argument" (a raw address)."""
        if not self.derived:
            return "in no argument"
        lo, hi = int(self.offsets.min()), int(self.offsets.max())
        return "past the end" if lo >= self.numel else "before the start" if hi < 0 else "outside"

    def __str__(self) -> str:
        n, lo, hi = self.offsets.size, int(self.offsets.min()), int(self.offsets.max())
        where = self.where
        rng = f"offset {lo}" if n == 1 else f"offsets {lo}..{hi}"
        pid = ", ".join(map(str, self.program))
        if not self.derived:
            near = (f"the nearest, {self.tensor}, is {rng} away from its first element" if self.tensor
                    else "the launch has no tensor argument at all")
            return (f"{self.kernel or 'kernel'}: program ({pid}) {self.kind}s {n} element{'s' * (n != 1)} at "
                    f"addresses that lie in no tensor argument ({near}). That pointer was not computed from a pointer argument: build every "
                    f"address as a pointer argument plus offsets (x_ptr + offsets), never from an integer.")
        return (f"{self.kernel or 'kernel'}: program ({pid}) {self.kind}s {n} element{'s' * (n != 1)} {where} of "
                f"{self.tensor} ({rng}; it has {self.numel} elements, valid offsets 0..{self.numel - 1}). "
                f"Mask the lanes that run past the edge, e.g. mask = offsets < n.")

    __repr__ = __str__


@dataclass(frozen=True)
class Launch:
    kernel: str
    grid: tuple[int, int, int]

    @property
    def num_programs(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]

    def program_index(self, program: tuple[int, int, int]) -> int:
        """Linear program id, x fastest (as the GPU numbers blocks): ``x + gx * (y + gy * z)``."""
        x, y, z = program
        return x + self.grid[0] * (y + self.grid[1] * z)


class Trace:
    """Every load and store of one launch (or several, see ``combine``), with per-tensor accounting.

    ``summary()`` is the table to look at; ``out_of_bounds`` the list of bad accesses (empty when the kernel
    is correct); ``read_counts(name)`` how often each element was read; ``owner_map(...)`` which program
    touched each element (the access map).
    """

    def __init__(self, name: str, tensors: list[TensorInfo], accesses: list[Access],
                 out_of_bounds: list[OutOfBounds], launches: list[Launch]):
        self.name, self.tensors, self.accesses = name, list(tensors), list(accesses)
        self.out_of_bounds, self.launches = list(out_of_bounds), list(launches)
        self._stats = None

    # -- lookups ------------------------------------------------------------------------------
    def index(self, tensor: str | int) -> int:
        if isinstance(tensor, (int, np.integer)):
            return int(tensor)
        names = [t.name for t in self.tensors]
        for cand in (tensor, tensor.removesuffix("_ptr"), tensor.removesuffix("_desc")):
            if cand in names:
                return names.index(cand)
            for i, n in enumerate(names):  # merged names such as "x/out"
                if cand in n.split("/"):
                    return i
        raise KeyError(f"no tensor {tensor!r} in this trace; tensors: {', '.join(names)}")

    def tensor(self, tensor: str | int) -> TensorInfo:
        return self.tensors[self.index(tensor)]

    @property
    def grid(self) -> tuple[int, int, int]:
        return self.launches[0].grid

    @property
    def num_programs(self) -> int:
        return sum(launch.num_programs for launch in self.launches)

    # -- per-tensor accounting ------------------------------------------------------------------
    def _compute(self):
        n = len(self.tensors)
        read = np.zeros(n, dtype=np.int64)
        written = np.zeros(n, dtype=np.int64)
        first: list[str | None] = [None] * n
        last: list[str | None] = [None] * n
        offs = {(i, k): [] for i in range(n) for k in ("load", "store")}
        for a in self.accesses:
            (read if a.kind == "load" else written)[a.tensor] += a.nbytes
            if a.offsets.size:
                first[a.tensor] = first[a.tensor] or a.kind
                last[a.tensor] = a.kind
                offs[a.tensor, a.kind].append(a.offsets)
        rows = []
        for i, t in enumerate(self.tensors):
            uniq = {k: (np.unique(np.concatenate(offs[i, k])).size if offs[i, k] else 0) for k in ("load", "store")}
            is_read, is_written = read[i] > 0, written[i] > 0
            is_input = first[i] == "load"  # read before anything writes it
            is_output = is_written and last[i] == "store"  # its final value stays in memory
            role = ("input+output" if is_input and is_output else "input" if is_input else "output" if is_output
                    else "intermediate" if is_written else "unused")
            rows.append(dict(
                tensor=t.name, shape="x".join(map(str, t.shape)) or "scalar", dtype=t.dtype, role=role,
                read=int(read[i]), written=int(written[i]),
                min_read=t.nbytes if is_input else 0, min_written=t.nbytes if is_output else 0,
                unique_read=uniq["load"] * t.itemsize, unique_written=uniq["store"] * t.itemsize,
                reread=float(read[i] / (uniq["load"] * t.itemsize)) if uniq["load"] else float("nan"),
                coverage_read=uniq["load"] / t.numel if is_read and t.numel else float("nan"),
                coverage_written=uniq["store"] / t.numel if is_written and t.numel else float("nan"),
            ))
        self._stats = rows

    def stats(self) -> list[dict]:
        """One dict per tensor: read, written, min_read, min_written, unique_read, reread, coverage, role."""
        if self._stats is None:
            self._compute()
        return self._stats

    def summary(self) -> Table:
        """The per-tensor table: bytes read and written against the minimum, and how often each element was re-read.

        The minimum reads each input once and writes each output once; a tensor written and then read
        back (an intermediate of a pipeline) has minimum 0: a fused kernel would not touch it at all.
        """
        rows = [dict(r) for r in self.stats()]
        total = dict(tensor="total", shape="", dtype="", role="", read=self.read_bytes, written=self.written_bytes,
                     min_read=sum(r["min_read"] for r in rows), min_written=sum(r["min_written"] for r in rows),
                     reread=float("nan"))
        cols = ["tensor", "shape", "dtype", "role", "read", "written", "min_read", "min_written", "reread"]
        notes = [f"moved {fmt_bytes(self.total_bytes)} = {self.total_bytes / max(self.minimum_bytes, 1):.3g} x the "
                 f"minimum {fmt_bytes(self.minimum_bytes)} (reread: bytes read / distinct bytes read)"]
        for r in rows:
            for what in ("read", "written"):
                cov = r[f"coverage_{what}"]
                if not np.isnan(cov) and cov < 1:
                    notes.append(f"{r['tensor']}: only {cov:.1%} of its elements were {what}")
        if self.out_of_bounds:
            notes.append(f"{len(self.out_of_bounds)} out-of-bounds access(es): see .out_of_bounds; first: "
                         f"{self.out_of_bounds[0]}")
        kernels = ", ".join(dict.fromkeys(launch.kernel for launch in self.launches))
        return Table(cols, rows + [total], title=f"{self.name}: bytes per tensor ({kernels})", notes=notes)

    @property
    def read_bytes(self) -> int:
        return sum(r["read"] for r in self.stats())

    @property
    def written_bytes(self) -> int:
        return sum(r["written"] for r in self.stats())

    @property
    def total_bytes(self) -> int:
        return self.read_bytes + self.written_bytes

    @property
    def minimum_bytes(self) -> int:
        return sum(r["min_read"] + r["min_written"] for r in self.stats())

    def rows(self) -> list[tuple[str, int, int]]:
        """``(label, read bytes, written bytes)`` per tensor: what ``plots.traffic.bytes_bar`` stacks."""
        return [(r["tensor"], r["read"], r["written"]) for r in self.stats()]

    def minimum_rows(self) -> list[tuple[str, int, int]]:
        return [(r["tensor"], r["min_read"], r["min_written"]) for r in self.stats()]

    # -- per element ------------------------------------------------------------------------------
    def _select(self, tensor, kind, launch):
        i = self.index(tensor)
        kinds = {"load", "store"} if kind in (None, "both", "any") else {kind}
        return i, [a for a in self.accesses if a.tensor == i and a.kind in kinds
                   and (launch is None or a.launch == launch)]

    def read_counts(self, tensor: str | int, kind: str = "load") -> np.ndarray:
        """How many times each element of ``tensor`` was loaded (``kind="store"``: stored), in its shape."""
        i, acc = self._select(tensor, kind, None)
        t = self.tensors[i]
        counts = np.zeros(t.numel, dtype=np.int64)
        for a in acc:
            idx = t.linear_index(a.offsets)
            np.add.at(counts, idx[idx >= 0], 1)
        return counts.reshape(t.shape)

    def owner_map(self, tensor: str | int, kind: str = "load", launch: int = 0, how: str = "first") -> np.ndarray:
        """Which program touched each element (linear program id, x fastest; -1: untouched), in the tensor's shape.

        ``how="first"``: the first program (in launch order) to touch it; ``"last"``: the last one.
        """
        i, acc = self._select(tensor, kind, launch)
        t = self.tensors[i]
        owner = np.full(t.numel, -1, dtype=np.int64)
        lz = self.launches[launch]
        for a in (acc if how == "last" else reversed(acc)):
            idx = t.linear_index(a.offsets)
            owner[idx[idx >= 0]] = lz.program_index(a.program)
        return owner.reshape(t.shape)

    def program_elements(self, program: int | tuple, tensor: str | int, kind: str = "load",
                         launch: int = 0) -> np.ndarray:
        """Row-major indices of the elements of ``tensor`` one program touched (sorted, distinct)."""
        i, acc = self._select(tensor, kind, launch)
        lz = self.launches[launch]
        pid = program if isinstance(program, (int, np.integer)) else lz.program_index(tuple(program))
        t = self.tensors[i]
        parts = [t.linear_index(a.offsets) for a in acc if lz.program_index(a.program) == pid]
        idx = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        return np.unique(idx[idx >= 0])

    def per_program(self, launch: int = 0) -> Table:
        """Bytes read and written by each program of one launch."""
        lz = self.launches[launch]
        acc = np.zeros((lz.num_programs, 2), dtype=np.int64)
        for a in self.accesses:
            if a.launch == launch:
                acc[lz.program_index(a.program), a.kind == "store"] += a.nbytes
        rows = [dict(program=p, read=int(r), written=int(w)) for p, (r, w) in enumerate(acc)]
        return Table(["program", "read", "written"], rows, title=f"{lz.kernel}: bytes per program")

    def check(self) -> "Trace":
        """Raise ``IndexError`` listing the out-of-bounds accesses, if any; else return the trace."""
        if self.out_of_bounds:
            more = f" (and {len(self.out_of_bounds) - 5} more)" if len(self.out_of_bounds) > 5 else ""
            raise IndexError("out-of-bounds accesses:\n  " + "\n  ".join(map(str, self.out_of_bounds[:5])) + more)
        return self

    def __repr__(self) -> str:
        oob = f", {len(self.out_of_bounds)} OUT-OF-BOUNDS" if self.out_of_bounds else ""
        return (f"<Trace {self.name}: {self.num_programs} programs, read {fmt_bytes(self.read_bytes)}, wrote "
                f"{fmt_bytes(self.written_bytes)}, minimum {fmt_bytes(self.minimum_bytes)}{oob}>")

    def __str__(self) -> str:
        return str(self.summary())

    def _repr_html_(self) -> str:
        return self.summary()._repr_html_()


def combine(traces: list[Trace], name: str | None = None) -> Trace:
    """Several launches as one pipeline (e.g. a naive softmax in three kernels), tensors matched by identity.

    A tensor written by one kernel and read back by a later one is an intermediate: it costs traffic but its
    minimum is 0 (a fused kernel keeps it on chip).
    """
    traces = list(traces)
    if not traces:
        raise ValueError("combine() needs at least one trace")
    tensors: list[TensorInfo] = []
    keys: dict[tuple, int] = {}
    accesses, oob, launches = [], [], []
    for tr in traces:
        remap = {}
        for i, t in enumerate(tr.tensors):
            if t.key not in keys:
                keys[t.key] = len(tensors)
                tensors.append(t)
            remap[i] = keys[t.key]
        base = len(launches)
        launches.extend(tr.launches)
        accesses.extend(dataclasses.replace(a, tensor=remap[a.tensor], launch=a.launch + base) for a in tr.accesses)
        oob.extend(dataclasses.replace(o, launch=o.launch + base) for o in tr.out_of_bounds)
    return Trace(name or " + ".join(tr.name for tr in traces), tensors, accesses, oob, launches)


def minimum_bytes(inputs=(), outputs=()) -> int:
    """The analytic minimum: every input read once, every output written once (tensors or byte counts)."""
    size = lambda t: int(t) if isinstance(t, (int, np.integer)) else t.numel() * t.element_size()
    return sum(map(size, inputs)) + sum(map(size, outputs))


# ---------------------------------------------------------------------------------------------
# The tracer: hooks on the interpreter's builder
# ---------------------------------------------------------------------------------------------


def _interp():
    import triton.runtime.interpreter as interp

    mode.patch_interpreter()  # triton < 3.7 on NumPy >= 2.4: the tracer runs the interpreter on a GPU too
    return interp


def _elem_bytes(ptr_handle) -> int:
    ty = ptr_handle.dtype
    while hasattr(ty, "element_ty"):
        ty = ty.element_ty
    return max(1, getattr(ty, "primitive_bitwidth", 8) // 8)


class _Recorder:
    """Maps addresses to tensor arguments and records accesses; masks off lanes that fall in no tensor."""

    def __init__(self, tensors: list[TensorInfo], bases: list[int], kernel: str):
        self.tensors, self.kernel = tensors, kernel
        self.starts = np.array(bases, dtype=np.uint64)
        self.ends = np.array([b + t.span * t.itemsize for b, t in zip(bases, tensors)], dtype=np.uint64)
        # smallest footprint first: a view inside another argument's storage is attributed to the view
        self.order = sorted(range(len(tensors)), key=lambda i: (tensors[i].span * tensors[i].itemsize, i))
        self.accesses: list[Access] = []
        self.oob: list[OutOfBounds] = []
        self.builder = _interp().interpreter_builder

    def classify(self, addrs: np.ndarray) -> np.ndarray:
        owner = np.full(addrs.shape, -1, dtype=np.int64)
        for i in self.order:
            hit = (owner < 0) & (addrs >= self.starts[i]) & (addrs < self.ends[i])
            owner[hit] = i
        return owner

    def record(self, kind: str, ptrs, mask) -> np.ndarray:
        """Record one access; return the mask with out-of-bounds lanes switched off."""
        addrs = np.asarray(ptrs.data).astype(np.uint64, copy=False)
        active = np.ones(addrs.shape, dtype=bool) if mask is None else np.broadcast_to(
            np.asarray(mask.data).astype(bool), addrs.shape)
        program = tuple(int(v) for v in self.builder.grid_idx)
        flat_addrs, flat_active = addrs.reshape(-1), active.reshape(-1)
        owner = self.classify(flat_addrs)
        item = _elem_bytes(ptrs)
        kinds = ("load", "store") if kind == "atomic" else (kind,)
        for i in np.unique(owner[flat_active & (owner >= 0)]):
            sel = flat_active & (owner == i)
            offs = ((flat_addrs[sel] - self.starts[i]) // np.uint64(self.tensors[i].itemsize)).astype(np.int64)
            for k in kinds:
                self.accesses.append(Access(k, program, int(i), offs, item))
        bad = flat_active & (owner < 0)
        if bad.any():
            self._report(kind, program, flat_addrs[bad], getattr(ptrs, _TAG, None))
            return (active & (owner >= 0).reshape(active.shape))
        return active

    def owner_of(self, ptrs):
        """The tensor a pointer block was computed from: its tag, else the tensor most of its lanes are in."""
        tag = getattr(ptrs, _TAG, None)
        if tag is not None:
            return tag
        owner = self.classify(np.asarray(ptrs.data).astype(np.uint64, copy=False).reshape(-1))
        owner = owner[owner >= 0]
        return int(np.bincount(owner).argmax()) if owner.size else None

    def _report(self, kind, program, addrs, origin=None):
        kind = "load" if kind == "load" else "store" if kind == "store" else "atomic"
        if not self.tensors:  # a kernel with no tensor argument at all: every address is a raw one
            self.oob.append(OutOfBounds(kind, program, "", addrs.astype(np.int64), 0, self.kernel, derived=False))
            return
        derived = origin is not None
        if origin is not None:  # the pointer was computed from this tensor's base: report against it
            nearest = np.full(addrs.shape, origin, dtype=np.int64)
        else:
            a = addrs.astype(np.float64)[:, None]
            s, e = self.starts.astype(np.float64)[None, :], self.ends.astype(np.float64)[None, :]
            dist = np.where(a < s, s - a, np.where(a >= e, a - e + 1, 0))
            nearest = dist.argmin(axis=1)
        for i in np.unique(nearest):
            t = self.tensors[i]
            sel = addrs[nearest == i]
            offs = (sel.astype(np.int64) - np.int64(self.starts[i])) // t.itemsize
            self.oob.append(OutOfBounds(kind, program, t.name, offs, t.numel, self.kernel, derived=derived))


_state = threading.local()
_TAG = "_tkcourse_origin"  # attribute on a pointer TensorHandle: index of the tensor it was computed from

#: Builder methods that pass a pointer block through unchanged in meaning (its origin tag follows it).
_PASS_TAG = ("create_splat", "create_broadcast", "create_expand_dims", "create_reshape", "create_trans",
             "create_permute", "create_select", "create_join", "create_cat")


@contextlib.contextmanager
def _hooked(recorder: _Recorder):
    """Wrap the interpreter builder's masked load/store (and atomics) for the duration of one launch.

    Hook points (same first arguments in triton 3.6 and 3.9): ``create_masked_load(ptrs, mask, other, ...)``,
    ``create_masked_store(ptrs, value, mask, ...)``; ``create_load``/``create_store``, tensor-descriptor
    loads/stores and atomic loads/stores all go through these two. ``create_addptr`` (and the ops that
    reshape a pointer block) tag each pointer block with the tensor it was computed from, so an access far
    outside every tensor is still reported against the tensor it was meant for.
    """
    b = _interp().interpreter_builder
    TH = _interp().TensorHandle
    names = ("create_masked_load", "create_masked_store", "create_atomic_rmw", "create_atomic_cas",
             "create_addptr") + _PASS_TAG
    saved = {n: b.__dict__[n] for n in names if n in b.__dict__}
    orig = {n: getattr(b, n) for n in names if hasattr(b, n)}

    import triton.language as tl

    as_mask = lambda m: TH(np.ascontiguousarray(m), tl.int1)

    def masked_load(ptrs, mask, other, *args, **kwargs):
        m = recorder.record("load", ptrs, mask)
        return orig["create_masked_load"](ptrs, as_mask(m), other, *args, **kwargs)

    def masked_store(ptrs, value, mask, *args, **kwargs):
        m = recorder.record("store", ptrs, mask)
        return orig["create_masked_store"](ptrs, value, as_mask(m), *args, **kwargs)

    def atomic_rmw(op, ptr, val, mask, *args, **kwargs):
        m = recorder.record("atomic", ptr, mask)
        return orig["create_atomic_rmw"](op, ptr, val, as_mask(m), *args, **kwargs)

    scratch = np.zeros(8, dtype=np.uint64)  # out-of-bounds CAS lanes are pointed here instead

    def atomic_cas(ptr, cmp, val, *args, **kwargs):
        m = recorder.record("atomic", ptr, None)
        if not m.all():
            data = np.where(m, np.asarray(ptr.data), np.uint64(scratch.ctypes.data)).astype(np.uint64)
            ptr = TH(data, ptr.dtype)
        return orig["create_atomic_cas"](ptr, cmp, val, *args, **kwargs)

    def addptr(ptr, offset, *args, **kwargs):
        out = orig["create_addptr"](ptr, offset, *args, **kwargs)
        tag = recorder.owner_of(ptr)
        if tag is not None:
            setattr(out, _TAG, tag)
        return out

    def passing(name):
        def wrapped(*args, **kwargs):
            out = orig[name](*args, **kwargs)
            tag = next((getattr(a, _TAG) for a in args if hasattr(a, _TAG)), None)
            if tag is not None and out is not None and not isinstance(out, tuple):
                with contextlib.suppress(AttributeError):
                    setattr(out, _TAG, tag)
            return out
        return wrapped

    hooks = dict(create_masked_load=masked_load, create_masked_store=masked_store, create_atomic_rmw=atomic_rmw,
                 create_atomic_cas=atomic_cas, create_addptr=addptr, **{n: passing(n) for n in _PASS_TAG})
    for n in orig:
        setattr(b, n, hooks[n])
    try:
        yield
    finally:
        for n in orig:
            if n in saved:
                setattr(b, n, saved[n])
            else:
                with contextlib.suppress(AttributeError):
                    delattr(b, n)


_MISSING = object()


def _language_namespaces() -> list:
    """triton.language's modules and the classes they define: what the interpreter patches."""
    out = []
    for name, m in list(sys.modules.items()):
        if name.startswith("triton.language") and m is not None:
            out.append(m)
            out.extend(v for v in vars(m).values()
                       if isinstance(v, type) and getattr(v, "__module__", "").startswith("triton.language"))
    return out


@contextlib.contextmanager
def _language_restored():
    """Put triton.language back as it was after an interpreted launch.

    The interpreter patches triton.language for a launch and restores it, except for what a
    nested @jit call patches (InterpretedFunction.__call__ never restores, in triton 3.6 and 3.9).
    Harmless when everything runs in the interpreter; on a GPU it leaves the compiler a patched
    triton.language, and the next real compile fails. So trace() snapshots and restores it all.
    """
    if mode.INTERPRET:  # everything runs in the interpreter anyway: nothing to protect
        yield
        return
    saved = [(obj, dict(vars(obj))) for obj in dict.fromkeys(_language_namespaces())]
    try:
        yield
    finally:
        for obj, before in saved:  # names the interpreter added (interpreter_semantic, ...) stay: its cache needs them
            now = vars(obj)
            for k, v in before.items():
                if now.get(k, _MISSING) is not v:
                    with contextlib.suppress(AttributeError, TypeError):
                        setattr(obj, k, v)


@contextlib.contextmanager
def _interpreter_globals(fn):
    """In compiled mode, let the kernel's @triton.jit helpers run in the interpreter (restored afterwards)."""
    from triton.runtime.jit import JITFunction

    interp = _interp()
    patched: list[tuple[dict, str, object]] = []
    seen = set()

    def visit(f):
        g = getattr(f, "__globals__", None)
        if g is None or id(f) in seen:
            return
        seen.add(id(f))
        for k, v in list(g.items()):
            if isinstance(v, JITFunction):
                patched.append((g, k, v))
                g[k] = interp.InterpretedFunction(v.fn)
                visit(v.fn)
            elif inspect.ismodule(v) and v.__name__.startswith("triton.language") and id(v) not in seen:
                # tl.max, tl.sum, tl.cdiv, ...: triton's own @jit functions, reached as module attributes
                seen.add(id(v))
                d = vars(v)
                for name, w in list(d.items()):
                    if isinstance(w, JITFunction):
                        patched.append((d, name, w))
                        d[name] = interp.InterpretedFunction(w.fn)
                        visit(w.fn)

    old_env = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        with _language_restored():
            visit(fn)
            yield
    finally:
        for g, k, v in reversed(patched):
            g[k] = v
        if old_env is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = old_env


def _unwrap_kernel(kernel, kwargs: dict):
    """A Python function from a @triton.jit kernel (interpreted or compiled), autotuned or heuristic-wrapped."""
    from triton.runtime.autotuner import Autotuner, Heuristics

    k, layers = kernel, []
    while not inspect.isfunction(k):
        if isinstance(k, (Autotuner, Heuristics)):
            layers.append(k)
        if not hasattr(k, "fn"):
            raise TraceError(f"trace() needs a @triton.jit kernel, got {type(kernel).__name__}")
        k = k.fn
    return k, layers


def _apply_layers(layers, fn, args, kwargs):
    """Fill meta-parameters an Autotuner (first config, or the one it already picked) or Heuristics would set."""
    from triton.runtime.autotuner import Autotuner

    names = list(inspect.signature(fn).parameters)
    kwargs = dict(kwargs)
    for layer in layers:
        if isinstance(layer, Autotuner):
            cfg = getattr(layer, "best_config", None) or layer.configs[0]
            for k, v in cfg.kwargs.items():
                kwargs.setdefault(k, v)
        else:  # Heuristics
            bound = dict(zip(names, args)) | kwargs
            for k, h in layer.values.items():
                if k not in kwargs:
                    kwargs[k] = h(bound)
    return kwargs


_ALIGN = 128


def _stage(args, kwargs):
    """Copy the tensor arguments into one CPU buffer, each storage in place, with empty guard gaps between them.

    Storage layouts are kept (offsets, strides, views sharing a storage share the copy), so the kernel indexes
    the copies exactly as the originals. The gaps (as large as the largest storage) make a small overrun of
    one tensor land in no tensor, where it is reported, rather than in its neighbour. Returns the staged
    arguments and ``(original storage as bytes, staged bytes)`` pairs for copying results back.
    """
    from triton.runtime.jit import TensorWrapper
    from triton.tools.tensor_descriptor import TensorDescriptor

    found: dict[tuple, torch.UntypedStorage] = {}

    def scan(a):
        if isinstance(a, (TensorWrapper, TensorDescriptor)):
            return scan(a.base)
        if isinstance(a, tuple) and not hasattr(a, "data_ptr"):
            return [scan(x) for x in a]
        if isinstance(a, torch.Tensor):
            st = a.untyped_storage()
            found.setdefault((a.device.type, a.device.index, st.data_ptr()), st)

    for a in list(args) + list(kwargs.values()):
        scan(a)
    up = lambda n: -(-n // _ALIGN) * _ALIGN
    gap = up(max([st.nbytes() for st in found.values()] + [0])) + 4096
    offsets, pos = {}, gap
    for key, st in found.items():
        offsets[key] = pos
        pos += up(st.nbytes()) + gap
    buf = torch.zeros(pos + _ALIGN, dtype=torch.uint8)
    shift = (-buf.data_ptr()) % _ALIGN  # start the layout on an aligned address (tensor descriptors need 16 B)
    pairs = []
    for key, st in found.items():
        orig = torch.empty(0, dtype=torch.uint8, device=st.device).set_(st)
        dst = buf[shift + offsets[key]: shift + offsets[key] + st.nbytes()]
        dst.copy_(orig.cpu())
        pairs.append((orig, dst))

    def cvt(a):
        if isinstance(a, TensorWrapper):
            return TensorWrapper(cvt(a.base), a.dtype)
        if isinstance(a, TensorDescriptor):
            return dataclasses.replace(a, base=cvt(a.base))
        if isinstance(a, tuple) and not hasattr(a, "data_ptr"):
            return type(a)(*map(cvt, a)) if hasattr(a, "_fields") else tuple(map(cvt, a))
        if isinstance(a, torch.Tensor):
            st = a.untyped_storage()
            start = shift + offsets[(a.device.type, a.device.index, st.data_ptr())]
            out = torch.empty(0, dtype=a.dtype)
            out.set_(buf.untyped_storage(), start // a.element_size() + a.storage_offset(), a.size(), a.stride())
            return out
        return a

    return [cvt(a) for a in args], {k: cvt(v) for k, v in kwargs.items()}, pairs


def _collect_tensors(fn, dev_args, dev_kwargs, cpu_args, cpu_kwargs):
    """(TensorInfo, CPU base address) per distinct tensor argument, named after the kernel's arguments."""
    from triton.runtime.jit import TensorWrapper
    from triton.tools.tensor_descriptor import TensorDescriptor

    sig = inspect.signature(fn)
    try:
        dev = sig.bind_partial(*dev_args, **dev_kwargs).arguments
        cpu = sig.bind_partial(*cpu_args, **cpu_kwargs).arguments
    except TypeError as e:
        raise TraceError(f"arguments do not match the kernel {fn.__name__}{sig}: {e}") from None
    found: dict[tuple, list] = {}

    def add(name, d, c):
        if isinstance(d, TensorWrapper):
            return add(name, d.base, c.base)
        if isinstance(d, TensorDescriptor):
            return add(name, d.base, c.base)
        if isinstance(d, tuple) and not hasattr(d, "data_ptr"):
            for j, (dd, cc) in enumerate(zip(d, c)):
                add(f"{name}[{j}]", dd, cc)
            return
        if not isinstance(d, torch.Tensor) or d.numel() == 0:
            return
        key = (d.data_ptr(), tuple(d.shape), tuple(d.stride()), str(d.dtype))
        short = name.removesuffix("_ptr").removesuffix("_desc") or name
        if key in found:
            if short not in found[key][0].split("/"):
                found[key][0] += "/" + short
            return
        found[key] = [short, d, c]

    for name, d in dev.items():
        add(name, d, cpu[name])
    tensors, bases = [], []
    for key, (name, d, c) in found.items():
        tensors.append(TensorInfo(name, tuple(d.shape), tuple(d.stride()), str(d.dtype).removeprefix("torch."),
                                  d.element_size(), key))
        bases.append(c.data_ptr())
    return tensors, bases


def _nbytes_args(args) -> int:
    total, seen = 0, set()
    for a in args:
        base = getattr(a, "base", a)
        if isinstance(base, torch.Tensor):
            st = base.untyped_storage()
            if st.data_ptr() not in seen:
                seen.add(st.data_ptr())
                total += st.nbytes()
        elif isinstance(a, tuple):
            total += _nbytes_args(a)
    return total


def trace(kernel, grid, *args, name: str | None = None, max_bytes: int = 1 << 28, writeback: bool = True,
          **kwargs) -> Trace:
    """Run ``kernel[grid](*args, **kwargs)`` in Triton's interpreter and record every load and store.

    ``kernel``: a ``@triton.jit`` function (interpreted or compiled; autotuned kernels use the best config
    found so far, else their first; pass meta-parameters to choose). ``grid``: a tuple or a callable of
    the meta-parameters, as for a launch. On a GPU the tensors are copied to the CPU and the launch re-runs
    there (results stay on the copies): keep sizes small (``max_bytes`` of arguments, 256 MB by default).
    The launch runs on staged copies of the arguments, spaced apart so that an overrun lands in no tensor;
    out-of-bounds lanes are masked off (never run) and listed in ``Trace.out_of_bounds``. With ``writeback``
    the results are copied back into CPU arguments, so on the CPU the trace is also the launch.
    """
    fn, layers = _unwrap_kernel(kernel, kwargs)
    kwargs = _apply_layers(layers, fn, args, kwargs)
    params = inspect.signature(fn).parameters
    kwargs = {k: v for k, v in kwargs.items() if k in params}  # launch options (num_warps, ...) do not matter here
    size = _nbytes_args(list(args) + list(kwargs.values()))
    if size > max_bytes:
        raise TraceError(f"the tensor arguments hold {fmt_bytes(size)}; tracing runs the interpreter, one program "
                         f"at a time, so use small sizes (or raise max_bytes={max_bytes})")
    cpu_args, cpu_kwargs, staged = _stage(args, kwargs)
    tensors, bases = _collect_tensors(fn, args, kwargs, cpu_args, cpu_kwargs)
    recorder = _Recorder(tensors, bases, fn.__name__)
    interp = _interp()
    holder = {}
    ifn = interp.InterpretedFunction(fn)
    depth = getattr(_state, "depth", 0)
    _state.depth = depth + 1
    try:
        with _interpreter_globals(fn), _hooked(recorder):
            orig_set = interp.interpreter_builder.set_grid_dim

            def set_grid_dim(nx, ny, nz):
                holder["grid"] = (int(nx), int(ny), int(nz))
                return orig_set(nx, ny, nz)

            interp.interpreter_builder.set_grid_dim = set_grid_dim
            try:
                ifn[grid](*cpu_args, **cpu_kwargs)
            finally:
                del interp.interpreter_builder.set_grid_dim
    finally:
        _state.depth = depth
    if writeback:  # the launch's results, into CPU tensors only (a GPU run keeps its own)
        if any(a.kind == "store" for a in recorder.accesses):
            for orig, copy in staged:
                if orig.device.type == "cpu":
                    orig.copy_(copy)
    launch = Launch(fn.__name__, holder.get("grid", (1, 1, 1)))
    return Trace(name or fn.__name__, tensors, recorder.accesses, recorder.oob, [launch])


@contextlib.contextmanager
def capture(name: str | None = None, stop_on_oob: bool = False):
    """Trace every kernel launch inside the block: ``with capture() as traces: add(x, y)``.

    Yields a list that fills with one ``Trace`` per launch; ``combine(traces)`` sums them. In the interpreter
    each launch runs once, traced; on a GPU each launch runs normally and is also traced on CPU copies of its
    arguments (so use small sizes). An autotuner's benchmarking launches are not traced, only the launch.
    ``stop_on_oob``: a launch whose trace has an out-of-bounds access raises ``OutOfBoundsError`` (on a GPU,
    before it runs there: an illegal address would end the CUDA context), so the graders can report it.
    """
    from triton.runtime.jit import JITFunction

    interp = _interp()
    traces: list[Trace] = []
    orig_jit, orig_interp = JITFunction.run, interp.InterpretedFunction.run

    def jit_run(self, *args, grid, warmup, **kwargs):
        if warmup or getattr(_state, "depth", 0):
            return orig_jit(self, *args, grid=grid, warmup=warmup, **kwargs)
        traces.append(trace(self, grid, *args, **kwargs))
        if stop_on_oob and traces[-1].out_of_bounds:
            raise OutOfBoundsError(traces[-1])
        return orig_jit(self, *args, grid=grid, warmup=warmup, **kwargs)

    def interp_run(self, *args, grid, warmup, **kwargs):
        if warmup or getattr(_state, "depth", 0):
            return orig_interp(self, *args, grid=grid, warmup=warmup, **kwargs)
        traces.append(trace(self, grid, *args, **kwargs))  # the traced run is the launch
        if stop_on_oob and traces[-1].out_of_bounds:
            raise OutOfBoundsError(traces[-1])

    from triton.runtime.autotuner import Autotuner

    orig_bench = Autotuner._bench

    def quiet_bench(self, *args, **kwargs):  # the autotuner's benchmark launches are not the launch
        _state.depth = getattr(_state, "depth", 0) + 1
        try:
            return orig_bench(self, *args, **kwargs)
        finally:
            _state.depth -= 1

    JITFunction.run, interp.InterpretedFunction.run, Autotuner._bench = jit_run, interp_run, quiet_bench
    try:
        yield traces
    finally:
        JITFunction.run, interp.InterpretedFunction.run, Autotuner._bench = orig_jit, orig_interp, orig_bench
        if name:
            for t in traces:
                t.name = f"{name}: {t.name}"


# ---------------------------------------------------------------------------------------------
# Torch eager code: bytes per aten op
# ---------------------------------------------------------------------------------------------

_FREE_OPS = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "detach", "alias",
             "lift_fresh", "_to_copy_noop", "clone_noop", "set_", "resize_", "_local_scalar_dense",
             "_unsafe_view"}  # a view that torch.matmul emits on 4-D inputs: no bytes move


_WRITE_ONLY = {"copy_", "fill_", "zero_", "normal_", "uniform_", "random_", "bernoulli_", "exponential_"}


def _distinct_bytes(t: torch.Tensor) -> int:
    """Bytes of the distinct elements a tensor refers to (a broadcast view of a row counts the row once)."""
    n = 1
    for s, st in zip(t.shape, t.stride()):
        if st != 0:
            n *= s
    return (n if t.numel() else 0) * t.element_size()


class EagerTraffic:
    """Bytes each torch operator read and wrote inside ``count_eager()`` (views and allocations move nothing)."""

    def __init__(self, name: str = "torch eager"):
        self.name = name
        self.ops: list[dict] = []  # op, read, written
        self._produced: dict[int, int] = {}  # data_ptr -> index of the op that wrote it
        self._read_after: dict[int, int] = {}  # data_ptr -> last op index that read it
        self._inputs: dict[int, int] = {}  # data_ptr -> bytes, tensors read before anything wrote them
        self._outputs: dict[int, int] = {}  # data_ptr -> bytes

    @property
    def read_bytes(self) -> int:
        return sum(o["read"] for o in self.ops)

    @property
    def written_bytes(self) -> int:
        return sum(o["written"] for o in self.ops)

    @property
    def total_bytes(self) -> int:
        return self.read_bytes + self.written_bytes

    @property
    def minimum_bytes(self) -> int:
        """Inputs read once plus final outputs (written and never read afterwards) written once."""
        outs = sum(b for p, b in self._outputs.items() if self._read_after.get(p, -1) <= self._produced[p])
        return sum(self._inputs.values()) + outs

    def rows(self) -> list[tuple[str, int, int]]:
        """``(op, read, written)`` per op, numbered in call order."""
        return [(f"{i + 1}. {o['op']}", o["read"], o["written"]) for i, o in enumerate(self.ops)]

    def minimum_rows(self) -> list[tuple[str, int, int]]:
        outs = sum(b for p, b in self._outputs.items() if self._read_after.get(p, -1) <= self._produced[p])
        return [("inputs/outputs", sum(self._inputs.values()), outs)]

    def summary(self) -> Table:
        rows = [dict(op=label, read=r, written=w) for label, r, w in self.rows()]
        rows.append(dict(op="total", read=self.read_bytes, written=self.written_bytes))
        note = (f"moved {fmt_bytes(self.total_bytes)} = {self.total_bytes / max(self.minimum_bytes, 1):.3g} x the "
                f"minimum {fmt_bytes(self.minimum_bytes)}")
        return Table(["op", "read", "written"], rows, title=f"{self.name}: bytes per op", notes=[note])

    def __str__(self):
        return str(self.summary())

    def __repr__(self):
        return (f"<EagerTraffic {self.name}: {len(self.ops)} ops, read {fmt_bytes(self.read_bytes)}, wrote "
                f"{fmt_bytes(self.written_bytes)}>")

    def _repr_html_(self):
        return self.summary()._repr_html_()

    def _record(self, func, args, kwargs, out):
        name = func.overloadpacket.__name__
        if name in _FREE_OPS:
            return
        schema = func._schema
        idx = len(self.ops)
        views = all(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns) and schema.returns
        if views:  # view ops (view, transpose, expand, select, ...) move no bytes
            return
        read = 0
        flat_in = [a for a in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
        written_ptrs = set()
        for a in schema.arguments:
            if a.alias_info is not None and a.alias_info.is_write:
                v = kwargs.get(a.name) if a.name in kwargs else None
                if v is None:
                    pos = [x.name for x in schema.arguments].index(a.name)
                    v = args[pos] if pos < len(args) else None
                if isinstance(v, torch.Tensor):
                    written_ptrs.add(v.data_ptr())
        is_out_variant = {"out"} & {a.name for a in schema.arguments if a.kwarg_only}
        for t in flat_in:
            p = t.data_ptr()
            if p in written_ptrs and (is_out_variant and kwargs.get("out") is t or name in _WRITE_ONLY):
                continue  # an out= destination or a copy_ target is written, not read
            read += _distinct_bytes(t)
            if p not in self._produced and p not in self._inputs:
                self._inputs[p] = _distinct_bytes(t)
            self._read_after[p] = idx
        written = 0
        outs = [o for o in torch.utils._pytree.tree_leaves(out) if isinstance(o, torch.Tensor)]
        for o in outs:
            written += _distinct_bytes(o)
            self._produced[o.data_ptr()] = idx
            self._outputs[o.data_ptr()] = _distinct_bytes(o)
        self.ops.append(dict(op=name, read=read, written=written))


@contextlib.contextmanager
def count_eager(name: str = "torch eager"):
    """Count the bytes torch eager ops read and write: ``with count_eager() as c: y = naive(x)``; then ``c.summary()``.

    Each op reads its tensor inputs and writes its outputs (a broadcast input counts its distinct elements
    once); views and empty allocations are free. This is what eager PyTorch moves through memory when no
    op's data stays in cache: on a GPU, with tensors much larger than L2, a close estimate.
    """
    from torch.utils._python_dispatch import TorchDispatchMode

    counter = EagerTraffic(name)

    class _Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            counter._record(func, args, kwargs, out)
            return out

    with _Mode():
        yield counter


# ---------------------------------------------------------------------------------------------
# L2 reuse in a tiled matmul: program order and an LRU cache
# ---------------------------------------------------------------------------------------------


def program_order(M_tiles: int, N_tiles: int, GROUP_M: int = 1) -> list[tuple[int, int]]:
    """``(pid_m, pid_n)`` of each program id, computed as the matmul kernel does (Triton tutorial 03).

    ``GROUP_M = 1`` is row-major order; larger groups walk ``GROUP_M`` rows of C tiles column by column,
    so programs launched together share A row-tiles and B column-tiles.
    """
    if M_tiles < 1 or N_tiles < 1 or GROUP_M < 1:
        raise ValueError("M_tiles, N_tiles and GROUP_M must be >= 1")
    order = []
    num_pid_in_group = GROUP_M * N_tiles
    for pid in range(M_tiles * N_tiles):
        group_id = pid // num_pid_in_group
        first_pid_m = group_id * GROUP_M
        group_size_m = min(M_tiles - first_pid_m, GROUP_M)
        pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
        pid_n = (pid % num_pid_in_group) // group_size_m
        order.append((pid_m, pid_n))
    return order


def matmul_tile_loads(M: int, N: int, K: int, BLOCK_M: int, BLOCK_N: int, BLOCK_K: int, GROUP_M: int = 1,
                      itemsize: int = 2, concurrent: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """The tile loads of a tiled matmul in launch order, as ``(keys, nbytes)`` arrays.

    Each program loads, per K step, its A row-tile ``(pid_m, k)`` then its B column-tile ``(k, pid_n)``.
    ``concurrent`` programs run together (a wave, e.g. one per SM) and step through K in lockstep, so their
    loads interleave. Keys: A tile ``(m, k)`` is ``m * K_tiles + k``; B tile ``(k, n)`` is
    ``M_tiles * K_tiles + k * N_tiles + n``. Partial tiles at the edges have fewer bytes.
    """
    cdiv = lambda a, b: -(-a // b)
    mt, nt, kt = cdiv(M, BLOCK_M), cdiv(N, BLOCK_N), cdiv(K, BLOCK_K)
    ext = lambda i, B, L: np.minimum(B, L - i * B)
    order = np.array(program_order(mt, nt, GROUP_M), dtype=np.int64)
    c = max(1, int(concurrent))
    waves = -(-len(order) // c)
    pad = np.full((waves * c - len(order), 2), -1, dtype=np.int64)  # the last wave may be partial
    order = np.concatenate([order, pad]).reshape(waves, 1, c, 2)
    pm, pn, ks = order[..., 0], order[..., 1], np.arange(kt, dtype=np.int64)[None, :, None]
    valid = np.broadcast_to(pm >= 0, (waves, kt, c))
    a_key, b_key = pm * kt + ks, mt * kt + ks * nt + pn
    a_size = ext(pm, BLOCK_M, M) * ext(ks, BLOCK_K, K) * itemsize
    b_size = ext(ks, BLOCK_K, K) * ext(pn, BLOCK_N, N) * itemsize
    keep = np.stack([valid, valid], axis=-1).reshape(-1)
    keys = np.stack(np.broadcast_arrays(a_key, b_key), axis=-1).reshape(-1)[keep]
    sizes = np.stack(np.broadcast_arrays(a_size, b_size), axis=-1).reshape(-1)[keep]
    return keys, sizes


@dataclass
class L2Result:
    """What one simulated launch asked of the cache and how much of it reached HBM."""

    cache_bytes: int
    GROUP_M: int
    hits: int
    misses: int
    requested_bytes: int  # bytes of all tile loads (what a kernel with no cache would read from HBM)
    hbm_bytes: int  # bytes of the loads that missed
    minimum_bytes: int  # A and B read once each

    @property
    def hit_rate(self) -> float:
        return self.hits / max(1, self.hits + self.misses)

    @property
    def excess(self) -> float:
        """HBM bytes over the minimum (1.0: every byte of A and B read exactly once)."""
        return self.hbm_bytes / max(1, self.minimum_bytes)


def simulate_l2(M: int, N: int, K: int, BLOCK_M: int = 128, BLOCK_N: int = 128, BLOCK_K: int = 64,
                GROUP_M: int = 1, cache_bytes: int = 50 * 2**20, itemsize: int = 2, concurrent: int = 1,
                loads=None) -> L2Result:
    """An LRU cache of ``cache_bytes`` over the matmul's A/B tile loads in launch order (C stores not counted).

    A deliberately simple model: whole tiles are the cache lines, one cache for the chip, no prefetch. The
    H200's L2 is 50 MB (in two partitions; this model has one), with 132 SMs (``concurrent=132`` at one program per SM).
    ``loads``: an explicit sequence of ``(key, bytes)`` instead of the matmul's (for worked examples).
    """
    if loads is None:
        keys, sizes = matmul_tile_loads(M, N, K, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, itemsize, concurrent)
    else:
        loads = list(loads)
        keys = [k for k, _ in loads]
        sizes = np.array([b for _, b in loads], dtype=np.int64)
    hits, requested, hbm = _lru(keys if isinstance(keys, list) else keys.tolist(), sizes, int(cache_bytes))
    misses = len(sizes) - hits
    return L2Result(cache_bytes, GROUP_M, hits, misses, requested, hbm, (M * K + K * N) * itemsize)


def _lru(keys: list, sizes: np.ndarray, cache_bytes: int) -> tuple[int, int, int]:
    """Hits, requested bytes and missed bytes of an LRU cache of ``cache_bytes`` over the loads."""
    cache: OrderedDict = OrderedDict()
    hits = hbm = 0
    requested = int(sizes.sum())
    if sizes.size and (sizes == sizes[0]).all():  # equal tiles: count-based LRU, the fast path
        size, cap = int(sizes[0]), int(cache_bytes // max(int(sizes[0]), 1))
        for key in keys:
            if key in cache:
                hits += 1
                cache.move_to_end(key)
            else:
                hbm += size
                if cap:
                    cache[key] = None
                    if len(cache) > cap:
                        cache.popitem(last=False)
        return hits, requested, hbm
    used = 0
    for key, nbytes in zip(keys, sizes.tolist()):
        if key in cache:
            hits += 1
            cache.move_to_end(key)
            continue
        hbm += nbytes
        if nbytes > cache_bytes:
            continue  # larger than the cache: streams through
        while used + nbytes > cache_bytes:
            _, b = cache.popitem(last=False)
            used -= b
        cache[key] = nbytes
        used += nbytes
    return hits, requested, hbm
