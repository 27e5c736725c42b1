"""Torch eager code: the bytes each aten op reads and writes, for code the tracer cannot see (``count_eager``)."""

from __future__ import annotations

import contextlib

import torch

from .table import Table, fmt_bytes

__all__ = ["EagerTraffic", "count_eager"]

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
