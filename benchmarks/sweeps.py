"""What ``python -m tkcourse.autotune KERNEL`` sweeps: each kernel's config space and how to launch one config.

``TARGETS[name]`` is a ``tkcourse.autotune.Target``; ``tkcourse.course.SWEEP_TARGETS`` names this module
for each kernel, so that the command finds the kernels by name and ``tkcourse`` never imports ``solutions``.

* ``matmul``: lesson 03's matmul over lesson 04's ``config_space()`` (``--prune``: minus what lesson 04's
  ``prune`` drops), timed beside ``torch.matmul``.
* ``attention``: lesson 06's tuned forward (``solutions.kernels.attention_forward``, the kernel the recorded
  figures measure) over ``ATTENTION_AXES``, timed beside PyTorch's SDPA.
"""

from __future__ import annotations

from tkcourse import mode
from tkcourse.autotune import Target, axes_of, close_to, config_space, parse_axes, smem_limit

# Attention has no exercise config space of its own; this one is the default (override with --axes).
ATTENTION_AXES = {"BLOCK_M": [64, 128], "BLOCK_N": [32, 64, 128], "num_warps": [4, 8], "num_stages": [2, 3, 4]}


def _matmul_configs(dims, dtype_bytes, args) -> list[dict]:
    """solutions.autotune.config_space(), with --axes overrides and --prune applied."""
    from solutions import autotune as at

    space = at.config_space()
    configs = config_space(**parse_axes(args.axes, axes_of(space))) if args.axes else space
    if args.prune:
        configs = at.prune(configs, *dims, dtype_bytes=dtype_bytes, smem_limit=smem_limit())
    return configs


def _matmul_job(dims, dtype, args):
    import torch

    from solutions import matmul as mm

    M, N, K = dims
    a = torch.randn(M, K, dtype=dtype, device=mode.DEVICE)
    b = torch.randn(K, N, dtype=dtype, device=mode.DEVICE)
    ref = mm.reference(a, b) if hasattr(mm, "reference") else torch.matmul(a, b)
    size = a.element_size()
    return dict(make_fn=lambda cfg: (lambda: mm.matmul(a, b, config=cfg)), kernel="matmul",
                flops=2 * M * N * K, bytes=(M * K + K * N + M * N) * size, check=close_to(ref),
                baseline=lambda: torch.matmul(a, b))


def _attention_configs(dims, dtype_bytes, args) -> list[dict]:
    return config_space(**parse_axes(args.axes, ATTENTION_AXES))


def _attention_job(dims, dtype, args):
    import torch

    from solutions.kernels import attention_forward as fa

    B, H, N, D = dims
    q, k, v = (torch.randn(B, H, N, D, dtype=dtype, device=mode.DEVICE) for _ in range(3))
    causal = args.causal
    if hasattr(fa, "reference"):
        ref = fa.reference(q, k, v, causal)
    else:
        ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    flops = 4 * B * H * N * N * D // (2 if causal else 1)
    return dict(make_fn=lambda cfg: (lambda: fa.attention(q, k, v, causal, config=cfg)),
                kernel="attention_causal" if causal else "attention", flops=flops,
                bytes=4 * B * H * N * D * q.element_size(), check=close_to(ref),
                baseline=lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal))


TARGETS = {
    "matmul": Target(_matmul_configs, _matmul_job, 3, "4096x4096x4096",
                     "512x512x512,1024x1024x1024,2048x2048x2048,4096x4096x4096,8192x8192x8192,16x4096x4096"),
    "attention": Target(_attention_configs, _attention_job, 4, "4x16x4096x128", "4x16x1024x128,4x16x4096x128"),
}
