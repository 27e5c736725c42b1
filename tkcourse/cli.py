"""The one command-line face of the course: ``tkcourse <command>`` (or ``python -m tkcourse``)."""

from __future__ import annotations

import argparse
import sys


def _check(args) -> int:
    from . import check

    names = args.lessons or check.lessons()
    worst = 0
    for name in names:
        rep = check.run(name, quiet=True)
        print(rep, end="\n\n")
        worst = max(worst, 0 if rep.passed else 1)
    return worst


def _bench(args) -> int:
    from . import bench, mode
    from .bench.core import module_for

    if mode.INTERPRET:
        print("No GPU here: timings in Triton's interpreter say nothing about GPU speed, so nothing is measured.\n"
              f"The recorded H200 table is {bench.RECORDED}.")
        return 1
    names = args.lessons or bench.lessons()
    rows = []
    for i, name in enumerate(names):
        print(f"== {name}")
        module = module_for(name)
        new = bench.run(module.cases(), warmup=args.warmup, rep=args.rep)
        if hasattr(module, "extra_rows"):
            new += module.extra_rows(bench.provenance())
        path = bench.write_records(new, args.out, append=args.append or i > 0)  # saved lesson by lesson
        rows += new
    print(f"\n{len(rows)} rows -> {path}")
    from .bench.summary import summary_table

    print(summary_table(rows))
    return 0


def _exercises(args) -> int:
    from . import stubs

    stubs.generate(args.lessons or None, force=args.force)
    return 0


def _doctor(args) -> int:
    from . import doctor

    return doctor.main()


def _lab(args) -> int:
    from . import lab

    return lab.main(args.args)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="tkcourse", description="The Triton kernel course's helpers.")
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="grade your exercises (all, or the lessons named)")
    c.add_argument("lessons", nargs="*")
    c.set_defaults(fn=_check)
    b = sub.add_parser("bench", help="on a GPU: every solution against its peer, into one results table")
    b.add_argument("lessons", nargs="*")
    b.add_argument("--out", default="artifacts/bench.csv")
    b.add_argument("--append", action="store_true")
    b.add_argument("--warmup", type=int, default=25)
    b.add_argument("--rep", type=int, default=100)
    b.set_defaults(fn=_bench)
    e = sub.add_parser("exercises", help="generate exercises/ from solutions/ (never overwrites your edits)")
    e.add_argument("lessons", nargs="*")
    e.add_argument("--force", action="store_true", help="rewrite edited files too, keeping a .bak copy of each")
    e.set_defaults(fn=_exercises)
    d = sub.add_parser("doctor", help="versions, GPU or interpreter, JupyterLab's widget extension")
    d.set_defaults(fn=_doctor)
    la = sub.add_parser("lab", add_help=False, help="start JupyterLab on notebooks/ (options: tkcourse lab --help)")
    la.set_defaults(fn=_lab)
    args, extra = p.parse_known_args(argv)  # `lab` passes its options on to tkcourse.lab
    if extra and args.cmd != "lab":
        p.error(f"unrecognized arguments: {' '.join(extra)}")
    args.args = extra
    return int(args.fn(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
