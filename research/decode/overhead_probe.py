"""Where decode at one long sequence (B 1 x 32768, page 16) loses to a kernel that only reads: the split
kernel alone, the combine alone, and split kernels that prefetch the next step's K and V or merge the
partials themselves.

    PYTHONPATH=$PWD python3 research/decode/overhead_probe.py [OUT] [--lens 32768]

Why: ``spread_probe.py`` found the fast path 7 us (about 15%) slower than a kernel that reads the same
bytes and does nothing else, under either flush, at every plan it swept (tokens a step, splits, warps
and stages all within 2% of each other; the stages changed nothing). An sm_90a compile of the split kernel
with triton 3.6 shows why the stages do nothing: the software pipeline takes only the block-table loads;
the K and V tiles, whose addresses come from those loads, are loaded into registers where they are used,
each step waiting for its own tiles. So the probe times:

- ``library``: the fast path as the table times it (lean launch; split kernel, then the combine);
- ``split only`` / ``combine only``: each of the library's two kernels launched alone (the combine on
  the partials the split kernel left);
- ``exp``: this file's split kernel, the library's arithmetic without the length and page checks, at
  four settings: as the library (the control), ``prefetch`` (each step issues the next step's K and V
  loads, and the page indices of the step after, before it computes on its own tiles: two steps of
  tiles in flight a program), ``fused`` (the last split of a (sequence, KV head) to finish merges the
  partials and writes the output, counted with an atomic as ``kernels.matmul_small``'s split-K is: no
  second kernel), and both;
- ``read``: ``spread_probe.read_fn``, the floor of a kernel that only reads.

Each variant is checked against SDPA first. Timed in CUDA graphs under the zeroing flush (the table's
``graph_ms``) and the reading flush; prints microseconds and the fraction of a same-size copy; writes
``OUT/overhead_probe.json``.
"""

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "research" / "decode"))
# isort: off
import tkcourse  # noqa: E402, F401  (first: the mode, before triton is imported)
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
# isort: on
from spread_probe import read_fn  # noqa: E402

from benchmarks import decode_attention as bench  # noqa: E402
from solutions.kernels import decode_attention as fast  # noqa: E402
from tkcourse.bench import graph_ms  # noqa: E402

FLUSHES = ("zero", "read")
LOG2E = 1.4426950408889634


@triton.jit
def _tiles(K, V, BLOCK_TABLE, row0, pos, end, num_pages, kvh, d, HKV: tl.constexpr, HEAD_DIM: tl.constexpr,
           PAGE_SIZE: tl.constexpr):
    """The K and V tiles of tokens ``pos`` (masked past ``end``), their pages read from the table."""
    valid = pos < end
    page = tl.load(BLOCK_TABLE + row0 + pos // PAGE_SIZE, mask=valid, other=0)
    page = tl.minimum(tl.maximum(page, 0), num_pages - 1)
    row = (page.to(tl.int64) * PAGE_SIZE + pos % PAGE_SIZE) * HKV + kvh
    k = tl.load(K + row[:, None] * HEAD_DIM + d[None, :], mask=valid[:, None], other=0.0)
    v = tl.load(V + row[:, None] * HEAD_DIM + d[None, :], mask=valid[:, None], other=0.0)
    return k, v


@triton.jit
def _step(q, k, v, valid, m_i, l_i, acc, qk_scale):
    s = tl.dot(q, tl.trans(k)) * qk_scale
    s = tl.where(valid[None, :], s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return m_new, l_i, acc


@triton.jit
def exp_split_kv(Q, K, V, SEQ_LENS, BLOCK_TABLE, O, M, L, ACC, CNT, num_pages, max_pages, qk_scale, splits,
                 HKV: tl.constexpr, GROUP: tl.constexpr, BLOCK_G: tl.constexpr, HEAD_DIM: tl.constexpr,
                 PAGE_SIZE: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_S: tl.constexpr, PREFETCH: tl.constexpr,
                 FUSED: tl.constexpr):
    bh = tl.program_id(0)
    split = tl.program_id(1)
    b, kvh = bh // HKV, bh % HKV
    g = tl.arange(0, BLOCK_G)
    d = tl.arange(0, HEAD_DIM)
    heads = kvh * GROUP + g
    n = tl.load(SEQ_LENS + b)
    per = tl.cdiv(tl.cdiv(n, BLOCK_N), splits) * BLOCK_N
    start = split * per
    end = tl.minimum(start + per, n)
    q = tl.load(Q + (b * HKV * GROUP + heads)[:, None] * HEAD_DIM + d[None, :], mask=g[:, None] < GROUP, other=0.0)
    m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, HEAD_DIM], tl.float32)
    row0 = b.to(tl.int64) * max_pages
    ar = tl.arange(0, BLOCK_N)
    if PREFETCH:
        k_nx, v_nx = _tiles(K, V, BLOCK_TABLE, row0, start + ar, end, num_pages, kvh, d, HKV, HEAD_DIM, PAGE_SIZE)
        for t in range(start, end, BLOCK_N):
            k, v = k_nx, v_nx
            k_nx, v_nx = _tiles(K, V, BLOCK_TABLE, row0, t + BLOCK_N + ar, end, num_pages, kvh, d, HKV, HEAD_DIM,
                                PAGE_SIZE)  # the next step's tiles, loaded while this step computes
            m_i, l_i, acc = _step(q, k, v, (t + ar) < end, m_i, l_i, acc, qk_scale)
    else:
        for t in range(start, end, BLOCK_N):
            k, v = _tiles(K, V, BLOCK_TABLE, row0, t + ar, end, num_pages, kvh, d, HKV, HEAD_DIM, PAGE_SIZE)
            m_i, l_i, acc = _step(q, k, v, (t + ar) < end, m_i, l_i, acc, qk_scale)
    part = (b * HKV * GROUP + heads) * splits + split
    tl.store(M + part, m_i, mask=g < GROUP, cache_modifier=".cg")
    tl.store(L + part, l_i, mask=g < GROUP, cache_modifier=".cg")
    tl.store(ACC + part[:, None] * HEAD_DIM + d[None, :], acc, mask=g[:, None] < GROUP, cache_modifier=".cg")
    if FUSED:
        tl.debug_barrier()  # every thread's partial is written before the count says so
        done = tl.atomic_add(CNT + bh, 1, sem="acq_rel")
        if done == splits - 1:  # the last split of this (sequence, KV head): merge its query heads
            s = tl.arange(0, BLOCK_S)
            for gi in tl.static_range(GROUP):
                row = (b * HKV * GROUP + kvh * GROUP + gi) * splits + s
                m_s = tl.load(M + row, mask=s < splits, other=float("-inf"), cache_modifier=".cg")
                l_s = tl.load(L + row, mask=s < splits, other=0.0, cache_modifier=".cg")
                a_s = tl.load(ACC + row[:, None] * HEAD_DIM + d[None, :], mask=s[:, None] < splits, other=0.0,
                              cache_modifier=".cg")
                mx = tl.max(m_s, axis=0)
                w = tl.exp2(m_s - mx)
                o = tl.sum(a_s * w[:, None], axis=0) / tl.sum(l_s * w, axis=0)
                tl.store(O + (b * HKV * GROUP + kvh * GROUP + gi) * HEAD_DIM + d, o.to(O.dtype.element_ty))
            tl.atomic_xchg(CNT + bh, 0)  # ready for the next launch


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", default=None)
    ap.add_argument("--lens", type=int, default=32768)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs a GPU: the interpreter's times say nothing of one")
        return 0
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, f"B1 x {args.lens}, page 16", flush=True)
    q, k, v, seq_lens, table = bench.paged_cache([args.lens], 16)
    kc, vc = bench.contiguous_cache(k, seq_lens, table), bench.contiguous_cache(v, seq_lens, table)
    ref = bench.sdpa(q, kc, vc).float()
    B, Hq, D = q.shape
    Hkv = k.shape[2]
    plan = fast.plan_of(q, k, table)
    print("plan:", plan, flush=True)
    scale = D ** -0.5 * LOG2E
    dst = torch.empty_like(k)
    fns = {"library": lambda: fast.decode_attention(q, k, v, seq_lens, table), "copy": lambda: dst.copy_(k),
           "read": read_fn(k, v)}

    def library_parts(splits, block_n):
        n = B * Hq * splits
        ws = torch.empty(n * (D + 2), device=q.device, dtype=torch.float32)
        m, l, acc = ws[n * D: n * D + n], ws[n * D + n:], ws[: n * D]
        out = torch.empty_like(q)
        split_kw = dict(HKV=Hkv, GROUP=Hq // Hkv, BLOCK_G=16, HEAD_DIM=D, PAGE_SIZE=16, BLOCK_N=block_n,
                        ONE_SPLIT=False, num_warps=4, num_stages=3)

        def split_only():
            fast.decode_split_kv[(B * Hkv, splits)](q, k, v, seq_lens, table, out, m, l, acc, k.shape[0],
                                                    table.shape[1], scale, splits, **split_kw)

        def combine_only():
            fast.decode_merge[(B * Hq,)](m, l, acc, out, splits, HEAD_DIM=D, BLOCK_S=triton.next_power_of_2(splits),
                                         num_warps=4)

        def both():
            split_only()
            combine_only()
            return out
        return split_only, combine_only, both

    split_only, combine_only, both = library_parts(plan.splits, plan.block_n)
    errs = {"library": (fns["library"]().float() - ref).abs().max().item(),
            "split + combine": (both().float() - ref).abs().max().item()}
    fns["split only"] = split_only
    fns["combine only"] = combine_only

    cnt = torch.zeros(B * Hkv, dtype=torch.int32, device=q.device)

    def exp(block_n, splits, warps, prefetch, fused):
        n = B * Hq * splits
        m = torch.empty(n, device=q.device, dtype=torch.float32)
        l, acc = torch.empty_like(m), torch.empty(n * D, device=q.device, dtype=torch.float32)
        out = torch.empty_like(q)
        kw = dict(HKV=Hkv, GROUP=Hq // Hkv, BLOCK_G=16, HEAD_DIM=D, PAGE_SIZE=16, BLOCK_N=block_n,
                  BLOCK_S=triton.next_power_of_2(splits), PREFETCH=prefetch, FUSED=fused, num_warps=warps, num_stages=1)

        def fn():
            exp_split_kv[(B * Hkv, splits)](q, k, v, seq_lens, table, out, m, l, acc, cnt, k.shape[0], table.shape[1],
                                            scale, splits, **kw)
            if not fused:
                fast.decode_merge[(B * Hq,)](m, l, acc, out, splits, HEAD_DIM=D, BLOCK_S=triton.next_power_of_2(splits),
                                             num_warps=4)
            return out
        return fn

    variants = [(128, 32, 4, False, False), (128, 32, 4, False, True), (64, 32, 4, True, False),
                (64, 32, 4, True, True), (64, 64, 4, True, False), (64, 64, 4, True, True), (128, 32, 8, True, False),
                (128, 32, 8, True, True), (64, 32, 8, True, True)]
    for bn, sp, w, pf, fu in variants:
        name = f"exp {bn}/{sp}/{w}{' prefetch' if pf else ''}{' fused' if fu else ''}"
        try:
            fn = exp(bn, sp, w, pf, fu)
            errs[name] = max((fn().float() - ref).abs().max().item() for _ in range(3))  # the counter resets
            fns[name] = fn
        except Exception as e:  # noqa: BLE001  (a variant that does not compile or fit)
            print(f"{name}: {type(e).__name__} {str(e)[:200]}", flush=True)
    fns["sdpa"] = lambda: bench.sdpa(q, kc, vc)
    for name, e in errs.items():
        print(f"{name:34s} max |diff| against SDPA {e:.1e}{'' if e < 1e-3 else '  WRONG'}", flush=True)
    rows = []
    t = {f: {} for f in FLUSHES}
    for name, fn in fns.items():
        for f in FLUSHES:
            t[f][name] = graph_ms(fn, rep=80, flush=f) * 1e3
    for name in fns:
        rows.append(dict(name=name, err=errs.get(name), **{f"us_{f}": round(t[f][name], 2) for f in FLUSHES},
                         **{f"of_copy_{f}": round(t[f]["copy"] / t[f][name], 3) for f in FLUSHES}))
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "overhead_probe.json").write_text(json.dumps(rows, indent=1))
    print("\nprovider                            zero flush us (of copy)   read flush us (of copy)")
    for r in rows:
        print(f"{r['name']:34s}  {r['us_zero']:7.1f} ({r['of_copy_zero']:.3f})         {r['us_read']:7.1f} "
              f"({r['of_copy_read']:.3f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
