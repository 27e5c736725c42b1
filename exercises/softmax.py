# Exercise generated from solutions/softmax.py by `make exercises`. Fill in the parts marked TODO.
# Your edits are safe: the generator never overwrites a file you have changed.
# Check your work: `tkcourse check softmax` in a shell, or tkcourse.check.run("softmax") in a notebook.
"""Lesson 02: fused softmax over the last dim of a 2-D tensor, one row per program iteration.

``softmax(x)[i, j] = exp(x[i, j] - max_i) / sum_k exp(x[i, k] - max_i)``.

Traffic of the fused kernel: read the (M, N) input once, write the (M, N) output once:
``2 * M * N`` elements (4 bytes an element in fp16: 2 read + 2 written). The whole row is one
block held in registers, so rows are limited to ``MAX_COLS`` columns; longer rows are lesson 05.

``naive_softmax`` does the same maths with five torch ops, each a trip through HBM:
read ``5MN + 2M`` and write ``3MN + 2M`` elements, about 4x the fused kernel's bytes.

Used by lesson 08 (``launch.py``) and the fast path (``solutions/kernels/softmax.py``): ``softmax_kernel``
and its plan, ``warps_for``, ``stages_for``, ``num_programs``.
"""

import torch
import triton
import triton.language as tl

from tkcourse.mode import INTERPRET

from exercises._checks import validate
from exercises._occupancy import programs_per_sm, sm_count

#: Longest row ``softmax`` takes. The row lives in registers: 32768 fp32 values over 16 warps
#: (512 threads) is 64 registers a thread; at 65536 it would be 128, plus temporaries, past what
#: the register file gives one program without spilling to slow local memory. Longer rows:
#: lesson 05 (``solutions.online_softmax``) streams the row in blocks instead.
MAX_COLS = 32768


@triton.jit
def softmax_kernel(
    x_ptr,  # pointer to x[0, 0]
    out_ptr,  # pointer to out[0, 0]
    x_row_stride,  # elements between the starts of two rows of x (its columns are contiguous)
    out_row_stride,  # elements between the starts of two rows of out
    n_rows,  # number of rows
    n_cols,  # number of columns, the softmax length; n_cols <= BLOCK
    BLOCK: tl.constexpr,  # triton.next_power_of_2(n_cols): the whole row is one block
    NUM_STAGES: tl.constexpr,  # rows the loop loads ahead (1: no prefetch); ignored by the interpreter
):
    # TODO: your code here
    # 1. cols = tl.arange(0, BLOCK) and a mask cols < n_cols for the lanes past the row's end
    # 2. loop over rows from this program's id to n_rows, stepping by the number of programs (tl.range,
    #    with NUM_STAGES as its num_stages)
    # 3.   load the row (x_ptr + row * x_row_stride + cols) with other=-inf, convert to fp32
    # 4.   subtract the row max, exponentiate, divide by the row sum
    # 5.   store in out's dtype (out_ptr.dtype.element_ty) at out_ptr + row * out_row_stride + cols
    pass


def warps_for(BLOCK: int) -> int:
    """4 warps up to 4096 columns, then one more warp per 1024 columns, at most 16.

    Short rows get few warps, so many programs (rows) fit on one SM at once and keep enough bytes
    in flight; long rows get up to 16 warps (512 threads) so no thread holds more than 64 values.
    A sweep of warps x stages x programs on an H200 agreed to within 1% (``tkcourse/data/PROVENANCE.md``, "Constants
    of lessons 02 and 05").
    """
    return min(16, max(4, BLOCK // 1024))


def stages_for(BLOCK: int, element_size: int) -> int:
    """Rows the persistent loop loads ahead: none.

    With many programs on each SM, other programs' loads already hide a row's latency, so a prefetch
    into shared memory costs what it hides: on an H200 2 or 3 stages were at most 1% faster than none,
    and slower for short and long rows (``tkcourse/data/PROVENANCE.md``, "Constants of lessons 02 and 05"). The
    parameter stays so that you can measure it yourself (the sweep: ``research/tuning/``).
    """
    return 1


#: Rows whose BLOCK (the row length rounded up to a power of two) is at least this, so rows of more than
#: 2048 columns, get a program each instead of a persistent grid: a long row is
#: work enough to pay for a program's start, and the hardware's own scheduling then balances the
#: SMs; at 1024 columns a row is too little work, and the persistent grid won on an H200
#: (``tkcourse/data/PROVENANCE.md``, "Constants of lessons 02 and 05").
PERSISTENT_BELOW = 4096


_OCCUPANCY: dict = {}  # programs an SM holds at once, per (device, dtype, BLOCK, num_warps, num_stages)


def num_programs(x: torch.Tensor, out: torch.Tensor, BLOCK: int, num_warps: int, num_stages: int) -> int:
    """How many programs to launch: a program per row in the interpreter and for long rows; for short
    rows on a GPU, as many as fit at once.

    A persistent grid (Triton tutorial 02) has one wave of programs that loop over the rows, so no
    program waits for a slot; with ``num_stages`` > 1 each could also prefetch its next row while it
    works on this one, which ``stages_for`` leaves off.
    How many fit on an SM comes from the compiled kernel's registers and shared memory.
    """
    n_rows = x.shape[0]
    if INTERPRET or BLOCK >= PERSISTENT_BELOW:
        return n_rows
    key = (x.device.index, x.dtype, BLOCK, num_warps, num_stages)
    if key not in _OCCUPANCY:
        _OCCUPANCY[key] = programs_per_sm(softmax_kernel, x, out, x.stride(0), out.stride(0), n_rows, x.shape[1],
                                          BLOCK=BLOCK, NUM_STAGES=num_stages, num_warps=num_warps,
                                          device_index=x.device.index)
    return min(n_rows, sm_count(x.device.index) * _OCCUPANCY[key])


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim of a 2-D ``x``; returns a new contiguous tensor in x's dtype.

    Rows may be strided (a slice such as ``x[::2]`` is read in place); columns must be contiguous,
    else x is copied first. Rows longer than ``MAX_COLS`` raise ValueError (see lesson 05).
    """
    validate(x, names=["x"], ndim=2)
    n_rows, n_cols = x.shape
    if n_cols > MAX_COLS:
        raise ValueError(
            f"x has {n_cols} columns, more than MAX_COLS={MAX_COLS}: a whole row must fit in one "
            "program's registers here. Use the online softmax of lesson 05 "
            "(solutions.online_softmax.softmax), which streams a row of any length in blocks."
        )
    if x.stride(1) != 1:
        x = x.contiguous()  # the kernel reads a row as one contiguous block
    out = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    # TODO: your code here
    # BLOCK: the smallest power of two >= n_cols (triton.next_power_of_2)
    BLOCK = None
    num_warps = warps_for(BLOCK)
    num_stages = stages_for(BLOCK, x.element_size())
    grid = (num_programs(x, out, BLOCK, num_warps, num_stages),)
    softmax_kernel[grid](x, out, x.stride(0), out.stride(0), n_rows, n_cols,
                          BLOCK=BLOCK, NUM_STAGES=num_stages, num_warps=num_warps)
    return out


def naive_softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax with five eager torch ops, each one a separate pass over HBM (M rows, N columns).

    Elements moved: max (read MN, write M), subtract (read MN + M, write MN), exp (read MN,
    write MN), sum (read MN, write M), divide (read MN + M, write MN): ``8MN + 4M`` in all,
    against ``2MN`` for the fused kernel. (``x.max(dim=1)`` also writes M int64 indices, which a
    byte count of the ops, like lesson 02's table, sees as well.)
    """
    x_max = x.max(dim=1, keepdim=True).values
    z = x - x_max
    num = torch.exp(z)
    den = num.sum(dim=1, keepdim=True)
    return num / den


def reference(x: torch.Tensor) -> torch.Tensor:
    """What ``softmax`` must return (computed in fp32, returned in x's dtype)."""
    return torch.softmax(x.float(), dim=-1).to(x.dtype)
