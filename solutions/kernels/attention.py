"""Attention forward (lesson 06's tuned kernel; on Hopper, for long 16-bit sequences, lesson 12's ping-pong
kernel, ``PINGPONG``) and backward (lesson 07's autotuned kernels; on Hopper, where it takes the shape, the
one-pass Gluon kernel of ``gluon_attention_backward``, ``GLUON_BACKWARD``) behind lean launches, with the APIs
of ``attention_forward`` and ``attention_backward``: q, k, v of one shape (B, H, N, D), or grouped-query heads and a query shorter than its keys (q (B, Hq, N_Q, D), k and v
(B, Hkv, N_KV, D), the causal mask aligned to the end; ``attention_forward.check_gqa_inputs``). The mechanism and
the keys are those of ``lean`` and the package's other modules (dtypes, shapes, strides, alignment,
device, options).
Host-made tensor descriptors: a direct entry (triton 3.6) keeps each address's encoded map
(``lean._DirectDescriptors``); elsewhere four descriptors are kept with the entry and only
their base changes from call to call.
"""

from __future__ import annotations

import functools

import torch
import triton

from tkcourse.mode import INTERPRET

from .. import flash_attention_backward as fab
from .._checks import boolean
from .._occupancy import sm_count
from ..flash_attention_autograd import trainable
from . import attention_backward as fabt
from . import attention_forward as fat
from .lean import DIRECT, Lean, pdl_meta
from .lean import tensor_key as _t

__all__ = ["attention_forward", "attention", "attention_backward", "forward_route", "pingpong_wanted",
           "backward_route", "gluon_backward_wanted", "LEANS"]


# ---- lessons 06 and 07: attention forward (tuned kernel), backward (autotuned kernels) ----
#: Small N (at most this many tokens): the autotuner tries SMALL_N_FWD_CONFIGS, which include
#: 32- and 64-row query blocks, so that B·H·N / BLOCK_M programs fill the GPU (16 heads of 512
#: tokens in 128-row blocks are 64 programs for 132 SMs).
SMALL_N_MAX = 1024
SMALL_N_FWD_CONFIGS = [
    triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "WARP_SPECIALIZE": False}, num_warps=w, num_stages=s,
                  pre_hook=fat.set_descriptor_blocks)
    for bm, bn, w, s in [(32, 64, 2, 2), (32, 64, 4, 3), (64, 32, 4, 3), (64, 64, 4, 2), (64, 64, 4, 3),
                         (64, 128, 4, 2), (128, 64, 8, 3)]
]
#: Small N on a grid of at most one wave (B·H·⌈N/64⌉ programs of 64 rows fit on the SMs at once):
#: this config, not the autotuner. On the H200 at B1 H16 N512 D64, 64x64 blocks with 3 stages were the
#: fastest of SMALL_N_FWD_CONFIGS one by one in CUDA graphs (``research/launch/host_breakdown.py``,
#: part S); 64x128 with 3 stages, not among them, was faster still, causal and not (half the key
#: steps per program; ``research/launch/pdl_probe.py``, part A). The autotuner, timing each config
#: eagerly, picked a slower one in some runs. The 64-row blocks give 128 programs for 132 SMs there.
ONE_WAVE_FWD_CONFIG = dict(BLOCK_M=64, BLOCK_N=128, num_warps=4, num_stages=3)
_fwd_small_tuned = None
if not INTERPRET:
    _fwd_small_tuned = triton.autotune(configs=SMALL_N_FWD_CONFIGS, key=["N", "HEAD_DIM", "CAUSAL"],
                                       prune_configs_by={"early_config_prune": fat.prune_fwd_configs})(
                                           fat.attn_fwd_tuned)
_FWD_SMALL = Lean(_fwd_small_tuned or fat.attn_fwd_tuned)
_FWD_LARGE = Lean(fat.attn_fwd_autotuned or fat.attn_fwd_tuned)
_FWD_FIXED = Lean(fat.attn_fwd_tuned)  # the interpreter's config, and N below fat.AUTOTUNE_MIN_N
#: Grouped-query heads or N_Q != N_KV (``attention_forward.attn_fwd_gqa``): autotuned, and fixed (the
#: interpreter, and fewer than fat.AUTOTUNE_MIN_N packed rows and keys). Looked up after the three
#: above, so an equal-shape call never pays for them.
_FWD_GQA = Lean(fat.attn_fwd_gqa_autotuned or fat.attn_fwd_gqa)
_FWD_GQA_FIXED = Lean(fat.attn_fwd_gqa)
_FWD_MULTIPLE = 128  # N a multiple of every small config's blocks: host-made descriptors
#: Host-made tensor descriptors on the lean path. Descriptors made in the kernel cost GPU time (each
#: program encodes its own and fences it), which a small problem's kernel does not hide. Host-made
#: ones cost host time instead: the ordinary launcher re-encodes each on every call
#: (``cuTensorMapEncodeTiled``, one per tensor: Q, K, V, O), microseconds each. A direct entry
#: (``lean._DirectDescriptors``, triton 3.6) encodes an address once and keeps the map, so
#: there the lean path takes host-made descriptors, elsewhere in-kernel ones.
#: ``attention_forward(..., host_descriptors=...)`` asks for one or the other.
HOST_DESCRIPTORS = DIRECT
#: The forward launched with programmatic dependent launch where the GPU has it (as
#: ``matmul.MATMUL_PDL``). At B1 H16 N512 D64 on the H200, eight forwards in one CUDA
#: graph: 7.1 us each with it, 7.7 without (causal 7.6 against 8.2; ``research/launch/pdl_probe.py``).
#: Read when a key's entry is made.
FWD_PDL = True


#: On Hopper (sm_90) the forward of fp16/bf16 q, k, v runs lesson 12's ping-pong kernel
#: (``gluon_attention.attention_pingpong_kernel``, FlashAttention-3's schedule) where it takes the shape
#: (queries and keys of one length, a multiple of its 128 rows a program), the sequence has at least
#: ``PINGPONG_MIN_N[(D, causal)]`` tokens and the call at least ``PINGPONG_MIN_FLOPS``: where the H200 runs
#: put it ahead of the tuned Triton kernel (``research/README.md`` says which runs). Below that, the
#: Triton kernel's smaller tiles fill the GPU better (D 64, causal, at 4096 tokens), or the call's time
#: would be the host's. The kernel writes the log-sum-exp too, so lesson 07's backward follows it as it
#: follows the Triton forward. Read at a key's first call. A key's first call goes through
#: ``gluon_attention.attention_forward`` (its checks, its descriptors, ``kernel[grid]``: about a hundred
#: microseconds of Python); later calls through ``_PP``, a ``Lean`` of the ping-pong kernel made on the
#: first such call (Gluon is imported only where it runs), whose entries encode the descriptors' maps
#: from the tensors' addresses as the Triton forward's do.
PINGPONG = True
PINGPONG_MIN_N = {(64, False): 1024, (64, True): 8192, (128, False): 1024, (128, True): 1024}
#: The ping-pong kernel runs persistent (``gluon_attention.LIBRARY_CONFIG``: one program an SM, tile after
#: tile) up to ``PERSISTENT_MAX_N[causal]`` tokens, where a tile reads few key blocks and its start and end
#: weigh; above, a program a tile (``PP_CONFIG``), which tied the H200 A/B there (``research/README.md``).
PERSISTENT_MAX_N = {False: 4096, True: 4096}
#: (D, causal) -> whether each softmax starts under its own warpgroup's last P V (``gluon_attention``'s
#: ``EARLY``): on where the H200 A/B found it faster (causal, and D 128), off at D 64 without a mask, where the
#: P V it waits on is short and the later rescale cost more than it hid (``research/README.md``).
EARLY = {(64, False): False, (64, True): True, (128, False): True, (128, True): True}
PINGPONG_MIN_FLOPS = 3e10
_PP = None  # the ping-pong kernel's Lean, made by _pingpong_lean()


def forward_route(q, k, v, causal=False, impl="auto") -> str:
    """Which kernel ``attention_forward(q, k, v, causal, impl=impl)`` takes: "pingpong" (``PINGPONG``) or
    "triton". Shapes, dtypes and the device only: the inputs' checks come with the call."""
    return "pingpong" if _takes_pingpong(q, k, v, causal, impl) else "triton"


_CAPABILITY: dict = {}  # device index -> compute capability, asked once (the route asks on every call)


def _hopper(device) -> bool:
    if device.type != "cuda":
        return False
    index = torch.cuda.current_device() if device.index is None else device.index
    capability = _CAPABILITY.get(index)
    if capability is None:
        capability = _CAPABILITY[index] = torch.cuda.get_device_capability(index)
    return capability == (9, 0)


def pingpong_wanted(B, Hq, N, D, causal) -> bool:
    """The route's rule from the shapes alone (``PINGPONG``, ``PINGPONG_MIN_N``, ``PINGPONG_MIN_FLOPS``): whether
    a Hopper GPU's call of q (B, Hq, N, D) goes to the ping-pong kernel, given that the kernel takes the shape
    (``gluon_attention.shape_problem``: N a multiple of its rows, 16-bit dtypes), which the call checks too."""
    if not PINGPONG or N < PINGPONG_MIN_N.get((D, bool(causal)), float("inf")):
        return False
    return 4 * B * Hq * N * N * D / (2 if causal else 1) >= PINGPONG_MIN_FLOPS


def _takes_pingpong(q, k, v, causal, impl):
    if INTERPRET or not PINGPONG or impl != "auto" or not all(isinstance(t, torch.Tensor) for t in (q, k, v)):
        return False
    if q.dim() != 4 or not _hopper(q.device):
        return False
    B, Hq, N, D = q.shape
    causal = isinstance(causal, int) and bool(causal)  # True, or 1; anything else is the call's to refuse
    if k.dim() != 4 or k.shape[2] != N or v.shape != k.shape or not pingpong_wanted(B, Hq, N, D, causal):
        return False
    from . import gluon_attention as ga  # Gluon: imported where it runs

    return ga.shape_problem(B, Hq, k.shape[1], N, D, q.dtype, ga.attention_pingpong_kernel) is None


def pingpong_config(N, causal, D) -> dict:
    """The ping-pong kernel's config for N tokens of head dim D: persistent up to ``PERSISTENT_MAX_N[causal]``,
    ``EARLY`` where ``EARLY[(D, causal)]`` says so."""
    from . import gluon_attention as ga

    cfg = ga.LIBRARY_CONFIG if N <= PERSISTENT_MAX_N[bool(causal)] else ga.PP_CONFIG
    return dict(cfg, EARLY=True) if EARLY.get((D, bool(causal))) else cfg


def _pingpong_lean():
    """The ping-pong kernel's ``Lean``, made on the first call that takes it and listed in ``LEANS``."""
    global _PP
    if _PP is None:
        from . import gluon_attention as ga

        _PP = LEANS["fwd_pingpong"] = Lean(ga.attention_pingpong_kernel)
    return _PP


def _pingpong_first(key, q, k, v, causal, sm_scale):
    """``(o, lse)`` by the ping-pong kernel, launched as ``gluon_attention.attention_forward`` launches it
    (its checks first), through ``_pingpong_lean()``: the entry kept for the key's later calls."""
    from . import gluon_attention as ga

    kernel, cfg = ga.attention_pingpong_kernel, pingpong_config(q.shape[2], causal, q.shape[3])
    causal, sm_scale = ga.check_inputs(q, k, v, causal, sm_scale, kernel, cfg)
    prepared = all(t.is_contiguous() and t.data_ptr() % 16 == 0 for t in (q, k, v))
    q, k, v = fab.prepare(q), fab.prepare(k), fab.prepare(v)
    B, H, N, D = q.shape
    o = torch.empty_like(q)
    lse = torch.empty((B, H, N), device=q.device, dtype=torch.float32)
    grid, args, meta = ga.launch_plan(q, k, v, o, causal, float(sm_scale), kernel, cfg)
    entry = _pingpong_lean().first(key, (*args, lse), (), grid, meta,
                                   templates=lambda m: dict(enumerate(ga.descriptors(q, k, v, o, cfg))))
    kept = None if entry.tensor_descriptors else args[:4]  # run re-encodes them: keep four to rebase
    entry.info = (prepared, kept, torch.empty((), device=q.device, dtype=torch.float32).expand(B, H, N),
                  float(sm_scale))
    return o, lse


def _pingpong_call(entry, q, k, v):
    """A later call of a ping-pong key: the launch alone (``_pingpong_first`` checked this key's inputs)."""
    prepared, kept, lse_template, sm_scale = entry.info
    if not prepared:
        q, k, v = fab.prepare(q), fab.prepare(k), fab.prepare(v)
    o = torch.empty_like(q)
    lse = torch.empty_like(lse_template)  # one float expanded to (B, H, N): see matmul._hot_entry
    N = q.shape[2]
    if entry.tensor_descriptors:  # the entry encodes each address's map itself
        entry(q, k, v, o, N, sm_scale, lse)
    else:
        entry(*_descs(q, k, v, o, None, kept), N, sm_scale, lse)
    return o, lse


def _qkv_key(q, k, v, causal, sm_scale, impl):
    return (_t(q), _t(k), _t(v), causal, type(causal), sm_scale, type(sm_scale), impl)


def _descs(q, k, v, o, meta, kept):
    """Host-made descriptors for this call: the entry's four objects (blocks fixed by its config)
    with this call's tensors as their bases, or the tensors themselves where the kernel makes them."""
    if kept is None:
        return q, k, v, o
    for d, t in zip(kept, (q, k, v, o)):
        d.base = t.view(d.shape[0], d.shape[1])  # only the base changes: shape, strides and blocks are the key's
    return kept


def attention_forward(q, k, v, causal=False, sm_scale=None, impl="auto", config=None, host_descriptors=None):
    """``(o, lse)``, as ``attention_forward.attention_forward``; ``config``, ``host_descriptors``
    or a non-tuned ``impl`` take that module's ordinary launch."""
    if config is not None or host_descriptors not in (None, True, False):
        return fat.attention_forward(q, k, v, causal, sm_scale, impl, config, host_descriptors)
    try:
        if sm_scale is not None and type(sm_scale) not in (float, int):
            raise TypeError  # a tensor scale, say: the ordinary path
        key = _qkv_key(q, k, v, causal, sm_scale, impl) + (host_descriptors,)
        e = None if config is not None else (_FWD_SMALL.get(key) or _FWD_LARGE.get(key) or _FWD_FIXED.get(key)
                                             or _FWD_GQA.get(key) or _FWD_GQA_FIXED.get(key))
    except (AttributeError, TypeError):
        return fat.attention_forward(q, k, v, causal, sm_scale, impl, config)
    if e is None:
        p = None if _PP is None else _PP.get(key)
        if p is not None:
            return _pingpong_call(p, q, k, v)
        return _forward_first(key, q, k, v, causal, sm_scale, impl, config, host_descriptors)
    prepared, kept, lse_template = e.info
    if not prepared:
        q, k, v = fab.prepare(q), fab.prepare(k), fab.prepare(v)
    o = torch.empty_like(q)
    lse = torch.empty_like(lse_template)  # one float expanded to (B, H, N): see matmul._hot_entry
    if e.tensor_descriptors:  # host-made descriptors, which the entry encodes from the tensors
        e(q, k, v, o, lse)
        return o, lse
    if not INTERPRET and kept is None:
        triton.set_allocator(fat.tma_scratch)  # in-kernel descriptors need scratch (a ContextVar: per thread)
    e(*_descs(q, k, v, o, e.meta, kept), lse)
    return o, lse


def _forward_first(key, q, k, v, causal, sm_scale, impl, config, host_descriptors=None):
    if config is not None or not fat.use_tuned(impl):
        return fat.attention_forward(q, k, v, causal, sm_scale, impl, config)
    if host_descriptors is None and _takes_pingpong(q, k, v, causal, impl):
        if fat.grouped(q, k, v):  # the course's checks and errors first, as the Triton path's
            fat.check_gqa_inputs(q, k, v, causal, sm_scale)
        else:
            fat.check_inputs(q, k, v, sm_scale)
            boolean("causal", causal)
        return _pingpong_first(key, q, k, v, causal, sm_scale)
    if fat.grouped(q, k, v):
        return _gqa_first(key, q, k, v, causal, sm_scale, host_descriptors)
    sm_scale = fat.check_inputs(q, k, v, sm_scale)
    causal = bool(fat.boolean("causal", causal))
    prepared = all(t.is_contiguous() and t.data_ptr() % 16 == 0 for t in (q, k, v))
    q, k, v = fat.prepare(q), fat.prepare(k), fat.prepare(v)
    B, H, N, D = q.shape
    o = torch.empty_like(q)
    lse = torch.empty((B, H, N), device=q.device, dtype=torch.float32)
    if not INTERPRET:
        triton.set_allocator(fat.tma_scratch)
    grid = lambda m: (triton.cdiv(N, m["BLOCK_M"]), B * H)  # noqa: E731
    if INTERPRET:
        lean, meta = _FWD_FIXED, dict(fat.INTERPRET_CONFIG, WARP_SPECIALIZE=False)
    elif N < fat.AUTOTUNE_MIN_N:
        lean, meta = _FWD_FIXED, dict(fat.SMALL_N_CONFIG, WARP_SPECIALIZE=False)
    elif N <= SMALL_N_MAX and B * H * triton.cdiv(N, ONE_WAVE_FWD_CONFIG["BLOCK_M"]) <= sm_count(q.device.index):
        lean, meta = _FWD_FIXED, dict(ONE_WAVE_FWD_CONFIG, WARP_SPECIALIZE=False)
    else:
        lean, meta = (_FWD_SMALL, {}) if N <= SMALL_N_MAX else (_FWD_LARGE, {})
    meta.update(pdl_meta(q.device, FWD_PDL))
    multiple = meta.get("BLOCK_M", _FWD_MULTIPLE), meta.get("BLOCK_N", _FWD_MULTIPLE)
    host = HOST_DESCRIPTORS if host_descriptors is None else host_descriptors
    args = fat.descriptors(q, k, v, o, *multiple, host=host)
    made = not isinstance(args[0], torch.Tensor)  # host-made descriptors
    templates = None
    if made:  # four with the chosen config's blocks, for an entry that encodes them itself
        templates = lambda m: dict(enumerate(fat.descriptors(q, k, v, o, m["BLOCK_M"], m["BLOCK_N"])))  # noqa: E731
    entry = lean.first(key, (*args, lse), (N, sm_scale), grid, dict(meta, HEAD_DIM=D, CAUSAL=causal),
                       templates=templates)
    kept = None
    if made and not entry.tensor_descriptors:  # host-made, re-encoded by run: keep four to rebase
        kept = fat.descriptors(q, k, v, o, entry.meta["BLOCK_M"], entry.meta["BLOCK_N"])
    entry.info = (prepared, kept, torch.empty((), device=q.device, dtype=torch.float32).expand(B, H, N))
    return o, lse


def _gqa_first(key, q, k, v, causal, sm_scale, host_descriptors=None):
    """``_forward_first`` for grouped-query heads or N_Q != N_KV: an entry of ``attn_fwd_gqa``."""
    sm_scale, causal = fat.check_gqa_inputs(q, k, v, causal, sm_scale)
    prepared = all(t.is_contiguous() and t.data_ptr() % 16 == 0 for t in (q, k, v))
    q, k, v, o, lse = fat.gqa_outputs(q, k, v)
    B, Hq, Nq, D = q.shape
    Nk, group = k.shape[2], Hq // k.shape[1]
    if INTERPRET:
        lean, meta = _FWD_GQA_FIXED, dict(fat.INTERPRET_CONFIG, WARP_SPECIALIZE=False)
    elif max(group * Nq, Nk) < fat.AUTOTUNE_MIN_N:
        lean, meta = _FWD_GQA_FIXED, dict(fat.SMALL_N_CONFIG, WARP_SPECIALIZE=False)
    else:
        lean, meta = _FWD_GQA, {}
    meta.update(pdl_meta(q.device, FWD_PDL))
    multiple = meta.get("BLOCK_M", _FWD_MULTIPLE), meta.get("BLOCK_N", _FWD_MULTIPLE)
    host = HOST_DESCRIPTORS if host_descriptors is None else host_descriptors
    args = fat.gqa_descriptors(q, k, v, o, *multiple, host=host)
    made = not isinstance(args[0], torch.Tensor)
    templates = None
    if made:
        templates = lambda m: dict(enumerate(fat.gqa_descriptors(q, k, v, o, m["BLOCK_M"], m["BLOCK_N"])))  # noqa: E731
    entry = lean.first(key, (*args, lse), (Nq, Nk, group, sm_scale), fat.gqa_grid(q, k),
                       dict(meta, HEAD_DIM=D, CAUSAL=causal), templates=templates)
    kept = None
    if made and not entry.tensor_descriptors:
        kept = fat.gqa_descriptors(q, k, v, o, entry.meta["BLOCK_M"], entry.meta["BLOCK_N"])
    entry.info = (prepared, kept, torch.empty((), device=q.device, dtype=torch.float32).expand(B, Hq, Nq))
    return o, lse


#: On Hopper the backward of q, k, v of one shape (B, H, N, D) goes to the one-pass Gluon kernel
#: (``gluon_attention_backward``: five matmuls a step where lesson 07's two kernels do seven, dQ added by
#: atomics) from ``GLUON_BACKWARD_MIN_N`` tokens, where it takes the shape (MHA, D 64 or 128, N a multiple of
#: 128, 16-bit): it beat the two kernels at every shape the H200 timed, 256 to 16384 tokens. Lesson 07's
#: kernels keep the rest, and every call under ``torch.use_deterministic_algorithms(True)``: the atomics'
#: adds come in any order, so dQ is not bitwise repeatable.
GLUON_BACKWARD = True
GLUON_BACKWARD_MIN_N = 256


def gluon_backward_wanted(B, H, Hkv, N_Q, N_KV, D, dtype) -> bool:
    """The backward route's rule from shapes and dtype alone (``GLUON_BACKWARD``, ``GLUON_BACKWARD_MIN_N``,
    ``gluon_attention_backward.shape_problem``): whether a Hopper GPU's backward of q (B, H, N_Q, D) and k, v
    (B, Hkv, N_KV, D) goes to the Gluon kernel."""
    if not GLUON_BACKWARD or N_Q != N_KV or N_Q < GLUON_BACKWARD_MIN_N:
        return False
    from . import gluon_attention_backward as gab  # Gluon: imported where it runs

    return gab.shape_problem(B, H, Hkv, N_Q, D, dtype) is None


def backward_route(do, q, k, v, o, lse, dkdv_config=None, dq_config=None) -> str:
    """Which kernels ``attention_backward(do, q, k, v, o, lse, ...)`` takes: "gluon" (``GLUON_BACKWARD``) or
    "triton" (lesson 07's two). Shapes, dtypes, the device and torch's determinism switch: the inputs' checks
    come with the call."""
    return "gluon" if _takes_gluon_backward(do, q, k, v, o, lse, dkdv_config, dq_config) else "triton"


def _takes_gluon_backward(do, q, k, v, o, lse, dkdv_config, dq_config):
    if INTERPRET or not GLUON_BACKWARD or dkdv_config is not None or dq_config is not None:
        return False
    if not all(isinstance(t, torch.Tensor) for t in (do, q, k, v, o, lse)) or q.dim() != 4 or k.dim() != 4:
        return False
    if do.shape != q.shape or o.shape != q.shape or v.shape != k.shape or tuple(lse.shape) != tuple(q.shape[:3]):
        return False
    if any(t.dtype != q.dtype for t in (do, k, v, o)) or lse.dtype != torch.float32:
        return False
    if not _hopper(q.device) or torch.are_deterministic_algorithms_enabled():
        return False
    B, H, N, D = q.shape
    return gluon_backward_wanted(B, H, k.shape[1], N, k.shape[2], D, q.dtype)


_DELTA = Lean(fab.attn_bwd_preprocess)
_DKDV = {True: Lean(fabt.dkdv_autotuned or fab.attn_bwd_dkdv), False: Lean(fab.attn_bwd_dkdv)}
_DQ = {True: Lean(fabt.dq_autotuned or fab.attn_bwd_dq), False: Lean(fab.attn_bwd_dq)}


#: The Gluon backward's lean path: the kernel's ``Lean`` (``_GB``, made on the first call that takes it: Gluon
#: is imported only where it runs) and the two Triton kernels around it, Δ before and dQ's cast after, keyed
#: as lesson 07's kernels are. A key's first call checks the inputs (``gluon_attention_backward.check_inputs``)
#: and launches each kernel through ``kernel[grid]``; later calls launch the three kept entries, the kernel's
#: descriptor maps encoded once an address. The ordinary launch (``gluon_attention_backward.attention_backward``)
#: makes eight descriptors and has Gluon bind them on every call: hundreds of microseconds of Python, which a
#: short backward does not hide (``research/README.md`` has the H200's figures).
_GB = None
_GB_DELTA = Lean(fab.attn_bwd_preprocess)
_GB_CAST = Lean(fabt.attn_bwd_dq_cast)


def _delta_first(lean, key, o, do, delta):
    """Lesson 07's Δ preprocess (``compute_delta``'s launch) into ``delta``, its entry kept in ``lean`` for
    ``key``: the first call of either backward route."""
    B, H, N, D = o.shape
    return lean.first(key, (o, do, delta), (N,), (triton.cdiv(N, fab.PREPROCESS_BLOCK), B * H),
                      dict(HEAD_DIM=D, BLOCK_M=fab.PREPROCESS_BLOCK))


def _gluon_backward_lean():
    """The Gluon backward kernel's ``Lean``, made on the first call that takes it and listed in ``LEANS``."""
    global _GB
    if _GB is None:
        from . import gluon_attention_backward as gab

        _GB = LEANS["bwd_gluon"] = Lean(gab.attention_bwd_kernel)
    return _GB


def _gluon_backward(key, do, q, k, v, o, lse, causal, sm_scale):
    """``(dq, dk, dv)`` by the Gluon kernel: a kept key's three launches, else its first call."""
    entry = None if key is None else _gluon_backward_lean().get(key)
    if entry is None:
        return _gluon_backward_first(key, do, q, k, v, o, lse, causal, sm_scale)
    prepared, delta_entry, cast_entry, make_descriptors = entry.info
    if not prepared:
        do, q, k, v, o, lse = (t.contiguous() for t in (do, q, k, v, o, lse))
    delta = torch.empty_like(lse)
    delta_entry(o, do, delta)
    dq32 = torch.zeros_like(q, dtype=torch.float32)
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    if entry.tensor_descriptors:  # the entry encodes each address's map itself
        entry(q, k, v, do, dk, dv, lse, delta, dq32)
    else:
        entry(*make_descriptors(q, k, v, do, dk, dv, lse, delta), dq32)
    dq = torch.empty_like(q)
    cast_entry(dq32, dq)
    return dq, dk, dv


def _gluon_backward_first(key, do, q, k, v, o, lse, causal, sm_scale):
    """A key's first call of the Gluon backward, launched as ``gluon_attention_backward.attention_backward``
    launches it (its checks first), each kernel's entry kept; no key (a tensor ``sm_scale``, say): that
    ordinary launch itself."""
    from . import gluon_attention_backward as gab

    if key is None:
        return gab.attention_backward(do, q, k, v, o, lse, causal, sm_scale)
    causal, sm_scale, cfg = gab.check_inputs(do, q, k, v, o, lse, causal, sm_scale)
    prepared = all(t.is_contiguous() for t in (do, q, k, v, o, lse))  # the key holds the strides
    do, q, k, v, o, lse = (t.contiguous() for t in (do, q, k, v, o, lse))
    delta = torch.empty_like(lse)
    delta_entry = _delta_first(_GB_DELTA, key, o, do, delta)
    dq32 = torch.zeros_like(q, dtype=torch.float32)
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    grid, args, meta = gab.launch_plan(q, k, v, do, dk, dv, lse, delta, dq32, causal, sm_scale, cfg)
    entry = _gluon_backward_lean().first(
        key, args[:9], args[9:], grid, meta,
        templates=lambda m: dict(enumerate(gab.descriptors(q, k, v, do, dk, dv, lse, delta, cfg))))
    dq = torch.empty_like(q)
    cast_entry = _GB_CAST.first(key, (dq32, dq), (dq.numel(), sm_scale), (triton.cdiv(dq.numel(), fabt.CAST_BLOCK),),
                                dict(BLOCK=fabt.CAST_BLOCK))
    entry.info = (prepared, delta_entry, cast_entry, functools.partial(gab.descriptors, config=cfg))
    return dq, dk, dv


def attention_backward(do, q, k, v, o, lse, causal=False, sm_scale=None, dkdv_config=None, dq_config=None):
    """``(dq, dk, dv)``, as ``attention_backward.attention_backward`` (``backward_route`` says which kernels)."""
    hit = key = None
    try:
        if dkdv_config is None and dq_config is None and (sm_scale is None or type(sm_scale) in (float, int)):
            key = (_t(do), _t(q), _t(k), _t(v), _t(o), _t(lse), causal, type(causal), sm_scale, type(sm_scale))
    except (AttributeError, TypeError):
        key = None
    if _takes_gluon_backward(do, q, k, v, o, lse, dkdv_config, dq_config):
        return _gluon_backward(key, do, q, k, v, o, lse, causal, sm_scale)
    if key is not None:
        hit = _DELTA.get(key)
    if hit is None:
        return _backward_first(key, do, q, k, v, o, lse, causal, sm_scale, dkdv_config, dq_config)
    prepared, dkdv, dq_entry = hit.info  # the three kernels' entries, made together
    if not prepared:
        do, q, k, v, o, lse = (fab.prepare(t) for t in (do, q, k, v, o, lse))
    if not INTERPRET:
        triton.set_allocator(fab.tma_scratch)  # in-kernel descriptors need scratch (a ContextVar: per thread)
    delta = torch.empty_like(lse)
    hit(o, do, delta)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    dkdv(q, k, v, do, dk, dv, lse, delta)
    dq_entry(q, k, v, do, dq, lse, delta)
    return dq, dk, dv


def _backward_first(key, do, q, k, v, o, lse, causal, sm_scale, dkdv_config, dq_config):
    if key is None or fat.grouped(q, k, v):  # grouped-query heads, N_Q != N_KV: the ordinary launch
        return fabt.attention_backward(do, q, k, v, o, lse, causal, sm_scale, dkdv_config, dq_config)
    prepared = all(t.is_contiguous() and t.data_ptr() % 16 == 0 for t in (do, q, k, v, o, lse))
    (do, q, k, v, o, lse), causal, sm_scale, _, _ = fab.check_inputs(do, q, k, v, o, lse, causal, sm_scale,
                                                                      None, None)
    B, H, N, D = q.shape
    tuned = not INTERPRET and N >= fabt.AUTOTUNE_MIN_N  # as the tuned module: fixed configs for small N
    delta = torch.empty_like(lse)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    meta = dict(HEAD_DIM=D, CAUSAL=causal)
    if tuned:
        dkdv_meta = dq_meta = meta
    else:
        dkdv_meta = dict(meta, **fab.checked_config(fabt.INTERPRET_DKDV_CONFIG if INTERPRET else fabt.SMALL_N_DKDV_CONFIG, "c"))
        dq_meta = dict(meta, **fab.checked_config(fabt.INTERPRET_DQ_CONFIG if INTERPRET else fabt.SMALL_N_DQ_CONFIG, "c"))
    delta_entry = _delta_first(_DELTA, key, o, do, delta)
    dkdv = _DKDV[tuned].first(key, (q, k, v, do, dk, dv, lse, delta), (N, sm_scale),
                              lambda m: (triton.cdiv(N, m["BLOCK_N"]), B * H), dkdv_meta)
    dq_entry = _DQ[tuned].first(key, (q, k, v, do, dq, lse, delta), (N, sm_scale),
                                lambda m: (triton.cdiv(N, m["BLOCK_M"]), B * H), dq_meta)
    delta_entry.info = (prepared, dkdv, dq_entry)
    return dq, dk, dv


#: The trainable layer: the lean forward and backward, as ``attention_backward.attention``.
attention = trainable(attention_forward, attention_backward)

LEANS = dict(fwd_small=_FWD_SMALL, fwd_large=_FWD_LARGE, fwd_fixed=_FWD_FIXED, fwd_gqa=_FWD_GQA,
             fwd_gqa_fixed=_FWD_GQA_FIXED, delta=_DELTA, dkdv=_DKDV[True], dkdv_fixed=_DKDV[False], dq=_DQ[True],
             dq_fixed=_DQ[False], bwd_gluon_delta=_GB_DELTA, bwd_gluon_cast=_GB_CAST)


def forget():
    """Drop every kept entry: the next call of each key is a first call again."""
    for lean_ in LEANS.values():
        lean_.entries.clear()
