"""H200 check of the kernel library's attention with grouped-query heads and N_Q != N_KV, then its speed.

    PYTHONPATH=$PWD python3 research/attention/gqa_probe.py [C] [T] [--full] [--out OUT.json]

C. Correctness on FlashAttention's output-test grid (``test_flash_attn_output``): B 4, Hq 9 with
   Hkv 9, 1, 3 (MHA, MQA, GQA), (N_Q, N_KV) pairs of awkward lengths, D 64 and 128, fp16 and bf16,
   causal (N_Q <= N_KV only: the mask is aligned to the end) and not. Forward and backward with
   fixed configs (``config``, ``dkdv_config``, ``dq_config``: one compile per specialization, no
   autotuning), by FlashAttention's rule: the kernel's error against a float32 torch reference is
   at most 2x (output) or 3x (dq, dk, dv) the error of the same torch maths in the input's dtype,
   plus a small atol. Pass counts per (D, dtype); each failure printed.
T. Forward time at B 1 and 4, Hq 32, Hkv 8, D 128, N 1024, 4096, 16384, causal and not, fp16 and
   bf16: the lean ``attention_forward`` (autotuned) against SDPA with ``enable_gqa=True`` under each
   backend that runs (flash, efficient, cuDNN; math excluded), the best of them kept, all with
   ``triton.testing.do_bench``. The triton output is compared with SDPA's first.
   Autotuning compiles every config per (causal, dtype): by default over the library's
   ``GQA_FWD_CONFIGS`` (the ones that won the equal-shape sweeps); ``--full`` tunes over all of
   ``FWD_CONFIGS``.

Each part, and each case in it, runs in try/except: a failure is printed and the rest go on. Each
part stops starting new cases after its budget (CHECK_BUDGET_S, TIME_BUDGET_S). The compact table
is printed last (and written to ``--out`` as JSON when given).
"""

import json
import math
import sys
import time
import traceback

import torch
import triton

import tkcourse  # noqa: F401  (the mode, before any kernel is defined)
from solutions.kernels import attention as lean
from solutions.kernels import attention_backward as fbt
from solutions.kernels import attention_forward as fat

T0 = time.time()
DEVICE = "cuda"
DTYPES = (torch.float16, torch.bfloat16)
CHECK_BUDGET_S = 90
TIME_BUDGET_S = 100
#: FlashAttention's test_flash_attn_output lengths (N_Q, N_KV); causal runs those with N_Q <= N_KV.
PAIRS = [(113, 203), (128, 217), (113, 211), (108, 256), (256, 512), (512, 256), (1024, 1024), (1023, 1024),
         (1024, 1023), (2048, 2048)]
HEADS = {"mha": (9, 9), "mqa": (9, 1), "gqa": (9, 3)}
FWD_CONFIG = dict(fat.SMALL_N_CONFIG)
DKDV_CONFIG = dict(fbt.SMALL_N_DKDV_CONFIG)
DQ_CONFIG = dict(fbt.SMALL_N_DQ_CONFIG)


def log(msg):
    print(f"[{time.time() - T0:6.1f}s] {msg}", flush=True)


def reference(q, k, v, causal):
    """Attention in torch in the inputs' dtype: KV heads repeated, the causal mask from the bottom right."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    if causal:
        n_q, n_kv = q.shape[2], k.shape[2]
        keep = torch.ones(n_q, n_kv, dtype=torch.bool, device=q.device).tril(n_kv - n_q)
        s = s.masked_fill(~keep, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def _ref_grads(q, k, v, do, causal):
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    o = reference(q, k, v, causal)
    return (o.detach(), *torch.autograd.grad(o, (q, k, v), do))


def check_case(B, Hq, Hkv, Nq, Nk, D, dtype, causal):
    """``(ok, worst line)`` of one case by the rule: 2x for o, 3x for dq, dk, dv, + atol."""
    g = torch.Generator(device=DEVICE).manual_seed(Nq * 7919 + Nk)
    q = torch.randn(B, Hq, Nq, D, device=DEVICE, dtype=dtype, generator=g)
    k, v = (torch.randn(B, Hkv, Nk, D, device=DEVICE, dtype=dtype, generator=g) for _ in range(2))
    do = torch.randn(B, Hq, Nq, D, device=DEVICE, dtype=dtype, generator=g)
    o, lse = fat.attention_forward(q, k, v, causal=causal, config=FWD_CONFIG)
    dq, dk, dv = fbt.attention_backward(do, q, k, v, o, lse, causal, dkdv_config=DKDV_CONFIG, dq_config=DQ_CONFIG)
    ref = _ref_grads(q.float(), k.float(), v.float(), do.float(), causal)
    pt = _ref_grads(q, k, v, do, causal)
    ok, notes = True, []
    for name, got, r, p, factor in zip(("o", "dq", "dk", "dv"), (o, dq, dk, dv), ref, pt, (2, 3, 3, 3)):
        err, base = (got.float() - r).abs().max().item(), (p.float() - r).abs().max().item()
        good = math.isfinite(err) and err <= factor * base + 1e-4
        ok &= good
        notes.append(f"{name} {err:.1e}/{base:.1e}{'' if good else ' FAIL'}")
    return ok, ", ".join(notes)


def part_check():
    passed, total, failures, skipped = {}, {}, [], 0
    for Nq, Nk in PAIRS:  # short pairs first: a budget cut drops the longest, every (D, dtype) keeps its cases
        for D in (128, 64):
            for dtype in DTYPES:
                for heads, (Hq, Hkv) in HEADS.items():
                    for causal in (False, True):
                        if causal and Nq > Nk:
                            continue
                        key = (D, str(dtype).split(".")[-1])
                        if time.time() - T0 > CHECK_BUDGET_S:
                            skipped += 1
                            continue
                        total[key] = total.get(key, 0) + 1
                        label = f"D{D} {key[1]} {heads} Nq{Nq} Nk{Nk} {'causal' if causal else 'full'}"
                        try:
                            ok, notes = check_case(4, Hq, Hkv, Nq, Nk, D, dtype, causal)
                        except Exception as e:  # noqa: BLE001
                            ok, notes = False, f"{type(e).__name__}: {str(e)[:200]}"
                        passed[key] = passed.get(key, 0) + ok
                        if not ok:
                            failures.append(f"{label}: {notes}")
                            log(f"FAIL {label}: {notes}")
                        if DEVICE == "cuda":
                            torch.cuda.empty_cache()
        log(f"checked up to ({Nq}, {Nk}): " + ", ".join(f"D{k[0]}-{k[1]} {passed.get(k, 0)}/{n}" for k, n in total.items()))
    summary = {f"D{k[0]}-{k[1]}": f"{passed.get(k, 0)}/{n}" for k, n in total.items()}
    return dict(passed=summary, failures=failures, not_run_budget=skipped)


def _sdpa(backend):
    from torch.nn.attention import sdpa_kernel

    def f(q, k, v, causal):
        with sdpa_kernel(backend):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    return f


def time_shape(row, B, Hq, Hkv, N, D, causal, dtype, backends):
    """Fills ``row``: the lean forward's time, each SDPA backend's (or why it did not run), the best."""
    q = torch.randn(B, Hq, N, D, device=DEVICE, dtype=dtype)
    k, v = (torch.randn(B, Hkv, N, D, device=DEVICE, dtype=dtype) for _ in range(2))
    flops = 4 * B * Hq * N * N * D // (2 if causal else 1)
    o = lean.attention_forward(q, k, v, causal)[0]  # the first call tunes
    row["triton_ms"] = triton.testing.do_bench(lambda: lean.attention_forward(q, k, v, causal)[0], warmup=10, rep=50)
    row["triton_tflops"] = flops / row["triton_ms"] * 1e-9
    best = None
    for name, f in backends.items():
        try:
            ref = f(q, k, v, causal)
            t = triton.testing.do_bench(lambda f=f: f(q, k, v, causal), warmup=10, rep=50)
        except Exception as e:  # noqa: BLE001  (a backend that does not take the shape)
            row[f"sdpa_{name}"] = f"{type(e).__name__}"
            continue
        row[f"sdpa_{name}_ms"] = t
        if "max_diff" not in row:  # against the first backend that runs
            row["max_diff"] = (o.float() - ref.float()).abs().max().item()
        if best is None or t < best[1]:
            best = (name, t)
    if best:
        row["sdpa_best"], row["sdpa_ms"] = best
        row["ratio"] = best[1] / row["triton_ms"]  # > 1: triton is faster
    log(f"{row['shape']} {row['dtype']}: triton {row['triton_ms']:.3f} ms"
        + (f", sdpa-{best[0]} {best[1]:.3f} ms, x{row['ratio']:.2f}" if best else ", no SDPA backend ran"))


def part_time(full):
    from torch.nn.attention import SDPBackend

    tuner = fat.attn_fwd_gqa_autotuned
    if full:
        tuner.configs = list(fat.FWD_CONFIGS)
    log(f"forward autotunes over {len(tuner.configs)} configs ({'all' if full else 'GQA_FWD_CONFIGS; --full for all'})")
    backends = {"flash": _sdpa(SDPBackend.FLASH_ATTENTION), "efficient": _sdpa(SDPBackend.EFFICIENT_ATTENTION),
                "cudnn": _sdpa(SDPBackend.CUDNN_ATTENTION)}
    rows, start = [], time.time()
    for dtype in DTYPES:
        for N in (4096, 1024, 16384):
            for B in (1, 4):
                for causal in (False, True):
                    Hq, Hkv, D = 32, 8, 128
                    shape = f"B{B}-Hq{Hq}-Hkv{Hkv}-N{N}-D{D}" + ("-causal" if causal else "")
                    row = dict(shape=shape, dtype=str(dtype).split(".")[-1])
                    rows.append(row)
                    if time.time() - start > TIME_BUDGET_S:
                        row["note"] = "not run: budget"
                        continue
                    try:
                        time_shape(row, B, Hq, Hkv, N, D, causal, dtype, backends)
                    except Exception as e:  # noqa: BLE001
                        row["note"] = f"{type(e).__name__}: {str(e)[:200]}"
                        log(f"FAIL {shape} {row['dtype']}: {row['note']}")
                    torch.cuda.empty_cache()
    return rows


def table(rows):
    lines = ["| shape | dtype | triton ms | TFLOP/s | best SDPA | SDPA ms | SDPA/triton | max diff |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "triton_ms" not in r:
            lines.append(f"| {r['shape']} | {r['dtype']} | {r.get('note', '')} | | | | | |")
            continue
        lines.append(f"| {r['shape']} | {r['dtype']} | {r['triton_ms']:.3f} | {r['triton_tflops']:.0f} | "
                     f"{r.get('sdpa_best', '-')} | {r.get('sdpa_ms', float('nan')):.3f} | "
                     f"{r.get('ratio', float('nan')):.2f} | {r.get('max_diff', float('nan')):.1e} |")
    return "\n".join(lines)


def main(argv):
    parts = [a for a in argv if a in ("C", "T")] or ["C", "T"]
    out = argv[argv.index("--out") + 1] if "--out" in argv else None
    log(f"torch {torch.__version__}, triton {triton.__version__}, {torch.cuda.get_device_name(0)}; parts {parts}")
    result = {}
    if "C" in parts:
        try:
            result["check"] = part_check()
        except Exception:  # noqa: BLE001
            result["check"] = {"error": traceback.format_exc()}
            log(result["check"]["error"])
    if "T" in parts:
        try:
            result["time"] = part_time("--full" in argv)
        except Exception:  # noqa: BLE001
            result["time"] = []
            log(traceback.format_exc())
    if out:
        with open(out, "w") as f:
            json.dump(result, f, indent=1, default=str)
    if "check" in result:
        c = result["check"]
        print("\ncorrectness (passed/run):", c.get("passed"), "| failures:", len(c.get("failures", [])),
              "| not run (budget):", c.get("not_run_budget"))
        for line in c.get("failures", [])[:20]:
            print("  ", line)
    if result.get("time"):
        print("\nforward, GQA Hq 32 Hkv 8 D 128 (SDPA/triton > 1: triton faster)\n" + table(result["time"]))
    log("done")


if __name__ == "__main__":
    main(sys.argv[1:])
