"""Rotary position embedding (RoPE) on q and k in one launch, behind a lean launch.

RoPE (Su et al. 2021, "RoFormer: Enhanced Transformer with Rotary Position Embedding") encodes a
token's position ``p`` by rotating each pair of q's (and k's) values by the angle ``p * f_i``, one
frequency ``f_i = theta ** (-2i / D)`` a pair: the dot product of a rotated q and k then depends only
on how far apart their positions are. Which two values make a pair is a convention; this module
follows Llama's (Hugging Face's ``rotate_half``): value ``i`` pairs with value ``i + D/2``,

    out = x * cos + rotate_half(x) * sin,   rotate_half(x) = cat(-x[..., D/2:], x[..., :D/2])

with ``cos``/``sin`` the row ``p`` of a table (``rope_tables``) repeated over both halves, that is,
per pair ``(x1, x2) -> (x1 c - x2 s, x2 c + x1 s)``.

A decode step (or a prefill chunk) rotates q ``(B, T, Hq, D)`` and k ``(B, T, Hkv, D)`` (grouped-query
attention: ``Hkv`` divides ``Hq``) at positions ``(B, T)``. The eager formula is about ten kernels
(two gathers, slices, a cat, a negation, products and sums for each of q and k); this is one: a
program rotates ``BLOCK_H`` heads of one token, q's or k's, reading the token's position and its row
of each table once. Traffic: read and write q and k once, plus a table row per token:
``2 * B * T * (Hq + Hkv) * D`` elements, ``B * T * D`` table values.

``rope(q, k, cos, sin, positions)`` returns new q and k (contiguous); ``rope(..., inplace=True)``
writes them back into q and k, what a decode step wants: q and k are then often views of the fused
QKV projection's output, and rotating them in place costs no allocation (vLLM's ``rotary_embedding``
works in place too). In place, q's and k's last dimension must be contiguous; any other strides are
read and written as they are.

Positions come as a tensor, never as Python ints: a decode step's positions change every step, and a
tensor keeps the launch (and a CUDA graph of it) the same from step to step. Positions outside
``[0, max_pos)`` read no table (the loads are masked, for memory safety) and leave their token's
values unrotated; checking them on the host would cost a synchronization every call.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from .._checks import validate
from .lean import Lean, hooks_on, pdl_meta

__all__ = ["rope", "rope_tables", "rope_reference", "rope_kernel", "rotate_heads", "rotate_rows", "table_row", "token_start", "check",
           "hf_rope", "ROPE_PDL", "LEANS", "forget"]


@triton.jit
def rotate_rows(x_row, o_row, m, c, s, HALF):
    """Rotate rows of values: ``x_row``/``o_row`` point at each row's value ``j`` (a tile of pointers), ``m``
    masks the tile, ``c``/``s`` broadcast against it; value ``j`` pairs with value ``j + HALF``."""
    x1 = tl.load(x_row, mask=m, other=0.0).to(tl.float32)  # first halves
    x2 = tl.load(x_row + HALF, mask=m, other=0.0).to(tl.float32)  # second halves: as many
    tl.store(o_row, (x1 * c - x2 * s).to(o_row.dtype.element_ty), mask=m)  # x * cos - x2 * sin
    tl.store(o_row + HALF, (x2 * c + x1 * s).to(o_row.dtype.element_ty), mask=m)  # x2 * cos + x1 * sin


@triton.jit
def rotate_heads(x_ptr, o_ptr, x_sh, o_sh, h0, H, c, s, j, jmask, HALF, BLOCK_H: tl.constexpr):
    """Rotate heads ``h0 .. h0 + BLOCK_H`` (of ``H``) of one token: ``x_ptr``/``o_ptr`` point at head 0."""
    h = h0 + tl.arange(0, BLOCK_H)[:, None]  # (BLOCK_H, 1)
    m = (h < H) & jmask[None, :]  # (BLOCK_H, BLOCK_HALF): real heads, real pairs
    rotate_rows(x_ptr + h.to(tl.int64) * x_sh + j[None, :], o_ptr + h.to(tl.int64) * o_sh + j[None, :], m, c, s, HALF)


@triton.jit
def table_row(cos_ptr, sin_ptr, pos, cos_stride, HALF, max_pos, BLOCK_HALF: tl.constexpr):
    """``(c, s, j, jmask)``: row ``pos`` of the tables in fp32 (1 and 0 for a position outside
    ``[0, max_pos)``: the token is left unrotated), the pair indices and which are real. ``pos`` one
    position gives ``(1, BLOCK_HALF)`` rows; a column of positions ``(R, 1)`` gives ``(R, BLOCK_HALF)``."""
    ok = (pos >= 0) & (pos < max_pos)
    j = tl.arange(0, BLOCK_HALF)
    jmask = j < HALF
    at = pos * cos_stride + j[None, :]
    c = tl.load(cos_ptr + at, mask=jmask[None, :] & ok, other=1.0).to(tl.float32)  # read D/2 a row
    s = tl.load(sin_ptr + at, mask=jmask[None, :] & ok, other=0.0).to(tl.float32)  # read D/2 a row
    return c, s, j, jmask


@triton.jit
def token_start(pos_ptr, pos_sb, pos_st, cos_ptr, sin_ptr, cos_stride, T, HALF, max_pos, BLOCK_HALF: tl.constexpr,
                PDL: tl.constexpr):
    """The start of a program of one token (axis 0 of the grid, ``b * T + t``): with ``PDL``, wait for the
    kernel before and let the next one start; then ``(token, b, t)`` in 64 bits (offsets can pass 2**31
    in a long prefill) and the token's row of the tables (``table_row``)."""
    if PDL:
        gdc_wait()  # the inputs may be the previous kernel's output
        gdc_launch_dependents()  # short programs: the next kernel may start once all of these have
    token = tl.program_id(0).to(tl.int64)
    b = token // T
    t = token % T
    pos = tl.load(pos_ptr + b * pos_sb + t * pos_st).to(tl.int64)  # read 1 position
    c, s, j, jmask = table_row(cos_ptr, sin_ptr, pos, cos_stride, HALF, max_pos, BLOCK_HALF)
    return token, b, t, c, s, j, jmask


@triton.jit
def rope_kernel(
    q_ptr,  # pointer to q[0, 0, 0, 0], (B, T, Hq, D), last dim contiguous
    k_ptr,  # pointer to k[0, 0, 0, 0], (B, T, Hkv, D), last dim contiguous
    qo_ptr,  # pointer to the rotated q (q itself in place)
    ko_ptr,  # pointer to the rotated k (k itself in place)
    cos_ptr,  # pointer to cos[0, 0], the (max_pos, D/2) table, rows contiguous
    sin_ptr,  # pointer to sin[0, 0], likewise
    pos_ptr,  # pointer to positions[0, 0], (B, T) integers
    q_sb, q_st, q_sh,  # q's strides over B, T and heads, in elements
    k_sb, k_st, k_sh,  # k's strides over B, T and heads
    qo_sb, qo_st, qo_sh,  # the rotated q's strides
    ko_sb, ko_st, ko_sh,  # the rotated k's strides
    pos_sb, pos_st,  # positions' strides over B and T (0 over B: one row of positions for every sequence)
    cos_stride,  # elements between two rows of cos (and of sin)
    T,  # tokens a sequence: the grid's first axis is B * T
    HQ,  # q's heads
    HKV,  # k's heads
    HALF,  # D / 2: value i pairs with value i + HALF
    max_pos,  # rows of the tables: positions outside [0, max_pos) are left unrotated
    Q_BLOCKS: tl.constexpr,  # cdiv(HQ, BLOCK_H): programs [0, Q_BLOCKS) of axis 1 take q, the rest k
    BLOCK_H: tl.constexpr,  # heads a program rotates
    BLOCK_HALF: tl.constexpr,  # next_power_of_2(HALF)
    PDL: tl.constexpr = False,  # launched with programmatic dependent launch (``lean.pdl_meta``)
):
    token, b, t, c, s, j, jmask = token_start(pos_ptr, pos_sb, pos_st, cos_ptr, sin_ptr, cos_stride, T, HALF, max_pos,
                                              BLOCK_HALF, PDL)
    hb = tl.program_id(1)  # the block of heads
    if hb < Q_BLOCKS:
        rotate_heads(q_ptr + b * q_sb + t * q_st, qo_ptr + b * qo_sb + t * qo_st, q_sh, qo_sh, hb * BLOCK_H, HQ,
                c, s, j, jmask, HALF, BLOCK_H)
    else:
        rotate_heads(k_ptr + b * k_sb + t * k_st, ko_ptr + b * ko_sb + t * ko_st, k_sh, ko_sh, (hb - Q_BLOCKS) * BLOCK_H,
                HKV, c, s, j, jmask, HALF, BLOCK_H)


#: Values a program rotates in each half (``BLOCK_H * BLOCK_HALF``): 16 heads of D = 128 at 4 warps is 8
#: values a thread a half, 16-byte loads in fp16; a decode step of q (32 heads) and k (8) is 3 programs.
ELEMENTS_PER_PROGRAM = 1024


def rope_tables(max_pos: int, D: int, theta: float = 500000.0, device=None, dtype=torch.float32):
    """``(cos, sin)``, each ``(max_pos, D/2)``: ``cos[p, i] = cos(p * theta ** (-2i / D))``.

    ``theta`` 500000 is Llama 3's base (10000 in the RoFormer paper and Llama 2). The angles are
    computed in float64 and rounded once to ``dtype``: an fp32 product ``p * f_i`` already loses digits
    at positions in the hundreds of thousands. Any other frequency scheme (Llama 3.1's rescaled
    frequencies, NTK scaling) is a table of the same shape: the kernel only reads it."""
    if not isinstance(max_pos, int) or max_pos < 1:
        raise ValueError(f"max_pos must be a positive int, got {max_pos!r}")
    if not isinstance(D, int) or D < 2 or D % 2:
        raise ValueError(f"D must be a positive even int (values pair up), got {D!r}")
    inv_freq = theta ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)  # (D/2,)
    angles = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv_freq[None, :]  # (max_pos, D/2)
    return angles.cos().to(device=device, dtype=dtype), angles.sin().to(device=device, dtype=dtype)


def rope_reference(q, k, cos, sin, positions):
    """What ``rope`` must return: the Llama formula in fp32 on the tables' rows at ``positions``,
    rounded to q's dtype (each output is rounded once)."""
    c = cos[positions.long()].float()  # (B, T, D/2)
    s = sin[positions.long()].float()
    c, s = torch.cat([c, c], -1)[:, :, None], torch.cat([s, s], -1)[:, :, None]  # (B, T, 1, D)

    def rotate_half(x):
        h = x.shape[-1] // 2
        return torch.cat([-x[..., h:], x[..., :h]], dim=-1)

    return tuple((x.float() * c + rotate_half(x.float()) * s).to(x.dtype) for x in (q, k))


def hf_rope(q, k, cos, sin):
    """Hugging Face's ``apply_rotary_pos_emb`` for q and k laid out ``(B, T, H, D)``: the eager ops a
    Llama model runs per layer, given ``cos``/``sin`` already gathered at the positions and repeated
    over both halves, ``(B, T, 1, D)`` in the model's dtype (the model's rotary module makes them once
    a forward pass). What the benchmarks compare ``rope`` with."""

    def rotate_half(x):
        h = x.shape[-1] // 2
        return torch.cat((-x[..., h:], x[..., :h]), dim=-1)

    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


#: Launch with programmatic dependent launch where the GPU has it (``lean.pdl_meta``). Read when a key's
#: entry is made (``forget()`` after changing it).
ROPE_PDL = True
_ROPE = Lean(rope_kernel)
_ENTRIES = _ROPE.entries  # the table itself: Lean only ever clears it


def rope(q, k, cos, sin, positions, inplace=False):
    """``(q, k)`` rotated at ``positions``: q ``(B, T, Hq, D)``, k ``(B, T, Hkv, D)`` of one float dtype,
    ``cos``/``sin`` ``(max_pos, D/2)`` from ``rope_tables`` (fp32 or q's dtype), positions ``(B, T)``
    int32 or int64 (a row expanded over B is fine). New contiguous tensors, or with ``inplace`` q and
    k themselves, written in place. Maths in fp32 whatever the dtype."""
    try:  # what the compile depends on (``lean.tensor_key`` of each tensor, written out in one tuple)
        key = (q.dtype, q.shape, q.stride(), q.data_ptr() & 15, q.get_device(),
               k.dtype, k.shape, k.stride(), k.data_ptr() & 15, k.get_device(),
               cos.dtype, cos.shape, cos.stride(), cos.data_ptr() & 15, cos.get_device(),
               sin.dtype, sin.shape, sin.stride(), sin.data_ptr() & 15, sin.get_device(),
               positions.dtype, positions.shape, positions.stride(), positions.data_ptr() & 15,
               positions.get_device(), inplace)
        e = _ENTRIES.get(key)  # hashes the key: TypeError for an unhashable inplace
    except (AttributeError, TypeError):  # not tensors, or an inplace of another kind: the checks say which
        check(q, k, cos, sin, positions, inplace)
        raise
    if e is None or hooks_on():  # a launch hook (a profiler) sees launches through kernel[grid]
        return _first(key, q, k, cos, sin, positions, inplace)
    if e.info is None:  # in place
        qo, ko = q, k
    else:
        copy, q_like, k_like = e.info
        if copy:
            q, k = q.contiguous(), k.contiguous()
        qo, ko = torch.empty_like(q_like), torch.empty_like(k_like)  # new contiguous tensors
    if e.lean:  # addresses as ints: the launcher then skips a driver query per pointer
        e(q.data_ptr(), k.data_ptr(), qo.data_ptr(), ko.data_ptr(), cos.data_ptr(), sin.data_ptr(),
          positions.data_ptr())
    else:
        e(q, k, qo, ko, cos, sin, positions)
    return qo, ko


def check(q, k, cos, sin, positions, inplace):
    """The checks of a key's first call: ValueError naming the argument."""
    validate(q, k, names=["q", "k"], ndim=4)
    B, T, HQ, D = q.shape
    if k.shape[0] != B or k.shape[1] != T or k.shape[3] != D:
        raise ValueError(f"k must be (B, T, Hkv, D) = ({B}, {T}, Hkv, {D}) like q {tuple(q.shape)}, "
                         f"got {tuple(k.shape)}")
    if D % 2:
        raise ValueError(f"q and k must have an even head dim D (values pair up), got D = {D}")
    validate(cos, sin, names=["cos", "sin"], ndim=2, same_shape=True, dtypes=[torch.float32, q.dtype])
    validate(q, cos, names=["q", "cos"], same_dtype=False, dtypes=[torch.float32, q.dtype])
    if cos.shape[1] != D // 2:
        raise ValueError(f"cos and sin must be (max_pos, D/2) = (max_pos, {D // 2}) for D = {D}, "
                         f"got {tuple(cos.shape)}; make them with rope_tables(max_pos, {D})")
    if cos.stride(1) != 1 or sin.stride(1) != 1 or cos.stride(0) != sin.stride(0):
        raise ValueError("cos and sin must have contiguous rows and one row stride (as rope_tables makes them)")
    if not isinstance(positions, torch.Tensor):
        raise ValueError(f"positions must be a (B, T) integer tensor, got {type(positions).__name__}")
    if positions.dtype not in (torch.int32, torch.int64) or tuple(positions.shape) != (B, T):
        raise ValueError(f"positions must be ({B}, {T}) int32 or int64 (one position a token), "
                         f"got {tuple(positions.shape)} {positions.dtype}")
    if positions.device != q.device:
        raise ValueError(f"positions is on {positions.device} but q is on {q.device}; put both on one device")
    if not isinstance(inplace, bool):
        raise ValueError(f"inplace must be True or False, got {inplace!r}")
    if inplace and (q.stride(-1) != 1 or k.stride(-1) != 1):
        raise ValueError("inplace=True needs q and k with a contiguous last dim (D); "
                         "pass inplace=False for a copy")


def _first(key, q, k, cos, sin, positions, inplace):
    check(q, k, cos, sin, positions, inplace)
    B, T, HQ, D = q.shape
    HKV = k.shape[2]
    if inplace:
        qo, ko, info = q, k, None
    else:
        copy = q.stride(-1) != 1 or k.stride(-1) != 1
        if copy:
            q, k = q.contiguous(), k.contiguous()
        # one element expanded to each output's shape: empty_like of it is a new contiguous tensor
        q_like = torch.empty((), dtype=q.dtype, device=q.device).expand(q.shape)
        k_like = torch.empty((), dtype=k.dtype, device=k.device).expand(k.shape)
        qo, ko, info = torch.empty_like(q_like), torch.empty_like(k_like), (copy, q_like, k_like)
    HALF = D // 2
    BLOCK_HALF = triton.next_power_of_2(HALF)
    BLOCK_H = min(triton.next_power_of_2(max(HQ, HKV)), max(1, ELEMENTS_PER_PROGRAM // BLOCK_HALF))
    q_blocks = math.ceil(HQ / BLOCK_H)
    grid = (B * T, q_blocks + math.ceil(HKV / BLOCK_H))
    static = (*q.stride()[:3], *k.stride()[:3], *qo.stride()[:3], *ko.stride()[:3], *positions.stride(),
              cos.stride(0), T, HQ, HKV, HALF, cos.shape[0])
    _ROPE.first(key, (q, k, qo, ko, cos, sin, positions), static, grid,
                dict(Q_BLOCKS=q_blocks, BLOCK_H=BLOCK_H, BLOCK_HALF=BLOCK_HALF, num_warps=4, **pdl_meta(q.device, ROPE_PDL)), info=info)
    return qo, ko


#: This module's lean launcher, for tests and lesson 08 (entries, compiles).
LEANS = dict(rope=_ROPE)


def forget():
    """Drop every kept entry: the next call of each key is a first call again."""
    _ROPE.entries.clear()
