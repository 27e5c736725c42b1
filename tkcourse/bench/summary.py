"""The short table printed at the end of a bench run: each course kernel as a ratio to its peer."""

from __future__ import annotations


def ratios(rows) -> list[dict]:
    """For each triton row, its ratio to every peer row of the same kernel, shape and dtype."""
    out = []
    for r in rows:
        if r["provider"] != "triton":
            continue
        same = [p for p in rows if p is not r and (p["kernel"], p["shape"], p["dtype"]) == (r["kernel"], r["shape"], r["dtype"])
                and p["provider"] != "triton"]
        out.append(dict(kernel=r["kernel"], shape=r["shape"], dtype=r["dtype"], metric=r["metric"],
                        triton=float(r["median"]), peers={p["provider"]: float(p["median"]) for p in same},
                        host_us={p["provider"]: p.get("host_us") for p in [r] + same if p.get("host_us") is not None}))
    return out


def summary_table(rows) -> str:
    lines = [f"{'kernel':<26}{'shape':<24}{'dtype':<9}{'triton':>10}  peers (ratio)"]
    for r in ratios(rows):
        peers = "  ".join(f"{k} {v:.1f} ({r['triton'] / v:.2f}x)" for k, v in r["peers"].items() if v)
        host = ", ".join(f"{k} {v:.1f}" for k, v in r["host_us"].items())
        host = f"  host us: {host}" if host else ""
        lines.append(f"{r['kernel']:<26}{r['shape']:<24}{r['dtype']:<9}{r['triton']:>10.1f}  {peers}{host}  [{r['metric']}]")
    return "\n".join(lines)


#: Plain words for the table's provider names, for what a learner reads (tables, legends, sentences).
PROVIDERS: dict[str, str] = {
    "triton": "course, fastest path",  # the reference's fast path: the ladder's last step, lesson 08's lean launch
    "triton-readable": "course, plain launch",  # the reference launched through kernel[grid], as the lessons do
    "triton-inplace": "course, in place",  # the same fast path writing into its inputs (RoPE on q and k)
    "torch": "PyTorch",
    "torch-rms_norm": "PyTorch rms_norm",
    "cublas": "cuBLAS",
    "sdpa": "PyTorch SDPA",
    "sdpa-flash": "SDPA, FlashAttention",
    "sdpa-cudnn": "SDPA, cuDNN",
    "sdpa-default": "SDPA, its own choice",
    "tinygemm": "torch tinygemm (int4)",  # torch.ops.aten._weight_int4pack_mm: torchao's and gpt-fast's int4 kernel
    "copy": "copy, same bytes",
    "persistent": "course, persistent (lesson 12)",  # solutions/hopper.py, the lesson's kernel as the learner writes it
    "gluon": "Gluon, pipelined",  # solutions/kernels/gluon_matmul.py: TMA ring, mbarriers, async wgmma
    "gluon_ws": "Gluon, warp-specialized",  # a producer warp and consumer warpgroups (persistent for the matmul)
    "gluon_overlap": "Gluon, next S overlapped",  # the next QK^T issued during this block's softmax
    "gluon_pingpong": "Gluon, ping-pong",  # two consumer warpgroups taking turns on the tensor cores
}


def provider_label(provider: str) -> str:
    """The plain words for ``provider`` (``"triton-readable"`` -> ``"course, plain launch"``); unknown names as they are."""
    return PROVIDERS.get(provider, provider)


def recorded(kernel: str, shape: str, dtype: str, provider: str = "triton", rows=None) -> float:
    """The median of one row of the results table (default: the recorded H200 table), in the row's metric.

    Raises LookupError naming the row when the table has no such row, or more than one, so that a sentence
    built from it never shows a figure of some other row."""
    from .core import load_records, select

    found = select(load_records() if rows is None else rows, kernel=kernel, shape=shape, dtype=dtype, provider=provider)
    if len(found) != 1:
        raise LookupError(f"{len(found)} rows of {kernel}/{provider} {shape} {dtype} in the results table, expected one")
    return float(found[0]["median"])


def ratio(kernel: str, shape: str, dtype: str, peer: str, provider: str = "triton", rows=None) -> float:
    """``provider``'s median over ``peer``'s for one (kernel, shape, dtype) of the results table. For a rate
    (GB/s, TFLOP/s) 1.04 means 4% faster; for memory (GB), 1.04 means 4% more memory."""
    return recorded(kernel, shape, dtype, provider, rows) / recorded(kernel, shape, dtype, peer, rows)
