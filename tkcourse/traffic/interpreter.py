"""The hooks into Triton's interpreter: the one module of the tracer that reaches into triton's internals.

Everything version-fragile lives here, so that a new triton release is checked (and fixed) in one place:

* the interpreter's builder methods the tracer wraps for one launch: ``create_masked_load``,
  ``create_masked_store``, the atomics, ``create_addptr`` and the ops that reshape a pointer block;
* the interpreter's ``TensorHandle`` (``.data``, ``.dtype``) and ``interpreter_builder.grid_idx``;
* how a launch is run in the interpreter (``InterpretedFunction``, ``set_grid_dim``), how a compiled
  kernel's ``@triton.jit`` helpers are swapped for interpreted ones, and how triton.language is put
  back afterwards;
* the launch entry points ``capture`` intercepts (``JITFunction.run``, ``InterpretedFunction.run``,
  ``Autotuner._bench``) and the autotuner's and heuristics' wrappers (``.fn``, ``.configs``, ``.values``).

What crosses into ``tracer`` is plain NumPy: a recorder gets ``record(kind, addrs, active, program,
itemsize, origin) -> active`` (uint64 addresses, a bool mask, the program id, bytes per element, the
tensor the pointer was computed from) and ``owner_of(addrs)``. Before any of it runs, ``_interp()``
applies ``tkcourse.mode.patch_interpreter()`` (triton < 3.7 on NumPy >= 2.4).
"""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
import threading

import numpy as np

from .. import mode
from .records import TraceError


def _interp():
    import triton.runtime.interpreter as interp

    mode.patch_interpreter()  # triton < 3.7 on NumPy >= 2.4: the tracer runs the interpreter on a GPU too
    return interp


def _elem_bytes(ptr_handle) -> int:
    ty = ptr_handle.dtype
    while hasattr(ty, "element_ty"):
        ty = ty.element_ty
    return max(1, getattr(ty, "primitive_bitwidth", 8) // 8)


def _addresses(ptrs) -> np.ndarray:
    """A pointer block's addresses, as uint64."""
    return np.asarray(ptrs.data).astype(np.uint64, copy=False)


def _record(recorder, kind: str, ptrs, mask) -> np.ndarray:
    """Hand one load/store/atomic to the recorder as NumPy; returns the mask it leaves on."""
    addrs = _addresses(ptrs)
    active = np.ones(addrs.shape, dtype=bool) if mask is None else np.broadcast_to(
        np.asarray(mask.data).astype(bool), addrs.shape)
    program = tuple(int(v) for v in _interp().interpreter_builder.grid_idx)
    return recorder.record(kind, addrs, active, program, _elem_bytes(ptrs), getattr(ptrs, _TAG, None))


_state = threading.local()
_TAG = "_tkcourse_origin"  # attribute on a pointer TensorHandle: index of the tensor it was computed from

#: Builder methods that pass a pointer block through unchanged in meaning (its origin tag follows it).
_PASS_TAG = ("create_splat", "create_broadcast", "create_expand_dims", "create_reshape", "create_trans",
             "create_permute", "create_select", "create_join", "create_cat")


@contextlib.contextmanager
def _hooked(recorder):
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
        m = _record(recorder, "load", ptrs, mask)
        return orig["create_masked_load"](ptrs, as_mask(m), other, *args, **kwargs)

    def masked_store(ptrs, value, mask, *args, **kwargs):
        m = _record(recorder, "store", ptrs, mask)
        return orig["create_masked_store"](ptrs, value, as_mask(m), *args, **kwargs)

    def atomic_rmw(op, ptr, val, mask, *args, **kwargs):
        m = _record(recorder, "atomic", ptr, mask)
        return orig["create_atomic_rmw"](op, ptr, val, as_mask(m), *args, **kwargs)

    scratch = np.zeros(8, dtype=np.uint64)  # out-of-bounds CAS lanes are pointed here instead

    def atomic_cas(ptr, cmp, val, *args, **kwargs):
        m = _record(recorder, "atomic", ptr, None)
        if not m.all():
            data = np.where(m, np.asarray(ptr.data), np.uint64(scratch.ctypes.data)).astype(np.uint64)
            ptr = TH(data, ptr.dtype)
        return orig["create_atomic_cas"](ptr, cmp, val, *args, **kwargs)

    def addptr(ptr, offset, *args, **kwargs):
        out = orig["create_addptr"](ptr, offset, *args, **kwargs)
        tag = getattr(ptr, _TAG, None)
        if tag is None:
            tag = recorder.owner_of(_addresses(ptr))
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


def run(fn, grid, args, kwargs, recorder) -> tuple[int, int, int]:
    """Run ``fn[grid](*args, **kwargs)`` in the interpreter with every access handed to ``recorder``;
    returns the launch's grid (as the interpreter set it)."""
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
                ifn[grid](*args, **kwargs)
            finally:
                del interp.interpreter_builder.set_grid_dim
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
    from triton.runtime.jit import JITFunction

    interp = _interp()
    orig_jit, orig_interp = JITFunction.run, interp.InterpretedFunction.run

    def jit_run(self, *args, grid, warmup, **kwargs):
        if warmup or getattr(_state, "depth", 0):
            return orig_jit(self, *args, grid=grid, warmup=warmup, **kwargs)
        traced(self, grid, args, kwargs)
        return orig_jit(self, *args, grid=grid, warmup=warmup, **kwargs)

    def interp_run(self, *args, grid, warmup, **kwargs):
        if warmup or getattr(_state, "depth", 0):
            return orig_interp(self, *args, grid=grid, warmup=warmup, **kwargs)
        traced(self, grid, args, kwargs)  # the traced run is the launch

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
        yield
    finally:
        JITFunction.run, interp.InterpretedFunction.run, Autotuner._bench = orig_jit, orig_interp, orig_bench
