"""Argument checks shared by the launchers: each failure names the argument, its value and what is allowed.

A launcher checks its scalar arguments and configs here before anything reaches Triton, so a
learner who tries ``BLOCK=1000`` reads "BLOCK must be a power of two from 1 to 1048576, got 1000
(try 512 or 1024)" instead of an error from deep inside Triton ("arange's range must be a power
of 2"), and a ``GROUP_M`` of 0 is refused instead of giving a silently wrong matrix.

Wrong type -> ``TypeError``, right type but out of range -> ``ValueError``. The happy path is a few
comparisons (a config that passed once is remembered), because launchers run on every call and
launch overhead matters on a GPU.

``validate`` checks the tensors a launcher gets (their number of dimensions, dtype, device, shapes);
the rest check scalars and configs.

This module imports only the standard library, torch and ``tkcourse.mode`` (the mode's device and
its bf16 guard): ``make exercises`` (``tkcourse.stubs``) copies it verbatim into
``exercises/_checks.py``, so an exercise gets the same checks without importing ``solutions/``. It
lives here rather than in ``tkcourse`` because it is part of the kernel library that someone may
vendor: the launchers and their checks travel together.
"""

from __future__ import annotations

import math
import numbers
import operator

import torch

from tkcourse.mode import DEVICE, MODE_NAME, check_dtype, float_dtypes

#: The largest block ``tl.arange`` makes (``triton.language.TRITON_MAX_TENSOR_NUMEL``).
MAX_BLOCK = 1 << 20


def _type_name(value) -> str:
    return type(value).__name__


def _pow2_hint(v: int, lo: int, hi: int) -> str:
    if v < lo or v > hi:
        return ""
    below = 1 << (v.bit_length() - 1)
    above = below << 1
    near = [p for p in (below, above) if lo <= p <= hi]
    return f" (try {' or '.join(map(str, near))})" if near else ""


def integer(name: str, value, lo: int = 1, hi: int | None = None) -> int:
    """``value`` as an int in ``[lo, hi]``; TypeError for a non-integer (2.0, "4", True, None)."""
    if type(value) is int and value >= lo and (hi is None or value <= hi):
        return value
    if isinstance(value, bool) or not hasattr(type(value), "__index__"):
        raise TypeError(f"{name} must be an int, got {_type_name(value)} {value!r}")
    v = operator.index(value)  # numpy and torch integers are fine
    if v < lo or (hi is not None and v > hi):
        allowed = f"from {lo} to {hi}" if hi is not None else f"at least {lo}"
        raise ValueError(f"{name} must be an int {allowed}, got {v}")
    return v


def power_of_two(name: str, value, lo: int = 1, hi: int = MAX_BLOCK) -> int:
    """``value`` as a power of two in ``[lo, hi]`` (block sizes: ``tl.arange`` needs a power of two)."""
    if type(value) is int and lo <= value <= hi and not value & (value - 1):
        return value
    if isinstance(value, bool) or not hasattr(type(value), "__index__"):
        raise TypeError(f"{name} must be an int, a power of two from {lo} to {hi}; got {_type_name(value)} {value!r}")
    v = operator.index(value)
    if not (lo <= v <= hi) or v & (v - 1):
        raise ValueError(f"{name} must be a power of two from {lo} to {hi}, got {v}{_pow2_hint(v, lo, hi)}")
    return v


def real(name: str, value) -> float:
    """``value`` as a finite float; TypeError for a string, a bool or a tensor of several elements."""
    if type(value) is float and math.isfinite(value):
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        if not (hasattr(value, "numel") and hasattr(value, "item") and value.numel() == 1
                and not value.dtype.is_complex and value.dtype.is_floating_point):
            raise TypeError(f"{name} must be a real number, got {_type_name(value)} {value!r}")
        value = value.item()
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be a finite number, got {v}")
    return v


def boolean(name: str, value) -> bool:
    """``value`` as a bool: True, False, 0 or 1 (a string such as "no" would be truthy: refused)."""
    if value is True or value is False:
        return value
    numpy_bool = type(value).__module__ == "numpy" and _type_name(value) in ("bool", "bool_")
    if numpy_bool or (isinstance(value, numbers.Integral) and value in (0, 1)):
        return bool(value)
    raise TypeError(f"{name} must be True or False, got {_type_name(value)} {value!r}")


class ConfigSpec:
    """The keys a launch config may have, and what each takes.

    ``keys``: ``{key: (check, lo, hi)}`` with ``check`` one of ``power_of_two``, ``integer``,
    ``boolean``; ``required``: the keys a config must give; ``defaults``: values of the others.
    ``spec(config, "config")`` returns a new dict of every key, checked, or raises naming the key.
    """

    def __init__(self, keys: dict, required, defaults: dict | None = None):
        self.keys, self.required, self.defaults = dict(keys), tuple(required), dict(defaults or {})
        self._seen: dict = {}  # configs (as item tuples) that passed, per label: the happy path

    def __call__(self, config, label: str = "config") -> dict:
        key = None
        if type(config) is dict:
            # the types are part of the key: 16.0 == 16 and True == 1 hash alike, and must not pass as them
            key = (label, tuple(config.items()), tuple(map(type, config.values())))
            try:
                return dict(self._seen[key])
            except (TypeError, KeyError):  # an unhashable value, or not seen yet
                pass
        checked = self._check(config, label)
        if key is not None and len(self._seen) < 4096:
            try:
                self._seen[key] = checked
            except TypeError:
                pass
        return dict(checked)

    def _check(self, config, label: str) -> dict:
        allowed = ", ".join(self.keys)
        if not isinstance(config, dict):
            raise TypeError(f"{label} must be a dict with keys {allowed} (required: {', '.join(self.required)}); "
                            f"got {_type_name(config)} {config!r}")
        missing = [k for k in self.required if k not in config]
        unknown = [k for k in config if k not in self.keys]
        if missing or unknown:
            raise ValueError(
                f"{label} has the wrong keys"
                + (f"; missing: {', '.join(missing)}" if missing else "")
                + (f"; unknown: {', '.join(map(str, unknown))}" if unknown else "")
                + f" (allowed: {allowed}; required: {', '.join(self.required)})"
            )
        out = dict(self.defaults)
        for k, v in config.items():
            check, lo, hi = self.keys[k]
            name = f"{label}[{k!r}]"
            out[k] = boolean(name, v) if check is boolean else check(name, v, lo, hi)
        return out


def validate(*tensors, names=None, ndim=None, same_shape=False, same_dtype=True, dtypes=None) -> None:
    """Input checks shared by every launcher; each failure says what to fix.

    ``ndim``: required number of dimensions; ``same_shape``/``same_dtype``: across all tensors;
    ``dtypes``: allowed dtypes (default: ``float_dtypes()``, no bf16 in the interpreter). All tensors
    must be on one device, and that device must be the mode's (``cuda`` on a GPU, ``cpu`` in the
    interpreter). Launchers call it on every launch, so the happy path is a few attribute reads per tensor.
    """
    allowed = dtypes or float_dtypes()
    first = tensors[0]
    for i, t in enumerate(tensors):
        if (not isinstance(t, torch.Tensor) or (ndim is not None and t.dim() != ndim) or t.numel() == 0
                or t.device.type != DEVICE or t.dtype not in allowed
                or (i and ((same_dtype and t.dtype != first.dtype) or (same_shape and t.shape != first.shape)
                           or t.device != first.device))):
            _explain(tensors, names, ndim, same_shape, same_dtype, allowed)


def _explain(tensors, names, ndim, same_shape, same_dtype, allowed) -> None:
    """Raise the ValueError that says what is wrong with the inputs (the slow path of ``validate``)."""
    names = list(names or [f"input {i}" for i in range(len(tensors))])
    for name, t in zip(names, tensors):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if ndim is not None and t.dim() != ndim:
            raise ValueError(f"{name} must be {ndim}-D, got shape {tuple(t.shape)}")
        if t.numel() == 0:
            raise ValueError(f"{name} is empty (shape {tuple(t.shape)}); give it at least one element")
        if t.device.type != DEVICE:
            raise ValueError(
                f"{name} is on {t.device}, but kernels run on {DEVICE!r} in this mode ({MODE_NAME}); "
                f"move it with .to({DEVICE!r})"
            )
    check_dtype(*tensors)
    for name, t in zip(names, tensors):
        if t.dtype not in allowed:
            raise ValueError(f"{name} has dtype {t.dtype}; supported here: {', '.join(map(str, allowed))}")
    first_name, first = names[0], tensors[0]
    for name, t in zip(names[1:], tensors[1:]):
        if t.device != first.device:
            raise ValueError(f"{first_name} is on {first.device} but {name} is on {t.device}; put both on one device")
        if same_dtype and t.dtype != first.dtype:
            raise ValueError(f"{first_name} has dtype {first.dtype} but {name} has dtype {t.dtype}; cast one with .to(...)")
        if same_shape and t.shape != first.shape:
            raise ValueError(f"{first_name} has shape {tuple(first.shape)} but {name} has {tuple(t.shape)}; they must match")
