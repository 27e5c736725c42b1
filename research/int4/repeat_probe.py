"""Both Gluon int4 kernels (``solutions/kernels/gluon_int4.py``) called three times at splits 1, 2 and 4 and 3 or 4
stages, bf16, on a few shapes: each call's error against the fp64 product and whether the three calls give
the same bits; where they do not, which rows (the first or the second warpgroup's 64) and which 64-row blocks
are wrong. On the smaller shapes, each step alone (x zero outside one step's K columns), to see which
steps' products are wrong. Found, on the H200, the register race described in ``research/README.md``
("The int4 ping-pong on the H200"); ``tests/test_gluon_int4.py`` now holds its failing cases.

    PYTHONPATH=$PWD python3 research/int4/repeat_probe.py [--rung wgmma|pingpong]
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
# isort: off
import tkcourse  # noqa: E402, F401  (first: the mode, before triton is imported)
import torch  # noqa: E402
# isort: on

from solutions import int4_matmul as lesson  # noqa: E402
from solutions.kernels import gluon_int4 as gi  # noqa: E402


def problem(M, N, K, dtype=torch.bfloat16, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(N, K, generator=g) * K ** -0.5).to(dtype)
    x = torch.randn(M, K, generator=g).to(dtype)
    packed, scales = lesson.quantize(w, 128)
    return x.cuda(), packed.cuda(), scales.cuda()


def ref(x, packed, scales):
    return (x.double() @ lesson.dequantize(packed, scales, 128).double().T)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rung", choices=("wgmma", "pingpong"), default="pingpong")
    pingpong = ap.parse_args().rung == "pingpong"
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        print("repeat_probe needs an H100/H200: nothing run")
        return
    for (M, N, K) in [(1, 256, 512), (128, 256, 1024), (128, 2048, 2048), (128, 8192, 8192), (200, 8192, 8192)]:
        x, packed, scales = problem(M, N, K)
        exact = ref(x, packed, scales)
        steps = (K // 2) // 64
        for split in (1, 2, 4):
            for stages in (3, 4):
                if steps // split < 1:
                    continue
                cfg = dict(gi.CONFIG, PINGPONG=pingpong, SPLIT_K=split, STAGES=stages)
                try:
                    ys = [gi.matmul(x, packed, scales, 128, cfg) for _ in range(3)]
                    torch.cuda.synchronize()
                except Exception as e:  # noqa: BLE001 (say what failed, and go on)
                    print(M, N, K, split, stages, 'ERROR', type(e).__name__, str(e)[:200])
                    continue
                errs = [((y.double() - exact).abs().max() / exact.abs().max()).item() for y in ys]
                same = all(torch.equal(ys[0], y) for y in ys[1:])
                bad = ((ys[0].double() - exact).abs() > 0.02 * exact.abs().max())  # (M, N)
                where = ''
                if bad.any():
                    nb = bad.nonzero()
                    half = (nb[:, 1] % 128 >= 64).float().mean().item()
                    where = (f'bad {bad.sum().item()} of {bad.numel()}; in WG1 half {half:.2f}; rows m {nb[:,0].unique()[:8].tolist()}'
                             f'; n blocks {(nb[:,1]//64).unique()[:10].tolist()}')
                print(f'M{M} N{N} K{K} split{split} stages{stages}: errs {[f"{e:.1e}" for e in errs]} same {same} {where}', flush=True)
        # per-step localisation at split 1, stages 3
        if K <= 2048:
            cfg = dict(gi.CONFIG, PINGPONG=pingpong, SPLIT_K=1, STAGES=3)
            half = K // 2
            for s in range(steps):
                xs = torch.zeros_like(x)
                for lo in (s * 64, half + s * 64):
                    xs[:, lo:lo + 64] = x[:, lo:lo + 64]
                y = gi.matmul(xs, packed, scales, 128, cfg)
                e = ref(xs, packed, scales)
                print(f'   step {s}: err {((y.double()-e).abs().max()/e.abs().max()).item():.1e}', flush=True)


if __name__ == "__main__":
    main()
