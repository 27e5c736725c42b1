"""The one command-line face of the course: ``tkcourse <command>`` (or ``python -m tkcourse``).

Lessons are named as the notebooks name them (``01``, ``01_vector_add``, ``vector_add``, see
``tkcourse.course``). A user's mistake (an unknown lesson, a bad option, a damaged file that
``tkcourse.errors.UserError`` reports) is one line on stderr and exit status 2; ``--debug`` shows
the traceback too.
"""

from __future__ import annotations

import argparse
import sys

from .errors import UserError

_DEBUG_HELP = "show the full traceback of an error"


class _Parser(argparse.ArgumentParser):
    """argparse, but a mistake is one line (argparse prints the whole usage first)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def _check(args) -> int:
    import json
    import time

    from . import check, course, results

    names = course.resolve_all(args.lessons, check.lessons(), what="grader")
    worst = 0
    reports, seconds = [], []
    for name in names:
        start = time.perf_counter()
        rep = check.run(name, quiet=True)
        seconds.append(time.perf_counter() - start)
        reports.append(rep)
        if not args.json:
            print(rep, end="\n\n")
        worst = max(worst, 0 if rep.passed else 1)
    if args.gradescope:
        path = results.write(results.gradescope(reports, seconds), args.gradescope)
        if not args.json:
            print(f"Gradescope results -> {path}")
    if args.json:
        print(json.dumps(results.as_json(reports, seconds), indent=1))
    return worst


def _progress(args) -> int:
    from . import progress

    print(progress.report())
    return 0


def _bench(args) -> int:
    from . import bench, course, mode
    from .bench.core import module_for

    names = course.resolve_all(args.lessons, bench.lessons(), what="benchmark")
    if mode.INTERPRET:
        print("No GPU here: timings in Triton's interpreter say nothing about GPU speed, so nothing is measured.\n"
              f"The recorded H200 table is {bench.RECORDED}.")
        return 1
    rows, written = [], []

    def save(new):  # each row as it is measured: a run stopped by a timeout keeps what it measured
        path = bench.write_records(new, args.out, append=args.append or bool(written))
        written.append(path)
        return path

    path = None
    for name in names:
        print(f"== {name}")
        module = module_for(name)
        # the cases the filters keep (the others are built, then dropped unmeasured)
        cases = (c for c in module.cases() if _picked(args, c.kernel, c.shape, c.provider, c.dtype))
        new = bench.run(cases, warmup=args.warmup, rep=args.rep, on_row=lambda row: save([row]),
                        rounds=args.rounds)
        extra = []
        # extra rows (a module's ``EXTRA_KERNELS``, e.g. peak memory): in an unfiltered run, or named by --kernel
        named = set(args.kernel) & set(getattr(module, "EXTRA_KERNELS", ()))
        if hasattr(module, "extra_rows") and (not (args.shape or args.kernel or args.provider or args.dtype) or named):
            extra = [r for r in module.extra_rows(bench.provenance())
                     if _picked(args, r["kernel"], r["shape"], r["provider"], r["dtype"])]
        if extra or not written:  # (a lesson with no rows still leaves a table behind)
            save(extra)
        path = written[-1]
        rows += new + extra
    print(f"\n{len(rows)} rows -> {path}")
    from .bench.summary import summary_table

    print(summary_table(rows))
    return 0


def _exercises(args) -> int:
    from . import course, stubs

    names = course.resolve_all(args.lessons, stubs.lessons(), what="exercise")
    stubs.generate(names or None, force=args.force)
    return 0


def _doctor(args) -> int:
    from . import doctor

    return doctor.main()


def _lab(args) -> int:
    import pathlib

    from . import lab

    if args.port is not None and not 0 < args.port < 65536:
        raise UserError(f"--port {args.port} is not a port: give a number from 1 to 65535, or leave it out")
    if not pathlib.Path(args.notebook_dir).is_dir():
        raise UserError(f"--notebook-dir {args.notebook_dir!r} is not a folder (run from the course's root, "
                        "where notebooks/ is)")
    argv = ["--notebook-dir", args.notebook_dir]
    argv += ["--port", str(args.port)] if args.port is not None else []
    argv += ["--no-browser"] if args.no_browser else []
    argv += ["--solutions"] if args.solutions else []
    return lab.main(argv)


def _picked(args, kernel: str, shape: str, provider: str, dtype: str) -> bool:
    """Whether a bench case or row passes ``--kernel``, ``--shape``, ``--provider`` and ``--dtype`` (each one
    not given passes everything): a forward's rows without its backward's, a changed kernel's rows and its
    peers', one dtype's."""
    return all(not wanted or value in wanted for wanted, value in
               ((args.kernel, kernel), (args.shape, shape), (args.provider, provider), (args.dtype, dtype)))


def _nonnegative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return value


def _positive(text: str) -> int:
    value = _nonnegative(text)
    if value == 0:
        raise argparse.ArgumentTypeError("0 is not a positive number")
    return value


def _port(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None


def parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=_DEBUG_HELP)
    p = _Parser(prog="tkcourse", description="The Triton kernel course's helpers.", parents=[common])
    sub = p.add_subparsers(dest="cmd", required=True, metavar="{check,progress,exercises,bench,doctor,lab}",
                           parser_class=_Parser)
    lessons_help = "lessons as the notebooks name them: 01, 01_vector_add or vector_add (default: all, in course order)"
    c = sub.add_parser("check", parents=[common], help="grade your exercises (all, or the lessons named)")
    c.add_argument("lessons", nargs="*", help=lessons_help)
    c.add_argument("--json", action="store_true",
                   help="print the results of every case as JSON instead of the reports")
    c.add_argument("--gradescope", metavar="OUT", default=None,
                   help="also write Gradescope's results.json to OUT (a test an exercise, a point when it passes)")
    c.set_defaults(fn=_check)
    pr = sub.add_parser("progress", parents=[common],
                        help="one line a lesson: done, failing at which case, or not started (kept on this machine)")
    pr.set_defaults(fn=_progress)
    e = sub.add_parser("exercises", parents=[common],
                       help="generate exercises/ from solutions/ (never overwrites your edits)")
    e.add_argument("lessons", nargs="*", help=lessons_help)
    e.add_argument("--force", action="store_true", help="rewrite edited files too, keeping a .bak copy of each")
    e.set_defaults(fn=_exercises)
    b = sub.add_parser("bench", parents=[common],
                       help="on a GPU: every solution against its peer, into one results table")
    b.add_argument("lessons", nargs="*", help=lessons_help)
    b.add_argument("--out", default="artifacts/bench.csv")
    b.add_argument("--append", action="store_true")
    b.add_argument("--warmup", type=_nonnegative, default=25)
    b.add_argument("--rep", type=_nonnegative, default=100)
    b.add_argument("--shape", action="append", default=[], metavar="SHAPE",
                   help="measure only the cases of this shape (as the table writes it, e.g. 1024x1024x1024); repeatable")
    b.add_argument("--kernel", action="append", default=[], metavar="KERNEL",
                   help="measure only the cases of this kernel (the table's kernel column, e.g. attention_fwd, "
                        "or attention_memory, a lesson's extra rows); repeatable")
    b.add_argument("--provider", action="append", default=[], metavar="PROVIDER",
                   help="measure only this provider's cases (the table's provider column, e.g. triton or "
                        "sdpa-cudnn); repeatable")
    b.add_argument("--dtype", action="append", default=[], metavar="DTYPE",
                   help="measure only the cases of this dtype (the table's dtype column, e.g. bfloat16); repeatable")
    b.add_argument("--rounds", type=_positive, default=None, metavar="R",
                   help="rounds in which a row's providers take turns for their times (default 3: the GPU's clock "
                        "moves during a run, and a turn each keeps it from deciding a ratio; 1 is quicker)")
    b.set_defaults(fn=_bench)
    d = sub.add_parser("doctor", parents=[common],
                       help="does a kernel run here; GPU or interpreter; versions; JupyterLab's widget extension")
    d.set_defaults(fn=_doctor)
    la = sub.add_parser("lab", parents=[common], help="start JupyterLab on notebooks/")
    # The options of tkcourse.lab.main, parsed here so that a mistake is one line like everywhere else.
    la.add_argument("--port", type=_port, default=None, help="default: a free port")
    la.add_argument("--no-browser", action="store_true", help="only print the URL")
    la.add_argument("--solutions", action="store_true",
                    help="exercises resolve to the reference solutions (TKCOURSE_SOLUTIONS=1)")
    la.add_argument("--notebook-dir", default="notebooks")
    la.set_defaults(fn=_lab)
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    debug = getattr(args, "debug", False)
    try:
        status = int(args.fn(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, inside the try, not at interpreter exit
        return status
    except UserError as e:
        if debug:
            raise
        print(f"tkcourse {args.cmd}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if debug:
            raise
        print(f"tkcourse {args.cmd}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `tkcourse check | head`: the reader left; say nothing more
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit flush cannot fail
        return 141


if __name__ == "__main__":
    sys.exit(main())
