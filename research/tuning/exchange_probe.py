"""Probes for the two #6 figures still short (a tuning aid, not part of the course).

S: the one-read online softmax's cross-program exchange. Variants of one_read_softmax_kernel:
   "counter" (the current kernel: per-part stores, a release counter, acquire spin),
   "packed"  (each part publishes m and l as one 64-bit word that is its own flag: no counter, no fence),
   "packed-pid" (as packed, parts numbered by program_id instead of a ticket: measures the ticket's cost;
   unsafe in principle, never shipped).
A: attention forward for causal and short N: a single key loop with the diagonal masked inside it
   (so warp specialization applies to causal attention too), heaviest-first order across heads
   (GROUP heads at a time), and 256-row query blocks for D = 64.
T: the solution's kernel (parts numbered by program id, a bounded wait with a fallback) at several
   part sizes, against "packed-pid". (A variant holding parts of two rows, the second load in flight
   during the first wait, ran on 2026-11-29 and was slower everywhere; see the log. Removed since.)
U (with T, "TU"): the solution against the same kernel without its fallback, and packed-pid.
Run on the GPU machine from the repository root: PYTHONPATH=$PWD python3 research/tuning/exchange_probe.py SA (or T, TU)
"""
import itertools
import sys
import time

import tkcourse  # noqa: F401  (before triton)
import torch
import triton
import triton.language as tl

from tkcourse.bench.core import graph_ms, measure
import solutions.kernels.online_softmax_one_read as O  # the lesson's last step: the one-read and lanes kernels
import solutions.kernels.online_softmax_split as OS  # the split step: the (m, l) exchange words, the two-pass plan
import solutions.kernels.attention_forward as F  # the tuned forward: the kernel these probes tune

# imported (pipeline_probe.py uses its kernels): no part runs
what = (sys.argv[1] if len(sys.argv) > 1 else "SA") if __name__ == "__main__" else ""


def db(fn):  # median ms from do_bench, shorter than the bench's
    return measure(fn, warmup=10, rep=40)[0]


@triton.jit
def load_and_publish(x_ptr, x_row_stride, n_cols, slots_ptr, PARTS: tl.constexpr, PART: tl.constexpr):
    """The one-read kernels' start: this program's part, loaded once (O.load_part), its (m, l) published."""
    pid = tl.program_id(0)
    row = pid // PARTS
    part = pid % PARTS
    x_row = x_ptr + row.to(tl.int64) * x_row_stride
    cols = part * PART + tl.arange(0, PART)
    mask = cols < n_cols
    e, shift, m_p, l_p = O.load_part(x_row, cols, mask)
    OS.publish_part(slots_ptr, row, part, m_p, l_p, PARTS)
    return row, x_row, cols, mask, e, shift


@triton.jit
def _packed_kernel(x_ptr, out_ptr, x_row_stride, out_row_stride, n_cols, ticket_ptr, slots_ptr,
                   PARTS: tl.constexpr, PART: tl.constexpr, TICKET: tl.constexpr):
    if TICKET:
        t = tl.atomic_add(ticket_ptr, 1)
    else:
        t = tl.program_id(0)
    row = t // PARTS
    part = t % PARTS
    cols = part * PART + tl.arange(0, PART)
    mask = cols < n_cols
    e, shift, m_p, l_p = O.load_part(x_ptr + row.to(tl.int64) * x_row_stride, cols, mask)
    OS.publish_part(slots_ptr, row, part, m_p, l_p, PARTS)  # one word, its own flag
    slots = slots_ptr + row * PARTS + tl.arange(0, PARTS)
    w = tl.load(slots, volatile=True)
    while tl.sum((w == 0).to(tl.int32), axis=0) > 0:  # unbounded: no fallback
        w = tl.load(slots, volatile=True)
    m, l = OS.combine_words(w)
    y = e * (tl.exp(shift - m) / l)
    tl.store(out_ptr + row.to(tl.int64) * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask,
             eviction_policy="evict_first")


@triton.jit
def _uniform_no_fallback_kernel(x_ptr, out_ptr, x_row_stride, out_row_stride, n_cols, slots_ptr,
                                PARTS: tl.constexpr, PART: tl.constexpr, SPAN: tl.constexpr):
    """The solution's kernel without its fallback: an unbounded wait, the solution's combine_parts (uniform over
    all threads until commit a044a81, per warp since), to measure what the fallback costs."""
    row, x_row, cols, mask, e, shift = load_and_publish(x_ptr, x_row_stride, n_cols, slots_ptr, PARTS, PART)
    m, l, complete = OS.combine_parts(slots_ptr, row, 2**31 - 1, SPAN, PARTS, SPAN)
    y = e * (tl.exp(shift - m) / l)
    tl.store(out_ptr + row.to(tl.int64) * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask,
             eviction_policy="evict_first")


def uniform_no_fallback(x, out, parts, part, warps):
    n_rows, n_cols = x.shape
    slots = torch.zeros((n_rows, parts), dtype=torch.int64, device=x.device)
    _uniform_no_fallback_kernel[(parts * n_rows,)](x, out, x.stride(0), out.stride(0), n_cols, slots, PARTS=parts,
                                                   PART=part, SPAN=O.exchange_span(warps), num_warps=warps)
    return out


def packed(x, out, parts, part, warps, ticket=True):
    n_rows, n_cols = x.shape
    slots = torch.zeros(1 + n_rows * parts, dtype=torch.int64, device=x.device)
    _packed_kernel[(parts * n_rows,)](x, out, x.stride(0), out.stride(0), n_cols, slots, slots[1:],
                                      PARTS=parts, PART=part, TICKET=ticket, num_warps=warps)
    return out


summary = []
if "T" in what:  # the solution's kernel (program-id parts, bounded wait) against the variants
    for M, N in [(4096, 32768), (1024, 131072), (256, 262144)]:
        x = torch.randn(M, N, dtype=torch.float16, device="cuda") * 3
        b = 4 * M * N
        ref = torch.softmax(x.float(), -1)
        y = torch.empty_like(x)
        cp = b / graph_ms(lambda: y.copy_(x), rep=60) * 1e-6
        torch_gbs = b / db(lambda: torch.softmax(x, -1)) * 1e-6
        cur_db = b / db(lambda: O.softmax(x)) * 1e-6
        res = []
        sizes = ((4096, 2), (8192, 2), (8192, 4), (16384, 4), (16384, 8), (32768, 8))
        if "U" in what:  # the fallback's cost: the solution against itself without the fallback
            sizes = ((8192, 4), (16384, 4))
            runs = [(v, pb, w, None) for v in ("solution", "no-fallback", "packed-pid") for pb, w in sizes]
        else:
            runs = [(v, pb, w, None) for v in ("solution", "packed-pid") for pb, w in sizes]
            runs += [("solution", 4096, 2, 2**31 - 1), ("solution", 8192, 4, 2**31 - 1)]
        for variant, pb, w, mp in runs:
            part = pb // 2
            parts = triton.next_power_of_2(triton.cdiv(N, part))
            out = torch.empty_like(x)
            if variant == "solution":
                f = lambda: O.one_read_launch(x, out, parts, part, w, max_polls=mp)
            elif variant == "no-fallback":
                f = lambda: uniform_no_fallback(x, out, parts, part, w)
            else:
                f = lambda: packed(x, out, parts, part, w, ticket=False)
            try:
                f()
                torch.cuda.synchronize()
                err = (out.float() - ref).abs().max().item()
                res.append((b / db(f) * 1e-6, b / graph_ms(f, rep=60) * 1e-6, variant, pb, w, parts, err,
                            "" if mp is None else f"max_polls={mp}"))
            except Exception as e:
                print("fail", variant, pb, w, str(e)[:200], flush=True)
        res.sort(reverse=True)
        print(f"online {M}x{N}: copy {cp:.0f} GB/s, torch {torch_gbs:.0f}, O.softmax now (do_bench) {cur_db:.0f}", flush=True)
        for r in res:
            print(f"   do_bench {r[0]:.0f}  graph {r[1]:.0f}  {r[2]:10s} {r[3] // 1024}K w{r[4]} p{r[5]} err {r[6]:.1e} {r[7]}")
        best = res[0]
        summary.append(f"online {M}x{N}: copy {cp:.0f} torch {torch_gbs:.0f} now {cur_db:.0f}; best do_bench "
                       f"{best[0]:.0f} ({best[0] / 4250:.1%} of 4.25 TB/s) {best[2]} {best[3] // 1024}K w{best[4]} {best[7]}")
if "S" in what:
    for M, N in [(4096, 32768), (1024, 131072), (256, 262144)]:
        x = torch.randn(M, N, dtype=torch.float16, device="cuda") * 3
        b = 4 * M * N
        ref = torch.softmax(x.float(), -1)
        y = torch.empty_like(x)
        cp = b / graph_ms(lambda: y.copy_(x), rep=60) * 1e-6
        torch_gbs = b / db(lambda: torch.softmax(x, -1)) * 1e-6
        cur_db = b / db(lambda: O.softmax(x)) * 1e-6
        res = []
        for variant, (pb, w) in itertools.product(("counter", "packed", "packed-pid"),
                                                  ((8192, 2), (8192, 4), (16384, 2), (16384, 4), (16384, 8), (32768, 8))):
            part = pb // 2
            parts = triton.next_power_of_2(triton.cdiv(N, part))
            out = torch.empty_like(x)
            if variant == "counter":
                f = lambda: O.one_read_launch(x, out, parts, part, w)
            else:
                f = lambda: packed(x, out, parts, part, w, ticket=variant == "packed")
            try:
                f()
                torch.cuda.synchronize()
                err = (out.float() - ref).abs().max().item()
                res.append((b / graph_ms(f, rep=60) * 1e-6, b / db(f) * 1e-6, variant, pb, w, parts, err))
            except Exception as e:
                print("fail", variant, pb, w, str(e)[:200], flush=True)
        res.sort(reverse=True)
        print(f"online {M}x{N}: copy {cp:.0f} GB/s, torch {torch_gbs:.0f}, current (do_bench) {cur_db:.0f}", flush=True)
        for r in res:
            print(f"   graph {r[0]:.0f}  do_bench {r[1]:.0f}  {r[2]:10s} {r[3] // 1024}K w{r[4]} p{r[5]} err {r[6]:.1e}")
        best = max(res, key=lambda r: r[1])
        summary.append(f"online {M}x{N}: copy {cp:.0f} torch {torch_gbs:.0f} current {cur_db:.0f}; best do_bench "
                       f"{best[1]:.0f} ({best[1] / 4250:.1%} of 4.25 TB/s) {best[2]} {best[3] // 1024}K w{best[4]}")


@triton.jit
def _attn_probe(Q, K, V, O, LSE, N, sm_scale, HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, WARP_SPECIALIZE: tl.constexpr,
                SINGLE: tl.constexpr, GROUP: tl.constexpr):
    if GROUP > 0:  # 1-D grid: GROUP heads at a time, their query blocks heaviest first
        n_m = tl.cdiv(N, BLOCK_M)
        pid = tl.program_id(0)
        g = pid // (GROUP * n_m)
        r = pid % (GROUP * n_m)
        start_m = r // GROUP
        bh = g * GROUP + r % GROUP
        if CAUSAL:
            start_m = n_m - 1 - start_m
    else:
        start_m = tl.program_id(0)
        if CAUSAL:
            start_m = tl.num_programs(0) - 1 - start_m
        bh = tl.program_id(1)
    desc_q, _ = F.head_descriptor(Q, bh, N, HEAD_DIM, BLOCK_M)  # pointers: per-head descriptors, row 0
    desc_k, _ = F.head_descriptor(K, bh, N, HEAD_DIM, BLOCK_N)
    desc_v, _ = F.head_descriptor(V, bh, N, HEAD_DIM, BLOCK_N)
    desc_o, _ = F.head_descriptor(O, bh, N, HEAD_DIM, BLOCK_M)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    qk_scale = sm_scale * 1.4426950408889634
    q = desc_q.load([start_m * BLOCK_M, 0])
    if SINGLE and CAUSAL:
        diag = (start_m * BLOCK_M // BLOCK_N) * BLOCK_N
        hi = tl.minimum((start_m + 1) * BLOCK_M, N)
        for start_n in tl.range(0, hi, BLOCK_N, warp_specialize=WARP_SPECIALIZE):
            start_n = tl.multiple_of(start_n, BLOCK_N)
            k = desc_k.load([start_n, 0])
            qk = tl.dot(q, k.T)
            if start_n >= diag:
                keep = offs_m[:, None] >= (start_n + offs_n)[None, :]
                qk = qk * qk_scale + tl.where(keep, 0.0, -1.0e6)
                m_ij = tl.maximum(m_i, tl.max(qk, 1))
                qk -= m_ij[:, None]
            else:
                m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
                qk = qk * qk_scale - m_ij[:, None]
            p = tl.math.exp2(qk)
            alpha = tl.math.exp2(m_i - m_ij)
            l_i = l_i * alpha + tl.sum(p, 1)
            v = desc_v.load([start_n, 0])
            acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
            m_i = m_ij
    elif CAUSAL:
        diag = (start_m * BLOCK_M // BLOCK_N) * BLOCK_N
        acc, l_i, m_i = F.attn_fwd_tuned_loop(acc, l_i, m_i, q, desc_k, desc_v, 0, offs_m, 0, diag, N, qk_scale,
                                               BLOCK_N, False, CAUSAL, False)
        acc, l_i, m_i = F.attn_fwd_tuned_loop(acc, l_i, m_i, q, desc_k, desc_v, 0, offs_m, diag,
                                               tl.minimum((start_m + 1) * BLOCK_M, N), N, qk_scale,
                                               BLOCK_N, True, CAUSAL, False)
    else:
        acc, l_i, m_i = F.attn_fwd_tuned_loop(acc, l_i, m_i, q, desc_k, desc_v, 0, offs_m, 0, N, N, qk_scale,
                                               BLOCK_N, False, CAUSAL, WARP_SPECIALIZE)
    acc = acc / l_i[:, None]
    lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453
    tl.store(LSE + bh.to(tl.int64) * N + offs_m, lse, mask=offs_m < N)
    desc_o.store([start_m * BLOCK_M, 0], acc.to(O.dtype.element_ty))


def attn_probe(q, k, v, causal, bm, bn, w, s, ws, single, group):
    B, H, N, D = q.shape
    o = torch.empty_like(q)
    lse = torch.empty((B, H, N), device=q.device, dtype=torch.float32)
    n_m = triton.cdiv(N, bm)
    grid = (n_m * B * H,) if group else (n_m, B * H)
    _attn_probe[grid](q, k, v, o, lse, N, 1.0 / D ** 0.5, HEAD_DIM=D, CAUSAL=causal, BLOCK_M=bm, BLOCK_N=bn,
                      WARP_SPECIALIZE=ws, SINGLE=single, GROUP=group, num_warps=w, num_stages=s)
    return o


if "A" in what:
    triton.set_allocator(F.tma_scratch)
    for D, N, causal in [(64, 1024, True), (128, 1024, True), (64, 4096, True), (64, 1024, False), (64, 4096, False)]:
        H = 2048 // D
        B = 16384 // N
        q, k, v = (torch.randn(B, H, N, D, dtype=torch.float16, device="cuda") for _ in range(3))
        fl = 4 * B * H * N * N * D // (2 if causal else 1)
        with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
            ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
            fa = fl / db(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)) * 1e-9
        cur = fl / db(lambda: F.attention_forward(q, k, v, causal=causal)) * 1e-9
        res = []
        t0 = time.time()
        cfgs = [(128, 64, 4, 2), (128, 64, 8, 3), (128, 128, 4, 2), (128, 128, 8, 2), (64, 64, 4, 2)]
        if D == 64:
            cfgs += [(256, 64, 8, 2), (256, 128, 8, 2)]
        shapes = [(False, False, 0), (False, False, 16)] if causal else [(False, False, 0), (True, False, 0)]
        if causal:
            shapes += [(False, True, 0), (True, True, 0), (False, True, 16), (True, True, 16)]
        for (bm, bn, w, s), (ws, single, group) in itertools.product(cfgs, shapes):
            if time.time() - t0 > 70:
                print("  (time budget reached)", flush=True)
                break
            if causal and bm < bn:
                continue
            f = lambda: attn_probe(q, k, v, causal, bm, bn, w, s, ws, single, group)
            try:
                o = f()
                err = (o.float() - ref.float()).abs().max().item()
                if err > 2e-2:
                    print("  wrong", bm, bn, w, s, ws, single, group, err, flush=True)
                    continue
                res.append((fl / db(f) * 1e-9, bm, bn, w, s, ws, single, group))
            except Exception as e:
                print("  fail", bm, bn, w, s, ws, single, group, str(e).splitlines()[0][:150] if str(e) else type(e).__name__, flush=True)
        res.sort(reverse=True)
        print(f"attn D{D} N{N} c{int(causal)}: flash {fa:.0f}, current {cur:.0f} ({cur / fa:.2f}x); {len(res)} ok in {time.time() - t0:.0f}s; best:",
              [f"{r[0]:.0f} ({r[0] / fa:.2f}x) {r[1]}x{r[2]} w{r[3]} s{r[4]}{' WS' if r[5] else ''}{' single' if r[6] else ''}{f' G{r[7]}' if r[7] else ''}" for r in res[:6]], flush=True)
        if res:
            summary.append(f"attn D{D} N{N} c{int(causal)} flash {fa:.0f} cur {cur / fa:.2f}x best {res[0][0] / fa:.2f}x {res[0][1:]}")
print("\n".join(summary))
