"""A Llama-style language model that generates text with the course's kernels (the capstone).

The model is Llama's (Touvron et al. 2023, "LLaMA"; Llama 3's shapes in ``Config.llama3_8b``): token
embedding, ``n_layers`` blocks of

    h = x + attention(rmsnorm(x))         # RoPE on q and k, grouped-query heads, causal
    x = h + down(swiglu(gate_up(rmsnorm(h))))

then a final RMSNorm and the output projection (the "LM head", not tied to the embedding). Every
function takes ``kernels``: ``"torch"`` runs it in plain torch ops (the reference), ``"course"`` runs
it on the course's kernel library, ``solutions.kernels``:

=====================  ===========================================  ===============================
piece                  torch                                        course (lesson)
=====================  ===========================================  ===============================
RMSNorm + residual     ``x + r``, fp32 statistics                   ``rmsnorm.rmsnorm`` (09)
projections            ``F.linear``                                 ``matmul.matmul`` (03) or
                                                                    ``int4_matmul.matmul`` (10)
RoPE                   rotate-half (Su et al. 2021, RoFormer)       ``rope.rope``, in place; with a
                                                                    cache, ``kv_cache.rope_write``
                                                                    (RoPE and the cache's write)
attention, prefill     SDPA with ``enable_gqa``, causal             ``attention.attention_forward``
                                                                    (06; GQA, Ainslie et al. 2023)
attention, decode      two matmuls over a contiguous cache, masked  ``decode_attention`` (09; paged
                                                                    KV, Kwon et al. 2023; split-KV,
                                                                    Flash-Decoding)
SwiGLU                 ``silu(gate) * up`` (Shazeer 2020)           ``swiglu.swiglu``
=====================  ===========================================  ===============================

**Weights** (``Weights``) are stored as ``nn.Linear`` stores them, (out, in), two of them fused: ``wqkv``
is q's rows, then k's, then v's (``((Hq + 2·Hkv)·D, d_model)``) and ``w_gate_up`` is gate's rows, then
up's (``(2F, d_model)``). Each path prepares its own copy once and keeps it with the weights
(``prepare``): the course's matmul multiplies (M, K) by (K, N), so it keeps each weight transposed
and contiguous; ``int4=True`` keeps each projection quantized (``solutions.int4_matmul.quantize``,
groups of 128 along K, every projection including the LM head), and the torch path with ``int4=True``
runs on the dequantized weights, the reference for the int4 kernel.

**Generation** (``generate``): a prefill runs the prompt in one forward pass and writes its keys and
values into a static KV cache, then each decode step runs one token a sequence and appends its key and
value. The torch path's cache is contiguous, ``(B, Hkv, S, D)`` a layer, and a step attends over all
``S`` slots with the future masked, so that its shapes never change (what ``torch.compile`` and CUDA
graphs need). The course's cache is paged (vLLM's PagedAttention, Kwon et al. 2023): a pool of pages
of ``PAGE_SIZE`` tokens and a block table that says which page holds which tokens of a sequence;
here each sequence owns a fixed run of pages, the simplest table. Decoding is greedy (argmax).

``graph=True`` (either path, on a GPU): the decode step is captured once in a CUDA graph and
replayed, so that a step costs one launch on the host instead of about ten per layer (lesson 08); the
step keeps its position and its token in device tensors and advances them itself, so the loop never
waits for the GPU. On a CPU (Triton's interpreter) there are no graphs and ``graph`` is ignored.

**Your kernels in the model** (``swap``): inside ``with swap(rmsnorm=f, ...)`` the course path calls
``f`` where it called the library's function of that name (``PIECES``), e.g. a lesson's exercise; the
tokens should not change (lesson 11 does this piece by piece).

**The shipped model** (``load()``, ``SHIPPED``): ``Config.tiny()`` trained by
``research/llm/train_tiny.py`` on the Python standard library's source, fp16, 6.6 MB.

**Tokens** are UTF-8 bytes (``encode``/``decode``): a vocabulary of 256, no tokenizer to download.
**Files** (``save``/``load``): ``torch.save`` of ``{"format": FORMAT, "config": dict, "weights":
{name: tensor}}``, the names of ``Weights.state_dict``. Those, the config and the weights live in
``solutions/llm_weights.py``; this file imports them, and runs the model.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from tkcourse.mode import INTERPRET

from . import int4_matmul as int4_lesson
from .kernels import attention as k_attention
from .kernels import decode_attention as k_decode
from .kernels import int4_matmul as k_int4
from .kernels import kv_cache as k_kv_cache
from .kernels import matmul as k_matmul
from .kernels import rmsnorm as k_rmsnorm
from .kernels import rope as k_rope
from .kernels import swiglu as k_swiglu
from .kernels import without_pdl
from .llm_weights import FORMAT, SHIPPED, Config, Layer, Weights, decode, encode, load, random_weights, save

__all__ = ["Config", "Weights", "Layer", "random_weights", "encode", "decode", "save", "load", "SHIPPED", "swap",
           "swapped", "PIECES", "step_bytes", "step_profile", "step_kernels", "piece_of", "OTHER", "prepare",
           "logits", "forward", "generate", "new_cache", "prefill", "decode_step", "KERNELS", "FORMAT", "PAGE_SIZE",
           "GROUP_SIZE"]

KERNELS = ("course", "torch")
#: Tokens a page of the course's paged KV cache holds (a power of two, as ``decode_attention`` asks).
PAGE_SIZE = 16
#: Input features that share one int4 scale (the course's int4 kernel plans for 128).
GROUP_SIZE = 128
#: The matmul's tiles in Triton's interpreter, where a program costs Python time rather than GPU time:
#: the largest N and K tiles the lesson's config takes (512) and 64 rows, one to three programs a projection of
#: the shipped model at one row or a short prompt (each program costs its Python overhead, whatever its size). On a GPU, None: the
#: library's own plan (split-K at decode sizes, autotuned at prefill sizes).
MATMUL_CONFIG = dict(BLOCK_M=64, BLOCK_N=512, BLOCK_K=512, GROUP_M=1, num_warps=4, num_stages=1) if INTERPRET else None
#: Decode attention's plan in the interpreter: one program a (sequence, KV head) reading 64 tokens a step,
#: the fewest programs and steps for a small model's short caches. On a GPU, None: the library's plan
#: from the SM count.
DECODE_CONFIG = dict(BLOCK_N=64, splits=1, num_warps=4, num_stages=1, combine_warps=1) if INTERPRET else None


# ---- the two sets of ops: torch (the reference) and the course's kernels ----
@dataclass
class _Prepared:
    """One path's weights, made once: projections as that path multiplies them, RoPE tables."""
    config: Config
    kernels: str
    int4: bool
    embed: torch.Tensor
    layers: list  # per layer: dict of norms and projections
    norm: torch.Tensor
    lm_head: object
    cos: torch.Tensor  # (max_seq, D/2) fp32
    sin: torch.Tensor


def prepare(weights: Weights, kernels: str = "course", int4: bool = False) -> _Prepared:
    """The weights as ``kernels`` runs them, made on the first call and kept in ``weights.prepared``."""
    if kernels not in KERNELS:
        raise ValueError(f"kernels must be one of {KERNELS}, got {kernels!r}")
    if not isinstance(int4, bool):
        raise ValueError(f"int4 must be True or False, got {int4!r}")
    key = (kernels, int4)
    if key not in weights.prepared:
        c = weights.config
        if int4:
            for name, w in (("d_model", weights.embed), ("ffn_dim", weights.layers[0].w_down)):
                if w.shape[1] % GROUP_SIZE:
                    raise ValueError(f"int4=True needs config.{name} = {w.shape[1]} to be a multiple of "
                                     f"{GROUP_SIZE} (each projection's K is cut into groups of {GROUP_SIZE})")
            if weights.dtype not in (torch.float16, torch.bfloat16):
                raise ValueError(f"int4=True needs float16 or bfloat16 weights, got {weights.dtype}")

        def lin(w):
            if int4:
                packed, scales = int4_lesson.quantize(w, GROUP_SIZE)
                if kernels == "torch":
                    return int4_lesson.dequantize(packed, scales, GROUP_SIZE)
                return packed, scales
            return w.t().contiguous() if kernels == "course" else w

        layers = [dict(attn_norm=L.attn_norm, mlp_norm=L.mlp_norm, wqkv=lin(L.wqkv), wo=lin(L.wo),
                       w_gate_up=lin(L.w_gate_up), w_down=lin(L.w_down)) for L in weights.layers]
        cos, sin = k_rope.rope_tables(c.max_seq, c.head_dim, c.rope_theta, device=weights.device)
        weights.prepared[key] = _Prepared(c, kernels, int4, weights.embed, layers, weights.norm,
                                          lin(weights.lm_head), cos, sin)
    return weights.prepared[key]


def _rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


class _TorchOps:
    """The reference, in the weights' dtype as Hugging Face's ``LlamaModel`` computes it."""

    @staticmethod
    def rmsnorm(x, w, eps, residual):
        h = x if residual is None else x + residual
        hf = h.float()
        return w * (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps)).to(h.dtype), h

    @staticmethod
    def linear(x, w):
        return F.linear(x, w)

    @staticmethod
    def rope(q, k, cos, sin, positions):  # q (B, T, Hq, D), k (B, T, Hkv, D), positions (B, T)
        c, s = cos[positions], sin[positions]  # (B, T, D/2)
        c = torch.cat([c, c], -1)[:, :, None].to(q.dtype)
        s = torch.cat([s, s], -1)[:, :, None].to(q.dtype)
        return q * c + _rotate_half(q) * s, k * c + _rotate_half(k) * s

    @staticmethod
    def swiglu(gate_up):
        gate, up = gate_up.chunk(2, dim=-1)
        return F.silu(gate) * up

    @staticmethod
    def attention(q, k, v):  # (B, T, H, D) each, causal; out (B, T, Hq, D)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           is_causal=True, enable_gqa=True)
        return o.transpose(1, 2)


#: The kernels of the course path a learner can replace with their own (``swap``): each name, the
#: function of the kernel library it stands for (same arguments, same results), and its lesson.
PIECES = {
    "rmsnorm": ("solutions.kernels.rmsnorm.rmsnorm(x, weight, eps, residual=None)", "09"),
    "matmul": ("solutions.kernels.matmul.matmul(a, b)", "03"),
    "int4_matmul": ("solutions.kernels.int4_matmul.matmul(x, packed, scales, group_size)", "10"),
    "attention_forward": ("solutions.kernels.attention.attention_forward(q, k, v, causal=True) -> (o, lse)", "06"),
    "decode_attention": ("solutions.kernels.decode_attention.decode_attention(q, k_cache, v_cache, seq_lens, "
                         "block_table)", "09"),
}
_SWAPPED: dict = {}  # piece -> the function that runs in its place (``swap``)


@contextlib.contextmanager
def swap(**pieces):
    """Inside ``with swap(rmsnorm=f, ...)``, the course path calls ``f`` where it called the kernel
    library's function of that name (``PIECES``: same arguments and results), for instance a lesson's
    exercise, ``swap(rmsnorm=tkcourse.exercise("rmsnorm").rmsnorm)``. A piece given None keeps the
    library's. The attention forward of lesson 06 takes as many K/V heads as query heads: with
    grouped-query weights, each K/V head is repeated for its group before the call. The torch path
    never changes."""
    unknown = sorted(set(pieces) - set(PIECES))
    if unknown:
        raise ValueError(f"swap: no piece named {', '.join(unknown)}; the pieces are {', '.join(PIECES)}")
    for name, f in pieces.items():
        if f is not None and not callable(f):
            raise ValueError(f"swap: {name} must be a function (or None), got {type(f).__name__}")
    before = dict(_SWAPPED)
    _SWAPPED.update({k: f for k, f in pieces.items() if f is not None})
    try:
        yield
    finally:
        _SWAPPED.clear()
        _SWAPPED.update(before)


def swapped() -> dict:
    """The pieces replaced now (``swap``): ``{name: function}``."""
    return dict(_SWAPPED)


class _CourseOps:
    """The course's kernels, each behind its lean launch (``solutions.kernels``), or what ``swap`` put in
    their place."""

    @staticmethod
    def rmsnorm(x, w, eps, residual):
        f = _SWAPPED.get("rmsnorm", k_rmsnorm.rmsnorm)
        if residual is None:
            return f(x, w, eps), x
        return f(x, w, eps, residual=residual)  # (y, x + residual), one pass

    @staticmethod
    def linear(x, w):
        x2 = x.reshape(-1, x.shape[-1])
        if isinstance(w, tuple):  # int4: (packed, scales)
            y = _SWAPPED.get("int4_matmul", k_int4.matmul)(x2, w[0], w[1], GROUP_SIZE)
        elif "matmul" in _SWAPPED:
            y = _SWAPPED["matmul"](x2, w)
        else:  # (K, N), transposed once by prepare
            y = k_matmul.matmul(x2, w, MATMUL_CONFIG)
        return y.view(*x.shape[:-1], y.shape[-1])

    @staticmethod
    def rope(q, k, cos, sin, positions):
        return k_rope.rope(q, k, cos, sin, positions, inplace=True)  # q, k: views of the QKV output

    @staticmethod
    def swiglu(gate_up):
        return k_swiglu.swiglu(gate_up)

    @staticmethod
    def attention(q, k, v):
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, H, T, D)
        f = _SWAPPED.get("attention_forward")
        if f is None:
            o, _ = k_attention.attention_forward(q, k, v, causal=True)
        else:  # a lesson's kernel: one K/V head per query head
            G = q.shape[1] // k.shape[1]
            o, _ = f(q, k.repeat_interleave(G, dim=1), v.repeat_interleave(G, dim=1), causal=True)
        return o.transpose(1, 2)


_OPS = {"torch": _TorchOps, "course": _CourseOps}


# ---- the KV cache ----
@dataclass
class _Cache:
    """Keys and values of every layer. torch: ``k[i]`` (B, Hkv, S, D). course: ``k[i]`` a pool of pages
    (num_pages, PAGE_SIZE, Hkv, D), sequence b owning pages ``block_table[b]`` (contiguous runs)."""
    k: list
    v: list
    length: int  # S, the tokens a sequence can hold
    block_table: torch.Tensor | None = None  # (B, pages a sequence) int32, course only


def new_cache(P: _Prepared, batch: int, length: int) -> _Cache:
    """An empty static cache for ``batch`` sequences of up to ``length`` tokens."""
    c, dev, dt = P.config, P.embed.device, P.embed.dtype
    if P.kernels == "torch":
        shape = (batch, c.n_kv_heads, length, c.head_dim)
        return _Cache([torch.zeros(shape, device=dev, dtype=dt) for _ in range(c.n_layers)],
                      [torch.zeros(shape, device=dev, dtype=dt) for _ in range(c.n_layers)], length)
    pages = -(-length // PAGE_SIZE)
    shape = (batch * pages, PAGE_SIZE, c.n_kv_heads, c.head_dim)
    table = torch.arange(batch * pages, device=dev, dtype=torch.int32).view(batch, pages)
    return _Cache([torch.zeros(shape, device=dev, dtype=dt) for _ in range(c.n_layers)],
                  [torch.zeros(shape, device=dev, dtype=dt) for _ in range(c.n_layers)], pages * PAGE_SIZE, table)


def _slots(P, cache, positions, Hkv):
    """Where ``positions`` ``(B, T)`` go in every layer's cache: index tensors for ``index_put_``, made
    once a forward (a few small kernels each, which 32 layers would otherwise repeat)."""
    if P.kernels == "torch":  # (b, head, position): no host sync, so a graph can hold it
        B = positions.shape[0]
        b = torch.arange(B, device=positions.device)[:, None, None]
        h = torch.arange(Hkv, device=positions.device)[None, None, :]
        return (b, h, positions[:, :, None])  # each (B, T, Hkv) after broadcasting, as k's first three dims
    page = torch.gather(cache.block_table, 1, positions // PAGE_SIZE).long()
    return (page, positions % PAGE_SIZE)  # (page, slot in the page), each (B, T)


def _write(P, cache, i, k, v, slots):
    """Keys and values ``(B, T, Hkv, D)`` into layer ``i``'s cache at ``slots`` (``_slots``), torch's way
    (the course's path writes them with RoPE's launch: ``kv_cache.rope_write``)."""
    cache.k[i].index_put_(slots, k)
    cache.v[i].index_put_(slots, v)


def _decode_attention(P, cache, i, q, positions, seq_lens):
    """One query a sequence ``q`` (B, 1, Hq, D) against the cache up to its position: (B, 1, Hq, D)."""
    if P.kernels == "torch":  # every slot, the future masked: the shapes never change
        B, _, Hq, D = q.shape
        k, v = cache.k[i], cache.v[i]  # (B, Hkv, S, D)
        qg = q.reshape(B, k.shape[1], Hq // k.shape[1], D)  # a KV head's G query heads as G rows (GQA)
        s = (qg @ k.transpose(-1, -2)).float() / math.sqrt(D)  # (B, Hkv, G, S): the cache is read once
        visible = torch.arange(cache.length, device=q.device)[None, :] <= positions  # (B, S)
        p = s.masked_fill(~visible[:, None, None], float("-inf")).softmax(-1).to(v.dtype)
        return (p @ v).reshape(B, 1, Hq, D)
    args = (q[:, 0], cache.k[i], cache.v[i], seq_lens, cache.block_table)
    if "decode_attention" in _SWAPPED:
        return _SWAPPED["decode_attention"](*args)[:, None]
    return k_decode.decode_attention(*args, config=DECODE_CONFIG)[:, None]


# ---- the model ----
def _forward(P: _Prepared, tokens, positions, cache=None, seq_lens=None, last_only=False, attention=None):
    """Logits (B, T, vocab) fp32 (T = 1 with ``last_only``) of tokens (B, T) at positions (B, T).
    No cache: causal attention over these tokens (teacher forcing; ``attention`` replaces the path's
    own). A cache and T > 1: the same, and the keys and values written into it (a prefill from position
    0). A cache and T = 1: a decode step."""
    ops, c = _OPS[P.kernels], P.config
    B, T = tokens.shape
    Hq, Hkv, D = c.n_heads, c.n_kv_heads, c.head_dim
    x, residual = P.embed[tokens], None  # (B, T, d_model)
    slots = _slots(P, cache, positions, Hkv) if cache is not None else None
    for i, L in enumerate(P.layers):
        y, residual = ops.rmsnorm(x, L["attn_norm"], c.norm_eps, residual)  # residual += x; y = norm(residual)
        qkv = ops.linear(y, L["wqkv"]).view(B, T, Hq + 2 * Hkv, D)
        q, k, v = qkv[:, :, :Hq], qkv[:, :, Hq:Hq + Hkv], qkv[:, :, Hq + Hkv:]
        if cache is not None and P.kernels == "course":  # RoPE in place and the cache's write, one launch
            k_kv_cache.rope_write(q, k, v, P.cos, P.sin, positions, cache.k[i], cache.v[i], *slots)
        else:
            q, k = ops.rope(q, k, P.cos, P.sin, positions)
            if cache is not None:
                _write(P, cache, i, k, v, slots)
        if cache is not None and T == 1:
            o = _decode_attention(P, cache, i, q, positions, seq_lens)
        elif attention is not None:
            o = attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2)
        else:
            o = ops.attention(q, k, v)
        x = ops.linear(o.reshape(B, T, Hq * D), L["wo"])
        y, residual = ops.rmsnorm(x, L["mlp_norm"], c.norm_eps, residual)
        x = ops.linear(ops.swiglu(ops.linear(y, L["w_gate_up"])), L["w_down"])
    y, _ = ops.rmsnorm(x, P.norm, c.norm_eps, residual)
    if last_only:
        y = y[:, -1:]
    return ops.linear(y, P.lm_head).float()


def _tokens(prompt, device) -> torch.Tensor:
    """A prompt (str, list of ints, list of equal-length lists, or a (T,)/(B, T) tensor) as (B, T) int64."""
    if isinstance(prompt, str):
        prompt = encode(prompt)
    t = torch.as_tensor(prompt).to(device)
    if t.dim() == 1:
        t = t[None]
    if t.dim() != 2 or t.shape[1] == 0 or t.dtype.is_floating_point or t.dtype == torch.bool:
        raise ValueError(f"prompt must be a text, token ids, or a (B, T) integer tensor with T >= 1; "
                         f"got {tuple(t.shape)} {t.dtype}")
    return t.long()


def _check_tokens(P, tokens, name):
    if tokens.min() < 0 or tokens.max() >= P.config.vocab:
        raise ValueError(f"{name} holds a token outside 0 .. {P.config.vocab - 1}")


def logits(weights: Weights, tokens, kernels: str = "course", int4: bool = False) -> torch.Tensor:
    """The logits (B, T, vocab), fp32, of every position of ``tokens`` (B, T) (or (T,), or a text),
    teacher-forced: position t sees tokens 0 .. t."""
    P = prepare(weights, kernels, int4)
    tokens = _tokens(tokens, weights.device)
    if tokens.shape[1] > P.config.max_seq:
        raise ValueError(f"tokens has {tokens.shape[1]} positions, more than config.max_seq = {P.config.max_seq}")
    _check_tokens(P, tokens, "tokens")
    positions = torch.arange(tokens.shape[1], device=tokens.device).expand_as(tokens)
    with torch.no_grad():
        return _forward(P, tokens, positions)


def forward(weights: Weights, tokens: torch.Tensor, attention=None) -> torch.Tensor:
    """The logits (B, T, vocab) fp32 of tokens (B, T), teacher-forced, in torch ops and with autograd:
    what training runs (``research/llm/train_tiny.py``). ``attention(q, k, v)`` replaces SDPA: causal,
    q (B, Hq, T, D), k and v (B, Hkv, T, D), e.g. the course's trainable FlashAttention,
    ``solutions.kernels.attention.attention(q, k, v, causal=True)``."""
    P = prepare(weights, "torch")
    positions = torch.arange(tokens.shape[1], device=tokens.device).expand_as(tokens)
    return _forward(P, tokens, positions, attention=attention)


def prefill(P: _Prepared, cache: _Cache, tokens) -> torch.Tensor:
    """Run the prompt (B, T) from position 0, filling the cache: the last position's logits (B, vocab)."""
    positions = torch.arange(tokens.shape[1], device=tokens.device).expand_as(tokens)
    return _forward(P, tokens, positions, cache, last_only=True)[:, 0]


def decode_step(P: _Prepared, cache: _Cache, tok, positions, seq_lens) -> torch.Tensor:
    """One token a sequence: ``tok`` (B, 1) at ``positions`` (B, 1), written into the cache; ``seq_lens``
    (B,) int32 = positions + 1 (the course's decode kernel reads it). The logits (B, vocab)."""
    return _forward(P, tok, positions, cache, seq_lens)[:, 0]


def generate(weights: Weights, prompt, max_new_tokens: int, kernels: str = "course", int4: bool = False,
             graph: bool = True, return_logits: bool = False):
    """Greedy continuation of ``prompt`` (a text, token ids, or (B, T) ids of equal-length prompts):
    the new tokens (B, max_new_tokens) int64, and with ``return_logits`` the logits (B, max_new_tokens,
    vocab) fp32 each of them was chosen from. ``graph``: replay the decode step from a CUDA graph
    (GPU only; ignored on a CPU, and while pieces are swapped: a lesson's function checks its inputs
    on the host, which a graph cannot hold)."""
    P = prepare(weights, kernels, int4)
    if not isinstance(max_new_tokens, int) or isinstance(max_new_tokens, bool) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be a positive int, got {max_new_tokens!r}")
    tokens = _tokens(prompt, weights.device)
    B, T = tokens.shape
    if T + max_new_tokens > P.config.max_seq:
        raise ValueError(f"prompt ({T} tokens) + max_new_tokens ({max_new_tokens}) = {T + max_new_tokens} "
                         f"is longer than config.max_seq = {P.config.max_seq}")
    _check_tokens(P, tokens, "prompt")
    dev = tokens.device
    with torch.no_grad():
        cache = new_cache(P, B, T + max_new_tokens)
        first = prefill(P, cache, tokens)
        # The step's state lives on the device and the step advances it: a graph replays it as it is.
        out = torch.empty(B, max_new_tokens, dtype=torch.long, device=dev)
        all_logits = torch.empty(B, max_new_tokens, P.config.vocab, device=dev) if return_logits else None
        tok = first.argmax(-1, keepdim=True)  # (B, 1)
        out[:, :1] = tok
        if return_logits:
            all_logits[:, 0] = first
        positions = torch.full((B, 1), T, dtype=torch.long, device=dev)
        seq_lens = torch.full((B,), T + 1, dtype=torch.int32, device=dev)
        index = torch.ones(1, dtype=torch.long, device=dev)  # which column of out this step fills

        def step():
            lg = decode_step(P, cache, tok, positions, seq_lens)
            tok.copy_(lg.argmax(-1, keepdim=True))
            out.index_copy_(1, index, tok)
            if return_logits:
                all_logits.index_copy_(1, index, lg[:, None])
            positions.add_(1), seq_lens.add_(1), index.add_(1)

        n = max_new_tokens - 1
        if graph and dev.type == "cuda" and n > 1 and not _SWAPPED:
            stream = torch.cuda.Stream(dev)
            stream.wait_stream(torch.cuda.current_stream(dev))
            with torch.cuda.stream(stream):
                step()  # the first step eagerly, on the capture stream: every kernel's entry exists
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=stream):
                step()  # recorded, not run
            torch.cuda.current_stream(dev).wait_stream(stream)
            for _ in range(n - 1):
                g.replay()
        else:
            for _ in range(n):
                step()
    return (out, all_logits) if return_logits else out


# ---- where a decode step's bytes and time go ----
def step_bytes(config: Config, batch: int = 1, context: float = 256, int4: bool = False,
               elem: int = 2) -> dict:
    """Bytes one decode step must read, by piece: every projection once (16-bit: ``elem`` bytes a weight;
    int4: half a byte a weight and an ``elem``-byte scale a group of ``GROUP_SIZE``), the norms and
    ``batch`` embedding rows, and the keys and values of ``context`` cached tokens a sequence. Their
    sum over the copy bandwidth is the step's floor."""
    c, D, L = config, config.head_dim, config.n_layers

    def weight(n, k):
        return n * k / 2 + n * k / GROUP_SIZE * elem if int4 else n * k * elem

    return {
        "q, k, v projection": L * weight((c.n_heads + 2 * c.n_kv_heads) * D, c.d_model),
        "output projection": L * weight(c.d_model, c.n_heads * D),
        "gate + up projection": L * weight(2 * c.ffn_dim, c.d_model),
        "down projection": L * weight(c.d_model, c.ffn_dim),
        "LM head": weight(c.vocab, c.d_model),
        "KV cache": 2 * L * batch * c.n_kv_heads * D * context * elem,
        "norms, embedding rows": (2 * L + 1) * c.d_model * elem + batch * c.d_model * elem,
    }


#: Which piece of the step a GPU kernel belongs to, by a part of its name (first match): the course's
#: kernels by their names in ``solutions/kernels/``, torch's matmuls by cuBLAS's.
_KERNEL_PIECES = (("rope_write", "rope + cache write"), ("int4", "int4 matmul"), ("matmul", "matmul"),
                  ("gemm", "matmul"), ("gemv", "matmul"),
                  ("nvjet", "matmul"), ("cutlass", "matmul"), ("xmma", "matmul"),  # cuBLAS's kernels on Hopper
                  ("rmsnorm", "rmsnorm"), ("rope", "rope"), ("swiglu", "swiglu"), ("decode", "decode attention"),
                  ("attn", "attention"))
OTHER = "other (argmax, copies, indices)"


def piece_of(kernel_name: str) -> str:
    """The piece of a decode step a GPU kernel of this name runs (``OTHER`` when none matches)."""
    name = kernel_name.lower()
    return next((piece for key, piece in _KERNEL_PIECES if key in name), OTHER)


def step_kernels(weights: Weights, batch: int = 1, context: int = 256, kernels: str = "course",
                 int4: bool = False, seed: int = 0) -> dict:
    """GPU time in microseconds of one eager decode step, by kernel name: ``{kernel: us}``, measured with
    ``torch.profiler`` after a prefill of ``context`` random tokens a sequence: every event on the GPU
    (kernels, copies, fills), each kernel launched without programmatic dependent launch
    (``kernels.without_pdl``), so that its time is its own. GPU only."""
    if weights.device.type != "cuda":
        raise ValueError("step_profile times GPU kernels: give it weights on a CUDA device")
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    P = prepare(weights, kernels, int4)
    g = torch.Generator(device="cpu").manual_seed(seed)
    prompt = torch.randint(0, P.config.vocab, (batch, context), generator=g).to(weights.device)
    with torch.no_grad():
        cache = new_cache(P, batch, context + 2)
        prefill(P, cache, prompt)
        tok = prompt[:, -1:].clone()
        pos = torch.full((batch, 1), context, dtype=torch.long, device=weights.device)
        lens = torch.full((batch,), context + 1, dtype=torch.int32, device=weights.device)
        with without_pdl():  # each kernel's own time, not its wait for the one before
            decode_step(P, cache, tok, pos, lens)  # every kernel compiled and its entry kept before the profile
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                decode_step(P, cache, tok, pos, lens)
                torch.cuda.synchronize()
    times: dict = {}
    for e in prof.events():
        if e.device_type == DeviceType.CUDA:  # a kernel, a copy or a fill on the GPU
            times[e.name] = times.get(e.name, 0.0) + e.time_range.elapsed_us()
    return times


def step_profile(weights: Weights, batch: int = 1, context: int = 256, kernels: str = "course",
                 int4: bool = False, seed: int = 0) -> dict:
    """GPU time in microseconds of one eager decode step, by piece (``piece_of``): ``step_kernels``
    summed by piece, ``{piece: us}``. GPU only (on a CPU the interpreter's time says nothing of a GPU's)."""
    times: dict = {}
    for name, us in step_kernels(weights, batch, context, kernels, int4, seed).items():
        piece = piece_of(name)
        times[piece] = times.get(piece, 0.0) + us
    return times
