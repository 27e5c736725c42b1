"""Online softmax (lesson 05) behind a lean launch: ``softmax(x, parts=None, block=None, one_read=True)``
as ``online_softmax_one_read.softmax``, the lesson's fast path: on a GPU the one-read kernels
(``online_softmax_one_read``), the lesson's kernel for rows of one part.

The host side is ``lean.Lean``'s (see the package's docstring); what this module adds is the
exchange slots the one-read kernels need, kept from call to call.
"""

from __future__ import annotations

import torch

from .. import online_softmax as osm
from .._checks import validate
from . import online_softmax_one_read as one
from .lean import Lean, hooks_on, stream_of, tensor_key
from .lean import tensor_key as _t
from .online_softmax_split import exchange_span as split_exchange_span
from .online_softmax_split import split_plan

__all__ = ["softmax", "LEANS", "kept_slots", "forget"]

_ONE_READ = Lean(one.one_read_softmax_kernel)
_LANES = Lean(one.lanes_softmax_kernel)
_ONLINE = Lean(osm.online_softmax_kernel)


def softmax(x, parts=None, block=None, one_read=True):
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
    hot = None if hooks_on() else _ONLINE_HOT.get(key)
    if hot is None:
        return _online_table(key, x)
    e, ints, by_stream = hot
    if x.stride(1) != 1:
        x = x.contiguous()
    out = torch.empty_like(x)
    stream = stream_of(key[4])
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
    by_stream[stream_of(x.get_device())] = slots  # launched once already, as kept slots are
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



#: This module's lean launchers, for tests and lesson 08 (entries, compiles).
LEANS = dict(one_read=_ONE_READ, lanes=_LANES, online=_ONLINE)


def forget():
    """Drop every kept entry, with its slots: the next call of each key is a first call again."""
    for lean in LEANS.values():
        lean.entries.clear()
    _ONLINE_HOT.clear()
