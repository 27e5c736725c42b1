"""Matmul (lesson 03) behind a lean launch: ``matmul(a, b, config=None)`` as ``solutions.matmul.matmul``.

Small products take the kernels of ``matmul_small`` (split-K, and TMA loads on triton 3.6), large
ones the lesson's autotuned kernel, and the largest 16-bit ones lesson 12's persistent TMA kernel; the
host side is ``lean.Lean``'s (see the package's docstring).
"""

from __future__ import annotations

import torch
import triton

from tkcourse.mode import INTERPRET

from .. import hopper
from .. import matmul as mm
from .._checks import validate
from . import matmul_small as small
from .decode_plan import sm_count
from .lean import DIRECT, Lean, hooks_on, pdl_meta, stream_of
from .lean import tensor_key as _t

__all__ = ["matmul", "LEANS", "matmul_entries", "forget"]


# ---- lesson 03: split-K for small products, the lesson's autotuned kernel for large ones ----
_MM_SMALL = Lean(small.matmul_small_autotuned or small.matmul_split_k_kernel)  # tuned once per key
_MM_FIXED = Lean(small.matmul_split_k_kernel)  # tiny products, or a config given
_MM_LARGE = Lean(mm.matmul_autotuned)
_MM_TMA = Lean(small.matmul_tma_kernel)  # small products on triton 3.6: TMA loads, descriptors kept
_MM_PERSISTENT = Lean(hopper.persistent_matmul_kernel)  # large 16-bit products: lesson 12's persistent kernel
#: Products whose M, N and K are all at least this take lesson 12's persistent TMA kernel (one program an
#: SM walking the tiles), in fp16 and bf16 where the TMA can read A and B as they are: on the H200 it ran
#: 0.98-1.01x cuBLAS at 4096^3 and 8192^3 where the lesson's autotuned kernel ran 0.91-0.98x, the two
#: interleaved in one run (``research/hopper/matmul_default_probe.py``). Not measured below 4096.
PERSISTENT_MIN = 4096
#: Small products take the TMA kernel where host-made descriptors are cheap (``lean.DIRECT``):
#: its loads need no address arithmetic, which at these sizes is a share of the kernel's time.
MATMUL_TMA = DIRECT
#: The TMA kernel and the decode-sized split-K plan launched with programmatic dependent launch
#: (``lean.pdl_meta``, on GPUs that have it; the kernel's ``PDL`` says what overlaps). On the H200, eight matmuls in
#: one CUDA graph took 5.7 us each with it, 6.3 without (1024^3; 3.3 against 3.7 at 512^3); one call
#: alone, eager or replayed, the same (``research/launch/pdl_probe.py``, logs ``pdl_probe_*``).
#: Read when a key's entry is made (``forget()`` after changing it).
MATMUL_PDL = True
#: Products of at most ``matmul_small.DECODE_MAX_M`` rows take 16-row split-K tiles planned from the SM
#: count (``matmul_small.decode_config``) instead of the TMA kernel's 64-row tiles: on the H200, at
#: Llama-3-8B's projections, 0.95-1.02x cuBLAS at one row where the TMA plan ran 0.57-0.78x
#: (``research/llm/logs/matmul_decode_second.log``). Read when a key's entry is made (``forget()`` after
#: changing it).
MATMUL_DECODE = True


def matmul(a, b, config=None):
    """``a @ b``, as ``matmul.matmul``; ``config`` (the lesson's keys) launches exactly that config."""
    try:
        key = (_t(a), _t(b)) if config is None else (_t(a), _t(b), tuple(config.items()),
                                                      tuple(map(type, config.values())))
        hot = None if hooks_on() else _MM_HOT.get(key)  # the lookup hashes: TypeError for an unhashable value
    except (AttributeError, TypeError):  # not tensors, or not a dict of plain values: the lesson's errors
        return mm.matmul(a, b, config)
    if hot is None:
        e = (_MM_TMA.get(key) or _MM_PERSISTENT.get(key) or _MM_SMALL.get(key) or _MM_FIXED.get(key)
             or _MM_LARGE.get(key))
        if e is None:
            return _matmul_first(key, a, b, config)
        hot = _hot_entry(key, e, a, b)
    e, template, ws = hot
    c = torch.empty_like(template)
    if ws is None:  # the lesson's kernel: no workspace
        e(a, b, c)
    elif ws is True:  # split-K: the workspace of this stream
        stream = stream_of(a.get_device())
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
        ws = True if e.meta.get("SPLIT_K", 1) > 1 else small.workspace(M, N, a.device, stream_of(a.get_device()))
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
    cfg = None if config is None else mm.check_config(config)
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    ints = (M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    mnk = M * N * K
    if cfg is None and MATMUL_DECODE and M <= small.DECODE_MAX_M:  # a decode step's one to a few rows
        meta = dict(small.decode_config(M, N, K, sm_count(a.device)), **pdl_meta(a.device, MATMUL_PDL))
        ws = small.workspace(M, N, a.device, stream_of(a.get_device()))
        _MM_FIXED.first(key, (a, b, c, *ws), ints, small.grid, meta, info="decode")
        return c
    if cfg is None and not INTERPRET and MATMUL_TMA and mnk <= small.TMA_MAX_MNK and small.tma_ok(a, b):
        meta = dict(small.tma_config(mnk), **pdl_meta(a.device, MATMUL_PDL))
        grid = (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)
        _MM_TMA.first(key, tuple(small.tma_descriptors(a, b, c, meta)), (M, N, K), grid, meta, info="tma",
                      templates=lambda m: dict(enumerate(small.tma_descriptors(a, b, c, m))))
        return c
    if (cfg is None and not INTERPRET and min(M, N, K) >= PERSISTENT_MIN and a.dtype in (torch.float16, torch.bfloat16)
            and small.tma_ok(a, b) and small.tma_ok(c, c)):
        meta = {k: v for k, v in hopper.CONFIG.items() if k != "num_warps" and k != "num_stages"}
        programs = hopper.num_programs(triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]), a.device)
        meta.update(NUM_PROGRAMS=programs, num_warps=hopper.CONFIG["num_warps"], num_stages=hopper.CONFIG["num_stages"])
        _MM_PERSISTENT.first(key, tuple(small.tma_descriptors(a, b, c, meta)), (M, N, K), (programs,), meta,
                             info="tma", templates=lambda m: dict(enumerate(small.tma_descriptors(a, b, c, m))))
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
    ws = small.workspace(M, N, a.device, stream_of(a.get_device()))
    lean.first(key, (a, b, c, *ws), ints, small.grid, meta, info=True)
    return c


def matmul_entries() -> list:
    """``(entry, C's template, workspace)`` of each matmul key with a kept hot path, oldest first (see
    ``_hot_entry``); for tests and probes."""
    return list(_MM_HOT.values())



#: This module's lean launchers, for tests and lesson 08 (entries, compiles).
LEANS = dict(matmul_small=_MM_SMALL, matmul_fixed=_MM_FIXED, matmul_large=_MM_LARGE, matmul_tma=_MM_TMA,
             matmul_persistent=_MM_PERSISTENT)


def forget():
    """Drop every kept entry and workspace: the next call of each key is a first call again."""
    for lean_ in LEANS.values():
        lean_.entries.clear()
    _MM_HOT.clear()
    _MM_WS.clear()
