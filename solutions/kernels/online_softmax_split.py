"""Lesson 05, step 1 from correct to fast: a long row split over several programs.

Few long rows (256 rows of 262144 on a GPU with 132 SMs) would leave SMs idle with one program
per row, and a 512 KB row pushes the start of itself out of L2 before pass 2 comes back for it.
So a long row is split into ``parts``: a *stats* program per part runs pass 1 over that part for
its ``(m, l)``; a *write* program per part combines the parts' pairs into the row's ``(m, l)``:
``m = max m_p``, ``l = sum l_p * exp(m_p - m)`` (the same rescaling as the lesson's running sum,
applied to whole parts), and runs pass 2 over its part. The two passes are the lesson's own
functions (``online_softmax.online_stats``, ``write_softmax``); this step adds the exchange of
the pairs between programs, which ``online_softmax_one_read`` builds on.

Same API as the lesson: ``softmax(x, parts=None, block=None)``; ``reference`` and ``step_states``
are the lesson's. The exchange's pieces (``publish_part``, ``combine_words``, ``combine_parts``,
``exchange_span``) are public: the one-read step and the probes in ``research/tuning/`` build on them.
"""

import torch
import triton
import triton.language as tl

from tkcourse.mode import INTERPRET

from .._checks import power_of_two, validate
from ..online_softmax import (
    BLOCK_BYTES,
    INTERPRETER_BLOCK,
    MAX_BLOCK,
    NUM_STAGES,
    NUM_WARPS,
    online_softmax_kernel,
    online_stats,
    reference,
    step_states,
    write_softmax,
)

__all__ = ["softmax", "reference", "step_states"]


@triton.jit
def publish_part(slots_ptr, row, part, m, l, PARTS: tl.constexpr, TAGGED: tl.constexpr = False, tag=1):
    """Publish this part's (m, l) as ONE 64-bit word (m in the low half, l in the high half).

    The word is its own flag: a reader sees either 0 (not yet published) or the whole pair, never
    half of it, so no counter and no memory fence are needed. A published word is never 0: l >= 1
    for a part with a value in it, and an empty part has m = -inf. (``TAGGED``: the word's bit 32, l's
    lowest mantissa bit, holds ``tag``, 0 or 1, for words kept from launch to launch: the one-read step.)
    """
    l_bits = l.to(tl.int32, bitcast=True).to(tl.int64)
    if TAGGED:
        l_bits = (l_bits & -2) | tag
    word = (m.to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF) | (l_bits << 32)
    tl.atomic_xchg(slots_ptr + row * PARTS + part, word, sem="relaxed")


@triton.jit
def combine_words(words):
    """The row's ``(m, l)`` from its parts' published words (``publish_part``'s format): m is the
    largest m_p, l the sum of the parts' l_p, each rescaled by exp(m_p - m) to the row's max."""
    m_parts = (words & 0xFFFFFFFF).to(tl.int32).to(tl.float32, bitcast=True)
    l_parts = (words >> 32).to(tl.int32).to(tl.float32, bitcast=True)
    m = tl.max(m_parts, axis=0)
    return m, tl.sum(l_parts * tl.exp(m_parts - m), axis=0)


@triton.jit
def _missing(words, TAGGED: tl.constexpr, tag):
    """1 for each word not published yet: 0, or (TAGGED) a word whose tag is not ``tag``."""
    if TAGGED:
        missing = ((words >> 32) & 1) != tag
    else:
        missing = words == 0
    return missing.to(tl.int32)


@triton.jit
def combine_parts(slots_ptr, row, max_polls, span, PARTS: tl.constexpr, SPAN: tl.constexpr,
                  TAGGED: tl.constexpr = False, tag=1):
    """Wait until the row's PARTS words are published (not 0; ``TAGGED``: with tag ``tag``, as
    ``publish_part`` writes them), reading them again at most ``max_polls`` times.

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
    while (tl.sum(_missing(words, TAGGED, tag), axis=0) > 0) & (polls < max_polls):
        words = tl.load(slots, volatile=True)
        polls += 1
    m, l = combine_words(words)
    missing = tl.sum(_missing(words, TAGGED, tag), axis=0)  # this warp's view
    entry = tl.arange(0, SPAN)
    missing = tl.max(tl.where(entry < span, missing, 0), axis=0)  # every thread's view: one answer
    return m, l, missing == 0


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
    SPAN: tl.constexpr,  # entries of combine_parts' agreement tensor: 64 * num_warps
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
        m, l = online_stats(x_row, start, end, BLOCK, NUM_STAGES)
        publish_part(slots_ptr, row, part, m, l, PARTS)
    else:  # write item: wait for the row's parts, combine their (m, l), pass 2 over this part
        # tickets: every stats item this waits for is running, so the wait ends: no bound, no fallback,
        # and no need for the warps to agree on "complete" (SPAN as ``span`` lets the compiler drop that)
        m, l, _ = combine_parts(slots_ptr, row, 0x7FFFFFFF, SPAN, PARTS, SPAN)
        write_softmax(x_row, out_ptr + row.to(tl.int64) * out_row_stride, start, end, m, l, BLOCK, NUM_STAGES)


#: GPU plan (tune on the target): a part is about this many bytes of a row, so that the parts read
#: by every program running at once still sit in L2 when their write items come back for them.
PART_BYTES = 32 * 1024
#: ``softmax(x, parts=...)`` takes powers of two up to this: a row split over more programs than this
#: is mostly empty parts.
MAX_PARTS = 1024


def split_plan(n_cols: int, element_size: int) -> tuple[int, int]:
    """(parts, BLOCK) for a row: one part in the interpreter, about PART_BYTES a part on a GPU."""
    if INTERPRET:
        return 1, min(INTERPRETER_BLOCK, triton.next_power_of_2(n_cols))
    block = min(BLOCK_BYTES // element_size, triton.next_power_of_2(n_cols))
    parts = triton.next_power_of_2(triton.cdiv(n_cols * element_size, PART_BYTES))
    return parts, block


def exchange_span(num_warps: int) -> int:
    """Entries of combine_parts' agreement tensor: two a thread, so that every thread holds some."""
    return 64 * num_warps



def two_pass(x: torch.Tensor, parts: int | None, block: int | None) -> torch.Tensor:
    """Both passes for a validated ``x``: one program per row (the lesson's kernel) for one part,
    else the split kernel; ``None`` for either takes ``split_plan``'s choice."""
    n_rows, n_cols = x.shape
    auto_parts, auto_block = split_plan(n_cols, x.element_size())
    parts = auto_parts if parts is None else parts
    block = auto_block if block is None else block
    if x.stride(1) != 1:
        x = x.contiguous()
    out = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    if parts == 1:  # one program per row
        online_softmax_kernel[(n_rows,)](x, out, x.stride(0), out.stride(0), n_cols, BLOCK=block,
                                          NUM_STAGES=NUM_STAGES, num_warps=NUM_WARPS)
        return out
    part_cols = triton.cdiv(triton.cdiv(n_cols, parts), block) * block
    words = torch.zeros(1 + n_rows * parts, dtype=torch.int64, device=x.device)  # the ticket, then the slots
    _split_softmax_kernel[(2 * parts * n_rows,)](
        x, out, x.stride(0), out.stride(0), n_cols, part_cols, words, words[1:],
        PARTS=parts, BLOCK=block, NUM_STAGES=NUM_STAGES, SPAN=exchange_span(NUM_WARPS), num_warps=NUM_WARPS,
    )
    return out


def checked_parts_and_block(parts: int | None, block: int | None) -> tuple[int | None, int | None]:
    """``parts`` and ``block`` as given (powers of two, or None for the plan's choice), else an error
    that names them; 0 is refused, not taken for "automatic"."""
    if parts is not None:
        parts = power_of_two("parts", parts, 1, MAX_PARTS)
    if block is not None:
        block = power_of_two("block", block, 1, MAX_BLOCK)
    return parts, block


def softmax(x: torch.Tensor, parts: int | None = None, block: int | None = None) -> torch.Tensor:
    """Softmax over the last dim of a 2-D ``x``, rows of any length; a new tensor in x's dtype.

    Rows may be strided (read in place); columns must be contiguous, else x is copied first.
    ``parts`` (a power of two) splits each row over that many programs; ``block`` (a power of two)
    is the columns read per step. Either left out: the plan for the mode (``split_plan``: one part in the
    interpreter, about PART_BYTES a part on a GPU).
    """
    validate(x, names=["x"], ndim=2)
    parts, block = checked_parts_and_block(parts, block)
    return two_pass(x, parts, block)
