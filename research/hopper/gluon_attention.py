"""FlashAttention's forward on Hopper in Gluon, checked and timed: the attention rungs of the Hopper lesson's
ladder, now in the kernel library (``solutions/kernels/gluon_attention.py``: the kernels, ``CONFIG``,
``PP_CONFIG``, ``RUNGS`` and the launcher ``attention_forward``). Q once by TMA, K and V by TMA into a ring
of stages guarded by mbarriers, S = Q K^T and O += P V on asynchronous warpgroup MMAs, the online softmax
of lesson 05 in registers between them (Dao 2023; Shah et al. 2024 for the Hopper schedule). Causal or
not. Rungs: pipelined; warp-specialized (a producer warp); overlapped (the softmax of a block beside the
next block's S, FlashAttention-3's intra-warpgroup pipelining); ping-pong (two consumer warpgroups on two
query tiles, FlashAttention-3's inter-warpgroup schedule). The last two also take grouped-query heads.
N must be a multiple of BLOCK_M and BLOCK_N (TMA reads a head's rows from one 2-D view of all heads, so a
ragged tail would read and write the next head's rows).

    python research/hopper/gluon_attention.py check   # on an H100/H200: against SDPA, then timed
    python research/hopper/gluon_attention.py check gqa  # the rungs that take grouped-query heads
    python research/hopper/compile_check.py           # on any machine: builds it for sm_90a
"""
from __future__ import annotations

import itertools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout, for solutions/
# isort: off
import tkcourse  # noqa: E402, F401  (first: the mode, before triton is imported)
import triton  # noqa: E402
# isort: on

from solutions.kernels.gluon_attention import RUNGS, attention_forward  # noqa: E402


def check():
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    for dtype, causal in itertools.product((torch.float16, torch.bfloat16), (False, True)):
        for B, H, N, D in ((1, 2, 256, 64), (2, 4, 1024, 128), (4, 32, 4096, 128), (1, 32, 16384, 128)):
            q, k, v = (torch.randn(B, H, N, D, device="cuda", dtype=dtype) for _ in range(3))
            name = f"{str(dtype)[6:]:9s} B{B} H{H} N{N} D{D}{' causal' if causal else ''}"
            ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
            tc = None
            if N >= 4096:
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    tc = triton.testing.do_bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
            for rung, kernel, cfg in RUNGS:
                try:
                    o = attention_forward(q, k, v, causal, kernel=kernel, config=cfg)
                    err = (o.float() - ref).abs().max().item()
                    line = f"{rung:17s} {name}: max |err| {err:.1e} {'OK' if err < 2e-2 else 'WRONG'}"
                    if tc is not None:
                        t = triton.testing.do_bench(lambda: attention_forward(q, k, v, causal, kernel=kernel, config=cfg))
                        flops = 4 * B * H * N * N * D // (2 if causal else 1)
                        line += f"; {flops / t / 1e9:.0f} TFLOP/s, cuDNN {flops / tc / 1e9:.0f}: {tc / t:.2f}x"
                except Exception as e:  # say what failed, and go on
                    line = f"{rung:17s} {name}: {type(e).__name__}: {str(e)[:200]}"
                print(line, flush=True)


def check_gqa():
    """Grouped-query heads (Hq 32, Hkv 8, D 128) on the rungs that take them, against SDPA's fastest backend
    with ``enable_gqa`` in the same run."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    for dtype, causal, (B, N) in itertools.product((torch.float16, torch.bfloat16), (False, True),
                                                   ((1, 4096), (4, 4096), (1, 16384))):
        q = torch.randn(B, 32, N, 128, device="cuda", dtype=dtype)
        k, v = (torch.randn(B, 8, N, 128, device="cuda", dtype=dtype) for _ in range(2))
        name = f"{str(dtype)[6:]:9s} B{B} Hq32 Hkv8 N{N} D128{' causal' if causal else ''}"
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal, enable_gqa=True)
        peers = {}
        for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION):
            try:
                with sdpa_kernel(backend):
                    F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
                    peers[backend.name] = triton.testing.do_bench(
                        lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True))
            except RuntimeError:
                pass
        best = min(peers, key=peers.get)
        flops = 4 * B * 32 * N * N * 128 // (2 if causal else 1)
        for rung, kernel, cfg in RUNGS[2:]:
            try:
                o = attention_forward(q, k, v, causal, kernel=kernel, config=cfg)
                err = (o.float() - ref).abs().max().item()
                t = triton.testing.do_bench(lambda: attention_forward(q, k, v, causal, kernel=kernel, config=cfg))
                print(f"{rung} GQA {name}: max |err| {err:.1e} {'OK' if err < 2e-2 else 'WRONG'}; "
                      f"{flops / t / 1e9:.0f} TFLOP/s, SDPA {best} {flops / peers[best] / 1e9:.0f}: "
                      f"{peers[best] / t:.2f}x", flush=True)
            except Exception as e:  # say what failed, and go on
                print(f"{rung} GQA {name}: {type(e).__name__}: {str(e)[:200]}", flush=True)


if __name__ == "__main__" and sys.argv[1:2] == ["check"]:
    if sys.argv[2:] != ["gqa"]:
        check()
    check_gqa()
