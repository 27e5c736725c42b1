"""Decode speed of a Llama-3-8B-shaped model (random bf16 weights) on the course's kernels, against torch.

For batch 1 and 8, a prompt of 128 random tokens and 256 greedy new tokens, the decode tokens/s of

- ``torch``: ``solutions.llm`` in eager torch ops (``kernels="torch"``, no graph);
- ``torch (graph)``: the same eager ops, the decode step replayed from one CUDA graph (``graph=True``):
  no fusion, only the launches gone;
- ``torch.compile``: the same decode step through ``torch.compile(mode="reduce-overhead")`` (Inductor's
  kernels, replayed from CUDA graphs), every weight and cache tensor marked as a static address;
- ``course (eager)``: the course's kernels, each step launched from the host (``graph=False``);
- ``course``: the course's kernels, the decode step replayed from one CUDA graph (``graph=True``);
- ``course int4``: the same with every projection in int4 (``int4=True``).

Decode time is ``generate``'s time less the prefill's (timed alone, same shapes). Each path is set
against the **bandwidth floor**: at small batch a decode step reads every weight once plus the KV
cache, so no step can be shorter than those bytes over the GPU's copy bandwidth (a device-to-device
copy, measured in the same run, read plus write). ``% floor`` is that floor's time over the step's.
The cache bytes are the tokens a step attends to (on average prompt + new/2); the torch paths read
their whole static cache every step, which the floor does not count.

Correctness, on the course path against the torch path: the teacher-forced logits of the prompt (max
abs difference, beside the logits' size), and whether the first 32 greedy tokens agree (bf16 rounds
differently in the two, and a near-tie may go either way: the top-2 margin of the first disagreement
is printed). Random weights give logits of size about 1 over 128256 tokens, so near-ties are common.

Every part runs in try/except and only while the time budget allows (``--budget``, seconds); the
table comes last. Run from the repository root on the GPU machine:

    PYTHONPATH=$PWD python3 research/llm/bench_llm.py --json research/llm/logs/bench_first.json

On a CPU, ``--config tiny --prompt 16 --new 8`` runs every part but torch.compile in Triton's
interpreter (a check of the script, not a measurement).
"""

from __future__ import annotations

import argparse
import json
import time
import traceback
from pathlib import Path

import torch

import tkcourse  # noqa: F401  (first: picks the interpreter on a machine with no GPU)
from solutions import llm
from solutions.kernels import matmul as k_matmul

T0 = time.time()
ROWS: list[dict] = []  # the table
NOTES: dict = {}  # everything else, for the JSON


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(fn):
    sync()
    t = time.perf_counter()
    out = fn()
    sync()
    return out, time.perf_counter() - t


def part(name, estimate_s, budget_s, fn):
    """Run ``fn`` if the budget has ``estimate_s`` left; print and keep its error instead of raising."""
    left = budget_s - (time.time() - T0)
    if left < estimate_s:
        print(f"[{name}] skipped: {left:.0f} s left of the budget, needs about {estimate_s} s", flush=True)
        NOTES.setdefault("skipped", []).append(name)
        return None
    t = time.time()
    print(f"[{name}] ...", flush=True)
    try:
        out = fn()
        print(f"[{name}] done in {time.time() - t:.1f} s", flush=True)
        return out
    except Exception as e:  # noqa: BLE001 (a part's failure is a result)
        traceback.print_exc(limit=6)
        NOTES.setdefault("errors", {})[name] = f"{type(e).__name__}: {e}"[:500]
        print(f"[{name}] FAILED after {time.time() - t:.1f} s: {type(e).__name__}: {e}"[:400], flush=True)
        return None
    finally:
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def copy_bandwidth(device, nbytes=2 << 30, reps=20) -> float:
    """Bytes a second that a device-to-device copy moves (read + write)."""
    if device.type != "cuda":
        nbytes, reps = 64 << 20, 3
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    _, s = timed(lambda: [dst.copy_(src) for _ in range(reps)])
    return 2 * nbytes * reps / s


def step_bytes(c: llm.Config, batch: int, attended: float, int4: bool, elem: int = 2) -> float:
    """Bytes a decode step must read (``llm.step_bytes``, summed over its pieces)."""
    return sum(llm.step_bytes(c, batch, attended, int4, elem).values())


def prefill_seconds(weights, prompt, n, kernels, int4) -> float:
    P = llm.prepare(weights, kernels, int4)
    cache = llm.new_cache(P, prompt.shape[0], prompt.shape[1] + n)
    with torch.no_grad():
        llm.prefill(P, cache, prompt)  # warm
        return min(timed(lambda: llm.prefill(P, cache, prompt))[1] for _ in range(3))


def agree_prefix(a, b) -> int:
    same = (a == b).long()
    return int(same.cumprod(-1).sum(-1).min())


def bench_generate(name, weights, prompt, n, floor_s, bytes_, kernels="course", int4=False, graph=True):
    """Decode tokens/s of ``generate`` (warmed once at the same shapes)."""
    B = prompt.shape[0]
    kw = dict(kernels=kernels, int4=int4, graph=graph)
    llm.generate(weights, prompt, n, **kw)  # compiles, autotunes, makes every kept entry
    tokens, total = timed(lambda: llm.generate(weights, prompt, n, **kw))
    pre = prefill_seconds(weights, prompt, n, kernels, int4)
    return _row(name, B, total, pre, n, floor_s, bytes_), tokens


def _row(name, B, total, pre, n, floor_s, bytes_):
    step = (total - pre) / (n - 1)
    row = dict(path=name, batch=B, tok_s=B / step, ms_step=1e3 * step, prefill_ms=1e3 * pre,
               gb_step=bytes_ / 1e9, floor_pct=100 * floor_s / step)
    ROWS.append(row)
    print(f"    {name} B{B}: {row['tok_s']:.1f} tok/s, {row['ms_step']:.2f} ms a step, "
          f"{row['floor_pct']:.0f}% of the floor, prefill {row['prefill_ms']:.1f} ms", flush=True)
    return row


def bench_compiled(weights, prompt, n, floor_s, bytes_):
    """torch.compile(mode="reduce-overhead") of ``llm.decode_step``; the prefill stays eager."""
    import torch._dynamo

    torch._dynamo.config.automatic_dynamic_shapes = False  # one static graph a batch size
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 16)
    P = llm.prepare(weights, "torch")
    B, T = prompt.shape
    cache = llm.new_cache(P, B, T + n)
    for t in [*weights.state_dict().values(), *cache.k, *cache.v, P.cos, P.sin]:
        torch._dynamo.mark_static_address(t)  # the graphs read them in place, never copied in
    step = NOTES.setdefault("_compiled_step", torch.compile(llm.decode_step, mode="reduce-overhead"))

    def run(steps):
        with torch.no_grad():
            tok = llm.prefill(P, cache, prompt).argmax(-1, keepdim=True)
            positions = torch.full((B, 1), T, dtype=torch.long, device=prompt.device)
            seq_lens = torch.full((B,), T + 1, dtype=torch.int32, device=prompt.device)
            out = [tok]
            for _ in range(steps):
                torch.compiler.cudagraph_mark_step_begin()
                tok = step(P, cache, tok, positions, seq_lens).argmax(-1, keepdim=True)
                out.append(tok)
                positions, seq_lens = positions + 1, seq_lens + 1
            return torch.cat(out, 1)

    _, warm = timed(lambda: run(3))  # compiles, then records the graphs
    print(f"    compile and warm-up: {warm:.1f} s", flush=True)
    run(3)
    tokens, total = timed(lambda: run(n - 1))
    pre = prefill_seconds(weights, prompt, n, "torch", False)
    return _row("torch.compile", B, total, pre, n, floor_s, bytes_), tokens


def correctness(weights, prompt, n_tokens=32):
    """Course against torch: teacher-forced logits of the prompt; the first greedy tokens."""
    want = llm.logits(weights, prompt, kernels="torch")
    got = llm.logits(weights, prompt, kernels="course")
    NOTES["logits_max_abs_diff"] = (got - want).abs().max().item()
    NOTES["logits_max_abs"] = want.abs().max().item()
    NOTES["logits_mean_abs_diff"] = (got - want).abs().mean().item()
    del want, got
    tt, tl = llm.generate(weights, prompt, n_tokens, kernels="torch", graph=False, return_logits=True)
    tc = llm.generate(weights, prompt, n_tokens, kernels="course", graph=True)
    n = agree_prefix(tc, tt)
    NOTES["greedy_tokens_agree"] = f"{n} of {n_tokens}"
    if n < n_tokens:
        top2 = tl[0, n].topk(2).values
        NOTES["margin_at_first_disagreement"] = (top2[0] - top2[1]).item()
    top2 = tl[0].topk(2, dim=-1).values
    NOTES["smallest_top2_margin_torch"] = (top2[:, 0] - top2[:, 1]).min().item()
    ti = llm.generate(weights, prompt, n_tokens, kernels="course", int4=True)
    NOTES["int4_greedy_tokens_agree_with_bf16"] = f"{agree_prefix(ti, tc)} of {n_tokens}"
    for k in ("logits_max_abs_diff", "logits_max_abs", "logits_mean_abs_diff", "greedy_tokens_agree",
              "margin_at_first_disagreement", "smallest_top2_margin_torch", "int4_greedy_tokens_agree_with_bf16"):
        if k in NOTES:
            print(f"    {k}: {NOTES[k]}", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="llama3_8b", choices=["llama3_8b", "tiny"])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--new", type=int, default=256)
    ap.add_argument("--budget", type=float, default=480, help="seconds for the whole run (parts past it are skipped)")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--json", help="write the table and notes here")
    args = ap.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float16  # the interpreter has no bf16
    config = getattr(llm.Config, args.config)()
    n = args.new
    NOTES.update(matmul_decode_plan=k_matmul.MATMUL_DECODE, config=str(config),
                 device=torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
                 torch=torch.__version__, dtype=str(dtype), prompt=args.prompt, new=n)
    print(f"{NOTES['device']}, torch {torch.__version__}; {config}", flush=True)

    weights = part("weights", 5, args.budget, lambda: llm.random_weights(config, dtype, device, seed=0))
    if weights is None:
        return 1
    bw = part("copy bandwidth", 5, args.budget, lambda: copy_bandwidth(device)) or float("nan")
    NOTES["copy_bandwidth_tb_s"] = bw / 1e12
    print(f"    copy bandwidth (read + write): {bw / 1e12:.2f} TB/s", flush=True)
    g = torch.Generator().manual_seed(0)
    prompts = {B: torch.randint(0, config.vocab, (B, args.prompt), generator=g).to(device) for B in args.batches}

    part("prepare course weights (transposed, int4)", 30, args.budget,
         lambda: (llm.prepare(weights, "course"), llm.prepare(weights, "course", int4=True)))
    part("correctness", 90, args.budget, lambda: correctness(weights, prompts[args.batches[0]][:1]))

    attended = args.prompt + n / 2
    for B in args.batches:  # each batch's torch.compile row right after its own rows, so that a budget cut
        # short loses the last batch's rows rather than every compile row
        floors = {q: step_bytes(config, B, attended, q) for q in (False, True)}
        fl = {q: floors[q] / bw for q in floors}
        print(f"B{B}: a step reads {floors[False] / 1e9:.2f} GB ({floors[True] / 1e9:.2f} GB int4): floor "
              f"{1e3 * fl[False]:.2f} ms ({1e3 * fl[True]:.2f} ms int4)", flush=True)
        p = prompts[B]
        part(f"course B{B}", 40, args.budget,
             lambda: bench_generate("course", weights, p, n, fl[False], floors[False]))
        part(f"course int4 B{B}", 40, args.budget,
             lambda: bench_generate("course int4", weights, p, n, fl[True], floors[True], int4=True))
        part(f"torch (graph) B{B}", 40, args.budget,
             lambda: bench_generate("torch (graph)", weights, p, n, fl[False], floors[False], kernels="torch"))
        if device.type == "cuda" and not args.no_compile:
            part(f"torch.compile B{B}", 150, args.budget,
                 lambda: bench_compiled(weights, p, n, fl[False], floors[False]))
        part(f"course (eager) B{B}", 40, args.budget,
             lambda: bench_generate("course (eager)", weights, p, n, fl[False], floors[False], graph=False))
        part(f"torch B{B}", 40, args.budget,
             lambda: bench_generate("torch", weights, p, n, fl[False], floors[False], kernels="torch", graph=False))
        if device.type == "cuda" and B == args.batches[0]:  # where one eager step's GPU time goes, by piece
            def profiles():
                ctx = int(attended)
                NOTES["profile"] = dict(batch=1, context=ctx, **{
                    name: llm.step_profile(weights, 1, ctx, kernels=k, int4=q)
                    for name, k, q in (("course", "course", False), ("course int4", "course", True),
                                       ("torch", "torch", False))})
                kern = llm.step_kernels(weights, 1, ctx, kernels="course")  # what "other" is, kernel by kernel
                other = sorted(((us, k) for k, us in kern.items() if llm.piece_of(k) == llm.OTHER), reverse=True)
                NOTES["profile_other_kernels"] = [[k[:120], round(us, 1)] for us, k in other[:15]]
                for k, us in NOTES["profile_other_kernels"]:
                    print(f"    other: {us:8.1f} us  {k}", flush=True)
                for name in ("course", "course int4", "torch"):
                    print(f"    profile {name}: " + ", ".join(f"{p} {us:.0f}" for p, us in NOTES["profile"][name].items()),
                          flush=True)
            part("profile of one decode step (B1)", 30, args.budget, profiles)

    NOTES.pop("_compiled_step", None)
    NOTES["seconds"] = time.time() - T0
    print(f"\n{NOTES['device']}, {args.config}, {dtype}, prompt {args.prompt}, {n} new tokens; copy "
          f"{bw / 1e12:.2f} TB/s; {NOTES['seconds']:.0f} s")
    for k in ("logits_max_abs_diff", "logits_max_abs", "greedy_tokens_agree", "margin_at_first_disagreement",
              "int4_greedy_tokens_agree_with_bf16"):
        if k in NOTES:
            print(f"{k}: {NOTES[k]}")
    for k, v in NOTES.get("errors", {}).items():
        print(f"error in {k}: {v[:200]}")
    print(f"{'path':<16}{'B':>3}{'tok/s':>9}{'ms/step':>9}{'GB/step':>9}{'% floor':>9}{'prefill ms':>12}")
    for r in ROWS:
        print(f"{r['path']:<16}{r['batch']:>3}{r['tok_s']:>9.1f}{r['ms_step']:>9.2f}{r['gb_step']:>9.2f}"
              f"{r['floor_pct']:>9.0f}{r['prefill_ms']:>12.1f}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(dict(rows=ROWS, notes=NOTES), f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
