# Exercise generated from solutions/decode_attention.py by `make exercises`. Fill in the parts marked TODO.
# Your edits are safe: the generator never overwrites a file you have changed.
# Check your work: `tkcourse check decode_attention` in a shell, or tkcourse.check.run("decode_attention") in a notebook.
"""Lesson 09, part 2: decode attention over a paged KV cache (flash-decoding).

One new token per sequence attends to everything its sequence has cached:
``out[b, h] = softmax(sm_scale · q[b, h] · K_bᵀ) V_b`` over the first ``seq_lens[b]`` cached keys.
Shapes: q (B, Hq, D); k_cache, v_cache (num_pages, page_size, Hkv, D), one pool of fixed-size pages
shared by all sequences (vLLM's PagedAttention, Kwon et al. 2023); block_table (B, max_pages) int32
maps sequence b's logical page p (its tokens p·page_size .. (p+1)·page_size - 1) to a physical page
of the pool; seq_lens (B,) int32. Grouped-query attention (Ainslie et al. 2023): Hq = G·Hkv, and
query head h reads KV head h // G.

Traffic: read K and V once, 2·L·Hkv·D elements for L = Σ seq_lens cached tokens, plus q and out
(2·B·Hq·D); the partials are B·Hq·splits·(D + 2) fp32, written once and read once. FLOPs are
4·L·Hq·D: G FLOPs a byte in fp16 (4 at G = 4), far left of the H200's ridge (lesson 00's
roofline), so decode is memory-bound and the goal is the HBM bandwidth of a copy.

Two kernels (flash-decoding, Dao et al. 2023):

1. ``decode_split``: a program per (sequence, KV head, split). It loads the G query heads that
   share its KV head as one (BLOCK_G, D) block, so each K/V token is read from HBM once for all of
   them, and runs lesson 06's online softmax over its split's keys, BLOCK_N tokens a step, each
   token's address found through the block table. It writes its partial result: the running max
   m, the running sum l and the unnormalized accumulator.
2. ``decode_combine``: a program per (sequence, query head) merges the splits' partials with
   lesson 05's rule: m = max m_i, out = Σ exp(m_i - m)·acc_i / Σ exp(m_i - m)·l_i.

One program per (sequence, head) would leave most of the GPU idle at small batches (B·Hkv = 64
programs for 132 SMs at B = 8), hence the splits. ``solutions/kernels/decode_attention.py`` picks
the split count and blocks for the H200, behind the same API and a lean launch; it uses this
file's ``check_inputs``, ``reference`` and ``LOG2E``; its two kernels are its own versions of the two here.
"""

import math

import torch
import triton
import triton.language as tl

from tkcourse.mode import INTERPRET

from exercises._checks import power_of_two, real, validate

HEAD_DIMS = (64, 128)
LOG2E = 1.4426950408889634  # exp(x) = exp2(x · log2(e))


@triton.jit
def decode_split(
    Q,  # pointer to q, (B, Hq, D), contiguous
    K,  # pointer to k_cache, (num_pages, PAGE_SIZE, Hkv, D), contiguous
    V,  # pointer to v_cache, same layout as K
    SEQ_LENS,  # pointer to seq_lens, (B,) int32
    BLOCK_TABLE,  # pointer to block_table, (B, max_pages) int32, contiguous
    M,  # pointer to the partial maxima, (B, Hq, SPLITS) fp32, in log2 units
    L,  # pointer to the partial sums, (B, Hq, SPLITS) fp32
    ACC,  # pointer to the partial accumulators, (B, Hq, SPLITS, D) fp32
    max_pages,  # columns of the block table
    split_tokens,  # tokens per split, a multiple of BLOCK_N
    qk_scale,  # sm_scale · log2(e): scores in log2 units, so that exp2 gives exp
    splits,  # splits per sequence
    HKV: tl.constexpr,  # KV heads
    GROUP: tl.constexpr,  # G = Hq // Hkv, query heads per KV head
    BLOCK_G: tl.constexpr,  # G rounded up to a power of two, at least 16 (an MMA's rows; Triton would pad fewer)
    HEAD_DIM: tl.constexpr,  # D
    PAGE_SIZE: tl.constexpr,  # tokens per page, a power of two
    BLOCK_N: tl.constexpr,  # tokens per step, a power of two
):
    # TODO: your code here
    # 1. bh = program_id(0) -> b = bh // HKV, kvh = bh % HKV; split = program_id(1)
    # 2. this split's tokens: start = split * split_tokens, end = min(start + split_tokens, seq_lens[b])
    # 3. load the G query heads of kvh, heads = kvh * GROUP + arange(BLOCK_G), as a (BLOCK_G, D) block
    #    (rows >= GROUP masked, other=0); m_i = -inf, l_i = 0, acc = 0 (fp32)
    # 4. loop n over start..end step BLOCK_N, pos = n + arange(BLOCK_N), valid = pos < end:
    #    a. page = block_table[b, pos // PAGE_SIZE]; the pool row of token pos is
    #       (page * PAGE_SIZE + pos % PAGE_SIZE) * HKV + kvh (in int64), D elements each; load k and v
    #    b. s = dot(q, trans(k)) * qk_scale, -inf where not valid (qk_scale holds log2(e): use exp2)
    #    c. the online softmax of lesson 06: m_new, alpha = exp2(m_i - m_new), p, l_i, acc, m_i
    # 5. store m_i, l_i and acc at slot (b * HKV * GROUP + heads) * splits + split (rows < GROUP)
    pass


@triton.jit
def decode_combine(
    M,  # pointer to the partial maxima, (B, Hq, SPLITS) fp32, log2 units
    L,  # pointer to the partial sums, (B, Hq, SPLITS) fp32
    ACC,  # pointer to the partial accumulators, (B, Hq, SPLITS, D) fp32
    O,  # pointer to out, (B, Hq, D), contiguous
    HEAD_DIM: tl.constexpr,  # D
    SPLITS: tl.constexpr,  # splits per sequence
    BLOCK_S: tl.constexpr,  # SPLITS rounded up to a power of two
):
    # TODO: your code here
    # 1. bh = program_id(0); load the SPLITS partials m_s, l_s (SPLITS,) and acc (SPLITS, D) of this head
    #    (splits >= SPLITS masked: m -> -inf, l and acc -> 0)
    # 2. m = max(m_s); w = exp2(m_s - m): every split rescaled to the common max (lesson 05's rule)
    # 3. out = sum(w * acc, over splits) / sum(w * l_s); store it in O's dtype at O + bh * D
    pass


def check_inputs(q, k_cache, v_cache, seq_lens, block_table, sm_scale, check_values=True, head_dims=None,
                 min_page_size=16):
    """The softmax scale (1/sqrt(D) by default), after checking the arguments (ValueError naming what is wrong).

    ``check_values``: also check that every ``seq_lens[b]`` is in 1 .. max_pages · page_size and every
    page of the block table lies in the pool (one device sync; the tuned launcher skips it, as serving
    engines do, and its kernel flags such a sequence instead). ``head_dims`` (default ``HEAD_DIMS``) and
    ``min_page_size``: what the kernel that follows takes (the tuned one takes more).
    """
    head_dims = HEAD_DIMS if head_dims is None else head_dims
    validate(q, names=["q"], ndim=3)
    validate(k_cache, v_cache, names=["k_cache", "v_cache"], ndim=4, same_shape=True)
    validate(q, k_cache, names=["q", "k_cache"])  # one dtype and device
    B, Hq, D = q.shape
    num_pages, page_size, Hkv, Dk = k_cache.shape
    if D not in head_dims:
        raise ValueError(f"head dimension D = q.shape[-1] = {D} is not supported; use one of {head_dims}")
    if Dk != D:
        raise ValueError(f"k_cache has head dimension {Dk} but q has {D}; they must match")
    if page_size < min_page_size or page_size & (page_size - 1):
        raise ValueError(f"page_size = k_cache.shape[1] = {page_size} must be a power of two, at least {min_page_size}")
    if Hq % Hkv:
        raise ValueError(f"q has {Hq} heads, not a multiple of the cache's {Hkv} KV heads (k_cache.shape[2])")
    for name, t, shape in (("seq_lens", seq_lens, (B,)), ("block_table", block_table, None)):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.int32 or t.device != q.device:
            raise ValueError(f"{name} must be an int32 tensor on {q.device}, got "
                             f"{getattr(t, 'dtype', type(t).__name__)} on {getattr(t, 'device', '-')}")
    if tuple(seq_lens.shape) != (B,):
        raise ValueError(f"seq_lens must have shape ({B},), one length per sequence of q; got {tuple(seq_lens.shape)}")
    if block_table.dim() != 2 or block_table.shape[0] != B or block_table.shape[1] == 0:
        raise ValueError(f"block_table must have shape ({B}, max_pages); got {tuple(block_table.shape)}")
    if check_values:
        cap = block_table.shape[1] * page_size
        if not bool(((seq_lens >= 1) & (seq_lens <= cap)).all()):
            raise ValueError(f"every seq_lens[b] must be from 1 to max_pages * page_size = {cap}; got {seq_lens.tolist()}")
        if not bool(((block_table >= 0) & (block_table < num_pages)).all()):
            raise ValueError(f"block_table holds pages outside the pool of {num_pages} pages (0 .. {num_pages - 1})")
    return 1.0 / math.sqrt(D) if sm_scale is None else real("sm_scale", sm_scale)


#: Tokens per step and the target number of splits. Small in the interpreter (it runs every program
#: in turn, and several splits per sequence show the combine at work); on a GPU 64 tokens a step and
#: enough splits for about four programs per SM: B·Hkv·splits >= 4 · 132.
BLOCK_N = 16 if INTERPRET else 64
SM_PROGRAMS = 4 * 132


def split_plan(B, Hkv, max_pages, page_size, block_n, splits=None):
    """(splits, split_tokens): each split a multiple of block_n tokens, together covering the block table."""
    capacity = max_pages * page_size
    if splits is None:
        splits = 4 if INTERPRET else max(1, min(triton.cdiv(SM_PROGRAMS, B * Hkv), triton.cdiv(capacity, 256)))
    split_tokens = triton.cdiv(triton.cdiv(capacity, splits), block_n) * block_n
    return triton.cdiv(capacity, split_tokens), split_tokens  # no split left empty by rounding up


def decode_attention(q, k_cache, v_cache, seq_lens, block_table, sm_scale=None):
    """Attention of one query per sequence against its paged KV cache; returns (B, Hq, D) in q's dtype.

    q (B, Hq, D); k_cache, v_cache (num_pages, page_size, Hkv, D); seq_lens (B,) int32, each >= 1;
    block_table (B, max_pages) int32, logical page -> physical page. ``sm_scale`` defaults to 1/sqrt(D).
    """
    sm_scale = check_inputs(q, k_cache, v_cache, seq_lens, block_table, sm_scale)
    return launch(q, k_cache, v_cache, seq_lens, block_table, sm_scale, BLOCK_N, None, {}, {})


def launch(q, k_cache, v_cache, seq_lens, block_table, sm_scale, block_n, splits, split_opts, combine_opts):
    """Both kernels for checked inputs: ``splits`` None for ``split_plan``'s; ``*_opts``: num_warps, num_stages."""
    q, k_cache, v_cache, seq_lens, block_table = (t.contiguous() for t in (q, k_cache, v_cache, seq_lens, block_table))
    B, Hq, D = q.shape
    _, page_size, Hkv, _ = k_cache.shape
    block_n = power_of_two("block_n", block_n, 16, 1024)
    splits, split_tokens = split_plan(B, Hkv, block_table.shape[1], page_size, block_n, splits)
    m = torch.empty((B, Hq, splits), device=q.device, dtype=torch.float32)
    l = torch.empty((B, Hq, splits), device=q.device, dtype=torch.float32)
    acc = torch.empty((B, Hq, splits, D), device=q.device, dtype=torch.float32)
    out = torch.empty_like(q)
    group = Hq // Hkv
    # TODO: your code here
    # decode_split on its grid (a program per sequence, KV head and split), then decode_combine on its
    # own (a program per sequence and query head). Each takes the arguments its signature lists, in that
    # order: tensors and buffers, then the scalars (the scale in log2 units, as qk_scale says), then its
    # constants as keywords, and split_opts / combine_opts (num_warps, num_stages) as **keywords.
    pass
    return out


def reference(q, k_cache, v_cache, seq_lens, block_table, sm_scale=None):
    """What ``decode_attention`` must return, in plain torch (fp16 in fp32; runs in float64 too): each
    sequence's keys and values gathered from its pages, then softmax(scale · q kᵀ) v, KV head h // G."""
    B, Hq, D = q.shape
    page_size, Hkv = k_cache.shape[1], k_cache.shape[2]
    scale = 1.0 / math.sqrt(D) if sm_scale is None else sm_scale
    dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    out = torch.empty_like(q)
    for b in range(B):
        n = int(seq_lens[b])
        pages = block_table[b, : triton.cdiv(n, page_size)].long()
        k, v = (c[pages].reshape(-1, Hkv, D)[:n].to(dtype).repeat_interleave(Hq // Hkv, dim=1).transpose(0, 1)
                for c in (k_cache, v_cache))  # (Hq, n, D): query head h sees KV head h // G
        s = (k @ q[b].to(dtype)[:, :, None])[..., 0] * scale  # (Hq, n)
        out[b] = (torch.softmax(s, dim=-1)[:, None, :] @ v)[:, 0].to(q.dtype)
    return out
