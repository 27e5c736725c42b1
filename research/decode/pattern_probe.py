"""Decode at one long sequence (B 1 x 32768, page 16): does the cache's access pattern cost the split kernel
its last 15%, or its arithmetic?

    PYTHONPATH=$PWD python3 research/decode/pattern_probe.py [OUT] [--lens 32768] [--check]

Why: ``spread_probe.py`` found a kernel that only reads K and V, in 64 KB blocks in memory order, at 0.85
of a copy under the table's zeroing flush (0.96 under a reading one), where the course's split kernel and
SDPA reach 0.73-0.79 at every launch plan. The course's programs read differently: one KV head each, so
each step loads BLOCK_T rows of 256 bytes spaced a page's head stride (2 kB) apart, through the block
table. Three kernels that do nothing but read, each summing what it loads and storing one float:

- ``flat``: the spread probe's ``read_fn``, K and V in memory order, 32 KB of each a program;
- ``head``: the split kernel's pattern: a program a (KV head, split), BLOCK_T tokens a step through the
  block table, rows of one head;
- ``page``: a program a split, whole pages through the block table (every head of a token: 2 kB in order).

If ``head`` reads as fast as ``flat``, the pattern costs nothing and the gap is in the kernel's work
between loads; if it reads as slow as the course, a cache laid out head-major within a page (FlashInfer's
HND) is what would close it. Each kernel in CUDA graphs under both flushes beside the course, SDPA and
the copy kernel of the bench's rows; ``head`` over tokens a step, splits and stages.
``--check`` runs ``head`` and ``page`` on the CPU (the interpreter) at a small size against torch's sums.
"""

import argparse
import itertools
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
# isort: off
import tkcourse  # noqa: E402, F401  (first: the mode, before triton is imported)
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
# isort: on

from benchmarks import decode_attention as bench  # noqa: E402
from tkcourse.mode import DEVICE  # noqa: E402

FLUSHES = ("zero", "read")


@triton.jit
def head_kernel(K, V, TABLE, OUT, n_tokens, tokens_per_split,
                PAGE: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr, BLOCK_T: tl.constexpr):
    """A program a (KV head, split): BLOCK_T tokens a step, each row D values of one head."""
    h = tl.program_id(0)
    s = tl.program_id(1)
    lo = s * tokens_per_split
    hi = tl.minimum(lo + tokens_per_split, n_tokens)
    d = tl.arange(0, D)
    acc = tl.zeros([D], dtype=tl.float32)
    for start in range(lo, hi, BLOCK_T):
        t = start + tl.arange(0, BLOCK_T)
        m = t < hi
        page = tl.load(TABLE + t // PAGE, mask=m, other=0).to(tl.int64)
        row = (page * PAGE + t % PAGE) * HKV + h
        offs = row[:, None] * D + d[None, :]
        k = tl.load(K + offs, mask=m[:, None], other=0.0).to(tl.float32)
        v = tl.load(V + offs, mask=m[:, None], other=0.0).to(tl.float32)
        acc += tl.sum(k + v, axis=0)  # a reduction over the step's tokens, as the kernel's dots make
    tl.store(OUT + s * HKV + h, tl.sum(acc, axis=0))


def head(k, v, table, n_tokens, splits, block_t=128, warps=4, stages=3):
    _, page, hkv, d = k.shape
    per = triton.cdiv(triton.cdiv(n_tokens, splits), block_t) * block_t
    out = torch.zeros(splits * hkv, dtype=torch.float32, device=k.device)
    return out, lambda: head_kernel[(hkv, splits)](k, v, table, out, n_tokens, per, PAGE=page, HKV=hkv, D=d,
                                                   BLOCK_T=block_t, num_warps=warps, num_stages=stages)


def page(k, v, table, n_tokens, splits, block_t=16, warps=8, stages=3):
    """``head_kernel`` on the cache viewed as one head of every head's values: each row a token's 2 kB."""
    pages, pg, hkv, d = k.shape
    return head(k.view(pages, pg, 1, hkv * d), v.view(pages, pg, 1, hkv * d), table, n_tokens, splits, block_t, warps,
                stages)


def check():
    """``head`` and ``page`` sum the live tokens' K and V, at a small size (the interpreter on a CPU)."""
    q, k, v, seq_lens, table = bench.paged_cache([200], 16, Hkv=2, D=16, dtype=torch.float32, device=DEVICE)
    n = 200
    want = 0.0
    for p in range(triton.cdiv(n, 16)):
        rows = min(16, n - 16 * p)
        pg = int(table[0, p])
        want += float(k[pg, :rows].double().sum() + v[pg, :rows].double().sum())
    for splits in (1, 3):
        for name, (out, fn) in (("head", head(k, v, table[0], n, splits, block_t=32, warps=4)),
                                ("page", page(k, v, table[0], n, splits, block_t=16))):
            fn()
            assert abs(float(out.double().sum()) - want) < 1e-2, (name, splits, float(out.sum()), want)
    print("head and page sum what they read, as torch does")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", default=None)
    ap.add_argument("--lens", type=int, default=32768)
    ap.add_argument("--check", action="store_true", help="the kernels' sums on the CPU, no timing")
    args = ap.parse_args(argv)
    if args.check:
        return check()
    if not torch.cuda.is_available():
        print("needs a GPU: the interpreter's times say nothing of one (--check runs on a CPU)")
        return 0
    from spread_probe import read_fn  # the read-only kernel in memory order, one home

    from solutions.kernels import decode_attention as fast
    from tkcourse.bench import graph_ms
    from tkcourse.bench.peers import kernel_copy

    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, f"B1 x {args.lens}, page 16",
          flush=True)
    q, k, v, seq_lens, table = bench.paged_cache([args.lens], 16)
    kc, vc = bench.contiguous_cache(k, seq_lens, table), bench.contiguous_cache(v, seq_lens, table)
    dst = torch.empty_like(k)
    n = args.lens
    fns = {"copy": lambda: kernel_copy(k, dst), "course": lambda: fast.decode_attention(q, k, v, seq_lens, table),
           "sdpa": lambda: bench.sdpa(q, kc, vc), "flat": read_fn(k, v)}
    for splits in (16, 32, 64):
        fns[f"head/128/{splits}/4/3"] = head(k, v, table[0], n, splits)[1]
    for splits, bt in ((132, 16), (132, 32), (264, 16)):
        fns[f"page/{bt}/{splits}/8/3"] = page(k, v, table[0], n, splits, block_t=bt)[1]
    for bt, splits, warps, stages in itertools.product((64, 128, 256), (16, 32, 64), (4,), (2, 4)):
        name = f"head/{bt}/{splits}/{warps}/{stages}"
        if name not in fns:
            fns[name] = head(k, v, table[0], n, splits, bt, warps, stages)[1]
    rows, copy = [], {}
    for name, fn in fns.items():
        try:
            t = {f: graph_ms(fn, rep=40, flush=f) * 1e3 for f in FLUSHES}
        except Exception as e:  # noqa: BLE001  (a point that does not compile or fit)
            print(f"{name}: {type(e).__name__} {str(e)[:100]}", flush=True)
            continue
        if name == "copy":
            copy = t
        row = dict(name=name, **{f"us_{f}": round(t[f], 2) for f in FLUSHES},
                   **{f"of_copy_{f}": round(copy[f] / t[f], 3) for f in FLUSHES})
        rows.append(row)
        print(f"{name:22s} zero {t['zero']:7.1f} us {row['of_copy_zero']:.3f}   read {t['read']:7.1f} us "
              f"{row['of_copy_read']:.3f}", flush=True)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "pattern_probe.json").write_text(json.dumps(rows, indent=1))
    print("\nkernel                 of a copy, zero flush (read flush)")
    best = {}
    for r in rows:
        kind = r["name"].split("/")[0]
        if kind not in best or r["us_zero"] < best[kind]["us_zero"]:
            best[kind] = r
    for r in best.values():
        print(f"{r['name']:22s} {r['of_copy_zero']:.3f} ({r['of_copy_read']:.3f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
