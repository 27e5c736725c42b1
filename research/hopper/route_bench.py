"""The bench's rows with the attention forward's route set otherwise than the library's: the same command as
``python -m tkcourse bench ...`` (rows in turns, the table's flush and its graph replays), with some of
``solutions.kernels.attention``'s route constants replaced first. Run it twice in one call, once with no
setting, and the two tables say what a change of the route would do to the recorded rows.

    PYTHONPATH=$PWD python3 research/hopper/route_bench.py [--min-n D,CAUSAL=N ...] [--early D,CAUSAL=0|1 ...] \
        [--persistent-max-n CAUSAL=N ...] -- flash_attention --kernel attention_fwd --provider triton ...

``--min-n 64,1=1024`` sets ``PINGPONG_MIN_N[(64, True)]`` to 1024 (the ping-pong kernel from 1024 tokens at
D 64 with the causal mask); ``--early 64,1=0`` sets ``EARLY[(64, True)]``; ``--persistent-max-n 1=0`` sets
``PERSISTENT_MAX_N[True]`` (0: a program a tile at every length). What was set is printed first.

    python3 research/hopper/route_bench.py --ratios A.csv B.csv ...

prints, for each file, the library's forward against cuDNN (eager and graph) at each of its shapes and dtypes.
"""

import csv
import sys
from pathlib import Path

import tkcourse  # noqa: F401  (the mode, before any kernel is defined)
from solutions.kernels import attention
from tkcourse.cli import main


def _key(text):
    d, causal = text.split(",")
    return int(d), bool(int(causal))


def settings(argv):
    """Apply the settings before ``--`` to ``attention``'s constants; return the bench's arguments."""
    if "--" not in argv:
        raise SystemExit("route_bench.py: the bench's arguments follow --")
    cut = argv.index("--")
    mine, rest = argv[:cut], argv[cut + 1:]
    if len(mine) % 2:
        raise SystemExit(f"route_bench.py: each setting takes one value: {mine}")
    for flag, value in zip(mine[::2], mine[1::2]):
        key, number = value.split("=")
        if flag == "--min-n":
            attention.PINGPONG_MIN_N[_key(key)] = int(number)
        elif flag == "--early":
            attention.EARLY[_key(key)] = bool(int(number))
        elif flag == "--persistent-max-n":
            attention.PERSISTENT_MAX_N[bool(int(key))] = int(number)
        else:
            raise SystemExit(f"route_bench.py: unknown setting {flag}")
    print(f"# route: PINGPONG_MIN_N {attention.PINGPONG_MIN_N}, EARLY {attention.EARLY}, "
          f"PERSISTENT_MAX_N {attention.PERSISTENT_MAX_N}", flush=True)
    return rest


def ratios(paths):
    """cuDNN's time over the library's (``triton``), eager and graph, a line per shape and dtype of each file."""
    for path in paths:
        rows = [r for r in csv.DictReader(open(path)) if r["kernel"] == "attention_fwd"]
        by = {(r["shape"], r["dtype"], r["provider"]): r for r in rows}
        for (shape, dtype, provider), r in sorted(by.items()):
            c = by.get((shape, dtype, "sdpa-cudnn"))
            if provider == "triton" and c:
                print(f"{Path(path).name:24s} {shape:28s} {dtype:9s} x cuDNN eager {float(c['ms']) / float(r['ms']):.3f} "
                      f"graph {float(c['graph_ms']) / float(r['graph_ms']):.3f} ({float(r['ms']) * 1e3:.1f} us)")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--ratios"]:
        ratios(sys.argv[2:])
    else:
        raise SystemExit(main(["bench", *settings(sys.argv[1:])]))
