"""Research prototype: the split kernel of paged decode attention in Gluon, K and V streamed by TMA into a
deep shared-memory ring by a producer warp, one consumer warpgroup doing the math on CUDA cores.

NEVER RUN: this file has only been compiled for sm_90a on a machine without a GPU (``python
research/decode/gluon_decode.py`` prints the compile table for both Triton versions of the course).
Whether it gives the right numbers, and how fast, is for ``gluon_decode_probe.py`` on an H100/H200.

Why. The library's split kernel (``solutions/kernels/decode_attention.py``) reads a K/V tile through
addresses that come from a block-table load. Triton's pipeliner gives such an indirect load one buffer
in flight per program (at its 3 or 4 stages), so each program has at most one step of K and V on the way
while it computes on the previous one; at B 1 x 32768 (page 16) it reaches 0.73-0.76 of a copy, where a
kernel that only reads the cache reaches 0.85. Here the number of steps in flight is ``stages``, set by
hand: the producer warp runs ahead of the math by up to ``stages`` steps, limited only by free ring slots.

Structure (grid ``(B * Hkv, splits)``, one program a (sequence, KV head) and its share of the tokens,
shared exactly as the library shares them: ``per = cdiv(cdiv(n, BLOCK_N), splits) * BLOCK_N``):

- The caches are seen by TMA as 2-D ``(num_pages * PAGE_SIZE, Hkv * D)``; page p of KV head h is the box
  of ``PAGE_SIZE`` rows and D columns at ``[p * PAGE_SIZE, h * D]`` (for pages longer than a step, a box
  of ``BLOCK_N`` rows inside the page). A step of ``BLOCK_N`` tokens is ``BLOCK_N // BOX`` boxes of K and as
  many of V, each into its rows of one ring slot ``[BLOCK_N, D]``; one ``expect`` of the step's bytes.
- Producer (1 warp, few registers): per step, the block-table entries of the NEXT step are loaded as one
  small vector before it waits for a free slot (their latency hides behind that wait instead of
  delaying the copies), clamped into the pool, and each box's row is picked out of the vector
  (a masked sum: TMA takes scalar coordinates). Steps past the sequence's end read a clamped page.
- Consumer (the kernel's ``num_warps`` warps): per step, wait for the slot, copy K and V from shared
  memory into registers, hand the slot back (a barrier of the partition first, so that no warp still
  reads it), then the scores and the online softmax on CUDA cores. Decode reads each byte once and
  does 2 * G FLOPs on it, so tensor cores buy nothing; what matters is that the math keeps up with the
  loads and holds few registers.

The math's layout (``tile_layout``): a step's tile is seen as ``[R, LANES, D]`` (token t = r * LANES + lane)
and the work as ``[BLOCK_G, R, LANES, D]``: the G query heads and the R rows in each thread, the LANES
over threads and warps, D over ``TD`` threads of ``VEC`` elements each (16-byte shared loads, rows read
whole by consecutive threads: no bank conflicts without a swizzle). Scores reduce over D inside a
thread and across the TD threads (shuffles). Each lane keeps its own online softmax (its running max,
sum and accumulator ``[BLOCK_G, LANES, D]``), merged across lanes once at the end: no exchange between
warps per step, and P V reduces over the R rows inside each thread. The ring is unswizzled for that
reason (the reads are row-contiguous) and so that a slot's rows can be sliced per box and reshaped to
``[R, LANES, D]`` freely.

The partials are the library's (M, L ``(B, Hq, splits)`` fp32, M in log2 units; ACC ``(B, Hq, splits, D)``),
combined by the library's ``decode_merge``; at one split the kernel normalizes and writes the output.

Left out (against the library): a block-table entry outside the pool is clamped into it, so nothing
outside the cache is read, but the sequence is NOT flagged with NaN (the producer sees the page, the
consumer writes the output; passing a flag between them was not worth it in a prototype). A length below 1
or past the table (``> max_pages * PAGE_SIZE``) runs no step and gives a NaN row, as in the library. No PDL,
no lean launch (the launcher allocates and builds two descriptors a call: the probe times it in CUDA graphs).
"""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

if __name__ == "__main__":  # compile for the GPU even on a machine without one (research/hopper/compile_check.py)
    os.environ["TRITON_INTERPRET"] = "0"
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout, for solutions/

import torch  # noqa: E402
import triton  # noqa: E402
from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma  # noqa: E402

from solutions.kernels import decode_attention as fast  # noqa: E402

__all__ = ["decode_attention", "decode_split_kernel", "compile_for_sm90", "descriptors", "smem_bytes", "DEFAULTS"]

LOG2E = 1.4426950408889634
#: A barrier of the partition's threads: ``gl.barrier`` from Triton 3.7, ``gl.thread_barrier`` in 3.6.
_cta_barrier = gl.barrier if hasattr(gl, "barrier") else gl.thread_barrier
#: The launcher's defaults: 64 tokens a step (a K + V slot of 32 KB at D 128 fp16), 3 slots (96 KB, up to two
#: steps in flight while the third is computed on) and registers capped at 128 a thread at launch (``maxnreg``:
#: the consumer warpgroup then gets 216-232 through setmaxnreg, the producer 40), so that two programs share an
#: SM: the library's plan at one long sequence (32 splits of 8 KV heads, 256 programs) then runs in one wave.
#: Without the cap, Triton gives a warp-specialized kernel of 8 warps (the producer's warpgroup padded) the
#: whole register file, one program an SM. 16-byte vectors along D, one consumer warpgroup. The probe sweeps
#: the rest (deeper rings at one program an SM).
#: ``maxnreg="auto"`` (``auto_maxnreg``) takes the cap only where it costs no spill in the compile table (G <= 4,
#: 64 tokens a step, one warpgroup) and two programs' rings fit: at G 8 the consumer needs more than 232 registers.
DEFAULTS = dict(block_n=64, stages=3, vec=8, num_warps=4, maxnreg="auto")


def auto_maxnreg(maxnreg, group, D, block_n, stages, num_warps, element_size=2):
    """``maxnreg`` itself, or for "auto" 128 where it lets two programs share an SM without spills, else None."""
    if maxnreg != "auto":
        return maxnreg
    two = 2 * (smem_bytes(D, block_n, stages, element_size) + 9216) <= 228 * 1024  # + scratch, + 1 KB reserved
    return 128 if two and group <= 4 and block_n <= 64 and num_warps == 4 else None
#: Registers of the producer warp (``warp_specialize``'s worker budget; setmaxnreg takes multiples of 8).
PRODUCER_REGS = gl.constexpr(40)
#: The running max starts here, not at -inf: a lane whose tokens are all masked then keeps alpha = 1 and
#: p = 0 instead of exp2(-inf + inf) = NaN. Scores of fp16/bf16 inputs never come near it.
NEG_INIT = gl.constexpr(-1.0e30)
SMEM_LIMIT = 227 * 1024  # an H100/H200 program's shared memory


@gluon.constexpr_function
def tile_layout(BLOCK_G, R, TL, TD, VEC, num_warps):
    """The consumer's layout of ``[BLOCK_G, R, LANES, D]`` (module docstring): heads and rows in each thread,
    lanes over TL threads of each warp and over the warps, D over TD threads of VEC elements."""
    return gl.BlockedLayout(size_per_thread=[BLOCK_G, R, 1, VEC], threads_per_warp=[1, 1, TL, TD],
                            warps_per_cta=[1, 1, num_warps, 1], order=[3, 2, 1, 0])


@gluon.jit
def _share(SEQ_LENS, max_pages, splits, HKV: gl.constexpr, PAGE_SIZE: gl.constexpr, BLOCK_N: gl.constexpr):
    """(b, kvh, split, start, end): this program's sequence, KV head, split, and its tokens start .. end - 1,
    the library's equal share of whole steps. A length the table cannot hold runs no step."""
    bh = gl.program_id(0)
    split = gl.program_id(1)
    b = bh // HKV
    kvh = bh % HKV
    seq_len = gl.load(SEQ_LENS + b)
    bad = (seq_len < 1) | (seq_len > max_pages * PAGE_SIZE)
    n = gl.where(bad, 0, seq_len)
    per = gl.cdiv(gl.cdiv(n, BLOCK_N), splits) * BLOCK_N
    start = split * per
    end = gl.minimum(start + per, n)
    return b, kvh, split, start, end


@gluon.jit
def _step_rows(BLOCK_TABLE, row0, t0, boxes, num_pages, max_pages, PAGE_SIZE: gl.constexpr, BOX: gl.constexpr):
    """The first cache row (of the 2-D view) of each box of the step at token t0: table entries clamped into the
    pool (values not trusted; past the sequence any in-pool page does, its tokens are masked)."""
    pos = t0 + boxes * BOX
    col = gl.minimum(pos // PAGE_SIZE, max_pages - 1)  # the last step may run past the table's row
    page = gl.load(BLOCK_TABLE + row0 + col)
    page = gl.minimum(gl.maximum(page, 0), num_pages - 1)
    return page * PAGE_SIZE + pos % PAGE_SIZE


@gluon.jit
def _producer(k_desc, v_desc, k_ring, v_ring, ready, empty, SEQ_LENS, BLOCK_TABLE, num_pages, max_pages, splits,
              HKV: gl.constexpr, PAGE_SIZE: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    """One warp: each step's K and V boxes into the next free slot, the next step's pages loaded meanwhile."""
    BOX: gl.constexpr = k_desc.block_type.shape[0]
    D: gl.constexpr = k_desc.block_type.shape[1]
    NB: gl.constexpr = BLOCK_N // BOX  # boxes of K (and of V) a step
    step_bytes: gl.constexpr = 2 * NB * k_desc.block_type.nbytes
    PL: gl.constexpr = gl.BlockedLayout(size_per_thread=[1], threads_per_warp=[32], warps_per_cta=[1], order=[0])
    b, kvh, split, start, end = _share(SEQ_LENS, max_pages, splits, HKV, PAGE_SIZE, BLOCK_N)
    steps = gl.cdiv(gl.maximum(end - start, 0), BLOCK_N)
    boxes = gl.arange(0, NB, layout=PL)
    row0 = b.to(gl.int64) * max_pages
    col_h = kvh * D
    rows = _step_rows(BLOCK_TABLE, row0, start, boxes, num_pages, max_pages, PAGE_SIZE, BOX)
    for i in range(steps):
        st = i % STAGES
        # the next step's pages: loaded now, used next iteration, so the table's latency hides behind the wait
        nxt = _step_rows(BLOCK_TABLE, row0, start + (i + 1) * BLOCK_N, boxes, num_pages, max_pages, PAGE_SIZE, BOX)
        mbarrier.wait(empty.index(st), ((i // STAGES) & 1) ^ 1)  # a fresh barrier passes parity 1
        mbarrier.expect(ready.index(st), step_bytes)
        for j in gl.static_range(NB):
            row = gl.sum(gl.where(boxes == j, rows, 0), axis=0)  # box j's row as a scalar (TMA's coordinates)
            tma.async_copy_global_to_shared(k_desc, [row, col_h], ready.index(st), k_ring.index(st).slice(j * BOX, BOX))
            tma.async_copy_global_to_shared(v_desc, [row, col_h], ready.index(st), v_ring.index(st).slice(j * BOX, BOX))
        rows = nxt


@gluon.jit
def _consume_step(q4, m_i, l_i, acc, k_ring, v_ring, ready, empty, i, start, end, STAGES: gl.constexpr,
                  BLOCK_N: gl.constexpr, R: gl.constexpr, LANES: gl.constexpr, P4: gl.constexpr,
                  MASKED: gl.constexpr):
    """Step i: K and V out of their slot (handed back at once), scores, each lane's online softmax, P V.
    ``MASKED``: the last step, whose tokens from ``end`` on do not exist (scores -inf, V rows zeroed: the
    clamped page they came from may hold anything, NaN included)."""
    KV3: gl.constexpr = gl.SliceLayout(0, P4)  # [R, LANES, D]
    S3: gl.constexpr = gl.SliceLayout(3, P4)  # [G, R, LANES]
    A3: gl.constexpr = gl.SliceLayout(1, P4)  # [G, LANES, D]
    D: gl.constexpr = k_ring.type.shape[2]
    st = i % STAGES
    mbarrier.wait(ready.index(st), (i // STAGES) & 1)
    k = k_ring.index(st).reshape([R, LANES, D]).load(KV3)
    v = v_ring.index(st).reshape([R, LANES, D]).load(KV3)
    _cta_barrier()  # every warp has its K and V in registers before the slot goes back
    mbarrier.arrive(empty.index(st), count=1)
    s = gl.sum(q4 * k.to(gl.float32)[None], axis=3)  # [G, R, LANES], log2 units (q carries the scale)
    vf = v.to(gl.float32)
    if MASKED:
        t0 = start + i * BLOCK_N
        r_s = gl.arange(0, R, layout=gl.SliceLayout(1, gl.SliceLayout(0, S3)))
        l_s = gl.arange(0, LANES, layout=gl.SliceLayout(0, gl.SliceLayout(0, S3)))
        s = gl.where((t0 + r_s[:, None] * LANES + l_s[None, :] < end)[None], s, float("-inf"))
        r_v = gl.arange(0, R, layout=gl.SliceLayout(1, gl.SliceLayout(2, KV3)))
        l_v = gl.arange(0, LANES, layout=gl.SliceLayout(0, gl.SliceLayout(2, KV3)))
        vf = gl.where((t0 + r_v[:, None] * LANES + l_v[None, :] < end)[:, :, None], vf, 0.0)
    m_new = gl.maximum(m_i, gl.max(s, axis=1))  # [G, LANES]: each lane its own max
    p = gl.exp2(s - m_new[:, None, :])
    alpha = gl.exp2(m_i - m_new)
    l_i = l_i * alpha + gl.sum(p, axis=1)
    pv = gl.sum(p[:, :, :, None] * vf[None], axis=1)  # [G, LANES, D]: the R rows summed in each thread
    acc = acc * gl.convert_layout(alpha, gl.SliceLayout(2, A3))[:, :, None] + pv
    return m_new, l_i, acc


@gluon.jit
def _consumer(Q, O, M, L, ACC, k_ring, v_ring, ready, empty, SEQ_LENS, max_pages, qk_scale, splits,
              HKV: gl.constexpr, GROUP: gl.constexpr, BLOCK_G: gl.constexpr, PAGE_SIZE: gl.constexpr,
              BLOCK_N: gl.constexpr, STAGES: gl.constexpr, VEC: gl.constexpr, ONE_SPLIT: gl.constexpr,
              num_warps: gl.constexpr):
    """The kernel's warps: q once, every step of the share, then the lanes merged and the partials written."""
    D: gl.constexpr = k_ring.type.shape[2]
    TD: gl.constexpr = D // VEC  # threads along D
    TL: gl.constexpr = 32 // TD  # lanes a warp
    LANES: gl.constexpr = TL * num_warps
    R: gl.constexpr = BLOCK_N // LANES  # rows each thread holds a step
    P4: gl.constexpr = tile_layout(BLOCK_G, R, TL, TD, VEC, num_warps)
    S3: gl.constexpr = gl.SliceLayout(3, P4)  # [G, R, LANES]
    ST: gl.constexpr = gl.SliceLayout(1, S3)  # [G, LANES]: each lane's max and sum
    A3: gl.constexpr = gl.SliceLayout(1, P4)  # [G, LANES, D]: each lane's accumulator
    Q2: gl.constexpr = gl.SliceLayout(1, A3)  # [G, D]
    G1: gl.constexpr = gl.SliceLayout(1, ST)  # [G]

    b, kvh, split, start, end = _share(SEQ_LENS, max_pages, splits, HKV, PAGE_SIZE, BLOCK_N)
    steps = gl.cdiv(gl.maximum(end - start, 0), BLOCK_N)
    head0 = b * (HKV * GROUP) + kvh * GROUP  # the first of the G query heads reading this KV head
    g_q = gl.arange(0, BLOCK_G, layout=gl.SliceLayout(1, Q2))
    d_q = gl.arange(0, D, layout=gl.SliceLayout(0, Q2))
    q = gl.load(Q + (head0 + g_q)[:, None] * D + d_q[None, :], mask=(g_q < GROUP)[:, None], other=0.0)
    q4 = (q.to(gl.float32) * qk_scale)[:, None, :][:, None, :, :]  # [G, 1, 1, D], the scale folded in

    m_i = gl.full([BLOCK_G, LANES], NEG_INIT, gl.float32, layout=ST)
    l_i = gl.zeros([BLOCK_G, LANES], gl.float32, layout=ST)
    acc = gl.zeros([BLOCK_G, LANES, D], gl.float32, layout=A3)
    for i in range(steps - 1):  # every step but the last: all its tokens exist
        m_i, l_i, acc = _consume_step(q4, m_i, l_i, acc, k_ring, v_ring, ready, empty, i, start, end, STAGES,
                                      BLOCK_N, R, LANES, P4, False)
    if steps > 0:
        m_i, l_i, acc = _consume_step(q4, m_i, l_i, acc, k_ring, v_ring, ready, empty, steps - 1, start, end,
                                      STAGES, BLOCK_N, R, LANES, P4, True)

    # the lanes merged (lesson 05's rule), once: a lane that saw no token has l = 0 and weighs 0
    m_g = gl.max(m_i, axis=1)  # [G]
    w = gl.exp2(m_i - m_g[:, None])
    l_g = gl.sum(l_i * w, axis=1)
    acc_g = gl.sum(acc * gl.convert_layout(w, gl.SliceLayout(2, A3))[:, :, None], axis=1)  # [G, D] in Q2
    if ONE_SPLIT:
        o = acc_g / gl.convert_layout(l_g, gl.SliceLayout(1, Q2))[:, None]  # no token (a bad length): NaN
        gl.store(O + (head0 + g_q)[:, None] * D + d_q[None, :], o.to(O.dtype.element_ty), mask=(g_q < GROUP)[:, None])
    else:
        g_s = gl.arange(0, BLOCK_G, layout=G1)
        part = (head0 + g_s) * splits + split
        gl.store(M + part, gl.where(l_g > 0, m_g, float("-inf")), mask=g_s < GROUP)  # an empty split: -inf, weight 0
        gl.store(L + part, l_g, mask=g_s < GROUP)
        part_q = (head0 + g_q) * splits + split
        gl.store(ACC + part_q[:, None] * D + d_q[None, :], acc_g, mask=(g_q < GROUP)[:, None])


@gluon.jit
def decode_split_kernel(Q, k_desc, v_desc, SEQ_LENS, BLOCK_TABLE, O, M, L, ACC, num_pages, max_pages, qk_scale,
                        splits, HKV: gl.constexpr, GROUP: gl.constexpr, BLOCK_G: gl.constexpr,
                        PAGE_SIZE: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, VEC: gl.constexpr,
                        ONE_SPLIT: gl.constexpr, num_warps: gl.constexpr):
    """Program (b * HKV + kvh, split). Q (B, Hq, D); k_desc, v_desc: TMA descriptors of the caches as
    (num_pages * PAGE_SIZE, HKV * D), boxes of min(PAGE_SIZE, BLOCK_N) rows and D columns, unswizzled;
    SEQ_LENS (B,) and BLOCK_TABLE (B, max_pages) int32, values not trusted; O (B, Hq, D) written at one split
    (ONE_SPLIT), else M, L (B, Hq, splits) and ACC (B, Hq, splits, D) fp32; qk_scale = sm_scale * log2(e)."""
    D: gl.constexpr = k_desc.block_type.shape[1]
    dtype: gl.constexpr = k_desc.dtype
    k_ring = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, D], k_desc.layout)
    v_ring = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, D], v_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=1)  # one arrive: the consumer's, after its barrier
    gl.warp_specialize([
        (_consumer, (Q, O, M, L, ACC, k_ring, v_ring, ready, empty, SEQ_LENS, max_pages, qk_scale, splits, HKV,
                     GROUP, BLOCK_G, PAGE_SIZE, BLOCK_N, STAGES, VEC, ONE_SPLIT, num_warps)),
        (_producer, (k_desc, v_desc, k_ring, v_ring, ready, empty, SEQ_LENS, BLOCK_TABLE, num_pages, max_pages,
                     splits, HKV, PAGE_SIZE, BLOCK_N, STAGES)),
    ], [1], [PRODUCER_REGS])
    for s in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(s))
        mbarrier.invalidate(empty.index(s))


# ---------------------------------------------------------------------------------------------------------
# host side
# ---------------------------------------------------------------------------------------------------------
_GL = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16}


def smem_bytes(D, block_n, stages, element_size=2):
    """The rings' shared memory (the barriers add a few bytes)."""
    return 2 * stages * block_n * D * element_size


def config_problem(D, page_size, group, block_n, stages, vec, num_warps, element_size=2):
    """Why the kernel cannot be built for these, or None."""
    if D not in (64, 128):
        return f"D = {D}: the prototype takes head dims 64 and 128"
    if page_size < 8 or page_size & (page_size - 1):
        return f"page_size = {page_size}: the prototype takes powers of two from 8 (a TMA box of at least 8 rows)"
    if group < 1 or group > 16:
        return f"{group} query heads a KV head: the prototype takes 1 to 16"
    if vec not in (4, 8, 16) or D // vec > 32:
        return f"vec = {vec}: 4, 8 or 16 elements a thread along D, at most 32 threads along D"
    if num_warps not in (4, 8):
        return f"num_warps = {num_warps}: one or two consumer warpgroups (4 or 8)"
    lanes = (32 // (D // vec)) * num_warps
    if block_n & (block_n - 1) or block_n < lanes or block_n > 256:
        return f"block_n = {block_n}: a power of two from {lanes} (the lanes of the layout) to 256 (TMA's box rows)"
    if stages < 2:
        return f"stages = {stages}: at least 2 (one slot landing while one is read)"
    if smem_bytes(D, block_n, stages, element_size) > SMEM_LIMIT:
        return f"stages = {stages} x block_n = {block_n} at D {D}: {smem_bytes(D, block_n, stages, element_size)} bytes > {SMEM_LIMIT}"
    return None


def descriptors(k_cache, v_cache, block_n):
    """TMA descriptors of the caches (num_pages, PAGE_SIZE, Hkv, D) as (num_pages * PAGE_SIZE, Hkv * D), boxes of
    min(PAGE_SIZE, block_n) rows and D columns, unswizzled (module docstring). CPU tensors give descriptors a
    compile can read."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    num_pages, page_size, hkv, D = k_cache.shape
    box = min(page_size, block_n)
    layout = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=8 * k_cache.element_size(), rank=2)

    def desc(t):
        t2 = t.view(num_pages * page_size, hkv * D)
        return TensorDescriptor(t2, list(t2.shape), list(t2.stride()), [box, D], layout)
    return desc(k_cache), desc(v_cache)


def _meta(q, k_cache, splits, block_n, stages, vec, num_warps):
    Hq = q.shape[1]
    hkv = k_cache.shape[2]
    group = Hq // hkv
    return dict(HKV=hkv, GROUP=group, BLOCK_G=triton.next_power_of_2(group), PAGE_SIZE=k_cache.shape[1],
                BLOCK_N=block_n, STAGES=stages, VEC=vec, ONE_SPLIT=splits == 1, num_warps=num_warps)


def decode_attention(q, k_cache, v_cache, seq_lens, block_table, sm_scale=None, splits=None, block_n=64, stages=3,
                     vec=8, num_warps=4, maxnreg="auto"):
    """``(B, Hq, D)``: the library's decode attention (same arguments and layout) on this prototype's split kernel
    and the library's merge. ``splits`` defaults to the library's plan (``plan_of``); ``maxnreg`` caps the
    registers a thread at launch (None: Triton's choice, one program an SM; "auto": ``auto_maxnreg``). ValueError
    for shapes or a config the prototype does not take; RuntimeError off a Hopper GPU or in Triton's interpreter."""
    from tkcourse.mode import INTERPRET

    sm_scale = fast.check_inputs(q, k_cache, v_cache, seq_lens, block_table, sm_scale)
    if q.dtype not in _GL:
        raise ValueError(f"q has dtype {q.dtype}; the prototype takes float16 or bfloat16")
    num_pages, page_size, hkv, D = k_cache.shape
    B, Hq, _ = q.shape
    problem = config_problem(D, page_size, Hq // hkv, block_n, stages, vec, num_warps, q.element_size())
    if problem:
        raise ValueError(problem)
    if num_pages * page_size >= 2 ** 31:
        raise ValueError(f"{num_pages} pages of {page_size} tokens: TMA's row coordinates are 32-bit")
    if q.device.type != "cuda":
        raise ValueError(f"q is on {q.device}; the prototype runs on a Hopper GPU (sm_90): move it with .cuda()")
    if INTERPRET:
        raise RuntimeError("the Gluon prototype does not run in Triton's interpreter (TRITON_INTERPRET=1); it needs a "
                           "Hopper GPU, sm_90 (H100, H200)")
    major, minor = torch.cuda.get_device_capability(q.device)
    if major != 9:
        raise RuntimeError(f"q is on sm_{major}{minor}; the prototype uses Hopper's TMA and warp specialization "
                           "(sm_90: H100, H200)")
    if splits is None:
        splits = fast.plan_of(q, k_cache, block_table).splits
    splits = int(splits)
    if splits < 1:
        raise ValueError(f"splits = {splits}: at least 1")
    q, k_cache, v_cache, seq_lens, block_table = (t.contiguous() for t in (q, k_cache, v_cache, seq_lens, block_table))
    k_desc, v_desc = descriptors(k_cache, v_cache, block_n)
    out = torch.empty_like(q)
    meta = _meta(q, k_cache, splits, block_n, stages, vec, num_warps)
    maxnreg = auto_maxnreg(maxnreg, Hq // hkv, D, block_n, stages, num_warps, q.element_size())
    if maxnreg is not None:
        meta["maxnreg"] = int(maxnreg)
    if splits == 1:
        m = l = acc = out  # never touched
    else:
        n = B * Hq * splits
        ws = torch.empty(n * (D + 2), device=q.device, dtype=torch.float32)
        acc, m, l = ws[: n * D], ws[n * D: n * D + n], ws[n * D + n:]
    decode_split_kernel[(B * hkv, splits)](q, k_desc, v_desc, seq_lens, block_table, out, m, l, acc, num_pages,
                                           block_table.shape[1], sm_scale * LOG2E, splits, **meta)
    if splits > 1:
        block_s = max(1, min(triton.next_power_of_2(splits), 4096 // D))
        fast.decode_merge[(B * Hq,)](m, l, acc, out, splits, HEAD_DIM=D, BLOCK_S=block_s, num_warps=4)
    return out


# ---------------------------------------------------------------------------------------------------------
# compiling on a CPU for sm_90a (research/hopper/compile_check.py's way)
# ---------------------------------------------------------------------------------------------------------
def _ptxas(ptx: str) -> str:
    """ptxas -v's report for sm_90a, with the ptxas Triton's wheel carries."""
    ptxas_bin = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "k.ptx").write_text(ptx)
        return subprocess.run([ptxas_bin, "-arch=sm_90a", "-v", "-o", Path(tmp) / "k.cubin", Path(tmp) / "k.ptx"],
                              capture_output=True, text=True).stderr


def compile_for_sm90(dtype=torch.float16, D=128, page_size=16, group=4, block_n=64, stages=3, vec=8, num_warps=4,
                     maxnreg="auto", one_split=False):
    """Compile the split kernel for an H100/H200 on a machine without a GPU: ``(shared memory bytes, ptxas's
    register and spill line, the compiled kernel)``."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import mangle_type

    problem = config_problem(D, page_size, group, block_n, stages, vec, num_warps)
    if problem:
        raise ValueError(problem)
    hkv, num_pages = 2, 4
    k = torch.empty(num_pages, page_size, hkv, D, dtype=dtype)  # CPU: only their types and shapes
    k_desc, v_desc = descriptors(k, k, block_n)
    ty = mangle_type(torch.empty(1, dtype=dtype))
    sig = dict(Q=ty, k_desc=mangle_type(k_desc), v_desc=mangle_type(v_desc), SEQ_LENS="*i32", BLOCK_TABLE="*i32",
               O=ty, M="*fp32", L="*fp32", ACC="*fp32", num_pages="i32", max_pages="i32", qk_scale="fp32",
               splits="i32")
    consts = dict(HKV=hkv, GROUP=group, BLOCK_G=triton.next_power_of_2(group), PAGE_SIZE=page_size, BLOCK_N=block_n,
                  STAGES=stages, VEC=vec, ONE_SPLIT=one_split, num_warps=num_warps)
    sig.update({name: "constexpr" for name in consts})
    names = decode_split_kernel.arg_names
    sig = {name: sig[name] for name in names}
    aligned = [(names.index(p),) for p in ("Q", "SEQ_LENS", "BLOCK_TABLE", "O", "M", "L", "ACC")]
    src = GluonASTSource(decode_split_kernel, sig, constexprs=consts,
                         attrs={key: [["tt.divisibility", 16]] for key in aligned})
    maxnreg = auto_maxnreg(maxnreg, group, D, block_n, stages, num_warps, torch.empty(0, dtype=dtype).element_size())
    options = dict(num_warps=num_warps) if maxnreg is None else dict(num_warps=num_warps, maxnreg=maxnreg)
    kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)
    info = _ptxas(kernel.asm["ptx"])
    lines = [ln.strip() for ln in info.splitlines() if "registers" in ln or "spill" in ln]
    return kernel.metadata.shared, " | ".join(ln.split("ptxas info    : ")[-1] for ln in lines), kernel


def _per_sm(shared, regs_line, num_warps):
    """Programs an SM by shared memory (228 KB, 1 KB reserved a program) and by registers (the producer's warp
    padded to a warpgroup, as Triton launches it)."""
    regs = int(re.search(r"Used (\d+) registers", regs_line).group(1))
    threads = 32 * (num_warps + 4)
    return min(228 * 1024 // (shared + 1024), 65536 // (regs * threads))


def main(argv=()):
    print("triton", triton.__version__, "(compiled for sm_90a, never run)")
    cfg = dict(DEFAULTS)
    print("defaults:", cfg)
    for dtype, D, page in itertools.product((torch.float16, torch.bfloat16), (64, 128), (16, 64)):
        shared, regs, _ = compile_for_sm90(dtype, D, page, 4, **cfg)
        print(f"{str(dtype)[6:]:8s} D {D:3d} page {page:2d} G 4: shared {shared:6d} B, {_per_sm(shared, regs, 4)} an SM; "
              f"{regs}", flush=True)
    if "--more" in argv:  # a few of the probe's other points, fp16 D 128 page 16
        for group, block_n, stages, vec, maxnreg in ((4, 64, 6, 8, None), (4, 128, 3, 8, None), (4, 128, 2, 8, 128),
                                                     (8, 64, 3, 4, "auto"), (8, 64, 3, 8, "auto")):
            c = dict(cfg, block_n=block_n, stages=stages, vec=vec, maxnreg=maxnreg)
            shared, regs, _ = compile_for_sm90(torch.float16, 128, 16, group, **c)
            print(f"G {group} block_n {block_n} stages {stages} vec {vec} maxnreg {maxnreg}: shared {shared} B, "
                  f"{_per_sm(shared, regs, 4)} an SM; {regs}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
