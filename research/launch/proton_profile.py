"""A recorded look inside a few reference kernels with Triton's profiler, proton (lesson 08).

Profiles lesson 03's matmul (fp16 512^3 and 1024^3, beside cuBLAS), lesson 02's softmax (fp16
4096x1024, beside torch.softmax) and lesson 06's tuned attention forward (B1 H16 N512 D64, causal and
not, beside SDPA), each call under a proton scope of its own, on the GPU machine:

    PYTHONPATH=$PWD python3 research/launch/proton_profile.py OUT

Checks every kernel against torch first, then writes under OUT: ``launch.hatchet`` (proton's own
file, JSON: a tree of scopes and kernels with their GPU time and count), ``launch.txt`` (that tree as
text, read from the JSON here, so no viewer is needed) and, where proton's viewer runs (it needs the
``hatchet`` package), ``launch_viewer.txt``. The last thing printed is a markdown table: per scope,
the GPU time per call of each kernel it launched. Lesson 08 shows ``launch.txt`` on a CPU from
``tkcourse/data/h200/proton/``.
"""
import json
import subprocess
import sys
from pathlib import Path

import tkcourse  # noqa: F401  (first: interpreter patches, the checkout on the path)
import torch
import torch.nn.functional as F
import triton
import triton.profiler as proton

from solutions.kernels.attention_forward import attention_forward
from solutions.matmul import matmul
from solutions.softmax import softmax

CALLS = 20  # calls a scope: the tree's counts say so


def cases():
    """(scope name, fn, check): each fn is one call as a learner makes it; check() compares with torch."""
    out = []
    for n in (512, 1024):
        a, b = (torch.randn(n, n, device="cuda", dtype=torch.float16) for _ in range(2))
        out.append((f"matmul fp16 {n}^3 (course)", lambda a=a, b=b: matmul(a, b),
                    lambda a=a, b=b: torch.testing.assert_close(matmul(a, b), a @ b, atol=2e-2, rtol=2e-2)))
        out.append((f"matmul fp16 {n}^3 (cuBLAS)", lambda a=a, b=b: a @ b, None))
    x = torch.randn(4096, 1024, device="cuda", dtype=torch.float16)
    out.append(("softmax fp16 4096x1024 (course)", lambda: softmax(x),
                lambda: torch.testing.assert_close(softmax(x), torch.softmax(x, -1), atol=2e-3, rtol=2e-3)))
    out.append(("softmax fp16 4096x1024 (torch)", lambda: torch.softmax(x, -1), None))
    q, k, v = (torch.randn(1, 16, 512, 64, device="cuda", dtype=torch.float16) for _ in range(3))
    for causal in (False, True):
        tag = "causal" if causal else "full"
        out.append((f"attention fwd B1 H16 N512 D64 {tag} (course)",
                    lambda c=causal: attention_forward(q, k, v, causal=c),
                    lambda c=causal: torch.testing.assert_close(
                        attention_forward(q, k, v, causal=c)[0], F.scaled_dot_product_attention(q, k, v, is_causal=c),
                        atol=2e-2, rtol=2e-2)))
        out.append((f"attention fwd B1 H16 N512 D64 {tag} (SDPA)",
                    lambda c=causal: F.scaled_dot_product_attention(q, k, v, is_causal=c), None))
    return out


def walk(node, depth=0, lines=None, table=None, scope=None):
    """The tree as indented text (inclusive GPU time and count per node), and a row per kernel under a scope."""
    lines = [] if lines is None else lines
    table = [] if table is None else table
    name = node.get("frame", {}).get("name", "?")
    m = node.get("metrics", {})
    ns, count = m.get("time (ns)", 0), m.get("count", 0)
    lines.append(f"{'  ' * depth}{name}  {ns / 1e3:.1f} us" + (f", {count} launches" if count else ""))
    if depth == 1:
        scope = name
    if scope and not node.get("children") and count:
        table.append((scope, name, count, ns / 1e3 / count))
    for child in node.get("children", []):
        walk(child, depth + 1, lines, table, scope)
    return lines, table


def main():
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "artifacts/proton")
    out.mkdir(parents=True, exist_ok=True)
    todo = cases()
    for name, fn, check in todo:  # correct first; also compiles and autotunes outside the profile
        if check is not None:
            check()
        fn()
    torch.cuda.synchronize()
    print("all kernels match torch", flush=True)
    proton.start(str(out / "launch"), hook="triton")
    for name, fn, _ in todo:
        with proton.scope(name):
            for _ in range(CALLS):
                fn()
        torch.cuda.synchronize()
    proton.finalize()
    path = out / "launch.hatchet"
    tree = json.loads(path.read_text())
    root = tree[0] if isinstance(tree, list) else tree
    lines, table = walk(root)
    import datetime
    head = (f"proton profile, {torch.cuda.get_device_name(0)}, triton {triton.__version__}, torch {torch.__version__}, "
            f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; "
            f"{CALLS} calls a scope; GPU time (inclusive) per node\n"
            "command: PYTHONPATH=$PWD python3 research/launch/proton_profile.py OUT\n\n")
    (out / "launch.txt").write_text(head + "\n".join(lines) + "\n")
    try:
        viewer = subprocess.run([sys.executable, "-m", "triton.profiler.viewer", "-m", "time/us", str(path)],
                                capture_output=True, text=True, timeout=120)
        if viewer.returncode == 0 and viewer.stdout.strip():
            (out / "launch_viewer.txt").write_text(viewer.stdout)
        else:
            print("proton viewer did not run:", (viewer.stderr or "").strip().splitlines()[-1:])
    except Exception as exc:  # noqa: BLE001
        print("proton viewer did not run:", type(exc).__name__, exc)
    print("\n".join(lines[:60]))
    print(f"\nwrote {path}, {out / 'launch.txt'}\n")
    print("| scope | kernel | launches | GPU us per launch |\n|---|---|---|---|")
    for scope, kernel, count, us in table:
        print(f"| {scope} | {kernel[:60]} | {count} | {us:.2f} |")


if __name__ == "__main__":
    main()
