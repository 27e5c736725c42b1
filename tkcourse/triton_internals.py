"""Every private Triton API and every version gate the course uses, in one module.

The course reaches below Triton's public API in a few places, each for a reason a lesson needs:

* **the interpreter's NumPy fix** (``patch_interpreter``): triton < 3.7 on NumPy >= 2.4;
* **the tracer** (``tkcourse.traffic``): the interpreter's builder methods it wraps for one launch, its
  ``TensorHandle``, the program id, ``InterpretedFunction``, the launch entry points
  (``JITFunction.run``, ``InterpretedFunction.run``, ``Autotuner._bench``), ``TensorWrapper``;
* **wrapped kernels** (``unwrap``, ``jit_of``, ``layer_defaults``): an ``Autotuner``'s or ``Heuristics``'
  ``.fn``, ``.configs``, ``.best_config`` and ``.values``;
* **occupancy** (``compiled_resources``, for ``solutions/_occupancy.py``): a compiled kernel's registers
  and shared memory, read after ``_init_handles``;
* **the lean launch** (lesson 08, ``solutions/kernels/lean.py``): ``CompiledKernel.run``'s handles
  (``launch_api``), the driver's current device and stream (``driver_stream``), the launch hook
  (``hooks_on``), and on triton 3.6 only (``DIRECT_LAUNCH_IN``) the CUDA launcher's C function
  (``direct_launcher``) and the encoding of a host-made tensor descriptor (``encode_descriptor``).

When Triton moves, this module is what to check, and ``tests/test_triton_internals.py`` runs each gate
under each version the course supports (3.6 on the H200, the pinned 3.7.1 on the CPU), by
monkeypatching the version where this machine has another (README, "Design notes", "Triton versions").

It imports ``tkcourse.mode`` only (to apply the interpreter's fix where kernels run there), and triton
only when a function needs it, so ``import tkcourse`` stays cheap; ``solutions/`` may import it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from typing import Callable

from . import mode

# ---------------------------------------------------------------------------------------------------
# Versions
# ---------------------------------------------------------------------------------------------------

#: The first triton whose interpreter needs no patch (it squeezes a 1-element array before ``int()``).
INTERPRETER_FIXED_IN = (3, 7)

#: The tritons whose CUDA launcher ``direct_launcher`` knows (its C function's arguments, its tensor
#: descriptor closure): the H200's 3.6. Elsewhere a lean entry calls ``CompiledKernel.run``.
DIRECT_LAUNCH_IN = ((3, 6),)


def triton_version(text: str | None = None) -> tuple[int, int]:
    """``(major, minor)`` of triton (or of ``text``); a development build counts as current."""
    if text is None:
        import triton

        text = triton.__version__
    try:
        return tuple(int(p) for p in text.split(".")[:2])
    except ValueError:
        return INTERPRETER_FIXED_IN


def direct_launch(version: tuple[int, int] | None = None) -> bool:
    """Whether a lean entry may call the CUDA launcher's C function itself on this triton (or ``version``)."""
    return (triton_version() if version is None else version) in DIRECT_LAUNCH_IN


# ---------------------------------------------------------------------------------------------------
# Triton's interpreter on a current NumPy. Triton 3.6's interpreter (and older) turns a scalar tensor
# into a Python int with ``int(handle.data)``, and that data is a 1-element array, not a 0-d one:
# NumPy deprecated such conversions in 1.25 and NumPy 2.4 refuses them with ``TypeError: only
# 0-dimensional arrays can be converted to Python scalars``. It happens whenever a kernel uses a tensor
# as a Python int, as ``for k in range(tl.cdiv(K, BLOCK_K))`` does. Triton 3.7 and later squeeze the
# array first (``int(handle.data.squeeze())``); ``patch_interpreter`` backports that one change to older
# interpreters instead of asking learners for an old NumPy. It is applied when ``tkcourse`` is imported
# in interpreter mode (below), and by the tracer (``interpreter()``), which runs the interpreter on a GPU.
# ---------------------------------------------------------------------------------------------------


def _index(self) -> int:
    """``tl.tensor.__index__`` in the interpreter: a 1-element array becomes its one element."""
    data = self.handle.data
    return int(data.item() if getattr(data, "size", 0) == 1 else data)


def patch_interpreter(force: bool = False, version: tuple[int, int] | None = None) -> bool:
    """Make an older Triton interpreter work with NumPy >= 2.4; returns whether the patch is active.

    Narrow and idempotent: only ``tl.tensor.__index__`` as the interpreter installs it for a launch
    (``_patch_lang_tensor``) is replaced, and only for triton older than ``INTERPRETER_FIXED_IN``
    (``version``: the triton to decide for, default this one; ``force`` applies it anyway, for tests).
    """
    import triton.runtime.interpreter as interp

    original = getattr(interp, "_patch_lang_tensor", None)
    if original is None:
        return False
    if getattr(original, "_tkcourse_patched", False):
        return True
    if not force and (triton_version() if version is None else version) >= INTERPRETER_FIXED_IN:
        return False

    def _patch_lang_tensor(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", _index)

    _patch_lang_tensor._tkcourse_patched = True
    _patch_lang_tensor.__wrapped__ = original
    interp._patch_lang_tensor = _patch_lang_tensor
    return True


# ---------------------------------------------------------------------------------------------------
# The interpreter, as the tracer uses it
# ---------------------------------------------------------------------------------------------------

#: Builder methods of the interpreter that the tracer wraps for one launch. Loads, stores, tensor
#: descriptor loads/stores and atomic loads/stores all reach memory through the first four (same first
#: arguments in triton 3.6 and 3.9); ``create_addptr`` makes a pointer block.
MEMORY_METHODS = ("create_masked_load", "create_masked_store", "create_atomic_rmw", "create_atomic_cas",
                  "create_addptr")

#: Builder methods that pass a pointer block through unchanged in meaning (a tag on it may follow it).
POINTER_PASSING_METHODS = ("create_splat", "create_broadcast", "create_expand_dims", "create_reshape",
                           "create_trans", "create_permute", "create_select", "create_join", "create_cat")


def interpreter():
    """``triton.runtime.interpreter``, with ``patch_interpreter`` applied (the tracer runs it on a GPU too)."""
    import triton.runtime.interpreter as interp

    patch_interpreter()
    return interp


def interpreter_builder():
    """The interpreter's one builder, whose ``create_*`` methods every kernel operation calls."""
    return interpreter().interpreter_builder


def tensor_handle_type() -> type:
    """The interpreter's ``TensorHandle``: ``TensorHandle(data, dtype)``, a NumPy array (``.data``) and a
    triton dtype (``.dtype``)."""
    return interpreter().TensorHandle


def program_id_reader() -> Callable[[], tuple[int, ...]]:
    """A function that gives the id of the program the interpreter is running (fetched once a launch:
    it is called on every load and store)."""
    b = interpreter_builder()
    return lambda: tuple(int(v) for v in b.grid_idx)


def element_bytes(handle) -> int:
    """Bytes per element that a pointer block's ``TensorHandle`` points to."""
    ty = handle.dtype
    while hasattr(ty, "element_ty"):
        ty = ty.element_ty
    return max(1, getattr(ty, "primitive_bitwidth", 8) // 8)


def interpreted(fn):
    """``fn`` (a Python kernel function) as an ``InterpretedFunction``: launched with ``[grid](...)``."""
    return interpreter().InterpretedFunction(fn)


def is_kernel(obj) -> bool:
    """``obj`` is a kernel one launches with ``[grid]``: ``@triton.jit`` (compiled or interpreted), an
    ``Autotuner`` or ``Heuristics`` (Triton's ``KernelInterface``)."""
    from triton.runtime.jit import KernelInterface

    return isinstance(obj, KernelInterface)


def is_jit(obj) -> bool:
    """``obj`` is a ``JITFunction`` (a compiled-mode ``@triton.jit`` function)."""
    from triton.runtime.jit import JITFunction

    return isinstance(obj, JITFunction)


@contextlib.contextmanager
def builder_wrapped(wrappers: dict[str, Callable]):
    """Replace the interpreter builder's methods for the block: ``wrappers[name](original)`` returns the
    replacement of method ``name`` (one the builder lacks is skipped). Put back as they were afterwards."""
    b = interpreter_builder()
    saved = {n: b.__dict__[n] for n in wrappers if n in b.__dict__}
    orig = {n: getattr(b, n) for n in wrappers if hasattr(b, n)}
    for n, original in orig.items():
        setattr(b, n, wrappers[n](original))
    try:
        yield orig
    finally:
        for n in orig:
            if n in saved:
                setattr(b, n, saved[n])
            else:
                with contextlib.suppress(AttributeError):
                    delattr(b, n)


@contextlib.contextmanager
def grid_recorded(holder: dict):
    """For the block, ``holder["grid"]`` gets each launch's grid as the interpreter sets it."""
    b = interpreter_builder()
    orig = b.set_grid_dim

    def set_grid_dim(nx, ny, nz):
        holder["grid"] = (int(nx), int(ny), int(nz))
        return orig(nx, ny, nz)

    b.set_grid_dim = set_grid_dim
    try:
        yield holder
    finally:
        del b.set_grid_dim


@contextlib.contextmanager
def launches_replaced(jit_run: Callable, interpreted_run: Callable, autotuner_bench: Callable):
    """Replace the launch entry points for the block; each argument gets the original and returns the
    replacement: ``JITFunction.run(self, *args, grid, warmup, **kw)`` (a compiled launch),
    ``InterpretedFunction.run`` (an interpreted one) and ``Autotuner._bench`` (an autotuner's timing
    launches)."""
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import JITFunction

    interp = interpreter()
    orig = JITFunction.run, interp.InterpretedFunction.run, Autotuner._bench
    JITFunction.run = jit_run(orig[0])
    interp.InterpretedFunction.run = interpreted_run(orig[1])
    Autotuner._bench = autotuner_bench(orig[2])
    try:
        yield
    finally:
        JITFunction.run, interp.InterpretedFunction.run, Autotuner._bench = orig


def language_namespaces() -> list:
    """triton.language's modules and the classes they define: what the interpreter patches for a launch
    (and, for a nested ``@jit`` call, never puts back: ``InterpretedFunction.__call__`` in 3.6 to 3.9)."""
    out = []
    for name, m in list(sys.modules.items()):
        if name.startswith("triton.language") and m is not None:
            out.append(m)
            out.extend(v for v in vars(m).values()
                       if isinstance(v, type) and getattr(v, "__module__", "").startswith("triton.language"))
    return out


# ---------------------------------------------------------------------------------------------------
# Wrapped kernels and wrapped tensor arguments
# ---------------------------------------------------------------------------------------------------


def jit_of(kernel):
    """The ``JITFunction`` (or interpreted function) under any ``Autotuner`` or ``Heuristics`` wrappers."""
    from triton.runtime.autotuner import Autotuner, Heuristics

    while isinstance(kernel, (Autotuner, Heuristics)):  # both have arg_names too: unwrap by type
        kernel = kernel.fn
    return kernel


def unwrap(kernel) -> tuple[Callable, list]:
    """The Python function of a ``@triton.jit`` kernel (interpreted or compiled, autotuned or wrapped in
    heuristics) and the ``Autotuner``/``Heuristics`` layers above it, outermost first. TypeError for
    anything else."""
    import inspect

    from triton.runtime.autotuner import Autotuner, Heuristics

    k, layers = kernel, []
    while not inspect.isfunction(k):
        if isinstance(k, (Autotuner, Heuristics)):
            layers.append(k)
        if not hasattr(k, "fn"):
            raise TypeError(f"needs a @triton.jit kernel, got {type(kernel).__name__}")
        k = k.fn
    return k, layers


def layer_defaults(layers, fn, args, kwargs: dict) -> dict:
    """``kwargs`` plus the meta-parameters the layers would set: an ``Autotuner``'s chosen config (or its
    first), a ``Heuristics``' values computed from the arguments by name."""
    import inspect

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


def wrapped_tensor_types() -> tuple[type, ...]:
    """Kernel arguments that wrap a tensor in ``.base``: ``TensorWrapper`` (``reinterpret``) and a host
    ``TensorDescriptor``."""
    from triton.runtime.jit import TensorWrapper
    from triton.tools.tensor_descriptor import TensorDescriptor

    return TensorWrapper, TensorDescriptor


def rewrapped(arg, base):
    """A wrapped tensor argument like ``arg`` around another tensor ``base``."""
    from triton.runtime.jit import TensorWrapper

    if isinstance(arg, TensorWrapper):
        return TensorWrapper(base, arg.dtype)
    return dataclasses.replace(arg, base=base)


# ---------------------------------------------------------------------------------------------------
# Compiled kernels, the driver and the launch (GPU)
# ---------------------------------------------------------------------------------------------------


def compiled_resources(kernel) -> tuple[int, int]:
    """``(registers a thread, shared memory bytes)`` of a ``CompiledKernel`` (from ``jit_fn.warmup``).
    AttributeError, TypeError or KeyError where this Triton keeps them elsewhere."""
    kernel._init_handles()  # loads the binary: n_regs is known after it
    return int(kernel.n_regs), int(kernel.metadata.shared or 0)


def launch_api(compiled) -> bool:
    """Loads ``compiled`` and says whether it has what ``CompiledKernel.run`` needs: ``run``, the
    ``function`` handle and ``packed_metadata`` (what ``CompiledKernel.__getitem__`` passes in 3.6 and 3.7)."""
    try:
        compiled._init_handles()
        return bool(compiled.run) and compiled.function is not None and compiled.packed_metadata is not None
    except AttributeError:
        return False


def launch_handles(compiled) -> tuple:
    """``(run, function, packed_metadata)`` of a loaded ``CompiledKernel`` (``launch_api`` said yes): what
    ``CompiledKernel.run(gx, gy, gz, stream, function, packed_metadata, ..., *args)`` takes."""
    return compiled.run, compiled.function, compiled.packed_metadata


def driver_stream() -> tuple[int, Callable[[int], int]]:
    """``(current device, current-stream lookup)`` of the active driver: ``lookup(device)`` is the handle
    of the stream a launch goes to now (looked up on each launch: a CUDA-graph capture changes it)."""
    from triton.runtime import driver

    active = driver.active
    return active.get_current_device(), active.get_current_stream


def stream_lookup() -> Callable[[int], int]:
    """``lookup(device_index)``: the current stream's handle (0 in the interpreter, which has none)."""
    if mode.INTERPRET:
        return lambda index: 0
    from triton.runtime import driver

    return driver.active.get_current_stream


def hooks_on() -> bool:
    """A launch hook is set, such as a profiler's (triton 3.6: a callable or None; 3.7: a ``HookChain``,
    empty by default): then launches must go through ``kernel[grid]``, which calls it. Cheap (a lean
    launch asks on every call): no triton imported yet means no hook set."""
    knobs = getattr(sys.modules.get("triton"), "knobs", None)
    hook = getattr(getattr(knobs, "runtime", None), "launch_enter_hook", None)
    return hook is not None and bool(getattr(hook, "calls", True))


def direct_launcher(compiled):
    """``(C launch function, cooperative, pdl, {position: tensordesc metadata})`` of triton 3.6's CUDA
    launcher, or None where this launch cannot skip ``run`` (another Triton or backend, a kernel that
    needs scratch memory allocated per launch, descriptors decomposed by the frontend)."""
    run, md = compiled.run, compiled.metadata
    if getattr(md, "global_scratch_size", 1) or getattr(md, "profile_scratch_size", 1):
        return None
    launch = getattr(run, "launch", None)
    coop, pdl = getattr(run, "launch_cooperative_grid", None), getattr(run, "launch_pdl", None)
    sig = list(compiled.src.signature.values())
    positions = [i for i, s in enumerate(sig) if isinstance(s, str) and s.startswith("tensordesc")]
    metas = {}
    if positions:  # the launcher is triton's wrap_handle_tensordesc closure around the C function
        cells = dict(zip(getattr(getattr(launch, "__code__", None), "co_freevars", ()),
                         getattr(launch, "__closure__", None) or ()))
        launch = cells["launcher"].cell_contents if "launcher" in cells else None
        given = getattr(md, "tensordesc_meta", None)
        if not given or len(given) != len(positions):
            return None
        metas = dict(zip(positions, given))
    if type(launch).__name__ != "builtin_function_or_method" or coop is None or pdl is None:
        return None
    return launch, coop, pdl, metas


def encode_descriptor(template, meta) -> tuple:
    """The launcher arguments of a host-made ``TensorDescriptor`` (its encoded CUtensorMap, then shape
    and strides), as triton 3.6's launcher makes them for descriptor metadata ``meta``."""
    from triton.backends.nvidia.driver import make_tensordesc_arg

    return tuple(make_tensordesc_arg(template, meta))


if mode.INTERPRET:  # before any kernel runs there: importing tkcourse imports this module
    patch_interpreter()


# ---------------------------------------------------------------------------------------------------
# Compiling for a GPU on a machine without one (the graders' front-end check)
# ---------------------------------------------------------------------------------------------------

#: The GPU a kernel's front end is compiled for when none is here: an H100/H200 (sm_90), the course's.
FRONT_END_TARGET = ("cuda", 90, 32)


def launch_signature(fn, args, kwargs) -> tuple[dict, dict] | None:
    """Triton's signature of one launch of the Python kernel function ``fn``: ``{param: type}`` (``"*fp16"``,
    ``"i32"``, ``"constexpr"``, from triton's own ``mangle_type``) and ``{param: value}`` of its constexprs
    (defaults filled in). Launch options (``num_warps``, ...) are left out. None where the arguments do not
    bind to ``fn``'s parameters."""
    import inspect

    from triton.runtime.jit import mangle_type

    sig = inspect.signature(fn)
    try:
        bound = sig.bind_partial(*args, **{k: v for k, v in kwargs.items() if k in sig.parameters})
    except TypeError:
        return None
    bound.apply_defaults()
    types, constexprs = {}, {}
    for name, param in sig.parameters.items():
        if name not in bound.arguments:
            return None  # a parameter with no value and no default: not a launch Triton would take either
        value = bound.arguments[name]
        annotation = param.annotation
        said = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
        is_constexpr = "constexpr" in said
        types[name] = "constexpr" if is_constexpr else mangle_type(value)
        if types[name] == "constexpr":
            constexprs[name] = getattr(value, "value", value)  # a tl.constexpr(...) passed as such
    return types, constexprs


def front_end_compile(kernel, types: dict, constexprs: dict) -> None:
    """Run Triton's front end (Python to TTIR: parsing, types, shapes) on the compiled-mode ``kernel`` for
    ``FRONT_END_TARGET``, with no GPU: raises what a GPU's compiler raises there (a ``CompilationError``,
    say), returns None when it compiles."""
    from triton._C.libtriton import ir
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import CUDABackend
    from triton.compiler import ASTSource

    target = GPUTarget(*FRONT_END_TARGET)
    backend = CUDABackend(target)
    options = backend.parse_options({})
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    source = ASTSource(kernel, types, constexprs=constexprs)
    source.make_ir(target, options, backend.get_codegen_implementation(options), backend.get_module_map(), context)


def compile_errors() -> tuple[type, ...]:
    """What Triton's front end raises for a kernel it refuses (``CompilationError`` and its kinds)."""
    from triton.compiler.errors import CompilationError

    return (CompilationError,)
