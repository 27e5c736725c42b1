"""Grader for lesson 12: ``matmul(a, b, config, programs)``, a persistent matmul on tensor descriptors.

Every case gives fewer programs than tiles (so each program walks several tiles), a tile count that is
not a multiple of the programs, ragged edges in M, N and K (the TMA's zeros stand in for masks), more
programs than tiles and, last, blocks of three different sizes. Besides the values, the tracer's record of C's stores must show each element
stored once, by the program the grouped order gives it: a tile loop that starts right but steps by one
computes the right matrix while doing some tiles several times, and one that takes the tiles row by row
computes it in an order that loses the L2's reuse. Hints come from models of the mistakes learners make
(a loop that starts at tile 0, stops a tile early or never loops; an accumulator carried from one tile to
the next; offsets counted in blocks, or A's and B's offsets swapped; the last, partial K step dropped; the first step dropped, or only one step summed; tl.dot(b, a))
compared with what the kernel returned, and from the tracer's record of C's stores (tiles stored at offsets that
are not multiples of the blocks, one tile a program stored over and over, the tile loop's step, C stored once a K
step, runs of consecutive tiles, tiles past num_tiles that still load B).
"""

from __future__ import annotations

import inspect
import math
import traceback

import torch

from .. import mode
from ..traffic import program_order
from .core import Case, describe_wrong, graded_call, idle_steps, padded, refuses, returned_case, written_case

# (M, N, K, programs): tiles of 16 x 16 in the interpreter; each program walks several tiles
SHAPES = [(37, 45, 40, 3), (64, 64, 64, 3), (67, 45, 29, 4), (16, 160, 48, 3), (97, 113, 57, 5), (1, 1, 1, 1),
          (130, 17, 70, 2), (40, 36, 70, 64)]
GPU_SHAPES = [(300, 520, 200, 7), (1000, 900, 333, 13), (64, 64, 64, 3), (1, 1, 1, 1), (129, 257, 1000, 300)]
#: The config every graded call takes, so the grader knows the tiles: small ones, many per program.
CONFIG = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=2, num_warps=4, num_stages=2, WARP_SPECIALIZE=False)
OFFSETS = ("Load at [pid_m * BLOCK_M, k * BLOCK_K] and [k * BLOCK_K, pid_n * BLOCK_N], store at "
           "[pid_m * BLOCK_M, pid_n * BLOCK_N]")
GPU_CONFIG = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=4, num_warps=4, num_stages=3, WARP_SPECIALIZE=False)
#: In the interpreter, one case with three different blocks (``CONFIG``'s are all 16, so an offset such as
#: ``pid_n * BLOCK_M`` or ``k * BLOCK_M`` is right there), on a C of several tiles each way.
UNEQUAL_CONFIG = dict(CONFIG, BLOCK_N=32, BLOCK_K=64)
UNEQUAL_SHAPE = (50, 70, 150, 3)


def config() -> dict:
    return CONFIG if mode.INTERPRET else GPU_CONFIG


def tile_order(num_pid_m: int, num_pid_n: int, group_m: int) -> list[tuple[int, int]]:
    """(pid_m, pid_n) of each tile in the grouped order, as ``grouped_tile`` gives it (lesson 03's order)."""
    return program_order(num_pid_m, num_pid_n, group_m)


def _blocks(a, b, cfg, k_steps=None):
    """The full (BLOCK_M, BLOCK_N) product of each tile, float64, over ``k_steps`` K steps (all by default),
    zero past the edges as the TMA reads them: ``{(pid_m, pid_n): block}``."""
    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    M, K = a.shape
    N = b.shape[1]
    pm, pn = math.ceil(M / bm), math.ceil(N / bn)
    kk = K if k_steps is None else min(K, k_steps * bk)
    ap = torch.zeros(pm * bm, K, dtype=torch.float64)
    ap[:M] = a.double().cpu()
    bp = torch.zeros(K, pn * bn, dtype=torch.float64)
    bp[:, :N] = b.double().cpu()
    full = ap[:, :kk] @ bp[:kk]
    return {(i, j): full[i * bm:(i + 1) * bm, j * bn:(j + 1) * bn] for i in range(pm) for j in range(pn)}


def _assemble(blocks, M, N, cfg):
    bm, bn = cfg["BLOCK_M"], cfg["BLOCK_N"]
    out = torch.full((math.ceil(M / bm) * bm, math.ceil(N / bn) * bn), float("nan"), dtype=torch.float64)
    for (i, j), blk in blocks.items():
        out[i * bm:(i + 1) * bm, j * bn:(j + 1) * bn] = blk
    return out[:M, :N]


def carried(a, b, cfg, programs):
    """What a kernel returns whose accumulator is zeroed once, before the tile loop: each tile of a program
    gets the sum of that program's earlier tiles too."""
    blocks = _blocks(a, b, cfg)
    order = tile_order(*_grid(a.shape[0], b.shape[1], cfg), cfg["GROUP_M"])
    out = {}
    for p in range(min(programs, len(order))):
        run = 0
        for t in range(p, len(order), programs):
            run = run + blocks[order[t]]
            out[order[t]] = run
    return _assemble(out, a.shape[0], b.shape[1], cfg)


def modelled(a, b, cfg, a_at, b_at, swap=False):
    """What a kernel returns whose K loop loads A's block at ``a_at(pid_m, pid_n, k)`` and B's at
    ``b_at(pid_m, pid_n, k)`` (element offsets; zeros past the edges, as the TMA reads), float64. ``swap``: the
    blocks multiplied the other way round, tl.dot(b, a) (square blocks only)."""
    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    A, B = a.double().cpu(), b.double().cpu()
    M, K = A.shape
    N = B.shape[1]

    def block(t, row, col, rows, cols):
        out = torch.zeros(rows, cols, dtype=torch.float64)
        got = t[max(row, 0):max(row + rows, 0), max(col, 0):max(col + cols, 0)]
        out[:got.shape[0], :got.shape[1]] = got
        return out
    tiles_m, tiles_n = _grid(M, N, cfg)
    blocks = {}
    for i in range(tiles_m):
        for j in range(tiles_n):
            acc = torch.zeros(bm, bn, dtype=torch.float64)
            for k in range(math.ceil(K / bk)):
                ab, bb = block(A, *a_at(i, j, k), bm, bk), block(B, *b_at(i, j, k), bk, bn)
                acc += bb @ ab if swap else ab @ bb
            blocks[(i, j)] = acc
    return _assemble(blocks, M, N, cfg)


def offset_mistakes(cfg):
    """``(hint, a_at, b_at)`` of the offsets learners swap, for ``modelled``."""
    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]

    def a_right(i, j, k):
        return i * bm, k * bk

    def b_right(i, j, k):
        return k * bk, j * bn
    return [
        ("B's block is loaded at [pid_n * BLOCK_N, k * BLOCK_K]: B is (K, N), so its block starts at row "
         "k * BLOCK_K and column pid_n * BLOCK_N", a_right, lambda i, j, k: (j * bn, k * bk)),
        ("A's block is loaded at [k * BLOCK_K, pid_m * BLOCK_M]: A is (M, K), so its block starts at row "
         "pid_m * BLOCK_M and column k * BLOCK_K", lambda i, j, k: (k * bk, i * bm), b_right),
        ("A's rows come from pid_n and B's columns from pid_m, or C's tile is stored at [pid_n * BLOCK_N, "
         "pid_m * BLOCK_M] (both give this C): A's block is [pid_m * BLOCK_M, k * BLOCK_K], B's [k * BLOCK_K, "
         "pid_n * BLOCK_N], C's [pid_m * BLOCK_M, pid_n * BLOCK_N]",
         lambda i, j, k: (j * bm, k * bk), lambda i, j, k: (k * bk, i * bn)),
        ("A's K offset counts BLOCK_M: A's block is [pid_m * BLOCK_M, k * BLOCK_K]",
         lambda i, j, k: (i * bm, k * bm), b_right),
        ("B's column offset counts BLOCK_K: B's block is [k * BLOCK_K, pid_n * BLOCK_N]",
         a_right, lambda i, j, k: (k * bk, j * bk)),
    ]


def k_steps_only(a, b, cfg, steps):
    """What a kernel returns that sums only the K steps ``steps`` (indices of BLOCK_K columns), float64."""
    bk, K = cfg["BLOCK_K"], a.shape[1]
    keep = torch.zeros(K, dtype=torch.float64)
    for k in steps:
        keep[k * bk:(k + 1) * bk] = 1
    return (a.double().cpu() * keep) @ b.double().cpu()


def k_step_mistakes(K, cfg):
    """``(hint, steps)`` of the K loops learners get wrong, for ``k_steps_only``."""
    n = math.ceil(K / cfg["BLOCK_K"])
    if n < 2:
        return []
    partial = K % cfg["BLOCK_K"]
    last = (f"the last, partial K step is missing: loop over tl.cdiv(K, BLOCK_K) steps (k_steps); the TMA reads the "
            f"{partial} columns past the last full step and zeros after them" if partial else
            "the last K step is missing: for k in range(k_steps), k_steps = tl.cdiv(K, BLOCK_K), runs over them all")
    return [
        (last, range(n - 1)),
        ("the first K step is missing: the K loop starts at 1 (or skips k = 0). for k in range(k_steps) starts at 0",
         range(1, n)),
        ("only the last K step is in C: the accumulator is overwritten, not added to. acc = tl.dot(a, b, acc) (or acc "
         "+= tl.dot(a, b)), with acc zeroed once per tile, before the K loop, not inside it", [n - 1]),
        ("only the first K step is in C: the loads after it fall past K. If k runs over range(0, K, BLOCK_K) it already "
         "counts elements: load at [.., k], not k * BLOCK_K (or loop for k in range(k_steps))", [0]),
    ]


def _grid(M, N, cfg):
    return math.ceil(M / cfg["BLOCK_M"]), math.ceil(N / cfg["BLOCK_N"])


def _written_tiles(o, cfg):
    """The tiles (in the grouped order's numbering) whose every element is a number, and all tiles."""
    M, N = o.shape
    order = tile_order(*_grid(M, N, cfg), cfg["GROUP_M"])
    bm, bn = cfg["BLOCK_M"], cfg["BLOCK_N"]
    done = {t for t, (i, j) in enumerate(order) if not torch.isnan(o[i * bm:(i + 1) * bm, j * bn:(j + 1) * bn]).any()}
    return done, len(order)


def _names(tiles) -> str:
    tiles = sorted(tiles)
    return ", ".join(map(str, tiles[:8])) + (", ..." if len(tiles) > 8 else "")


def _unwritten_hint(o, cfg, programs) -> str:
    done, total = _written_tiles(o, cfg)
    if len(done) == total:
        return ""
    missing = set(range(total)) - done
    tiles_m, tiles_n = _grid(*o.shape, cfg)
    order = tile_order(tiles_m, tiles_n, cfg["GROUP_M"])
    swapped = {(i, j) for i, j in tile_order(tiles_n, tiles_m, cfg["GROUP_M"]) if i < tiles_m and j < tiles_n}
    if {order[t] for t in done} == swapped:
        return ("the tiles written are those of grouped_tile with num_pid_m and num_pid_n swapped: call "
                "grouped_tile(tile, num_pid_m, num_pid_n, GROUP_M), tile rows first")
    if done == set(range(min(programs, total))):
        return (f"only tiles 0 to {min(programs, total) - 1} were written, one a program: loop over the tiles, "
                "from the program's own id in steps of NUM_PROGRAMS, until num_tiles")
    if done == set(range(0, total, programs)):
        return ("only tiles 0, NUM_PROGRAMS, 2 * NUM_PROGRAMS, ... were written: every program starts at tile 0. "
                "Start the tile loop at tl.program_id(axis=0)")
    if missing == set(range(max(done, default=-1) + 1, total)) or (missing and min(missing) >= total - programs):
        return (f"the last tiles ({_names(missing)} of {total}) were never written: the tile loop stops early. "
                "tl.range(start, num_tiles, NUM_PROGRAMS) runs up to num_tiles - 1 itself")
    return (f"tiles {_names(missing)} (of {total}, numbered in the grouped order) were never written: each tile "
            "must fall to one program, tile = program id + i * NUM_PROGRAMS")


def _starts(tr, i, kind):
    """(row, column) of the first element of each of tensor ``i``'s accesses of ``kind`` (a block's corner)."""
    t = tr.tensors[i]
    out = []
    for acc in tr.accesses:
        if acc.tensor == i and acc.kind == kind and acc.offsets.size:
            first = int(acc.offsets.min())
            out.append((acc.program, first // t.stride[0], first % t.stride[0]))
    return out


def _other_block(offsets, size, name, cfg, what) -> str:
    """Where C's tile offsets ``offsets`` (those that are not multiples of their own block ``name`` = ``size``) are
    all multiples of another of the config's blocks: "columns 128, 384 (multiples of BLOCK_M = 128, not of BLOCK_N
    = 256)"; "" where they are not (or there are none)."""
    for other in ("BLOCK_M", "BLOCK_N", "BLOCK_K"):
        step = cfg[other]
        if offsets and other != name and step != size and all(x % step == 0 for x in offsets):
            return f"{what} {_names(offsets)} (multiples of {other} = {step}, not of {name} = {size})"
    return ""


def _c_store_hint(o, cfg, programs, traces) -> str:
    """What the tracer's record of C's stores says of a wrong C: tiles stored at offsets that are not multiples
    of the blocks, one tile a program stored over and over, or the tile loop's step."""
    bm, bn = cfg["BLOCK_M"], cfg["BLOCK_N"]
    for tr, i in _c_records(o, traces):
        if len(tr.launches) != 1:
            continue
        starts = _starts(tr, i, "store")
        rows = sorted({r for _, r, c in starts if r % bm})
        cols = sorted({c for _, r, c in starts if c % bn})
        other = _other_block(rows, bm, "BLOCK_M", cfg, "rows") or _other_block(cols, bn, "BLOCK_N", cfg, "columns")
        if other:
            return (f"C's tiles were stored at {other}: an offset uses one block for another. Store at "
                    "[pid_m * BLOCK_M, pid_n * BLOCK_N]")
        if rows or cols:
            where = (([f"rows {_names(rows)} (not multiples of BLOCK_M = {bm})"] if rows else [])
                     + ([f"columns {_names(cols)} (not multiples of BLOCK_N = {bn})"] if cols else []))
            return (f"C's tiles were stored at {' and '.join(where)}: a descriptor's offsets count elements, not "
                    f"blocks. Store at [pid_m * BLOCK_M, pid_n * BLOCK_N]")
        counts = tr.read_counts(i, kind="store")
        first, last = tr.owner_map(i, kind="store"), tr.owner_map(i, kind="store", how="last")
        done, total = _written_tiles(o, cfg)
        if counts.max() > 1 and (first == last).all() and len(done) < total:
            return (f"each program stored one tile over and over (up to {int(counts.max())} times) and other tiles "
                    "were never written: the tile loop runs, but pid_m, pid_n do not follow it. Take them from "
                    "grouped_tile(tile, num_pid_m, num_pid_n, GROUP_M) with the loop's tile, not the program id")
        step = _tile_step(starts, o, cfg, programs)
        if step:
            return (f"each program starts at its own tile but steps by {step} tiles, not NUM_PROGRAMS ({programs}): "
                    f"tiles {_names(set(range(total)) - done)} were never written. "
                    "tl.range(tl.program_id(axis=0), num_tiles, NUM_PROGRAMS)")
    return ""


def _tile_step(starts, o, cfg, programs) -> int | None:
    """The tile loop's step where C's stores (``starts``: (program, row, column) of each) show every program starting
    at its own tile (tile ``p`` of the grouped order for program ``p``) and stepping by one number that is neither
    NUM_PROGRAMS nor 1; None otherwise."""
    bm, bn = cfg["BLOCK_M"], cfg["BLOCK_N"]
    order = {tile: t for t, tile in enumerate(tile_order(*_grid(*o.shape, cfg), cfg["GROUP_M"]))}
    seq = {}
    for prog, r, c in starts:
        tile = order.get((r // bm, c // bn))
        if tile is not None and (not seq.get(prog) or seq[prog][-1] != tile):
            seq.setdefault(prog, []).append(tile)
    steps = {b - a for ts in seq.values() for a, b in zip(ts, ts[1:])}
    if (len(steps) == 1 and all(ts[0] == prog[0] for prog, ts in seq.items())
            and (step := steps.pop()) not in (programs, 1)):
        return step
    return None


def _diagnose(a, b, cfg, programs, traces=()):
    M, N = a.shape[0], b.shape[1]

    def close(o, model):
        return torch.allclose(o, model, atol=1e-2, rtol=1e-2)

    def hint(o, e, wrong):
        stored = _c_store_hint(o, cfg, programs, traces)
        if stored:
            return stored
        unwritten = _unwritten_hint(o, cfg, programs)
        if unwritten:
            return unwritten
        tiles = math.prod(_grid(M, N, cfg))
        if tiles > programs and close(o, carried(a, b, cfg, programs)):
            return ("each program's tiles after its first add up the tiles before: the accumulator is zeroed once, "
                    "before the tile loop. Start every tile with acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)")
        for mistake, steps in k_step_mistakes(a.shape[1], cfg):
            if close(o, k_steps_only(a, b, cfg, steps)):
                return mistake
        for mistake, a_at, b_at in offset_mistakes(cfg):
            if close(o, modelled(a, b, cfg, a_at, b_at)):
                return mistake
        bm, bn = cfg["BLOCK_M"], cfg["BLOCK_N"]
        if bm == bn == cfg["BLOCK_K"] and close(o, modelled(a, b, cfg, lambda i, j, k: (i * bm, k * bm),
                                                            lambda i, j, k: (k * bm, j * bm), swap=True)):
            return ("each tile is B's block times A's: tl.dot(b, a, acc). The product is A's (BLOCK_M, BLOCK_K) "
                    "block times B's (BLOCK_K, BLOCK_N) block, tl.dot(a, b, acc)")
        first = ~wrong[: min(bm, M), : min(bn, N)]
        if bool(first.all()) and bool(wrong.any()):
            return f"the first tile is right and others are not: a descriptor's offsets count elements, not blocks. {OFFSETS}"
        return (f"no known mistake fits; what the grader sees: {describe_wrong(o, e, wrong)}. Does each tile load "
                "A's rows pid_m * BLOCK_M.. and B's columns pid_n * BLOCK_N.., along K in steps of BLOCK_K?")
    return hint


def _c_records(out, traces):
    """(trace, index) of each traced tensor that is C (named ``c`` or ``c_desc``, of the output's shape)."""
    for tr in traces:
        for i, t in enumerate(tr.tensors):
            if tuple(t.shape) == tuple(out.shape) and t.name in ("c", "c_desc"):
                yield tr, i


def _repeated_case(label, out, traces, cfg, programs, k_steps=1) -> Case | None:
    """A failing case when the tracer saw an element of C stored more than once (a tile done twice, or C's store
    inside the K loop: ``k_steps`` stores of each element, all by the program that owns it)."""
    for tr, i in _c_records(out, traces):
        counts = tr.read_counts(i, kind="store")
        most = int(counts.max()) if counts.size else 0
        if most > 1:
            twice = int((counts > 1).sum())
            detail = (f"the right matrix, but {twice} of C's {counts.size} elements were stored more than once "
                      f"(up to {most} times)")
            one = len(tr.launches) == 1 and bool((tr.owner_map(i, kind="store") ==
                                                  tr.owner_map(i, kind="store", how="last")).all())
            if one and most in (k_steps, k_steps + 1) and k_steps > 1:  # the store after the loop kept, or not
                return Case(label, "fail", detail + ", each by one program, once a K step",
                            "C's tile is stored inside the K loop, once a K step: store it once, after the K loop, "
                            "c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_desc.dtype))")
            if one:
                return Case(label, "fail", detail + ", each by one program",
                            "a program stored the same tile several times: each tile is computed and stored once, "
                            "tl.range(tl.program_id(axis=0), num_tiles, NUM_PROGRAMS) taking each tile once")
            step = _tile_step(_starts(tr, i, "store"), out, cfg, programs) if len(tr.launches) == 1 else None
            if step:
                return Case(label, "fail", detail,
                            f"each program starts at its own tile but steps by {step} tiles, not NUM_PROGRAMS "
                            f"({programs}), so some tiles were done by several programs: tl.range(tl.program_id("
                            "axis=0), num_tiles, NUM_PROGRAMS)")
            return Case(label, "fail", detail,
                        "some tiles were done by several programs: step the tile loop by NUM_PROGRAMS, "
                        "tl.range(tl.program_id(axis=0), num_tiles, NUM_PROGRAMS), so each tile falls to one")
    return None


PAST_TILES = ("the tile loop runs past the last tile: tiles from num_tiles on lie outside C (their loads and C stores "
              "fall past the edge) and only cost time. Stop it at num_tiles: tl.range(tl.program_id(axis=0), "
              "num_tiles, NUM_PROGRAMS)")


def _past_tiles_case(label, out, traces, a, cfg) -> Case | None:
    """A failing case when B's elements were loaded more often than C's tile rows need while A's were not: tiles
    past num_tiles (pid_m beyond C, whose loads of A and stores of C fall outside) still ran their K loop."""
    M, N = out.shape
    tiles_m, tiles_n = _grid(M, N, cfg)
    for tr in traces:
        names = [t.name for t in tr.tensors]
        if "a" not in names or "b" not in names:
            continue
        a_most, b_most = int(tr.read_counts("a").max(initial=0)), int(tr.read_counts("b").max(initial=0))
        if a_most <= tiles_n and b_most > tiles_m:
            return Case(label, "fail", f"the right matrix, but some of B's elements were loaded {b_most} times, "
                        f"while C has {tiles_m} tile rows", PAST_TILES)
    return None


def _order_case(label, out, traces, cfg, programs) -> Case | None:
    """A failing case when the tracer saw C's tiles stored by other programs than the grouped order gives them
    (program ``p`` takes tiles ``p``, ``p + programs``, ... of ``tile_order``): the right matrix, in another order."""
    M, N = out.shape
    tiles_m, tiles_n = _grid(M, N, cfg)
    order = tile_order(tiles_m, tiles_n, cfg["GROUP_M"])
    want = {tile: t % programs for t, tile in enumerate(order)}
    row_major = {(t // tiles_n, t % tiles_n): t % programs for t in range(len(order))}
    if row_major == want:
        return None  # one row of tiles, or the grouped order falls to the programs as the row-major one does
    bm, bn = cfg["BLOCK_M"], cfg["BLOCK_N"]
    for tr, i in _c_records(out, traces):
        if len(tr.launches) != 1:
            continue
        owner = tr.owner_map(i, kind="store")
        got = {(r, c): int(owner[r * bm, c * bn]) for r in range(tiles_m) for c in range(tiles_n)}
        if got == want:
            return None
        if got == row_major:
            return Case(label, "fail", "the right matrix, but the tiles were taken row by row: program p stored "
                        "tiles p, p + NUM_PROGRAMS, ... of the row-major order",
                        "the tiles were taken row by row: take the tile's pid_m, pid_n from grouped_tile(tile, "
                        "num_pid_m, num_pid_n, GROUP_M), whose grouped order keeps the tiles in flight neighbours, "
                        "sharing A's rows and B's columns in the L2 (grouped_tile with GROUP_M = 1 is the row-major "
                        "order: pass the config's GROUP_M)")
        per = math.ceil(len(order) / programs)
        if got == {tile: t // per for t, tile in enumerate(order)}:
            return Case(label, "fail", "the right matrix, but each program took a run of consecutive tiles: "
                        f"program p stored tiles p * {per} to p * {per} + {per - 1} of the grouped order",
                        "each program took a run of consecutive tiles, so the tiles in flight at one time lie "
                        f"{per} apart in the grouped order and share little in the L2: program p takes tiles p, "
                        "p + NUM_PROGRAMS, p + 2 * NUM_PROGRAMS, ..., tl.range(tl.program_id(axis=0), num_tiles, "
                        "NUM_PROGRAMS)")
        return Case(label, "fail", "the right matrix, but the tiles fell to the programs in another order than "
                    "the grouped one (program p takes tiles p, p + NUM_PROGRAMS, ... of grouped_tile's order)",
                    "the tiles fell to the programs in another order than the grouped one: step the tile loop by "
                    "NUM_PROGRAMS from tl.program_id(axis=0) and take pid_m, pid_n from grouped_tile(tile, "
                    "num_pid_m, num_pid_n, GROUP_M)")
    return None


#: tl.dot's asserts on its operands' shapes (``triton.language.core.dot``), as its messages say them.
DOT_SHAPES = ("accumulator shape is incompatible", "must have equal reduction dimensions")
#: A CUDA illegal instruction. An H100 stopped at one (2026-12-06) when the tile loop ran past num_tiles: past the
#: last tile row grouped_tile divides by a group_size_m of 0 or less, and those tiles' loads and stores lie outside C.
TRAP_HINT = ("the GPU stopped at an illegal instruction. The lesson's kernel does that when the tile loop runs past "
             "the last tile: past the last row of tiles grouped_tile divides by group_size_m = min(num_pid_m - "
             "first_pid_m, GROUP_M), 0 or less there, and those tiles' loads and stores lie outside C. Stop the loop "
             "at num_tiles: tl.range(tl.program_id(axis=0), num_tiles, NUM_PROGRAMS). In the interpreter the tracer "
             "sees more: TRITON_INTERPRET=1 python -m tkcourse check hopper")


def _error_hint(exc, default) -> str:
    """What an error says of the kernel: tl.dot's asserts (an accumulator that is not fp32, operands whose shapes do
    not fit: tl.dot(b, a)), or a CUDA illegal instruction (``TRAP_HINT``)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if "illegal instruction" in str(exc):
            return TRAP_HINT
        if isinstance(exc, AssertionError) and any(m in str(exc) for m in DOT_SHAPES):
            return (f"tl.dot refused its operands' shapes ({str(exc).strip()}): tl.dot(x, y, acc) multiplies x's "
                    "(rows, K) by y's (K, columns) into acc's (rows, columns). A tile is A's (BLOCK_M, BLOCK_K) block "
                    "times B's (BLOCK_K, BLOCK_N) block, tl.dot(a, b, acc); tl.dot(b, a, acc) is B's block times "
                    "A's, and each descriptor's block_shape is the block it loads")
        if isinstance(exc, AssertionError):
            frames = [f.f_code for f, _ in traceback.walk_tb(exc.__traceback__)]
            if any(c.co_name == "dot" and c.co_filename.endswith("semantic.py") for c in frames):
                return ("tl.dot(a, b, acc) refused the accumulator: it must be fp32, acc = tl.zeros((BLOCK_M, BLOCK_N), "
                        "dtype=tl.float32), whatever C's dtype (a fp16 sum rounds at every step); cast it to "
                        "c_desc.dtype only when storing")
        exc = exc.__cause__ or exc.__context__
    return ""


#: What steps that load nothing mean here: a K loop past the last block of K.
IDLE_HINT = ("the K loop runs past K: it takes k_steps = tl.cdiv(K, BLOCK_K) steps, for k in range(k_steps) (range(K) "
             "takes K of them, and a number of steps typed in fits one K only). Past the last block a descriptor's "
             "load lies wholly beyond the edge and reads only the zeros it fills in, and still takes its time")


def _case(mod, M, N, K, programs, dtype, gen, cfg) -> Case:
    label = f"M={M} N={N} K={K} {str(dtype)[6:]}, {programs} program{'s' if programs > 1 else ''}"
    a = padded((torch.randn(M, K, generator=gen, dtype=torch.float64) / math.sqrt(K)).to(dtype).to(mode.DEVICE))
    b = padded(torch.randn(K, N, generator=gen, dtype=torch.float64).to(dtype).to(mode.DEVICE))
    g = graded_call(label, mod.matmul, (a, b), kwargs=dict(config=cfg, programs=programs), error_hint=_error_hint)
    if isinstance(g, Case):
        if g.status == "error" and "offset" in g.detail and "aligned" in g.detail:
            g.hint = ("a descriptor was asked for a block at an offset the TMA cannot take: its offsets count "
                      f"elements, not blocks. {OFFSETS}")
        elif g.status == "error" and "unexpected keyword argument" in g.detail:
            g.hint = ("the grader calls matmul(a, b, config=..., programs=...), the launcher as the lesson gives it: "
                      "keep its signature")
        return g
    bad = returned_case(label, g)
    if bad is not None:
        return bad
    tol = {torch.float16: (1e-2, 1e-2), torch.bfloat16: (3e-2, 3e-2)}.get(
        dtype, (1e-4, 1e-4) if mode.INTERPRET else (2e-2, 2e-2))
    case = written_case(label, g.out, a.double() @ b.double(), g, dtype=dtype, atol=tol[0], rtol=tol[1],
                        diagnose=_diagnose(a, b, cfg, programs, g.traces))
    if case.status != "pass":
        return case
    changed = g.snap.case(label, g.fn_name)
    if changed is not None:
        return changed
    return (_repeated_case(label, g.out, g.traces, cfg, programs, math.ceil(K / cfg["BLOCK_K"]))
            or _past_tiles_case(label, g.out, g.traces, a, cfg)
            or _order_case(label, g.out, g.traces, cfg, programs)
            or idle_steps(label, g.traces, IDLE_HINT, PAST_TILES) or case)


def _warp_specialize_case(mod) -> Case:
    label = "the tile loop takes the config's WARP_SPECIALIZE"
    kernel = getattr(mod, "persistent_matmul_kernel", None)
    try:
        body = inspect.getsource(getattr(kernel, "fn", kernel)).split("):", 1)[-1]
    except (OSError, TypeError):
        return Case(label, "pass")  # no source to read: nothing to say
    code = "\n".join(line.split("#", 1)[0] for line in body.splitlines())
    if "warp_specialize=WARP_SPECIALIZE" in code.replace(" ", ""):
        return Case(label, "pass")
    return Case(label, "fail", "tl.range(...) in the kernel does not pass warp_specialize=WARP_SPECIALIZE",
                "give the tile loop warp_specialize=WARP_SPECIALIZE: on a GPU the config's warp specialization "
                "(a producer warp feeding the consumer warpgroups) happens only through it")


def grade(mod):
    gen = torch.Generator().manual_seed(0)
    cfg = config()
    first, *others = mode.float_dtypes()
    for M, N, K, programs in (SHAPES if mode.INTERPRET else GPU_SHAPES):
        yield _case(mod, M, N, K, programs, first, gen, cfg)
    for dtype in others:
        for M, N, K, programs in (SHAPES[:3] if mode.INTERPRET else GPU_SHAPES[:2]):
            yield _case(mod, M, N, K, programs, dtype, gen, cfg)
    if mode.INTERPRET:  # three different blocks: an offset that takes one block for another shows
        case = _case(mod, *UNEQUAL_SHAPE, first, gen, UNEQUAL_CONFIG)
        if case.status in ("fail", "error") and not case.hint.startswith(("A's", "B's")):
            case.hint = (f"right with equal blocks, wrong with BLOCK_M={UNEQUAL_CONFIG['BLOCK_M']}, BLOCK_N="
                         f"{UNEQUAL_CONFIG['BLOCK_N']} and BLOCK_K={UNEQUAL_CONFIG['BLOCK_K']}: an offset uses one "
                         f"block for another. {OFFSETS}")
        yield case
    if not mode.INTERPRET:  # the lesson's own configs, warp specialization among them, at one program per SM
        for name in ("CONFIG", "WS_CONFIG"):
            own = getattr(mod, name, None)
            if isinstance(own, dict):
                yield _case(mod, 1024, 1024, 512, 132, torch.float16, gen, own)
    yield _warp_specialize_case(mod)
    d = mode.DEVICE
    hint = "check shapes and dtypes before launching, and raise ValueError saying what to fix"
    yield refuses("mismatched inner dimensions raise ValueError", mod.matmul, torch.ones(3, 4, device=d),
                  torch.ones(5, 6, device=d), hint=hint)
