"""Benchmark cases of lessons 06 and 07: FlashAttention forward and backward against SDPA.

Shapes keep B*N = 16k tokens and H*D = 2048, in fp16 and bf16. FLOPs: 4*B*H*N*N*D forward (half when causal), the
backward 2.5x that. Peers: SDPA's flash backend (FlashAttention-2) and its cuDNN backend.
Peak memory of forward + backward is recorded too (metric "GB", lower is better).

Grouped-query heads (``GQA``): Hq = 32 query heads reading Hkv = 8 KV heads, D = 128, as Llama 3's
8B model; shapes named ``B1-Hq32-Hkv8-N4096-D128[-causal]``, FLOPs those of the Hq query heads.
Peers: SDPA with ``enable_gqa=True`` under its flash, cuDNN and memory-efficient backends (a backend
that does not take the shape fails its case, and the others go on). Their backward cases make their
tensors and run the forward on their first call, so that filtering them out (``--shape``) costs nothing.
"""

from __future__ import annotations

import gc

import torch

from tkcourse.bench import Case, attention_flops

TOKENS, WIDTH = 16384, 2048
NS = [1024, 4096, 16384]
DS = [64, 128]
#: The dtypes of lessons 06 and 07's shapes (the small and grouped-query rows are fp16 only).
DTYPES = ["float16", "bfloat16"]


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


def _qkv(B, H, N, D, grad=False, device="cuda", dtype="float16"):
    return [torch.randn(B, H, N, D, dtype=getattr(torch, dtype), device=device, requires_grad=grad) for _ in range(3)]


def cases():
    yield from small_cases()
    for dtype in DTYPES:
        for D in DS:
            for N in NS:
                B, H = TOKENS // N, WIDTH // D
                for causal in (False, True):
                    for name, f in providers().items():
                        yield forward_case(name, f, B, H, N, D, causal, dtype)
                        yield backward_case(name, f, B, H, N, D, causal, dtype=dtype)
    yield from gqa_cases()


def forward_case(provider: str, f, B: int, H: int, N: int, D: int, causal: bool, dtype: str = "float16",
                 device="cuda") -> Case:
    """The forward ``f(q, k, v, causal)`` at one shape; its tensors are made on its first call (so that building
    the cases of shapes that ``--shape`` leaves out costs nothing)."""
    kept = []

    def run():
        if not kept:
            kept.extend(_qkv(B, H, N, D, device=device, dtype=dtype))
        return f(*kept, causal)
    return Case("attention_fwd", provider, shape_name(B, H, N, D, causal), dtype, run,
                flops=attention_flops(B, H, N, D, causal))


def backward_case(provider: str, f, B: int, H: int, N: int, D: int, causal: bool, device="cuda",
                  dtype: str = "float16") -> Case:
    """The backward of ``f(q, k, v, causal)`` at one shape: the forward runs once, on the first call (so that
    building the cases of shapes that ``--shape`` leaves out costs nothing), and each call is one backward."""
    kept = {}

    def run():
        if not kept:
            q, k, v = _qkv(B, H, N, D, grad=True, device=device, dtype=dtype)
            o = f(q, k, v, causal)
            kept.update(q=q, k=k, v=v, o=o, do=torch.randn_like(o))
        q, k, v = kept["q"], kept["k"], kept["v"]
        q.grad = k.grad = v.grad = None
        kept["o"].backward(kept["do"], retain_graph=True)
    return Case("attention_bwd", provider, shape_name(B, H, N, D, causal), dtype, run,
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


#: The kernels of ``extra_rows``, which ``tkcourse bench --kernel`` may name.
EXTRA_KERNELS = ("attention_memory",)


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


#: Grouped-query shapes: (B, Hq, Hkv, N, D), queries and keys of one length N.
GQA = [(B, 32, 8, N, 128) for B in (1, 4) for N in (1024, 4096, 16384)]


def gqa_shape_name(B: int, Hq: int, Hkv: int, N: int, D: int, causal: bool) -> str:
    return f"B{B}-Hq{Hq}-Hkv{Hkv}-N{N}-D{D}" + ("-causal" if causal else "")


def _sdpa_gqa(backend):
    from torch.nn.attention import sdpa_kernel

    def f(q, k, v, causal):
        with sdpa_kernel(backend):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    return f


def gqa_providers() -> dict:
    """``{provider: f(q, k, v, causal)}`` for q (B, Hq, N, D) and k, v (B, Hkv, N, D): the lean layer as
    triton, SDPA with ``enable_gqa`` per backend."""
    from torch.nn.attention import SDPBackend

    from solutions.kernels.attention import attention

    return {"triton": lambda q, k, v, causal: attention(q, k, v, causal=causal),
            "sdpa-flash": _sdpa_gqa(SDPBackend.FLASH_ATTENTION), "sdpa-cudnn": _sdpa_gqa(SDPBackend.CUDNN_ATTENTION),
            "sdpa-efficient": _sdpa_gqa(SDPBackend.EFFICIENT_ATTENTION)}


def _gqa_qkv(B, Hq, Hkv, N, D, grad=False, device="cuda"):
    q = torch.randn(B, Hq, N, D, dtype=torch.float16, device=device, requires_grad=grad)
    k, v = (torch.randn(B, Hkv, N, D, dtype=torch.float16, device=device, requires_grad=grad) for _ in range(2))
    return q, k, v


def gqa_backward_case(provider: str, f, B: int, Hq: int, Hkv: int, N: int, D: int, causal: bool,
                      device="cuda") -> Case:
    """``backward_case`` at a grouped shape; the tensors and the forward are made on the first call."""
    kept = {}

    def run():
        if not kept:
            q, k, v = _gqa_qkv(B, Hq, Hkv, N, D, grad=True, device=device)
            o = f(q, k, v, causal)
            kept.update(q=q, k=k, v=v, o=o, do=torch.randn_like(o))
        q, k, v = kept["q"], kept["k"], kept["v"]
        q.grad = k.grad = v.grad = None
        kept["o"].backward(kept["do"], retain_graph=True)
    return Case("attention_bwd", provider, gqa_shape_name(B, Hq, Hkv, N, D, causal), "float16", run,
                flops=attention_flops(B, Hq, N, D, causal, backward=True), graph=False)


def gqa_cases():
    """Forward and backward at the GQA shapes, triton against SDPA's backends."""
    for B, Hq, Hkv, N, D in GQA:
        for causal in (False, True):
            for name, f in gqa_providers().items():
                q, k, v = _gqa_qkv(B, Hq, Hkv, N, D)
                yield Case("attention_fwd", name, gqa_shape_name(B, Hq, Hkv, N, D, causal), "float16",
                           lambda f=f, q=q, k=k, v=v, c=causal: f(q, k, v, c), flops=attention_flops(B, Hq, N, D, causal))
            for name, f in gqa_providers().items():
                yield gqa_backward_case(name, f, B, Hq, Hkv, N, D, causal)
