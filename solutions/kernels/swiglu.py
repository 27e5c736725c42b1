"""The SwiGLU product ``silu(gate) * up`` in one launch, behind a lean launch.

SwiGLU (Shazeer 2020, "GLU Variants Improve Transformer") is the MLP of Llama, Mistral, Qwen and most
decoder models since: ``down(silu(x @ W_gate) * (x @ W_up))``, with ``silu(g) = g * sigmoid(g)``
(Elfwing et al. 2017; Ramachandran et al. 2017, "Swish"). The two projections are usually one matmul
whose output ``(..., 2F)`` holds the gate in its first half and up in its second (vLLM's
``MergedColumnParallelLinear``, the fused ``gate_up_proj`` of many checkpoints); what is left between
it and the down projection is this elementwise product.

Eager torch runs it as two kernels, ``F.silu(g)`` then ``* u``, with the intermediate written to and
read back from memory; here it is one: a program reads ``BLOCK`` columns of one row of gate and of up
and writes ``BLOCK`` of the output, ``3 * rows * F`` elements in all (the minimum). The product is
taken in fp32 and rounded once.

``swiglu(gate_up)`` splits a ``(..., 2F)`` tensor in halves; ``swiglu(gate, up)`` takes two ``(..., F)``
tensors. Rows may be strided (the halves of a fused output are: row stride 2F); columns must be
contiguous, else the input is copied. The output is a new contiguous ``(..., F)`` tensor.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from .._checks import validate
from .lean import Lean, hooks_on, pdl_meta

__all__ = ["swiglu", "swiglu_reference", "swiglu_kernel", "eager_swiglu", "SWIGLU_PDL", "LEANS", "forget"]


@triton.jit
def swiglu_kernel(
    gate_ptr,  # pointer to gate[0, 0], (rows, F), columns contiguous
    up_ptr,  # pointer to up[0, 0], (rows, F), columns contiguous
    out_ptr,  # pointer to out[0, 0], (rows, F)
    gate_row_stride,  # elements between two rows of gate (2F for the first half of a fused output)
    up_row_stride,  # elements between two rows of up
    out_row_stride,  # elements between two rows of out
    n_cols,  # F
    BLOCK: tl.constexpr,  # columns a program takes
    PDL: tl.constexpr = False,  # launched with programmatic dependent launch (``lean.pdl_meta``)
):
    if PDL:
        gdc_wait()  # the inputs may be the previous kernel's output
        gdc_launch_dependents()  # short programs: the next kernel may start once all of these have
    row = tl.program_id(0).to(tl.int64)  # row * stride can pass 2**31 in a long prefill
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    g = tl.load(gate_ptr + row * gate_row_stride + cols, mask=mask, other=0.0).to(tl.float32)  # read BLOCK
    u = tl.load(up_ptr + row * up_row_stride + cols, mask=mask, other=0.0).to(tl.float32)  # read BLOCK
    y = g * tl.sigmoid(g) * u  # silu(g) * u
    tl.store(out_ptr + row * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)  # write BLOCK


#: Columns a program takes: 4 warps of 8 values a thread, a 16-byte load each in fp16. A decode step's
#: F = 14336 (Llama 3 8B) is then 14 programs a row: enough rows in flight at batch 8, and at batch 1 the
#: kernel is as short as a launch allows anyway.
BLOCK = 1024
NUM_WARPS = 4


def swiglu_reference(gate, up=None):
    """What ``swiglu`` must return: ``silu(gate) * up`` in fp32, rounded once to the input's dtype."""
    if up is None:
        gate, up = gate.chunk(2, dim=-1)
    return (F.silu(gate.float()) * up.float()).to(gate.dtype)


def eager_swiglu(gate, up=None):
    """The eager ops a model writes (Hugging Face's ``LlamaMLP``: ``act_fn(gate_proj(x)) * up_proj(x)``),
    after a fused projection's output is split: two kernels in the input's dtype."""
    if up is None:
        gate, up = gate.chunk(2, dim=-1)
    return F.silu(gate) * up


#: Launch with programmatic dependent launch where the GPU has it (``lean.pdl_meta``). Read when a key's
#: entry is made (``forget()`` after changing it).
SWIGLU_PDL = True
_SWIGLU = Lean(swiglu_kernel)
_ENTRIES = _SWIGLU.entries  # the table itself: Lean only ever clears it


def swiglu(gate, up=None):
    """``silu(gate) * up``; with ``up`` None, ``gate`` is a fused ``(..., 2F)`` projection output whose
    halves are gate and up. Returns a new contiguous ``(..., F)`` tensor in the input's dtype."""
    try:  # what the compile depends on (``lean.tensor_key`` of each tensor, written out in one tuple)
        if up is None:
            key = (gate.dtype, gate.shape, gate.stride(), gate.data_ptr() & 15, gate.get_device())
        else:
            key = (gate.dtype, gate.shape, gate.stride(), gate.data_ptr() & 15, gate.get_device(),
                   up.dtype, up.shape, up.stride(), up.data_ptr() & 15, up.get_device())
    except AttributeError:  # not tensors: the checks say which
        _check(gate, up)
        raise
    e = _ENTRIES.get(key)
    if e is None or hooks_on():  # a launch hook (a profiler) sees launches through kernel[grid]
        return _first(key, gate, up)
    copy, like, up_offset = e.info
    if copy:
        gate, up = _rows(gate, up)
    out = torch.empty_like(like)  # a new contiguous (..., F) tensor
    if e.lean:  # addresses as ints; the up half of a fused input is an offset from its start
        g = gate.data_ptr()
        e(g, g + up_offset if up is None else up.data_ptr(), out.data_ptr())
    else:
        g, u = _halves(gate, up)
        e(g, u, out)
    return out


def _check(gate, up):
    """The checks of a key's first call: ValueError naming the argument."""
    if up is None:
        validate(gate, names=["gate_up"])
        if gate.dim() < 1 or gate.shape[-1] % 2:
            raise ValueError(f"gate_up must be (..., 2F), gate then up: its last dim must be even, "
                             f"got shape {tuple(gate.shape)}; or pass gate and up as two tensors")
    else:
        validate(gate, up, names=["gate", "up"], same_shape=True)
        if gate.dim() < 1:
            raise ValueError("gate must have at least one dimension (F)")


def _rows(gate, up):
    """Inputs whose rows no single stride describes (or whose columns are strided), copied."""
    return gate.contiguous(), None if up is None else up.contiguous()


def _as_rows(t):
    """``t`` as ``(rows, C)`` with contiguous columns and one row stride, or None if it has none."""
    if t.stride(-1) != 1:
        return None
    try:
        return t.view(-1, t.shape[-1])
    except RuntimeError:
        return None


def _halves(gate, up):
    """``(gate, up)`` as ``(rows, F)`` views (of one fused tensor, or of two)."""
    if up is None:
        g2 = gate.view(-1, gate.shape[-1])
        n = g2.shape[1] // 2
        return g2[:, :n], g2[:, n:]
    return gate.view(-1, gate.shape[-1]), up.view(-1, up.shape[-1])


def _first(key, gate, up):
    _check(gate, up)
    copy = _as_rows(gate) is None or (up is not None and _as_rows(up) is None)
    if copy:
        gate, up = _rows(gate, up)
    g, u = _halves(gate, up)
    rows, n = g.shape
    like = torch.empty((), dtype=gate.dtype, device=gate.device).expand(*gate.shape[:-1], n)
    out = torch.empty_like(like)
    up_offset = n * gate.element_size()  # bytes from gate_up[0, 0] to its up half, up[0, 0]
    _SWIGLU.first(key, (g, u, out), (g.stride(0), u.stride(0), n, n), (rows, triton.cdiv(n, BLOCK)),
                  dict(BLOCK=BLOCK, num_warps=NUM_WARPS, **pdl_meta(gate.device, SWIGLU_PDL)), info=(copy, like, up_offset))
    return out


#: This module's lean launcher, for tests and lesson 08 (entries, compiles).
LEANS = dict(swiglu=_SWIGLU)


def forget():
    """Drop every kept entry: the next call of each key is a first call again."""
    _SWIGLU.entries.clear()
