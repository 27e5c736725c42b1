"""Probes for the figures still short of their targets after exchange_probe.py (a tuning aid, not part of the course).

P: a persistent one-read online softmax. A fixed grid of LANES x PARTS programs; the PARTS programs
   of a lane hold the parts of one row at a time and walk the rows lane, lane + LANES, ... Each loads
   its part of the NEXT row before it waits for the siblings of this one, so every program has a load
   in flight through the wait (exchange_probe's "two-rows" variant, not persistent, had none during
   its second wait). Same word exchange, wait and fallback as the solution (the wait of the solution
   at the time: runs 1-3 used the uniform wait of all threads, replaced by a per-warp one at a044a81).
   Since commit 3ce6d1d the kernel is the solution's own, lanes_softmax_kernel.
E: attention forward with half of the exponentials computed on the FMA units (2^x = 2^round(x) *
   poly(x - round(x)), the exponent added to the float's bits), the other half on the MUFU units
   (ex2.approx), as FlashAttention-4 does: at D = 64 the exp throughput (16 a clock an SM) is as
   long as the two matmuls of a tile.
H: the solution's tuned attention kernel with host-made tensor descriptors (``host_descriptors=``) against
   descriptors made in the kernel, same configs, same run.
C: causal attention with the diagonal key blocks done first, unrolled (tl.static_range), so that
   the key loop left of the diagonal is the kernel's only loop and can be warp-specialized.
B: a bound for the one-read softmax's shape of work: each program loads its part, normalizes it by
   its own (m, l) and stores it, with no exchange at all (wrong unless a row is one part). However the
   exchange is done, a one-read kernel with parts of that size cannot be faster than this.
   Beside it, at 1024x131072, the solution's kernel and the same without its fallback at 2048-value parts.
W: the solution's kernel with a cheaper uniform wait: each thread spins on its own entries of the words
   tensor in inline PTX (a bounded loop of relaxed loads, no barrier inside, so threads may leave it at
   different times), and only then one reduction over the tensor decides, uniformly, complete or not.
   'spin-sleep' backs off 100 ns between loads; 'count' raises a per-row count (release) after its word
   and spins (acquire) on that one count instead of on the words, then reads the words once.
   '-clean': no zero fill before each launch: the words live in a buffer zeroed once, and the last
   program of a row to read them (a per-row count, acq_rel) puts them back to 0 for the next launch.
K: the unsafe 'packed-pid' kernel of exchange_probe.py made safe. Its poll reads the PARTS words as a tensor
   of PARTS entries, which may be held once per warp: each warp then polls and leaves the loop on its
   own, with no barrier inside. 'bounded' adds only the bound on the polls; 'safe' (run 5 in research/tuning/logs/pipeline_probe.txt) then
   reads the words once more as the solution's SPAN-entry tensor, whose reductions go through shared
   memory, so that the choice to fall back (a branch with barriers in it) is the same for every warp.
   'uniform' makes that choice without the read: each thread puts its warp's count of missing words
   into a SPAN-entry tensor, reduced through shared memory ('-fb1': a fallback of one value a thread a
   step, fewer registers; '-r64': at most 64 registers a thread, maxnreg). The solution took
   'uniform-fb1' (commit a044a81), so this part now calls its combine_parts and load_part; 'safe'
   is gone from the code (its run names its commit).
S: the solution's one-read kernel as it now stands (after K), over part sizes and warps, and O.softmax's
   own choice (one_read_plan) beside them.
D: why `tkcourse bench softmax` measured 1494 GB/s at 256x262144 where part S measured 2841 for the same
   plan: the solution timed as the bench times it (do_bench, inputs of scale 1 and 3), with K's
   'uniform-fb1' beside it counting the programs that fall back, at two plans.
A: the bench once measured 1494 GB/s at 256x262144 (p20-p80 1288-1795), the three runs after it 2820-2834.
   Does the speed depend on where the words sit (a row's words are one 1 KB line that every waiting
   program polls: a hot L2 slice)? The solution's kernel with its words at many offsets in one
   buffer, at three plans, timed with do_bench as the bench does.
Q: the persistent kernel of part P, which with the per-warp wait (run 10) beat the solution by 12% at
   256x262144: lanes around its best, each timed twice, with the programs an SM can hold (registers).
T: (run 12, commit 95c135d; gone from the code) the exchange words not zeroed before each launch: a kept buffer,
   each launch's words stamped with a tag of its own. No gain; reverted.
R: (run 13, commit 41e26c2; gone from the code) the persistent kernel loading two rows ahead instead of one, at
   part sizes and lanes around the solution's plan: too many registers, 25% slower; but 2048-value parts on one
   warp beat the solution's 8192 on four (LANES_PARTS 32 -> 128).
L: the solution's lanes plan (since run 14: 128 parts of 64 values a thread, as many lanes as fit) against
   LANES_PARTS = 32 (commit 3ce6d1d: 4 warps at least) and lanes a power of two, at the #6 shape and longer rows,
   taking turns twice. (Run 14 compared LANES_PARTS 32 and 128 through O.LANES_PARTS, code of a8477a8.)
X: the slow bench runs at 256x262144 (1494, 2547 and 2156 GB/s where the runs around them read 2800-3270): does
   the speed depend on where the input and the output sit? The solution's plan over every pair of 8 inputs and 8
   outputs, each allocated anew, twice over, with a same-size copy for each input.
Y: or on the host: O.softmax's host time a call (tkcourse.bench.core.host_us) against its GPU time, timed as the
   bench times (measure) and from a CUDA graph, ten times over; a run where the host is slower than the GPU
   would time the host.
Run on the GPU machine from the repository root: PYTHONPATH=$PWD python3 research/tuning/pipeline_probe.py PEC
"""
import itertools
import os
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import exchange_probe as XP  # its kernels and db; importing it runs none of its parts
from exchange_probe import db

what = sys.argv[1] if len(sys.argv) > 1 else "PEC"
summary = []


def _online_input(M, N, scale=3.0):
    """An fp16 (M, N) input of the #6 shapes, its minimum bytes (read once, written once) and fp32
    torch.softmax of it, the answer every variant is checked against."""
    x = torch.randn(M, N, dtype=torch.float16, device="cuda") * scale
    return x, 4 * M * N, torch.softmax(x.float(), -1)


def _copy_gbs(x, b):
    """GB/s of a device copy of x: the ceiling at that size, in the same run."""
    y = torch.empty_like(x)
    return b / graph_ms(lambda: y.copy_(x), rep=60) * 1e-6


def _attn_case(D, N, causal):
    """One attention shape of the #6 table (B·N = 16k tokens, H·D = 2048): q, k, v, its FLOPs, SDPA as
    a function, SDPA flash's output and its TFLOP/s."""
    H, B = 2048 // D, 16384 // N
    q, k, v = (torch.randn(B, H, N, D, dtype=torch.float16, device="cuda") for _ in range(3))
    fl = 4 * B * H * N * N * D // (2 if causal else 1)
    sdpa = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
        ref = sdpa()
        fa = fl / db(sdpa) * 1e-9
    return q, k, v, fl, sdpa, ref, fa


def persistent(x, out, parts, part, warps, lanes):
    """The persistent one-read softmax: since commit 3ce6d1d the solution's lanes_softmax_kernel (runs 1, 10
    and 11 used this probe's own copy, which also had a variant that recomputed exp(x - m) instead of
    keeping e: 'keep_e False', slower everywhere). Returns the compiled kernel, for its registers."""
    n_rows, n_cols = x.shape
    slots = torch.zeros((n_rows, parts), dtype=torch.int64, device=x.device)
    return O.lanes_softmax_kernel[(parts * lanes,)](x, out, x.stride(0), out.stride(0), n_rows, n_cols, slots,
                                                     O.MAX_POLLS, O.exchange_span(warps), PARTS=parts, PART=part,
                                                     FALLBACK_BLOCK=32 * warps, SPAN=O.exchange_span(warps), num_warps=warps)


def _try_persistent(x, out, ref, parts, part, w, lanes):
    """One persistent configuration: (compiled kernel, max |error|), or None when it fails or is slow
    (over 50 ms: waits timing out, a lane's programs not all resident)."""
    try:
        k = persistent(x, out, parts, part, w, lanes)
        torch.cuda.synchronize()
        t1 = time.time()
        persistent(x, out, parts, part, w, lanes)
        torch.cuda.synchronize()
    except Exception as e:
        print("   fail", part, w, lanes, str(e)[:200], flush=True)
        return None
    if time.time() - t1 > 0.05:
        print(f"   slow (waits time out?) {part} w{w} p{parts} lanes {lanes}", flush=True)
        return None
    return k, (out.float() - ref).abs().max().item()


if "P" in what:
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for M, N in [(4096, 32768), (1024, 131072), (256, 262144)]:
        x, b, ref = _online_input(M, N)
        cp = _copy_gbs(x, b)
        torch_gbs = b / db(lambda: torch.softmax(x, -1)) * 1e-6
        now = b / db(lambda: O.softmax(x)) * 1e-6
        res = []
        t0 = time.time()
        for (part, w), keep_e, per_sm in itertools.product(((2048, 1), (2048, 2), (4096, 2), (4096, 4), (8192, 4),
                                                             (8192, 8), (16384, 8)), (True,), (2, 4, 6, 8, 12, 16)):
            parts = triton.next_power_of_2(triton.cdiv(N, part))
            lanes = max(1, min(M, sms * per_sm // parts))
            out = torch.empty_like(x)
            f = lambda: persistent(x, out, parts, part, w, lanes)
            got = _try_persistent(x, out, ref, parts, part, w, lanes)
            if got:
                res.append((b / db(f) * 1e-6, b / graph_ms(f, rep=60) * 1e-6, part, w, parts, lanes, keep_e, per_sm,
                            got[0].n_regs, got[1]))
        res.sort(key=lambda r: -r[0])
        print(f"online {M}x{N}: copy {cp:.0f} GB/s, torch {torch_gbs:.0f}, O.softmax now (do_bench) {now:.0f}; "
              f"{len(res)} ok in {time.time() - t0:.0f}s", flush=True)
        for r in res[:12]:
            print(f"   do_bench {r[0]:.0f}  graph {r[1]:.0f}  persistent {r[2]} values w{r[3]} p{r[4]} lanes {r[5]} "
                  f"({r[7]}/SM) keep_e {r[6]} regs {r[8]} err {r[9]:.1e}")
        if res:
            best = res[0]
            summary.append(f"online {M}x{N}: copy {cp:.0f} torch {torch_gbs:.0f} now {now:.0f} ({now / 4250:.1%}); "
                           f"persistent best {best[0]:.0f} ({best[0] / 4250:.1%}) {best[2]} w{best[3]} lanes {best[5]} "
                           f"keep_e {best[6]} err {best[9]:.1e}")


@triton.jit
def _exp2_fma(x):
    """2^x on the FMA units, for x <= 0: 2^round(x) (added to the exponent bits) * a cubic on [-1/2, 1/2]."""
    x = tl.maximum(x, -126.0)
    t = x + 12582912.0  # 1.5 * 2^23: t's low mantissa bits hold round(x)
    r = t - 12582912.0
    f = x - r
    p = 0.9999281822191632 + f * (0.6932609592652654 + f * (0.24260939572685575 + f * 0.05517085283664626))
    j = t.to(tl.int32, bitcast=True) - 0x4B400000
    return (p.to(tl.int32, bitcast=True) + (j << 23)).to(tl.float32, bitcast=True)


@triton.jit
def _step(acc, l_i, m_i, q, desc_k, desc_v, offs_m, start_n, N, qk_scale, BLOCK_N: tl.constexpr,
          MASK: tl.constexpr, POLY: tl.constexpr):
    offs_n = tl.arange(0, BLOCK_N)
    k = desc_k.load([start_n, 0])
    qk = tl.dot(q, k.T)
    if MASK:  # causal diagonal (and keys >= N)
        keep = ((start_n + offs_n)[None, :] < N) & (offs_m[:, None] >= (start_n + offs_n)[None, :])
        qk = qk * qk_scale + tl.where(keep, 0.0, -1.0e6)
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        qk -= m_ij[:, None]
    else:
        m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        qk = qk * qk_scale - m_ij[:, None]
    if POLY:
        a, b = tl.split(tl.reshape(qk, [qk.shape[0], BLOCK_N // 2, 2]))
        p = tl.reshape(tl.join(tl.math.exp2(a), _exp2_fma(b)), [qk.shape[0], BLOCK_N])
    else:
        p = tl.math.exp2(qk)
    alpha = tl.math.exp2(m_i - m_ij)
    l_i = l_i * alpha + tl.sum(p, 1)
    v = desc_v.load([start_n, 0])
    acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
    return acc, l_i, m_ij


@triton.jit
def _attn_probe(Q, K, V, O, LSE, N, sm_scale, HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, WARP_SPECIALIZE: tl.constexpr, POLY: tl.constexpr):
    start_m = tl.program_id(0)
    if CAUSAL:
        start_m = tl.num_programs(0) - 1 - start_m
    bh = tl.program_id(1)
    desc_q, _ = F.head_descriptor(Q, bh, N, HEAD_DIM, BLOCK_M)  # pointers: per-head descriptors, row 0
    desc_k, _ = F.head_descriptor(K, bh, N, HEAD_DIM, BLOCK_N)
    desc_v, _ = F.head_descriptor(V, bh, N, HEAD_DIM, BLOCK_N)
    desc_o, _ = F.head_descriptor(O, bh, N, HEAD_DIM, BLOCK_M)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    qk_scale = sm_scale * 1.4426950408889634
    q = desc_q.load([start_m * BLOCK_M, 0])
    if CAUSAL:  # the diagonal first, unrolled; then the only loop: the key blocks left of it
        for i in tl.static_range(BLOCK_M // BLOCK_N):
            acc, l_i, m_i = _step(acc, l_i, m_i, q, desc_k, desc_v, offs_m, start_m * BLOCK_M + i * BLOCK_N, N,
                                  qk_scale, BLOCK_N, True, POLY)
        hi = start_m * BLOCK_M
    else:
        hi = N
    for start_n in tl.range(0, hi, BLOCK_N, warp_specialize=WARP_SPECIALIZE):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        acc, l_i, m_i = _step(acc, l_i, m_i, q, desc_k, desc_v, offs_m, start_n, N, qk_scale, BLOCK_N, False, POLY)
    acc = acc / l_i[:, None]
    lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453
    tl.store(LSE + bh.to(tl.int64) * N + offs_m, lse, mask=offs_m < N)
    desc_o.store([start_m * BLOCK_M, 0], acc.to(O.dtype.element_ty))


def attn_probe(q, k, v, causal, bm, bn, w, s, ws, poly):
    B, H, N, D = q.shape
    o = torch.empty_like(q)
    lse = torch.empty((B, H, N), device=q.device, dtype=torch.float32)
    _attn_probe[(triton.cdiv(N, bm), B * H)](q, k, v, o, lse, N, 1.0 / D ** 0.5, HEAD_DIM=D, CAUSAL=causal,
                                             BLOCK_M=bm, BLOCK_N=bn, WARP_SPECIALIZE=ws, POLY=poly,
                                             num_warps=w, num_stages=s)
    return o, lse


if "E" in what or "C" in what:
    triton.set_allocator(F.tma_scratch)
    cases = [(64, 1024, False), (64, 1024, True), (128, 1024, True), (64, 4096, True), (64, 4096, False),
             (128, 1024, False)]
    for D, N, causal in cases:
        q, k, v, fl, sdpa, ref, fa = _attn_case(D, N, causal)
        _, lse_ref = F.attention_forward(q, k, v, causal=causal)
        cur = fl / db(lambda: F.attention_forward(q, k, v, causal=causal)) * 1e-9
        res = []
        t0 = time.time()
        cfgs = [(128, 64, 8, 3), (128, 128, 4, 2), (64, 64, 4, 2), (128, 64, 4, 2), (128, 128, 8, 2), (128, 64, 4, 3)]
        flags = [(ws, poly) for poly in ((False, True) if "E" in what else (False,))
                 for ws in ((False, True) if (causal and "C" in what) or not causal else (False,))]
        for (bm, bn, w, s), (ws, poly) in itertools.product(cfgs, flags):
            if time.time() - t0 > 55:
                print("  (time budget reached)", flush=True)
                break
            if causal and bm < bn:
                continue
            f = lambda: attn_probe(q, k, v, causal, bm, bn, w, s, ws, poly)
            try:
                o, lse = f()
                err = (o.float() - ref.float()).abs().max().item()
                lerr = (lse - lse_ref).abs().max().item()
                if err > 2e-2 or lerr > 1e-2:
                    print("  wrong", bm, bn, w, s, ws, poly, err, lerr, flush=True)
                    continue
                res.append((fl / db(f) * 1e-9, bm, bn, w, s, ws, poly, err))
            except Exception as e:
                print("  fail", bm, bn, w, s, ws, poly, str(e).splitlines()[0][:150] if str(e) else type(e).__name__, flush=True)
        res.sort(reverse=True)
        print(f"attn D{D} N{N} c{int(causal)}: flash {fa:.0f}, current {cur:.0f} ({cur / fa:.2f}x); {len(res)} ok in "
              f"{time.time() - t0:.0f}s; best:", [f"{r[0]:.0f} ({r[0] / fa:.2f}x) {r[1]}x{r[2]} w{r[3]} s{r[4]}"
                                                  f"{' WS' if r[5] else ''}{' poly' if r[6] else ''} err {r[7]:.0e}"
                                                  for r in res[:8]], flush=True)
        if res:
            summary.append(f"attn D{D} N{N} c{int(causal)} flash {fa:.0f} cur {cur / fa:.2f}x best {res[0][0] / fa:.2f}x "
                           f"{res[0][1:7]}")
@triton.jit
def _no_exchange_kernel(x_ptr, out_ptr, x_row_stride, out_row_stride, n_cols, PARTS: tl.constexpr, PART: tl.constexpr):
    pid = tl.program_id(0)
    row = pid // PARTS
    cols = (pid % PARTS) * PART + tl.arange(0, PART)
    mask = cols < n_cols
    e, _, _, l_p = O.load_part(x_ptr + row.to(tl.int64) * x_row_stride, cols, mask)
    y = e / l_p  # this part's own (m, l): no exchange
    tl.store(out_ptr + row.to(tl.int64) * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask,
             eviction_policy="evict_first")


if "B" in what:

    for M, N in [(4096, 32768), (1024, 131072), (256, 262144)]:
        x, b, ref = _online_input(M, N)
        cp = _copy_gbs(x, b)
        now = b / db(lambda: O.softmax(x)) * 1e-6
        res = []
        for part, w in ((2048, 2), (4096, 2), (4096, 4), (8192, 4), (8192, 8), (16384, 8)):
            parts = triton.next_power_of_2(triton.cdiv(N, part))
            out = torch.empty_like(x)
            runs = [("no-exchange", lambda: _no_exchange_kernel[(parts * M,)](x, out, x.stride(0), out.stride(0), N,
                                                                             PARTS=parts, PART=part, num_warps=w))]
            if M == 1024 and part <= 4096:
                runs += [("solution", lambda: O.one_read_launch(x, out, parts, part, w)),
                         ("no-fallback", lambda: XP.uniform_no_fallback(x, out, parts, part, w)),
                         ("packed-pid", lambda: XP.packed(x, out, parts, part, w, ticket=False))]
            for name, f in runs:
                try:
                    f()
                    torch.cuda.synchronize()
                    err = (out.float() - ref).abs().max().item() if name != "no-exchange" else float("nan")
                    res.append((b / db(f) * 1e-6, b / graph_ms(f, rep=60) * 1e-6, name, part, w, parts, err))
                except Exception as e:
                    print("   fail", name, part, w, str(e)[:200], flush=True)
        res.sort(key=lambda r: -r[0])
        print(f"online {M}x{N}: copy {cp:.0f} GB/s, O.softmax now (do_bench) {now:.0f}", flush=True)
        for r in res:
            print(f"   do_bench {r[0]:.0f}  graph {r[1]:.0f}  {r[2]:11s} {r[3]} values w{r[4]} p{r[5]} err {r[6]:.1e}")
        bound = max(r[0] for r in res if r[2] == "no-exchange")
        summary.append(f"online {M}x{N}: copy {cp:.0f} now {now:.0f} ({now / 4250:.1%}); no-exchange bound {bound:.0f} "
                       f"({bound / 4250:.1%} of 4.25 TB/s)")
def _spin_asm(backoff):
    """PTX for one element: load the 64-bit word at $1 until it is not 0, at most $2 times, sleeping
    about 100 ns between two loads with ``backoff`` (fewer loads crowd L2)."""
    return ("{ .reg .pred %p<2>; .reg .u32 %n; mov.u32 %n, $2;\n"
            "SPIN${:uid}: ld.relaxed.gpu.global.b64 $0, [$1];\n"
            "setp.ne.s64 %p0, $0, 0; @%p0 bra DONE${:uid};\n"
            + ("nanosleep.u32 100;\n" if backoff else "") +
            "sub.u32 %n, %n, 1; setp.ne.u32 %p1, %n, 0; @%p1 bra SPIN${:uid};\n"
            "DONE${:uid}: }")


SPIN_ASM = tl.constexpr(_spin_asm(False))
SPIN_BACKOFF_ASM = tl.constexpr(_spin_asm(True))


@triton.jit
def _spin_read(ptrs, max_spins, SLEEP_NS: tl.constexpr):
    """Each element: the word at its pointer once it is not 0 (or 0 after max_spins loads); with
    SLEEP_NS > 0 the loads back off (SPIN_BACKOFF_ASM)."""
    asm: tl.constexpr = SPIN_BACKOFF_ASM if SLEEP_NS > 0 else SPIN_ASM
    return tl.inline_asm_elementwise(asm, "=l,l,r", [ptrs, max_spins], dtype=tl.int64, is_pure=False, pack=1)


@triton.jit
def _spin_count(ptrs, target, max_spins):
    """Each element: acquire-load the 32-bit count at its pointer until it reaches target, at most
    max_spins times; returns the last count read."""
    return tl.inline_asm_elementwise(
        """{
        .reg .pred %p<2>;
        .reg .u32 %n;
        mov.u32 %n, $3;
        SPIN${:uid}:
        ld.acquire.gpu.global.b32 $0, [$1];
        setp.ge.s32 %p0, $0, $2;
        @%p0 bra DONE${:uid};
        sub.u32 %n, %n, 1;
        setp.ne.u32 %p1, %n, 0;
        @%p1 bra SPIN${:uid};
        DONE${:uid}:
        }""",
        "=r,l,r,r", [ptrs, target, max_spins], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _spin_kernel(x_ptr, out_ptr, x_row_stride, out_row_stride, n_cols, slots_ptr, counts_ptr, max_polls,
                 PARTS: tl.constexpr, PART: tl.constexpr, SPAN: tl.constexpr, FALLBACK: tl.constexpr,
                 SLEEP_NS: tl.constexpr, COUNT: tl.constexpr, CLEAN: tl.constexpr = False):
    row, x_row, cols, mask, e, shift = XP.load_and_publish(x_ptr, x_row_stride, n_cols, slots_ptr, PARTS, PART)
    entry = tl.arange(0, SPAN)
    spins = max_polls + tl.zeros([SPAN], tl.int32)
    if COUNT:  # one count a row, raised (release) after the word; wait (acquire) on it, then read the words once
        tl.atomic_add(counts_ptr + row, 1, sem="release")
        seen = _spin_count(counts_ptr + row + 0 * entry, PARTS + tl.zeros([SPAN], tl.int32), spins)
        words = tl.load(slots_ptr + row * PARTS + entry % PARTS, volatile=True)
        words = tl.where(seen >= PARTS, words, 0)  # a timed-out wait counts as incomplete
    else:
        words = _spin_read(slots_ptr + row * PARTS + entry % PARTS, spins, SLEEP_NS)
    m_parts = (words & 0xFFFFFFFF).to(tl.int32).to(tl.float32, bitcast=True)
    l_parts = (words >> 32).to(tl.int32).to(tl.float32, bitcast=True)
    m = tl.max(m_parts, axis=0)
    l = tl.sum(tl.where(entry < PARTS, l_parts * tl.exp(m_parts - m), 0.0), axis=0)
    if FALLBACK:
        if tl.max((words == 0).to(tl.int32), axis=0) > 0:
            m, l = O.online_stats(x_row, 0, n_cols, 1024, 1)
    if CLEAN:  # the row's last reader puts its words and count back to 0: the next launch needs no zero fill
        done = tl.atomic_add(counts_ptr + row, 1, sem="acq_rel")
        if done == PARTS - 1:
            tl.store(slots_ptr + row * PARTS + tl.arange(0, PARTS), tl.zeros([PARTS], tl.int64))
            tl.store(counts_ptr + row, 0)
    y = e * (tl.exp(shift - m) / l)
    tl.store(out_ptr + row.to(tl.int64) * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask,
             eviction_policy="evict_first")


_CLEAN_WORDS = {}


def spin(x, out, parts, part, warps, fallback=True, max_polls=1 << 16, sleep_ns=0, count=False, clean=False):
    n_rows, n_cols = x.shape
    size = n_rows * parts + (n_rows + 1) // 2
    if clean:  # zeroed once, then left zero by every launch
        words = _CLEAN_WORDS.get(size)
        if words is None:
            words = _CLEAN_WORDS[size] = torch.zeros(size, dtype=torch.int64, device=x.device)
    else:
        words = torch.zeros(size, dtype=torch.int64, device=x.device)  # one zero fill
    slots, counts = words[:n_rows * parts], words[n_rows * parts:].view(torch.int32)  # counts: one int32 a row
    _spin_kernel[(parts * n_rows,)](x, out, x.stride(0), out.stride(0), n_cols, slots, counts, max_polls, PARTS=parts,
                                    PART=part, SPAN=max(parts, O.exchange_span(warps)), FALLBACK=fallback, SLEEP_NS=sleep_ns,
                                    COUNT=count, CLEAN=clean, num_warps=warps)
    return out


if "W" in what:

    for M, N, cfgs in [(4096, 32768, ((4096, 4), (2048, 2))), (1024, 131072, ((2048, 2), (4096, 4), (4096, 2))),
                       (256, 262144, ((8192, 4), (4096, 4), (4096, 2), (2048, 2), (8192, 8)))]:
        x, b, ref = _online_input(M, N)
        now = b / db(lambda: O.softmax(x)) * 1e-6
        res = []
        for part, w in cfgs:
            parts = triton.next_power_of_2(triton.cdiv(N, part))
            out = torch.empty_like(x)
            for name, f in [("spin", lambda: spin(x, out, parts, part, w)),
                            ("spin-nofb", lambda: spin(x, out, parts, part, w, fallback=False)),
                            ("spin-sleep", lambda: spin(x, out, parts, part, w, sleep_ns=100)),
                            ("spin-clean", lambda: spin(x, out, parts, part, w, clean=True)),
                            ("nofb-clean", lambda: spin(x, out, parts, part, w, fallback=False, clean=True)),
                            ("count", lambda: spin(x, out, parts, part, w, count=True)),
                            ("solution", lambda: O.one_read_launch(x, out, parts, part, w)),
                            ("packed-pid", lambda: XP.packed(x, out, parts, part, w, ticket=False))]:
                try:
                    out.zero_()
                    f()
                    torch.cuda.synchronize()
                    err = (out.float() - ref).abs().max().item()
                    r = (b / db(f) * 1e-6, b / graph_ms(f, rep=60) * 1e-6, name, part, w, parts, err)
                    if "clean" in name:  # after all those launches: still right, and the words all back to 0
                        out.zero_()
                        f()
                        err = (out.float() - ref).abs().max().item()
                        left = sum(int(v.count_nonzero()) for v in _CLEAN_WORDS.values())
                        r = r[:6] + (err if left == 0 else float("inf"),)
                    res.append(r)
                except Exception as e:
                    print("   fail", name, part, w, str(e)[:300], flush=True)
        res.sort(key=lambda r: -r[0])
        print(f"online {M}x{N}: O.softmax now (do_bench) {now:.0f}", flush=True)
        for r in res:
            print(f"   do_bench {r[0]:.0f}  graph {r[1]:.0f}  {r[2]:11s} {r[3]} values w{r[4]} p{r[5]} err {r[6]:.1e}")
        sp = [r for r in res if r[2] == "spin" and r[6] < 1e-3]
        if sp:
            summary.append(f"online {M}x{N}: now {now:.0f} ({now / 4250:.1%}); spin best {sp[0][0]:.0f} "
                           f"({sp[0][0] / 4250:.1%}) {sp[0][3]} values w{sp[0][4]}")
@triton.jit
def _packed_safe_kernel(x_ptr, out_ptr, x_row_stride, out_row_stride, n_cols, slots_ptr, max_polls, span,
                        PARTS: tl.constexpr, PART: tl.constexpr, SPAN: tl.constexpr, SAFE: tl.constexpr,
                        FALLBACK_BLOCK: tl.constexpr, fallbacks_ptr=None, COUNT_FALLBACKS: tl.constexpr = False):
    row, x_row, cols, mask, e, shift = XP.load_and_publish(x_ptr, x_row_stride, n_cols, slots_ptr, PARTS, PART)
    if SAFE:  # the solution's wait (combine_parts: per warp, then agreed on), and a fallback
        m, l, complete = OS.combine_parts(slots_ptr, row, max_polls, span, PARTS, SPAN)
        if not complete:
            m, l = O.online_stats(x_row, 0, n_cols, FALLBACK_BLOCK, 1)
            if COUNT_FALLBACKS:
                tl.atomic_add(fallbacks_ptr, 1)
    else:  # 'bounded': the same per-warp wait, no agreement and no fallback (unsafe)
        slots = slots_ptr + row * PARTS + tl.arange(0, PARTS)
        w = tl.load(slots, volatile=True)
        polls = 0
        while (tl.sum((w == 0).to(tl.int32), axis=0) > 0) & (polls < max_polls):
            w = tl.load(slots, volatile=True)
            polls += 1
        m, l = OS.combine_words(w)
    y = e * (tl.exp(shift - m) / l)
    tl.store(out_ptr + row.to(tl.int64) * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask,
             eviction_policy="evict_first")


def packed_safe(x, out, parts, part, warps, safe=True, max_polls=1 << 16, fallback_block=1024, maxnreg=None,
                fallbacks=None):
    n_rows, n_cols = x.shape
    slots = torch.zeros((n_rows, parts), dtype=torch.int64, device=x.device)
    span = O.exchange_span(warps)
    _packed_safe_kernel[(parts * n_rows,)](x, out, x.stride(0), out.stride(0), n_cols, slots, max_polls, span,
                                           PARTS=parts, PART=part, SPAN=span,
                                           SAFE=safe, FALLBACK_BLOCK=fallback_block, num_warps=warps,
                                           fallbacks_ptr=fallbacks, COUNT_FALLBACKS=fallbacks is not None,
                                           **({} if maxnreg is None else {"maxnreg": maxnreg}))
    return out


if "K" in what:
    for M, N, cfgs in [(4096, 32768, ((4096, 4), (2048, 2), (4096, 2), (8192, 4))),
                       (1024, 131072, ((2048, 2), (4096, 4), (4096, 2), (2048, 1), (1024, 1))),
                       (256, 262144, ((8192, 4), (4096, 4), (4096, 2), (2048, 2), (2048, 1)))]:
        x, b, ref = _online_input(M, N)
        cp = _copy_gbs(x, b)
        now = b / graph_ms(lambda: O.softmax(x), rep=60) * 1e-6
        res = []
        for part, w in cfgs:
            parts = triton.next_power_of_2(triton.cdiv(N, part))
            out = torch.empty_like(x)
            for name, f in [("uniform", lambda: packed_safe(x, out, parts, part, w, safe=True)),
                            ("uniform-fb1", lambda: packed_safe(x, out, parts, part, w, safe=True, fallback_block=32 * w)),
                            ("uniform-r64", lambda: packed_safe(x, out, parts, part, w, safe=True, maxnreg=64)),
                            ("bounded", lambda: packed_safe(x, out, parts, part, w, safe=False)),
                            ("packed-pid", lambda: XP.packed(x, out, parts, part, w, ticket=False)),
                            ("solution", lambda: O.one_read_launch(x, out, parts, part, w))]:
                try:
                    out.zero_()
                    f()
                    torch.cuda.synchronize()
                    err = (out.float() - ref).abs().max().item()
                    res.append((b / graph_ms(f, rep=60) * 1e-6, b / db(f) * 1e-6, name, part, w, parts, err))
                except Exception as e:
                    print("   fail", name, part, w, str(e)[:300], flush=True)
        # the safe kernel's fallback, forced: one poll, so most programs read their whole row themselves
        out = torch.empty_like(x)
        parts = triton.next_power_of_2(triton.cdiv(N, 4096))
        packed_safe(x, out, parts, 4096, 4, safe=True, max_polls=0)
        torch.cuda.synchronize()
        fb_err = (out.float() - ref).abs().max().item()
        res.sort(key=lambda r: -r[0])
        print(f"online {M}x{N}: copy {cp:.0f} GB/s, O.softmax now (graph) {now:.0f}; forced fallback err {fb_err:.1e}",
              flush=True)
        for r in res:
            print(f"   graph {r[0]:.0f}  do_bench {r[1]:.0f}  {r[2]:10s} {r[3]} values w{r[4]} p{r[5]} err {r[6]:.1e}")
        sf = [r for r in res if r[2].startswith("uniform") and r[6] < 1e-3]
        summary.append(f"online {M}x{N}: copy {cp:.0f} now {now:.0f} ({now / 4250:.1%}); {sf[0][2]} best {sf[0][0]:.0f} "
                       f"({sf[0][0] / 4250:.1%}) {sf[0][3]} values w{sf[0][4]}; packed-pid best "
                       f"{max(r[0] for r in res if r[2] == 'packed-pid'):.0f}" if sf else f"online {M}x{N}: no safe run")
if "S" in what:
    for M, N in [(4096, 32768), (1024, 131072), (256, 262144)]:
        x, b, ref = _online_input(M, N)
        now = b / graph_ms(lambda: O.softmax(x), rep=60) * 1e-6
        res = []
        for part, w in ((1024, 1), (2048, 1), (2048, 2), (4096, 1), (4096, 2), (4096, 4), (8192, 2), (8192, 4)):
            parts = triton.next_power_of_2(triton.cdiv(N, part))
            if parts > 128:
                continue
            out = torch.empty_like(x)
            f = lambda: O.one_read_launch(x, out, parts, part, w)
            try:
                f()
                torch.cuda.synchronize()
                err = (out.float() - ref).abs().max().item()
                res.append((b / graph_ms(f, rep=60) * 1e-6, part, w, parts, err))
            except Exception as e:
                print("   fail", part, w, str(e)[:200], flush=True)
        res.sort(key=lambda r: -r[0])
        print(f"online {M}x{N}: O.softmax (graph) {now:.0f} with plan {O.one_read_plan(N, x.device)}", flush=True)
        for r in res:
            print(f"   graph {r[0]:.0f}  {r[1]} values w{r[2]} p{r[3]} err {r[4]:.1e}")
        summary.append(f"online {M}x{N}: O.softmax {now:.0f} ({now / 4250:.1%}) plan {O.one_read_plan(N, x.device)}; "
                       f"best {res[0][0]:.0f} {res[0][1]} values w{res[0][2]}")
if "D" in what:
    from tkcourse.bench.core import measure
    for M, N in [(1024, 131072), (256, 262144)]:
        for scale in (1.0, 3.0):
            x, b, ref = _online_input(M, N, scale)
            line = [f"online {M}x{N} scale {scale:.0f} plan {O.one_read_plan(N, x.device)}:"]
            line.append(f"measure {b / measure(lambda: O.softmax(x))[0] * 1e-6:.0f}")
            line.append(f"graph {b / graph_ms(lambda: O.softmax(x), rep=60) * 1e-6:.0f}")
            line.append(f"measure again {b / measure(lambda: O.softmax(x))[0] * 1e-6:.0f}")
            for part, w in ((2048, 1), (4096, 4)):
                parts = triton.next_power_of_2(triton.cdiv(N, part))
                out = torch.empty_like(x)
                fb = torch.zeros(1, dtype=torch.int32, device="cuda")
                f = lambda: packed_safe(x, out, parts, part, w, safe=True, fallback_block=32 * w, fallbacks=fb)
                f()
                torch.cuda.synchronize()
                err = (out.float() - ref).abs().max().item()
                fb.zero_()
                t = measure(f)[0]
                n = int(fb.item())
                calls = 25 + 100  # about: do_bench's own estimate runs add some
                line.append(f"fb1 {part}w{w} {b / t * 1e-6:.0f} err {err:.1e} fallbacks {n} in ~{calls}+ calls")
            print(" | ".join(line), flush=True)
            summary.append(" | ".join(line))
if "A" in what:
    from tkcourse.bench.core import measure
    M, N = 256, 262144
    x = torch.randn(M, N, dtype=torch.float16, device="cuda")
    out = torch.empty_like(x)
    b = 4 * M * N
    buf = torch.zeros(1 << 22, dtype=torch.int64, device="cuda")  # 32 MB of room for the words
    for parts, part, w in ((128, 2048, 1), (64, 4096, 4), (64, 4096, 2), (32, 8192, 4)):
        rates = []
        for off in [0, 16, 64, 128, 1000, 4096, 12345, 65536, 100003, 1 << 20, 3 << 20]:
            slots = buf[off:off + M * parts]

            def f():
                slots.zero_()
                O.one_read_softmax_kernel[(parts * M,)](x, out, x.stride(0), out.stride(0), N, slots, O.MAX_POLLS,
                                                         O.exchange_span(w), PARTS=parts, PART=part, FALLBACK_BLOCK=32 * w,
                                                         SPAN=O.exchange_span(w), num_warps=w)
            rates.append(b / measure(f)[0] * 1e-6)
        line = (f"online {M}x{N} plan ({parts}, {part}, {w}): words at 11 offsets: min {min(rates):.0f} "
                f"max {max(rates):.0f}: " + " ".join(f"{r:.0f}" for r in rates))
        print(line, flush=True)
        summary.append(line)
    for rep in range(3):  # and the bench itself, in this process, three times
        r = b / measure(lambda: O.softmax(x))[0] * 1e-6
        summary.append(f"O.softmax {M}x{N} measure #{rep}: {r:.0f}")
if "Q" in what:
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for M, N in [(256, 262144), (512, 262144), (128, 524288)]:
        x, b, ref = _online_input(M, N)
        now = b / db(lambda: O.softmax(x)) * 1e-6
        res = []
        for (part, w), lanes in itertools.product(((4096, 2), (4096, 4), (8192, 4), (8192, 8), (16384, 8)),
                                                  (4, 8, 12, 16, 20, 24, 32)):
            parts = triton.next_power_of_2(triton.cdiv(N, part))
            if parts > 64 or lanes > M:
                continue
            out = torch.empty_like(x)
            f = lambda: persistent(x, out, parts, part, w, lanes)
            got = _try_persistent(x, out, ref, parts, part, w, lanes)
            if got:
                regs = max(got[0].n_regs, 1)
                res.append((b / db(f) * 1e-6, b / db(f) * 1e-6, b / graph_ms(f, rep=60) * 1e-6, part, w, parts, lanes,
                            parts * lanes / sms, min(32, 64 // w, 65536 // (regs * 32 * w)), regs, got[1]))
        res.sort(key=lambda r: -(r[0] + r[1]))
        print(f"online {M}x{N}: O.softmax now (do_bench) {now:.0f}", flush=True)
        for r in res[:14]:
            print(f"   do_bench {r[0]:.0f} {r[1]:.0f}  graph {r[2]:.0f}  {r[3]} values w{r[4]} p{r[5]} lanes {r[6]} "
                  f"({r[7]:.1f} programs/SM, {r[8]} fit) regs {r[9]} err {r[10]:.1e}")
        if res:
            r = res[0]
            summary.append(f"online {M}x{N}: now {now:.0f} ({now / 4250:.1%}); persistent best {(r[0] + r[1]) / 2:.0f} "
                           f"({(r[0] + r[1]) / 2 / 4250:.1%}) {r[3]} w{r[4]} lanes {r[6]} ({r[7]:.1f}/SM of {r[8]})")
if "Z" in what:  # what zeroing the exchange words costs, beside the whole softmax
    for M, N in [(4096, 32768), (1024, 131072), (256, 262144)]:
        x = torch.randn(M, N, dtype=torch.float16, device="cuda")
        parts = O.one_read_plan(N, x.device)[0]
        z = graph_ms(lambda: torch.zeros((M, parts), dtype=torch.int64, device="cuda"), rep=60)
        t = graph_ms(lambda: O.softmax(x), rep=60)
        line = f"zeros {M}x{parts} words: {z * 1e3:.1f} us of the softmax's {t * 1e3:.1f} us ({4 * M * N / t * 1e-6:.0f} GB/s)"
        print(line, flush=True)
        summary.append(line)
if "L" in what:
    for M, N in [(256, 262144), (512, 262144), (128, 524288), (64, 1048576)]:
        x, b, ref = _online_input(M, N)
        out = torch.empty_like(x)
        plan = O.one_read_plan(N, x.device)
        lanes = O.persistent_lanes(x, out, *plan)
        old_plan = (32, N // 32, max(4, N // 32 // 2048))  # LANES_PARTS 32 (commit 3ce6d1d): 4 warps at least
        old_lanes = O.persistent_lanes(x, out, *old_plan)
        runs = [("solution", plan, lanes), ("solution, lanes a power of two", plan, 1 << (lanes.bit_length() - 1)),
                ("32 parts, lanes a power of two", old_plan, 1 << (old_lanes.bit_length() - 1)),
                ("32 parts", old_plan, old_lanes)]
        if plan[2] < 4:
            runs.append(("solution, 4 warps", plan[:2] + (4,), O.persistent_lanes(x, out, *plan[:2], 4)))
        rates = {}
        for _ in range(2):
            for name, (parts, part, w), n in runs:
                f = lambda: O.one_read_launch(x, out, parts, part, w, lanes=n)
                f()
                err = (out.float() - ref).abs().max().item()
                assert err < 1e-3, (name, err)
                rates.setdefault((name, (parts, part, w), n), []).append(b / measure(f)[0] * 1e-6)
        sol = b / measure(lambda: O.softmax(x))[0] * 1e-6
        line = f"online {M}x{N} copy {_copy_gbs(x, b):.0f} O.softmax {sol:.0f}: " + "; ".join(
            f"{name} {plan} lanes {n}: {' '.join(f'{r:.0f}' for r in v)}" for (name, plan, n), v in rates.items())
        print(line, flush=True)
        summary.append(line)
if "X" in what:
    M, N = 256, 262144
    b = 4 * M * N
    xs = [torch.randn(M, N, dtype=torch.float16, device="cuda") * 3 for _ in range(8)]
    outs = [torch.empty_like(xs[0]) for _ in range(8)]
    plan = O.one_read_plan(N, xs[0].device)
    lanes = O.persistent_lanes(xs[0], outs[0], *plan)
    print(f"online {M}x{N} plan {plan} lanes {lanes}; copy GB/s per input: "
          + " ".join(f"{_copy_gbs(x, b):.0f}" for x in xs), flush=True)
    for sweep in range(2):
        grid = [[b / db(lambda: O.one_read_launch(x, out, *plan, lanes=lanes)) * 1e-6 for out in outs] for x in xs]
        flat = sorted(r for row in grid for r in row)
        line = (f"sweep {sweep}: min {flat[0]:.0f} median {flat[len(flat) // 2]:.0f} max {flat[-1]:.0f}; "
                f"below 3000: {sum(r < 3000 for r in flat)} of {len(flat)}")
        print(line, flush=True)
        summary.append(line)
        for i, row in enumerate(grid):
            print(f"   x{i} @{xs[i].data_ptr() % (1 << 40):#x}: " + " ".join(f"{r:.0f}" for r in row), flush=True)
    print("   outs @ " + " ".join(f"{o.data_ptr() % (1 << 40):#x}" for o in outs), flush=True)
    for rep in range(4):  # the bench's own way, O.softmax (new out each call), a fresh input each time
        x = torch.randn(M, N, dtype=torch.float16, device="cuda") * 3
        summary.append(f"O.softmax fresh input #{rep}: {b / measure(lambda: O.softmax(x))[0] * 1e-6:.0f}")
if "Y" in what:
    from tkcourse.bench.core import host_us
    M, N = 256, 262144
    b = 4 * M * N
    x = torch.randn(M, N, dtype=torch.float16, device="cuda") * 3
    for rep in range(10):
        h = host_us(lambda: O.softmax(x))
        t = measure(lambda: O.softmax(x))[0]
        g = graph_ms(lambda: O.softmax(x), rep=60)
        line = (f"O.softmax {M}x{N} #{rep}: host {h:.0f} us a call; measure {t * 1e3:.1f} us ({b / t * 1e-6:.0f} GB/s); "
                f"graph {g * 1e3:.1f} us ({b / g * 1e-6:.0f} GB/s); torch.softmax host {host_us(lambda: torch.softmax(x, -1)):.0f} us")
        print(line, flush=True)
        summary.append(line)
    # where the host time goes: each step of O.softmax on its own (host_us: n calls queued, no waiting)
    from solutions._checks import validate
    plan = O.one_read_plan(N, x.device)
    out = torch.empty_like(x)
    lanes = O.persistent_lanes(x, out, *plan)
    parts, part, w = plan
    slots = torch.zeros((M, parts), dtype=torch.int64, device="cuda")
    kw = dict(PARTS=parts, PART=part, FALLBACK_BLOCK=32 * w, SPAN=O.exchange_span(w), num_warps=w)
    steps = [("validate", lambda: validate(x, names=["x"], ndim=2)),
             ("one_read_plan", lambda: O.one_read_plan(N, x.device)),
             ("torch.empty", lambda: torch.empty((M, N), dtype=x.dtype, device=x.device)),
             ("persistent_lanes", lambda: O.persistent_lanes(x, out, *plan)),
             ("torch.zeros (words)", lambda: torch.zeros((M, parts), dtype=torch.int64, device=x.device)),
             ("kernel launch", lambda: O.lanes_softmax_kernel[(parts * lanes,)](
                 x, out, x.stride(0), out.stride(0), M, N, slots, O.MAX_POLLS, O.exchange_span(w), **kw)),
             ("O.one_read_launch", lambda: O.one_read_launch(x, out, *plan, lanes=lanes)),
             ("O.softmax", lambda: O.softmax(x))]
    for rep in range(2):
        line = "host us: " + "; ".join(f"{name} {host_us(f):.1f}" for name, f in steps)
        print(line, flush=True)
        summary.append(line)
if "H" in what:
    triton.set_allocator(F.tma_scratch)
    for D, N, causal in [(64, 1024, False), (64, 1024, True), (128, 1024, True), (64, 4096, True), (64, 4096, False),
                         (128, 1024, False), (128, 16384, True)]:
        q, k, v, fl, sdpa, ref, fa = _attn_case(D, N, causal)
        with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.CUDNN_ATTENTION):
            cu = fl / db(sdpa) * 1e-9
        best = {}
        t0 = time.time()
        cfgs = [(128, 64, 8, 3, False), (64, 64, 4, 2, False), (128, 64, 4, 2, False), (128, 128, 8, 2, False),
                (128, 64, 4, 3, False), (128, 128, 4, 2, True), (128, 64, 8, 3, True)]
        for (bm, bn, w, s, ws), host in itertools.product(cfgs, (False, True)):
            if causal and (ws or bm < bn):
                continue
            cfg = dict(BLOCK_M=bm, BLOCK_N=bn, num_warps=w, num_stages=s, WARP_SPECIALIZE=ws)
            f = lambda: F.attention_forward(q, k, v, causal=causal, config=cfg, host_descriptors=host)
            try:
                o, _ = f()
                err = (o.float() - ref.float()).abs().max().item()
                if err > 2e-2:
                    print("  wrong", cfg, host, err, flush=True)
                    continue
                t = fl / db(f) * 1e-9
                print(f"  D{D} N{N} c{int(causal)} {bm}x{bn} w{w} s{s}{' WS' if ws else ''} host {host}: {t:.0f} ({t / fa:.2f}x)", flush=True)
                if t > best.get(host, (0,))[0]:
                    best[host] = (t, cfg)
            except Exception as e:
                print("  fail", cfg, host, str(e).splitlines()[0][:150] if str(e) else type(e).__name__, flush=True)
        line = (f"attn D{D} N{N} c{int(causal)}: flash {fa:.0f} cudnn {cu:.0f}; " +
                "; ".join(f"{'host' if h else 'in-kernel'} best {t:.0f} ({t / fa:.2f}x flash, {t / cu:.2f}x cudnn) {c}"
                          for h, (t, c) in sorted(best.items())) + f" [{time.time() - t0:.0f}s]")
        print(line, flush=True)
        summary.append(line)
print("\n".join(summary))
