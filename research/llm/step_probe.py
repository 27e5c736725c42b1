"""Variants of the course's decode step timed against each other on the 8B-shaped model, in one run.

    PYTHONPATH=$PWD python3 research/llm/step_probe.py [VARIANT ...] [--rounds 2] [--new 129] [--json OUT/x.json]
    [--profile]

Each variant sets some module switches of the kernel library (and ``solutions.llm``) before the run
and puts them back after it; every kept launch entry is dropped between variants (``kernels.forget``),
since the switches are read when an entry is made. The probe times ``llm.generate`` (the decode step
replayed from a CUDA graph) at batch 1 and 8, 16-bit and int4 weights, as ``bench_llm.py`` measures
tokens/s, variant after variant in interleaved rounds on the same weights and prompts, and says whether
every variant gives the tokens of the first (a variant that splits a sum differently adds in another
order, and random weights' near-ties may then part the tokens: compare the logits for correctness). ``--profile``: then, with every switch as the code has it,
one eager step's GPU time by piece at batch 1 and 8 (``llm.step_profile``).

Variants (``VARIANTS``):

- ``nopdl``: no kernel launched with programmatic dependent launch (``lean.pdl_meta``); ``pdl``: all.
- ``nofill``: the int4 split by K steps alone (``int4_matmul.FILL_PER_SM`` 0).
- ``m8old``: the int4 plan's 5 to 8 rows on the 16-row tile with x on the left, as before its key 8.
- ``code``: every switch as the code has it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
# isort: off
import tkcourse  # noqa: E402, F401  (first: the mode, before triton is imported)
import torch  # noqa: E402

import bench_llm  # noqa: E402
from solutions import kernels, llm  # noqa: E402
from solutions.kernels import int4_matmul  # noqa: E402

PDL = kernels.PDL_SWITCHES  # every module switch of programmatic dependent launch a decode step meets
VARIANTS = {
    "code": {},
    "nopdl": {s: False for s in PDL},
    "pdl": {s: True for s in PDL},
    "nofill": {(int4_matmul, "FILL_PER_SM"): 0},
    "m8old": {(int4_matmul, "CONFIGS"): {b: c for b, c in int4_matmul.CONFIGS.items() if b != 8}},
}


def run_variant(name, fn):
    saved = {(m, a): getattr(m, a) for (m, a) in VARIANTS[name]}
    for (m, a), v in VARIANTS[name].items():
        setattr(m, a, v)
    kernels.forget()
    try:
        return fn()
    finally:
        for (m, a), v in saved.items():
            setattr(m, a, v)
        kernels.forget()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("variants", nargs="*", default=["nopdl", "code"], choices=list(VARIANTS))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--new", type=int, default=129)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--int4-only", action="store_true")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--config", default="llama3_8b", choices=["llama3_8b", "tiny"])
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float16
    config = getattr(llm.Config, args.config)()
    t0 = time.time()
    weights = llm.random_weights(config, dtype, dev, seed=0)
    g = torch.Generator().manual_seed(0)
    prompts = {B: torch.randint(0, config.vocab, (B, args.prompt), generator=g).to(dev) for B in args.batches}
    kinds = (True,) if args.int4_only else (False, True)
    rows, tokens = [], {}
    for r in range(args.rounds):
        for name in args.variants:
            for B in args.batches:
                for int4 in kinds:
                    row, tok = run_variant(name, lambda: bench_llm.bench_generate(
                        "int4" if int4 else "16-bit", weights, prompts[B], args.new, float("nan"), 0.0, int4=int4))
                    same = bool(tokens.setdefault((B, int4), tok).equal(tok))
                    rows.append(dict(round=r, variant=name, batch=B, int4=int4, tok_s=row["tok_s"],
                                     ms_step=row["ms_step"], same_tokens=same))
                    print(f"round {r} {name:8} B{B} {'int4' if int4 else '16-bit':6} {row['tok_s']:8.1f} tok/s "
                          f"{row['ms_step']:.3f} ms  same tokens: {same}", flush=True)
    profiles = {}
    if args.profile and dev.type == "cuda":
        for B in args.batches:
            for int4 in (False, True):
                p = llm.step_profile(weights, B, args.prompt + args.new // 2, int4=int4)
                profiles[f"B{B} {'int4' if int4 else '16-bit'}"] = p
                print(f"profile B{B} {'int4' if int4 else '16-bit'}: "
                      + ", ".join(f"{k} {v:.0f}" for k, v in sorted(p.items(), key=lambda kv: -kv[1])), flush=True)
    print(f"\n{torch.cuda.get_device_name() if dev.type == 'cuda' else 'cpu'}, torch {torch.__version__}, "
          f"{time.time() - t0:.0f} s; best of {args.rounds} rounds, tok/s (x the first variant)")
    print(f"{'B':>3} {'weights':8}" + "".join(f"{v:>16}" for v in args.variants) + f"{'same':>6}")
    summary = []
    for B in args.batches:
        for int4 in kinds:
            best = {v: max(x["tok_s"] for x in rows if (x["batch"], x["int4"], x["variant"]) == (B, int4, v))
                    for v in args.variants}
            first = best[args.variants[0]]
            same = all(x["same_tokens"] for x in rows if (x["batch"], x["int4"]) == (B, int4))
            summary.append(dict(batch=B, int4=int4, same_tokens=same, **best))
            print(f"{B:>3} {'int4' if int4 else '16-bit':8}"
                  + "".join(f"{best[v]:>9.1f} {best[v] / first:5.3f}" for v in args.variants) + f"{str(same):>6}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(dict(rows=rows, summary=summary, profiles=profiles), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
