"""Lesson 06: FlashAttention forward, ``O = softmax(scale · Q Kᵀ) V``, without the N×N score matrix.

Shapes are (B, H, N, D): B batch, H heads, N tokens, D head dimension (16, 32, 64 or 128).
Traffic (minimum): read Q, K, V (3·B·H·N·D elements), write O (B·H·N·D elements) and the row
log-sum-exp (B·H·N fp32): 8·B·H·N·D + 4·B·H·N bytes in fp16. Naive attention also writes and reads
the B·H·N² scores and probabilities: the score matrix alone is N/(4·D) times Q, K, V and O together
(8x at N = 4096, D = 128).
FLOPs: 4·B·H·N²·D (two matmuls of 2·N²·D per head), half that with ``causal=True``.

Two kernels compute the same thing:

* ``_attn_fwd_simple``: the readable kernel you write. A program per (query block, batch·head):
  its Q block stays on chip while a loop over K/V blocks keeps a running max ``m``, a running sum
  ``l`` and an accumulator (the online softmax of lesson 05).
* ``_attn_fwd_tuned``: the fast kernel the notebook builds from it step by step: ``exp2`` with
  log2(e) folded into the scale, causal attention split into an unmasked and a masked (diagonal)
  stage, tensor descriptors (TMA on Hopper) and ``triton.autotune`` over ``FWD_CONFIGS``.

Saved for the backward (lesson 07): ``lse[b, h, i] = log Σ_j exp(scale · q_i·k_j)`` over the keys
row i attends to, in NATURAL log, fp32, shape (B, H, N). Then ``P = exp(scale · Q Kᵀ − lse)``.
"""

import math

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from tkcourse.mode import INTERPRET, validate

from ._checks import ConfigSpec, boolean, integer, power_of_two, real

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
    ### BEGIN SOLUTION
    start_m = tl.program_id(0)  # which block of BLOCK_M queries
    bh = tl.program_id(1)  # which (batch, head)
    head = (bh // H).to(tl.int64) * stride_b + (bh % H).to(tl.int64) * stride_h
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)  # this program's query rows
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)

    # the Q block: loaded once, it stays on chip for the whole loop
    q = tl.load(Q + head + offs_m[:, None] * stride_n + offs_d[None, :], mask=offs_m[:, None] < N, other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)  # running max of each row's scores
    l_i = tl.zeros([BLOCK_M], tl.float32)  # running sum of exp(score - m_i)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)  # running sum of exp(score - m_i) · v

    # causal: key blocks wholly above the diagonal (all keys after this block's last query) are skipped
    hi = tl.minimum((start_m + 1) * BLOCK_M, N) if CAUSAL else N
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        kv_offsets = head + cols[:, None] * stride_n + offs_d[None, :]
        k = tl.load(K + kv_offsets, mask=cols[:, None] < N, other=0.0)
        v = tl.load(V + kv_offsets, mask=cols[:, None] < N, other=0.0)
        s = tl.dot(q, tl.trans(k)) * sm_scale  # (BLOCK_M, BLOCK_N) scores
        valid = cols[None, :] < N  # keys past the end of the sequence do not exist
        if CAUSAL:
            valid = valid & (offs_m[:, None] >= cols[None, :])  # the diagonal block: no future keys
        s = tl.where(valid, s, float("-inf"))
        # online softmax: new max, rescale what we had, add this block
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp(m_i - m_new)  # how much the old sums shrink
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new

    o = acc / l_i[:, None]  # final normalization
    tl.store(O + head + offs_m[:, None] * stride_n + offs_d[None, :], o.to(O.dtype.element_ty), mask=offs_m[:, None] < N)
    tl.store(LSE + bh.to(tl.int64) * N + offs_m, m_i + tl.log(l_i), mask=offs_m < N)  # natural-log lse
    ### STUB
    # 1. start_m = program_id(0) (query block), bh = program_id(1) (batch·head); the head's offset is
    #    (bh // H) * stride_b + (bh % H) * stride_h (in int64)
    # 2. offs_m = start_m * BLOCK_M + arange(BLOCK_M); load the Q block (mask rows >= N, other=0)
    # 3. m_i = -inf, l_i = 0, acc = 0 (fp32)
    # 4. loop start_n over 0..hi step BLOCK_N, with hi = N, or min((start_m + 1) * BLOCK_M, N) if CAUSAL
    #    a. load K and V blocks (mask keys >= N)
    #    b. s = dot(q, trans(k)) * sm_scale; set s to -inf where key >= N, and (CAUSAL) where key > query
    #    c. m_new = max(m_i, rowmax(s)); alpha = exp(m_i - m_new); p = exp(s - m_new)
    #    d. l_i = l_i * alpha + rowsum(p); acc = acc * alpha + dot(p.to(v.dtype), v); m_i = m_new
    # 5. store acc / l_i into O and m_i + log(l_i) into LSE (rows < N only)
    ### END SOLUTION


# ----------------------------------------------------------------------------------------------
# The tuned kernel. Each optimization is a step of the notebook:
#   1. exp2 instead of exp, with log2(e) folded into the scale (one multiply less per score);
#   2. causal: the key blocks left of the diagonal run without any mask, only the diagonal is masked;
#      non-causal: only the last, partial key block is masked;
#   3. tensor descriptors (TMA on Hopper): made on the host, one of all heads, where N is a multiple
#      of the blocks; else made in the kernel, one per head, so partial blocks read zeros and stores
#      stop at the head's last row;
#   4. triton.autotune over FWD_CONFIGS (on a GPU; the interpreter uses one fixed config).
# ----------------------------------------------------------------------------------------------

def _set_descriptor_blocks(nargs):
    """Autotune pre-hook: host-made descriptors take the block shape of the config about to run."""
    for name, block in (("Q", "BLOCK_M"), ("K", "BLOCK_N"), ("V", "BLOCK_N"), ("O", "BLOCK_M")):
        if isinstance(nargs[name], TensorDescriptor):
            nargs[name].block_shape = [nargs[block], nargs["HEAD_DIM"]]


#: Autotune configs of the tuned forward kernel (GPU only), after Triton's fused-attention tutorial
#: (8 warps only on 128x128 tiles), plus 128x64 tiles with 8 warps and a warp-specialized loop
#: (tl.range(..., warp_specialize=True)), which won sweeps on an H200 (fp16, N = 1024 and 4096,
#: D = 64 and 128, 2026-11-29; tools/tuning/pipeline_probe.py). The warp-specialized config is tried
#: only where it applies (non-causal, N % BLOCK_N == 0) and while FWD_TRY_WARP_SPECIALIZE is set.
#: (A warp-specialized 128x128 config with 4 warps also won with in-kernel descriptors; with
#: host-made ones Triton 3.6 fails to compile it, so it is gone.)
FWD_CONFIGS = [
    triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "WARP_SPECIALIZE": False}, num_warps=w, num_stages=s,
                  pre_hook=_set_descriptor_blocks)
    for bm, bn, w in [(64, 32, 4), (64, 64, 4), (128, 32, 4), (128, 64, 4), (128, 128, 8)]
    for s in (2, 3, 4)
] + [
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 64, "WARP_SPECIALIZE": ws}, num_warps=8, num_stages=s,
                  pre_hook=_set_descriptor_blocks)
    for ws, s in [(False, 3), (False, 4), (True, 3)]
]
#: Host-made tensor descriptors (one of all heads, built by the launcher) where N is a multiple of
#: every block (HOST_DESCRIPTOR_MULTIPLE) and at most HOST_DESCRIPTOR_MAX_N: a program then reads
#: through them directly instead of writing four descriptors to memory and fencing them before its
#: first load. Measured on an H200 (fp16, 2026-11-29, pipeline_probe.py part H and the 13:19 bench):
#: 5-25% faster at N = 1024 and 4096, where programs are short; 1-8% slower at N = 16384
#: (tuning/bench_flash_attention_runs.txt: the 13:19 run had them at every N, the 13:27 run not at 16384).
HOST_DESCRIPTORS = True
HOST_DESCRIPTOR_MULTIPLE = 128
HOST_DESCRIPTOR_MAX_N = 4096
#: Autotune the warp-specialized configs too (non-causal attention only).
FWD_TRY_WARP_SPECIALIZE = True
#: The one config "tuned" runs with in the interpreter (autotune cannot time kernels on the CPU).
INTERPRET_CONFIG = {"BLOCK_M": 32, "BLOCK_N": 16, "num_warps": 4, "num_stages": 2}
#: Below this many tokens a GPU launch takes SMALL_N_CONFIG instead of autotuning: tuning compiles
#: every config for each (D, causal, dtype), which costs more than small problems ever run.
AUTOTUNE_MIN_N = 512
SMALL_N_CONFIG = {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2}


def _prune_fwd_configs(configs, named_args, **kwargs):
    args = {**named_args, **kwargs}
    n, causal = args["N"], args["CAUSAL"]

    def keep(c):
        bm, bn, ws = c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.kwargs["WARP_SPECIALIZE"]
        if bm > max(n, 64) or (causal and bm < bn):  # no 128-row blocks for tiny N; causal: BLOCK_M >= BLOCK_N
            return False
        # a warp-specialized loop must be the kernel's only loop: non-causal, N a multiple of BLOCK_N
        return not ws or (FWD_TRY_WARP_SPECIALIZE and not causal and n % bn == 0)

    return [c for c in configs if keep(c)] or configs[:1]


### BEGIN SOLUTION
@triton.jit
def _attn_fwd_tuned_loop(
    acc, l_i, m_i,  # running accumulator, row sum and row max (base 2)
    q,  # the Q block, (BLOCK_M, HEAD_DIM)
    desc_k,  # tensor descriptor of this head's K, blocks of (BLOCK_N, HEAD_DIM)
    desc_v,  # tensor descriptor of this head's V
    kv_row0,  # row of the descriptors where this head's keys start (0, or b·H·N + h·N for a host-made one)
    offs_m,  # query rows of the Q block
    lo, hi,  # key range [lo, hi) of this stage; lo is a multiple of BLOCK_N
    N,  # number of tokens
    qk_scale,  # sm_scale · log2(e)
    BLOCK_N: tl.constexpr,  # keys per loop step
    MASK: tl.constexpr,  # mask keys >= N (and, if CAUSAL, keys after the query)
    CAUSAL: tl.constexpr,  # causal attention
    WARP_SPECIALIZE: tl.constexpr,  # let the compiler split loads and math over warps
):
    offs_n = tl.arange(0, BLOCK_N)
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WARP_SPECIALIZE):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        k = desc_k.load([kv_row0 + start_n, 0])
        qk = tl.dot(q, k.T)
        if MASK:
            keep = (start_n + offs_n)[None, :] < N
            if CAUSAL:
                keep = keep & (offs_m[:, None] >= (start_n + offs_n)[None, :])
            qk = qk * qk_scale + tl.where(keep, 0.0, -1.0e6)
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            qk -= m_ij[:, None]
        else:  # no mask: scale the row max instead of every score before taking it
            m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - m_ij[:, None]
        p = tl.math.exp2(qk)
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = desc_v.load([kv_row0 + start_n, 0])
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_ij
    return acc, l_i, m_i


@triton.jit
def _head_descriptor(X, bh, N, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr):
    """(descriptor, first row) of head ``bh`` of X: a host-made descriptor of all heads as it is, with the
    head's rows from bh·N; or, for a pointer, a descriptor of this head alone, (N, D), made here."""
    if isinstance(X, tl.tensor_descriptor):
        return X, bh * N
    else:
        return tl.make_tensor_descriptor(X + bh.to(tl.int64) * N * HEAD_DIM, [N, HEAD_DIM], [HEAD_DIM, 1],
                                         [BLOCK, HEAD_DIM]), 0


@triton.jit
def _attn_fwd_tuned(
    Q,  # q, contiguous (B, H, N, D), 16-byte aligned: a pointer, or a host-made descriptor of (B·H·N, D)
    K,  # k, the same
    V,  # v, the same
    O,  # the output o, the same
    LSE,  # pointer to the row log-sum-exp, fp32, contiguous (B, H, N)
    N,  # number of tokens
    sm_scale,  # softmax scale
    HEAD_DIM: tl.constexpr,  # D
    CAUSAL: tl.constexpr,  # causal attention
    BLOCK_M: tl.constexpr,  # queries per program
    BLOCK_N: tl.constexpr,  # keys per loop step
    WARP_SPECIALIZE: tl.constexpr,  # warp-specialized K/V loop
):
    start_m = tl.program_id(0)
    if CAUSAL:  # heaviest query blocks (most keys) first: a better-balanced tail
        start_m = tl.num_programs(0) - 1 - start_m
    bh = tl.program_id(1)
    # Made here from pointers: one descriptor per head, of shape (N, D), so a partial block past row N
    # loads zeros (never the next head's rows) and a store stops at row N. Made on the host (when
    # N is a multiple of the blocks): one descriptor of all heads, which this program need not write
    # to memory and fence before its first load.
    desc_q, row0 = _head_descriptor(Q, bh, N, HEAD_DIM, BLOCK_M)
    desc_k, kv_row0 = _head_descriptor(K, bh, N, HEAD_DIM, BLOCK_N)
    desc_v, _ = _head_descriptor(V, bh, N, HEAD_DIM, BLOCK_N)
    desc_o, _ = _head_descriptor(O, bh, N, HEAD_DIM, BLOCK_M)

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)  # running max, in base 2
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    qk_scale = sm_scale * 1.4426950408889634  # fold log2(e) in: exp(x·s) = exp2(x·s·log2 e)
    q = desc_q.load([row0 + start_m * BLOCK_M, 0])

    if CAUSAL:
        # stage 1: key blocks wholly left of the diagonal, no mask; stage 2: the diagonal, masked
        diag = (start_m * BLOCK_M // BLOCK_N) * BLOCK_N
        acc, l_i, m_i = _attn_fwd_tuned_loop(acc, l_i, m_i, q, desc_k, desc_v, kv_row0, offs_m, 0, diag, N, qk_scale,
                                             BLOCK_N, False, CAUSAL, WARP_SPECIALIZE)
        acc, l_i, m_i = _attn_fwd_tuned_loop(acc, l_i, m_i, q, desc_k, desc_v, kv_row0, offs_m, diag,
                                             tl.minimum((start_m + 1) * BLOCK_M, N), N, qk_scale,
                                             BLOCK_N, True, CAUSAL, WARP_SPECIALIZE)
    else:
        # all full key blocks without a mask, then the last, partial one (if any) masked
        n_full = (N // BLOCK_N) * BLOCK_N
        acc, l_i, m_i = _attn_fwd_tuned_loop(acc, l_i, m_i, q, desc_k, desc_v, kv_row0, offs_m, 0, n_full, N, qk_scale,
                                             BLOCK_N, False, CAUSAL, WARP_SPECIALIZE)
        if not WARP_SPECIALIZE:  # a warp-specialized loop must be the only loop: WS needs N % BLOCK_N == 0
            acc, l_i, m_i = _attn_fwd_tuned_loop(acc, l_i, m_i, q, desc_k, desc_v, kv_row0, offs_m, n_full, N, N, qk_scale,
                                                 BLOCK_N, True, CAUSAL, False)

    acc = acc / l_i[:, None]
    lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453  # base 2 -> natural log
    tl.store(LSE + bh.to(tl.int64) * N + offs_m, lse, mask=offs_m < N)
    desc_o.store([row0 + start_m * BLOCK_M, 0], acc.to(desc_o.dtype))


_attn_fwd_autotuned = None
if not INTERPRET:  # autotune times kernels on a GPU; the interpreter cannot
    _attn_fwd_autotuned = triton.autotune(
        configs=FWD_CONFIGS,
        key=["N", "HEAD_DIM", "CAUSAL"],
        prune_configs_by={"early_config_prune": _prune_fwd_configs},
    )(_attn_fwd_tuned)
### STUB
# Optional: the notebook builds the tuned kernel step by step; paste it here to use it (and point
# _attn_fwd_tuned / _attn_fwd_autotuned at it). Left as None, attention() runs _attn_fwd_simple.
#! _attn_fwd_tuned = None
#! _attn_fwd_autotuned = None
### END SOLUTION


def _tma_scratch(size: int, alignment: int, stream):
    """Global memory for tensor descriptors made inside kernels (``tl.make_tensor_descriptor``)."""
    return torch.empty(size, device="cuda", dtype=torch.int8)


def _descriptors(q, k, v, o, block_m, block_n=None):
    """The tuned kernel's Q, K, V, O: host-made descriptors of all heads, (B·H·N, D), with blocks of
    block_m rows (Q, O) and block_n rows (K, V; default block_m), where N is a multiple of both (so no
    block straddles two heads) and at most HOST_DESCRIPTOR_MAX_N; else the pointers themselves (the
    kernel then makes a descriptor per head). Autotuning resets the blocks per config (its pre-hook)."""
    B, H, N, D = q.shape
    block_n = block_n or block_m
    if not HOST_DESCRIPTORS or N % block_m or N % block_n or N > HOST_DESCRIPTOR_MAX_N:
        return [q, k, v, o]
    return [TensorDescriptor(t.view(B * H * N, D), [B * H * N, D], [D, 1], [block, D])
            for t, block in ((q, block_m), (k, block_n), (v, block_n), (o, block_m))]


def _check_inputs(q, k, v, sm_scale):
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


def _prepare(t: torch.Tensor) -> torch.Tensor:
    """Contiguous and 16-byte aligned (tensor descriptors need both)."""
    t = t.contiguous()
    return t if t.data_ptr() % 16 == 0 else t.clone()


def _use_tuned(impl: str) -> bool:
    if impl not in ("auto", "simple", "tuned"):
        raise ValueError(f"impl must be 'auto', 'simple' or 'tuned', got {impl!r}")
    if impl == "tuned" and _attn_fwd_tuned is None:
        raise ValueError("impl='tuned': this module has no tuned kernel (_attn_fwd_tuned is None); use impl='simple'")
    return impl == "tuned" or (impl == "auto" and _attn_fwd_tuned is not None and not INTERPRET)


#: What a launch config takes: blocks of 16 to 256 rows (``tl.dot`` needs 16 a side; a power of two for
#: ``tl.arange``), 1 to 32 warps, 1 to 8 stages. Too large a block for shared memory fails at launch.
_CONFIG = ConfigSpec({"BLOCK_M": (power_of_two, 16, 256), "BLOCK_N": (power_of_two, 16, 256),
                      "num_warps": (power_of_two, 1, 32), "num_stages": (integer, 1, 8),
                      "WARP_SPECIALIZE": (boolean, None, None)},
                     required=("BLOCK_M", "BLOCK_N"), defaults={"num_warps": 4, "num_stages": 2})


def _launch_config(config):
    """``config`` checked (TypeError/ValueError naming the key), with num_warps and num_stages filled in."""
    return _CONFIG(config, "config")


def attention_forward(q, k, v, causal=False, sm_scale=None, impl="auto", config=None):
    """``(o, lse)`` for q, k, v of shape (B, H, N, D), without autograd.

    ``lse`` is the natural-log log-sum-exp of each row's scaled scores, fp32 (B, H, N).
    ``impl``: "simple" (the readable kernel), "tuned" (the fast one), "auto" (tuned on a GPU, simple
    in the interpreter). ``config`` ({BLOCK_M, BLOCK_N, num_warps, num_stages}) launches exactly that
    config, without autotune; Triton's own errors (e.g. out of shared memory) propagate.
    """
    sm_scale = _check_inputs(q, k, v, sm_scale)
    causal = boolean("causal", causal)
    if config is not None:
        config = _launch_config(config)  # before any work: a bad key or value names itself
    tuned = _use_tuned(impl)
    q, k, v = _prepare(q), _prepare(k), _prepare(v)
    B, H, N, D = q.shape
    o = torch.empty_like(q)
    lse = torch.empty((B, H, N), device=q.device, dtype=torch.float32)
    causal = bool(causal)

    if tuned:
        if not INTERPRET:
            triton.set_allocator(_tma_scratch)  # set here: ContextVars do not follow other threads
        if config is None and _attn_fwd_autotuned is not None and N >= AUTOTUNE_MIN_N:
            grid = lambda meta: (triton.cdiv(N, meta["BLOCK_M"]), B * H)
            args = _descriptors(q, k, v, o, HOST_DESCRIPTOR_MULTIPLE)  # every config's blocks divide it
            _attn_fwd_autotuned[grid](*args, lse, N, sm_scale, HEAD_DIM=D, CAUSAL=causal)
        else:
            cfg = _launch_config(config if config is not None else INTERPRET_CONFIG if INTERPRET else SMALL_N_CONFIG)
            ws = bool(cfg.pop("WARP_SPECIALIZE", False))
            if ws and (causal or N % cfg["BLOCK_N"]):
                raise ValueError("WARP_SPECIALIZE=True needs causal=False and N a multiple of BLOCK_N "
                                 "(a warp-specialized loop must be the kernel's only loop)")
            args = _descriptors(q, k, v, o, cfg["BLOCK_M"], cfg["BLOCK_N"])
            grid = (triton.cdiv(N, cfg["BLOCK_M"]), B * H)
            _attn_fwd_tuned[grid](*args, lse, N, sm_scale, HEAD_DIM=D, CAUSAL=causal, WARP_SPECIALIZE=ws, **cfg)
        return o, lse

    if config is not None:
        cfg = _launch_config(config)
        cfg.pop("WARP_SPECIALIZE", None)
    elif INTERPRET:
        cfg = {"BLOCK_M": 32, "BLOCK_N": 16}
    else:
        cfg = {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2}
    ### BEGIN SOLUTION
    grid = (triton.cdiv(N, cfg["BLOCK_M"]), B * H)  # a program per (query block, batch·head)
    _attn_fwd_simple[grid](q, k, v, o, lse, q.stride(0), q.stride(1), q.stride(2), H, N, sm_scale,
                           HEAD_DIM=D, CAUSAL=causal, **cfg)
    ### STUB
    # launch _attn_fwd_simple on a grid of (triton.cdiv(N, BLOCK_M), B * H) programs,
    # passing q, k, v, o, lse, q's strides (batch, head, token), H, N, sm_scale, HEAD_DIM=D, CAUSAL=causal, **cfg
    ### END SOLUTION
    return o, lse


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, sm_scale, impl, config):
        o, lse = attention_forward(q, k, v, causal=causal, sm_scale=sm_scale, impl=impl, config=config)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal = bool(causal)
        ctx.sm_scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else float(sm_scale)
        return o

    @staticmethod
    def backward(ctx, do):
        from .flash_attention_backward import attention_backward  # lesson 07 (same package)

        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = attention_backward(do, q, k, v, o, lse, ctx.causal, ctx.sm_scale)
        return dq, dk, dv, None, None, None, None


def attention(q, k, v, causal=False, sm_scale=None, config=None, impl="auto"):
    """FlashAttention: ``softmax(sm_scale · q kᵀ [causal mask]) v`` for q, k, v of shape (B, H, N, D).

    Differentiable (the backward is lesson 07). ``sm_scale`` defaults to 1/sqrt(D); D must be one of
    16, 32, 64, 128; N is any length >= 1. See ``attention_forward`` for ``impl`` and ``config``.
    """
    return _Attention.apply(q, k, v, causal, sm_scale, impl, config)


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
