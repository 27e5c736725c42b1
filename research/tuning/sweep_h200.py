"""The sweeps behind the tuned constants of solutions/ (a tuning aid, not part of the course).

A: fused softmax grid (persistent or a program per row) x num_warps x num_stages, against a copy of
   the same bytes; B: the one-read online softmax's part size x num_warps, against the two-pass plan;
C: attention forward configs (BLOCK_M, BLOCK_N, warps, stages, warp specialization) against SDPA flash.
Run on the GPU machine from the repository root:
    PYTHONPATH=$PWD python3 research/tuning/sweep_h200.py AB   (or C)
Outputs of 2026-11-29: research/tuning/logs/sweep_softmax_online.txt (A, B; its C stopped on a
do_bench return-type error, since fixed) and sweep_attention.txt (C). The graph timer used then is
now tkcourse.bench.core.graph_ms, which also replays the graph 10 times before timing.
"""
import sys, time, itertools
import tkcourse
import torch, triton
from tkcourse.bench.core import graph_ms, measure
import solutions.softmax as S
import solutions.kernels.online_softmax_one_read as O  # the lesson's last step: the one-read and lanes kernels
import solutions.kernels.online_softmax_split as OS  # the split step: the (m, l) exchange words, the two-pass plan
from solutions.kernels.attention_forward import attention_forward
what = sys.argv[1] if len(sys.argv) > 1 else "ABC"

def db(fn):  # median ms from do_bench, shorter than the bench's
    return measure(fn, warmup=10, rep=40)[0]

summary = []
if "A" in what:
    for M, N in [(4096, 1024), (4096, 4096), (4096, 16384)]:
        x = torch.randn(M, N, dtype=torch.float16, device="cuda"); out = torch.empty_like(x); b = 4 * M * N
        y = torch.empty_like(x)
        cp = graph_ms(lambda: torch.add(x, 0, out=y), rep=60)
        res = []
        BLOCK = triton.next_power_of_2(N)
        for w, st, g in itertools.product((4, 8, 16, 32), (1, 2, 3), ("pers", "rows")):
            if st * BLOCK * 2 > 200 * 1024: continue
            try:
                grid = (S.num_programs(x, out, BLOCK, w, st) if g == "pers" else M,)
                f = lambda: S.softmax_kernel[grid](x, out, x.stride(0), out.stride(0), M, N, BLOCK=BLOCK, NUM_STAGES=st, num_warps=w)
                f(); torch.cuda.synchronize()
                assert torch.allclose(out.float(), torch.softmax(x.float(), -1), atol=1e-3)
                res.append((b / graph_ms(f, rep=60) * 1e-6, w, st, g, grid[0]))
            except Exception as e:
                print("fail", w, st, g, str(e)[:100])
        res.sort(reverse=True)
        cur = b / graph_ms(lambda: S.softmax(x), rep=60) * 1e-6
        print(f"softmax {M}x{N}: same-size add-copy {b/cp*1e-6:.0f} GB/s; current {cur:.0f}; best:", [f"{r[0]:.0f} w{r[1]} s{r[2]} {r[3]}{r[4]}" for r in res[:5]], flush=True)
        summary.append(f"softmax {M}x{N} copy {b/cp*1e-6:.0f} cur {cur:.0f} best {res[0][0]:.0f} w{res[0][1]} s{res[0][2]} {res[0][3]}")
if "B" in what:
    for M, N in [(4096, 32768), (1024, 131072), (256, 262144)]:
        x = torch.randn(M, N, dtype=torch.float16, device="cuda") * 3; b = 4 * M * N
        ref = torch.softmax(x.float(), -1)
        res = []
        for pb, w in itertools.product((8192, 16384, 32768, 65536), (4, 8, 16)):
            part = pb // 2; parts = triton.next_power_of_2(triton.cdiv(N, part))
            out = torch.empty_like(x)
            f = lambda: O.one_read_launch(x, out, parts, part, w)
            try:
                f(); torch.cuda.synchronize()
                err = (out.float() - ref).abs().max().item()
                res.append((b / graph_ms(f, rep=60) * 1e-6, pb, w, parts, err))
            except Exception as e:
                print("fail", pb, w, str(e)[:100])
        res.sort(reverse=True)
        cur = b / graph_ms(lambda: O.softmax(x), rep=60) * 1e-6
        old = b / graph_ms(lambda: OS.softmax(x, *OS.split_plan(N, 2)), rep=60) * 1e-6
        print(f"online {M}x{N}: two-pass {old:.0f}, current {cur:.0f}; best:", [f"{r[0]:.0f} {r[1]//1024}K w{r[2]} p{r[3]} err{r[4]:.1e}" for r in res[:5]], flush=True)
        summary.append(f"online {M}x{N} two-pass {old:.0f} cur {cur:.0f} best {res[0][0]:.0f} {res[0][1]//1024}K w{res[0][2]} err{res[0][4]:.1e}")
if "C" in what:
    for D, N, causal in [(64, 1024, False), (128, 1024, False), (64, 1024, True), (64, 4096, True), (128, 1024, True)]:
        H = 2048 // D; B = 16384 // N
        q, k, v = (torch.randn(B, H, N, D, dtype=torch.float16, device="cuda") for _ in range(3))
        fl = 4 * B * H * N * N * D // (2 if causal else 1)
        with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
            fa = fl / db(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)) * 1e-9
        cur = fl / db(lambda: attention_forward(q, k, v, causal=causal)) * 1e-9
        res = []
        t0 = time.time()
        for bm, bn, w, s, ws in itertools.product((64, 128), (32, 64, 128), (4, 8), (2, 3, 4), (False, True)):
            if (causal and (bm < bn or ws)) or (ws and s == 4) or bn == 32: continue
            if time.time() - t0 > 45: break
            cfg = dict(BLOCK_M=bm, BLOCK_N=bn, num_warps=w, num_stages=s, WARP_SPECIALIZE=ws)
            try:
                res.append((fl / db(lambda: attention_forward(q, k, v, causal=causal, config=dict(cfg))) * 1e-9, bm, bn, w, s, ws))
            except Exception as e:
                pass
        res.sort(reverse=True)
        print(f"attn D{D} N{N} c{int(causal)}: flash {fa:.0f}, current {cur:.0f} ({cur/fa:.2f}x); {len(res)} ok in {time.time()-t0:.0f}s; best:",
              [f"{r[0]:.0f} ({r[0]/fa:.2f}x) {r[1]}x{r[2]} w{r[3]} s{r[4]}{' WS' if r[5] else ''}" for r in res[:5]], flush=True)
        summary.append(f"attn D{D} N{N} c{int(causal)} flash {fa:.0f} cur {cur:.0f} best {res[0][0]:.0f} {res[0][0]/fa:.2f}x {res[0][1:]}")
print("\n".join(summary))
