"""Benchmark cases of lesson 10: weight-only int4 matmul against cuBLAS on 16-bit weights and torch's tinygemm.

Shapes: the (N, K) of a Llama-3-8B/70B-sized layer (8192 x 8192, the MLP's 14336 x 4096 and
4096 x 14336, 70B's 28672 x 8192), each at M = 1, 4 and 16 rows (decode at batch 1 to 16) and 128
(a prefill chunk), fp16 and bf16, group 128. The shape string is ``M{M}-N{N}-K{K}``.

Bytes of a row (every provider's count is the int4 path's minimum, so rates compare): the packed weight
(N * K / 2), its scales (N * K / 128 in x's dtype), x and y. Providers:

* ``triton``: ``solutions.kernels.int4_matmul.matmul``, the course's fast path;
* ``cublas``: ``x @ w.T`` on the 16-bit weight (what a model without quantization runs);
* ``tinygemm``: ``torch.ops.aten._weight_int4pack_mm`` on the same int4 values (torch's int4 kernel,
  behind torchao's and gpt-fast's int4 weight-only; it takes bf16 only, so fp16 goes through casts);
* ``copy``: ``dst.copy_(src)`` of a buffer half the size of the int4 path's minimum traffic (the packed
  weight, its scales, x and y), so it reads and writes as many bytes as that: the floor at this size, in
  the same run (replayed from a CUDA graph, by a copy kernel: ``tkcourse.bench.copy_case``).
"""

from __future__ import annotations

import torch

from tkcourse.bench import Case, copy_case

WEIGHTS = [(8192, 8192), (14336, 4096), (4096, 14336), (28672, 8192)]
MS = [1, 4, 16, 128]
DTYPES = [torch.float16, torch.bfloat16]
GROUP = 128


def int4_bytes(M: int, N: int, K: int, element_size: int, group_size: int = GROUP) -> int:
    """The packed weight, its scales, x and y: what any int4 weight-only matmul must move."""
    return N * K // 2 + N * (K // group_size) * element_size + (M * K + M * N) * element_size


def tinygemm(w_int: torch.Tensor, scales: torch.Tensor, group_size: int = GROUP):
    """``fn(x)``: torch's tinygemm on the int4 values ``w_int`` (N, K) in -8..7 and their ``scales``, or None
    where this torch lacks it. Its format: bytes ``(u[2i] << 4) | u[2i+1]`` of ``u = q + 8`` (N, K/2),
    repacked by ``_convert_weight_to_int4pack``; scales and zeros (K/group, N, 2) in bf16 with
    ``w = (u - 8) * scale + zero``, so zero = 0 here."""
    aten = torch.ops.aten
    if not (hasattr(aten, "_convert_weight_to_int4pack") and hasattr(aten, "_weight_int4pack_mm")):
        return None
    u = (w_int.to(torch.int32) + 8).to(torch.uint8)
    packed = (u[:, ::2] << 4) | u[:, 1::2]
    wp = aten._convert_weight_to_int4pack(packed.contiguous(), 8)
    sz = torch.stack([scales.T.to(torch.bfloat16), torch.zeros_like(scales.T, dtype=torch.bfloat16)], -1).contiguous()

    def fn(x):
        return aten._weight_int4pack_mm(x if x.dtype == torch.bfloat16 else x.to(torch.bfloat16), wp, group_size,
                                        sz).to(x.dtype)
    return fn


def shape_cases(matmul, M, N, K, dtype, device="cuda"):
    """One shape's cases: the course's ``matmul`` as triton, cuBLAS, tinygemm (where torch has it), the copy."""
    from solutions.int4_matmul import quantize, unpack

    g = torch.Generator(device="cpu").manual_seed(0)
    w = (torch.randn(N, K, generator=g) * 0.02).to(dtype).to(device)
    x = torch.randn(M, K, generator=g).to(dtype).to(device)
    packed, scales = quantize(w, GROUP)
    moved = int4_bytes(M, N, K, x.element_size())
    shape, name = f"M{M}-N{N}-K{K}", str(dtype).replace("torch.", "")
    yield Case("int4_matmul", "triton", shape, name, lambda: matmul(x, packed, scales, GROUP), bytes=moved)
    yield Case("int4_matmul", "cublas", shape, name, lambda: x @ w.T, bytes=moved)
    tg = tinygemm(unpack(packed), scales)
    if tg is not None:
        yield Case("int4_matmul", "tinygemm", shape, name, lambda: tg(x), bytes=moved)
    src = torch.empty(moved // 2, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    yield copy_case("int4_matmul", shape, name, src, dst)


def cases(matmul=None):
    """Every weight shape, M and dtype; ``matmul`` defaults to the fast path."""
    if matmul is None:
        from solutions.kernels.int4_matmul import matmul
    for dtype in DTYPES:
        for N, K in WEIGHTS:
            for M in MS:
                yield from shape_cases(matmul, M, N, K, dtype)
