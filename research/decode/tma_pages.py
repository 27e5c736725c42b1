"""Research prototype: the fast decode's split kernel with K and V brought in by the TMA, a page's box at a time.

The library's split kernel (``solutions/kernels/decode_attention.py``) finds each token's page and loads K
and V through a pointer a row: at 128 tokens a step a thread issues 16 asynchronous 16-byte copies of K and 16
of V, each with its own 64-bit address, and the pipeliner keeps about one step of them in flight. At B 1 x
32768 (page 16) every plan of it lies at 0.72-0.77 of a copy, where a kernel that only reads the cache reaches
0.85 (``research/README.md``, the decode sections). The Gluon prototype (``gluon_decode.py``) streamed the
pages by the TMA into a deep ring but did the math on CUDA cores, and lost.

Here the kernel stays the library's (Triton, ``tl.dot`` on tensor cores, the online softmax), and only the
loads change: the caches are seen as 2-D ``(num_pages * PAGE_SIZE, Hkv * D)``, and the ``BOX`` tokens of a
page for one KV head are one tensor-descriptor load ``[BOX, D]`` at ``[page * PAGE_SIZE + slot, kvh * D]``: one
instruction where the pointer loads take a thread 16, and the pipeliner keeps TMA copies in flight on
barriers rather than waiting for all of a step's copies at its top. A step is ``BOXES`` such boxes, each
scored and folded into the online softmax in turn (``BOX`` at most the page, so a box never spans two pages).

The full steps of a split run unmasked; the sequence's last, partial step (only its last split has one) runs
the library's masked pointer loads, so that nothing past the sequence enters a product (a TMA box would
bring the pool's rows past the end, whatever they hold, NaN included). Kept from the library: its plan's
splits (``per`` rounded to whole steps), the clamp of every page into the pool, the NaN row of a flagged
sequence, its combine (``decode_merge``).

    python research/decode/tma_pages.py             # CPU: the checks in the interpreter
    python research/decode/tma_pages.py --compile   # with triton 3.6 on the path: the sm_90a pipelining

Written and timed 2026-12-04 (``tma_probe.py``): slower than the library at every shape; not taken.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

if "--compile" in sys.argv:  # compile for the GPU even on a machine without one
    os.environ["TRITON_INTERPRET"] = "0"
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout, for solutions/

# isort: off
import tkcourse  # noqa: E402,F401  (first: the mode, before triton is imported)
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402
# isort: on

from solutions.kernels import decode_attention as fast  # noqa: E402
from solutions.kernels import decode_plan  # noqa: E402

__all__ = ["decode_split_kv_tma", "decode_attention_tma", "descriptors"]


@triton.jit
def _fold(q, k, v, m_i, l_i, acc, qk_scale, valid):
    """One tile of keys folded into the running softmax (lesson 05's rule); ``valid`` masks its keys."""
    s = tl.dot(q, tl.trans(k)) * qk_scale
    s = tl.where(valid[None, :], s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return m_new, l_i, acc


@triton.jit
def decode_split_kv_tma(Q, K_DESC, V_DESC, K, V, SEQ_LENS, BLOCK_TABLE, O, M, L, ACC, num_pages, max_pages, qk_scale,
                        splits, HKV: tl.constexpr, GROUP: tl.constexpr, BLOCK_G: tl.constexpr,
                        HEAD_DIM: tl.constexpr, PAGE_SIZE: tl.constexpr, BOX: tl.constexpr, BOXES: tl.constexpr,
                        ONE_SPLIT: tl.constexpr):
    """``fast.decode_split_kv`` with the full steps' K and V by descriptors (``K_DESC``, ``V_DESC``: boxes of
    ``[BOX, HEAD_DIM]`` over the 2-D view of the caches); ``K``, ``V`` the pointers for the last partial step."""
    STEP: tl.constexpr = BOX * BOXES
    bh = tl.program_id(0)
    split = tl.program_id(1)
    b, kvh = bh // HKV, bh % HKV
    g = tl.arange(0, BLOCK_G)
    d = tl.arange(0, HEAD_DIM)
    heads = kvh * GROUP + g
    seq_len = tl.load(SEQ_LENS + b)
    flagged = (seq_len < 1) | (seq_len > max_pages * PAGE_SIZE)
    n = tl.where(flagged, 0, seq_len)
    per = tl.cdiv(tl.cdiv(n, STEP), splits) * STEP
    start = split * per
    end = tl.minimum(start + per, n)
    full_end = start + tl.maximum(end - start, 0) // STEP * STEP  # the split's last whole step ends here
    q = tl.load(Q + (b * HKV * GROUP + heads)[:, None] * HEAD_DIM + d[None, :], mask=g[:, None] < GROUP, other=0.0)

    m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, HEAD_DIM], tl.float32)
    stray = 0
    row0 = b.to(tl.int64) * max_pages
    every = tl.full([BOX], 1, tl.int1)
    for t in range(start, full_end, STEP):
        for j in tl.static_range(BOXES):
            tok = t + j * BOX
            page = tl.load(BLOCK_TABLE + row0 + tok // PAGE_SIZE)
            safe = tl.minimum(tl.maximum(page, 0), num_pages - 1)  # clamped into the pool: no stray address
            stray += (page != safe).to(tl.int32)
            r = safe * PAGE_SIZE + tok % PAGE_SIZE
            k = K_DESC.load([r, kvh * HEAD_DIM])
            v = V_DESC.load([r, kvh * HEAD_DIM])
            m_i, l_i, acc = _fold(q, k, v, m_i, l_i, acc, qk_scale, every)
    if full_end < end:  # the sequence's last, partial step: masked pointer loads, as the library's
        pos = full_end + tl.arange(0, STEP)
        valid = pos < end
        page = tl.load(BLOCK_TABLE + row0 + pos // PAGE_SIZE, mask=valid, other=0)
        safe = tl.minimum(tl.maximum(page, 0), num_pages - 1)
        stray += tl.sum((page != safe).to(tl.int32), axis=0)
        row = (safe.to(tl.int64) * PAGE_SIZE + pos % PAGE_SIZE) * HKV + kvh
        k = tl.load(K + row[:, None] * HEAD_DIM + d[None, :], mask=valid[:, None], other=0.0)
        v = tl.load(V + row[:, None] * HEAD_DIM + d[None, :], mask=valid[:, None], other=0.0)
        m_i, l_i, acc = _fold(q, k, v, m_i, l_i, acc, qk_scale, valid)
    flagged = flagged | (stray > 0)
    l_i = tl.where(flagged, float("nan"), l_i)
    if ONE_SPLIT:
        o = acc / l_i[:, None]
        tl.store(O + (b * HKV * GROUP + heads)[:, None] * HEAD_DIM + d[None, :], o.to(O.dtype.element_ty),
                 mask=g[:, None] < GROUP)
    else:
        part = (b * HKV * GROUP + heads) * splits + split
        tl.store(M + part, m_i, mask=g < GROUP)
        tl.store(L + part, l_i, mask=g < GROUP)
        tl.store(ACC + part[:, None] * HEAD_DIM + d[None, :], acc, mask=g[:, None] < GROUP)


def descriptors(k_cache, v_cache, box):
    """The two caches as 2-D descriptors ``(num_pages * PAGE_SIZE, Hkv * D)`` of ``[box, D]`` boxes."""
    P, S, H, D = k_cache.shape
    return tuple(TensorDescriptor(c, [P * S, H * D], [H * D, 1], [box, D]) for c in (k_cache, v_cache))


def decode_attention_tma(q, k_cache, v_cache, seq_lens, block_table, sm_scale=None, plan=None, box=None, descs=None):
    """``fast.decode_attention`` with this split kernel: the library's checks, its plan (or ``plan``, whose
    ``block_n`` is the step: ``box`` tokens a box, the page's or 64 at most by default), its combine.
    ``descs`` reuses descriptors made by ``descriptors`` (the probe's graphs: a call then allocates less)."""
    sm_scale = fast.check_inputs(q, k_cache, v_cache, seq_lens, block_table, sm_scale)
    plan = plan or fast.plan_of(q, k_cache, block_table)
    B, Hq, D = q.shape
    _, page_size, Hkv, _ = k_cache.shape
    box = box or min(page_size, plan.block_n)
    if box > page_size or plan.block_n % box or box < 16:
        raise ValueError(f"a box of {box} tokens: at least 16, at most the page ({page_size}), dividing the step "
                         f"({plan.block_n})")
    kd, vd = descs or descriptors(k_cache, v_cache, box)
    out = torch.empty_like(q)
    n = B * Hq * plan.splits
    ws = torch.empty(max(n, 1) * (D + 2), device=q.device, dtype=torch.float32)
    m, l, acc = ws[n * D: n * D + n], ws[n * D + n:], ws[: n * D]
    if plan.one_split:
        m = l = acc = out
    group = Hq // Hkv
    decode_split_kv_tma[(B * Hkv, plan.splits)](
        q, kd, vd, k_cache, v_cache, seq_lens, block_table, out, m, l, acc, k_cache.shape[0], block_table.shape[1],
        sm_scale * fast.LOG2E, plan.splits, HKV=Hkv, GROUP=group, BLOCK_G=max(16, triton.next_power_of_2(group)),
        HEAD_DIM=D, PAGE_SIZE=page_size, BOX=box, BOXES=plan.block_n // box, ONE_SPLIT=plan.one_split,
        num_warps=plan.num_warps, num_stages=plan.num_stages)
    if not plan.one_split:
        fast.decode_merge[(B * Hq,)](m, l, acc, out, plan.splits, HEAD_DIM=D, BLOCK_S=plan.block_s,
                                     num_warps=plan.combine_warps)
    return out


def check_cpu():
    """Against the library in the interpreter: pages 16 and 32, boxes of 16 and 32, one and several splits,
    lengths that end inside a step, a zero length, a page outside the pool (NaN row)."""
    torch.manual_seed(0)
    ok = True
    cases = ((16, 16, 32, [40, 7], 3), (32, 16, 32, [100, 64], 2), (32, 32, 64, [77, 33], 1), (16, 16, 16, [0, 50], 2))
    for page_size, box, step, lens, splits in cases:
        B, Hq, Hkv, D, max_pages = len(lens), 8, 2, 64, 8
        num_pages = B * max_pages
        q = torch.randn(B, Hq, D)
        k_cache, v_cache = (torch.randn(num_pages, page_size, Hkv, D) for _ in range(2))
        table = torch.randperm(num_pages, dtype=torch.int32).reshape(B, max_pages)
        for b, n in enumerate(lens):  # the pool's rows past each sequence's end hold NaN: none may leak in
            if n % page_size:
                k_cache[table[b, n // page_size], n % page_size:] = float("nan")
                v_cache[table[b, n // page_size], n % page_size:] = float("nan")
        seq_lens = torch.tensor(lens, dtype=torch.int32)
        plan = decode_plan.Plan(step, splits, 4, 2, 4, triton.next_power_of_2(splits))
        out = decode_attention_tma(q, k_cache, v_cache, seq_lens, table, plan=plan, box=box)
        want = fast.decode_attention(q, k_cache, v_cache, seq_lens, table,
                                     config=dict(BLOCK_N=step, splits=splits, num_warps=4, num_stages=2))
        same = torch.allclose(out, want, atol=1e-4, equal_nan=True)
        ok &= same
        print(f"page {page_size} box {box} step {step} lens {lens} splits {splits}: {'ok' if same else 'WRONG'} "
              f"(max diff {(out - want).nan_to_num().abs().max().item():.1e}, NaN rows "
              f"{torch.isnan(out).any(dim=(1, 2)).tolist()})")
    bad = table.clone()
    bad[1, 0] = num_pages + 5  # a page outside the pool: that sequence's row is NaN, the other is not
    out = decode_attention_tma(q, k_cache, v_cache, torch.tensor([40, 50], dtype=torch.int32), bad, plan=plan)
    flagged = torch.isnan(out).any(dim=(1, 2)).tolist()
    print(f"a page outside the pool: NaN rows {flagged}")
    return ok and flagged == [False, True]


def compile_table():
    """Compile for sm_90a and count the TTGIR's asynchronous copies and waits of the split kernel's loop."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    print("triton", triton.__version__)
    for box, boxes, stages in ((16, 1, 3), (16, 1, 5), (16, 4, 3), (16, 8, 3), (16, 8, 4)):
        sig = {a: "*fp16" for a in ("Q", "K", "V", "O")}
        sig.update({a: "*fp32" for a in ("M", "L", "ACC")})
        sig.update(SEQ_LENS="*i32", BLOCK_TABLE="*i32", num_pages="i32", max_pages="i32", qk_scale="fp32",
                   splits="i32")
        sig.update(K_DESC=f"tensordesc<fp16[{box}, 128]>", V_DESC=f"tensordesc<fp16[{box}, 128]>")
        consts = dict(HKV=8, GROUP=4, BLOCK_G=16, HEAD_DIM=128, PAGE_SIZE=16, BOX=box, BOXES=boxes, ONE_SPLIT=False)
        sig.update({c: "constexpr" for c in consts})
        src = ASTSource(decode_split_kv_tma, sig, constexprs=consts)
        k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4, num_stages=stages))
        ir = k.asm["ttgir"]
        count = {w: len(re.findall(w, ir)) for w in ("async_tma_copy_global_to_local", "wait_barrier",
                                                      "async_copy_global_to_local", "local_alloc")}
        print(f"box {box} x {boxes}, stages {stages}: {count}, shared {k.metadata.shared} B, "
              f"regs {getattr(k, 'n_regs', '?')}", flush=True)


if __name__ == "__main__":
    if "--compile" in sys.argv:
        compile_table()
    else:
        sys.exit(0 if check_cpu() else 1)
