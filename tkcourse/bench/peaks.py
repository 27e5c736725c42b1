"""The device's two ceilings: copy bandwidth and dense fp16 matmul rate.

Measured now on a GPU; read from the recorded H200 table without one. One definition, used by every
lesson: the **copy bandwidth** is bytes read plus bytes written per second by one large device-to-device
copy (1 GiB measured now; the recorded table's copy row says its own size); a memory-bound kernel's "% of copy" is its minimum traffic per second over it.
The **matmul rate** is cuBLAS fp16 at 4096 x 4096 x 4096. Both are practical ceilings, not the hardware's:
a kernel that reads more than it writes (vector add: two reads a write) can pass a copy by a few percent,
since DRAM loses time turning the bus around between reads and writes; another matmul (another size,
dtype or kernel) can pass that one cuBLAS run. Over 100% means "faster than that copy (or that matmul)", never faster than the hardware.
"""

from __future__ import annotations

from .. import mode
from .core import bytes_moved, load_records, matmul_flops, measure, provenance, select


def measured() -> dict:
    """Copy GB/s (1 GiB device-to-device) and fp16 matmul TFLOP/s (cuBLAS, 4096^3) on this GPU."""
    import torch

    src = torch.empty(1 << 28, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    ms = measure(lambda: dst.copy_(src))[0]
    copy = bytes_moved(src, dst) / ms * 1e-6
    src = dst = None  # free 2 GiB before the matmul
    a = torch.randn(4096, 4096, dtype=torch.float16, device="cuda")
    ms = measure(lambda: a @ a)[0]
    mm = matmul_flops(4096, 4096, 4096) / ms * 1e-9
    p = provenance()
    return {"copy_GBps": copy, "matmul_TFLOPs": mm, "copy_what": "one 1 GiB device-to-device copy",
            "source": f"measured now on {p['gpu']}"}


def recorded(rows=None) -> dict:
    """The same two ceilings from the recorded table (an H200)."""
    rows = load_records() if rows is None else rows
    copy = select(rows, kernel="copy")
    mm = select(rows, kernel="matmul", provider="cublas", dtype="float16", shape="4096x4096x4096")
    if not copy:
        raise LookupError("the recorded table has no 'copy' row")
    best = max(copy, key=lambda r: r["median"])
    dates = sorted({d for d in (best.get("date"), *(r.get("date") for r in mm)) if d})
    gib = best["bytes"] / 2 / 2**30 if best.get("bytes") else None  # the copy reads and writes its size
    return {"copy_GBps": best["median"],
            "matmul_TFLOPs": max(r["median"] for r in mm) if mm else float("nan"),
            "copy_what": f"one {gib:.0f} GiB device-to-device copy" if gib else "one large device-to-device copy",
            "source": f"recorded on {best.get('gpu')}, {' and '.join(dates)} (triton {best.get('triton')}, "
                      f"torch {best.get('torch')})"}


def peaks() -> dict:
    return recorded() if mode.INTERPRET else measured()


def report() -> None:
    """Print the device and its ceilings, saying where the figures come from."""
    info = mode.describe()
    if mode.INTERPRET:
        print("No GPU: kernels run in Triton's interpreter on the CPU. Timings here say nothing about GPU speed.")
    else:
        print(f"GPU: {info['gpu']} ({info['sms']} SMs, {info['memory_gib']} GiB, {info['arch']})")
    try:
        p = peaks()
    except (FileNotFoundError, LookupError) as e:
        print(f"(no ceilings available: {e})")
        return
    mm = p["matmul_TFLOPs"]
    print(f"copy bandwidth      {p['copy_GBps'] / 1000:6.2f} TB/s   ({p.get('copy_what', 'one large device copy')})\n"
          f"fp16 matmul (cuBLAS) {mm:6.0f} TFLOP/s (torch.matmul at 4096 x 4096 x 4096)\n"
          f"ridge point          {mm * 1e12 / (p['copy_GBps'] * 1e9):6.0f} FLOP per byte\n({p['source']})")
