"""The course's fast kernels, named by kernel: the path a benchmark measures and a model calls.

One home per kernel, each behind its lesson's public API (same function names and arguments as
``solutions.<lesson>``), each launched the lean way (``lean``, the mechanism lesson 08 teaches):

- ``vector_add.add`` (lesson 01), ``softmax.softmax`` (02), ``matmul.matmul`` (03; its small-problem
  split-K and TMA kernels in ``matmul_small``), ``online_softmax.softmax`` (05; the split and one-read
  kernels in ``online_softmax_split`` and ``online_softmax_one_read``), ``attention.attention_forward``,
  ``attention.attention_backward`` and ``attention.attention`` (06 and 07; the tuned kernels in
  ``attention_forward`` and ``attention_backward``), ``rmsnorm.rmsnorm`` and
  ``decode_attention.decode_attention`` (09; its split plan in ``decode_plan``), ``int4_matmul.matmul``
  (10).

Three kernels of a decode step have no lesson and live here alone, each with its torch reference:
``rope.rope`` (rotary position embedding on q and k in one launch, with ``rope.rope_tables``),
``swiglu.swiglu`` (the MLP's ``silu(gate) * up``, of one fused projection output or two tensors) and
``kv_cache.write`` (a step's keys and values into lesson 09's paged cache, in one launch).

The lessons' files (``solutions/softmax.py``, ...) stay the short kernels a learner writes and
compares with; this package sits above them all and imports only what they export.

Each function takes the arguments its lesson's does and returns the same tensors. What changes is
the host side (``lean.Lean``): the key of a call is a tuple of what the compile depends on (dtypes,
shapes, strides, each pointer's ``data_ptr() & 15``, the device, the options). A key seen before
was checked then, so the call skips the argument checks and the config choice, and launches the
kept ``CompiledKernel``. A new key takes the lesson's path: the same checks and errors, then
``kernel[grid]`` (and the autotuner, once). Outputs are new tensors, which PyTorch's caching
allocator hands out 512-byte aligned, so their alignment never varies.

Two habits of the hot paths, each worth microseconds a call on the H200's host
(``research/launch/host_breakdown.py``): outputs come from ``torch.empty_like`` (of the input, or
of a one-element template expanded to the output's shape), about half the cost of
``torch.empty(shape, dtype=..., device=...)``, whose keyword arguments are parsed on every call;
and a lean entry gets addresses as ints (``data_ptr()``), where a tensor would cost the launcher a
driver query (``cuPointerGetAttribute``) per pointer to check that it is on the GPU. The key has
checked the device already.
"""

import contextlib

from . import (
    attention,
    decode_attention,
    int4_matmul,
    kv_cache,
    matmul,
    online_softmax,
    rmsnorm,
    rope,
    softmax,
    swiglu,
    vector_add,
)

_MODULES = (vector_add, softmax, online_softmax, matmul, attention, rmsnorm, decode_attention, int4_matmul, rope,
            swiglu, kv_cache)

#: Every lean launcher's table by name, for tests and lesson 08 (entries, compiles).
LEANS = {name: lean for m in _MODULES for name, lean in m.LEANS.items()}


def forget():
    """Drop every kept entry (with its slots) and workspace: the next call of each key is a first call
    again (for tests and probes that compare launch paths; compiled kernels stay in Triton's cache)."""
    for m in _MODULES:
        m.forget()


#: Each module's switch of programmatic dependent launch (``lean.pdl_meta``), read when an entry is made.
PDL_SWITCHES = ((matmul, "MATMUL_PDL"), (int4_matmul, "INT4_PDL"), (rmsnorm, "RMSNORM_PDL"), (rope, "ROPE_PDL"),
                (swiglu, "SWIGLU_PDL"), (kv_cache, "KV_PDL"), (decode_attention, "DECODE_PDL"))


@contextlib.contextmanager
def without_pdl():
    """Inside the block, every kernel launches without programmatic dependent launch (entries are made
    anew on the way in and out). A profiler then times each kernel alone: launched with it, a kernel's
    programs wait on the SMs for the kernel before, and that wait counts as its time."""
    saved = [getattr(m, name) for m, name in PDL_SWITCHES]
    for m, name in PDL_SWITCHES:
        setattr(m, name, False)
    forget()
    try:
        yield
    finally:
        for (m, name), v in zip(PDL_SWITCHES, saved):
            setattr(m, name, v)
        forget()
