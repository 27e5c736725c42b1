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

``rope_write`` does a step's RoPE and this write in one launch (what a model calls, as vLLM's fused
kernels do): q and k rotated in place (``rope.rope(..., inplace=True)``: a prefill's attention reads
them), the rotated k and v written into the cache. A decode step then has one kernel fewer a layer.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from tkcourse.mode import INTERPRET

from . import rope as k_rope
from .lean import Lean, pdl_meta
from .lean import tensor_key as _t

__all__ = ["write", "write_reference", "kv_write_kernel", "rope_write", "rope_write_reference", "rope_write_kernel",
           "KV_PDL", "LEANS", "forget"]


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
    PDL: tl.constexpr = False,  # launched with programmatic dependent launch (``lean.pdl_meta``)
):
    if PDL:
        gdc_wait()  # the inputs may be the previous kernel's output
        gdc_launch_dependents()  # short programs: the next kernel may start once all of these have
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


@triton.jit
def rope_write_kernel(
    q_ptr, k_ptr, v_ptr,  # (B, T, Hq, D), (B, T, Hkv, D), (B, T, Hkv, D): D contiguous; q and k rotated in place
    kc_ptr, vc_ptr,  # the caches, (pages, PAGE, Hkv, D), contiguous
    cos_ptr, sin_ptr, pos_ptr,  # RoPE's tables (max_pos, D/2) and the positions (B, T)
    page_ptr, slot_ptr,  # (B, T) int64: each token's page and slot
    q_sb, q_st, q_sh, k_sb, k_st, k_sh, v_sb, v_st, v_sh,  # strides over B, T and heads, in elements
    pos_sb, pos_st, cos_stride,
    n_tokens, T, HQ, HKV, HALF, max_pos, n_pages,  # n_tokens = B * T
    PAGE: tl.constexpr,  # tokens a page
    Q_BLOCKS: tl.constexpr,  # programs [0, Q_BLOCKS) of axis 1 rotate q's heads, the rest k's (and copy v's)
    BLOCK_T: tl.constexpr,  # tokens a program takes (axis 0)
    BLOCK_H: tl.constexpr,  # heads a program takes
    BLOCK_HALF: tl.constexpr,  # next_power_of_2(HALF)
    PDL: tl.constexpr = False,  # launched with programmatic dependent launch (``lean.pdl_meta``)
):
    if PDL:
        gdc_wait()  # the inputs may be the previous kernel's output
        gdc_launch_dependents()  # short programs: the next kernel may start once all of these have
    r = tl.arange(0, BLOCK_T * BLOCK_H)[:, None]  # the program's rows, (token, head) token by token
    token = tl.program_id(0).to(tl.int64) * BLOCK_T + r // BLOCK_H  # (R, 1), 64 bits: a long prefill
    live = token < n_tokens
    b = token // T
    t = token % T
    pos = tl.load(pos_ptr + b * pos_sb + t * pos_st, mask=live, other=0).to(tl.int64)  # a position a row
    c, s, j, jmask = k_rope.table_row(cos_ptr, sin_ptr, pos, cos_stride, HALF, max_pos, BLOCK_HALF)
    hb = tl.program_id(1)  # q's blocks of heads, then k's
    if hb < Q_BLOCKS:
        h = hb * BLOCK_H + r % BLOCK_H
        q = q_ptr + b * q_sb + t * q_st + h.to(tl.int64) * q_sh + j[None, :]
        k_rope.rotate_rows(q, q, live & (h < HQ) & jmask[None, :], c, s, HALF)
    else:
        h = (hb - Q_BLOCKS) * BLOCK_H + r % BLOCK_H
        m = live & (h < HKV) & jmask[None, :]
        page = tl.load(page_ptr + token, mask=live, other=-1)
        slot = tl.load(slot_ptr + token, mask=live, other=-1)
        ok = (page >= 0) & (page < n_pages) & (slot >= 0) & (slot < PAGE)  # else the cache is not written
        row = (tl.where(ok, page, 0) * PAGE + tl.where(ok, slot, 0)) * HKV + h  # the token's head in the cache
        cache = row * (2 * HALF) + j[None, :]
        k = k_ptr + b * k_sb + t * k_st + h.to(tl.int64) * k_sh + j[None, :]
        k_rope.rotate_rows(k, kc_ptr + cache, m & ok, c, s, HALF)  # the rotated k into the cache
        src = v_ptr + b * v_sb + t * v_st + h.to(tl.int64) * v_sh + j[None, :]
        tl.store(vc_ptr + cache, tl.load(src, mask=m & ok), mask=m & ok)  # v's first halves
        tl.store(vc_ptr + cache + HALF, tl.load(src + HALF, mask=m & ok), mask=m & ok)  # and second halves
        k_rope.rotate_rows(k, k, m, c, s, HALF)  # then k itself, after the cache's copy read it


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


#: Launch with programmatic dependent launch where the GPU has it (``lean.pdl_meta``). Read when a key's
#: entry is made (``forget()`` after changing it).
KV_PDL = True
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
    meta = dict(PAGE=k_cache.shape[1], HD=H * D, BLOCK=triton.next_power_of_2(H * D), num_warps=4,
                **pdl_meta(k.device, KV_PDL))
    _KV.first(key, (k, v, k_cache, v_cache, page, slot), static, (B * T,), meta)
    return None


def rope_write_reference(q, k, v, cos, sin, positions, k_cache, v_cache, page, slot):
    """What ``rope_write`` does, in torch: ``rope.rope_reference`` written back into q and k, then
    ``write_reference`` of the rotated k and v (tokens whose page or slot is outside the cache skipped)."""
    qr, kr = k_rope.rope_reference(q, k, cos, sin, positions)
    q.copy_(qr)
    k.copy_(kr)
    ok = (page >= 0) & (page < k_cache.shape[0]) & (slot >= 0) & (slot < k_cache.shape[1])
    write_reference(k[ok], v[ok], k_cache, v_cache, page[ok], slot[ok])


_ROPE_KV = Lean(rope_write_kernel)
#: Tokens a program of ``rope_write`` takes in Triton's interpreter, which runs programs one after another
#: (a prefill's hundreds of one-token programs are most of a generation's time there); on a GPU a
#: program takes one token, and many programs run at once.
INTERPRET_TOKENS = 64


def rope_write(q, k, v, cos, sin, positions, k_cache, v_cache, page, slot):
    """RoPE on q and k in place (``rope.rope(q, k, cos, sin, positions, inplace=True)``), then the rotated
    k and v into the cache at (page, slot) (``write``), in one launch. q ``(B, T, Hq, D)``, k and v
    ``(B, T, Hkv, D)``, each with contiguous heads (``(Hkv, D)`` contiguous for k and v, D for q), often
    views of the fused QKV projection's output; the other arguments as ``rope.rope`` and ``write`` take them."""
    try:
        key = (_t(q), _t(k), _t(v), _t(cos), _t(sin), _t(positions), _t(k_cache), _t(v_cache), _t(page), _t(slot))
        e = _ROPE_KV.get(key)
    except (AttributeError, TypeError):  # not tensors: the checks say which
        _check(k, v, k_cache, v_cache, page, slot)
        k_rope.check(q, k, cos, sin, positions, True)
        raise
    if e is None:
        return _rope_write_first(key, q, k, v, cos, sin, positions, k_cache, v_cache, page, slot)
    if e.lean:
        e(q.data_ptr(), k.data_ptr(), v.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), cos.data_ptr(),
          sin.data_ptr(), positions.data_ptr(), page.data_ptr(), slot.data_ptr())
    else:
        e(q, k, v, k_cache, v_cache, cos, sin, positions, page, slot)


def _rope_write_first(key, q, k, v, cos, sin, positions, k_cache, v_cache, page, slot):
    _check(k, v, k_cache, v_cache, page, slot)
    k_rope.check(q, k, cos, sin, positions, True)
    B, T, HQ, D = q.shape
    HKV = k.shape[2]
    if q.shape[:2] != k.shape[:2] or k.stride(2) != D or v.stride(3) != 1 or v.stride(2) != D \
            or page.stride(1) != 1 or slot.stride(1) != 1 or page.stride(0) != T or slot.stride(0) != T:
        return rope_write_reference(q, k, v, cos, sin, positions, k_cache, v_cache, page, slot)  # unusual layouts
    if B * T == 0:
        return None
    HALF = D // 2
    BLOCK_HALF = triton.next_power_of_2(HALF)
    BLOCK_H = min(triton.next_power_of_2(max(HQ, HKV)), max(1, k_rope.ELEMENTS_PER_PROGRAM // BLOCK_HALF))
    q_blocks = triton.cdiv(HQ, BLOCK_H)
    BLOCK_T = min(triton.next_power_of_2(B * T), INTERPRET_TOKENS) if INTERPRET else 1
    grid = (triton.cdiv(B * T, BLOCK_T), q_blocks + triton.cdiv(HKV, BLOCK_H))
    static = (*q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *positions.stride(), cos.stride(0),
              B * T, T, HQ, HKV, HALF, cos.shape[0], k_cache.shape[0])
    meta = dict(PAGE=k_cache.shape[1], Q_BLOCKS=q_blocks, BLOCK_T=BLOCK_T, BLOCK_H=BLOCK_H, BLOCK_HALF=BLOCK_HALF,
                num_warps=4, **pdl_meta(q.device, KV_PDL))
    _ROPE_KV.first(key, (q, k, v, k_cache, v_cache, cos, sin, positions, page, slot), static, grid, meta)
    return None


#: This module's lean launchers, for tests and lesson 08 (entries, compiles).
LEANS = dict(kv_write=_KV, rope_write=_ROPE_KV)


def forget():
    """Drop every kept entry: the next call of each key is a first call again."""
    _KV.entries.clear()
    _ROPE_KV.entries.clear()
