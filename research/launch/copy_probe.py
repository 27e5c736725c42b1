"""The copy peer eagerly and replayed from a CUDA graph: ``dst.copy_(src)`` (``cudaMemcpyAsync``; a memcpy
node once captured) against ``tkcourse.bench.kernel_copy`` (a Triton copy kernel), at 8 MB to 1 GB.

    PYTHONPATH=$PWD python3 research/launch/copy_probe.py

Why: a graph replay of the bench's 1 GB copy took 397-401 us where the eager copy took 261
(``research/README.md``), so the graphed "fraction of a copy" of the large decode rows read above 1.5.
``tkcourse.bench.copy_case`` times the graph with the kernel; this says whether the kernel copies as fast
as ``copy_`` eagerly, and what each takes in a graph. Prints microseconds and TB/s (bytes read + written).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
# isort: off
import tkcourse  # noqa: E402, F401  (first: the mode, before triton is imported)
import torch  # noqa: E402
import triton  # noqa: E402
# isort: on

from tkcourse.bench import graph_ms, kernel_copy  # noqa: E402


def main():
    if not torch.cuda.is_available():
        print("needs a GPU")
        return 0
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, flush=True)
    print(f"{'MB copied':>10} {'copy_ eager':>12} {'kernel eager':>13} {'copy_ graph':>12} {'kernel graph':>13}   (us; TB/s)")
    for mb in (8, 17, 67, 134, 268, 1074):
        src = torch.empty(mb * 1_000_000 // 4, dtype=torch.int32, device="cuda").random_()
        dst = torch.empty_like(src)
        kernel_copy(src, dst)
        assert torch.equal(src, dst)
        moved = 2 * src.numel() * 4
        t = [triton.testing.do_bench(lambda: dst.copy_(src), warmup=10, rep=60),
             triton.testing.do_bench(lambda: kernel_copy(src, dst), warmup=10, rep=60),
             graph_ms(lambda: dst.copy_(src), rep=60), graph_ms(lambda: kernel_copy(src, dst), rep=60)]
        print(f"{mb:>10} " + " ".join(f"{x * 1e3:7.1f} {moved / x * 1e-9:4.2f}" for x in t), flush=True)
        src = dst = None
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
