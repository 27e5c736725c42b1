"""Runtime mode: compiled on a CUDA GPU, or Triton's interpreter on the CPU.

This module is the foundation of the course and imports nothing else of it, so anything
(solutions, exercises, notebooks) may import it first. Importing it decides the mode:

* a CUDA GPU is present            -> kernels compile and run on it (``DEVICE == "cuda"``);
* no GPU, or ``TRITON_INTERPRET=1`` -> ``TRITON_INTERPRET=1`` is set *before* any
  ``@triton.jit`` kernel is defined, so every kernel runs in Triton's interpreter on the CPU.

It also holds the guard that keeps bf16 away from the interpreter, where it gives wrong results
(``check_dtype``). Problem sizes that fit the mode are the lessons' (``tkcourse.size``); the fix that
lets an older Triton's interpreter run on a current NumPy is ``tkcourse.triton_internals``'.
"""

from __future__ import annotations

import os
import sys

import torch

_USER_SET = "TRITON_INTERPRET" in os.environ


def _has_cuda() -> bool:
    return bool(torch.cuda.is_available())


if _USER_SET:
    INTERPRET: bool = os.environ["TRITON_INTERPRET"].strip().lower() in ("1", "true", "yes", "on")
else:
    INTERPRET = not _has_cuda()
    if INTERPRET:
        os.environ["TRITON_INTERPRET"] = "1"

if "triton" in sys.modules and INTERPRET and not _USER_SET:
    # Kernels defined before this point were compiled-mode kernels; say so instead of failing later.
    import warnings

    warnings.warn(
        "triton was imported before tkcourse, so triton's own functions (tl.max, tl.sum, ...) were not "
        "set up for the interpreter and kernels that call them will fail. Import tkcourse before "
        "triton (or set TRITON_INTERPRET=1 yourself), then restart the kernel.",
        stacklevel=2,
    )


#: Where tensors live in this mode.
DEVICE: str = "cpu" if INTERPRET else "cuda"

#: Short words for reports.
MODE_NAME: str = "interpreter (CPU)" if INTERPRET else "compiled (GPU)"

# --------------------------------------------------------------------------------------------
# dtypes
# --------------------------------------------------------------------------------------------


_FLOAT_DTYPES = (torch.float32, torch.float16) if INTERPRET else (torch.float32, torch.float16, torch.bfloat16)


def float_dtypes():
    """The float dtypes kernels accept in this mode: no bf16 in the interpreter."""
    return _FLOAT_DTYPES


class UnsupportedInInterpreter(ValueError):
    """A dtype (bf16) that Triton's interpreter computes wrongly."""


def check_dtype(*tensors) -> None:
    """Raise a clear error instead of letting bf16 reach a kernel in the interpreter.

    In Triton's interpreter (3.6 and 3.7.1) a bf16 ``tl.dot`` is off by about 1e9 relative (a bf16 copy
    comes back right in 3.7.1): a silent wrong answer is the worst thing a course can give, so refuse.
    ``tests/test_foundation.py`` shows the wrong dot, so a Triton that fixes it is noticed.
    """
    if not INTERPRET:
        return
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.dtype == torch.bfloat16:
            raise UnsupportedInInterpreter(
                "bfloat16 does not work in Triton's interpreter (it returns wrong numbers), and with "
                "no GPU the course runs every kernel there. Use torch.float16 or torch.float32 on "
                "the CPU; bf16 works on a GPU."
            )


def describe() -> dict:
    """A small report of the mode, for notebooks and ``tkcourse doctor``."""
    info = {"mode": MODE_NAME, "device": DEVICE, "interpret_set_by_user": _USER_SET}
    if not INTERPRET:
        p = torch.cuda.get_device_properties(0)
        info.update(gpu=p.name, sms=p.multi_processor_count, memory_gib=round(p.total_memory / 2**30, 1),
                    capability=f"{p.major}.{p.minor}", arch=f"sm_{p.major}{p.minor}")
    return info
