"""Lesson 05, step 2 from correct to fast (GPU only): each part of a row read once, from HBM.

The split step (``online_softmax_split``) reads every element twice: pass 2 comes back for it, from
L2 at best. A part small enough for registers needs one read. Each program of
``one_read_softmax_kernel`` loads its part, publishes the part's ``(m, l)`` (the split step's
exchange words), waits for the row's other parts, and writes its part from registers: the input
crosses HBM once. For few long rows, ``lanes_softmax_kernel`` does the same on a persistent grid
(one wave of programs, Triton tutorial 02), loading its part of the next row while it waits. The
exchange words carry a tag that alternates from launch to launch (``launch_tag``), so a caller may
keep them from call to call and launch no memset before each launch (``kernels.online_softmax``'s
lean path does). The plan, how a row is cut into parts, is ``online_softmax_plan``'s (re-exported).

The programs of a row wait for each other, which the interpreter (one program at a time) cannot
run; there, and for parts too long for registers, ``softmax`` takes the split step's two passes.
This is the reference's fast path on a GPU; the course's benchmark measures it behind a lean launch
(``kernels.online_softmax``).

Same API as the lesson: ``softmax(x, parts=None, block=None, one_read=True)``; ``parts`` or
``block``, or ``one_read=False``, ask for the two passes. ``reference`` and ``step_states`` are the
lesson's. The names without an underscore (``load_part``, ``launch_tag``, ``one_read_softmax_kernel``,
``lanes_softmax_kernel``, ``one_read_plan``, ``persistent_lanes``, ``one_read_launch``, ``slot_words``)
are the building blocks that ``kernels.online_softmax`` and the probes in ``research/`` compose; the
others may change without notice.
"""


import torch
import triton
import triton.language as tl

from .._checks import validate
from .._occupancy import programs_per_sm, sm_count
from ..online_softmax import online_stats, reference, step_states
from .online_softmax_plan import (  # noqa: F401 (the plan, part of this module's API)
    LANES_MIN_COLS,
    LANES_PARTS,
    MAX_POLLS,
    ONE_READ_MAX_PART,
    ONE_READ_MAX_PARTS,
    ONE_READ_MAX_VALUES_PER_THREAD,
    ONE_READ_MIN_PART,
    ONE_READ_SMALL_PART,
    ONE_READ_WARPS,
    one_read_plan,
    one_read_split,
    slot_words,
)
from .online_softmax_split import (
    checked_parts_and_block,
    combine_parts,
    exchange_span,
    publish_part,
    two_pass,
)

__all__ = ["softmax", "reference", "step_states"]


@triton.jit
def launch_tag(slots_ptr, own, mask=True):
    """This launch's tag (0 or 1) for a row's exchange words, for the program whose word is ``own``
    (row * PARTS + part): the other tag than its own word's, which the program published in the
    slots' last launch (``publish_part`` puts the tag in bit 32, l's lowest mantissa bit; new, zeroed
    slots: tag 0, so this launch's is 1). Every program of the row reads its own word and gets the
    same answer, so slots kept from launch to launch need no memset before a launch, eagerly or in a
    CUDA graph: a launch's words differ from the last launch's by their tag. (Slots must be zeroed
    ones or those of earlier launches of the same plan: after a launch on zeroed slots no word is 0,
    which with tag 0 would read as published.) The read goes to L2 (``.cg``: an L1 line may be a
    launch old); issued before the part's load, it also brings the row's words into L2 while the
    part streams in."""
    last = tl.load(slots_ptr + own, mask=mask, other=0, cache_modifier=".cg")
    return 1 - ((last >> 32).to(tl.int32) & 1)


@triton.jit
def _exchange(slots_ptr, row, part, m_p, l_p, tag, x_ptr, x_row_stride, n_cols, max_polls, span, PARTS: tl.constexpr,
              SPAN: tl.constexpr, FALLBACK_BLOCK: tl.constexpr):
    """Publish this part's ``(m_p, l_p)`` with tag ``tag`` and return row ``row``'s ``(m, l)``: combined
    from the parts' words of this launch (``combine_parts``) or, when a part of the row has not run
    within ``max_polls`` polls, read from the whole row by this program itself (pass 1 of the lesson).
    ``tag`` may be a run-time value or a constant (a compile-time 0 or 1: see the one-read kernel)."""
    publish_part(slots_ptr, row, part, m_p, l_p, PARTS, True, tag)
    m, l, complete = combine_parts(slots_ptr, row, max_polls, span, PARTS, SPAN, True, tag)
    if not complete:  # row: a Python int in the interpreter's lanes loop, hence tl.cast
        m, l = online_stats(x_ptr + tl.cast(row, tl.int64) * x_row_stride, 0, n_cols, FALLBACK_BLOCK, 1)
    return m, l


@triton.jit
def _part_stats(x):
    """A part held in registers (fp32): ``e = exp(x - shift)`` and the part's ``(m_p, l_p)``; ``shift``
    is m_p, or 0 for a part with no column in the row (then e = 0 and l_p = 0)."""
    m_p = tl.max(x, axis=0)
    shift = tl.where(m_p == float("-inf"), 0.0, m_p)
    e = tl.exp(x - shift)
    return e, shift, m_p, tl.sum(e, axis=0)


@triton.jit
def load_part(x_row, cols, mask):
    """One read of a part into registers, and its ``_part_stats``."""
    x = tl.load(x_row + cols, mask=mask, other=float("-inf"), eviction_policy="evict_first").to(tl.float32)
    return _part_stats(x)


@triton.jit
def one_read_softmax_kernel(
    x_ptr,  # pointer to x[0, 0]
    out_ptr,  # pointer to out[0, 0]
    x_row_stride,  # elements between the starts of two rows of x (its columns are contiguous)
    out_row_stride,  # elements between the starts of two rows of out
    n_cols,  # columns: the softmax length
    slots_ptr,  # int64 (rows, PARTS): each part's (m, l) as one tagged word (launch_tag): zeroed, or as left
    max_polls,  # reads of the row's words before a program gives up waiting and reads the row itself
    span,  # SPAN, passed at run time (see combine_parts)
    PARTS: tl.constexpr,  # programs a row is split over; a power of two
    PART: tl.constexpr,  # columns a program holds on chip; a power of two, PARTS * PART >= n_cols
    FALLBACK_BLOCK: tl.constexpr,  # columns per step of the fallback's read of the whole row
    SPAN: tl.constexpr,  # entries of combine_parts' agreement tensor: 64 * num_warps
):
    """The GPU plan: each program reads its part of a row once and keeps it in registers.

    A row too long for one program is held by PARTS programs together, numbered by program id.
    Each computes its part's (m, l), publishes it, waits for the row's other parts, combines the
    pairs, and writes its part from registers: the input is read from HBM once, never twice.
    Every program of a row waits for every other, and the GPU promises no order: a part might not
    have started while its siblings fill the GPU. So the wait is bounded: after ``max_polls`` polls
    a program computes the row's (m, l) itself, reading the whole row (pass 1 of the lesson). Always
    correct, never a deadlock; on an idle GPU the parts of a row run together and nobody falls back.
    (The split kernel's ticket gives the same safety, but one counter that every program hits is a
    point of contention that cost more than the wait saves: see ``research/``, exchange_probe.)
    The words carry a tag that alternates from launch to launch (``launch_tag``), so a caller may
    keep the slots and launch again without zeroing them: in a CUDA graph too.
    """
    pid = tl.program_id(0)
    row = pid // PARTS
    part = pid % PARTS
    x_row = x_ptr + row.to(tl.int64) * x_row_stride
    cols = part * PART + tl.arange(0, PART)
    mask = cols < n_cols
    if PARTS > 1:  # before the part's load: the row's words come into L2 meanwhile
        tag = launch_tag(slots_ptr, pid)  # pid = row * PARTS + part
    e, shift, m_p, l_p = load_part(x_row, cols, mask)  # e stays in registers until the row's max is known
    scale = 1.0 / l_p
    if PARTS > 1:  # a copy of the exchange for each tag, each comparing with a constant: a tag compared at
        # run time in the wait took 16 more registers a thread here (96 at 64 parts of 2048: 21 programs an SM,
        # where 25 fit); in the lanes kernel, which holds two parts, it took none and the copies took more
        if tag == 1:
            m, l = _exchange(slots_ptr, row, part, m_p, l_p, 1, x_ptr, x_row_stride, n_cols, max_polls, span, PARTS,
                             SPAN, FALLBACK_BLOCK)
        else:
            m, l = _exchange(slots_ptr, row, part, m_p, l_p, 0, x_ptr, x_row_stride, n_cols, max_polls, span, PARTS,
                             SPAN, FALLBACK_BLOCK)
        scale = tl.exp(shift - m) / l  # e is relative to this part's max: rescale it to the row's
    y = e * scale
    tl.store(out_ptr + row.to(tl.int64) * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask,
             eviction_policy="evict_first")


@triton.jit
def lanes_softmax_kernel(
    x_ptr,  # pointer to x[0, 0]
    out_ptr,  # pointer to out[0, 0]
    x_row_stride,  # elements between the starts of two rows of x (its columns are contiguous)
    out_row_stride,  # elements between the starts of two rows of out
    n_rows,  # rows of x
    n_cols,  # columns: the softmax length
    slots_ptr,  # int64 (rows, PARTS): each part's (m, l) as one tagged word (launch_tag): zeroed, or as left
    max_polls,  # reads of the row's words before a program gives up waiting and reads the row itself
    span,  # SPAN, passed at run time (see combine_parts)
    PARTS: tl.constexpr,  # programs a row is split over; a power of two
    PART: tl.constexpr,  # columns a program holds on chip; a power of two, PARTS * PART >= n_cols
    FALLBACK_BLOCK: tl.constexpr,  # columns per step of the fallback's read of the whole row
    SPAN: tl.constexpr,  # entries of combine_parts' agreement tensor: 64 * num_warps
):
    """Few long rows: the one-read kernel on a persistent grid of ``lanes * PARTS`` programs.

    The PARTS programs of lane k hold the parts of rows k, k + lanes, k + 2 * lanes, ... one row at a
    time, and the grid is one wave (as many programs as fit at once). Each program loads its part of
    the lane's NEXT row before it waits for this row's other parts, so a load is in flight through the
    wait, where the one-read kernel had none. Same word exchange (the next row's tag read with its
    part's load), wait and fallback.
    """
    lanes = tl.num_programs(0) // PARTS
    lane = tl.program_id(0) // PARTS
    part = tl.program_id(0) % PARTS
    cols = part * PART + tl.arange(0, PART)
    mask = cols < n_cols
    tag_next = launch_tag(slots_ptr, lane * PARTS + part, lane < n_rows)
    x_next = tl.load(x_ptr + lane.to(tl.int64) * x_row_stride + cols, mask=cols < tl.where(lane < n_rows, n_cols, 0),
                     other=float("-inf"), eviction_policy="evict_first")  # no row for this lane: nothing read
    for row in tl.range(lane, n_rows, lanes, num_stages=1):  # row: a Python int in the interpreter, hence tl.cast
        tag = tag_next
        e, shift, m_p, l_p = _part_stats(x_next.to(tl.float32))
        nxt = row + lanes  # its load is in flight while this row's other parts are awaited
        tag_next = launch_tag(slots_ptr, nxt * PARTS + part, nxt < n_rows)
        x_next = tl.load(x_ptr + tl.cast(nxt, tl.int64) * x_row_stride + cols,
                         mask=cols < tl.where(nxt < n_rows, n_cols, 0), other=float("-inf"),
                         eviction_policy="evict_first")
        m, l = _exchange(slots_ptr, row, part, m_p, l_p, tag, x_ptr, x_row_stride, n_cols, max_polls, span, PARTS,
                         SPAN, FALLBACK_BLOCK)
        y = e * (tl.exp(shift - m) / l)
        tl.store(out_ptr + tl.cast(row, tl.int64) * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask,
                 eviction_policy="evict_first")


_LANES_FIT: dict = {}  # programs of lanes_softmax_kernel an SM holds, per (device, dtype, PARTS, PART, warps)


def persistent_lanes(x, out, parts, part, num_warps) -> int | None:
    """Lanes of the persistent grid for rows of at least LANES_MIN_COLS columns (None: shorter rows,
    one program per part): as many as fit at once, ``lanes * parts`` programs."""
    n_rows, n_cols = x.shape
    if n_cols < LANES_MIN_COLS:
        return None
    key = (x.device.index, x.dtype, parts, part, num_warps)
    if key not in _LANES_FIT:
        slots = torch.zeros(1, dtype=torch.int64, device=x.device)
        _LANES_FIT[key] = programs_per_sm(lanes_softmax_kernel, x, out, x.stride(0), out.stride(0), n_rows, n_cols,
                                          slots, MAX_POLLS, exchange_span(num_warps), PARTS=parts, PART=part,
                                          FALLBACK_BLOCK=32 * num_warps, SPAN=exchange_span(num_warps),
                                          num_warps=num_warps, device_index=x.device.index)
    fit = sm_count(x.device.index) * _LANES_FIT[key] // parts
    return min(fit, n_rows) if fit >= 1 else None


def one_read_launch(x, out, parts, part, num_warps, max_polls=None, lanes=None, slots=None):
    """The one-read kernel, a program per part of every row; or with ``lanes``, the persistent one.
    ``slots``: the ``n_rows * parts`` int64 exchange words (``slot_words``) that earlier launches of this
    plan left (a caller that keeps them saves a memset a call: ``launch_tag``), or None for new zeroed
    ones."""
    n_rows, n_cols = x.shape
    if slots is None:
        slots = torch.zeros(slot_words(n_rows, parts), dtype=torch.int64, device=x.device)  # every tag 0: this one's 1
    polls = MAX_POLLS if max_polls is None else max_polls
    common = dict(PARTS=parts, PART=part, FALLBACK_BLOCK=32 * num_warps, SPAN=exchange_span(num_warps), num_warps=num_warps)
    if lanes is None:
        one_read_softmax_kernel[(parts * n_rows,)](x, out, x.stride(0), out.stride(0), n_cols, slots, polls,
                                                    exchange_span(num_warps), **common)
    else:
        lanes_softmax_kernel[(parts * lanes,)](x, out, x.stride(0), out.stride(0), n_rows, n_cols, slots, polls,
                                                exchange_span(num_warps), **common)
    return out


def softmax(x: torch.Tensor, parts: int | None = None, block: int | None = None,
            one_read: bool = True) -> torch.Tensor:
    """Softmax over the last dim of a 2-D ``x``, rows of any length; a new tensor in x's dtype.

    Rows may be strided (read in place); columns must be contiguous, else x is copied first.
    ``parts`` (a power of two) splits each row over that many programs; ``block`` (a power of two)
    is the columns read per step; either one, or ``one_read=False``, asks for the split step's two
    passes. Otherwise a GPU runs the one-read kernel where it applies (``one_read_plan``; on a
    persistent grid for rows of at least LANES_MIN_COLS, ``persistent_lanes``), and the two-pass plan for the
    mode where it does not.
    """
    validate(x, names=["x"], ndim=2)
    n_rows, n_cols = x.shape
    parts, block = checked_parts_and_block(parts, block)
    if parts is None and block is None and one_read:
        plan = one_read_plan(n_cols, x.device)
        if plan is not None:  # on a GPU: every element read once, held in registers across the wait
            if x.stride(1) != 1:
                x = x.contiguous()
            out = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
            return one_read_launch(x, out, *plan, lanes=persistent_lanes(x, out, *plan))
    return two_pass(x, parts, block)
