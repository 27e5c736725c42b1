# Generated from solutions/_occupancy.py by `make exercises`: a verbatim copy that the exercises import.
# Nothing to fill in here.
"""How many programs of a compiled kernel one SM holds at once (GPU only): the size of a persistent grid.

A persistent grid launches one wave of programs that loop over the work (lessons 02 and 05), so it
needs the number that fit at once: by threads, by registers (handed out 8 at a time) and by shared
memory, read from the compiled kernel. Triton's tutorial 02 computes it the same way.

It lives in solutions/ beside ``_checks``, not in the ``tkcourse`` package: it is part of the kernel
library (a launcher needs it to size its grid). ``make exercises`` (``tkcourse.stubs``) copies it
verbatim into ``exercises/_occupancy.py``, so lesson 02's exercise sizes its grid the same way without
importing ``solutions/``. It imports the standard library, torch, and ``tkcourse.triton_internals`` for
the compiled kernel's registers and shared memory (Triton keeps them on private attributes).
"""

from __future__ import annotations

import functools

import torch

from tkcourse.triton_internals import compiled_resources

#: An SM holds at most this many programs (thread blocks) at once on the GPUs this course targets.
MAX_PROGRAMS_PER_SM = 32


@functools.lru_cache(maxsize=None)
def device_properties(index: int):
    return torch.cuda.get_device_properties(index)


def sm_count(index: int) -> int:
    return device_properties(index).multi_processor_count


def programs_per_sm(jit_fn, *args, num_warps: int, device_index: int, **kwargs) -> int:
    """Programs of ``jit_fn`` compiled for these arguments (``jit_fn.warmup``: compiled, not run) that
    one SM holds at once. A Triton without these internals gets a safe guess: half the thread limit."""
    props = device_properties(device_index)
    threads = 32 * num_warps
    fit = getattr(props, "max_threads_per_multi_processor", 2048) // threads
    try:
        n_regs, smem = compiled_resources(jit_fn.warmup(*args, num_warps=num_warps, grid=(1,), **kwargs))
        regs = -(-max(n_regs, 1) // 8) * 8
        fit = min(fit, getattr(props, "regs_per_multiprocessor", 65536) // (regs * threads))
        if smem:
            fit = min(fit, getattr(props, "shared_memory_per_multiprocessor", 233472) // (smem + 1024))
    except (AttributeError, TypeError, KeyError):
        fit = max(1, fit // 2)
    return max(1, min(fit, MAX_PROGRAMS_PER_SM))
