"""Lesson 08: the reference kernels behind lean launch paths, with the lessons' APIs.

Each function takes the arguments its lesson's does and returns the same tensors; the kernels are
the lessons' own (and ``launch_matmul_small``'s split-K for small products). What changes is the
host side (``launch_lean.Lean``): the key of a call is a tuple of what the compile depends on
(dtypes, shapes, strides, each pointer's ``data_ptr() & 15``, the device, the options). A key seen
before was checked then, so the call skips the argument checks and the config choice, and
launches the kept ``CompiledKernel``. A new key takes the lesson's path: the same checks and
errors, then ``kernel[grid]`` (and the autotuner, once). Outputs are new tensors, which PyTorch's
caching allocator hands out 512-byte aligned, so their alignment never varies.

Two habits of the hot paths, each worth microseconds a call on the H200's host
(``research/launch/host_breakdown.py``): outputs come from ``torch.empty_like`` (of the input, or
of a one-element template expanded to the output's shape), about half the cost of
``torch.empty(shape, dtype=..., device=...)``, whose keyword arguments are parsed on every call;
and a lean entry gets addresses as ints (``data_ptr()``), where a tensor would cost the launcher a
driver query (``cuPointerGetAttribute``) per pointer to check that it is on the GPU. The key has
checked the device already.
"""

from __future__ import annotations

import torch
import triton

from tkcourse.mode import INTERPRET, validate

from . import launch_lean
from . import launch_matmul_small as small
from . import matmul as mm
from . import online_softmax as osm
from . import online_softmax_one_read as one
from . import softmax as sm
from . import vector_add as va
from ._checks import power_of_two
from .launch_lean import Lean, _hooks_on, tensor_key
from .launch_lean import tensor_key as _t
from .launch_lean_attention import LEANS as _ATTENTION_LEANS
from .launch_lean_attention import attention, attention_backward, attention_forward  # noqa: F401 (one API)
from .online_softmax_split import exchange_span as split_exchange_span
from .online_softmax_split import split_plan

__all__ = ["add", "softmax", "online_softmax", "matmul", "attention_forward", "attention", "attention_backward",
           "LEANS", "kept_slots", "matmul_entries", "forget"]


# ---- lesson 01 ----
_ADD = Lean(va._add_kernel)


def add(x, y, BLOCK=1024):
    """``x + y``, as ``vector_add.add``."""
    try:
        key = (_t(x), _t(y), BLOCK, type(BLOCK))
    except AttributeError:  # not tensors: the lesson's checks say what is wrong
        return va.add(x, y, BLOCK)
    e = _ADD.get(key)
    if e is not None:
        x, y = x.contiguous(), y.contiguous()
        out = torch.empty_like(x)
        if e.lean:  # addresses as ints: the launcher then skips a driver query per pointer (module docstring)
            e(x.data_ptr(), y.data_ptr(), out.data_ptr())
        else:
            e(x, y, out)
        return out
    validate(x, y, names=["x", "y"], ndim=1, same_shape=True)
    BLOCK = power_of_two("BLOCK", BLOCK)
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    _ADD.first(key, (x, y, out), (x.numel(),), (triton.cdiv(x.numel(), BLOCK),), dict(BLOCK=BLOCK))
    return out


# ---- lesson 02 ----
_SOFTMAX = Lean(sm.softmax_kernel)
#: Rows of at most SHORT_ROW_BLOCK columns get a program each with SHORT_ROW_WARPS warps instead of
#: the lesson's persistent grid of 4 warps: with the launch cost gone, a short row's kernel is bound
#: by how many loads are in flight, and a program per row puts every row's load in flight at once
#: (on the H200, 4096 x 1024 fp16: 2 warps a row beat the persistent grid; research/launch/tune_probe.py).
SHORT_ROW_BLOCK = 1024
SHORT_ROW_WARPS = 2


def softmax(x):
    """Softmax over the last dim of a 2-D ``x``, as ``softmax.softmax``."""
    try:
        key = _t(x)
    except AttributeError:
        return sm.softmax(x)
    e = _SOFTMAX.get(key)
    if e is not None:
        if x.stride(1) != 1:
            x = x.contiguous()
        out = torch.empty_like(x)  # (the cheapest allocation torch has: see the module's docstring)
        if e.lean:
            e(x.data_ptr(), out.data_ptr())
        else:
            e(x, out)
        return out
    sm.softmax(x)  # the lesson's checks and errors, and its launch this once
    if x.stride(1) != 1:
        x = x.contiguous()
    out = torch.empty_like(x)  # as every later call makes it: the same row stride
    n_rows, n_cols = x.shape
    BLOCK = triton.next_power_of_2(n_cols)
    warps, stages = sm._num_warps(BLOCK), sm._num_stages(BLOCK, x.element_size())
    if BLOCK <= SHORT_ROW_BLOCK and not INTERPRET:
        grid, warps = (n_rows,), SHORT_ROW_WARPS
    else:
        grid = (sm.num_programs(x, out, BLOCK, warps, stages),)
    _SOFTMAX.first(key, (x, out), (x.stride(0), out.stride(0), n_rows, n_cols), grid,
                   dict(BLOCK=BLOCK, NUM_STAGES=stages, num_warps=warps))  # the same result, written again
    return out


# ---- lesson 05: the one-read kernels on a GPU, the lesson's kernel for one part a row ----
_ONE_READ = Lean(one.one_read_softmax_kernel)
_LANES = Lean(one.lanes_softmax_kernel)
_ONLINE = Lean(osm._online_softmax_kernel)


def online_softmax(x, parts=None, block=None, one_read=True):
    """Softmax of rows of any length, as ``online_softmax_one_read.softmax`` (lesson 05's fast path).

    Explicit ``parts``/``block``/``one_read=False`` and rows that need the split step take the step
    modules' ordinary launch. A key's lean entry sits in ``_ONLINE_HOT`` with the ints it passes (the
    one-read kernels' ints sit between their pointers, so they go with every call) and its exchange
    slots, one set per stream, kept from call to call: the kernels' words carry a tag that alternates
    from launch to launch (``online_softmax_one_read.launch_tag``), so kept slots need no memset a
    call (``zero_()`` before each launch took the host's time a call from 1.1-1.2x torch's to
    1.8-2.1x on the H200: ``research/launch/slots_probe.py``), eagerly or in a CUDA graph."""
    if parts is not None or block is not None or not one_read:
        return one.softmax(x, parts=parts, block=block, one_read=one_read)
    try:
        key = _t(x)
    except AttributeError:
        return one.softmax(x)
    hot = None if _hooks_on() else _ONLINE_HOT.get(key)
    if hot is None:
        return _online_table(key, x)
    e, ints, by_stream = hot
    if x.stride(1) != 1:
        x = x.contiguous()
    out = torch.empty_like(x)
    stream = _stream_of(key[4])
    if by_stream is None:  # one part a row: the lesson's kernel, no exchange
        e.on(stream, x.data_ptr(), out.data_ptr())
        return out
    slots = by_stream.get(stream)
    if slots is None:
        slots = _new_slots(by_stream, stream, e.info[1], x.device)
    e.on(stream, x.data_ptr(), out.data_ptr(), *ints, slots.data_ptr())
    return out


_ONLINE_HOT: dict = {}  # key -> (lean entry, the ints between its pointers, {stream: slots} or None)


def _online_table(key, x):
    """A key with no hot entry: an entry of the tables that launches with tensors (the interpreter, a
    launch hook), or the first call, which keeps a lean entry in ``_ONLINE_HOT``."""
    e = _ONE_READ.get(key) or _LANES.get(key) or _ONLINE.get(key)
    if e is None:
        return _online_first(key, x)
    if x.stride(1) != 1:
        x = x.contiguous()
    out = torch.empty_like(x)
    kind = e.info[0]
    if kind == "rows":
        e(x, out)
        return out
    slots = torch.zeros(e.info[1], dtype=torch.int64, device=x.device)
    if kind == "one_read":
        e(x, out, x.stride(0), out.stride(0), x.shape[1], slots)
    else:
        e(x, out, x.stride(0), out.stride(0), *x.shape, slots)
    return out


def _online_first(key, x):
    validate(x, names=["x"], ndim=2)
    if x.stride(1) != 1:
        x = x.contiguous()
    n_rows, n_cols = x.shape
    out = torch.empty_like(x)
    plan = one.one_read_plan(n_cols, x.device)
    if plan is None:
        parts, block = split_plan(n_cols, x.element_size())
        if parts > 1:  # long rows with no one-read plan: the split step, ordinary launch
            return one.softmax(x)
        e = _ONLINE.first(key, (x, out), (x.stride(0), out.stride(0), n_cols), (n_rows,),
                          dict(BLOCK=block, NUM_STAGES=osm.NUM_STAGES, num_warps=osm.NUM_WARPS), info=("rows",))
        _keep_hot(key, e, (), None)
        return out
    parts, part, warps = plan
    lanes = one.persistent_lanes(x, out, parts, part, warps)
    meta = dict(PARTS=parts, PART=part, FALLBACK_BLOCK=32 * warps, SPAN=split_exchange_span(warps), num_warps=warps)
    words = one.slot_words(n_rows, parts)
    slots = torch.zeros(words, dtype=torch.int64, device=x.device)
    static = (one.MAX_POLLS, split_exchange_span(warps))
    if lanes is None:
        ints = (x.stride(0), out.stride(0), n_cols)
        e = _ONE_READ.first(key, (x, out, *ints, slots), static, (parts * n_rows,), meta, info=("one_read", words))
    else:
        ints = (x.stride(0), out.stride(0), n_rows, n_cols)
        e = _LANES.first(key, (x, out, *ints, slots), static, (parts * lanes,), meta, info=("lanes", words))
    by_stream: dict = {}
    _keep_hot(key, e, ints, by_stream)
    by_stream[_stream_of(x.get_device())] = slots  # launched once already, as kept slots are
    return out


def _keep_hot(key, e, ints, by_stream):
    if not e.lean:  # launches with tensors: the tables keep it
        return
    if len(_ONLINE_HOT) >= 1024:  # bounded as Lean's own tables are
        _ONLINE_HOT.clear()
    _ONLINE_HOT[key] = (e, ints, by_stream)


def kept_slots(x=None) -> list:
    """The exchange slots the lean one-read entries keep (one set per stream), of the entry for
    inputs like ``x``, or of all; for tests and probes."""
    key = None if x is None else tensor_key(x)
    return [slots for k, (_, _, by_stream) in _ONLINE_HOT.items() if by_stream and key in (None, k)
            for slots in by_stream.values()]


def _new_slots(by_stream, stream, words, device):
    """Zeroed exchange slots for a stream that has none yet (two launches on one stream never overlap,
    so they may share a set; a CUDA graph captured on its own stream gets its own)."""
    if len(by_stream) >= 64:  # streams come and go: bounded
        by_stream.clear()
    slots = by_stream[stream] = torch.zeros(words, dtype=torch.int64, device=device)
    return slots


# ---- lesson 03: split-K for small products, the lesson's autotuned kernel for large ones ----
_MM_SMALL = Lean(small._matmul_small_autotuned or small._matmul_split_k_kernel)  # tuned once per key
_MM_FIXED = Lean(small._matmul_split_k_kernel)  # tiny products, or a config given
_MM_LARGE = Lean(mm._matmul_autotuned)
_MM_TMA = Lean(small.matmul_tma_kernel)  # small products on triton 3.6: TMA loads, descriptors kept
#: Small products take the TMA kernel where host-made descriptors are cheap (``launch_lean.DIRECT``):
#: its loads need no address arithmetic, which at these sizes is a share of the kernel's time.
MATMUL_TMA = launch_lean.DIRECT
#: The TMA kernel launched with programmatic dependent launch (``launch_pdl``, on GPUs that have it:
#: ``launch_lean.pdl_ok``; the kernel's ``PDL`` says what overlaps). On the H200, eight matmuls in
#: one CUDA graph took 5.7 us each with it, 6.3 without (1024^3; 3.3 against 3.7 at 512^3); one call
#: alone, eager or replayed, the same (``research/launch/pdl_probe.py``, logs ``pdl_probe_*``).
#: Read when a key's entry is made (``forget()`` after changing it).
MATMUL_PDL = True


def _stream_of(device_index):
    """The current stream's handle (the split-K workspace belongs to a stream); 0 in the interpreter."""
    global _current_stream
    if _current_stream is None:
        if INTERPRET:
            _current_stream = lambda index: 0  # noqa: E731
        else:
            from triton.runtime import driver

            _current_stream = driver.active.get_current_stream
    return _current_stream(device_index)


_current_stream = None  # the driver's stream lookup, found on the first call


def matmul(a, b, config=None):
    """``a @ b``, as ``matmul.matmul``; ``config`` (the lesson's keys) launches exactly that config."""
    try:
        key = (_t(a), _t(b)) if config is None else (_t(a), _t(b), tuple(config.items()),
                                                      tuple(map(type, config.values())))
        hot = None if _hooks_on() else _MM_HOT.get(key)  # the lookup hashes: TypeError for an unhashable value
    except (AttributeError, TypeError):  # not tensors, or not a dict of plain values: the lesson's errors
        return mm.matmul(a, b, config)
    if hot is None:
        e = _MM_TMA.get(key) or _MM_SMALL.get(key) or _MM_FIXED.get(key) or _MM_LARGE.get(key)
        if e is None:
            return _matmul_first(key, a, b, config)
        hot = _hot_entry(key, e, a, b)
    e, template, ws = hot
    c = torch.empty_like(template)
    if ws is None:  # the lesson's kernel: no workspace
        e(a, b, c)
    elif ws is True:  # split-K: the workspace of this stream
        stream = _stream_of(a.get_device())
        w = _MM_WS.get((key, stream))
        if w is None:
            w = _MM_WS[(key, stream)] = small.workspace(a.shape[0], b.shape[1], a.device, stream)
        e(a, b, c, *w)
    elif ws == "tma":  # host-made descriptors: from the tensors, by a direct entry, or made here
        if e.tensor_descriptors:
            e(a, b, c)
        else:
            e(*small.tma_descriptors(a, b, c, e.meta))
    else:  # SPLIT_K = 1: a workspace argument the kernel never touches
        e(a, b, c, *ws)
    return c


_MM_HOT: dict = {}  # key -> (entry, C's template, workspace), whichever of the three Leans made the entry
_MM_WS: dict = {}  # (key, stream) -> that stream's split-K workspace for the key's (M, N)


def _hot_entry(key, e, a, b):
    """``(entry, template, workspace)`` of a key, kept in ``_MM_HOT`` for a lean entry. ``template`` is
    one element expanded to C's shape (no memory of C's size): ``torch.empty_like`` of it gives a new
    contiguous C, the cheapest allocation torch has (``torch.empty(shape, dtype=, device=)`` costs
    about twice as much: its arguments are parsed). ``workspace``: None for the lesson's kernel, True
    for split-K (one per stream), the kept one where SPLIT_K = 1 (passed, never touched)."""
    M, N = a.shape[0], b.shape[1]
    template = torch.empty((), dtype=a.dtype, device=a.device).expand(M, N)
    ws = None
    if e.info == "tma":
        ws = "tma"
    elif e.info:
        ws = True if e.meta.get("SPLIT_K", 1) > 1 else small.workspace(M, N, a.device, _stream_of(a.get_device()))
    hot = (e, template, ws)
    if e.lean:
        if len(_MM_HOT) >= 1024:  # bounded as Lean's own tables are
            _MM_HOT.clear()
            _MM_WS.clear()
        _MM_HOT[key] = hot  # one lookup from now on
    return hot


def _matmul_first(key, a, b, config):
    validate(a, b, names=["a", "b"], ndim=2)
    spans = [sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride())) for t in (a, b)]
    if a.shape[1] != b.shape[0] or max(spans) >= 2**31:
        return mm.matmul(a, b, config)  # raises the lesson's error
    cfg = None if config is None else mm._check_config(config)
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    ints = (M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    mnk = M * N * K
    if cfg is None and not INTERPRET and MATMUL_TMA and mnk <= small.TMA_MAX_MNK and small.tma_ok(a, b):
        pdl = MATMUL_PDL and launch_lean.pdl_ok(a.device)
        meta = dict(small.tma_config(mnk), PDL=pdl, launch_pdl=pdl)
        grid = (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)
        _MM_TMA.first(key, tuple(small.tma_descriptors(a, b, c, meta)), (M, N, K), grid, meta, info="tma",
                      templates=lambda m: dict(enumerate(small.tma_descriptors(a, b, c, m))))
        return c
    if cfg is None and not INTERPRET and mnk > small.SMALL_MAX_MNK:
        _MM_LARGE.first(key, (a, b, c), ints, lambda m: (triton.cdiv(M, m["BLOCK_M"]) * triton.cdiv(N, m["BLOCK_N"]),))
        return c
    if cfg is not None:  # the lesson's config keys; SPLIT_K = 1 is the lesson's kernel
        lean, meta = _MM_FIXED, dict(cfg, SPLIT_K=1)
    elif INTERPRET:
        lean, meta = _MM_FIXED, dict(mm.DEFAULT_INTERPRETER_CONFIG, SPLIT_K=1)
    elif mnk < small.TUNE_MIN_MNK:
        lean, meta = _MM_FIXED, dict(small.FIXED_CONFIG)
    else:
        lean, meta = _MM_SMALL, {}
    ws = small.workspace(M, N, a.device, _stream_of(a.get_device()))
    lean.first(key, (a, b, c, *ws), ints, small.grid, meta, info=True)
    return c


def matmul_entries() -> list:
    """``(entry, C's template, workspace)`` of each matmul key with a kept hot path, oldest first (see
    ``_hot_entry``); for tests and probes."""
    return list(_MM_HOT.values())


def forget():
    """Drop every kept entry (with its slots) and workspace: the next call of each key is a first call
    again (for tests and probes that compare launch paths; compiled kernels stay in Triton's cache)."""
    for lean in LEANS.values():
        lean.entries.clear()
    _MM_HOT.clear()
    _MM_WS.clear()
    _ONLINE_HOT.clear()


#: Every lean launcher's table, for tests and lesson 08 (entries, compiles).
LEANS = dict(add=_ADD, softmax=_SOFTMAX, one_read=_ONE_READ, lanes=_LANES, online=_ONLINE, matmul_small=_MM_SMALL,
             matmul_fixed=_MM_FIXED, matmul_large=_MM_LARGE, matmul_tma=_MM_TMA, **_ATTENTION_LEANS)
