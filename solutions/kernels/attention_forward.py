"""FlashAttention forward (lesson 06), from correct to fast: the tuned kernel, behind the lesson's API.

The same attention as ``flash_attention.py`` (the kernel a learner writes), in four steps that
follow Triton's fused-attention tutorial (``06-fused-attention.py``) and the notebook's
*Going further*:

1. ``exp2`` instead of ``exp``, with log2(e) folded into the scale (one multiply less per score);
2. causal: the key blocks left of the diagonal run without any mask, only the diagonal is masked;
   non-causal: only the last, partial key block is masked (a compile-time ``MASK`` flag);
3. tensor descriptors (TMA on Hopper): made on the host, one of all heads, where N is a multiple
   of the blocks; else made in the kernel, one per head, so partial blocks read zeros and stores
   stop at the head's last row;
4. ``triton.autotune`` over ``FWD_CONFIGS`` (on a GPU; the interpreter uses one fixed config),
   warp-specialized loops among them.

This is the reference's fast path on a GPU: the benchmarks (``benchmarks/flash_attention.py``) and
the recorded H200 figures measure it, behind a lean launch (``attention.py``). ``impl="simple"``
runs the lesson's kernel instead.
"""

import math

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
from triton.tools.tensor_descriptor import TensorDescriptor

from tkcourse.mode import INTERPRET

from .._checks import ConfigSpec, boolean, integer, power_of_two, real, validate
from ..flash_attention import HEAD_DIMS, check_inputs, prepare, reference  # noqa: F401 (same API)
from ..flash_attention import attention_forward as _simple_forward


def set_descriptor_blocks(nargs):
    """Autotune pre-hook: host-made descriptors take the block shape of the config about to run."""
    for name, block in (("Q", "BLOCK_M"), ("K", "BLOCK_N"), ("V", "BLOCK_N"), ("O", "BLOCK_M")):
        if isinstance(nargs[name], TensorDescriptor):
            nargs[name].block_shape = [nargs[block], nargs["HEAD_DIM"]]


#: Autotune configs of the tuned forward kernel (GPU only), after Triton's fused-attention tutorial
#: (8 warps only on 128x128 tiles), plus 128x64 tiles with 8 warps and a warp-specialized loop
#: (tl.range(..., warp_specialize=True)): the compiler splits the loop's loads, matmuls and vector
#: maths into asynchronous partitions of warps (``tl.range``'s docs), so the K/V loads of the next
#: step overlap this step's maths; it won the H200 sweeps at D = 64 and 128 (PROVENANCE.md, FWD_CONFIGS).
#: It is tried only where it applies (non-causal, N % BLOCK_N == 0) and while FWD_TRY_WARP_SPECIALIZE
#: is set. No warp-specialized 128x128 config with 4 warps: Triton 3.6 fails to compile it with
#: host-made descriptors.
FWD_CONFIGS = [
    triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "WARP_SPECIALIZE": False}, num_warps=w, num_stages=s,
                  pre_hook=set_descriptor_blocks)
    for bm, bn, w in [(64, 32, 4), (64, 64, 4), (128, 32, 4), (128, 64, 4), (128, 128, 8)]
    for s in (2, 3, 4)
] + [
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 64, "WARP_SPECIALIZE": ws}, num_warps=8, num_stages=s,
                  pre_hook=set_descriptor_blocks)
    for ws, s in [(False, 3), (False, 4), (True, 3)]
]
#: Host-made tensor descriptors (one of all heads, built by the launcher) where N is a multiple of
#: every block (HOST_DESCRIPTOR_MULTIPLE) and at most HOST_DESCRIPTOR_MAX_N: a program then reads
#: through them directly instead of writing four descriptors to memory and fencing them before its
#: first load, a fixed cost that weighs most where programs are short (small N). At long N that cost
#: is spread over many key blocks and the in-kernel descriptors were as fast or faster on the H200,
#: hence the upper bound (PROVENANCE.md, HOST_DESCRIPTOR_MAX_N).
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


def prune_fwd_configs(configs, named_args, **kwargs):
    args = {**named_args, **kwargs}
    n, causal = args["N"], args["CAUSAL"]

    def keep(c):
        bm, bn, ws = c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.kwargs["WARP_SPECIALIZE"]
        if bm > max(n, 64) or (causal and bm < bn):  # no 128-row blocks for tiny N; causal: BLOCK_M >= BLOCK_N
            return False
        # a warp-specialized loop must be the kernel's only loop: non-causal, N a multiple of BLOCK_N
        return not ws or (FWD_TRY_WARP_SPECIALIZE and not causal and n % bn == 0)

    return [c for c in configs if keep(c)] or configs[:1]


@triton.jit
def attn_fwd_tuned_loop(
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
def head_descriptor(X, bh, N, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr):
    """(descriptor, first row) of head ``bh`` of X: a host-made descriptor of all heads as it is, with the
    head's rows from bh·N; or, for a pointer, a descriptor of this head alone, (N, D), made here."""
    if isinstance(X, tl.tensor_descriptor):
        return X, bh * N
    else:
        return tl.make_tensor_descriptor(X + bh.to(tl.int64) * N * HEAD_DIM, [N, HEAD_DIM], [HEAD_DIM, 1],
                                         [BLOCK, HEAD_DIM]), 0


@triton.jit
def attn_fwd_tuned(
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
    PDL: tl.constexpr = False,  # launched with programmatic dependent launch: wait for the kernel before
):
    start_m = tl.program_id(0)
    if CAUSAL:  # heaviest query blocks (most keys) first: a better-balanced tail
        start_m = tl.num_programs(0) - 1 - start_m
    bh = tl.program_id(1)
    # Made here from pointers: one descriptor per head, of shape (N, D), so a partial block past row N
    # loads zeros (never the next head's rows) and a store stops at row N. Made on the host (when
    # N is a multiple of the blocks): one descriptor of all heads, which this program need not write
    # to memory and fence before its first load.
    desc_q, row0 = head_descriptor(Q, bh, N, HEAD_DIM, BLOCK_M)
    desc_k, kv_row0 = head_descriptor(K, bh, N, HEAD_DIM, BLOCK_N)
    desc_v, _ = head_descriptor(V, bh, N, HEAD_DIM, BLOCK_N)
    desc_o, _ = head_descriptor(O, bh, N, HEAD_DIM, BLOCK_M)

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)  # running max, in base 2
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    qk_scale = sm_scale * 1.4426950408889634  # fold log2(e) in: exp(x·s) = exp2(x·s·log2 e)
    if PDL:  # nothing before this reads or writes memory (matmul_small.matmul_tma_kernel says why)
        gdc_wait()
    q = desc_q.load([row0 + start_m * BLOCK_M, 0])

    if CAUSAL:
        # stage 1: key blocks wholly left of the diagonal, no mask; stage 2: the diagonal, masked
        diag = (start_m * BLOCK_M // BLOCK_N) * BLOCK_N
        acc, l_i, m_i = attn_fwd_tuned_loop(acc, l_i, m_i, q, desc_k, desc_v, kv_row0, offs_m, 0, diag, N, qk_scale,
                                             BLOCK_N, False, CAUSAL, WARP_SPECIALIZE)
        acc, l_i, m_i = attn_fwd_tuned_loop(acc, l_i, m_i, q, desc_k, desc_v, kv_row0, offs_m, diag,
                                             tl.minimum((start_m + 1) * BLOCK_M, N), N, qk_scale,
                                             BLOCK_N, True, CAUSAL, WARP_SPECIALIZE)
    else:
        # all full key blocks without a mask, then the last, partial one (if any) masked
        n_full = (N // BLOCK_N) * BLOCK_N
        acc, l_i, m_i = attn_fwd_tuned_loop(acc, l_i, m_i, q, desc_k, desc_v, kv_row0, offs_m, 0, n_full, N, qk_scale,
                                             BLOCK_N, False, CAUSAL, WARP_SPECIALIZE)
        if not WARP_SPECIALIZE:  # a warp-specialized loop must be the only loop: WS needs N % BLOCK_N == 0
            acc, l_i, m_i = attn_fwd_tuned_loop(acc, l_i, m_i, q, desc_k, desc_v, kv_row0, offs_m, n_full, N, N, qk_scale,
                                                 BLOCK_N, True, CAUSAL, False)

    if PDL:
        gdc_launch_dependents()
    acc = acc / l_i[:, None]
    lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453  # base 2 -> natural log
    tl.store(LSE + bh.to(tl.int64) * N + offs_m, lse, mask=offs_m < N)
    desc_o.store([row0 + start_m * BLOCK_M, 0], acc.to(desc_o.dtype))


attn_fwd_autotuned = None
if not INTERPRET:  # autotune times kernels on a GPU; the interpreter cannot
    attn_fwd_autotuned = triton.autotune(
        configs=FWD_CONFIGS,
        key=["N", "HEAD_DIM", "CAUSAL"],
        prune_configs_by={"early_config_prune": prune_fwd_configs},
    )(attn_fwd_tuned)


# ---- grouped-query heads and a query shorter than its keys ------------------------------------
# q (B, Hq, N_Q, D), k and v (B, Hkv, N_KV, D), Hq = GROUP · Hkv: query head h reads KV head
# h // GROUP (MHA: GROUP = 1; MQA: Hkv = 1; GQA between: Ainslie et al., 2023). Causal attention
# aligns the mask to the end, as FlashAttention does (Dao, FlashAttention-2, 2023): query i sees
# keys j <= i + N_KV - N_Q, the last query sees every key (a prompt's chunk after a KV cache).
#
# A program handles one KV head's GROUP query heads together: their query rows, contiguous in
# memory ((B, Hq, N_Q, D) keeps the GROUP heads of a KV head side by side), are "packed" into one
# sequence of GROUP·N_Q rows, row r being query r % N_Q of head r // N_Q (FlashAttention-3's
# PackGQA, Shah et al., 2024). A block of BLOCK_M rows then reads each K/V block once for every
# head it covers: when N_Q is short (chunked prefill, N_Q = 1 in decode) one program serves several
# heads with one read of K and V instead of padding each head's few rows to a block. When N_Q is
# long, a block is one head's, and the grid's order (the packed blocks of one KV head next to each
# other) runs the GROUP heads that read the same K/V in the same waves, so K/V come from L2 rather
# than HBM about once per group. The equal-shape kernel above stays as it is: this one only adds a
# row's position (r % N_Q + N_KV - N_Q) for the causal mask and the per-block key range.


@triton.jit
def attn_fwd_gqa(
    Q,  # q, contiguous (B, Hq, N_Q, D): a pointer, or a host-made descriptor of (B·Hq·N_Q, D)
    K,  # k, contiguous (B, Hkv, N_KV, D): a pointer, or a host-made descriptor of (B·Hkv·N_KV, D)
    V,  # v, as K
    O,  # the output o, as Q
    LSE,  # pointer to the row log-sum-exp, fp32, contiguous (B, Hq, N_Q)
    N_Q,  # queries per head
    N_KV,  # keys per head (causal: N_KV >= N_Q)
    GROUP,  # query heads per KV head, Hq // Hkv
    sm_scale,  # softmax scale
    HEAD_DIM: tl.constexpr,  # D
    CAUSAL: tl.constexpr,  # causal attention, aligned to the end: query i sees keys j <= i + N_KV - N_Q
    BLOCK_M: tl.constexpr,  # packed query rows per program
    BLOCK_N: tl.constexpr,  # keys per loop step
    WARP_SPECIALIZE: tl.constexpr,  # warp-specialized K/V loop
    PDL: tl.constexpr = False,  # launched with programmatic dependent launch: wait for the kernel before
):
    pid = tl.program_id(0)
    if CAUSAL:  # heaviest blocks (latest queries, most keys) first, as attn_fwd_tuned
        pid = tl.num_programs(0) - 1 - pid
    bkv = tl.program_id(1)  # (batch, KV head)
    rows = GROUP * N_Q  # the group's packed query rows
    desc_q, row0 = head_descriptor(Q, bkv, rows, HEAD_DIM, BLOCK_M)
    desc_k, kv_row0 = head_descriptor(K, bkv, N_KV, HEAD_DIM, BLOCK_N)
    desc_v, _ = head_descriptor(V, bkv, N_KV, HEAD_DIM, BLOCK_N)
    desc_o, _ = head_descriptor(O, bkv, rows, HEAD_DIM, BLOCK_M)

    start_m = pid * BLOCK_M
    offs_r = start_m + tl.arange(0, BLOCK_M)
    shift = N_KV - N_Q  # the causal diagonal's offset: the last query sits on the last key
    pos = offs_r % N_Q + shift  # each row's place among the keys (the loop's causal mask compares it)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    qk_scale = sm_scale * 1.4426950408889634
    if PDL:
        gdc_wait()
    q = desc_q.load([row0 + start_m, 0])

    if CAUSAL:
        # The block's rows are one head's queries lo..hi, or (a block across two heads' rows) any of
        # 0..N_Q-1. Keys up to the first row's diagonal need no mask; up to the last row's are masked.
        last = tl.minimum(start_m + BLOCK_M, rows) - 1
        one_head = start_m // N_Q == last // N_Q
        lo_pos = tl.where(one_head, start_m % N_Q, 0) + shift
        hi_pos = tl.where(one_head, last % N_Q, N_Q - 1) + shift
        diag = ((lo_pos + 1) // BLOCK_N) * BLOCK_N
        acc, l_i, m_i = attn_fwd_tuned_loop(acc, l_i, m_i, q, desc_k, desc_v, kv_row0, pos, 0, diag, N_KV,
                                             qk_scale, BLOCK_N, False, CAUSAL, WARP_SPECIALIZE)
        acc, l_i, m_i = attn_fwd_tuned_loop(acc, l_i, m_i, q, desc_k, desc_v, kv_row0, pos, diag,
                                             tl.minimum(hi_pos + 1, N_KV), N_KV, qk_scale,
                                             BLOCK_N, True, CAUSAL, WARP_SPECIALIZE)
    else:
        n_full = (N_KV // BLOCK_N) * BLOCK_N
        acc, l_i, m_i = attn_fwd_tuned_loop(acc, l_i, m_i, q, desc_k, desc_v, kv_row0, pos, 0, n_full, N_KV,
                                             qk_scale, BLOCK_N, False, CAUSAL, WARP_SPECIALIZE)
        if not WARP_SPECIALIZE:
            acc, l_i, m_i = attn_fwd_tuned_loop(acc, l_i, m_i, q, desc_k, desc_v, kv_row0, pos, n_full, N_KV,
                                                 N_KV, qk_scale, BLOCK_N, True, CAUSAL, False)

    if PDL:
        gdc_launch_dependents()
    acc = acc / l_i[:, None]
    lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453
    tl.store(LSE + bkv.to(tl.int64) * rows + offs_r, lse, mask=offs_r < rows)
    desc_o.store([row0 + start_m, 0], acc.to(desc_o.dtype))


def prune_gqa_configs(configs, named_args, **kwargs):
    """``prune_fwd_configs`` for ``attn_fwd_gqa``: its rows are the packed GROUP·N_Q, its keys N_KV."""
    a = {**named_args, **kwargs}
    rows, n_kv, causal = a["GROUP"] * a["N_Q"], a["N_KV"], a["CAUSAL"]

    def keep(c):
        bm, bn, ws = c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.kwargs["WARP_SPECIALIZE"]
        if bm > max(rows, 64) or (causal and bm < bn):
            return False
        return not ws or (FWD_TRY_WARP_SPECIALIZE and not causal and n_kv % bn == 0)

    return [c for c in configs if keep(c)] or configs[:1]


#: The grouped-query forward autotunes over fewer configs: those of ``FWD_CONFIGS`` that won the
#: equal-head sweeps on the H200, as (BLOCK_M, BLOCK_N, num_warps, num_stages, WARP_SPECIALIZE). Six
#: compiles instead of seventeen on a key's first call (a prefill's); the H200 figures of the
#: grouped-query forward were measured with these (``research/attention/gqa_probe.py T``).
GQA_FWD_TILES = {(128, 64, 8, 3, False), (128, 64, 8, 3, True), (128, 128, 8, 2, False), (128, 128, 8, 3, False),
                 (128, 64, 4, 3, False), (64, 64, 4, 3, False)}
GQA_FWD_CONFIGS = [c for c in FWD_CONFIGS if (c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages,
                                              c.kwargs["WARP_SPECIALIZE"]) in GQA_FWD_TILES]
attn_fwd_gqa_autotuned = None
if not INTERPRET:
    attn_fwd_gqa_autotuned = triton.autotune(
        configs=GQA_FWD_CONFIGS,
        key=["N_Q", "N_KV", "GROUP", "HEAD_DIM", "CAUSAL"],
        prune_configs_by={"early_config_prune": prune_gqa_configs},
    )(attn_fwd_gqa)


def tma_scratch(size: int, alignment: int, stream):
    """Global memory for tensor descriptors made inside kernels (``tl.make_tensor_descriptor``)."""
    return torch.empty(size, device="cuda", dtype=torch.int8)


def descriptors(q, k, v, o, block_m, block_n=None, host=None):
    """The tuned kernel's Q, K, V, O: host-made descriptors of all heads, (B·H·N, D), with blocks of
    block_m rows (Q, O) and block_n rows (K, V; default block_m), where N is a multiple of both (so no
    block straddles two heads) and at most HOST_DESCRIPTOR_MAX_N; else the pointers themselves (the
    kernel then makes a descriptor per head). ``host``: False asks for the pointers always; None
    follows HOST_DESCRIPTORS. Autotuning resets the blocks per config (its pre-hook)."""
    B, H, N, D = q.shape
    block_n = block_n or block_m
    if not (HOST_DESCRIPTORS if host is None else host) or N % block_m or N % block_n or N > HOST_DESCRIPTOR_MAX_N:
        return [q, k, v, o]
    return [TensorDescriptor(t.view(B * H * N, D), [B * H * N, D], [D, 1], [block, D])
            for t, block in ((q, block_m), (k, block_n), (v, block_n), (o, block_m))]


def use_tuned(impl: str) -> bool:
    if impl not in ("auto", "simple", "tuned"):
        raise ValueError(f"impl must be 'auto', 'simple' or 'tuned', got {impl!r}")
    return impl == "tuned" or (impl == "auto" and not INTERPRET)


#: What a launch config takes: the lesson's keys, plus WARP_SPECIALIZE (the tuned kernel only).
_CONFIG = ConfigSpec({"BLOCK_M": (power_of_two, 16, 256), "BLOCK_N": (power_of_two, 16, 256),
                      "num_warps": (power_of_two, 1, 32), "num_stages": (integer, 1, 8),
                      "WARP_SPECIALIZE": (boolean, None, None)},
                     required=("BLOCK_M", "BLOCK_N"), defaults={"num_warps": 4, "num_stages": 2})


def _launch_config(config):
    """``config`` checked (TypeError/ValueError naming the key), with num_warps and num_stages filled in."""
    return _CONFIG(config, "config")


def attention_forward(q, k, v, causal=False, sm_scale=None, impl="auto", config=None, host_descriptors=None):
    """``(o, lse)`` for q, k, v of shape (B, H, N, D), without autograd, as the lesson's; or for q of
    (B, Hq, N_Q, D) and k, v of (B, Hkv, N_KV, D) (grouped-query heads, a query shorter than its keys:
    ``check_gqa_inputs``), ``lse`` then of shape (B, Hq, N_Q).

    ``impl``: "tuned" (this module's kernel), "simple" (the lesson's), "auto" (tuned on a GPU, simple
    in the interpreter, where the tuned kernel is only slower). ``config`` ({BLOCK_M, BLOCK_N,
    num_warps, num_stages, WARP_SPECIALIZE}) launches exactly that config, without autotune;
    Triton's own errors (e.g. out of shared memory) propagate. ``host_descriptors``: False makes the
    kernel build its own descriptors, one per head, where host-made ones would apply (None: where
    HOST_DESCRIPTORS and the shape allow), so that the two can be compared.
    """
    if grouped(q, k, v):  # grouped-query heads or N_Q != N_KV: attn_fwd_gqa
        return _gqa_forward(q, k, v, causal, sm_scale, impl, config, host_descriptors)
    sm_scale = check_inputs(q, k, v, sm_scale)
    causal = boolean("causal", causal)
    host = None if host_descriptors is None else boolean("host_descriptors", host_descriptors)
    if config is not None:
        config = _launch_config(config)  # before any work: a bad key or value names itself
    if not use_tuned(impl):
        if config is not None:
            config.pop("WARP_SPECIALIZE", None)  # the lesson's kernel has a single loop, nothing to split
        return _simple_forward(q, k, v, causal=causal, sm_scale=sm_scale, config=config)
    q, k, v = prepare(q), prepare(k), prepare(v)
    B, H, N, D = q.shape
    o = torch.empty_like(q)
    lse = torch.empty((B, H, N), device=q.device, dtype=torch.float32)
    causal = bool(causal)

    if not INTERPRET:
        triton.set_allocator(tma_scratch)  # set here: ContextVars do not follow other threads
    if config is None and attn_fwd_autotuned is not None and N >= AUTOTUNE_MIN_N:
        grid = lambda meta: (triton.cdiv(N, meta["BLOCK_M"]), B * H)
        args = descriptors(q, k, v, o, HOST_DESCRIPTOR_MULTIPLE, host=host)  # every config's blocks divide it
        attn_fwd_autotuned[grid](*args, lse, N, sm_scale, HEAD_DIM=D, CAUSAL=causal)
    else:
        cfg = _launch_config(config if config is not None else INTERPRET_CONFIG if INTERPRET else SMALL_N_CONFIG)
        ws = bool(cfg.pop("WARP_SPECIALIZE", False))
        if ws and (causal or N % cfg["BLOCK_N"]):
            raise ValueError("WARP_SPECIALIZE=True needs causal=False and N a multiple of BLOCK_N "
                             "(a warp-specialized loop must be the kernel's only loop)")
        args = descriptors(q, k, v, o, cfg["BLOCK_M"], cfg["BLOCK_N"], host=host)
        grid = (triton.cdiv(N, cfg["BLOCK_M"]), B * H)
        attn_fwd_tuned[grid](*args, lse, N, sm_scale, HEAD_DIM=D, CAUSAL=causal, WARP_SPECIALIZE=ws, **cfg)
    return o, lse


def grouped(q, k, v) -> bool:
    """Whether q, k, v take the grouped path (``attn_fwd_gqa``): three 4-D tensors, k's shape not q's.
    Anything else goes to the equal-shape path and its checks."""
    return (isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor) and isinstance(v, torch.Tensor)
            and q.dim() == k.dim() == v.dim() == 4 and q.shape != k.shape)


def check_gqa_inputs(q, k, v, causal, sm_scale):
    """``(sm_scale, causal)`` for q (B, Hq, N_Q, D), k and v (B, Hkv, N_KV, D), after checking them: one
    dtype and device, Hq a multiple of Hkv, the same B and D, and N_Q <= N_KV when causal (the mask is
    aligned to the end: query i sees keys j <= i + N_KV - N_Q). A ValueError names what is wrong."""
    validate(q, k, v, names=["q", "k", "v"], ndim=4)
    causal = bool(boolean("causal", causal))
    (B, Hq, Nq, D), (Bk, Hkv, Nk, Dk) = q.shape, k.shape
    if v.shape != k.shape:
        raise ValueError(f"k has shape {tuple(k.shape)} but v has {tuple(v.shape)}; k and v must match")
    if Bk != B:
        raise ValueError(f"q has batch size B = {B} but k and v have {Bk}; they must match")
    if Dk != D:
        raise ValueError(f"q has head dimension D = {D} but k and v have {Dk}; they must match")
    if D not in HEAD_DIMS:
        raise ValueError(f"head dimension D = q.shape[-1] = {D} is not supported; use one of {HEAD_DIMS} "
                         f"(pad D with zeros up to the next supported size)")
    if Hq % Hkv:
        raise ValueError(f"q has Hq = {Hq} heads and k, v have Hkv = {Hkv}: Hq must be a multiple of Hkv "
                         f"(query head h reads KV head h // (Hq // Hkv))")
    if causal and Nq > Nk:
        raise ValueError(f"causal=True needs N_Q <= N_KV (the mask is aligned to the last key), got q with "
                         f"N_Q = {Nq} queries and k, v with N_KV = {Nk} keys; pass causal=False")
    return (1.0 / math.sqrt(D) if sm_scale is None else real("sm_scale", sm_scale)), causal


def gqa_descriptors(q, k, v, o, block_m, block_n=None, host=None):
    """``descriptors`` for ``attn_fwd_gqa``: host-made descriptors of all rows, (B·Hq·N_Q, D) for Q and O
    and (B·Hkv·N_KV, D) for K and V, where a KV head's packed query rows (GROUP·N_Q) are a multiple of
    block_m and N_KV one of block_n, at most HOST_DESCRIPTOR_MAX_N; else the pointers themselves."""
    Hq, Nq, D = q.shape[1:]
    Hkv, Nk = k.shape[1:3]
    block_n = block_n or block_m
    rows = Hq // Hkv * Nq
    if not (HOST_DESCRIPTORS if host is None else host) or rows % block_m or Nk % block_n or Nk > HOST_DESCRIPTOR_MAX_N:
        return [q, k, v, o]
    return [TensorDescriptor(t.view(t.numel() // D, D), [t.numel() // D, D], [D, 1], [block, D])
            for t, block in ((q, block_m), (k, block_n), (v, block_n), (o, block_m))]


def gqa_grid(q, k):
    """The grid of ``attn_fwd_gqa``: (packed row blocks of a KV head, B·Hkv)."""
    B, Hq, Nq, _ = q.shape
    Hkv = k.shape[1]
    rows = Hq // Hkv * Nq
    return lambda meta: (triton.cdiv(rows, meta["BLOCK_M"]), B * Hkv)


def gqa_outputs(q, k, v):
    """q, k, v as the kernel reads them (``prepare``), and new o and lse (fp32) for them; on a GPU, the
    allocator for descriptors made in the kernel. What a first launch of ``attn_fwd_gqa`` needs."""
    q, k, v = prepare(q), prepare(k), prepare(v)
    o = torch.empty_like(q)
    lse = torch.empty(q.shape[:3], device=q.device, dtype=torch.float32)
    if not INTERPRET:
        triton.set_allocator(tma_scratch)
    return q, k, v, o, lse


def _gqa_forward(q, k, v, causal, sm_scale, impl, config, host_descriptors):
    sm_scale, causal = check_gqa_inputs(q, k, v, causal, sm_scale)
    host = None if host_descriptors is None else boolean("host_descriptors", host_descriptors)
    if config is not None:
        config = _launch_config(config)
    use_tuned(impl)  # an unknown impl names itself
    if impl == "simple":
        raise ValueError("impl='simple' (the lesson's kernel) takes q, k, v of one shape; grouped-query heads "
                         "and N_Q != N_KV run in the tuned kernel: impl='auto' or 'tuned'")
    q, k, v, o, lse = gqa_outputs(q, k, v)
    Hq, Nq, D = q.shape[1:]
    Nk, group = k.shape[2], Hq // k.shape[1]
    grid = gqa_grid(q, k)
    if config is None and attn_fwd_gqa_autotuned is not None and max(group * Nq, Nk) >= AUTOTUNE_MIN_N:
        args = gqa_descriptors(q, k, v, o, HOST_DESCRIPTOR_MULTIPLE, host=host)
        attn_fwd_gqa_autotuned[grid](*args, lse, Nq, Nk, group, sm_scale, HEAD_DIM=D, CAUSAL=causal)
    else:
        cfg = _launch_config(config if config is not None else INTERPRET_CONFIG if INTERPRET else SMALL_N_CONFIG)
        ws = bool(cfg.pop("WARP_SPECIALIZE", False))
        if ws and (causal or Nk % cfg["BLOCK_N"]):
            raise ValueError("WARP_SPECIALIZE=True needs causal=False and N_KV a multiple of BLOCK_N "
                             "(a warp-specialized loop must be the kernel's only loop)")
        args = gqa_descriptors(q, k, v, o, cfg["BLOCK_M"], cfg["BLOCK_N"], host=host)
        attn_fwd_gqa[grid](*args, lse, Nq, Nk, group, sm_scale, HEAD_DIM=D, CAUSAL=causal, WARP_SPECIALIZE=ws, **cfg)
    return o, lse


def attention(q, k, v, causal=False, sm_scale=None, config=None, impl="auto"):
    """FlashAttention's forward, as the lesson's ``attention``; see ``attention_forward`` for ``impl``
    and ``config``. The trainable layer with this forward is ``attention_backward.attention``."""
    return attention_forward(q, k, v, causal=causal, sm_scale=sm_scale, impl=impl, config=config)[0]
