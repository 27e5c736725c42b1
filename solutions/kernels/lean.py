"""The lean launch path (lesson 08 teaches it): compile once per key and keep the launcher.

``kernel[grid](*args)`` costs tens of microseconds of Python on every call, before the GPU sees
anything: Triton binds the arguments, specializes each one (is an int 1, or a multiple of 16? is a
pointer 16-byte aligned?), hashes the result to find the compiled kernel, checks the globals the
kernel read, and only then launches. An autotuned kernel adds its own dispatch on top. All of that
depends only on the *properties* of the arguments, which a launcher can summarise in a key it
computes itself, much more cheaply. ``Lean`` does that:

- the first call for a key goes through ``kernel[grid]`` (an autotuned kernel tunes there, once)
  and keeps the ``CompiledKernel`` it returns, the grid and the constexpr values;
- every later call with that key calls ``CompiledKernel.run`` directly, with the stream looked up
  on the call (a stream kept from an earlier call would make a CUDA-graph capture record nothing:
  the launch would go to the old stream, not the capturing one). A caller that has looked the
  stream up already for its own use passes it: ``entry.on(stream, *args)``.

The key is the caller's job, and it must hold everything the compile depends on: dtypes, every
int argument (their values: 1 and multiples of 16 compile differently), the 16-byte alignment of
every pointer, constexprs and launch options, the device. A key that leaves one out runs a kernel
compiled for other inputs, silently wrong (say, one compiled for an aligned pointer, run on a
misaligned one). The lean launchers of this package (``kernels.softmax``, ``kernels.matmul``, ...) key
on dtypes, shapes, strides, ``data_ptr() & 15`` and the device; their tests check that each of those
gets its own entry.

On triton 3.6 an entry goes one step further (``_Direct``): it calls the launcher's C function
itself, past the Python wrapper (``CudaLauncher.__call__``, which makes a closure and looks up
scratch allocators on every call), and a kernel that takes host-made tensor descriptors gets each
descriptor's encoded CUtensorMap from a table keyed by the tensor's address: a map depends only on
the address, the shape, the strides, the block and the dtype, and all but the address are the key's,
so an address seen before needs no new ``cuTensorMapEncodeTiled``. Elsewhere entries call ``run``.

In Triton's interpreter, with a launch hook set (a profiler such as proton listens there), or on
a Triton whose ``CompiledKernel`` lacks ``run``/``function``/``packed_metadata``, an entry launches
through ``kernel[grid]`` instead, with the config chosen on the first call: same results, the
ordinary path's cost. The same ``run`` call is what ``CompiledKernel.__getitem__`` makes in
triton 3.6 and 3.7 (``triton/compiler/compiler.py``).

What this reads below Triton's public API (the launcher's C function and how a descriptor is encoded,
the driver's stream, the launch hook, the autotuner's wrapper) and which versions it trusts (3.6 for
the C function) come from ``tkcourse.triton_internals``, the one module a new Triton is checked in.
"""

from __future__ import annotations

from tkcourse import triton_internals as ti
from tkcourse.mode import INTERPRET

__all__ = ["Lean", "MAX_ENTRIES", "DIRECT", "tensor_key", "pdl_ok", "pdl_meta", "hooks_on", "stream_of"]

#: Entries a ``Lean`` keeps before it forgets them all (a new shape per call would otherwise grow
#: the table without bound; a forgotten key costs one ordinary launch, never a new compile).
MAX_ENTRIES = 1024


def tensor_key(x) -> tuple:
    """What a compile sees of a tensor argument, for a key: dtype, shape, strides, the 16-byte alignment
    of its pointer (``data_ptr() & 15``) and its device."""
    return (x.dtype, x.shape, x.stride(), x.data_ptr() & 15, x.get_device())


def pdl_ok(device) -> bool:
    """Whether kernels on ``device`` may be launched with programmatic dependent launch: a GPU of
    compute capability 9.0 or later (Hopper's ``griddepcontrol``), never the interpreter."""
    if INTERPRET:
        return False
    import torch

    return torch.cuda.get_device_capability(device)[0] >= 9


def pdl_meta(device, on: bool = True) -> dict:
    """The constexpr and the launch option of programmatic dependent launch, ``dict(PDL=True,
    launch_pdl=True)``, where ``on`` and ``device`` has it (``pdl_ok``); else none (a kernel's ``PDL``
    defaults to False).

    A kernel launched so may get onto the SMs while the kernel before it on the stream is still
    running; each of its programs waits (``gdc_wait``) for that kernel to finish and its writes to be
    visible before it touches memory the two may share. ``gdc_launch_dependents`` lets the kernel after
    it do the same, once every program has called it (or ended): a short kernel calls it at once, a
    matmul after its loop, so that the next kernel's waiting programs do not sit on the SMs through its
    whole last wave. A decode step of a model is a chain of a few hundred short kernels, and each link
    saves part of the time a launch takes to reach the SMs."""
    return dict(PDL=True, launch_pdl=True) if on and pdl_ok(device) else {}


def _jit_of(kernel):
    """The ``JITFunction`` (or interpreted function) under an ``Autotuner`` or ``Heuristics`` wrapper."""
    return ti.jit_of(kernel)


#: ``hooks_on()``: a launch hook is set (triton 3.6: a callable or None; 3.7: a HookChain, empty by
#: default). The function itself, not a wrapper around it: every lean call asks.
hooks_on = ti.hooks_on


class _Fallback:
    """An entry that launches through ``kernel[grid]`` with the config chosen on the first call."""

    __slots__ = ("kernel", "grid", "static", "meta", "info")
    lean = False
    tensor_descriptors = False

    def __init__(self, kernel, grid, static, meta, info=None):
        self.kernel, self.grid, self.static, self.meta, self.info = kernel, grid, static, meta, info

    def __call__(self, *args):
        self.kernel[self.grid](*args, *self.static, **self.meta)

    def on(self, stream, *args):  # kernel[grid] launches on the current stream itself
        self(*args)


class _Compiled:
    """An entry that calls ``CompiledKernel.run``: the launch alone, on the current stream."""

    __slots__ = ("run", "function", "packed", "grid", "tail", "device", "stream", "meta", "info")
    lean = True
    tensor_descriptors = False

    def __init__(self, compiled, grid, tail, device, stream, meta, info=None):
        self.run, self.function, self.packed = ti.launch_handles(compiled)
        self.grid, self.tail, self.device, self.stream, self.meta, self.info = grid, tail, device, stream, meta, info

    def __call__(self, *args):
        g = self.grid
        self.run(g[0], g[1], g[2], self.stream(self.device), self.function, self.packed, None, None, None,
                 *args, *self.tail)

    def on(self, stream, *args):
        """The launch on ``stream``, the current stream's handle that the caller looked up already.
        (``__call__`` repeats the launch rather than calling this: one Python call less a launch.)"""
        g = self.grid
        self.run(g[0], g[1], g[2], stream, self.function, self.packed, None, None, None, *args, *self.tail)


#: Entries call the launcher's C function directly where the Triton is one whose launcher is known
#: (``tkcourse.triton_internals.DIRECT_LAUNCH_IN``: 3.6); False makes every entry call
#: ``CompiledKernel.run`` (what the probes compare against).
DIRECT = ti.direct_launch()


def _direct(compiled):
    """``(C launch function, cooperative, pdl, {position: tensordesc metadata})`` of triton 3.6's CUDA
    launcher, or None where this launch cannot skip ``run`` (another Triton or backend, a kernel that
    needs scratch memory allocated per launch, descriptors decomposed by the frontend)."""
    return ti.direct_launcher(compiled)


class _Direct:
    """An entry that calls triton 3.6's C launch function: the launch alone, on the current stream."""

    __slots__ = ("launch", "function", "packed", "grid", "tail", "device", "stream", "meta", "info", "coop", "pdl")
    lean = True
    tensor_descriptors = False  # the caller passes descriptors where the kernel takes them

    def __init__(self, compiled, direct, grid, tail, device, stream, meta, info=None):
        self.launch, self.coop, self.pdl = direct[0], direct[1], direct[2]
        _, self.function, self.packed = ti.launch_handles(compiled)
        self.grid, self.tail, self.device, self.stream, self.meta, self.info = grid, tail, device, stream, meta, info

    def __call__(self, *args):
        g = self.grid
        self.launch(g[0], g[1], g[2], self.stream(self.device), self.function, self.coop, self.pdl, None, None,
                    self.packed, None, None, None, *args, *self.tail)

    def on(self, stream, *args):
        """The launch on ``stream``, the current stream's handle that the caller looked up already.
        (``__call__`` repeats the launch rather than calling this: one Python call less a launch.)"""
        g = self.grid
        self.launch(g[0], g[1], g[2], stream, self.function, self.coop, self.pdl, None, None, self.packed,
                    None, None, None, *args, *self.tail)


class _DirectDescriptors(_Direct):
    """A ``_Direct`` entry of a kernel taking host-made tensor descriptors: the caller passes the
    tensors, and each descriptor's encoded map comes from ``maps`` (keyed by position and address)."""

    __slots__ = ("templates", "maps")
    tensor_descriptors = True  # the caller passes the tensors themselves

    def __init__(self, compiled, direct, grid, tail, device, stream, meta, info, templates):
        super().__init__(compiled, direct, grid, tail, device, stream, meta, info)
        self.templates = {i: (templates[i], m) for i, m in direct[3].items()}  # position -> (descriptor, metadata)
        self.maps: dict = {}

    def __call__(self, *args):
        self.on(self.stream(self.device), *args)

    def on(self, stream, *args):
        flat, maps = [], self.maps
        for i, a in enumerate(args):
            t = self.templates.get(i)
            if t is None:
                flat.append(a)
                continue
            key = (i, a.data_ptr())
            m = maps.get(key)
            if m is None:
                m = maps[key] = self._encode(a, *t)
            flat.extend(m)
        g = self.grid
        self.launch(g[0], g[1], g[2], stream, self.function, self.coop, self.pdl, None, None,
                    self.packed, None, None, None, *flat, *self.tail)

    def _encode(self, tensor, template, meta):
        if len(self.maps) >= MAX_ENTRIES:
            self.maps.clear()
        template.base = tensor  # the map reads the base's address; shape, strides and block are the template's
        try:
            return ti.encode_descriptor(template, meta)
        finally:
            template.base = None  # the map holds the address only: the tensor is not kept alive


class Lean:
    """The lean launch path of one Triton kernel (a ``@triton.jit`` function or an autotuned one).

    ``get(key)`` gives the entry of a key seen before (call it with the per-call arguments), or None;
    ``first(key, args, static, grid, meta)`` launches the first time and keeps the entry. ``args`` are
    the leading arguments that change from call to call (tensors), ``static`` the ones that the key
    fixes (shapes, strides), ``meta`` the constexprs and launch options (an autotuner adds its config).
    The kernel's parameters must list every run-time argument before its first constexpr.
    """

    def __init__(self, kernel, fallback_kernel=None):
        self.kernel = kernel
        self.jit = _jit_of(kernel)
        self.fallback_kernel = fallback_kernel or self.jit
        self.entries: dict = {}
        self.compiles = 0  # first calls: what the tests count

    def get(self, key):
        if hooks_on():
            return None  # the ordinary path, which calls the hooks
        return self.entries.get(key)

    def first(self, key, args, static=(), grid=None, meta=None, info=None, templates=None):
        """Launch through ``kernel[grid]`` (tuning an autotuned kernel once), keep the entry, return it.

        ``templates``: for a kernel taking host-made tensor descriptors, a function of the chosen config
        giving ``{position: TensorDescriptor}`` with that config's blocks; with it, an entry that can
        encode descriptors itself (``_DirectDescriptors``) takes the tensors at those positions."""
        meta = dict(meta or {})
        self.compiles += 1
        if len(self.entries) >= MAX_ENTRIES:
            self.entries.clear()
        names = getattr(self.jit, "arg_names", None) or [p.name for p in self.jit.params]
        named = dict(zip(names, (*args, *static)))
        if INTERPRET:
            g = _grid3(grid, named, meta)
            entry = _Fallback(self.jit, g, tuple(static), meta, info)
            entry(*args)
        else:
            compiled = self.kernel[grid](*args, *static, **meta)
            chosen = dict(meta)
            best = getattr(self.kernel, "best_config", None)
            if best is not None:  # an autotuner: what it chose for this key
                chosen.update(best.all_kwargs())
            g = _grid3(grid, named, chosen)
            entry = self._compiled(compiled, g, tuple(static), chosen, info, len(args) + len(static),
                                   None if templates is None else templates(chosen))
        self.entries[key] = entry
        return entry

    def _compiled(self, compiled, grid, static, chosen, info, n_runtime, templates=None):
        params = self.jit.params
        constexprs = [p for p in params if p.is_constexpr]
        runtime_first = all(not p.is_constexpr for p in params[:n_runtime]) and len(params) - n_runtime == len(constexprs)
        api = ti.launch_api(compiled)
        if not (api and runtime_first):  # an older Triton, or a parameter order this class cannot keep
            return _Fallback(self.fallback_kernel, grid, static,
                             {k: v for k, v in chosen.items() if k not in ("pre_hook",)}, info)
        tail = static + tuple(chosen[p.name] if p.name in chosen else p.default for p in constexprs)  # defaults kept
        device, stream = ti.driver_stream()
        direct = _direct(compiled) if DIRECT else None
        if direct is not None and not direct[3]:
            return _Direct(compiled, direct, grid, tail, device, stream, chosen, info)
        if direct is not None and templates is not None:
            return _DirectDescriptors(compiled, direct, grid, tail, device, stream, chosen, info, templates)
        return _Compiled(compiled, grid, tail, device, stream, chosen, info)


def _grid3(grid, named: dict, chosen: dict) -> tuple[int, int, int]:
    """The grid as three ints; a callable grid gets the arguments and the chosen constexprs by name."""
    if callable(grid):
        grid = grid({**named, **chosen})
    grid = tuple(grid)
    return (grid + (1, 1))[:3]


def stream_of(device_index):
    """The current stream's handle on device ``device_index`` (a split-K workspace and the one-read
    kernels' exchange slots belong to a stream); 0 in the interpreter."""
    global _current_stream
    if _current_stream is None:
        _current_stream = ti.stream_lookup()
    return _current_stream(device_index)


_current_stream = None  # the driver's stream lookup, found on the first call
