"""FlashAttention backward (lesson 07), from correct to fast: autotuned, and the trainable layer.

The kernels are the lesson's (``flash_attention_backward.py``), unchanged; what this step adds is
``triton.autotune`` over ``DKDV_CONFIGS`` and ``DQ_CONFIGS`` on a GPU (keyed on N, D, causal and the
dtype), pruned to configs whose fp32 accumulators fit in registers. ``attention`` is the trainable
layer made of the tuned forward (``attention_forward.py``) and this backward: the reference's fast
path on a GPU, which the benchmarks (``benchmarks/flash_attention.py``) and the recorded H200
figures measure behind a lean launch (``attention.py``). Compiled for sm_90 with triton 3.9, every
config below fits without register spills except those the prune drops: fp32 accumulators of more
than MAX_ACC_REGS registers per thread (e.g. dK/dV with BLOCK_N=128, D=128, 4 warps). Configs that
need more shared memory than the GPU has fail at launch; autotune skips them.
"""

import torch
import triton

from tkcourse.mode import INTERPRET

from ..flash_attention_autograd import trainable
from ..flash_attention_backward import (  # noqa: F401
    attn_bwd_dkdv,
    attn_bwd_dq,
    check_inputs,
    checked_config,
    compute_delta,
    reference,
    reference_backward,
)
from . import attention_forward as forward

#: dK/dV kernel: BLOCK_N keys per program (kept on chip), BLOCK_M queries per step.
DKDV_CONFIGS = [
    triton.Config({"BLOCK_N": bn, "BLOCK_M": bm}, num_warps=w, num_stages=s)
    for bn, bm, w in [(64, 32, 4), (64, 64, 4), (128, 32, 4), (128, 32, 8), (128, 64, 8)]
    for s in (2, 3)
]
#: dQ kernel: BLOCK_M queries per program (kept on chip), BLOCK_N keys per step.
DQ_CONFIGS = [
    triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
    for bm, bn, w in [(64, 32, 4), (64, 64, 4), (128, 32, 4), (128, 32, 8), (128, 64, 8), (128, 128, 8)]
    for s in (2, 3)
]
#: Prune limit: fp32 accumulator registers per thread (dK and dV: 2·BLOCK_N·D, dQ: BLOCK_M·D values).
MAX_ACC_REGS = 128
#: Fixed configs in the interpreter (no autotune there).
INTERPRET_DKDV_CONFIG = {"BLOCK_N": 64, "BLOCK_M": 32}
INTERPRET_DQ_CONFIG = {"BLOCK_M": 64, "BLOCK_N": 32}
#: Below this many tokens a GPU launch takes these fixed configs instead of autotuning (compiling
#: every config for each (D, causal, dtype) costs more than small problems ever run).
AUTOTUNE_MIN_N = 512
SMALL_N_DKDV_CONFIG = {"BLOCK_N": 64, "BLOCK_M": 32, "num_warps": 4, "num_stages": 2}
SMALL_N_DQ_CONFIG = {"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2}


def _prune(configs, named_args, kwargs, rows, cols, n_acc):
    """Keep configs whose program tile (``rows``) fits N and whose accumulators fit in registers;
    causal attention needs ``rows`` to be a multiple of ``cols`` (whole steps on the diagonal)."""
    a = {**named_args, **kwargs}

    def keep(c):
        r, k = c.kwargs[rows], c.kwargs[cols]
        return (r <= max(a["N"], 64) and (not a["CAUSAL"] or r % k == 0)
                and n_acc * r * a["HEAD_DIM"] / (32 * c.num_warps) <= MAX_ACC_REGS)

    return [c for c in configs if keep(c)] or configs[:1]


def _prune_dkdv(configs, named_args, **kwargs):
    return _prune(configs, named_args, kwargs, "BLOCK_N", "BLOCK_M", 2)


def _prune_dq(configs, named_args, **kwargs):
    return _prune(configs, named_args, kwargs, "BLOCK_M", "BLOCK_N", 1)


dkdv_autotuned = dq_autotuned = None
if not INTERPRET:  # autotune times kernels on a GPU; the interpreter cannot
    dkdv_autotuned = triton.autotune(DKDV_CONFIGS, key=["N", "HEAD_DIM", "CAUSAL"],
                                      prune_configs_by={"early_config_prune": _prune_dkdv})(attn_bwd_dkdv)
    dq_autotuned = triton.autotune(DQ_CONFIGS, key=["N", "HEAD_DIM", "CAUSAL"],
                                    prune_configs_by={"early_config_prune": _prune_dq})(attn_bwd_dq)


def attention_backward(do, q, k, v, o, lse, causal=False, sm_scale=None, dkdv_config=None, dq_config=None):
    """``(dq, dk, dv)`` as the lesson's ``attention_backward``, autotuned on a GPU for N >= AUTOTUNE_MIN_N.

    ``dkdv_config`` / ``dq_config`` ({BLOCK_M, BLOCK_N, num_warps, num_stages}) launch exactly that
    config instead of autotuning (GPU) or the fixed interpreter config.
    """
    (do, q, k, v, o, lse), causal, sm_scale, dkdv_config, dq_config = check_inputs(
        do, q, k, v, o, lse, causal, sm_scale, dkdv_config, dq_config)
    B, H, N, D = q.shape
    delta = compute_delta(o, do, lse)  # Δ = rowsum(dO ∘ O), fp32 (B, H, N)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    args = dict(N=N, sm_scale=sm_scale, HEAD_DIM=D, CAUSAL=causal)

    small = N < AUTOTUNE_MIN_N  # a fixed config: tuning small problems costs more than they run
    if dkdv_config is None and dkdv_autotuned is not None and not small:
        grid = lambda meta: (triton.cdiv(N, meta["BLOCK_N"]), B * H)
        dkdv_autotuned[grid](q, k, v, do, dk, dv, lse, delta, **args)
    else:
        cfg = checked_config(dkdv_config if dkdv_config is not None else INTERPRET_DKDV_CONFIG if INTERPRET
                      else SMALL_N_DKDV_CONFIG, "dkdv_config")
        attn_bwd_dkdv[(triton.cdiv(N, cfg["BLOCK_N"]), B * H)](q, k, v, do, dk, dv, lse, delta, **args, **cfg)

    if dq_config is None and dq_autotuned is not None and not small:
        grid = lambda meta: (triton.cdiv(N, meta["BLOCK_M"]), B * H)
        dq_autotuned[grid](q, k, v, do, dq, lse, delta, **args)
    else:
        cfg = checked_config(dq_config if dq_config is not None else INTERPRET_DQ_CONFIG if INTERPRET
                      else SMALL_N_DQ_CONFIG, "dq_config")
        attn_bwd_dq[(triton.cdiv(N, cfg["BLOCK_M"]), B * H)](q, k, v, do, dq, lse, delta, **args, **cfg)
    return dq, dk, dv


#: The trainable layer: ``attention(q, k, v, causal=False, sm_scale=None, config=None, impl="auto")``,
#: the tuned forward (``impl`` and ``config`` as in ``attention_forward.attention_forward``) and
#: the autotuned backward.
attention = trainable(forward.attention_forward, attention_backward)
