"""Lesson 10: weight-only int4 matmul, ``x @ dequantize(packed, scales).T`` with the weights unpacked in the kernel.

Decoding one token reads every weight of a model once, to multiply it by one row of activations: at
small batch a linear layer is bound by the bytes of its weights, and 4-bit weights are a quarter of
16-bit ones. The scheme here is the one of GPTQ (Frantar et al. 2022), AWQ (Lin et al. 2023) and
torch's tinygemm without their zero points: **group-wise symmetric** quantization.

- Each row ``n`` of ``w`` (N, K), as ``nn.Linear`` stores it, is cut into groups of ``group_size``
  consecutive input features; each group gets one scale, ``max |w| / 7`` over the group, and each weight
  becomes ``q = round(w / scale)``, an integer from -8 to 7 (4-bit two's complement; -8 is never chosen,
  so the range is symmetric). ``w ~ q * scale``: the error is at most half a step, ``scale / 2``.
- Two values a byte. **The layout**: ``packed`` is (N, K/2) ``uint8``; byte ``j`` of row ``n`` holds
  ``q[n, j]`` in its low nibble (bits 0-3) and ``q[n, j + K/2]`` in its high nibble (bits 4-7). Row ``n``
  of the weight is its low nibbles followed by its high nibbles, so a kernel that reads bytes
  ``j .. j+B`` needs ``x[:, j .. j+B]`` and ``x[:, K/2+j .. K/2+j+B]``: two contiguous loads, never a
  gather. (Interleaving neighbours, ``q[2j]`` and ``q[2j+1]``, is as common; it makes a kernel read x at
  every other element or shuffle the unpacked values into order.)
- ``scales`` is (N, K/group_size) in ``w``'s dtype: ``scales[n, g]`` scales ``q[n, g*group_size ..
  (g+1)*group_size]``.

A nibble is signed: the low one is bits 0-3 of a byte, and moving it to the top of an ``int8``
(``b << 4``) then back with an arithmetic shift (``>> 4``) copies bit 3 into bits 4-7, its sign
(sign extension); the high nibble needs only the arithmetic shift ``b >> 4`` of the byte read as
``int8``.

The kernel is a tiled matmul (lesson 03) whose B tile is made, not loaded: read a (BLOCK_N, BLOCK_K)
tile of bytes, unpack it into two tiles of integers, multiply each by its scales, and ``tl.dot`` them with
the matching halves of x, accumulating in fp32. Each row of x does 2K flops for the K/2 bytes of a
weight row, 4 flops a byte: batch 1 is bound by the weight's bytes (the H200 needs well over a hundred
flops a byte to leave memory behind: the ridge of lesson 03's roofline, which the lesson computes), and it
turns compute-bound at about a quarter of that ridge in rows. The fast path (``solutions/kernels/int4_matmul.py``) plans for each regime.

Used by the fast path: ``check_args``, and ``matmul`` for the calls it does not take.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._checks import integer, validate

__all__ = ["quantize", "dequantize", "matmul", "reference", "check_args", "int4_matmul_kernel", "QMAX"]

#: The largest magnitude a 4-bit value takes here: symmetric, -7 .. 7 (-8 fits in the nibble but is unused).
QMAX = 7


def _group_size(group_size, K: int) -> int:
    group_size = integer("group_size", group_size, lo=2)
    if group_size % 2:
        raise ValueError(f"group_size must be even, got {group_size}")
    if K % group_size:
        raise ValueError(f"K = {K} is not a multiple of group_size = {group_size}: every group must be whole")
    return group_size


def quantize(w: torch.Tensor, group_size: int = 128):
    """``(packed, scales)`` of ``w`` (N, K), fp16 or bf16 (``nn.Linear.weight``): ``packed`` (N, K/2) uint8
    in the layout of the module's docstring, ``scales`` (N, K/group_size) in ``w``'s dtype."""
    if not isinstance(w, torch.Tensor) or w.dim() != 2:
        raise ValueError(f"w must be a 2-D tensor (N, K), got {getattr(w, 'shape', type(w).__name__)}")
    if w.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise ValueError(f"w must be float16, bfloat16 or float32, got {w.dtype}")
    N, K = w.shape
    group_size = _group_size(group_size, K)
    groups = w.float().reshape(N, K // group_size, group_size)
    scales = (groups.abs().amax(-1) / QMAX).to(w.dtype)  # rounded to w's dtype, as it is stored
    s = scales.float().unsqueeze(-1)
    q = torch.where(s > 0, torch.round(groups / torch.where(s > 0, s, 1.0)), 0.0)
    q = q.clamp(-QMAX - 1, QMAX).to(torch.int8).reshape(N, K)
    lo, hi = q[:, : K // 2], q[:, K // 2 :]
    packed = ((lo & 0xF) | ((hi & 0xF) << 4)).to(torch.uint8)  # int8 bits; the high nibble's sign is bit 7
    return packed.contiguous(), scales.contiguous()


def unpack(packed: torch.Tensor) -> torch.Tensor:
    """The int8 values (N, K) in ``packed`` (N, K/2): low nibbles, then high nibbles, each sign-extended."""
    b = packed.to(torch.int16)
    lo, hi = b & 0xF, (b >> 4) & 0xF
    lo, hi = lo - ((lo & 8) << 1), hi - ((hi & 8) << 1)  # two's complement: 8..15 are -8..-1
    return torch.cat([lo, hi], dim=1).to(torch.int8)


def dequantize(packed: torch.Tensor, scales: torch.Tensor, group_size: int = 128) -> torch.Tensor:
    """The weight (N, K) that ``packed`` and ``scales`` stand for, in the scales' dtype."""
    check_args(None, packed, scales, group_size)
    q = unpack(packed).float()
    s = scales.float().repeat_interleave(group_size, dim=1)
    return (q * s).to(scales.dtype)


def check_args(x, packed, scales, group_size):
    """Check the arguments of ``matmul`` (``x`` None: of ``dequantize``); returns ``(N, K, group_size)``.
    Each mismatch is a ValueError naming the argument."""
    if not isinstance(packed, torch.Tensor) or packed.dim() != 2 or packed.dtype != torch.uint8:
        raise ValueError("packed must be a 2-D uint8 tensor (N, K/2), as quantize returns; got "
                         f"{getattr(packed, 'dtype', type(packed).__name__)} {tuple(getattr(packed, 'shape', ()))}")
    N, K = packed.shape[0], 2 * packed.shape[1]
    group_size = _group_size(group_size, K)
    if not isinstance(scales, torch.Tensor) or scales.dim() != 2:
        raise ValueError(f"scales must be a 2-D tensor (N, K/group_size) = ({N}, {K // group_size}), "
                         f"got {tuple(getattr(scales, 'shape', ()))}")
    if scales.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise ValueError(f"scales must be float16, bfloat16 or float32, got {scales.dtype}")
    if tuple(scales.shape) != (N, K // group_size):
        raise ValueError(f"scales has shape {tuple(scales.shape)}; with packed {tuple(packed.shape)} (K = {K}) and "
                         f"group_size = {group_size} it must be ({N}, {K // group_size})")
    if scales.device != packed.device:
        raise ValueError(f"scales is on {scales.device}, packed on {packed.device}: put them on one device")
    if x is not None:
        validate(x, names=["x"])
        if x.dtype not in (torch.float16, torch.bfloat16):
            raise ValueError(f"x must be float16 or bfloat16, got {x.dtype}")
        if x.dim() < 1 or x.shape[-1] != K:
            raise ValueError(f"x has shape {tuple(x.shape)}: its last dim must be K = {K} (packed holds K/2 bytes a row)")
        if x.device != packed.device:
            raise ValueError(f"x is on {x.device}, packed on {packed.device}: put them on one device")
    return N, K, group_size


@triton.jit
def int4_matmul_kernel(
    x_ptr,  # pointer to x[0, 0], (M, K) with contiguous rows
    w_ptr,  # pointer to packed[0, 0], (N, K/2) bytes, read as int8
    s_ptr,  # pointer to scales[0, 0], (N, K/group_size)
    y_ptr,  # pointer to y[0, 0], (M, N)
    M, N, K,  # x is (M, K), the weight (N, K), y (M, N)
    stride_xm, stride_wn, stride_sn, stride_ym,  # elements between two rows of each
    GROUP: tl.constexpr,  # group_size: the input features one scale covers
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,  # the tile of y this program computes
    BLOCK_K: tl.constexpr,  # bytes of a weight row read per step: BLOCK_K low and BLOCK_K high values
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    half = K // 2  # bytes a row of packed holds
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, half, BLOCK_K):
        ### BEGIN SOLUTION
        k = k0 + offs_k  # byte k holds the weights of columns k (low nibble) and half + k (high nibble)
        k_ok = k < half  # the last step may run past the row's end
        n_ok = offs_n < N
        b = tl.load(w_ptr + offs_n[:, None] * stride_wn + k[None, :],
                    mask=n_ok[:, None] & k_ok[None, :], other=0)  # (BLOCK_N, BLOCK_K) int8
        lo = (b << 4) >> 4  # bits 0-3, sign-extended by the arithmetic shift back
        hi = b >> 4  # bits 4-7, already signed in an int8
        # each value's own group: k // GROUP for the low half, (half + k) // GROUP for the high one
        s_lo = tl.load(s_ptr + offs_n[:, None] * stride_sn + (k // GROUP)[None, :],
                       mask=n_ok[:, None] & k_ok[None, :], other=0.0).to(tl.float32)
        s_hi = tl.load(s_ptr + offs_n[:, None] * stride_sn + ((half + k) // GROUP)[None, :],
                       mask=n_ok[:, None] & k_ok[None, :], other=0.0).to(tl.float32)
        x_mask = (offs_m < M)[:, None] & k_ok[None, :]
        x_lo = tl.load(x_ptr + offs_m[:, None] * stride_xm + k[None, :], mask=x_mask, other=0.0)
        x_hi = tl.load(x_ptr + offs_m[:, None] * stride_xm + (half + k)[None, :], mask=x_mask, other=0.0)
        w_lo = (lo.to(tl.float32) * s_lo).to(x_lo.dtype)  # (BLOCK_N, BLOCK_K) dequantized, in x's dtype
        w_hi = (hi.to(tl.float32) * s_hi).to(x_hi.dtype)
        acc += tl.dot(x_lo, tl.trans(w_lo))  # (BLOCK_M, BLOCK_K) @ (BLOCK_K, BLOCK_N)
        acc += tl.dot(x_hi, tl.trans(w_hi))
        ### STUB
        # 1. k = k0 + offs_k: byte k of a row holds column k (low nibble) and column half + k (high nibble);
        #    mask k < half (the last step may pass the row's end) and offs_n < N
        # 2. load the (BLOCK_N, BLOCK_K) bytes at w_ptr + offs_n[:, None] * stride_wn + k[None, :] (other=0)
        # 3. unpack: the low nibble sign-extended, (b << 4) >> 4; the high one, b >> 4
        # 4. each value's scale: scales[n, k // GROUP] for the low half, scales[n, (half + k) // GROUP]
        #    for the high half; dequantize in fp32, then cast to x's dtype
        # 5. load x[offs_m, k] and x[offs_m, half + k] (mask rows and k) and add both
        #    tl.dot(x_part, tl.trans(w_part)) to acc
        ### END SOLUTION
    y_mask = (offs_m < M)[:, None] & (offs_n < N)[None, :]
    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :], acc.to(y_ptr.dtype.element_ty), mask=y_mask)


def matmul(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, group_size: int = 128,
           BLOCK_M: int = 16, BLOCK_N: int = 32, BLOCK_K: int = 32) -> torch.Tensor:
    """``x @ dequantize(packed, scales, group_size).T``: ``x`` (..., K) fp16 or bf16, the result (..., N) in
    x's dtype, accumulated in fp32. The weights stay packed in memory; the kernel unpacks each tile."""
    N, K, group_size = check_args(x, packed, scales, group_size)
    for name, v in (("BLOCK_M", BLOCK_M), ("BLOCK_N", BLOCK_N), ("BLOCK_K", BLOCK_K)):
        v = integer(name, v, lo=16, hi=1024)
        if v & (v - 1):
            raise ValueError(f"{name} must be a power of two from 16 to 1024 (tl.dot's K side needs 16, and the "
                             f"tiles keep M and N there too), got {v}")
    x2 = x.reshape(-1, K)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    M = x2.shape[0]
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    if M and N:
        w = packed.contiguous().view(torch.int8)  # the same bytes; an int8 shift is arithmetic
        scales = scales.contiguous()
        grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))
        int4_matmul_kernel[grid](x2, w, scales, y, M, N, K, x2.stride(0), w.stride(0), scales.stride(0), y.stride(0),
                                 GROUP=group_size, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K)
    return y.reshape(*x.shape[:-1], N)


def reference(x, packed, scales, group_size=128):
    """What ``matmul`` must return: fp32 maths on the dequantized weight, rounded to x's dtype once."""
    w = unpack(packed).float() * scales.float().repeat_interleave(group_size, dim=1)
    return (x.float() @ w.T).to(x.dtype)
