"""The ping-pong attention rung's variants at lesson 06's shapes, fp16, against SDPA's cuDNN backend in the
same run (``do_bench``): the causal mask on every key block (``MASK_ALL=True``, the rung as first recorded)
or only on the blocks that cross the diagonal (``MASK_ALL=False``, the default since this probe's first run), and three stages of K and V at D 64, where two leave shared memory
unused.

    PYTHONPATH=$PWD python3 research/hopper/pingpong_probe.py

Why: the recorded rows put the rung at cuDNN's level without a mask and well below it when causal, most at
D 64, where the softmax's share of a step is largest; masking every block costs two iotas, a compare and a
select on each score.
"""
import itertools

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

from solutions.kernels import gluon_attention as ga

VARIANTS = {"recorded": dict(ga.PP_CONFIG, MASK_ALL=True), "diagonal only": dict(ga.PP_CONFIG, MASK_ALL=False),
            "3 stages": dict(ga.PP_CONFIG, STAGES=3, MASK_ALL=True),
            "3 stages, diagonal only": dict(ga.PP_CONFIG, STAGES=3, MASK_ALL=False)}

print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, flush=True)
for D, N, causal in itertools.product((64, 128), (1024, 4096, 16384), (True, False)):
    B, H = 16384 // N, 2048 // D
    q, k, v = (torch.randn(B, H, N, D, device="cuda", dtype=torch.float16) for _ in range(3))
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        tc = triton.testing.do_bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
    flops = 4 * B * H * N * N * D // (2 if causal else 1)
    for name, cfg in VARIANTS.items():
        if (not causal and "diagonal" in name) or (D == 128 and "3 stages" in name):
            continue  # no mask to skip; three stages of 128-wide K and V do not fit beside Q and O
        label = f"B{B} H{H} N{N} D{D}{' causal' if causal else ''} {name}"
        try:
            o = ga.attention_forward(q, k, v, causal, kernel=ga.attention_pingpong_kernel, config=cfg)
            err = (o.float() - ref.float()).abs().max().item()
            t = triton.testing.do_bench(
                lambda: ga.attention_forward(q, k, v, causal, kernel=ga.attention_pingpong_kernel, config=cfg))
            print(f"{label:52s} err {err:.1e}; {flops / t / 1e9:.0f} TFLOP/s, cuDNN {flops / tc / 1e9:.0f}: "
                  f"{tc / t:.2f}x", flush=True)
        except Exception as e:  # noqa: BLE001 (say what failed, and go on)
            print(f"{label:52s} {type(e).__name__}: {str(e)[:160]}", flush=True)
