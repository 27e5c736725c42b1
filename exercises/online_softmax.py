# Exercise generated from solutions/online_softmax.py by `make exercises`. Fill in the parts marked TODO.
# Your edits are safe: the generator never overwrites a file you have changed.
# Check your work: `tkcourse check online_softmax` in a shell, or tkcourse.check.run("online_softmax") in a notebook.
"""Lesson 05: softmax of rows of any length, streamed in blocks with the online normalizer.

Pass 1 reads a row block by block and keeps two numbers: the running max ``m`` and the running
sum ``l`` of ``exp(x - m)``. When a block raises the max, the sum so far is rescaled by
``exp(m_old - m_new)`` (Milakov and Gimelshein, "Online normalizer calculation for softmax",
arXiv:1805.02867). Pass 2 reads the row again and writes ``exp(x - m) / l``.

Traffic: read the (M, N) input, write the (M, N) output: ``2 * M * N`` elements at least
(2 bytes each in fp16: ``4 * M * N`` bytes). Pass 2 reads the input a second time; at speed that second read
comes from L2, not HBM, when the row was read a moment before.

This file is the lesson: one program per row, the two functions you write and their launcher.
The steps from correct to fast, each behind the same ``softmax(x, ...)``, are modules of the kernel
library (``solutions/kernels/``):

- ``online_softmax_split``: a long row split over several programs (``parts``), whose partial
  ``(m, l)`` pairs are combined, so that few long rows still fill the GPU;
- ``online_softmax_one_read``: each part read once and held in registers while the row's parts
  exchange their pairs, and a persistent grid for few long rows (GPU only; the course's benchmark,
  behind the lean launch of ``kernels/online_softmax.py``).

They use this file's ``online_stats``, ``write_softmax``, ``online_softmax_kernel``, ``step_states``
and ``reference``.
"""

import math

import torch
import triton
import triton.language as tl

from tkcourse.mode import INTERPRET

from exercises._checks import integer, power_of_two, validate


@triton.jit
def online_stats(
    x_row,  # pointer to the first element of the row
    start,  # first column to read
    end,  # one past the last column to read
    BLOCK: tl.constexpr,  # columns read per step; a power of two
    NUM_STAGES: tl.constexpr,  # blocks the loop loads ahead (1: none); ignored by the interpreter
):
    """Running max ``m`` and sum ``l`` of exp(x - m) over x_row[start:end], one block at a time."""
    # TODO: your code here
    # m = -inf and l = 0 as fp32 scalars (tl.full((), float("-inf"), tl.float32), tl.zeros((), tl.float32))
    # for block_start in tl.range(start, end, BLOCK, num_stages=NUM_STAGES):
    #     load the block's columns (mask cols < end, other=-inf) as fp32
    #     m_new = the larger of m and the block's max
    #     l = l * exp(m - m_new) + sum(exp(x - m_new)); while m_new is still -inf (a row that starts with -inf),
    #         subtract 0 in both exps in its place, so that l stays 0, not nan
    #     m = m_new (the true max, -inf while it is)
    pass
    return m, l


@triton.jit
def write_softmax(
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
    # TODO: your code here
    # for block_start in tl.range(start, end, BLOCK, num_stages=NUM_STAGES): load the block (masked) as fp32,
    # store exp(x - m) / l in out's dtype (out_row.dtype.element_ty), with the same mask
    pass


@triton.jit
def online_softmax_kernel(
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
    m, l = online_stats(x_row, 0, n_cols, BLOCK, NUM_STAGES)
    write_softmax(x_row, out_ptr + row * out_row_stride, 0, n_cols, m, l, BLOCK, NUM_STAGES)


#: GPU: bytes a program loads per step (4096 fp16 values: 32 a thread with NUM_WARPS = 4).
BLOCK_BYTES = 8 * 1024
#: GPU: warps a program, and (NUM_STAGES) blocks each loop loads ahead of the one it works on
#: (cp.async into shared memory; 1 is none). Each step is a load and two reductions, and the other
#: programs on an SM already keep loads in flight, so a prefetch costs about what it hides: 4 warps
#: and no prefetch beat 8 warps with prefetch on an H200 (``tkcourse/data/PROVENANCE.md``,
#: "Constants of lessons 02 and 05").
NUM_WARPS = 4
NUM_STAGES = 1
#: Interpreter: columns per step (each step costs the same Python time whatever its size).
INTERPRETER_BLOCK = 1024
#: ``softmax(x, block=...)`` takes powers of two up to this: a block of more columns only costs registers.
MAX_BLOCK = 1 << 16


def _block(n_cols: int, element_size: int) -> int:
    """Columns per step: INTERPRETER_BLOCK in the interpreter, BLOCK_BYTES of a row on a GPU, never
    more than the row (rounded up to a power of two, as tl.arange needs)."""
    if INTERPRET:
        return min(INTERPRETER_BLOCK, triton.next_power_of_2(n_cols))
    return min(BLOCK_BYTES // element_size, triton.next_power_of_2(n_cols))


def softmax(x: torch.Tensor, block: int | None = None) -> torch.Tensor:
    """Softmax over the last dim of a 2-D ``x``, rows of any length; a new tensor in x's dtype.

    One program per row runs both passes (``online_softmax_kernel``). Rows may be strided (read in
    place); columns must be contiguous, else x is copied first. ``block`` (a power of two) is the
    columns read per step; by default ``_block`` picks it for the mode.
    """
    validate(x, names=["x"], ndim=2)
    n_rows, n_cols = x.shape
    block = _block(n_cols, x.element_size()) if block is None else power_of_two("block", block, 1, MAX_BLOCK)
    if x.stride(1) != 1:
        x = x.contiguous()
    out = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    online_softmax_kernel[(n_rows,)](x, out, x.stride(0), out.stride(0), n_cols, BLOCK=block,
                                      NUM_STAGES=NUM_STAGES, num_warps=NUM_WARPS)
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
