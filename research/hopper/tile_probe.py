"""The attention rungs of ``solutions/kernels/gluon_attention.py`` at other key tiles and stage counts, fp16,
D 128, against SDPA's cuDNN backend in the same run (``do_bench``, as ``gluon_attention.check``).

    PYTHONPATH=$PWD python3 research/hopper/tile_probe.py

Why: the overlapped rung (S of the next block during this block's softmax) holds two S tiles in
registers; at 128 keys a block that is 128 more fp32 registers a thread than the warp-specialized rung,
and it ran no faster. Smaller key tiles halve that.
"""
import itertools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout, for solutions/
# isort: off
import tkcourse  # noqa: E402, F401  (first: the mode, before triton is imported)
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
# isort: on

from solutions.kernels import gluon_attention as ga  # noqa: E402

RUNGS = {"warp-specialized": ga.attention_ws_kernel, "overlapped": ga.attention_overlap_kernel,
         "ping-pong": ga.attention_pingpong_kernel}
TILES = [dict(BLOCK_M=128, BLOCK_N=128, STAGES=2, num_warps=8), dict(BLOCK_M=128, BLOCK_N=64, STAGES=2, num_warps=8),
         dict(BLOCK_M=128, BLOCK_N=64, STAGES=3, num_warps=8)]

for (B, N), causal in itertools.product(((4, 4096), (1, 16384)), (False, True)):
    q, k, v = (torch.randn(B, 32, N, 128, device="cuda", dtype=torch.float16) for _ in range(3))
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        tc = triton.testing.do_bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal).float()
    flops = 4 * B * 32 * N * N * 128 // (2 if causal else 1)
    for (rung, kernel), cfg in itertools.product(RUNGS.items(), TILES):
        if kernel is ga.attention_pingpong_kernel:  # 64 query rows a warpgroup
            cfg = dict(cfg, BLOCK_M=64, num_warps=4)
        name = f"B{B} N{N}{' causal' if causal else ''} {rung} {cfg['BLOCK_N']}x{cfg['STAGES']}"
        try:
            o = ga.attention_forward(q, k, v, causal, kernel=kernel, config=cfg)
            err = (o.float() - ref).abs().max().item()
            t = triton.testing.do_bench(lambda: ga.attention_forward(q, k, v, causal, kernel=kernel, config=cfg))
            print(f"{name:44s} err {err:.1e}; {flops / t / 1e9:.0f} TFLOP/s, cuDNN {flops / tc / 1e9:.0f}: "
                  f"{tc / t:.2f}x", flush=True)
        except Exception as e:  # noqa: BLE001 (say what failed, and go on)
            print(f"{name:44s} {type(e).__name__}: {str(e)[:160]}", flush=True)
