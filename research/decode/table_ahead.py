"""Research prototype: the fast decode's split kernel with the block table read once, before the loop.

The library's split kernel (``solutions/kernels/decode_attention.py``) loads each step's page indices from
the block table and then K and V through them. Triton's software pipeliner calls a load whose address comes
from another load of the loop *indirect*, and gives it fewer stages of its own (``(num_stages - 1) // 2``):
at B 1 x 32768 (page 16) each program has about one step of K and V on the way, and the kernel reaches
0.73-0.77 of a copy where a kernel that only reads the cache reaches 0.85 (``research/README.md``, the
decode sections; ``stages_probe.py``, ``gluon_decode.py``).

Here each program loads its split's whole row of the block table once, before the loop (``MAX_PAGES``
entries: the pages a split spans, rounded up to a power of two), clamps it into the pool, and inside the loop
picks each token's page out of those registers with ``tl.gather``. No load of the loop then feeds another
load's address, so the pipeliner may give K and V every stage. What is kept from the library: the plan
(``decode_attention.plan_of``), the combine (``decode_merge``), the checks of the values (a page outside the
pool is clamped and flags its sequence, a length past the table or below 1 runs no step: NaN rows).

    python research/decode/table_ahead.py        # CPU: the checks in the interpreter, then the sm_90a pipelining

Never run on a GPU (written 2026-12-04). ``--compile`` (with triton 3.6 on the path, as the GPU machine has)
compiles the library's split kernel and this one for sm_90a and counts, in each one's TTGIR, the asynchronous
copies, the shared-memory buffers they fill and the waits.
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
# isort: on

from solutions.kernels import decode_attention as fast  # noqa: E402

__all__ = ["decode_split_kv_ahead", "decode_attention_ahead", "max_pages_for", "pipelining"]


@triton.jit
def decode_split_kv_ahead(Q, K, V, SEQ_LENS, BLOCK_TABLE, O, M, L, ACC, num_pages, max_pages, qk_scale, splits,
                          HKV: tl.constexpr, GROUP: tl.constexpr, BLOCK_G: tl.constexpr, HEAD_DIM: tl.constexpr,
                          PAGE_SIZE: tl.constexpr, BLOCK_N: tl.constexpr, ONE_SPLIT: tl.constexpr,
                          MAX_PAGES: tl.constexpr):
    """``fast.decode_split_kv`` (same arguments, no PDL), the split's row of the block table read ahead:
    ``MAX_PAGES`` at least the pages one split spans."""
    bh = tl.program_id(0)
    split = tl.program_id(1)
    b, kvh = bh // HKV, bh % HKV
    g = tl.arange(0, BLOCK_G)
    d = tl.arange(0, HEAD_DIM)
    heads = kvh * GROUP + g
    seq_len = tl.load(SEQ_LENS + b)
    flagged = (seq_len < 1) | (seq_len > max_pages * PAGE_SIZE)
    n = tl.where(flagged, 0, seq_len)
    per = tl.cdiv(tl.cdiv(n, BLOCK_N), splits) * BLOCK_N
    start = split * per
    end = tl.minimum(start + per, n)
    q = tl.load(Q + (b * HKV * GROUP + heads)[:, None] * HEAD_DIM + d[None, :], mask=g[:, None] < GROUP, other=0.0)

    row0 = b.to(tl.int64) * max_pages
    p0 = start // PAGE_SIZE  # this split's first page
    slots = tl.arange(0, MAX_PAGES)
    used = (p0 + slots) * PAGE_SIZE < end  # the table entries this split reads (none when it runs no step)
    table = tl.load(BLOCK_TABLE + row0 + p0 + slots, mask=used, other=0)
    safe_table = tl.minimum(tl.maximum(table, 0), num_pages - 1)  # clamped into the pool: no stray address
    stray = tl.sum((used & (table != safe_table)).to(tl.int32), axis=0)  # a page outside the pool flags

    m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, HEAD_DIM], tl.float32)
    for t in range(start, end, BLOCK_N):
        pos = t + tl.arange(0, BLOCK_N)
        valid = pos < end
        local = tl.minimum(pos // PAGE_SIZE - p0, MAX_PAGES - 1)  # this token's slot of the row read ahead
        page = tl.gather(safe_table, local, 0)
        row = (page.to(tl.int64) * PAGE_SIZE + pos % PAGE_SIZE) * HKV + kvh
        k = tl.load(K + row[:, None] * HEAD_DIM + d[None, :], mask=valid[:, None], other=0.0)
        v = tl.load(V + row[:, None] * HEAD_DIM + d[None, :], mask=valid[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k)) * qk_scale
        s = tl.where(valid[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
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


def max_pages_for(plan, page_size, max_pages) -> int:
    """The table entries one split of ``plan`` can span, rounded up to a power of two: a split's share of the
    longest sequence the table holds, whole steps, plus one page where a share starts inside a page."""
    n = max_pages * page_size
    per = triton.cdiv(triton.cdiv(n, plan.block_n), plan.splits) * plan.block_n
    return triton.next_power_of_2(triton.cdiv(per, page_size) + 1)


def _launch_args(q, k_cache, v_cache, seq_lens, block_table, sm_scale, plan):
    B, Hq, D = q.shape
    _, page_size, Hkv, _ = k_cache.shape
    group = Hq // Hkv
    out = torch.empty_like(q)
    n = B * Hq * plan.splits
    ws = torch.empty(max(n, 1) * (D + 2), device=q.device, dtype=torch.float32)
    m, l, acc = ws[n * D: n * D + n], ws[n * D + n:], ws[: n * D]
    if plan.one_split:
        m = l = acc = out
    meta = dict(HKV=Hkv, GROUP=group, BLOCK_G=max(16, triton.next_power_of_2(group)), HEAD_DIM=D,
                PAGE_SIZE=page_size, BLOCK_N=plan.block_n, ONE_SPLIT=plan.one_split,
                MAX_PAGES=max_pages_for(plan, page_size, block_table.shape[1]),
                num_warps=plan.num_warps, num_stages=plan.num_stages)
    args = (q, k_cache, v_cache, seq_lens, block_table, out, m, l, acc, k_cache.shape[0], block_table.shape[1],
            sm_scale * fast.LOG2E, plan.splits)
    return (B * Hkv, plan.splits), args, meta, (m, l, acc, out)


def decode_attention_ahead(q, k_cache, v_cache, seq_lens, block_table, sm_scale=None, plan=None, max_seq_len=None):
    """``fast.decode_attention`` with this split kernel: the library's checks, its plan (or ``plan``, a
    ``decode_plan.Plan``), its combine, launched the ordinary way."""
    sm_scale = fast.check_inputs(q, k_cache, v_cache, seq_lens, block_table, sm_scale)
    plan = plan or fast.plan_of(q, k_cache, block_table, max_seq_len)
    q, k_cache, v_cache, seq_lens, block_table = (t.contiguous() for t in (q, k_cache, v_cache, seq_lens, block_table))
    grid, args, meta, (m, l, acc, out) = _launch_args(q, k_cache, v_cache, seq_lens, block_table, sm_scale, plan)
    if meta["MAX_PAGES"] > 4096:
        raise ValueError(f"a split spans {meta['MAX_PAGES']} pages: more than this prototype holds in registers")
    decode_split_kv_ahead[grid](*args, **meta)
    if not plan.one_split:
        fast.decode_merge[(q.shape[0] * q.shape[1],)](m, l, acc, out, plan.splits, HEAD_DIM=q.shape[2],
                                                       BLOCK_S=plan.block_s, num_warps=plan.combine_warps)
    return out


def pipelining(ttgir: str) -> str:
    """What the software pipeliner made of a kernel's loads: the asynchronous copies into shared memory, the
    multi-buffered allocations they fill (``NxROWSxD``) and the ``async_wait`` counts."""
    copies = len(re.findall(r"ttg\.async_copy_global_to_local", ttgir))
    allocs = re.findall(r"ttg\.local_alloc\s*:\s*\(\)\s*->\s*!ttg\.memdesc<([0-9x]+)x(?:f16|bf16|i32)", ttgir)
    waits = re.findall(r"ttg\.async_wait[^\n]*\{num = (\d+) : i32\}", ttgir)
    return f"async copies {copies}, buffers {sorted(set(allocs))}, async_wait nums {waits}"


def _compile(kernel, plan, page_size=16, D=128, group=4, hkv=8, max_pages=2048, extra=None):
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sig = {"Q": "*fp16", "K": "*fp16", "V": "*fp16", "SEQ_LENS": "*i32", "BLOCK_TABLE": "*i32", "O": "*fp16",
           "M": "*fp32", "L": "*fp32", "ACC": "*fp32", "num_pages": "i32", "max_pages": "i32", "qk_scale": "fp32",
           "splits": "i32"}
    consts = dict(HKV=hkv, GROUP=group, BLOCK_G=16, HEAD_DIM=D, PAGE_SIZE=page_size, BLOCK_N=plan.block_n,
                  ONE_SPLIT=False, **(extra or {}))
    for param in kernel.params:  # constexprs left at their defaults (triton 3.7 wants them named)
        if param.is_constexpr and param.name not in consts:
            consts[param.name] = param.default
    sig.update({k: "constexpr" for k in consts})
    sig = {name: sig[name] for name in kernel.arg_names}
    aligned = [i for i, name in enumerate(kernel.arg_names) if name in ("Q", "K", "V", "SEQ_LENS", "BLOCK_TABLE",
                                                                        "O", "M", "L", "ACC", "max_pages")]
    src = ASTSource(kernel, sig, constexprs=consts, attrs={(i,): [["tt.divisibility", 16]] for i in aligned})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32),
                          options=dict(num_warps=plan.num_warps, num_stages=plan.num_stages))


def compile_pair(stages: int, block_n: int = 128) -> dict:
    """``{"library": ..., "table ahead": ...}``: ``pipelining`` and the shared memory of each split kernel
    compiled for sm_90a at the B 1 x 32768 plan (page 16, D 128, G 4, 32 splits) with ``stages``."""
    from solutions.kernels import decode_plan

    plan = decode_plan.Plan(block_n, 32, 4, stages, 4, 32)
    lib = _compile(fast.decode_split_kv, plan)
    ahead = _compile(decode_split_kv_ahead, plan, extra=dict(MAX_PAGES=max_pages_for(plan, 16, 2048)))
    return {name: f"{pipelining(k.asm['ttgir'])}, shared {k.metadata.shared} bytes"
            for name, k in (("library", lib), ("table ahead", ahead))}


def compile_table():
    """``compile_pair`` at 2 to 5 stages, printed."""
    print("triton", triton.__version__)
    for stages in (2, 3, 4, 5):
        for name, line in compile_pair(stages).items():
            print(f"stages {stages} {name:12s}: {line}", flush=True)


def check_cpu():
    """Against the library's reference in the interpreter: page sizes 1, 4 and 16, one and several splits,
    a bad page (NaN row) and a zero length."""
    torch.manual_seed(0)
    from solutions.kernels import decode_plan

    ok = True
    for page_size, lens, splits in ((16, [40, 7], 3), (4, [33, 64], 1), (1, [19, 5], 2), (16, [0, 50], 2)):
        B, Hq, Hkv, D, max_pages = len(lens), 8, 2, 64, 8 * (16 // page_size + 1)
        num_pages = B * max_pages
        q = torch.randn(B, Hq, D)
        k_cache, v_cache = (torch.randn(num_pages, page_size, Hkv, D) for _ in range(2))
        block_table = torch.randperm(num_pages, dtype=torch.int32).reshape(B, max_pages)
        seq_lens = torch.tensor(lens, dtype=torch.int32)
        plan = decode_plan.Plan(16, splits, 4, 2, 4, triton.next_power_of_2(splits))
        out = decode_attention_ahead(q, k_cache, v_cache, seq_lens, block_table, plan=plan)
        want = fast.decode_attention(q, k_cache, v_cache, seq_lens, block_table,
                                     config=dict(BLOCK_N=16, splits=splits, num_warps=4, num_stages=2))
        same = torch.allclose(out, want, atol=1e-4, equal_nan=True)
        ok &= same
        print(f"page {page_size} lens {lens} splits {splits}: {'ok' if same else 'WRONG'} "
              f"(max diff {(out - want).nan_to_num().abs().max().item():.1e}, NaN rows "
              f"{torch.isnan(out).any(dim=(1, 2)).tolist()})")
    bad = block_table.clone()
    bad[1, 0] = num_pages + 5  # a page outside the pool: that sequence's row is NaN, the other is not
    seq_lens = torch.tensor([40, 50], dtype=torch.int32)
    out = decode_attention_ahead(q, k_cache, v_cache, seq_lens, bad, plan=plan)
    flagged = torch.isnan(out).any(dim=(1, 2)).tolist()
    print(f"a page outside the pool: NaN rows {flagged}")
    return ok and flagged == [False, True]


if __name__ == "__main__":
    if "--compile" in sys.argv:
        compile_table()
    else:
        sys.exit(0 if check_cpu() else 1)
