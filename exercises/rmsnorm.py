# Exercise generated from solutions/rmsnorm.py by `make exercises`. Fill in the parts marked TODO.
# Your edits are safe: the generator never overwrites a file you have changed.
# Check your work: `tkcourse check rmsnorm` in a shell, or tkcourse.check.run("rmsnorm") in a notebook.
"""Lesson 09, part 1: RMSNorm fused with the residual add, one row of ``(..., H)`` per program.

``rmsnorm(x, w)[i, j] = x[i, j] / sqrt(mean_k x[i, k]**2 + eps) * w[j]`` (Zhang & Sennrich 2019,
"Root Mean Square Layer Normalization"): LayerNorm without the mean subtraction and the bias, the
norm of Llama, Mistral, Qwen and most decoder models since.

In a transformer block it always follows a residual add, ``h = x + residual; y = rmsnorm(h)``, and
the next block needs both ``y`` (its input) and ``h`` (the new residual stream). Fused, one program
reads a row of ``x`` and of ``residual`` once, writes the row of ``h`` and of ``y`` once:
``4 * rows * H`` elements (2 bytes each in fp16 or bf16), plus the weight (H elements, read from L2
by every program after the first). The unfused torch ops (``eager_rmsnorm``) move about 5x that in
fp16 (the tracer and ``count_eager`` measure both in notebook 09).

The sum is rounded to x's dtype, stored, and that rounded sum is what is normalized, so ``y`` is
exactly ``rmsnorm`` of the ``h`` returned (what the unfused ops compute, and what vLLM's
``fused_add_rms_norm`` does). The statistics are fp32: a fp16 sum of squares overflows at
65504 (a row of 4096 values of size 4 is already there).

Used by the fast path (``solutions/kernels/rmsnorm.py``, the same kernel behind a lean launch): ``rmsnorm_kernel``,
``num_warps`` and ``as_rows``, and ``rmsnorm`` for the calls it does not take.
"""

import torch
import triton
import triton.language as tl

from exercises._checks import real, validate

#: Longest row ``rmsnorm`` takes: the row lives in one program's registers, as in lesson 02's
#: softmax (32768 fp32 values over 16 warps is 64 registers a thread). Hidden sizes of today's
#: models are 2048 to 16384.
MAX_COLS = 32768


@triton.jit
def rmsnorm_kernel(
    x_ptr,  # pointer to x[0, 0]
    res_ptr,  # pointer to residual[0, 0] (unused without the residual)
    w_ptr,  # pointer to weight[0], H contiguous elements
    y_ptr,  # pointer to y[0, 0], the normalized output
    sum_ptr,  # pointer to h[0, 0] = (x + residual)[0, 0] (unused without the residual)
    x_row_stride,  # elements between the starts of two rows of x (its columns are contiguous)
    res_row_stride,  # elements between the starts of two rows of residual
    out_row_stride,  # elements between the starts of two rows of y and of h (both contiguous, (rows, H))
    n_cols,  # H, the length the mean is taken over; n_cols <= BLOCK
    eps,  # added to the mean of squares, inside the square root
    HAS_RESIDUAL: tl.constexpr,  # add residual to x first, and store the sum
    BLOCK: tl.constexpr,  # triton.next_power_of_2(n_cols): the whole row is one block
):
    # TODO: your code here
    # 1. row = tl.program_id(0) as int64; cols = tl.arange(0, BLOCK); mask = cols < n_cols
    # 2. load x's row (x_ptr + row * x_row_stride + cols) with other=0.0
    # 3. if HAS_RESIDUAL: load residual's row, add it to x in fp32, round the sum to
    #    sum_ptr.dtype.element_ty and store it at sum_ptr + row * out_row_stride + cols;
    #    the rounded sum is what you normalize
    # 4. in fp32: mean of squares over the n_cols real values, rstd = tl.rsqrt(mean + eps)
    # 5. y = x * rstd * weight (load weight at w_ptr + cols), stored in y's dtype (y_ptr.dtype.element_ty)
    pass


def num_warps(BLOCK: int) -> int:
    """4 warps up to 2048 columns, 8 up to 4096, 16 above: at most 16 fp32 values a thread for rows
    up to 8192, and enough bytes in flight per SM (the choice of Liger-Kernel's ``calculate_settings``
    and of Triton's tutorial 05 layer norm)."""
    return 4 if BLOCK <= 2048 else 8 if BLOCK <= 4096 else 16


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, residual: torch.Tensor | None = None):
    """RMSNorm over the last dim of ``x`` (..., H), scaled by ``weight`` (H,).

    Returns ``y`` (x's shape and dtype), or ``(y, x + residual)`` when ``residual`` (x's shape and
    dtype) is given: both new contiguous tensors, the inputs are only read. Statistics in fp32.
    Rows may be strided (``x[::2]`` is read in place); columns must be contiguous, else x is copied.
    """
    validate(x, names=["x"])
    if x.dim() < 1:
        raise ValueError("x must have at least one dimension, the one RMSNorm normalizes over (H)")
    H = x.shape[-1]
    validate(x, weight, names=["x", "weight"], same_dtype=False)
    if weight.dim() != 1 or weight.shape[0] != H:
        raise ValueError(f"weight must be 1-D of length H = x.shape[-1] = {H}, got shape {tuple(weight.shape)}")
    if weight.dtype not in (x.dtype, torch.float32):
        raise ValueError(f"weight has dtype {weight.dtype}: give it x's dtype ({x.dtype}) or torch.float32")
    eps = real("eps", eps)
    if eps <= 0:
        raise ValueError(f"eps must be > 0 (it keeps a row of zeros from dividing by 0), got {eps}")
    if H > MAX_COLS:
        raise ValueError(f"x has rows of {H} values, more than MAX_COLS={MAX_COLS}: a whole row must fit in "
                         "one program's registers here")
    if residual is not None:
        validate(x, residual, names=["x", "residual"], same_shape=True)
    x2 = as_rows(x)
    r2 = as_rows(residual) if residual is not None else x2
    weight = weight.contiguous()
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    h = torch.empty(x.shape, dtype=x.dtype, device=x.device) if residual is not None else y
    # TODO: your code here
    # BLOCK: the smallest power of two >= H (triton.next_power_of_2)
    BLOCK = None
    n_rows = x2.shape[0]
    rmsnorm_kernel[(n_rows,)](x2, r2, weight, y, h, x2.stride(0), r2.stride(0), H, H, eps,
                               HAS_RESIDUAL=residual is not None, BLOCK=BLOCK, num_warps=num_warps(BLOCK))
    return y if residual is None else (y, h)


def as_rows(t: torch.Tensor) -> torch.Tensor:
    """``t`` as a (rows, H) view with contiguous columns and one row stride, copied only if it has none."""
    if t.stride(-1) != 1:
        t = t.contiguous()
    try:
        return t.view(-1, t.shape[-1])
    except RuntimeError:  # leading dims that no single row stride describes
        return t.contiguous().view(-1, t.shape[-1])


def eager_rmsnorm(x, weight, eps=1e-6, residual=None):
    """The unfused torch ops (Hugging Face's ``LlamaRMSNorm`` after the block's residual add), each
    a pass over HBM: add (read 2, write 1 x (rows, H) in x's dtype), then in fp32 the square, the mean,
    the scale by rstd, and back to x's dtype times the weight."""
    h = x + residual if residual is not None else x
    hf = h.float()
    var = hf.pow(2).mean(-1, keepdim=True)
    y = weight * (hf * torch.rsqrt(var + eps)).to(x.dtype)
    return y.to(x.dtype) if residual is None else (y.to(x.dtype), h)


def reference(x, weight, eps=1e-6, residual=None):
    """What ``rmsnorm`` must return: fp32 maths on the sum rounded to x's dtype, outputs in x's dtype."""
    h = (x.float() + residual.float()).to(x.dtype) if residual is not None else x
    hf = h.float()
    y = (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)
    return y if residual is None else (y, h)
