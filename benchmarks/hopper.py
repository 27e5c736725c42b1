"""Benchmark cases of lesson 12 (Hopper): the Gluon kernels against cuBLAS and cuDNN in the same run.

Matmul, kernel ``hopper_matmul``: fp16 and bf16 at 2048^3, 4096^3 and 8192^3 (shapes ``MxNxK`` and FLOPs
2*M*N*K, as lesson 03's rows). Providers:

* ``gluon_ws``: ``solutions.kernels.gluon_matmul.matmul_ws``, persistent and warp-specialized;
* ``gluon``: ``solutions.kernels.gluon_matmul.matmul``, pipelined (TMA, mbarriers, async wgmma);
* ``persistent``: ``solutions.hopper.matmul``, the lesson's persistent TMA matmul in Triton (imported at
  its first call: a case fails alone, and the others go on, where that module is missing);
* ``cublas``: ``torch.matmul``, the peer.

Attention forward, kernel ``hopper_attention_fwd``: fp16 and bf16 at lesson 06's shapes (B*N = 16k
tokens, H*D = 2048, D 64 and 128, N 1024, 4096 and 16384, causal or not), named and counted as
``benchmarks/flash_attention.py`` does (``B4-H16-N4096-D128-causal``; 4*B*H*N*N*D FLOPs, half when
causal). Providers:

* ``gluon_ws``, ``gluon_overlap``, ``gluon_pingpong``: the warp-specialized, overlapped and ping-pong
  rungs of ``solutions.kernels.gluon_attention``, each at the shapes it takes
  (``gluon_attention.shape_problem``; a rung that does not take a shape is left out of it);
* ``sdpa-cudnn``: SDPA under its cuDNN backend, the peer;
* ``triton``: lesson 06's tuned Triton forward behind its lean launch
  (``solutions.kernels.attention.attention_forward(..., impl="tuned")``: the library's route to the
  ping-pong kernel left out, which the ``gluon_pingpong`` rows measure), at ``TRITON_DTYPES`` and
  ``TRITON_HEAD_DIMS`` only, after every other row.

Why the course's Triton rows are few and last: its forward autotunes at each (N, D, causal, dtype) on its
first call, and from cold compiles about 70 configs for each (dtype, D) (N 16384 takes in-kernel
descriptors, another binary of each config), a minute and a half or more of compiling, where the whole
run is meant to take about five minutes (the GPU pass stops it at 330 s). Last, they are what a run
stopped by its time limit loses; lesson 06's recorded rows hold them at fp16 for both head dims.

The tensors of a shape are made on its first measured call and shared by its providers, so building the
cases costs nothing (``tkcourse bench --shape`` builds them all, then drops most).
"""

from __future__ import annotations

import functools

import torch

from tkcourse.bench import Case, attention_flops, matmul_flops

from .flash_attention import DS, NS, TOKENS, WIDTH, shape_name

MATMUL_KERNEL = "hopper_matmul"
ATTENTION_KERNEL = "hopper_attention_fwd"
MATMUL_SIZES = [2048, 4096, 8192]
DTYPES = [torch.float16, torch.bfloat16]
#: Provider -> the rung of ``solutions.kernels.gluon_attention`` it measures (a kernel's name there).
GLUON_RUNGS = {"gluon_ws": "attention_ws_kernel", "gluon_overlap": "attention_overlap_kernel",
               "gluon_pingpong": "attention_pingpong_kernel"}
#: Where the course's Triton forward is measured (each more (dtype, D) pair adds about 70 compiles).
TRITON_DTYPES = [torch.float16]
TRITON_HEAD_DIMS = [128]
#: Each kernel's peer, a provider at every one of its shapes.
PEERS = {MATMUL_KERNEL: "cublas", ATTENTION_KERNEL: "sdpa-cudnn"}


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


@functools.cache
def _lesson_matmul():
    from solutions.hopper import matmul  # written with lesson 12; looked up at the first call only

    return matmul


def matmul_providers() -> dict:
    """``{provider: f(a, b)}``: the two Gluon matmuls, the lesson's persistent Triton matmul, cuBLAS."""
    from solutions.kernels.gluon_matmul import matmul, matmul_ws

    return {"gluon_ws": matmul_ws, "gluon": matmul, "persistent": lambda a, b: _lesson_matmul()(a, b),
            "cublas": torch.matmul}


def matmul_cases(dtype: torch.dtype, n: int, device: str = "cuda") -> list[Case]:
    """One shape's cases, (n, n) @ (n, n), every provider on the same two matrices."""

    @functools.cache
    def inputs():
        return tuple(torch.randn(n, n, dtype=dtype, device=device) for _ in range(2))

    shape, flops = f"{n}x{n}x{n}", matmul_flops(n, n, n)
    return [Case(MATMUL_KERNEL, name, shape, _dtype_name(dtype), lambda f=f: f(*inputs()), flops=flops)
            for name, f in matmul_providers().items()]


def _cudnn(q, k, v, causal):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)


def _course_forward(q, k, v, causal):
    from solutions.kernels.attention import attention_forward

    return attention_forward(q, k, v, causal, impl="tuned")[0]


def _gluon(kernel):
    from solutions.kernels.gluon_attention import attention_forward

    return lambda q, k, v, causal: attention_forward(q, k, v, causal, kernel=kernel)


def attention_providers(B: int, H: int, N: int, D: int, dtype: torch.dtype, triton: bool = False) -> dict:
    """``{provider: f(q, k, v, causal)}`` at one shape: the Gluon rungs that take it and cuDNN; or, with
    ``triton``, the course's Triton forward alone."""
    if triton:
        return {"triton": _course_forward}
    from solutions.kernels import gluon_attention as ga

    out = {}
    for name, kernel_name in GLUON_RUNGS.items():
        kernel = getattr(ga, kernel_name)
        if ga.shape_problem(B, H, H, N, D, dtype, kernel) is None:
            out[name] = _gluon(kernel)
    out["sdpa-cudnn"] = _cudnn
    return out


def attention_cases(dtype: torch.dtype, N: int, D: int, causal: bool, triton: bool = False,
                    device: str = "cuda") -> list[Case]:
    """One shape's cases (B = 16384 / N, H = 2048 / D), every provider on the same q, k and v."""
    B, H = TOKENS // N, WIDTH // D

    @functools.cache
    def inputs():
        return tuple(torch.randn(B, H, N, D, dtype=dtype, device=device) for _ in range(3))

    shape, flops = shape_name(B, H, N, D, causal), attention_flops(B, H, N, D, causal)
    return [Case(ATTENTION_KERNEL, name, shape, _dtype_name(dtype), lambda f=f, c=causal: f(*inputs(), c),
                 flops=flops) for name, f in attention_providers(B, H, N, D, dtype, triton).items()]


def cases(device: str = "cuda"):
    """The matmul rows, the Gluon attention rows with cuDNN, then the course's Triton attention rows."""
    for dtype in DTYPES:
        for n in MATMUL_SIZES:
            yield from matmul_cases(dtype, n, device)
    for dtype in DTYPES:
        for D in DS:
            for N in NS:
                for causal in (False, True):
                    yield from attention_cases(dtype, N, D, causal, device=device)
    for dtype in TRITON_DTYPES:
        for D in TRITON_HEAD_DIMS:
            for N in NS:
                for causal in (False, True):
                    yield from attention_cases(dtype, N, D, causal, triton=True, device=device)
