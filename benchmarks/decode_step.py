"""Benchmark cases of the small kernels a decode step calls, each against the torch op a model writes.

At decode sizes these kernels move kilobytes to a few megabytes: the GPU runs each in a few
microseconds, about what the host takes to launch it, so a step of them is bound by the host (the
``host_us`` column) unless it is replayed from a CUDA graph (``graph_ms``). Each row pairs the course's
kernel behind a lean launch (provider ``triton``) with what a Llama-shaped model runs eagerly
(``torch``); the sizes are Llama 3 8B's (H = 4096, Hq = 32, Hkv = 8, D = 128, F = 14336, a vocabulary
of 128256) at batch 1 and 8, one token a sequence.

Kernels (the ``kernel`` column; ``decode_`` keeps these rows apart from the lessons' large shapes):

* ``decode_rmsnorm``: RMSNorm after the residual add, ``(y, x + r)`` for ``(rows, H)`` (lesson 09's kernel,
  ``solutions.kernels.rmsnorm``) against the add then ``F.rms_norm`` (torch 2.4 and later; Hugging Face's
  ``LlamaRMSNorm`` ops before). Bytes: read x, r, the weight; write y and the sum.
* ``decode_softmax``: ``(4096, 1024)`` fp16, attention-score-sized rows (lesson 02's kernel), and one fp32
  row of the vocabulary, the sampling step's softmax over the logits (lesson 05's online softmax: a row
  longer than the fused kernel holds), against ``torch.softmax``. Bytes: read and write x.
* ``decode_rope``: RoPE on q ``(B, 1, 32, 128)`` and k ``(B, 1, 8, 128)`` (``solutions.kernels.rope``),
  returning new tensors (``triton``) and in place (``triton-inplace``), against Hugging Face's
  ``apply_rotary_pos_emb`` on cos/sin already gathered at the positions (what each layer runs; the model
  gathers them once a forward pass). Bytes: read and write q and k, plus the rows of the tables.
* ``decode_swiglu``: ``silu(gate) * up`` of a fused ``(rows, 2F)`` projection output
  (``solutions.kernels.swiglu``) against ``F.silu(g) * u`` on its halves. Bytes: read 2F, write F a row.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tkcourse.bench import Case

H, HQ, HKV, D, FF, VOCAB = 4096, 32, 8, 128, 14336, 128256
BATCHES = (1, 8)
DTYPES = (torch.float16, torch.bfloat16)
EPS = 1e-6
MAX_POS = 8192  # rows of the RoPE tables
POSITION = 1000  # where the decoded tokens sit (sequence b at POSITION + b)


def _name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def rmsnorm_cases(rmsnorm, rows: int, dtype, device="cuda"):
    """RMSNorm + residual at ``(rows, H)``: the lean kernel, then the add and torch's norm."""
    x = torch.randn(rows, H, dtype=dtype, device=device)
    r = torch.randn(rows, H, dtype=dtype, device=device)
    w = 1 + 0.1 * torch.randn(H, dtype=dtype, device=device)
    moved, shape = (4 * rows * H + H) * x.element_size(), f"{rows}x{H}"
    rms_norm = getattr(F, "rms_norm", None)
    if rms_norm is not None:
        def peer():
            h = x + r
            return rms_norm(h, (H,), w, EPS), h
    else:
        from solutions.rmsnorm import eager_rmsnorm

        def peer():
            return eager_rmsnorm(x, w, EPS, residual=r)
    return [Case("decode_rmsnorm", "triton", shape, _name(dtype), lambda: rmsnorm(x, w, EPS, residual=r), bytes=moved),
            Case("decode_rmsnorm", "torch", shape, _name(dtype), peer, bytes=moved)]


def softmax_cases(softmax, rows: int, cols: int, dtype, device="cuda"):
    """Softmax over the last dim of ``(rows, cols)``: ``softmax`` against ``torch.softmax``."""
    x = torch.randn(rows, cols, dtype=dtype, device=device)
    moved, shape = 2 * x.numel() * x.element_size(), f"{rows}x{cols}"
    return [Case("decode_softmax", "triton", shape, _name(dtype), lambda: softmax(x), bytes=moved),
            Case("decode_softmax", "torch", shape, _name(dtype), lambda: torch.softmax(x, dim=-1), bytes=moved)]


def rope_inputs(B: int, dtype, device="cuda", T: int = 1):
    """q ``(B, T, HQ, D)``, k ``(B, T, HKV, D)``, fp32 tables ``(MAX_POS, D/2)`` and positions ``(B, T)``."""
    from solutions.kernels.rope import rope_tables

    q = torch.randn(B, T, HQ, D, dtype=dtype, device=device)
    k = torch.randn(B, T, HKV, D, dtype=dtype, device=device)
    cos, sin = rope_tables(MAX_POS, D, device=device)
    positions = (POSITION + torch.arange(B, device=device)[:, None] + torch.arange(T, device=device)[None]).long()
    return q, k, cos, sin, positions


def rope_cases(rope, B: int, dtype, device="cuda"):
    """RoPE on one token of q and k a sequence: new tensors, in place, and Hugging Face's formula."""
    from solutions.kernels.rope import hf_rope

    q, k, cos, sin, positions = rope_inputs(B, dtype, device)
    c, s = cos[positions], sin[positions]  # what the model's rotary module hands every layer: (B, 1, 1, D)
    c, s = torch.cat([c, c], -1)[:, :, None].to(dtype), torch.cat([s, s], -1)[:, :, None].to(dtype)
    qi, ki = q.clone(), k.clone()
    moved = 2 * (q.numel() + k.numel()) * q.element_size() + 2 * positions.numel() * (D // 2) * cos.element_size()
    shape = f"B{B}-Hq{HQ}-Hkv{HKV}-D{D}"
    return [Case("decode_rope", "triton", shape, _name(dtype), lambda: rope(q, k, cos, sin, positions), bytes=moved),
            Case("decode_rope", "triton-inplace", shape, _name(dtype),
                 lambda: rope(qi, ki, cos, sin, positions, inplace=True), bytes=moved),
            Case("decode_rope", "torch", shape, _name(dtype), lambda: hf_rope(q, k, c, s), bytes=moved)]


def swiglu_cases(swiglu, rows: int, dtype, device="cuda"):
    """``silu(gate) * up`` of a fused ``(rows, 2F)`` output: the kernel against the two eager ops."""
    from solutions.kernels.swiglu import eager_swiglu

    gate_up = torch.randn(rows, 2 * FF, dtype=dtype, device=device)
    moved, shape = 3 * rows * FF * gate_up.element_size(), f"{rows}x{FF}"
    return [Case("decode_swiglu", "triton", shape, _name(dtype), lambda: swiglu(gate_up), bytes=moved),
            Case("decode_swiglu", "torch", shape, _name(dtype), lambda: eager_swiglu(gate_up), bytes=moved)]


def cases(device="cuda"):
    """Every kernel at its decode sizes, the course's fast path first in each row."""
    from solutions.kernels.online_softmax import softmax as online
    from solutions.kernels.rmsnorm import rmsnorm
    from solutions.kernels.rope import rope
    from solutions.kernels.softmax import softmax
    from solutions.kernels.swiglu import swiglu

    for dtype in DTYPES:
        for rows in BATCHES:
            yield from rmsnorm_cases(rmsnorm, rows, dtype, device)
    yield from softmax_cases(softmax, 4096, 1024, torch.float16, device)
    yield from softmax_cases(online, 1, VOCAB, torch.float32, device)
    for dtype in DTYPES:
        for B in BATCHES:
            yield from rope_cases(rope, B, dtype, device)
    for dtype in DTYPES:
        for rows in BATCHES:
            yield from swiglu_cases(swiglu, rows, dtype, device)
