"""Weight-only int4 matmul (lesson 10) at every batch a model runs, behind a lean launch.

``matmul(x, packed, scales, group_size=128)`` as ``solutions.int4_matmul.matmul`` (same layout, same
checks on a key's first call): ``x @ dequantize(packed, scales).T``.

One kernel, ``int4_mm_kernel``, and the ideas the lesson's kernel leaves out. At a decode step's few
rows the lesson's kernel is not waiting on memory but on its own instructions: an SM issues four
warp-instructions a clock, and to read the weights at the copy's speed it may spend only a few on each
byte. Each idea below removes instructions a weight byte (``research/int4/compile_check.py`` counts them
in the SASS). With all of them the instructions no longer decide: on the H200, the kernel with its
dequantization taken out altogether ran hardly faster, and the kernel reads the weight at about four
fifths of the rate of a Triton kernel that only reads the same bytes (``research/int4/limit_probe.py``).

- **Dequantizing with bit tricks instead of conversions.** Turning an integer into a float is a
  conversion instruction, which an H100/H200 SM runs at a quarter of its integer rate. Instead, four
  bytes are taken as one 32-bit word, and each 4-bit value ``v`` is masked into the mantissa of a
  16-bit float whose exponent makes its unit 1: ``0x6400 | v`` is ``1024 + v`` in fp16 (``0x4300 | v``
  is ``128 + v`` in bf16). One logical op makes two such halves of a word; one packed subtraction of
  ``1024 + 8`` gives two signed values (the XOR with 8 first maps the two's complement nibble to
  ``v + 8``). This is the trick of FasterTransformer's and Marlin's int4 kernels (Frantar et al. 2024,
  "MARLIN: Mixed-Precision Auto-Regressive Parallel Inference on Large Language Models"), written in
  inline PTX (``_dequant``, ``DEQ`` 3: the masks and the magic in one ``lop3``); the interpreter, which runs
  no PTX, takes the same trick in Triton (``DEQ`` 1, as ``plan`` prints it there).
- **One scale a row and step, applied to the product** (``POST_SCALE``). Steps of ``BLOCK_K`` bytes
  never straddle a group (``BLOCK_K`` divides ``group_size`` and K/2), so a step needs one scale per
  weight row. The MMA multiplies the unscaled integers (-8 .. 7, exact in fp16 and bf16) and the scale
  multiplies its fp32 result: one multiply an output and step instead of one a weight. (Without
  ``POST_SCALE`` the tile is scaled in x's dtype first, one rounding, as ``dequantize``; the larger
  tiles keep that, where a second fp32 tile a step would not fit in registers.)
- **The weight as the MMA's left operand at small batch** (``SWAP``): a tensor-core instruction is 16
  rows tall (``mma.sync``) or 64 (``wgmma``), while a decode step has 1 to 16 rows of x. Computing
  ``y.T = W @ x.T`` puts the weight's many rows (N) where the instruction's rows are and x's rows in its
  columns, of which ``mma.sync`` takes as few as 8 (``BLOCK_M`` 8): the dequantized weight goes from
  registers into the MMA, and no registers are spent copying a padded x. With 16 columns Triton picks
  ``wgmma``, whose register operand costs a repacking of the weight each step; ``PARTS`` keeps ``mma.sync``
  there: the tile's 16 (or 32) rows of x as two (or four) MMAs of 8 columns on the same dequantized weight,
  which is dequantized once for all of them.
- **Split-K at small batch** (``SPLIT_K``; 0: by the work, ``auto_split``): a layer of N = 4096
  outputs makes 64 tiles of 64 rows; to keep 132 SMs reading, each tile's K is also split over
  programs of about 8 steps each, and the last to finish adds the fp32 partials (serial split-K, as
  ``matmul_small`` does it).

The plan (``plan``) picks a config by M: the swapped MMA up to 8 rows, two of them (``PARTS`` 2) at 16, four at
32, 128-row tiles at prefill sizes. From ``DENSE_MIN_M`` rows on, ``matmul`` dequantizes the weight in one
pass (``dequantize``) and calls cuBLAS instead: there the tensor cores decide, and cuBLAS keeps them busier
than a kernel that must dequantize inside each tile. ``CONFIGS`` holds the H200's choices (``research/int4/sweep.py``, which times
M 1, 4, 16 and 128; at 8 rows, a model's batch of 8, the swapped tile took a decode step of the 8B model
from 1972 to 2368 tokens/s against the 16-row tile: ``research/llm/logs/step_probe_second.log``).

Forming SwiGLU inside the down projection's loads (``silu(gate) * up`` as x is loaded) lost a quarter
of the int4 step's speed on the H200 (the same log): each program recomputes the activation of its
whole x tile, padded to 8 columns at one row, in every step, far more instructions than the
dequantization's. Taking the bit trick's bias off after the MMA (one ``lop3`` a pair of values, the bias
times the sum of x subtracted from the fp32 product) lost there, and loading the weight's tiles by the
TMA tied (``research/int4/logs/limit_probe_first_*.log``). ``DOT=False`` (fp32 multiply-adds, no tensor
cores), ``PREFETCH`` (the next step's bytes loaded by hand) and ``EARLY_SCALES`` (the next step's scales
loaded during this one) are candidates the sweep measures.
"""

from __future__ import annotations

import math
import weakref

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from tkcourse.mode import INTERPRET

from .. import int4_matmul as lesson
from .decode_plan import sm_count
from .int4_ptx import DEQ3_ASM_BF16, DEQ3_ASM_FP16, DEQ3_CONSTRAINTS_BF16, DEQ3_CONSTRAINTS_FP16, MAGIC16, MAGIC_BF16
from .lean import MAX_ENTRIES, Lean, hooks_on, pdl_meta
from .lean import tensor_key as _t

__all__ = ["matmul", "int4_mm_kernel", "plan", "auto_split", "run", "config", "scales32", "CONFIGS", "FP32_SCALES",
           "INT4_PDL", "FILL_PER_SM", "LEANS", "forget", "dequantize", "dequant_kernel", "dense_matmul", "DENSE_MIN_M"]




@triton.jit
def _dequant(b, DEQ: tl.constexpr, dtype: tl.constexpr):
    """The low and high values of the int8 tensor ``b`` (a byte each) as ``dtype``, unscaled: -8 .. 7.

    ``DEQ`` 0: shifts and an int-to-float conversion (the lesson's way); 1: the bit trick on 16- or
    32-bit integers (``dtype``'s width), in Triton; 2: the bit trick in PTX on whole 32-bit words,
    two values an instruction (16-bit ``dtype`` only); 3: the same in fewer instructions (what ``CONFIGS``
    take).
    In the interpreter, 2 and 3 run as 1."""
    if DEQ == 3:  # DEQ 2 with fewer instructions: masks and magic in one lop3, constants passed in once
        m = tl.full(b.shape, MAGIC16 if dtype == tl.float16 else MAGIC_BF16, tl.int32)
        if dtype == tl.float16:
            # the high nibbles stay in bits 4-7: 1024 + 16 (v + 8), then (x / 16) - 72 in one fma
            one16 = tl.full(b.shape, 0x2C002C00, tl.int32)  # 1/16 in both halves
            neg72 = tl.full(b.shape, 0xD480D480 - (1 << 32), tl.int32)  # -72 in both halves
            lo, hi = tl.inline_asm_elementwise(
                asm=DEQ3_ASM_FP16, constraints=DEQ3_CONSTRAINTS_FP16, args=[b, m, one16, neg72],
                dtype=(tl.float16, tl.float16), is_pure=True, pack=4)
        else:  # bf16 has 7 mantissa bits: every nibble is shifted down to bits 0-3 first
            lo, hi = tl.inline_asm_elementwise(
                asm=DEQ3_ASM_BF16, constraints=DEQ3_CONSTRAINTS_BF16, args=[b, m], dtype=(tl.bfloat16, tl.bfloat16),
                is_pure=True, pack=4)
    elif DEQ == 2:
        if dtype == tl.float16:
            lo, hi = tl.inline_asm_elementwise(
                asm="""{
                .reg .b32 t, a, m, f;
                mov.b32 m, 0x64086408;
                prmt.b32 t, $4, 0, 0x3120;
                and.b32 a, t, 0x000f000f; xor.b32 a, a, m; sub.f16x2 $0, a, m;
                shr.u32 f, t, 8;  and.b32 a, f, 0x000f000f; xor.b32 a, a, m; sub.f16x2 $1, a, m;
                shr.u32 f, t, 4;  and.b32 a, f, 0x000f000f; xor.b32 a, a, m; sub.f16x2 $2, a, m;
                shr.u32 f, t, 12; and.b32 a, f, 0x000f000f; xor.b32 a, a, m; sub.f16x2 $3, a, m;
                }""",
                constraints="=r,=r,=r,=r,r", args=[b], dtype=(tl.float16, tl.float16), is_pure=True, pack=4)
        else:
            lo, hi = tl.inline_asm_elementwise(
                asm="""{
                .reg .b32 t, a, m, f, one, neg;
                mov.b32 m, 0x43084308; mov.b32 one, 0x3f803f80; mov.b32 neg, 0xc308c308;
                prmt.b32 t, $4, 0, 0x3120;
                and.b32 a, t, 0x000f000f; xor.b32 a, a, m; fma.rn.bf16x2 $0, a, one, neg;
                shr.u32 f, t, 8;  and.b32 a, f, 0x000f000f; xor.b32 a, a, m; fma.rn.bf16x2 $1, a, one, neg;
                shr.u32 f, t, 4;  and.b32 a, f, 0x000f000f; xor.b32 a, a, m; fma.rn.bf16x2 $2, a, one, neg;
                shr.u32 f, t, 12; and.b32 a, f, 0x000f000f; xor.b32 a, a, m; fma.rn.bf16x2 $3, a, one, neg;
                }""",
                constraints="=r,=r,=r,=r,r", args=[b], dtype=(tl.bfloat16, tl.bfloat16), is_pure=True, pack=4)
    elif DEQ == 1:
        if dtype == tl.float32:  # 0x4B000000 | v is 2**23 + v
            t = b.to(tl.int32)
            lo = ((t & 0xF) ^ 0x4B000008).to(tl.float32, bitcast=True) - 8388616.0
            hi = (((t >> 4) & 0xF) ^ 0x4B000008).to(tl.float32, bitcast=True) - 8388616.0
        elif dtype == tl.float16:  # 0x6400 | v is 1024 + v
            t = b.to(tl.int16)
            lo = ((t & 0xF) ^ 0x6408).to(tl.float16, bitcast=True) - 1032.0
            hi = (((t >> 4) & 0xF) ^ 0x6408).to(tl.float16, bitcast=True) - 1032.0
        else:  # bfloat16: 0x4300 | v is 128 + v
            t = b.to(tl.int16)
            lo = ((t & 0xF) ^ 0x4308).to(tl.bfloat16, bitcast=True) - 136.0
            hi = (((t >> 4) & 0xF) ^ 0x4308).to(tl.bfloat16, bitcast=True) - 136.0
    else:
        lo = ((b << 4) >> 4).to(dtype)
        hi = (b >> 4).to(dtype)
    return lo, hi


@triton.jit
def _swapped_part(acc, lo, hi, s_lo, s_hi, x_ptr, offs_m, M, stride_xm, k0, half, offs_k, POST_SCALE: tl.constexpr):
    """One step of ``y.T = W @ x.T`` for the rows ``offs_m`` of x: the dequantized weight's two K halves
    (``lo``, ``hi``) times x's matching columns, added into ``acc`` (BLOCK_N, len(offs_m))."""
    m_ok = offs_m < M
    x_row = x_ptr + offs_m.to(tl.int64) * stride_xm
    x_lo = tl.load(x_row[None, :] + (k0 + offs_k)[:, None], mask=m_ok[None, :], other=0.0)
    x_hi = tl.load(x_row[None, :] + (half + k0 + offs_k)[:, None], mask=m_ok[None, :], other=0.0)
    if POST_SCALE:  # the MMA of the unscaled integers (exact in x's dtype), then a scale an output
        acc += (tl.dot(lo, x_lo) * s_lo.to(tl.float32)[:, None]
                + tl.dot(hi, x_hi) * s_hi.to(tl.float32)[:, None])
    else:
        acc = tl.dot(lo, x_lo, acc)
        acc = tl.dot(hi, x_hi, acc)
    return acc


@triton.jit
def _beside(a, b):
    """Two (R, C) tiles side by side: (R, 2C)."""
    return tl.reshape(tl.permute(tl.join(a, b), (0, 2, 1)), (a.shape[0], 2 * a.shape[1]))


@triton.jit(do_not_specialize=["M"])  # one compile serves every M: M only masks
def int4_mm_kernel(
    x_ptr, w_ptr, s_ptr, y_ptr,  # x (M, K), packed (N, K/2) as int8, scales (N, K/GROUP), y (M, N)
    ws_ptr, count_ptr,  # SPLIT_K > 1: fp32 partial tiles, and a counter per tile (0 between launches)
    M, N, K,
    stride_xm, stride_wn, stride_sn, stride_ym,
    GROUP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    SPLIT_K: tl.constexpr,  # programs sharing a tile's K
    SWAP: tl.constexpr,  # y.T = W @ x.T: the weight is the MMA's left operand (small M)
    DOT: tl.constexpr,  # tensor cores; False: fp32 multiply-adds and a sum (a GEMV, a few rows)
    DEQ: tl.constexpr,  # how to dequantize (``_dequant``)
    PREFETCH: tl.constexpr = False,  # load the next step's bytes before working on this one's
    EARLY_SCALES: tl.constexpr = False,  # load the next step's scales during this step
    POST_SCALE: tl.constexpr = False,  # scale the MMA's product (fp32, a value an output) instead of the weight
    PDL: tl.constexpr = False,  # launched with programmatic dependent launch (``lean.pdl_meta``)
    PARTS: tl.constexpr = 1,  # SWAP: x's rows as 1, 2 or 4 MMAs of BLOCK_M / PARTS columns each (mma.sync's 8)
):
    if PDL:
        gdc_wait()  # x may be the previous kernel's output, and y's memory what it still reads
    pid = tl.program_id(0)
    tile = pid // SPLIT_K
    split = pid % SPLIT_K
    n_tiles = tl.cdiv(N, BLOCK_N)
    pid_n = tile % n_tiles
    pid_m = tile // n_tiles
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M // PARTS)  # the first part's rows of x (all, at 1 part)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    rows_n = tl.where(offs_n < N, offs_n, 0)  # a weight row past N reads row 0, never stored
    m_ok = offs_m < M
    half = K // 2
    steps = half // BLOCK_K  # BLOCK_K divides K/2 and GROUP (the plan's promise)
    per_split = tl.cdiv(steps, SPLIT_K)
    first = split * per_split
    last = tl.minimum(first + per_split, steps)
    dt = x_ptr.dtype.element_ty
    if SWAP:  # an accumulator a part: y.T's columns for that part's rows of x
        acc = tl.zeros((BLOCK_N, BLOCK_M // PARTS), dtype=tl.float32)
        if PARTS >= 2:
            acc1 = tl.zeros((BLOCK_N, BLOCK_M // PARTS), dtype=tl.float32)
        if PARTS == 4:
            acc2 = tl.zeros((BLOCK_N, BLOCK_M // PARTS), dtype=tl.float32)
            acc3 = tl.zeros((BLOCK_N, BLOCK_M // PARTS), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    w_row = w_ptr + rows_n.to(tl.int64)[:, None] * stride_wn
    s_row = s_ptr + rows_n * stride_sn
    x_row = x_ptr + offs_m.to(tl.int64) * stride_xm
    if PREFETCH:
        b_next = tl.load(w_row + (tl.minimum(first, steps - 1) * BLOCK_K + offs_k)[None, :])
    if EARLY_SCALES:
        k_first = tl.minimum(first, steps - 1) * BLOCK_K
        s_lo_next = tl.load(s_row + k_first // GROUP)
        s_hi_next = tl.load(s_row + (half + k_first) // GROUP)
    for step in range(first, last):
        k0 = step * BLOCK_K
        if PREFETCH:  # the load of step + 1 is in flight while step's bytes are unpacked and multiplied
            b = b_next
            b_next = tl.load(w_row + (tl.minimum(step + 1, steps - 1) * BLOCK_K + offs_k)[None, :])
        else:
            b = tl.load(w_row + (k0 + offs_k)[None, :])  # (BLOCK_N, BLOCK_K) bytes
        if EARLY_SCALES:  # a scale is 2 bytes, too few for Triton's pipeliner (cp.async moves 4 or more): loaded
            # by hand a step ahead, so that no step waits for a load from memory before its first multiply
            s_lo = s_lo_next
            s_hi = s_hi_next
            k_next = tl.minimum(step + 1, steps - 1) * BLOCK_K
            s_lo_next = tl.load(s_row + k_next // GROUP)
            s_hi_next = tl.load(s_row + (half + k_next) // GROUP)
        else:
            s_lo = tl.load(s_row + k0 // GROUP)  # one scale per row of the step, in the scales' dtype
            s_hi = tl.load(s_row + (half + k0) // GROUP)
        if DOT:
            lo, hi = _dequant(b, DEQ, dt)
            if not POST_SCALE:  # scale in x's dtype first (one rounding, as dequantize); the MMA accumulates
                lo = lo * s_lo.to(dt)[:, None]
                hi = hi * s_hi.to(dt)[:, None]
            if SWAP:  # y.T = W @ x.T: the weight tile on the left, x's rows as the columns
                cols: tl.constexpr = BLOCK_M // PARTS  # each further part: the same dequantized weight, the next rows
                acc = _swapped_part(acc, lo, hi, s_lo, s_hi, x_ptr, offs_m, M, stride_xm, k0, half, offs_k, POST_SCALE)
                if PARTS >= 2:
                    acc1 = _swapped_part(acc1, lo, hi, s_lo, s_hi, x_ptr, offs_m + cols, M, stride_xm, k0, half, offs_k,
                                         POST_SCALE)
                if PARTS == 4:
                    acc2 = _swapped_part(acc2, lo, hi, s_lo, s_hi, x_ptr, offs_m + 2 * cols, M, stride_xm, k0, half,
                                         offs_k, POST_SCALE)
                    acc3 = _swapped_part(acc3, lo, hi, s_lo, s_hi, x_ptr, offs_m + 3 * cols, M, stride_xm, k0, half,
                                         offs_k, POST_SCALE)
            else:
                x_lo = tl.load(x_row[:, None] + (k0 + offs_k)[None, :], mask=m_ok[:, None], other=0.0)
                x_hi = tl.load(x_row[:, None] + (half + k0 + offs_k)[None, :], mask=m_ok[:, None], other=0.0)
                if POST_SCALE:
                    acc += (tl.dot(x_lo, tl.trans(lo)) * s_lo.to(tl.float32)[None, :]
                            + tl.dot(x_hi, tl.trans(hi)) * s_hi.to(tl.float32)[None, :])
                else:
                    acc = tl.dot(x_lo, tl.trans(lo), acc)
                    acc = tl.dot(x_hi, tl.trans(hi), acc)
        else:  # a few rows: products in fp32, summed over the step, scaled once per row and group
            lo, hi = _dequant(b, DEQ, tl.float32)
            x_lo = tl.load(x_row[:, None] + (k0 + offs_k)[None, :], mask=m_ok[:, None], other=0.0).to(tl.float32)
            x_hi = tl.load(x_row[:, None] + (half + k0 + offs_k)[None, :], mask=m_ok[:, None], other=0.0).to(tl.float32)
            p_lo = tl.sum(lo[None, :, :] * x_lo[:, None, :], axis=2)  # (BLOCK_M, BLOCK_N)
            p_hi = tl.sum(hi[None, :, :] * x_hi[:, None, :], axis=2)
            acc += p_lo * s_lo.to(tl.float32)[None, :] + p_hi * s_hi.to(tl.float32)[None, :]
    if PDL:
        gdc_launch_dependents()  # the loop is done: the next kernel may get onto the SMs
    if PARTS == 2:  # the parts side by side: the (BLOCK_N, BLOCK_M) tile of y.T the rest expects
        acc = _beside(acc, acc1)
    if PARTS == 4:
        acc = _beside(_beside(acc, acc1), _beside(acc2, acc3))
    if PARTS > 1:
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        m_ok = offs_m < M
    if SWAP:
        y_ptrs = y_ptr + offs_m[None, :] * stride_ym + offs_n[:, None]
        y_mask = m_ok[None, :] & (offs_n < N)[:, None]
        cell = tl.arange(0, BLOCK_N)[:, None] * BLOCK_M + tl.arange(0, BLOCK_M)[None, :]
    else:
        y_ptrs = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :]
        y_mask = m_ok[:, None] & (offs_n < N)[None, :]
        cell = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    if SPLIT_K == 1:
        tl.store(y_ptrs, acc.to(dt), mask=y_mask)
    else:  # serial split-K: park the partial, count in; the last program of the tile adds them all
        ws_tile = ws_ptr + tile.to(tl.int64) * (SPLIT_K * BLOCK_M * BLOCK_N) + cell
        tl.store(ws_tile + split * (BLOCK_M * BLOCK_N), acc, cache_modifier=".cg")
        tl.debug_barrier()
        done = tl.atomic_add(count_ptr + tile, 1, sem="acq_rel")
        if done == SPLIT_K - 1:
            total = tl.load(ws_tile, cache_modifier=".cg")
            for s in tl.static_range(1, SPLIT_K):
                total += tl.load(ws_tile + s * (BLOCK_M * BLOCK_N), cache_modifier=".cg")
            tl.store(y_ptrs, total.to(dt), mask=y_mask)
            tl.atomic_xchg(count_ptr + tile, 0)


@triton.jit
def dequant_kernel(w_ptr, s_ptr, out_ptr, N, K, stride_wn, stride_sn, stride_on,
                   GROUP: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_J: tl.constexpr):
    """``out`` (N, K) = the weight that the packed bytes (N, K/2) and scales stand for: each value times its
    group's scale in fp32, rounded once to ``out``'s dtype (``lesson.dequantize``'s maths). A program takes
    ``BLOCK_N`` rows by ``BLOCK_J`` bytes: the low nibbles' columns j, the high nibbles' K/2 + j. ``BLOCK_J``
    divides K/2 and the group, so each row of the block has one scale for its low values and one for its high."""
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    j0 = tl.program_id(1) * BLOCK_J
    j = j0 + tl.arange(0, BLOCK_J)
    half = K // 2
    ok = rows < N
    rows = rows.to(tl.int64)
    b = tl.load(w_ptr + rows[:, None] * stride_wn + j[None, :], mask=ok[:, None], other=0)
    lo, hi = _dequant(b, 0, tl.float32)
    s_lo = tl.load(s_ptr + rows * stride_sn + j0 // GROUP, mask=ok, other=0.0).to(tl.float32)
    s_hi = tl.load(s_ptr + rows * stride_sn + (half + j0) // GROUP, mask=ok, other=0.0).to(tl.float32)
    dt = out_ptr.dtype.element_ty
    o_row = out_ptr + rows[:, None] * stride_on
    tl.store(o_row + j[None, :], (lo * s_lo[:, None]).to(dt), mask=ok[:, None])
    tl.store(o_row + (half + j)[None, :], (hi * s_hi[:, None]).to(dt), mask=ok[:, None])


def config(bm, bn, bk, split, swap, warps, stages, dot=True, deq=2, prefetch=False, early_scales=False,
           post_scale=False, parts=1):
    return dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, SPLIT_K=split, SWAP=swap, DOT=dot, DEQ=deq, PREFETCH=prefetch,
                EARLY_SCALES=early_scales, POST_SCALE=post_scale, PARTS=parts,
                num_warps=warps, num_stages=stages)


#: Configs by the largest M each serves (``plan``), the H200's choices of ``research/int4/sweep.py`` (its
#: sixth run, log ``research/int4/logs/sweep_sixth.*``), each the best on average over the four weight
#: shapes of ``benchmarks/int4_matmul.py`` in bf16: up to 8 rows, the weight as the MMA's left operand with
#: 8 columns of x, scaled after the MMA; at 16 rows the same as two MMAs of 8 columns (``PARTS`` 2, which beat x on
#: the left by 2-14% at every shape, fp16 and bf16: ``research/int4/logs/pair_probe_first.log``); at 17-32 rows
#: four of them (``PARTS`` 4: 1.24x cuBLAS on average over the four shapes, against 1.18x for the 128-row tile,
#: from 0.96x its speed at 14336 x 4096 to 1.21x at 28672 x 8192: ``research/int4/logs/quad_probe_first.log``);
#: above, 128-row tiles that fill the SMs.
#: ``SPLIT_K`` 0 splits K by the work (``auto_split``).
CONFIGS = {
    1: config(8, 64, 128, 0, True, 4, 3, deq=3, post_scale=True),
    4: config(8, 64, 128, 0, True, 4, 3, deq=3, post_scale=True),
    8: config(8, 64, 128, 0, True, 4, 3, deq=3, post_scale=True),  # not swept at 8 rows (module docstring)
    16: config(16, 64, 128, 0, True, 4, 3, deq=3, post_scale=True, parts=2),
    32: config(32, 64, 128, 0, True, 4, 3, deq=3, post_scale=True, parts=4),
    1 << 62: config(128, 128, 64, 0, False, 8, 4, deq=3),
}


#: ``SPLIT_K`` 0 in a config: split K by the work (``plan``). Tiles of a few rows: about this many K steps a
#: program (on the H200 the fastest split at each weight shape gave every program 7 or 8 steps, from 2 to 8
#: splits: ``research/int4/logs/sweep_fifth.jsonl``); taller tiles: as many splits as fill the SMs once.
STEPS_A_PROGRAM = 8
MAX_SPLIT = 16
#: Tiles of up to 8 rows: split further while the programs number fewer than this many an SM and each keeps
#: at least ``MIN_STEPS`` K steps. A small weight (a model's 4096 x 4096 output projection: 64 tiles) would
#: otherwise give each SM one program of four warps, too few loads in flight to keep it reading. The
#: benchmark's four shapes give 3 or more programs an SM without it, so their swept splits stand.
FILL_PER_SM = 2
MIN_STEPS = 4


def auto_split(M: int, N: int, K: int, cfg: dict, sms: int) -> int:
    """The split of K for ``SPLIT_K`` 0: a power of two, at least 1, at most ``MAX_SPLIT``."""
    steps = max(1, (K // 2) // cfg["BLOCK_K"])
    tiles = triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"])
    if cfg["BLOCK_M"] <= 16 or cfg.get("PARTS", 1) > 1:  # decode: short programs, many in flight on each SM
        split = 1 << max(0, round(math.log2(max(1.0, steps / STEPS_A_PROGRAM))))
        while cfg["BLOCK_M"] <= 8 and tiles * split < FILL_PER_SM * sms and steps // (2 * split) >= MIN_STEPS:
            split *= 2
    else:  # prefill: each program a whole tile's worth of MMAs; split only to fill the SMs
        split = 1
        while tiles * split * 2 <= sms:
            split *= 2
    return min(split, MAX_SPLIT)


def plan(M: int, N: int, K: int, group_size: int, config: dict | None = None, sms: int = 132) -> dict:
    """The config for an (M, K) x (K, N) product: ``CONFIGS``' by M (or ``config``), with ``BLOCK_K``
    shrunk until it divides the group and K/2, ``BLOCK_M`` to what M needs, ``SPLIT_K`` to the K steps
    (``SPLIT_K`` 0: chosen by ``auto_split`` from the work and ``sms``, the device's SM count)."""
    cfg = dict(config or CONFIGS[min(b for b in CONFIGS if M <= b)])
    bk = math.gcd(cfg["BLOCK_K"], group_size, K // 2)
    if bk < 16:
        raise ValueError(f"group_size = {group_size} and K = {K}: the kernel needs steps of at least 16 bytes that "
                         f"divide both group_size and K/2 (use a group_size that is a multiple of 32)")
    cfg["BLOCK_K"] = bk
    need = triton.next_power_of_2(max(M, 1))
    # an MMA's columns may be as few as 8 (x's rows when SWAP puts them there), its rows no fewer than 16;
    # PARTS' tile is that many MMAs of 8 columns each (only the swapped MMA has x's rows as its columns)
    parts = cfg.get("PARTS", 1) if cfg["SWAP"] and cfg["DOT"] else 1
    if parts not in (1, 2, 4):
        raise ValueError(f"PARTS = {parts}: the tile's rows of x go in as 1, 2 or 4 MMAs")
    cfg["PARTS"] = parts
    least = 8 * parts if cfg["SWAP"] else 16
    cfg["BLOCK_M"] = max(least, min(cfg["BLOCK_M"], need)) if cfg["DOT"] else min(cfg["BLOCK_M"], need)
    if INTERPRET and cfg["DEQ"] >= 2:  # the interpreter runs no PTX: the same trick in Triton
        cfg["DEQ"] = 1
    if cfg["SPLIT_K"] == 0:
        cfg["SPLIT_K"] = auto_split(M, N, K, cfg, sms)
    cfg["SPLIT_K"] = max(1, min(cfg["SPLIT_K"], (K // 2) // bk))
    return cfg


_WORKSPACE: dict = {}  # (device, stream) -> (fp32 partials, int32 counters), grown as needed
#: Launch with programmatic dependent launch (``lean.pdl_meta``) where the GPU has it: in a model's decode
#: step the next kernel gets onto the SMs while this one's last programs finish. Read when a key's entry
#: is made (``forget()`` after changing it).
INT4_PDL = True


def _workspace(cells: int, tiles: int, device, stream=0):
    key = (device, stream)
    ws = _WORKSPACE.get(key)
    if ws is None or ws[0].numel() < cells or ws[1].numel() < tiles:
        ws = (torch.empty(max(cells, 1), dtype=torch.float32, device=device),
              torch.zeros(max(tiles, 1), dtype=torch.int32, device=device))
        _WORKSPACE[key] = ws
    return ws


def _launch_args(x2, w, scales, y, N, K, group_size, cfg):
    M = x2.shape[0]
    tiles = triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"])
    ws, counts = _workspace(tiles * cfg["SPLIT_K"] * cfg["BLOCK_M"] * cfg["BLOCK_N"] if cfg["SPLIT_K"] > 1 else 0,
                            tiles, x2.device)
    grid = (tiles * cfg["SPLIT_K"],)
    meta = dict(cfg, GROUP=group_size, **pdl_meta(x2.device, INT4_PDL))
    return grid, (x2, w, scales, y, ws, counts), (M, N, K, x2.stride(0), w.stride(0), scales.stride(0), y.stride(0)), meta


def run(x, packed, scales, group_size=128, config=None):
    """``matmul`` through ``kernel[grid]`` with one given config (``CONFIGS``' keys): for sweeps and tests."""
    N, K, group_size = lesson.check_args(x, packed, scales, group_size)
    x2 = x.reshape(-1, K)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    y = torch.empty((x2.shape[0], N), dtype=x.dtype, device=x.device)
    if x2.shape[0] and N:
        cfg = plan(x2.shape[0], N, K, group_size, config, sm_count(x.device))
        grid, args, static, meta = _launch_args(x2, packed.contiguous().view(torch.int8), scales.contiguous(), y, N, K,
                                                group_size, cfg)
        int4_mm_kernel[grid](*args, *static, **meta)
    return y.reshape(*x.shape[:-1], N)


_INT4 = Lean(int4_mm_kernel)

#: Hand the kernel fp32 scales, a copy kept per scales tensor (``scales32``): a step's scale is then 4
#: bytes a row, which Triton's pipeliner streams ahead with ``cp.async`` like the weight's bytes, where
#: 2-byte scales are below its minimum and are waited on in every step. Off until an H200 run shows it
#: pays (``research/README.md``, the int4 section); the recorded rows were measured without it.
FP32_SCALES = False
_SCALES32: dict = {}  # data_ptr -> (weakref to the scales, their _version, the fp32 copy)


def scales32(scales: torch.Tensor) -> torch.Tensor:
    """``scales`` in fp32, made once per tensor and kept while it is alive and unchanged (its ``_version``:
    an in-place write makes a new copy). The copy is made outside any CUDA graph, on the first call."""
    if scales.dtype == torch.float32:
        return scales
    hit = _SCALES32.get(scales.data_ptr())
    if hit is not None and hit[0]() is scales and hit[1] == scales._version:
        return hit[2]
    if len(_SCALES32) >= 4096:
        _SCALES32.clear()
    copy = scales.float()
    _SCALES32[scales.data_ptr()] = (weakref.ref(scales), scales._version, copy)
    return copy


def dequantize(packed, scales, group_size=128, dtype=None):
    """``solutions.int4_matmul.dequantize`` in one pass of a Triton kernel over the bytes, into ``dtype``
    (default: the scales'): the same values, bit for bit."""
    N, K, group_size = lesson.check_args(None, packed, scales, group_size)
    out = torch.empty((N, K), dtype=dtype or scales.dtype, device=packed.device)
    if N and K:
        w, s = packed.contiguous().view(torch.int8), scales.contiguous()
        rows, j = DEQUANT_BLOCK[0], math.gcd(DEQUANT_BLOCK[1], group_size, K // 2)  # a power of two
        dequant_kernel[(triton.cdiv(N, rows), (K // 2) // j)](w, s, out, N, K, w.stride(0), s.stride(0), out.stride(0),
                                                             GROUP=group_size, BLOCK_N=rows, BLOCK_J=j,
                                                             num_warps=DEQUANT_WARPS)
    return out


#: Rows of the weight and (at most) bytes of a row a program of ``dequant_kernel`` takes, and its warps.
DEQUANT_BLOCK = (16, 128)
DEQUANT_WARPS = 4
#: From this many rows of x on, ``matmul`` dequantizes the weight into x's dtype (``dequantize``) and hands
#: the product to cuBLAS: its 16-bit weight's extra bytes (three times the packed weight's, written once
#: and read once) cost less than the int4 kernels' dequantization inside every tile, which the tensor
#: cores wait on. The call holds a 16-bit copy of the weight while it runs (where it cannot, the int4
#: kernel runs instead). None: never. On the H200
#: (``research/int4/dense_probe.py``, log ``research/int4/logs/dense_probe_second.log``, the four weight
#: shapes, fp16 and bf16), x cuBLAS on the 16-bit weight: at 1024 rows 0.79-0.83 against the Gluon
#: kernel's 0.67-0.72, at 2048 0.86-0.92 against 0.62-0.73, at 4096 0.96-1.03 against the 128-row tile's
#: 0.37-0.53; at 512 rows 0.65-0.71 against 0.69-0.74, where the Gluon kernel stays.
DENSE_MIN_M = 1024
_DENSE: set = set()  # keys of first calls that took the dense route


def dense_matmul(x, packed, scales, group_size=128):
    """``x @ dequantize(packed, scales, group_size).T`` by cuBLAS on the weight dequantized into x's dtype: what
    ``matmul`` runs from ``DENSE_MIN_M`` rows on (no argument checks: ``matmul``'s first call made them).
    Where the device has no room for the 16-bit weight, the int4 kernel takes the product, which needs none."""
    try:
        w = dequantize(packed, scales, group_size, x.dtype)
    except torch.OutOfMemoryError:
        return run(x, packed, scales, group_size)
    return torch.matmul(x, w.T)


def matmul(x, packed, scales, group_size=128):
    """``x @ dequantize(packed, scales, group_size).T`` as ``solutions.int4_matmul.matmul``, on the plan."""
    try:
        key = (_t(x), _t(packed), _t(scales), group_size, FP32_SCALES)
        e = _INT4.get(key)
    except (AttributeError, TypeError):
        return lesson.matmul(x, packed, scales, group_size)  # not tensors: the lesson's checks and errors
    if e is None:
        if key in _DENSE:
            return dense_matmul(x, packed, scales, group_size)
        return _first(key, x, packed, scales, group_size)
    if FP32_SCALES:
        scales = scales32(scales)
    x2 = x.reshape(-1, x.shape[-1])
    template, ws, counts, out_shape, gluon = e.info
    y = torch.empty_like(template)
    if gluon is not None:  # Hopper's prefill kernel (``kernels.gluon_int4``): x's and the weight's descriptors
        if e.tensor_descriptors:
            e(x2, packed.view(torch.int8), scales.data_ptr(), y.data_ptr(), ws.data_ptr(), counts.data_ptr())
        else:
            e(*gluon.descriptors(x2, packed.view(torch.int8)), scales, y, ws, counts)
    elif e.lean:
        e(x2.data_ptr(), packed.data_ptr(), scales.data_ptr(), y.data_ptr(), ws.data_ptr(), counts.data_ptr())
    else:
        e(x2, packed.view(torch.int8), scales, y, ws, counts)
    return y.view(out_shape)


def _first(key, x, packed, scales, group_size):
    N, K, group_size = lesson.check_args(x, packed, scales, group_size)
    x2 = x.reshape(-1, K)
    M = x2.shape[0]
    if not (x2.stride(-1) == 1 and packed.is_contiguous() and scales.is_contiguous()) or M == 0 or N == 0:
        return run(x, packed, scales, group_size)  # unusual layouts: the ordinary launch, every call
    if DENSE_MIN_M is not None and M >= DENSE_MIN_M:  # many rows: cuBLAS on the dequantized weight
        if len(_DENSE) >= MAX_ENTRIES:
            _DENSE.clear()
        _DENSE.add(key)
        return dense_matmul(x, packed, scales, group_size)
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    out_shape = (*x.shape[:-1], N)
    template = torch.empty((), dtype=x.dtype, device=x.device).expand(M, N)  # empty_like: a new (M, N) tensor
    if not INTERPRET and _gluon_takes(x2, packed, scales, group_size):
        return _gluon_first(key, x2, packed, scales, group_size, y, template, out_shape)
    cfg = plan(M, N, K, group_size, sms=sm_count(x.device))
    if FP32_SCALES:
        scales = scales32(scales)
    grid, args, static, meta = _launch_args(x2, packed.view(torch.int8), scales, y, N, K, group_size, cfg)
    _INT4.first(key, args, static, grid, meta, info=(template, args[4], args[5], out_shape, None))  # and its workspace
    return y.view(out_shape)


def _gluon_takes(x2, packed, scales, group_size) -> bool:
    if x2.device.type != "cuda" or torch.cuda.get_device_capability(x2.device) != (9, 0):
        return False  # Gluon's Hopper module is imported only where it can run
    from . import gluon_int4

    return gluon_int4.takes(x2, packed, scales, group_size) and not FP32_SCALES


def _gluon_lean():
    """The Gluon kernel's ``Lean``, made on the first call routed to it and listed in ``LEANS``."""
    if "int4_gluon" not in LEANS:
        from . import gluon_int4

        LEANS["int4_gluon"] = Lean(gluon_int4.kernel_for(gluon_int4.CONFIG))
    return LEANS["int4_gluon"]


def _gluon_first(key, x2, packed, scales, group_size, y, template, out_shape):
    """A first call routed to ``kernels.gluon_int4`` (a Hopper GPU, ``gluon_int4.takes``): launched through
    its ``Lean``, whose entry is kept in this module's under the same key, so a later call looks once."""
    from . import gluon_int4

    w = packed.view(torch.int8)
    grid, args, static, meta = gluon_int4.launch(x2, w, scales, y, group_size, sms=sm_count(x2.device))
    descs = gluon_int4.descriptors(x2, w)
    entry = _gluon_lean().first(key, (*descs, *args[2:]), static, grid, meta,
                                templates=lambda m: dict(enumerate(gluon_int4.descriptors(x2, w))),
                                info=(template, args[4], args[5], out_shape, gluon_int4))
    if not hooks_on():
        _INT4.entries[key] = entry
    return y.view(out_shape)


#: This module's lean launcher, for tests and lesson 08 (entries, compiles).
LEANS = dict(int4_matmul=_INT4)


def forget():
    """Drop every kept entry, workspace and fp32 scales: the next call of each key is a first call again."""
    _INT4.entries.clear()
    if "int4_gluon" in LEANS:
        LEANS["int4_gluon"].entries.clear()
    _WORKSPACE.clear()
    _SCALES32.clear()
    _DENSE.clear()
