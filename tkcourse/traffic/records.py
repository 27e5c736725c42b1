"""What a trace holds: the tensor arguments of a launch, each access, the out-of-bounds lanes, and the
per-tensor accounting (bytes read and written against the minimum) that the summaries and plots read.

Plain data over NumPy arrays: nothing here touches Triton (``tracer`` and ``interpreter`` fill it).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field

import numpy as np

from .table import Table, fmt_bytes

__all__ = ["TraceError", "OutOfBoundsError", "TensorInfo", "Access", "OutOfBounds", "Launch", "Trace",
           "combine", "minimum_bytes"]


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
    """One kernel launch: its name, its grid, and its scalar arguments (ints, floats, bools, None and
    constexprs) as ``(name, value)`` pairs, ``arg(name)`` to read one: what a launcher passed."""

    kernel: str
    grid: tuple[int, int, int]
    scalars: tuple = ()

    def arg(self, name: str, default=None):
        """The scalar argument ``name`` of the launch (``default`` when it had none of that name)."""
        return dict(self.scalars).get(name, default)

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
    touched each element (the access map); ``idle`` the accesses with every lane masked off, as ``(kind,
    program, tensor index or None)``: no memory moved, but a program spent the step (a loop past its end).
    """

    def __init__(self, name: str, tensors: list[TensorInfo], accesses: list[Access],
                 out_of_bounds: list[OutOfBounds], launches: list[Launch], idle=()):
        self.name, self.tensors, self.accesses = name, list(tensors), list(accesses)
        self.out_of_bounds, self.launches = list(out_of_bounds), list(launches)
        self.idle = list(idle)
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
    accesses, oob, launches, idle = [], [], [], []
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
        idle.extend((kind, program, None if i is None else remap[i]) for kind, program, i in tr.idle)
    return Trace(name or " + ".join(tr.name for tr in traces), tensors, accesses, oob, launches, idle=idle)


def minimum_bytes(inputs=(), outputs=()) -> int:
    """The analytic minimum: every input read once, every output written once (tensors or byte counts)."""
    size = lambda t: int(t) if isinstance(t, (int, np.integer)) else t.numel() * t.element_size()
    return sum(map(size, inputs)) + sum(map(size, outputs))
