"""Inputs that expose a kernel's mistakes, and poisoned allocations.

Outputs that the learner's launcher allocates with ``torch.empty``/``empty_like``/``new_empty``/
``empty_strided`` come back filled with NaN (poison), followed by a run of canary values: a value
still NaN after the call was never written; a changed canary is a store past the end of the tensor.
Inputs are followed by a run of ``INPUT_PAD`` (``padded``), and strided inputs (``strided``,
``row_padded``, ``transposed``, ``sliced_rows``) hold ``INPUT_PAD`` in their gaps, so an unmasked,
shifted or contiguous-as-if load reads a loud, recognisable value instead of someone else's memory.
``random_sizes`` gives seeded sizes that defeat a grid or BLOCK hard-coded to the fixed ones.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
from dataclasses import dataclass

import torch

CANARY = 31328.0  # exactly representable in fp16, bf16 and fp32; unlikely as a result

INPUT_PAD = -31328.0  # after every input; two of them still fit in fp16


def _pad_for(numel: int) -> int:
    return min(max(4096, numel), 1 << 20)


def padded(t: torch.Tensor) -> torch.Tensor:
    """A contiguous copy of ``t`` followed in memory by a run of ``INPUT_PAD``."""
    flat = t.contiguous().reshape(-1)
    buf = torch.full((flat.numel() + _pad_for(flat.numel()),), INPUT_PAD, dtype=t.dtype, device=t.device)
    buf[: flat.numel()] = flat
    return buf[: flat.numel()].view(t.shape)


@dataclass
class _Alloc:
    buf: torch.Tensor
    numel: int
    canary: float = CANARY  # what fills the buffer past numel (0 for integer scratch buffers)

    def canary_intact(self) -> bool:
        return self.first_overwrite() is None

    def first_overwrite(self) -> int | None:
        bad = (self.buf[self.numel:] != self.canary).nonzero()
        return int(bad[0]) if len(bad) else None


def _poison_value(dtype):
    return float("nan") if dtype.is_floating_point else torch.iinfo(dtype).max


@contextlib.contextmanager
def poisoned_allocations():
    """Within the block, uninitialised allocations are NaN-filled and followed by canaries."""
    allocs: list[_Alloc] = []
    real = {"empty": torch.empty, "empty_like": torch.empty_like, "empty_strided": torch.empty_strided}
    real_new_empty = torch.Tensor.new_empty

    def make(shape, dtype=None, device=None):
        dtype = dtype or torch.get_default_dtype()
        shape = tuple(int(s) for s in (shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)) else shape))
        numel = math.prod(shape)
        if numel == 0:  # nothing to poison; such tensors are often re-pointed with set_ (the tracer does)
            return real["empty"](shape, dtype=dtype, device=device)
        buf = real["empty"](numel + _pad_for(numel), dtype=dtype, device=device)
        canary = CANARY if dtype.is_floating_point else 0
        buf[:numel] = _poison_value(dtype)
        buf[numel:] = canary
        allocs.append(_Alloc(buf, numel, canary))
        return buf[:numel].view(shape)

    def empty(*shape, dtype=None, device=None, **_):
        return make(shape, dtype, device)

    def empty_like(t, *, dtype=None, device=None, **_):
        return make(tuple(t.shape), dtype or t.dtype, device or t.device)

    def empty_strided(size, stride, *, dtype=None, device=None, **_):
        return make(tuple(size), dtype, device).as_strided(size, stride) if _dense(size, stride) else \
            real["empty_strided"](size, stride, dtype=dtype, device=device)

    def new_empty(self, *size, dtype=None, device=None, **_):
        return make(size, dtype or self.dtype, device or self.device)

    torch.empty, torch.empty_like, torch.empty_strided = empty, empty_like, empty_strided
    torch.Tensor.new_empty = new_empty
    try:
        yield allocs
    finally:
        torch.empty, torch.empty_like, torch.empty_strided = real["empty"], real["empty_like"], real["empty_strided"]
        torch.Tensor.new_empty = real_new_empty


def _dense(size, stride) -> bool:
    return sorted(s for s, n in zip(stride, size) if n > 1) == sorted(
        math.prod(size[i + 1:]) for i, n in enumerate(size) if n > 1) and len(size) > 0


def _filled_like(numel: int, t: torch.Tensor, fill: float) -> torch.Tensor:
    return torch.full((numel,), fill, dtype=t.dtype, device=t.device)


def strided(t: torch.Tensor, step: int = 2, fill: float = INPUT_PAD) -> torch.Tensor:
    """A 1-D view of ``t``'s values with stride ``step`` (``t`` lives at every step-th element of a
    bigger buffer whose other elements hold ``fill``): read as if contiguous, it gives loud values."""
    flat = t.reshape(-1)
    buf = _filled_like(flat.numel() * step + _pad_for(flat.numel()), flat, fill)
    view = buf[: flat.numel() * step: step]
    view.copy_(flat)
    return view


def row_padded(t: torch.Tensor, pad: int = 7, fill: float = INPUT_PAD) -> torch.Tensor:
    """A 2-D view of ``t``'s values whose rows are ``pad`` elements further apart than its width
    (row stride ``cols + pad``; the gaps hold ``fill``), as a slice ``big[:, :cols]`` is."""
    rows, cols = t.shape
    buf = _filled_like(rows * (cols + pad) + _pad_for(rows * cols), t, fill)
    view = buf[: rows * (cols + pad)].view(rows, cols + pad)[:, :cols]
    view.copy_(t)
    return view


def sliced_rows(t: torch.Tensor, step: int = 2, fill: float = INPUT_PAD) -> torch.Tensor:
    """A 2-D view of ``t``'s values that is every ``step``-th row of a bigger tensor (``big[::step]``)."""
    rows, cols = t.shape
    buf = _filled_like(rows * step * cols + _pad_for(rows * cols), t, fill)
    view = buf[: rows * step * cols].view(rows * step, cols)[::step]
    view.copy_(t)
    return view


def transposed(t: torch.Tensor) -> torch.Tensor:
    """``t``'s values stored column-major (``t.t().contiguous().t()``): stride (1, rows)."""
    return padded(t.t().contiguous()).t()


def quarters(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Each tensor rounded to multiples of 1/4. A case that needs dot products far below zero sets one large
    term and cancels it with the rest; on quarters every product and partial sum of such a dot is exact in
    fp32, so it cancels the same in any summation order and a right kernel meets a tight tolerance."""
    return tuple(t.mul(4).round().div(4) for t in tensors)


def layout_of(t: torch.Tensor) -> str:
    """A few words for a label: "contiguous", "stride (1, 64)", ..."""
    return "contiguous" if t.is_contiguous() else f"stride {tuple(t.stride())}"


def grading_seed() -> int:
    """The seed of the random sizes: ``TKCOURSE_CHECK_SEED`` if set, else a fixed one (so a report
    reproduces; the seed is in every label that uses it)."""
    with contextlib.suppress(ValueError):
        return int(os.environ.get("TKCOURSE_CHECK_SEED", "17"))
    return 17


def random_sizes(count: int, lo: int, hi: int, seed: int | None = None) -> tuple[int, list[int]]:
    """``(seed, sizes)``: ``count`` sizes in ``[lo, hi]`` from ``seed`` (``grading_seed()`` by default),
    none a power of two above 2. The first lies in the top quarter, ``[hi / 4, hi]`` (past any grid or
    BLOCK hard-coded to fit smaller sizes); the others are log-uniform, one in each equal slice of
    ``[lo, hi / 4]`` on a log scale, so they span the orders of magnitude whatever the seed.
    """
    seed = grading_seed() if seed is None else seed
    rng = random.Random(seed)
    top = max(lo, hi // 4)
    edges = [math.log(lo) + (math.log(top) - math.log(lo)) * i / max(1, count - 1) for i in range(count)]
    spans = [(math.log(top), math.log(hi))] + list(zip(edges[:-1], edges[1:]))
    out = []
    for a, b in spans[:count]:
        n = min(max(int(round(math.exp(rng.uniform(a, b)))), lo), hi)
        if n & (n - 1) == 0 and n > 2:
            n += 1 if n + 1 <= hi else -1
        out.append(n)
    return seed, out


def seeded(label: str, seed: int) -> str:
    """A label that says how to reproduce a random case."""
    return f"{label} (random, seed {seed}: TKCOURSE_CHECK_SEED={seed})"
