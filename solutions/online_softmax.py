"""Lesson 05: softmax of rows of any length, streamed in blocks with the online normalizer.

Pass 1 reads a row block by block and keeps two numbers: the running max ``m`` and the running
sum ``l`` of ``exp(x - m)``. When a block raises the max, the sum so far is rescaled by
``exp(m_old - m_new)``. Pass 2 reads the row again and writes ``exp(x - m) / l``.

Traffic: read the (M, N) input, write the (M, N) output: ``2 * M * N`` elements at least
(4 bytes an element in fp16). Pass 2 reads the input a second time; at speed that second read
comes from L2, not HBM, when the row was read a moment before.

Few long rows (256 rows of 262144 on a GPU with 132 SMs) would leave SMs idle with one program
per row, and a 512 KB row pushes the start of itself out of L2 before pass 2 comes back for it.
So on a GPU a long row is split into ``parts``: a *stats* program per part computes that part's
``(m, l)``; a *write* program per part combines the parts' pairs into the row's ``(m, l)``:
``m = max m_p``, ``l = sum l_p * exp(m_p - m)``, and writes its part.

The last step (``ONE_READ``, GPU only): a part small enough for registers is read once. Each
program of ``_one_read_softmax_kernel`` loads its part, publishes the part's ``(m, l)``, waits for
the row's other parts, and writes its part from registers: the input crosses HBM once. For few
long rows, ``_lanes_softmax_kernel`` does the same on a persistent grid, loading its part of the
next row while it waits.
"""

import functools
import math

import torch
import triton
import triton.language as tl

from tkcourse.mode import INTERPRET, validate
from tkcourse.occupancy import programs_per_sm, sm_count

from ._checks import integer, power_of_two


@triton.jit
def _online_stats(
    x_row,  # pointer to the first element of the row
    start,  # first column to read
    end,  # one past the last column to read
    BLOCK: tl.constexpr,  # columns read per step; a power of two
    NUM_STAGES: tl.constexpr,  # blocks the loop loads ahead (1: none); ignored by the interpreter
):
    """Running max ``m`` and sum ``l`` of exp(x - m) over x_row[start:end], one block at a time."""
    ### BEGIN SOLUTION
    m = tl.full((), float("-inf"), tl.float32)  # max of the columns read so far
    l = tl.zeros((), tl.float32)  # sum of exp(x - m) over the columns read so far
    for block_start in tl.range(start, end, BLOCK, num_stages=NUM_STAGES):
        cols = block_start + tl.arange(0, BLOCK)
        # evict_last: keep the row in L2 for pass 2
        x = tl.load(x_row + cols, mask=cols < end, other=float("-inf"), eviction_policy="evict_last")
        x = x.to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)  # all -inf so far: keep l at 0, not nan
        l = l * tl.exp(m - shift) + tl.sum(tl.exp(x - shift), axis=0)  # rescale the old sum, add the block's
        m = m_new
    ### STUB
    # m = -inf and l = 0 as fp32 scalars (tl.full((), float("-inf"), tl.float32), tl.zeros((), tl.float32))
    # for block_start in tl.range(start, end, BLOCK, num_stages=NUM_STAGES):
    #     load the block's columns (mask cols < end, other=-inf) as fp32
    #     m_new = the larger of m and the block's max
    #     l = l * exp(m - m_new) + sum(exp(x - m_new))   (rows that start with -inf: use 0 for m_new while it is -inf)
    #     m = m_new
    ### END SOLUTION
    return m, l


@triton.jit
def _write_softmax(
    x_row,  # pointer to the first element of the input row
    out_row,  # pointer to the first element of the output row
    start,  # first column to write
    end,  # one past the last column to write
    m,  # the row's max (fp32 scalar)
    l,  # the row's sum of exp(x - m) (fp32 scalar)
    BLOCK: tl.constexpr,  # columns written per step; a power of two
    NUM_STAGES: tl.constexpr,  # blocks the loop loads ahead (1: none); ignored by the interpreter
):
    """Pass 2: out_row[start:end] = exp(x - m) / l."""
    ### BEGIN SOLUTION
    inv_l = 1.0 / l  # one division a row, not one an element
    for block_start in tl.range(start, end, BLOCK, num_stages=NUM_STAGES):
        cols = block_start + tl.arange(0, BLOCK)
        mask = cols < end
        # evict_first: pass 2 is the last use of x, and out is never read back here
        x = tl.load(x_row + cols, mask=mask, other=float("-inf"), eviction_policy="evict_first")
        y = tl.exp(x.to(tl.float32) - m) * inv_l
        tl.store(out_row + cols, y.to(out_row.dtype.element_ty), mask=mask, eviction_policy="evict_first")
    ### STUB
    # for block_start in tl.range(start, end, BLOCK, num_stages=NUM_STAGES): load the block (masked) as fp32,
    # store exp(x - m) / l in out's dtype (out_row.dtype.element_ty), with the same mask
    ### END SOLUTION


@triton.jit
def _online_softmax_kernel(
    x_ptr,  # pointer to x[0, 0]
    out_ptr,  # pointer to out[0, 0]
    x_row_stride,  # elements between the starts of two rows of x (its columns are contiguous)
    out_row_stride,  # elements between the starts of two rows of out
    n_cols,  # columns: the softmax length, any size
    BLOCK: tl.constexpr,  # columns per step; a power of two
    NUM_STAGES: tl.constexpr,  # blocks a loop loads ahead (1: none)
):
    """One program per row: pass 1 for (m, l), then pass 2."""
    row = tl.program_id(0).to(tl.int64)  # row * stride can pass 2**31 on a big tensor
    x_row = x_ptr + row * x_row_stride
    m, l = _online_stats(x_row, 0, n_cols, BLOCK, NUM_STAGES)
    _write_softmax(x_row, out_ptr + row * out_row_stride, 0, n_cols, m, l, BLOCK, NUM_STAGES)


@triton.jit
def _publish_part(slots_ptr, row, part, m, l, PARTS: tl.constexpr):
    """Publish this part's (m, l) as ONE 64-bit word (m in the low half, l in the high half).

    The word is its own flag: a reader sees either 0 (not yet published) or the whole pair, never
    half of it, so no counter and no memory fence are needed. A published word is never 0: l >= 1
    for a part with a value in it, and an empty part has m = -inf.
    """
    word = (m.to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF) | (l.to(tl.int32, bitcast=True).to(tl.int64) << 32)
    tl.atomic_xchg(slots_ptr + row * PARTS + part, word, sem="relaxed")


@triton.jit
def _combine_words(words):
    """The row's ``(m, l)`` from its parts' published words (``_publish_part``'s format): m is the
    largest m_p, l the sum of the parts' l_p, each rescaled by exp(m_p - m) to the row's max."""
    m_parts = (words & 0xFFFFFFFF).to(tl.int32).to(tl.float32, bitcast=True)
    l_parts = (words >> 32).to(tl.int32).to(tl.float32, bitcast=True)
    m = tl.max(m_parts, axis=0)
    return m, tl.sum(l_parts * tl.exp(m_parts - m), axis=0)


@triton.jit
def _combine_parts(slots_ptr, row, max_polls, span, PARTS: tl.constexpr, SPAN: tl.constexpr):
    """Wait until the row's PARTS words are published, reading them again at most ``max_polls`` times.

    Returns the row's ``(m, l)`` combined from the parts' pairs, and whether all parts were there
    (when not, the pair is meaningless and the caller computes the row's stats itself).
    The words are read as a tensor of PARTS entries, which the compiler may give each warp a whole
    copy of: then each warp polls on its own and leaves the loop when its copy is complete, with no
    barrier inside the loop (the fastest wait measured). Warps may disagree at the bound, though, and
    the caller's fallback has barriers in it, so the answer "complete" is agreed on at the end: each
    thread puts its warp's count of missing words into a tensor of SPAN = 64 * num_warps entries,
    which covers every thread, and one max over it goes through shared memory to every thread.
    ``span`` is SPAN as a run-time value, so that the compiler cannot see that the entries of one warp
    are equal and skip the exchange.
    """
    slots = slots_ptr + row * PARTS + tl.arange(0, PARTS)
    words = tl.load(slots, volatile=True)  # volatile: from L2 each time, never a stale L1 line
    polls = 0
    while (tl.sum((words == 0).to(tl.int32), axis=0) > 0) & (polls < max_polls):
        words = tl.load(slots, volatile=True)
        polls += 1
    m, l = _combine_words(words)
    missing = tl.sum((words == 0).to(tl.int32), axis=0)  # this warp's view
    entry = tl.arange(0, SPAN)
    missing = tl.max(tl.where(entry < span, missing, 0), axis=0)  # every thread's view: one answer
    return m, l, missing == 0


@triton.jit
def _row_stats(slots_ptr, row, x_ptr, x_row_stride, n_cols, max_polls, span, PARTS: tl.constexpr,
               SPAN: tl.constexpr, FALLBACK_BLOCK: tl.constexpr):
    """Row ``row``'s ``(m, l)`` for a program that has published its part: combined from the parts'
    words (``_combine_parts``) or, when a part of the row has not run within ``max_polls`` polls, read
    from the whole row by this program itself (pass 1 of the lesson)."""
    m, l, complete = _combine_parts(slots_ptr, row, max_polls, span, PARTS, SPAN)
    if not complete:  # row: a Python int in the interpreter's lanes loop, hence tl.cast
        m, l = _online_stats(x_ptr + tl.cast(row, tl.int64) * x_row_stride, 0, n_cols, FALLBACK_BLOCK, 1)
    return m, l


@triton.jit
def _split_softmax_kernel(
    x_ptr,  # pointer to x[0, 0]
    out_ptr,  # pointer to out[0, 0]
    x_row_stride,  # elements between the starts of two rows of x (its columns are contiguous)
    out_row_stride,  # elements between the starts of two rows of out
    n_cols,  # columns: the softmax length
    part_cols,  # columns per part, a multiple of BLOCK; part p covers [p * part_cols, (p + 1) * part_cols)
    ticket_ptr,  # int64 counter of work items handed out so far (zero at launch)
    slots_ptr,  # int64 (rows, PARTS): each part's (m, l) as one word, 0 until published (zero at launch)
    PARTS: tl.constexpr,  # parts a row is split into; a power of two
    BLOCK: tl.constexpr,  # columns per step; a power of two
    NUM_STAGES: tl.constexpr,  # blocks a loop loads ahead (1: none)
    SPAN: tl.constexpr,  # entries of _combine_parts' agreement tensor: 64 * num_warps
):
    """Each row is 2 * PARTS work items, taken in this order: PARTS stats items, then PARTS writes.

    Items are numbered by a ticket taken at the program's start (an atomic counter), not by
    program_id: the GPU may start programs in any order, but a ticket is only handed to a program
    that is running. A write item waits for its row's stats items, whose tickets are smaller, so it
    only ever waits for programs that have started and never wait themselves: no deadlock, whatever
    the order, and in the interpreter (one program at a time) it never waits at all.
    """
    t = tl.atomic_add(ticket_ptr, 1)
    row = t // (2 * PARTS)
    item = t % (2 * PARTS)
    part = item % PARTS
    start = part * part_cols
    end = tl.minimum(start + part_cols, n_cols)  # trailing parts may be empty: start >= end
    x_row = x_ptr + row.to(tl.int64) * x_row_stride
    if item < PARTS:  # stats item: pass 1 over this part, publish its (m, l)
        m, l = _online_stats(x_row, start, end, BLOCK, NUM_STAGES)
        _publish_part(slots_ptr, row, part, m, l, PARTS)
    else:  # write item: wait for the row's parts, combine their (m, l), pass 2 over this part
        # tickets: every stats item this waits for is running, so the wait ends: no bound, no fallback,
        # and no need for the warps to agree on "complete" (SPAN as ``span`` lets the compiler drop that)
        m, l, _ = _combine_parts(slots_ptr, row, 0x7FFFFFFF, SPAN, PARTS, SPAN)
        _write_softmax(x_row, out_ptr + row.to(tl.int64) * out_row_stride, start, end, m, l, BLOCK, NUM_STAGES)


@triton.jit
def _part_stats(x):
    """A part held in registers (fp32): ``e = exp(x - shift)`` and the part's ``(m_p, l_p)``; ``shift``
    is m_p, or 0 for a part with no column in the row (then e = 0 and l_p = 0)."""
    m_p = tl.max(x, axis=0)
    shift = tl.where(m_p == float("-inf"), 0.0, m_p)
    e = tl.exp(x - shift)
    return e, shift, m_p, tl.sum(e, axis=0)


@triton.jit
def _load_part(x_row, cols, mask):
    """One read of a part into registers, and its ``_part_stats``."""
    x = tl.load(x_row + cols, mask=mask, other=float("-inf"), eviction_policy="evict_first").to(tl.float32)
    return _part_stats(x)


@triton.jit
def _one_read_softmax_kernel(
    x_ptr,  # pointer to x[0, 0]
    out_ptr,  # pointer to out[0, 0]
    x_row_stride,  # elements between the starts of two rows of x (its columns are contiguous)
    out_row_stride,  # elements between the starts of two rows of out
    n_cols,  # columns: the softmax length
    slots_ptr,  # int64 (rows, PARTS): each part's (m, l) as one word, 0 until published (zero at launch)
    max_polls,  # reads of the row's words before a program gives up waiting and reads the row itself
    span,  # SPAN, passed at run time (see _combine_parts)
    PARTS: tl.constexpr,  # programs a row is split over; a power of two
    PART: tl.constexpr,  # columns a program holds on chip; a power of two, PARTS * PART >= n_cols
    FALLBACK_BLOCK: tl.constexpr,  # columns per step of the fallback's read of the whole row
    SPAN: tl.constexpr,  # entries of _combine_parts' agreement tensor: 64 * num_warps
):
    """The GPU plan: each program reads its part of a row once and keeps it in registers.

    A row too long for one program is held by PARTS programs together, numbered by program id.
    Each computes its part's (m, l), publishes it, waits for the row's other parts, combines the
    pairs, and writes its part from registers: the input is read from HBM once, never twice.
    Every program of a row waits for every other, and the GPU promises no order: a part might not
    have started while its siblings fill the GPU. So the wait is bounded: after ``max_polls`` polls
    a program computes the row's (m, l) itself, reading the whole row (pass 1 of the lesson). Always
    correct, never a deadlock; on an idle GPU the parts of a row run together and nobody falls back.
    (The split kernel's ticket gives the same safety, but one counter hit by every program cost
    15% here: measured in ``tkcourse/data/h200/tuning/exchange_probe.txt``.)
    """
    pid = tl.program_id(0)
    row = pid // PARTS
    part = pid % PARTS
    x_row = x_ptr + row.to(tl.int64) * x_row_stride
    cols = part * PART + tl.arange(0, PART)
    mask = cols < n_cols
    e, shift, m_p, l_p = _load_part(x_row, cols, mask)  # e stays in registers until the row's max is known
    scale = 1.0 / l_p
    if PARTS > 1:
        _publish_part(slots_ptr, row, part, m_p, l_p, PARTS)
        m, l = _row_stats(slots_ptr, row, x_ptr, x_row_stride, n_cols, max_polls, span, PARTS, SPAN, FALLBACK_BLOCK)
        scale = tl.exp(shift - m) / l  # e is relative to this part's max: rescale it to the row's
    y = e * scale
    tl.store(out_ptr + row.to(tl.int64) * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask,
             eviction_policy="evict_first")


@triton.jit
def _lanes_softmax_kernel(
    x_ptr,  # pointer to x[0, 0]
    out_ptr,  # pointer to out[0, 0]
    x_row_stride,  # elements between the starts of two rows of x (its columns are contiguous)
    out_row_stride,  # elements between the starts of two rows of out
    n_rows,  # rows of x
    n_cols,  # columns: the softmax length
    slots_ptr,  # int64 (rows, PARTS): each part's (m, l) as one word, 0 until published (zero at launch)
    max_polls,  # reads of the row's words before a program gives up waiting and reads the row itself
    span,  # SPAN, passed at run time (see _combine_parts)
    PARTS: tl.constexpr,  # programs a row is split over; a power of two
    PART: tl.constexpr,  # columns a program holds on chip; a power of two, PARTS * PART >= n_cols
    FALLBACK_BLOCK: tl.constexpr,  # columns per step of the fallback's read of the whole row
    SPAN: tl.constexpr,  # entries of _combine_parts' agreement tensor: 64 * num_warps
):
    """Few long rows: the one-read kernel on a persistent grid of ``lanes * PARTS`` programs.

    The PARTS programs of lane k hold the parts of rows k, k + lanes, k + 2 * lanes, ... one row at a
    time, and the grid is one wave (as many programs as fit at once). Each program loads its part of
    the lane's NEXT row before it waits for this row's other parts, so a load is in flight through the
    wait, where the one-read kernel had none. Same word exchange, wait and fallback.
    """
    lanes = tl.num_programs(0) // PARTS
    lane = tl.program_id(0) // PARTS
    part = tl.program_id(0) % PARTS
    cols = part * PART + tl.arange(0, PART)
    mask = cols < n_cols
    x_next = tl.load(x_ptr + lane.to(tl.int64) * x_row_stride + cols, mask=cols < tl.where(lane < n_rows, n_cols, 0),
                     other=float("-inf"), eviction_policy="evict_first")  # no row for this lane: nothing read
    for row in tl.range(lane, n_rows, lanes, num_stages=1):  # row: a Python int in the interpreter, hence tl.cast
        e, shift, m_p, l_p = _part_stats(x_next.to(tl.float32))
        _publish_part(slots_ptr, row, part, m_p, l_p, PARTS)
        nxt = row + lanes  # its load is in flight while this row's other parts are awaited
        x_next = tl.load(x_ptr + tl.cast(nxt, tl.int64) * x_row_stride + cols,
                         mask=cols < tl.where(nxt < n_rows, n_cols, 0), other=float("-inf"),
                         eviction_policy="evict_first")
        m, l = _row_stats(slots_ptr, row, x_ptr, x_row_stride, n_cols, max_polls, span, PARTS, SPAN, FALLBACK_BLOCK)
        y = e * (tl.exp(shift - m) / l)
        tl.store(out_ptr + tl.cast(row, tl.int64) * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask,
                 eviction_policy="evict_first")


#: GPU plan (tune on the target): a part is about this many bytes of a row, so that the parts read
#: by every program running at once still sit in L2 when their write items come back for them.
PART_BYTES = 32 * 1024
#: GPU plan: bytes a program loads per step (4096 fp16 values: 16 a thread with 8 warps).
BLOCK_BYTES = 8 * 1024
#: Measured on an H200 (fp16; 4096x32768, 1024x131072, 256x262144; 2026-11-29): 4 warps and no
#: prefetch beat 8 warps with 2 stages by 10-20%; 32 KiB parts beat 8 KiB to 1 GiB.
NUM_WARPS = 4
#: GPU plan: blocks each loop loads ahead of the one it works on (cp.async into shared memory).
NUM_STAGES = 1
#: Interpreter: columns per step (each step costs the same Python time whatever its size).
INTERPRETER_BLOCK = 1024
#: GPU plan, one read (``_one_read_softmax_kernel``): a row is split into at most ONE_READ_MAX_PARTS
#: parts (fewer on a GPU with fewer SMs) of at least ONE_READ_MIN_PART values (powers of two). Parts
#: of up to ONE_READ_SMALL_PART values get one warp; longer ones ONE_READ_WARPS warps, or more for
#: parts of over ONE_READ_MAX_VALUES_PER_THREAD values a thread.
#: Measured on an H200 (fp16, 2026-11-29, run S of tkcourse/data/h200/tuning/pipeline_probe.txt): best
#: were 32 parts of 1024 values on one warp at 4096x32768, 64 of 2048 on one warp at 1024x131072 (5% over
#: 4096 on 4 warps), 64 of 4096 on 4 warps at 256x262144 (level with 128 of 2048 on one warp, and less
#: sensitive to where the words sit: run A). 128 parts were 15% slower at 131072.
ONE_READ_MIN_PART = 1024
ONE_READ_MAX_PARTS = 64
ONE_READ_SMALL_PART = 2048
ONE_READ_WARPS = 4
ONE_READ_MAX_VALUES_PER_THREAD = 64
#: GPU plan, one read: longer parts than this (16 warps) take the two-pass plan instead.
ONE_READ_MAX_PART = 32768
#: GPU plan, few long rows (``_lanes_softmax_kernel``): rows of at least LANES_MIN_COLS columns are
#: split into LANES_PARTS parts (fewer on a GPU with fewer SMs) of ONE_READ_MAX_VALUES_PER_THREAD values
#: a thread, on a persistent grid of as many lanes as fit at once.
#: Measured on an H200 (fp16, 2026-11-29, runs 10-15 of tkcourse/data/h200/tuning/pipeline_probe.txt):
#: 12% faster than the one-read kernel at 256x262144, 13% at 512x262144, 6% at 128x524288, and 2% slower
#: at 1024x131072 and 4096x32768 (runs 10-11, 32 parts then). Best with a grid that just fills the GPU
#: (runs 11, 14) and 128 parts (run 15, against 32 parts on 4 warps at least: 2% faster at 256x262144, 8%
#: at 128x524288, 39% at 64x1048576); loading two rows ahead took too many registers (run 13: 25% slower).
LANES_MIN_COLS = 262144
LANES_PARTS = 128
#: One read: reads of the row's words (about a microsecond each) before a program stops waiting
#: for its row's other parts and reads the whole row itself. A few polls are the norm.
MAX_POLLS = 1 << 16
### BEGIN SOLUTION
#: On a GPU, run the one-read kernel instead of the two passes (the lesson's last step).
ONE_READ = True
### STUB
#: The reference's last step (notebook 05): True makes a GPU run the one-read kernel, which does not
#: call your two functions. Keep False while you work on them.
#! ONE_READ = False
### END SOLUTION


#: ``softmax(x, parts=..., block=...)`` takes powers of two up to these: a row split over more programs
#: than this is mostly empty parts, and a block of more columns than this only costs registers.
MAX_PARTS = 1024
MAX_BLOCK = 1 << 16


def _plan(n_cols: int, element_size: int) -> tuple[int, int]:
    """(parts, BLOCK) for a row: one part in the interpreter, about PART_BYTES a part on a GPU."""
    if INTERPRET:
        return 1, min(INTERPRETER_BLOCK, triton.next_power_of_2(n_cols))
    block = min(BLOCK_BYTES // element_size, triton.next_power_of_2(n_cols))
    parts = triton.next_power_of_2(triton.cdiv(n_cols * element_size, PART_BYTES))
    return parts, block


@functools.lru_cache(maxsize=None)  # once per row length: triton.cdiv and next_power_of_2 cost microseconds a call
def _one_read_split(n_cols: int, sm_parts: int = 128) -> tuple[int, int, int]:
    """(PARTS, PART, num_warps) of the one-read plan for a row of ``n_cols`` values on a GPU whose
    rows may have ``sm_parts`` parts (a power of two; 128 on an H200's 132 SMs): ONE_READ_MAX_PARTS at
    most, LANES_PARTS for rows of the persistent grid, whose parts get ONE_READ_MAX_VALUES_PER_THREAD
    values a thread."""
    lanes = n_cols >= LANES_MIN_COLS
    max_parts = min(LANES_PARTS if lanes else ONE_READ_MAX_PARTS, sm_parts)
    part = max(ONE_READ_MIN_PART, triton.next_power_of_2(triton.cdiv(n_cols, max_parts)))
    part = min(part, triton.next_power_of_2(n_cols))
    parts = triton.next_power_of_2(triton.cdiv(n_cols, part))
    part = triton.next_power_of_2(triton.cdiv(n_cols, parts))  # spread the row evenly over the parts
    warps = max(1, part // (32 * ONE_READ_MAX_VALUES_PER_THREAD))
    if lanes or part <= ONE_READ_SMALL_PART:
        return parts, part, warps
    return parts, part, max(ONE_READ_WARPS, warps)


def _one_read_plan(n_cols: int, device) -> tuple[int, int, int] | None:
    """``_one_read_split``, or None where the one-read kernel does not apply: the interpreter, or a
    part longer than ONE_READ_MAX_PART. All the parts of a row should run at once (or the waiting
    parts end up reading the row themselves), so a row gets no more parts than the GPU has SMs."""
    if INTERPRET or not ONE_READ:
        return None
    sms = sm_count(device.index)
    parts, part, warps = _one_read_split(n_cols, 1 << (sms.bit_length() - 1))
    if part > ONE_READ_MAX_PART:
        return None
    return parts, part, warps


_LANES_FIT: dict = {}  # programs of _lanes_softmax_kernel an SM holds, per (device, dtype, PARTS, PART, warps)


def _lanes(x, out, parts, part, num_warps) -> int | None:
    """Lanes of the persistent grid for rows of at least LANES_MIN_COLS columns (None: shorter rows,
    one program per part): as many as fit at once, ``lanes * parts`` programs."""
    n_rows, n_cols = x.shape
    if n_cols < LANES_MIN_COLS:
        return None
    key = (x.device.index, x.dtype, parts, part, num_warps)
    if key not in _LANES_FIT:
        slots = torch.zeros(1, dtype=torch.int64, device=x.device)
        _LANES_FIT[key] = programs_per_sm(_lanes_softmax_kernel, x, out, x.stride(0), out.stride(0), n_rows, n_cols,
                                          slots, MAX_POLLS, _span(num_warps), PARTS=parts, PART=part,
                                          FALLBACK_BLOCK=32 * num_warps, SPAN=_span(num_warps), num_warps=num_warps,
                                          device_index=x.device.index)
    fit = sm_count(x.device.index) * _LANES_FIT[key] // parts
    return min(fit, n_rows) if fit >= 1 else None


def _span(num_warps: int) -> int:
    """Entries of _combine_parts' agreement tensor: two a thread, so that every thread holds some."""
    return 64 * num_warps


def _one_read(x, out, parts, part, num_warps, max_polls=None, lanes=None):
    """The one-read kernel, a program per part of every row; or with ``lanes``, the persistent one."""
    n_rows, n_cols = x.shape
    slots = torch.zeros((n_rows, parts), dtype=torch.int64, device=x.device)  # 0: not yet published
    polls = MAX_POLLS if max_polls is None else max_polls
    common = dict(PARTS=parts, PART=part, FALLBACK_BLOCK=32 * num_warps, SPAN=_span(num_warps), num_warps=num_warps)
    if lanes is None:
        _one_read_softmax_kernel[(parts * n_rows,)](x, out, x.stride(0), out.stride(0), n_cols, slots, polls,
                                                    _span(num_warps), **common)
    else:
        _lanes_softmax_kernel[(parts * lanes,)](x, out, x.stride(0), out.stride(0), n_rows, n_cols, slots, polls,
                                                _span(num_warps), **common)
    return out


def softmax(x: torch.Tensor, parts: int | None = None, block: int | None = None) -> torch.Tensor:
    """Softmax over the last dim of a 2-D ``x``, rows of any length; a new tensor in x's dtype.

    Rows may be strided (read in place); columns must be contiguous, else x is copied first.
    ``parts`` (a power of two) splits each row over that many programs; ``block`` (a power of two)
    is the columns read per step; either one asks for the two-pass kernels. With neither, a GPU
    runs the one-read kernel where it applies (``ONE_READ``, ``_one_read_plan``; on a persistent
    grid for rows of at least LANES_MIN_COLS, ``_lanes``), and otherwise the two-pass plan for the
    mode (``_plan``).
    """
    validate(x, names=["x"], ndim=2)
    n_rows, n_cols = x.shape
    if parts is not None:  # 0 is refused, not taken for "automatic"
        parts = power_of_two("parts", parts, 1, MAX_PARTS)
    if block is not None:
        block = power_of_two("block", block, 1, MAX_BLOCK)
    if parts is None and block is None:
        plan = _one_read_plan(n_cols, x.device)
        if plan is not None:  # on a GPU: every element read once, held in registers across the wait
            if x.stride(1) != 1:
                x = x.contiguous()
            out = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
            return _one_read(x, out, *plan, lanes=_lanes(x, out, *plan))
    auto_parts, auto_block = _plan(n_cols, x.element_size())
    parts = auto_parts if parts is None else parts
    block = auto_block if block is None else block
    if x.stride(1) != 1:
        x = x.contiguous()
    out = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    if parts == 1:  # one program per row
        _online_softmax_kernel[(n_rows,)](x, out, x.stride(0), out.stride(0), n_cols, BLOCK=block,
                                          NUM_STAGES=NUM_STAGES, num_warps=NUM_WARPS)
        return out
    part_cols = triton.cdiv(triton.cdiv(n_cols, parts), block) * block
    words = torch.zeros(1 + n_rows * parts, dtype=torch.int64, device=x.device)  # the ticket, then the slots
    _split_softmax_kernel[(2 * parts * n_rows,)](
        x, out, x.stride(0), out.stride(0), n_cols, part_cols, words, words[1:],
        PARTS=parts, BLOCK=block, NUM_STAGES=NUM_STAGES, SPAN=_span(NUM_WARPS), num_warps=NUM_WARPS,
    )
    return out


def step_states(row: torch.Tensor, block: int) -> list[tuple[float, float]]:
    """(m, l) after each block of a 1-D ``row``, as pass 1 computes them (fp32, pure torch)."""
    if not isinstance(row, torch.Tensor):
        raise TypeError(f"row must be a torch.Tensor, got {type(row).__name__}")
    block = integer("block", block, 1)
    x = row.detach().reshape(-1).to("cpu", torch.float32)
    m, l, states = -math.inf, 0.0, []
    for start in range(0, x.numel(), block):
        chunk = x[start:start + block]
        m_new = max(m, chunk.max().item())
        shift = 0.0 if m_new == -math.inf else m_new
        l = l * math.exp(m - shift) + torch.exp(chunk - shift).sum().item()
        m = m_new
        states.append((m, l))
    return states


def reference(x: torch.Tensor) -> torch.Tensor:
    """What ``softmax`` must return (computed in fp32, returned in x's dtype)."""
    return torch.softmax(x.float(), dim=-1).to(x.dtype)
