"""Triton's internals in one module (``tkcourse.triton_internals``): each version gate under each version the
course supports (3.6 on the H200, the pinned 3.7.1 on the CPU, 3.8 next), simulated by the version string
where this machine has another, and the rule that nothing else reaches below Triton's public API."""

from __future__ import annotations

import re
import types
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl

from tkcourse import mode
from tkcourse import triton_internals as ti

ROOT = Path(__file__).resolve().parents[1]
H200, PIN, NEXT = "3.6.0", "3.7.1", "3.8.0"


@pytest.mark.parametrize("text, expected", [(H200, (3, 6)), (PIN, (3, 7)), (NEXT, (3, 8)),
                                            ("3.6.0+git1a2b3c", (3, 6)), ("main", ti.INTERPRETER_FIXED_IN)])
def test_the_version_is_read(text, expected):
    assert ti.triton_version(text) == expected


@pytest.fixture
def unpatched_interpreter(monkeypatch):
    """The interpreter's ``_patch_lang_tensor`` as triton ships it (put back afterwards)."""
    import triton.runtime.interpreter as interp

    original = getattr(interp._patch_lang_tensor, "__wrapped__", interp._patch_lang_tensor)
    monkeypatch.setattr(interp, "_patch_lang_tensor", original)
    return interp


@pytest.mark.parametrize("version, applies", [(H200, True), (PIN, False), (NEXT, False)])
def test_the_interpreter_patch_applies_before_3_7_only(unpatched_interpreter, monkeypatch, version, applies):
    monkeypatch.setattr(triton, "__version__", version)
    assert ti.patch_interpreter() is applies
    assert getattr(unpatched_interpreter._patch_lang_tensor, "_tkcourse_patched", False) is applies


def test_the_patched_index_squeezes_a_one_element_array():
    """What the patch installs: ``int()`` of the one element, as triton 3.7's interpreter does."""
    np = pytest.importorskip("numpy")
    tensor = types.SimpleNamespace(handle=types.SimpleNamespace(data=np.array([7], dtype=np.int32)))
    assert ti._index(tensor) == 7 and isinstance(ti._index(tensor), int)
    tensor.handle.data = np.int64(5)
    assert ti._index(tensor) == 5


@pytest.mark.parametrize("version, direct", [(H200, True), ("3.6.1", True), (PIN, False), (NEXT, False)])
def test_the_direct_launch_is_triton_3_6s_only(monkeypatch, version, direct):
    monkeypatch.setattr(triton, "__version__", version)
    assert ti.direct_launch() is direct
    assert ti.direct_launch(ti.triton_version(version)) is direct


def _knobs(hook):
    return types.SimpleNamespace(runtime=types.SimpleNamespace(launch_enter_hook=hook))


class _HookChain:  # triton 3.7's shape: an object with a list of calls, empty by default
    def __init__(self, calls):
        self.calls = calls


@pytest.mark.parametrize("hook, on", [
    (None, False),  # 3.6, nothing set
    (print, True),  # 3.6, a profiler's callable
    (_HookChain([]), False),  # 3.7, the default empty chain
    (_HookChain([print]), True),  # 3.7, a profiler added a call
])
def test_a_launch_hook_is_seen_in_both_shapes(monkeypatch, hook, on):
    monkeypatch.setattr(triton, "knobs", _knobs(hook), raising=False)
    assert ti.hooks_on() is on


def test_no_launch_hook_on_this_triton_by_default_or_without_knobs(monkeypatch):
    assert ti.hooks_on() is False
    monkeypatch.delattr(triton, "knobs", raising=False)
    assert ti.hooks_on() is False


@triton.jit
def _double(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


def test_wrapped_kernels_unwrap():
    heur = triton.heuristics({"BLOCK": lambda a: 16 if a["n"] < 100 else 64})(_double)
    tuned = triton.autotune([triton.Config({}, num_warps=1)], key=["n"])(heur)
    assert ti.jit_of(tuned) is _double and ti.jit_of(_double) is _double
    fn, layers = ti.unwrap(tuned)
    assert fn.__name__ == "_double" and [type(x).__name__ for x in layers] == ["Autotuner", "Heuristics"]
    assert ti.layer_defaults(layers, fn, (None, 10), {}) == {"BLOCK": 16}
    assert ti.is_kernel(tuned) and ti.is_kernel(_double) and not ti.is_kernel(fn)
    with pytest.raises(TypeError, match="triton.jit"):
        ti.unwrap(42)


def _compiled(launch, scratch=0, signature=("*fp32", "i32"), tensordesc_meta=None):
    """A stand-in for a ``CompiledKernel`` with triton 3.6's launcher shape."""
    run = types.SimpleNamespace(launch=launch, launch_cooperative_grid=False, launch_pdl=False)
    md = types.SimpleNamespace(global_scratch_size=scratch, profile_scratch_size=0, tensordesc_meta=tensordesc_meta)
    return types.SimpleNamespace(run=run, metadata=md, src=types.SimpleNamespace(
        signature=dict(enumerate(signature))))


def test_the_direct_launcher_is_found_where_3_6_keeps_it():
    assert ti.direct_launcher(_compiled(abs)) == (abs, False, False, {})  # a C function: 3.6's launch
    assert ti.direct_launcher(_compiled(abs, scratch=64)) is None  # scratch memory a launch: use run


def test_no_direct_launcher_elsewhere():
    assert ti.direct_launcher(_compiled(lambda *a: None)) is None  # a Python launcher: not 3.6's
    assert ti.direct_launcher(_compiled(None)) is None  # no .launch at all


def test_the_direct_launcher_sees_through_the_descriptor_wrapper():
    def wrap_handle_tensordesc(launcher):  # triton's closure around the C function
        def inner(*args):
            return launcher(*args)
        return inner

    compiled = _compiled(wrap_handle_tensordesc(abs), signature=("tensordesc<fp16[64, 64]>", "i32"),
                         tensordesc_meta=[{"swizzle": 128}])
    assert ti.direct_launcher(compiled) == (abs, False, False, {0: {"swizzle": 128}})
    compiled.metadata.tensordesc_meta = None  # descriptors the frontend decomposed: no metadata to encode
    assert ti.direct_launcher(compiled) is None


def test_compiled_kernels_resources_and_launch_api():
    loaded = []
    kernel = types.SimpleNamespace(_init_handles=lambda: loaded.append(1), n_regs=40,
                                   metadata=types.SimpleNamespace(shared=1024))
    assert ti.compiled_resources(kernel) == (40, 1024) and loaded
    with pytest.raises(AttributeError):
        ti.compiled_resources(types.SimpleNamespace(_init_handles=lambda: None))
    kernel.run, kernel.function, kernel.packed_metadata = print, 1, ()
    assert ti.launch_api(kernel)
    assert not ti.launch_api(types.SimpleNamespace(run=print))  # no _init_handles: an older Triton


@pytest.mark.skipif(not mode.INTERPRET, reason="the interpreter's builder: CPU mode")
def test_builder_methods_are_wrapped_for_the_block_only():
    b = ti.interpreter_builder()
    before = b.create_masked_store
    seen = []

    def count(orig):
        def f(*args, **kwargs):
            seen.append(ti.program_id_reader()())
            return orig(*args, **kwargs)
        return f

    x = torch.arange(40, dtype=torch.float32)
    with ti.builder_wrapped({"create_masked_store": count, "no_such_method": count}) as wrapped:
        assert set(wrapped) == {"create_masked_store"}
        _double[(3,)](x, 40, BLOCK=16)
    assert b.create_masked_store == before and sorted(seen) == [(0, 0, 0), (1, 0, 0), (2, 0, 0)]
    assert torch.equal(x, torch.arange(40, dtype=torch.float32) * 2)
    assert ti.stream_lookup()(0) == 0  # no streams in the interpreter


#: What only triton_internals may touch: Triton's private modules and the attributes the course reads.
PRIVATE = re.compile(r"triton\.(runtime|backends|_C|compiler)\b|\bknobs\b|_init_handles|interpreter_builder|"
                     r"TensorWrapper|launch_enter_hook|\.n_regs\b|packed_metadata|make_tensordesc_arg|"
                     r"triton\.__version__\.startswith")


def _private_lines(text: str) -> list[tuple[int, str]]:
    """Lines of code (comments and ``docstring`` mentions left out) that touch a private Triton object."""
    found = []
    for no, line in enumerate(text.splitlines(), 1):
        code = re.sub(r"\b(ti|triton_internals)\.\w+", "", line.split("#", 1)[0])  # the module's own names
        if PRIVATE.search(code) and '"""' not in line and "``" not in code:
            found.append((no, line.strip()))
    return found


def test_only_triton_internals_reaches_below_tritons_api():
    """tkcourse/, solutions/ (the lean launch, occupancy), exercises/ and benchmarks/ reach Triton's private
    objects through the one module."""
    files = [p for folder in ("tkcourse", "solutions", "exercises", "benchmarks") for p in (ROOT / folder).rglob("*.py")
             if p.name != "triton_internals.py"]
    found = [f"{p.relative_to(ROOT)}:{no}: {line}" for p in files for no, line in _private_lines(p.read_text())]
    assert not found, "use tkcourse.triton_internals:\n" + "\n".join(found)


def test_the_search_finds_a_private_access():
    text = ("from triton.runtime import driver\nx = k.n_regs  # regs\n# triton.runtime in a comment\n"
            "b = ti.interpreter_builder()\n")
    assert [no for no, _ in _private_lines(text)] == [1, 2]


on_a_gpu = pytest.mark.skipif(mode.INTERPRET, reason="compiled kernels and the CUDA driver: GPU only")


@on_a_gpu
def test_compiled_kernel_internals_on_a_gpu():
    """On this GPU's triton: a compiled kernel's resources and launch handles, the driver's stream, and
    the direct launcher exactly where the version gate says (triton 3.6: its C function)."""
    x = torch.arange(40, dtype=torch.float32, device="cuda")
    compiled = _double[(3,)](x, 40, BLOCK=16)
    regs, smem = ti.compiled_resources(compiled)
    assert regs > 0 and smem >= 0 and ti.launch_api(compiled)
    device, lookup = ti.driver_stream()
    assert device == torch.cuda.current_device()
    assert lookup(device) == torch.cuda.current_stream().cuda_stream == ti.stream_lookup()(device)
    direct = ti.direct_launcher(compiled)
    if ti.direct_launch():
        assert direct is not None and type(direct[0]).__name__ == "builtin_function_or_method" and direct[3] == {}
    torch.cuda.synchronize()
    assert torch.equal(x, torch.arange(40, dtype=torch.float32, device="cuda") * 2)
