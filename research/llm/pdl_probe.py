"""Programmatic dependent launch across a whole decode step: the 8B-shaped model with it on and off.

    PYTHONPATH=$PWD python3 research/llm/pdl_probe.py [--rounds 2] [--new 129] [--json OUT/pdl.json]

Every kernel of the course's decode step can be launched with programmatic dependent launch
(``solutions.kernels.lean.pdl_meta``: each module's ``*_PDL`` switch). With it, a kernel's programs get
onto the SMs while the kernel before it finishes, and wait there (``gdc_wait``) for its writes. A step
is a chain of about ten kernels a layer, 32 layers: what each link saves adds up. This times
``llm.generate`` (the decode step replayed from a CUDA graph) at batch 1 and 8, 16-bit and int4
weights, with every switch off, then on, in interleaved rounds (the same weights and prompts), and
checks that both give the same tokens. Tokens/s as ``bench_llm.py`` measures them.
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
from solutions.kernels import decode_attention, int4_matmul, kv_cache, matmul, rmsnorm, rope, swiglu  # noqa: E402

#: Every module switch of programmatic dependent launch a decode step meets.
SWITCHES = ((matmul, "MATMUL_PDL"), (int4_matmul, "INT4_PDL"), (rmsnorm, "RMSNORM_PDL"), (rope, "ROPE_PDL"),
            (swiglu, "SWIGLU_PDL"), (kv_cache, "KV_PDL"), (decode_attention, "DECODE_PDL"))


def set_pdl(on: bool):
    for module, name in SWITCHES:
        setattr(module, name, on)
    kernels.forget()  # the switches are read when a key's entry is made


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--new", type=int, default=129)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8])
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
    rows, tokens = [], {}
    for r in range(args.rounds):
        for on in (False, True):
            set_pdl(on)
            for B in args.batches:
                for int4 in (False, True):
                    row, tok = bench_llm.bench_generate("int4" if int4 else "16-bit", weights, prompts[B], args.new,
                                                        float("nan"), 0.0, int4=int4)
                    rows.append(dict(round=r, pdl=on, batch=B, int4=int4, tok_s=row["tok_s"], ms_step=row["ms_step"]))
                    key = (B, int4)
                    same = tokens.setdefault(key, tok).equal(tok)
                    rows[-1]["same_tokens"] = bool(same)
                    print(f"round {r} pdl {on!s:5} B{B} {'int4' if int4 else '16-bit':6} {row['tok_s']:8.1f} tok/s "
                          f"{row['ms_step']:.3f} ms  same tokens: {same}", flush=True)
    print(f"\n{torch.cuda.get_device_name() if dev.type == 'cuda' else 'cpu'}, torch {torch.__version__}, "
          f"{time.time() - t0:.0f} s; best of {args.rounds} rounds")
    print(f"{'B':>3} {'weights':8}{'off tok/s':>11}{'on tok/s':>10}{'on/off':>8}{'same':>6}")
    summary = []
    for B in args.batches:
        for int4 in (False, True):
            best = {on: max(x["tok_s"] for x in rows if x["batch"] == B and x["int4"] == int4 and x["pdl"] == on)
                    for on in (False, True)}
            same = all(x["same_tokens"] for x in rows if x["batch"] == B and x["int4"] == int4)
            summary.append(dict(batch=B, int4=int4, off=best[False], on=best[True], ratio=best[True] / best[False]))
            print(f"{B:>3} {'int4' if int4 else '16-bit':8}{best[False]:>11.1f}{best[True]:>10.1f}"
                  f"{best[True] / best[False]:>8.3f}{str(same):>6}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(dict(rows=rows, summary=summary), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
