"""The tracer: one launch run in Triton's interpreter with every load and store recorded (``trace``),
or every launch of a block of code (``capture``).

The tensor arguments are staged into one CPU buffer with guard gaps between them (``_stage``), so an
overrun lands in no tensor; the recorder maps each address to the argument it lies in, and masks off
lanes that lie in none before they reach memory. How the interpreter is hooked is ``interpreter``'s
business; what a trace holds is ``records``; Triton's private objects (``TensorWrapper``, the
interpreter's) come from ``tkcourse.triton_internals``.
"""

from __future__ import annotations

import contextlib
import inspect

import numpy as np
import torch

from .. import triton_internals as ti
from . import interpreter
from .records import Access, Launch, OutOfBounds, OutOfBoundsError, TensorInfo, Trace, TraceError
from .table import fmt_bytes

__all__ = ["trace", "capture"]


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
        self.idle: list[tuple[str, tuple, int | None]] = []  # (kind, program, tensor) of an access with no lane on

    def classify(self, addrs: np.ndarray) -> np.ndarray:
        owner = np.full(addrs.shape, -1, dtype=np.int64)
        for i in self.order:
            hit = (owner < 0) & (addrs >= self.starts[i]) & (addrs < self.ends[i])
            owner[hit] = i
        return owner

    def record(self, kind: str, addrs: np.ndarray, active: np.ndarray, program: tuple, item: int,
               origin: int | None) -> np.ndarray:
        """Record one access (``origin``: the tensor the pointer came from); return ``active`` with
        out-of-bounds lanes switched off."""
        flat_addrs, flat_active = addrs.reshape(-1), active.reshape(-1)
        if not flat_active.any():  # every lane masked off: nothing moves, but the program spent the step
            self.idle.append((kind, program, origin))  # no lane to place: only the pointer's own tensor, if known
            return active
        owner = self.classify(flat_addrs)
        kinds = ("load", "store") if kind == "atomic" else (kind,)
        for i in np.unique(owner[flat_active & (owner >= 0)]):
            sel = flat_active & (owner == i)
            offs = ((flat_addrs[sel] - self.starts[i]) // np.uint64(self.tensors[i].itemsize)).astype(np.int64)
            for k in kinds:
                self.accesses.append(Access(k, program, int(i), offs, item))
        bad = flat_active & (owner < 0)
        if bad.any():
            self._report(kind, program, flat_addrs[bad], origin)
            return (active & (owner >= 0).reshape(active.shape))
        return active

    def owner_of(self, addrs: np.ndarray):
        """The tensor most lanes of an untagged pointer block lie in (None: in no tensor)."""
        owner = self.classify(addrs.reshape(-1))
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


_ALIGN = 128


def _stage(args, kwargs):
    """Copy the tensor arguments into one CPU buffer, each storage in place, with empty guard gaps between them.

    Storage layouts are kept (offsets, strides, views sharing a storage share the copy), so the kernel indexes
    the copies exactly as the originals. The gaps (as large as the largest storage) make a small overrun of
    one tensor land in no tensor, where it is reported, rather than in its neighbour. Returns the staged
    arguments and ``(original storage as bytes, staged bytes)`` pairs for copying results back.
    """
    wrapped = ti.wrapped_tensor_types()  # TensorWrapper, TensorDescriptor: a tensor in .base
    found: dict[tuple, torch.UntypedStorage] = {}

    def scan(a):
        if isinstance(a, wrapped):
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
        if isinstance(a, wrapped):
            return ti.rewrapped(a, cvt(a.base))
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
    wrapped = ti.wrapped_tensor_types()
    sig = inspect.signature(fn)
    try:
        dev = sig.bind_partial(*dev_args, **dev_kwargs).arguments
        cpu = sig.bind_partial(*cpu_args, **cpu_kwargs).arguments
    except TypeError as e:
        raise TraceError(f"arguments do not match the kernel {fn.__name__}{sig}: {e}") from None
    found: dict[tuple, list] = {}

    def add(name, d, c):
        if isinstance(d, wrapped):
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
    fn, layers = interpreter.unwrap_kernel(kernel, kwargs)
    kwargs = interpreter.apply_layers(layers, fn, args, kwargs)
    params = inspect.signature(fn).parameters
    kwargs = {k: v for k, v in kwargs.items() if k in params}  # launch options (num_warps, ...) do not matter here
    size = _nbytes_args(list(args) + list(kwargs.values()))
    if size > max_bytes:
        raise TraceError(f"the tensor arguments hold {fmt_bytes(size)}; tracing runs the interpreter, one program "
                         f"at a time, so use small sizes (or raise max_bytes={max_bytes})")
    cpu_args, cpu_kwargs, staged = _stage(args, kwargs)
    tensors, bases = _collect_tensors(fn, args, kwargs, cpu_args, cpu_kwargs)
    recorder = _Recorder(tensors, bases, fn.__name__)
    grid = interpreter.run(fn, grid, cpu_args, cpu_kwargs, recorder)
    if writeback:  # the launch's results, into CPU tensors only (a GPU run keeps its own)
        if any(a.kind == "store" for a in recorder.accesses):
            for orig, copy in staged:
                if orig.device.type == "cpu":
                    orig.copy_(copy)
    launch = Launch(fn.__name__, grid, _scalars(fn, args, kwargs))
    return Trace(name or fn.__name__, tensors, recorder.accesses, recorder.oob, [launch], idle=recorder.idle)


def _scalars(fn, args, kwargs) -> tuple:
    """The launch's scalar arguments by name (a ``tl.constexpr`` wrapper read through), for ``Launch.scalars``."""
    try:
        bound = inspect.signature(fn).bind_partial(*args, **kwargs).arguments
    except TypeError:
        return ()
    values = {k: getattr(v, "value", v) for k, v in bound.items()}
    return tuple((k, v) for k, v in values.items() if v is None or isinstance(v, (bool, int, float)))


@contextlib.contextmanager
def capture(name: str | None = None, stop_on_oob: bool = False):
    """Trace every kernel launch inside the block: ``with capture() as traces: add(x, y)``.

    Yields a list that fills with one ``Trace`` per launch; ``combine(traces)`` sums them. In the interpreter
    each launch runs once, traced; on a GPU each launch runs normally and is also traced on CPU copies of its
    arguments (so use small sizes). An autotuner's benchmarking launches are not traced, only the launch.
    ``stop_on_oob``: a launch whose trace has an out-of-bounds access raises ``OutOfBoundsError`` (on a GPU,
    before it runs there: an illegal address would end the CUDA context), so the graders can report it.
    """
    traces: list[Trace] = []

    def traced(kernel, grid, args, kwargs):
        traces.append(trace(kernel, grid, *args, **kwargs))
        if stop_on_oob and traces[-1].out_of_bounds:
            raise OutOfBoundsError(traces[-1])

    try:
        with interpreter.each_launch(traced):
            yield traces
    finally:
        if name:
            for t in traces:
                t.name = f"{name}: {t.name}"
