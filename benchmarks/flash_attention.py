"""Benchmark cases of lessons 06 and 07: FlashAttention forward and backward against SDPA.

Shapes keep B*N = 16k tokens and H*D = 2048. FLOPs: 4*B*H*N*N*D forward (half when causal), the
backward 2.5x that. Peers: SDPA's flash backend (FlashAttention-2) and its cuDNN backend.
Peak memory of forward + backward is recorded too (metric "GB", lower is better).
"""

from __future__ import annotations

import gc

import torch

from tkcourse.bench import Case, attention_flops

TOKENS, WIDTH = 16384, 2048
NS = [1024, 4096, 16384]
DS = [64, 128]


def _sdpa(backend):
    from torch.nn.attention import sdpa_kernel

    def f(q, k, v, causal):
        with sdpa_kernel(backend):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return f


def providers(attention=None) -> dict:
    """``{provider: f(q, k, v, causal)}``: ``attention`` as triton, and SDPA. The default is the
    reference's fast path, the tuned forward with the autotuned backward (the recorded rows' kernels),
    behind a lean launch (``solutions.kernels.attention``); its ordinary launch (``kernels.attention_forward``
    and ``kernels.attention_backward``) is triton-readable."""
    from torch.nn.attention import SDPBackend

    sdpa = {"sdpa-flash": _sdpa(SDPBackend.FLASH_ATTENTION), "sdpa-cudnn": _sdpa(SDPBackend.CUDNN_ATTENTION)}
    if attention is not None:
        return {"triton": lambda q, k, v, causal: attention(q, k, v, causal=causal), **sdpa}
    from solutions.kernels.attention import attention
    from solutions.kernels.attention_backward import attention as readable

    return {"triton": lambda q, k, v, causal: attention(q, k, v, causal=causal),
            "triton-readable": lambda q, k, v, causal: readable(q, k, v, causal=causal), **sdpa}


#: Small problems, where the launch path and filling 132 SMs decide (lesson 08's attention rows):
#: forward only, against SDPA's default choice too (its best backend for the shape).
SMALL = [(1, 16, 512, 64)]


def small_cases():
    """The forward at SMALL shapes: the lean path and readable launch, SDPA default and per backend."""
    from solutions.kernels.attention import attention_forward
    from solutions.kernels.attention_forward import attention_forward as readable

    # The forward as inference calls it: attention_forward, no autograd Function around it.
    provs = dict(providers(), **{
        "triton": lambda q, k, v, causal: attention_forward(q, k, v, causal=causal)[0],
        "triton-readable": lambda q, k, v, causal: readable(q, k, v, causal=causal)[0],
        "sdpa-default": lambda q, k, v, causal: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)})
    for B, H, N, D in SMALL:
        for causal in (False, True):
            for name, f in provs.items():
                q, k, v = _qkv(B, H, N, D)
                yield Case("attention_fwd", name, shape_name(B, H, N, D, causal), "float16",
                           lambda f=f, q=q, k=k, v=v, c=causal: f(q, k, v, c), flops=attention_flops(B, H, N, D, causal))


def shape_name(B: int, H: int, N: int, D: int, causal: bool) -> str:
    return f"B{B}-H{H}-N{N}-D{D}" + ("-causal" if causal else "")


def _qkv(B, H, N, D, grad=False, device="cuda"):
    return [torch.randn(B, H, N, D, dtype=torch.float16, device=device, requires_grad=grad) for _ in range(3)]


def cases():
    yield from small_cases()
    for D in DS:
        for N in NS:
            B, H = TOKENS // N, WIDTH // D
            for causal in (False, True):
                for name, f in providers().items():
                    q, k, v = _qkv(B, H, N, D)
                    yield Case("attention_fwd", name, shape_name(B, H, N, D, causal), "float16",
                               lambda f=f, q=q, k=k, v=v, c=causal: f(q, k, v, c), flops=attention_flops(B, H, N, D, causal))
                    yield backward_case(name, f, B, H, N, D, causal)


def backward_case(provider: str, f, B: int, H: int, N: int, D: int, causal: bool, device="cuda") -> Case:
    """The backward of ``f(q, k, v, causal)`` at one shape: the forward runs once, each call is one backward."""
    q, k, v = _qkv(B, H, N, D, grad=True, device=device)
    o = f(q, k, v, causal)
    do = torch.randn_like(o)

    def run():
        q.grad = k.grad = v.grad = None
        o.backward(do, retain_graph=True)
    return Case("attention_bwd", provider, shape_name(B, H, N, D, causal), "float16", run,
                flops=attention_flops(B, H, N, D, causal, backward=True), graph=False)


def peak_memory_gb(f, B: int, H: int, N: int, D: int, causal: bool) -> float:
    """Peak GPU memory (GB) of one forward + backward of ``f(q, k, v, causal)``, beyond the inputs."""
    gc.collect()  # free the previous case's graph now, not while this one is measured
    q, k, v = _qkv(B, H, N, D, grad=True)
    do = torch.randn_like(q)
    f(q, k, v, causal).backward(do)  # warm up: autotuning's scratch is not the kernel's memory
    q.grad = k.grad = v.grad = None
    gc.collect()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    f(q, k, v, causal).backward(do)
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 1e9


def extra_rows(prov: dict) -> list[dict]:
    """Peak GPU memory (GB) of one forward + backward, ours against SDPA's, at each shape."""
    rows = []
    for D in DS:
        for N in NS:
            B, H = TOKENS // N, WIDTH // D
            for causal in (False, True):
                for name, f in providers().items():
                    peak = peak_memory_gb(f, B, H, N, D, causal)
                    rows.append(dict(kernel="attention_memory", provider=name, shape=shape_name(B, H, N, D, causal),
                                     dtype="float16", metric="GB", median=round(peak, 4), p20=round(peak, 4),
                                     p80=round(peak, 4), ms=0.0, bytes=0, flops=0, **prov))
    return rows
