"""Outputs that share memory with an input, and inputs that a call changed."""

from __future__ import annotations

import inspect

import torch

from .reports import Case


def storage_overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors share any byte of memory (same storage, overlapping extents)."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.device != b.device:
        return False
    if a.numel() == 0 or b.numel() == 0:
        return False
    if a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        return False

    def extent(t):
        lo = t.data_ptr()
        hi = lo + (sum((n - 1) * abs(st) for n, st in zip(t.shape, t.stride())) + 1) * t.element_size()
        return lo, hi

    (a0, a1), (b0, b1) = extent(a), extent(b)
    return a0 < b1 and b0 < a1


def alias_case(label: str, out, inputs: dict, fn_name: str = "function") -> Case | None:
    """A failing case when the output shares memory with an input (the result written over it), else None."""
    if not isinstance(out, torch.Tensor):
        return None
    for name, t in inputs.items():
        if not isinstance(t, torch.Tensor):
            continue
        if out is t or (out.data_ptr() == t.data_ptr() and out.shape == t.shape and out.stride() == t.stride()):
            return Case(label, "fail", f"the tensor returned is {name} itself",
                        f"your {fn_name} returned {name} itself: the result overwrote an input. Allocate a new "
                        f"output (torch.empty_like({name}), or torch.empty(shape, dtype=..., device=...)) and "
                        "store the result there")
        if storage_overlap(out, t):
            return Case(label, "fail", f"the tensor returned shares memory with {name}",
                        f"your {fn_name} returned a view of {name}'s memory: the result overwrote (part of) an "
                        f"input. Allocate a new output (torch.empty_like({name}) or torch.empty(...)); a view, "
                        "reshape or slice of an input is not a new tensor")
    return None


def _same(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.dtype.is_floating_point:
        return (a == b) | (torch.isnan(a) & torch.isnan(b))
    return a == b


class Snapshot:
    """Copies of the inputs before a call; ``case(label)`` fails when the call changed one of them."""

    def __init__(self, inputs: dict):
        self.inputs = {k: v for k, v in inputs.items() if isinstance(v, torch.Tensor)}
        self.before = {k: v.detach().clone() for k, v in self.inputs.items()}

    def changed(self) -> list[tuple[str, int, int]]:
        """(name, how many elements changed, their count) for every input the call changed."""
        out = []
        for k, t in self.inputs.items():
            if t.shape != self.before[k].shape or t.dtype != self.before[k].dtype:
                out.append((k, t.numel(), t.numel()))
                continue
            diff = ~_same(t.detach(), self.before[k])
            if diff.any():
                out.append((k, int(diff.sum()), diff.numel()))
        return out

    def case(self, label: str, fn_name: str = "function") -> Case | None:
        ch = self.changed()
        if not ch:
            return None
        name, n_bad, n = ch[0]
        return Case(label, "fail", f"after the call, {n_bad} of {n} elements of the input {name} had changed",
                    f"your {fn_name} changed its input {name}: a kernel must only read its inputs. Store results "
                    f"into a new output (torch.empty_like({name})), never into {name}, and do not update "
                    f"{name} in place (x += ..., x.copy_(...), x.sub_(...))")


def input_names(fn, args) -> dict:
    """``{parameter name: argument}`` for the positional arguments of ``fn`` (arg0, arg1, ... if unknown)."""
    try:
        names = [p.name for p in inspect.signature(fn).parameters.values()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        names = []
    names += [f"arg{i}" for i in range(len(names), len(args))]
    return dict(zip(names, args))
