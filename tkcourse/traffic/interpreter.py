"""The tracer's hooks into Triton's interpreter: what it does at each load, store and launch.

Triton's private objects it needs (the interpreter's builder and its ``create_*`` methods,
``TensorHandle``, the program id, ``InterpretedFunction``, the launch entry points, the autotuner's
and heuristics' wrappers) come from ``tkcourse.triton_internals``, the one module that reaches below
Triton's public API, so that a new triton release is checked there. This module holds what the tracer
does with them:

* wrap the builder's masked load/store, the atomics, ``create_addptr`` and the ops that reshape a
  pointer block for the duration of one launch (``_hooked``);
* run a launch in the interpreter, with a compiled kernel's ``@triton.jit`` helpers swapped for
  interpreted ones and triton.language put back afterwards (``run``);
* intercept every launch inside a block (``each_launch``).

What crosses into ``tracer`` is plain NumPy: a recorder gets ``record(kind, addrs, active, program,
itemsize, origin) -> active`` (uint64 addresses, a bool mask, the program id, bytes per element, the
tensor the pointer was computed from) and ``owner_of(addrs)``. The interpreter it runs is the patched
one (``triton_internals.interpreter()``: triton < 3.7 on NumPy >= 2.4).
"""

from __future__ import annotations

import contextlib
import inspect
import os
import threading

import numpy as np

from .. import mode
from .. import triton_internals as ti
from .records import TraceError


def _addresses(ptrs) -> np.ndarray:
    """A pointer block's addresses, as uint64."""
    return np.asarray(ptrs.data).astype(np.uint64, copy=False)


def _record(recorder, kind: str, ptrs, mask, program) -> np.ndarray:
    """Hand one load/store/atomic to the recorder as NumPy; returns the mask it leaves on."""
    addrs = _addresses(ptrs)
    active = np.ones(addrs.shape, dtype=bool) if mask is None else np.broadcast_to(
        np.asarray(mask.data).astype(bool), addrs.shape)
    return recorder.record(kind, addrs, active, program(), ti.element_bytes(ptrs), getattr(ptrs, ORIGIN_TAG, None))


_state = threading.local()
ORIGIN_TAG = "_tkcourse_origin"  # attribute on a pointer TensorHandle: index of the tensor it was computed from


@contextlib.contextmanager
def _hooked(recorder):
    """Wrap the interpreter builder's masked load/store (and atomics) for the duration of one launch.

    Every access goes to ``recorder``, and only the lanes it leaves on reach memory. ``create_addptr``
    (and the ops that reshape a pointer block, ``ti.POINTER_PASSING_METHODS``) tag each pointer block
    with the tensor it was computed from, so an access far outside every tensor is still reported
    against the tensor it was meant for.
    """
    import triton.language as tl

    TH, program = ti.tensor_handle_type(), ti.program_id_reader()
    as_mask = lambda m: TH(np.ascontiguousarray(m), tl.int1)

    def masked_load(orig):
        def f(ptrs, mask, other, *args, **kwargs):
            return orig(ptrs, as_mask(_record(recorder, "load", ptrs, mask, program)), other, *args, **kwargs)
        return f

    def masked_store(orig):
        def f(ptrs, value, mask, *args, **kwargs):
            return orig(ptrs, value, as_mask(_record(recorder, "store", ptrs, mask, program)), *args, **kwargs)
        return f

    def atomic_rmw(orig):
        def f(op, ptr, val, mask, *args, **kwargs):
            return orig(op, ptr, val, as_mask(_record(recorder, "atomic", ptr, mask, program)), *args, **kwargs)
        return f

    scratch = np.zeros(8, dtype=np.uint64)  # out-of-bounds CAS lanes are pointed here instead

    def atomic_cas(orig):
        def f(ptr, cmp, val, *args, **kwargs):
            m = _record(recorder, "atomic", ptr, None, program)
            if not m.all():
                data = np.where(m, np.asarray(ptr.data), np.uint64(scratch.ctypes.data)).astype(np.uint64)
                ptr = TH(data, ptr.dtype)
            return orig(ptr, cmp, val, *args, **kwargs)
        return f

    def addptr(orig):
        def f(ptr, offset, *args, **kwargs):
            out = orig(ptr, offset, *args, **kwargs)
            tag = getattr(ptr, ORIGIN_TAG, None)
            if tag is None:
                tag = recorder.owner_of(_addresses(ptr))
            if tag is not None:
                setattr(out, ORIGIN_TAG, tag)
            return out
        return f

    def passing(orig):
        def f(*args, **kwargs):
            out = orig(*args, **kwargs)
            tag = next((getattr(a, ORIGIN_TAG) for a in args if hasattr(a, ORIGIN_TAG)), None)
            if tag is not None and out is not None and not isinstance(out, tuple):
                with contextlib.suppress(AttributeError):
                    setattr(out, ORIGIN_TAG, tag)
            return out
        return f

    load, store, rmw, cas, add = ti.MEMORY_METHODS
    wrappers = {load: masked_load, store: masked_store, rmw: atomic_rmw, cas: atomic_cas, add: addptr,
                **{n: passing for n in ti.POINTER_PASSING_METHODS}}
    with ti.builder_wrapped(wrappers):
        yield


_MISSING = object()


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
    saved = [(obj, dict(vars(obj))) for obj in dict.fromkeys(ti.language_namespaces())]
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
def _interpreter_globals(fn, *helpers):
    """In compiled mode, let the kernel's @triton.jit helpers run in the interpreter (restored afterwards): those it
    reaches through its globals, and ``helpers``, the Python functions of @triton.jit helpers passed to it as
    arguments (and what they reach)."""
    patched: list[tuple[dict, str, object]] = []
    seen = set()

    def visit(f):
        g = getattr(f, "__globals__", None)
        if g is None or id(f) in seen:
            return
        seen.add(id(f))
        for k, v in list(g.items()):
            if ti.is_jit(v):
                patched.append((g, k, v))
                g[k] = ti.interpreted(v.fn)
                visit(v.fn)
            elif inspect.ismodule(v) and v.__name__.startswith("triton.language") and id(v) not in seen:
                # tl.max, tl.sum, tl.cdiv, ...: triton's own @jit functions, reached as module attributes
                seen.add(id(v))
                d = vars(v)
                for name, w in list(d.items()):
                    if ti.is_jit(w):
                        patched.append((d, name, w))
                        d[name] = ti.interpreted(w.fn)
                        visit(w.fn)

    old_env = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        with _language_restored():
            for f in (fn, *helpers):
                visit(f)
            yield
    finally:
        for g, k, v in reversed(patched):
            g[k] = v
        if old_env is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = old_env


def unwrap_kernel(kernel, kwargs: dict):
    """A Python function from a @triton.jit kernel (interpreted or compiled), autotuned or heuristic-wrapped,
    and the wrappers above it."""
    try:
        return ti.unwrap(kernel)
    except TypeError:
        raise TraceError(f"trace() needs a @triton.jit kernel, got {type(kernel).__name__}") from None


def apply_layers(layers, fn, args, kwargs):
    """Fill meta-parameters an Autotuner (first config, or the one it already picked) or Heuristics would set."""
    return ti.layer_defaults(layers, fn, args, kwargs)


def run(fn, grid, args, kwargs, recorder) -> tuple[int, int, int]:
    """Run ``fn[grid](*args, **kwargs)`` in the interpreter with every access handed to ``recorder``;
    returns the launch's grid (as the interpreter set it)."""
    holder = {}
    ifn = ti.interpreted(fn)
    # a @triton.jit helper passed as a tl.constexpr argument (a function the caller chose) runs interpreted too
    helpers = [v.fn for v in (*args, *kwargs.values()) if ti.is_jit(v)]
    args = [ti.interpreted(v.fn) if ti.is_jit(v) else v for v in args]
    kwargs = {k: ti.interpreted(v.fn) if ti.is_jit(v) else v for k, v in kwargs.items()}
    depth = getattr(_state, "depth", 0)
    _state.depth = depth + 1
    try:
        with _interpreter_globals(fn, *helpers), _hooked(recorder), ti.grid_recorded(holder):
            ifn[grid](*args, **kwargs)
    finally:
        _state.depth = depth
    return holder.get("grid", (1, 1, 1))


@contextlib.contextmanager
def each_launch(traced):
    """Call ``traced(kernel, grid, args, kwargs)`` for every kernel launch inside the block.

    In compiled mode the real launch follows the call; in the interpreter the call is the launch (its
    traced run). Warmup launches, launches nested in a traced one and an autotuner's benchmarking
    launches pass straight through.
    """
    def jit_run(orig):
        def f(self, *args, grid, warmup, **kwargs):
            if not (warmup or getattr(_state, "depth", 0)):
                traced(self, grid, args, kwargs)
            return orig(self, *args, grid=grid, warmup=warmup, **kwargs)
        return f

    def interp_run(orig):
        def f(self, *args, grid, warmup, **kwargs):
            if warmup or getattr(_state, "depth", 0):
                return orig(self, *args, grid=grid, warmup=warmup, **kwargs)
            traced(self, grid, args, kwargs)  # the traced run is the launch
        return f

    def quiet_bench(orig):  # the autotuner's benchmark launches are not the launch
        def f(self, *args, **kwargs):
            _state.depth = getattr(_state, "depth", 0) + 1
            try:
                return orig(self, *args, **kwargs)
            finally:
                _state.depth -= 1
        return f

    with ti.launches_replaced(jit_run, interp_run, quiet_bench):
        yield
