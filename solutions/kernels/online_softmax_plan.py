"""Online softmax's one-read plan on a GPU: how a row is cut into parts, and how many warps a part gets.

The kernels that run the plan are in ``online_softmax_one_read``; this module is the host's choice
of ``(PARTS, PART, num_warps)`` for a row length (``one_read_split``, ``one_read_plan``) and the size
of the exchange words the parts share (``slot_words``), with the constants behind them.
"""

import functools

import triton

from tkcourse.mode import INTERPRET

from .._occupancy import sm_count

__all__ = ["one_read_split", "one_read_plan", "slot_words", "ONE_READ_MIN_PART", "ONE_READ_MAX_PARTS",
           "ONE_READ_SMALL_PART", "ONE_READ_WARPS", "ONE_READ_MAX_VALUES_PER_THREAD", "ONE_READ_MAX_PART",
           "LANES_MIN_COLS", "LANES_PARTS", "MAX_POLLS"]


#: GPU plan, one read (``one_read_softmax_kernel``): a row is split into at most ONE_READ_MAX_PARTS
#: parts (fewer on a GPU with fewer SMs) of at least ONE_READ_MIN_PART values (powers of two). Parts
#: of up to ONE_READ_SMALL_PART values get one warp; longer ones ONE_READ_WARPS warps, or more for
#: parts of over ONE_READ_MAX_VALUES_PER_THREAD values a thread. Why: a small part on one warp lets
#: many programs share an SM, so more loads are in flight; more parts than SMs would leave some
#: parts of a row waiting to start while their siblings poll. The sweep behind these values (best
#: plan per shape on an H200) is under "Constants of lessons 02 and 05" in ``tkcourse/data/PROVENANCE.md``.
ONE_READ_MIN_PART = 1024
ONE_READ_MAX_PARTS = 64
ONE_READ_SMALL_PART = 2048
ONE_READ_WARPS = 4
ONE_READ_MAX_VALUES_PER_THREAD = 64
#: GPU plan, one read: longer parts than this (16 warps) take the two-pass plan instead: past it a
#: part no longer fits in one program's registers without spilling to local memory.
ONE_READ_MAX_PART = 32768
#: GPU plan, few long rows (``lanes_softmax_kernel``): rows of at least LANES_MIN_COLS columns are
#: split into LANES_PARTS parts (fewer on a GPU with fewer SMs) of ONE_READ_MAX_VALUES_PER_THREAD values
#: a thread, on a persistent grid of as many lanes as fit at once. Why: with few rows, a program per
#: part leaves the GPU idle while parts wait; a lane loads its next row during the wait, and a grid
#: that just fills the GPU never has a part waiting on a sibling that cannot start. Below
#: LANES_MIN_COLS there are rows enough to hide the wait, and the plain one-read kernel is as fast.
#: Loading two rows ahead costs the registers that the parts need. Measurements: same section.
LANES_MIN_COLS = 262144
LANES_PARTS = 128
#: One read: reads of the row's words (about a microsecond each) before a program stops waiting
#: for its row's other parts and reads the whole row itself. A few polls are the norm; the bound
#: only matters when a part cannot start, and then correctness, not speed, is what it buys.
MAX_POLLS = 1 << 16


@functools.lru_cache(maxsize=None)  # once per row length: triton.cdiv and next_power_of_2 cost microseconds a call
def one_read_split(n_cols: int, sm_parts: int = 128) -> tuple[int, int, int]:
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


def one_read_plan(n_cols: int, device) -> tuple[int, int, int] | None:
    """``one_read_split``, or None where the one-read kernel does not apply: the interpreter, or a
    part longer than ONE_READ_MAX_PART. All the parts of a row should run at once (or the waiting
    parts end up reading the row themselves), so a row gets no more parts than the GPU has SMs."""
    if INTERPRET:
        return None
    sms = sm_count(device.index)
    parts, part, warps = one_read_split(n_cols, 1 << (sms.bit_length() - 1))
    if part > ONE_READ_MAX_PART:
        return None
    return parts, part, warps


def slot_words(n_rows: int, parts: int) -> int:
    """Exchange words the one-read kernels take for ``n_rows`` rows of ``parts`` parts: one a part."""
    return n_rows * parts
