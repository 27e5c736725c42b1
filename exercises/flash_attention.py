# Exercise generated from solutions/flash_attention.py by `make exercises`. Fill in the parts marked TODO.
# Your edits are safe: the generator never overwrites a file you have changed.
# Check your work: `tkcourse check flash_attention` in a shell, or tkcourse.check.run("flash_attention") in a notebook.
"""Lesson 06: FlashAttention forward, ``O = softmax(scale · Q Kᵀ) V``, without the N×N score matrix.

Shapes are (B, H, N, D): B batch, H heads, N tokens, D head dimension (16, 32, 64 or 128).
Traffic (minimum): read Q, K, V (3·B·H·N·D elements), write O (B·H·N·D elements) and the row
log-sum-exp (B·H·N fp32): 8·B·H·N·D + 4·B·H·N bytes in fp16. Naive attention also writes and reads
the B·H·N² scores and probabilities: the score matrix alone is N/(4·D) times Q, K, V and O together
(8x at N = 4096, D = 128).
FLOPs: 4·B·H·N²·D (two matmuls of 2·N²·D per head), half that with ``causal=True``.

``_attn_fwd_simple`` is the kernel you write, with its launch in ``attention_forward``: a program per
(query block, batch·head) keeps its Q block on chip while a loop over K/V blocks keeps a running max
``m``, a running sum ``l`` and an accumulator (the online softmax of lesson 05). The fast version,
built from it step by step in the notebook's *Going further* (exp2, an unmasked and a masked stage, tensor descriptors,
autotuning, warp specialization), is ``solutions/kernels/attention_forward.py``, behind the same
API; it uses this file's ``check_inputs``, ``prepare``, ``reference``, ``HEAD_DIMS`` and ``attention_forward``
(for the calls it does not take).
``attention`` here is the forward alone; ``solutions/flash_attention_autograd.py`` joins it with
lesson 07's backward into a trainable layer.

Saved for the backward (lesson 07): ``lse[b, h, i] = log Σ_j exp(scale · q_i·k_j)`` over the keys
row i attends to, in NATURAL log, fp32, shape (B, H, N). Then ``P = exp(scale · Q Kᵀ − lse)``.
"""

import math

import torch
import triton
import triton.language as tl

from tkcourse.mode import INTERPRET

from exercises._checks import ConfigSpec, boolean, integer, power_of_two, real, validate

HEAD_DIMS = (16, 32, 64, 128)


@triton.jit
def _attn_fwd_simple(
    Q,  # pointer to q, shape (B, H, N, D); Q, K, V and O share one contiguous layout
    K,  # pointer to k
    V,  # pointer to v
    O,  # pointer to the output o
    LSE,  # pointer to the row log-sum-exp, fp32, shape (B, H, N), contiguous
    stride_b,  # elements between two batches
    stride_h,  # elements between two heads
    stride_n,  # elements between two tokens (the last dimension is contiguous)
    H,  # number of heads
    N,  # number of tokens (any length >= 1)
    sm_scale,  # softmax scale, usually 1/sqrt(D)
    HEAD_DIM: tl.constexpr,  # D
    BLOCK_M: tl.constexpr,  # queries per program
    BLOCK_N: tl.constexpr,  # keys per loop step
    CAUSAL: tl.constexpr,  # query i only attends to keys j <= i
):
    # TODO: your code here
    # 1. start_m = program_id(0) (query block), bh = program_id(1) (batch·head); the head's offset is
    #    (bh // H) * stride_b + (bh % H) * stride_h (in int64)
    # 2. offs_m = start_m * BLOCK_M + arange(BLOCK_M); load the Q block (mask rows >= N, other=0)
    # 3. m_i = -inf, l_i = 0, acc = 0 (fp32)
    # 4. loop start_n over 0..hi step BLOCK_N, with hi = N, or min((start_m + 1) * BLOCK_M, N) if CAUSAL
    #    a. load K and V blocks (mask keys >= N)
    #    b. s = dot(q, trans(k)) * sm_scale; set s to -inf where key >= N, and (CAUSAL) where key > query
    #    c. lesson 05's update, every query row at once: the new running max m_new, the factor alpha that
    #       rescales what was summed against the old max, and p, the block's scores exponentiated against m_new
    #    d. rescale l_i and acc by alpha and add the block's share: its row sums of p, and P V (a tensor-core
    #       product, so P in V's dtype); then m_i = m_new
    # 5. store acc / l_i into O and m_i + log(l_i) into LSE (rows < N only)
    pass


def check_inputs(q, k, v, sm_scale):
    """The softmax scale (1/sqrt(D) by default), after checking q, k, v (ValueError naming what is wrong)."""
    validate(q, k, v, names=["q", "k", "v"], ndim=4, same_shape=True)
    D = q.shape[-1]
    if D not in HEAD_DIMS:
        raise ValueError(
            f"head dimension D = q.shape[-1] = {D} is not supported; use one of {HEAD_DIMS} "
            f"(pad D with zeros up to the next supported size)"
        )
    if sm_scale is None:
        return 1.0 / math.sqrt(D)
    return real("sm_scale", sm_scale)


def prepare(t: torch.Tensor) -> torch.Tensor:
    """Contiguous and 16-byte aligned (one layout for Q, K, V, O; tensor descriptors need both)."""
    t = t.contiguous()
    return t if t.data_ptr() % 16 == 0 else t.clone()


#: What a launch config takes: blocks of 16 to 256 rows (``tl.dot`` needs a K side of 16, and the course
#: keeps M and N there too, where Triton would pad them; a power of two for ``tl.arange``), 1 to 32 warps,
#: 1 to 8 stages. Too large a block for shared memory fails at launch.
_CONFIG = ConfigSpec({"BLOCK_M": (power_of_two, 16, 256), "BLOCK_N": (power_of_two, 16, 256),
                      "num_warps": (power_of_two, 1, 32), "num_stages": (integer, 1, 8)},
                     required=("BLOCK_M", "BLOCK_N"), defaults={"num_warps": 4, "num_stages": 2})
#: The config without ``config=``: small blocks keep the interpreter quick (it runs every program
#: in turn); on a GPU, 64x64 tiles with 4 warps, one of the configs of Triton's fused-attention
#: tutorial, small enough for shared memory at every head dimension.
DEFAULT_CONFIG = ({"BLOCK_M": 32, "BLOCK_N": 16} if INTERPRET
                  else {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2})


def _launch_config(config):
    """``config`` checked (TypeError/ValueError naming the key), with num_warps and num_stages filled in."""
    return _CONFIG(config, "config")


def attention_forward(q, k, v, causal=False, sm_scale=None, config=None):
    """``(o, lse)`` for q, k, v of shape (B, H, N, D), without autograd.

    ``lse`` is the natural-log log-sum-exp of each row's scaled scores, fp32 (B, H, N).
    ``config`` ({BLOCK_M, BLOCK_N, num_warps, num_stages}) launches that config instead of
    ``DEFAULT_CONFIG``; Triton's own errors (e.g. out of shared memory) propagate.
    """
    sm_scale = check_inputs(q, k, v, sm_scale)
    causal = bool(boolean("causal", causal))
    cfg = _launch_config(DEFAULT_CONFIG if config is None else config)  # a bad key or value names itself
    q, k, v = prepare(q), prepare(k), prepare(v)
    B, H, N, D = q.shape
    o = torch.empty_like(q)
    lse = torch.empty((B, H, N), device=q.device, dtype=torch.float32)
    # TODO: your code here
    # launch _attn_fwd_simple with a program per (query block, batch·head), in that order on the grid; pass
    # the arguments in the order its signature lists them (the constants as keywords), then **cfg
    pass
    return o, lse


def attention(q, k, v, causal=False, sm_scale=None, config=None):
    """FlashAttention's forward: ``softmax(sm_scale · q kᵀ [causal mask]) v`` for q, k, v of shape (B, H, N, D).

    ``sm_scale`` defaults to 1/sqrt(D); D must be one of 16, 32, 64, 128; N is any length >= 1.
    Not differentiable: ``flash_attention_autograd.attention`` (``solutions/flash_attention_autograd.py``)
    joins this forward with lesson 07's backward into the trainable layer.
    """
    return attention_forward(q, k, v, causal=causal, sm_scale=sm_scale, config=config)[0]


def reference(q, k, v, causal=False, sm_scale=None, return_lse=False):
    """What ``attention`` must return, in plain torch (runs in float64 too). With ``return_lse``:
    ``(o, lse)``, ``lse`` the natural-log log-sum-exp of each row's scaled, masked scores."""
    D, N = q.shape[-1], q.shape[-2]
    scale = 1.0 / math.sqrt(D) if sm_scale is None else sm_scale
    s = (q @ k.transpose(-2, -1)) * scale
    if causal:
        future = torch.ones(N, N, dtype=torch.bool, device=q.device).triu(1)
        s = s.masked_fill(future, float("-inf"))
    o = torch.softmax(s, dim=-1) @ v
    return (o, torch.logsumexp(s, dim=-1)) if return_lse else o
