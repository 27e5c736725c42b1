"""New keys and values into a paged KV cache (lesson 09's layout), both in one launch, behind a lean launch.

A decode step writes each layer's new key and value, one token a sequence, into the cache that decode
attention then reads: ``k_cache[page, slot] = k`` and the same for ``v``, where the sequence's block
table gives the page of its position and the position's remainder gives the slot. In torch that is two
``index_put_`` calls a layer, each a kernel that spends more time finding its indices than moving the
few kilobytes of a token; here one program a token copies its key and its value, all heads at once
(``Hkv * D`` contiguous elements each, as the cache stores them), in one launch a layer. vLLM fuses the
same write into its rotary-embedding or attention kernels (``reshape_and_cache``); the course keeps it
a kernel of its own, next to the cache it fills.

The copy never writes outside the cache: a page outside ``0 .. pages - 1`` or a slot outside
``0 .. page_size - 1`` leaves that token unwritten (the decode kernel flags such a sequence when it
reads it).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .lean import Lean
from .lean import tensor_key as _t

__all__ = ["write", "write_reference", "kv_write_kernel", "LEANS", "forget"]


@triton.jit
def kv_write_kernel(
    k_ptr, v_ptr,  # the new keys and values, (B, T, Hkv, D), heads and D contiguous
    kc_ptr, vc_ptr,  # the caches, (pages, PAGE, Hkv, D), contiguous
    page_ptr, slot_ptr,  # (B, T) int64: each token's page and slot
    T, n_pages,
    k_stride_b, k_stride_t, v_stride_b, v_stride_t,
    PAGE: tl.constexpr,  # tokens a page
    HD: tl.constexpr,  # Hkv * D: the elements of a token's key (and of its value)
    BLOCK: tl.constexpr,  # HD rounded up to a power of two
):
    tok = tl.program_id(0)
    b = (tok // T).to(tl.int64)
    t = (tok % T).to(tl.int64)
    page = tl.load(page_ptr + tok)
    slot = tl.load(slot_ptr + tok)
    ok = (page >= 0) & (page < n_pages) & (slot >= 0) & (slot < PAGE)  # else nothing is written
    dst = (tl.where(ok, page, 0) * PAGE + tl.where(ok, slot, 0)) * HD
    offs = tl.arange(0, BLOCK)
    mask = (offs < HD) & ok
    key = tl.load(k_ptr + b * k_stride_b + t * k_stride_t + offs, mask=mask)
    value = tl.load(v_ptr + b * v_stride_b + t * v_stride_t + offs, mask=mask)
    tl.store(kc_ptr + dst + offs, key, mask=mask)
    tl.store(vc_ptr + dst + offs, value, mask=mask)


def write_reference(k, v, k_cache, v_cache, page, slot):
    """What ``write`` does, in torch: ``index_put_`` of the keys and values at (page, slot)."""
    k_cache.index_put_((page, slot), k)
    v_cache.index_put_((page, slot), v)


def _check(k, v, k_cache, v_cache, page, slot):
    """The checks of a key's first call: ValueError naming the argument."""
    for name, t in (("k", k), ("v", v), ("k_cache", k_cache), ("v_cache", v_cache), ("page", page), ("slot", slot)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a tensor, got {type(t).__name__}")
    if k.dim() != 4 or v.shape != k.shape:
        raise ValueError(f"k and v must be (B, T, Hkv, D) of one shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    if k_cache.dim() != 4 or v_cache.shape != k_cache.shape or k_cache.shape[2:] != k.shape[2:]:
        raise ValueError(f"k_cache and v_cache must be (pages, page_size, Hkv, D) with k's Hkv and D, got "
                         f"{tuple(k_cache.shape)} and {tuple(v_cache.shape)} for k {tuple(k.shape)}")
    if not (k_cache.is_contiguous() and v_cache.is_contiguous()):
        raise ValueError("k_cache and v_cache must be contiguous")
    if len({t.dtype for t in (k, v, k_cache, v_cache)}) != 1:
        raise ValueError(f"k, v and the caches must share a dtype, got {k.dtype}, {v.dtype}, {k_cache.dtype}, "
                         f"{v_cache.dtype}")
    for name, t in (("page", page), ("slot", slot)):
        if t.shape != k.shape[:2] or t.dtype != torch.int64:
            raise ValueError(f"{name} must be (B, T) = {tuple(k.shape[:2])} int64, got {tuple(t.shape)} {t.dtype}")
    if len({t.device for t in (k, v, k_cache, v_cache, page, slot)}) != 1:
        raise ValueError("k, v, the caches, page and slot must be on one device")


_KV = Lean(kv_write_kernel)


def write(k, v, k_cache, v_cache, page, slot):
    """``k_cache[page, slot] = k`` and ``v_cache[page, slot] = v`` for every (b, t), in one launch;
    a token whose page or slot is outside the cache is not written."""
    try:
        key = (_t(k), _t(v), _t(k_cache), _t(v_cache), _t(page), _t(slot))
        e = _KV.get(key)
    except (AttributeError, TypeError):
        _check(k, v, k_cache, v_cache, page, slot)
        raise
    if e is None:
        return _first(key, k, v, k_cache, v_cache, page, slot)
    if e.lean:
        e(k.data_ptr(), v.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), page.data_ptr(), slot.data_ptr())
    else:
        e(k, v, k_cache, v_cache, page, slot)


def _first(key, k, v, k_cache, v_cache, page, slot):
    _check(k, v, k_cache, v_cache, page, slot)
    B, T, H, D = k.shape
    if k.stride(3) != 1 or k.stride(2) != D or v.stride(3) != 1 or v.stride(2) != D or page.stride(1) != 1 \
            or slot.stride(1) != 1 or page.stride(0) != T or slot.stride(0) != T:
        return write_reference(k, v, k_cache, v_cache, page, slot)  # unusual layouts: torch, every call
    if B * T == 0:
        return None
    static = (T, k_cache.shape[0], k.stride(0), k.stride(1), v.stride(0), v.stride(1))
    meta = dict(PAGE=k_cache.shape[1], HD=H * D, BLOCK=triton.next_power_of_2(H * D), num_warps=4)
    _KV.first(key, (k, v, k_cache, v_cache, page, slot), static, (B * T,), meta)
    return None


#: This module's lean launcher, for tests and lesson 08 (entries, compiles).
LEANS = dict(kv_write=_KV)


def forget():
    """Drop every kept entry: the next call of each key is a first call again."""
    _KV.entries.clear()
