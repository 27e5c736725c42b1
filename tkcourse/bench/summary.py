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
