"""Grader for lesson 04: ``config_space()`` and ``prune(configs, M, N, K, dtype_bytes, smem_limit)``.

The space must be big, well-formed and free of duplicates. ``prune`` is run on the grader's own
space (so a small space of yours cannot hide a mistake), and its answer is compared with the
rules of the exercise, computed here from scratch: a config stays when its shared memory,
``(BLOCK_M*BLOCK_K + BLOCK_K*BLOCK_N) * dtype_bytes * num_stages``, is at most ``smem_limit`` and
no tile side is larger than ``max(16, next_pow2(dim))``. It must also keep the config that ran
fastest in the recorded H200 sweep of the matmul at 4096x4096x4096 fp16 (a known-good config
until that sweep is recorded). When ``prune`` is wrong, the hint says which mistake its answer
matches (a rule, a comparison, break for continue, a return inside the loop), asked again on a few probe
problems so that a mistake is named only when it gives prune's answers there too; a wrong
``shared_memory_bytes`` is named only when a model gives its values on both probes.
"""

from __future__ import annotations

import itertools

from .. import autotune as at
from .core import Case, error_case, random_sizes, seeded

KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages")
MIN_CONFIGS = 60
H200_SMEM = 232_448  # shared memory one H200 program may use (227 KiB, opt-in)
TIGHT = 48 * 1024  # a limit at which most of the space cannot fit (and 28 configs need exactly this)
FALLBACK_BEST = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3)

# The grader's space: 360 configs, 16..256 tiles, 2..4 stages.
SPACE = [dict(BLOCK_M=m, BLOCK_N=n, BLOCK_K=k, GROUP_M=8, num_warps=w, num_stages=s)
         for m, n, k, w, s in itertools.product((16, 32, 64, 128, 256), (32, 64, 128, 256), (32, 64, 128),
                                                (4, 8), (2, 3, 4))]


# ------------------------------------------------------------------------------------------
# the rules, computed here (never from the learner's module or solutions/)
# ------------------------------------------------------------------------------------------


def smem(c: dict, dtype_bytes: int) -> int:
    """Shared memory of a pipelined matmul config: num_stages copies of an A and a B tile."""
    return (c["BLOCK_M"] * c["BLOCK_K"] + c["BLOCK_K"] * c["BLOCK_N"]) * dtype_bytes * c["num_stages"]


def _pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def _fits_problem(c: dict, M: int, N: int, K: int, floor: int = 16, pow2=_pow2) -> bool:
    return (c["BLOCK_M"] <= max(floor, pow2(M)) and c["BLOCK_N"] <= max(floor, pow2(N))
            and c["BLOCK_K"] <= max(floor, pow2(K)))


#: Problems (M, N, K, smem_limit) a wrong prune is asked about again when several usual mistakes give its
#: answer to a graded case (an empty list, say): the mistakes that also give its answers there remain.
PROBES = ((64, 64, 64, 227 * 1024), (1, 4096, 4096, TIGHT), (4096, 4096, 4096, TIGHT), (100, 100, 100, 227 * 1024))


def expected_prune(space, M, N, K, dtype_bytes, smem_limit) -> list[dict]:
    return [c for c in space if smem(c, dtype_bytes) <= smem_limit and _fits_problem(c, M, N, K)]


def recorded_best() -> tuple[dict, str]:
    """(config, where it comes from): the fastest config of the recorded H200 matmul sweep at
    4096x4096x4096 fp16, or ``FALLBACK_BEST`` while that sweep is not recorded (or does not load)."""
    try:
        sweeps = [s for s in at.load_sweeps(kernel="matmul", dtype="float16") if s.shape == "4096x4096x4096"]
    except Exception as e:  # a malformed file must not break grading
        return dict(FALLBACK_BEST), f"a known-good config (the recorded sweep did not load: {type(e).__name__})"
    best = sweeps[0].best() if sweeps else None
    if best is None:
        return dict(FALLBACK_BEST), "a known-good config (no recorded H200 sweep of matmul 4096³ fp16 yet)"
    s = sweeps[0]
    return dict(best.config), f"the fastest config of the recorded sweep (matmul 4096³ fp16, {s.gpu}, {s.date})"


def _key(c: dict) -> tuple:
    return tuple(sorted(c.items()))


def _label(c: dict) -> str:
    return at.config_label(c, KEYS)


# ------------------------------------------------------------------------------------------
# naming the mistake
# ------------------------------------------------------------------------------------------


def _mistakes(space, M, N, K, db, limit):
    """(hint, kept-set) for each usual mistake, as prune would answer if it made it."""
    tiles = lambda c: c["BLOCK_M"] * c["BLOCK_K"] + c["BLOCK_K"] * c["BLOCK_N"]  # noqa: E731
    size = lambda c: _fits_problem(c, M, N, K)  # noqa: E731
    cands = [
        ("the comparison is the wrong way round: prune keeps the configs that do NOT fit. Keep a config "
         "when its estimate is <= smem_limit, drop it when the estimate is > smem_limit",
         lambda c: smem(c, db) > limit and size(c)),
        ("the comparison is the wrong way round: prune keeps the configs that do NOT fit. Keep a config "
         "when its estimate is <= smem_limit, drop it when the estimate is > smem_limit",
         lambda c: smem(c, db) >= limit and size(c)),
        ("the estimate forgets num_stages: the pipeline holds num_stages copies of the A and B tiles, "
         "so multiply (BLOCK_M*BLOCK_K + BLOCK_K*BLOCK_N) * dtype_bytes by num_stages",
         lambda c: tiles(c) * db <= limit and size(c)),
        ("a config that needs exactly smem_limit bytes fits: keep it when the estimate is <= smem_limit "
         "(you compare with <)",
         lambda c: smem(c, db) < limit and size(c)),
    ]
    for sides in (("BLOCK_M", "BLOCK_N", "BLOCK_K"), ("BLOCK_M",), ("BLOCK_N",), ("BLOCK_K",)):  # >= for >
        dim = {"BLOCK_M": "M", "BLOCK_N": "N", "BLOCK_K": "K"}[sides[-1]]
        cands.append(((f"a tile side as large as max(16, next_pow2(dim)) is dropped ({', '.join(sides)}): it fits, "
                       f"so drop only larger ones ({sides[-1]} > max(16, next_pow2({dim})): >, not >=)"),
                      lambda c, sides=sides: smem(c, db) <= limit and size(c) and all(
                          c[k] < max(16, _pow2(d)) for k, d in zip(("BLOCK_M", "BLOCK_N", "BLOCK_K"), (M, N, K))
                          if k in sides)))
    cands += [
        ("tiles larger than the problem are kept: a tile side above max(16, next_pow2(dim)) only computes "
         "masked-off zeros. Drop BLOCK_M > max(16, next_pow2(M)), and the same for N and K",
         lambda c: smem(c, db) <= limit),
        ("a tile may be as large as next_pow2 of its dimension: 100 rows fit one BLOCK_M=128 tile. Drop "
         "BLOCK_M > max(16, next_pow2(M)), not BLOCK_M > M",
         lambda c: smem(c, db) <= limit and _fits_problem(c, M, N, K, pow2=int)),
        ("the tiles start at 16 (tl.dot's K side needs 16; the course keeps M and N there too): keep BLOCK_M up to "
         "max(16, next_pow2(M)), so a problem with M < 16 still has configs (max(16, ...) is missing)",
         lambda c: smem(c, db) <= limit and _fits_problem(c, M, N, K, floor=1)),
        ("compare each tile side with its own dimension: BLOCK_M with M, BLOCK_N with N, BLOCK_K with K",
         lambda c: smem(c, db) <= limit and _fits_problem(c, N, M, K)),
        ("compare each tile side with its own dimension: BLOCK_M with M, BLOCK_N with N, BLOCK_K with K",
         lambda c: smem(c, db) <= limit and _fits_problem(c, K, N, M)),
        ("compare each tile side with its own dimension: BLOCK_M with M, BLOCK_N with N, BLOCK_K with K",
         lambda c: smem(c, db) <= limit and _fits_problem(c, M, N, N)),
        ("compare each tile side with its own dimension: BLOCK_M with M, BLOCK_N with N, BLOCK_K with K",
         lambda c: smem(c, db) <= limit and _fits_problem(c, M, N, M)),
    ]
    for floor in (32, 64, 128, 256):  # a floor above tl.dot's 16 (say 64, for Hopper's 64-row wgmma)
        m_only = lambda c, f=floor: (c["BLOCK_M"] <= max(f, _pow2(M)) and  # noqa: E731
                                     _fits_problem(c, 1 << 30, N, K))
        cands.append((_floor_hint(floor, ("BLOCK_M",), M, N, K),
                      lambda c, rule=m_only: smem(c, db) <= limit and rule(c)))
        cands.append((_floor_hint(floor, ("BLOCK_M", "BLOCK_N", "BLOCK_K"), M, N, K),
                      lambda c, f=floor: smem(c, db) <= limit and _fits_problem(c, M, N, K, floor=f)))
    cands += [
        ("a config is dropped only when all three tile sides are too large: drop it when any one is (join the three "
         "tests with or, not and)", lambda c: smem(c, db) <= limit and not all(
             c[k] > max(16, _pow2(d)) for k, d in (("BLOCK_M", M), ("BLOCK_N", N), ("BLOCK_K", K)))),
        ("prune keeps the configs whose tile is larger than the problem and drops those that fit it: the tile "
         "test is the wrong way round (drop a config when a side is > max(16, next_pow2(dim)))",
         lambda c: smem(c, db) <= limit and not size(c)),
        ("every tile side is capped at 16 by min(16, next_pow2(dim)): the 16 is a floor, so keep a side up to "
         "max(16, next_pow2(dim))", lambda c: smem(c, db) <= limit and all(
             c[k] <= min(16, _pow2(d)) for k, d in (("BLOCK_M", M), ("BLOCK_N", N), ("BLOCK_K", K)))),
        ("the rounding falls one power of two short when a dimension is one past a power of two (129 rows need a "
         "256-row tile): round the dimension itself up, next_pow2(M), not next_pow2(M - 1)",
         lambda c: smem(c, db) <= limit and _fits_problem(c, M, N, K, pow2=lambda d: _pow2(d - 1))),
        ("smem_limit is in bytes, as the estimate is: compare shared_memory_bytes(c, dtype_bytes) with smem_limit "
         "itself, not smem_limit * 1024", lambda c: smem(c, db) <= limit * 1024 and size(c)),
        ("the estimate is compared in bits (* 8): shared_memory_bytes already counts bytes (dtype_bytes is the "
         "size of an element in bytes), and smem_limit is in bytes too", lambda c: smem(c, db) * 8 <= limit and size(c)),
    ]
    if db != 2:
        cands.append(("dtype_bytes ignored: the estimate must multiply by dtype_bytes (2 for fp16, 4 for "
                      "fp32), not a fixed 2: call shared_memory_bytes(c, dtype_bytes) (its default is 2)",
                      lambda c: smem(c, 2) <= limit and size(c)))
        cands.append(("dtype_bytes ignored: the estimate must multiply by dtype_bytes (2 for fp16, 4 for "
                      "fp32), not a fixed 2: call shared_memory_bytes(c, dtype_bytes) (its default is 2)",
                      lambda c: smem(c, 2) <= limit))
    for hint, rule in cands:
        yield hint, {_key(c) for c in space if rule(c)}
    yield from _loop_mistakes(space, M, N, K, db, limit)
    if not any(smem(c, db) <= limit and size(c) for c in space):  # nothing fits: a fallback keeps everything
        yield ("nothing fits here, and prune returned every config: prune drops each config that does not fit, "
               "so when none fits it returns the empty list (return kept, not kept or configs)"), \
            {_key(c) for c in space}


def _floor_hint(floor: int, sides: tuple, M: int, N: int, K: int) -> str:
    """The hint for tile sides ``sides`` bounded by max(``floor``, next_pow2(dim)) instead of max(16, ...),
    naming the first side where that keeps a larger tile than the rule."""
    dims = {"BLOCK_M": ("M", M), "BLOCK_N": ("N", N), "BLOCK_K": ("K", K)}
    side = next((k for k in sides if max(floor, _pow2(dims[k][1])) > max(16, _pow2(dims[k][1]))), sides[0])
    dim, v = dims[side]
    what = side if len(sides) == 1 else "every tile side"
    return (f"a tile larger than the problem is kept: for {dim}={v} prune keeps {side} up to "
            f"{max(floor, _pow2(v))}, while the rule graded here allows at most max(16, next_pow2({dim})) = "
            f"{max(16, _pow2(v))} (is {what} floored at {floor} instead of 16?). Keep BLOCK_M <= "
            "max(16, next_pow2(M)) (16: tl.dot's K side needs 16; the course keeps M and N there too), and the "
            "same for N and K; a larger floor "
            "(64, the rows of Hopper's wgmma) is an experiment to measure, not the exercise's rule")


def _loop_mistakes(space, M, N, K, db, limit):
    """(hint, kept-set) for the mistakes of prune's loop itself: break for continue, return inside the loop."""
    fits = lambda c: smem(c, db) <= limit  # noqa: E731
    size = lambda c: _fits_problem(c, M, N, K)  # noqa: E731
    for name, stop in (("does not fit in shared memory", lambda c: not fits(c)),
                       ("does not fit", lambda c: not (fits(c) and size(c)))):
        kept = set()
        for c in space:
            if stop(c):
                break
            if fits(c) and size(c):
                kept.add(_key(c))
        yield (f"prune stops at the first config that {name}: break ends the whole loop, so every config after it "
               "is dropped too. Skip just that config with continue"), kept
    first = next((c for c in space if fits(c) and size(c)), None)
    yield ("prune returns after the first config it keeps: return kept is inside the loop. Return after the loop "
           "has looked at every config (dedent the return)"), set() if first is None else {_key(first)}


def _tile_hint(extra, M, N, K) -> str:
    """A hint for kept configs that fit in shared memory but have a tile larger than the problem: what
    the first one keeps, against what the rule allows."""
    for c in extra:
        over = [(k, c[k], dim, v, max(16, _pow2(v))) for k, dim, v in
                (("BLOCK_M", "M", M), ("BLOCK_N", "N", N), ("BLOCK_K", "K", K)) if c[k] > max(16, _pow2(v))]
        if over:
            said = ", ".join(f"{k}={got} > max(16, next_pow2({dim}={v})) = {most}" for k, got, dim, v, most in over)
            return (f"a kept config has a tile larger than the problem: {_label(c)} fits in shared memory, but "
                    f"{said}. A tile side may be at most its dimension rounded up to a power of two, and never "
                    "less than 16 (tl.dot's K side needs 16; the course keeps M and N there too): drop BLOCK_M > "
                    "max(16, next_pow2(M)), and the same for N and K")
    return ""


def _diagnose(prune, space, kept, M, N, K, db, limit) -> str:
    got = {_key(c) for c in kept}
    right = {_key(c) for c in expected_prune(space, M, N, K, db, limit)}
    matches = [(i, hint) for i, (hint, would) in enumerate(_mistakes(space, M, N, K, db, limit)) if got == would != right]
    for pM, pN, pK, plimit in PROBES:  # several mistakes give this answer here (nothing kept, say): ask prune more;
        if not matches:  # one alone is asked too: a mistake named must give prune's answers there as well
            break
        try:
            pgot = {_key(c) for c in prune([dict(c) for c in space], pM, pN, pK, dtype_bytes=db, smem_limit=plimit)}
        except Exception:
            break
        models = list(_mistakes(space, pM, pN, pK, db, plimit))
        # a model that only exists for some problems (nothing fits) is not asked where it does not; hints name dims
        matches = [(i, hint) for i, hint in matches if i >= len(models) or models[i][1] == pgot]
    if matches:
        return matches[0][1]
    try:  # a prune that answers the same at any limit is not reading smem_limit
        loose = prune([dict(c) for c in space], M, N, K, dtype_bytes=db, smem_limit=10**12)
        tight = prune([dict(c) for c in space], M, N, K, dtype_bytes=db, smem_limit=TIGHT // 2)
        if got and {_key(c) for c in loose} == {_key(c) for c in tight} == got:
            return ("prune gives the same answer whatever smem_limit is: compare the estimate with the "
                    "smem_limit argument, not a fixed number")
    except Exception:
        pass
    return ""


def _keeps_everything(prune, space) -> bool:
    """True for the stub: prune keeps every config even when nothing can fit, and also where only some can (a
    prune that falls back to every config when none fits, ``return kept or configs``, is finished, and wrong)."""
    try:
        return all(len(list(prune([dict(c) for c in space], n, n, n, dtype_bytes=2, smem_limit=limit))) == len(space)
                   for n, limit in ((1, 1), (4096, TIGHT)))
    except Exception:
        return False


def _changed_input(given: list, before: list, kept) -> Case | None:
    """prune must not change the list it is given nor the dicts in it (the caller's space)."""
    if kept is given:
        return Case("", "fail", "prune returned the very list it was given",
                    "prune returned its input list, pruned in place: the caller's list of configs changed "
                    "under it. Build and return a new list (kept = [c for c in configs if ...])")
    if len(given) != len(before) or any(a is not b for a, b in zip(given, before)):
        return Case("", "fail", f"the configs list had {len(before)} entries before the call and {len(given)} after",
                    "prune changed the list it was given (configs.remove / pop / del / sort): removing from a "
                    "list while looping over it also skips the entry after each removal. Build a new list "
                    "instead: kept = [c for c in configs if ...]")
    return None


def _check_prune(prune, label, space, M, N, K, db, limit, must_keep=None, must_keep_why=""):
    """One case: prune(space, ...) against the rules; it must also leave its input as it was."""
    given = [dict(c) for c in space]
    before, snaps = list(given), [dict(c) for c in given]
    try:
        kept = prune(given, M, N, K, dtype_bytes=db, smem_limit=limit)
    except Exception as exc:
        return error_case(label, exc)
    if kept is None:
        return Case(label, "todo", "prune returned None", "return the list of configs you keep")
    bad = _changed_input(given, before, kept)
    if bad is None:
        changed = next(((i, c, s) for i, (c, s) in enumerate(zip(before, snaps)) if c != s), None)
        if changed is not None:
            i, c, s = changed
            keys = sorted(k for k in set(c) | set(s) if c.get(k, "-") != s.get(k, "-"))
            bad = Case("", "fail", f"config {i} was {_label(s)} before the call; after it, {', '.join(keys)} changed",
                       "prune changed a config dict it was given (c[key] = ... or c.pop(key)): return the kept "
                       "dicts unchanged, and copy one (dict(c)) if you need a changed version")
    if bad is not None:
        bad.label = label
        return bad
    if not isinstance(kept, list):  # a generator, say: the lesson's cells take its len() and test `in` twice
        return Case(label, "fail", f"prune returned a {type(kept).__name__}, not a list",
                    "return a list of the config dicts you keep (kept = [c for c in configs if ...]): the autotuner "
                    "and the lesson's cells take its length and look configs up in it more than once, which a "
                    "generator cannot give")
    if not all(isinstance(c, dict) for c in kept):
        bad = next(c for c in kept if not isinstance(c, dict))
        return Case(label, "fail", f"prune returned a {type(bad).__name__} among the configs",
                    "return the config dicts themselves (those you keep), unchanged")
    expected = expected_prune(space, M, N, K, db, limit)
    exp_keys = {_key(c) for c in expected}
    got_keys = [_key(c) for c in kept]
    where = f"M={M} N={N} K={K}, dtype_bytes={db}, smem_limit={limit} B"
    if got_keys == [_key(c) for c in space] and exp_keys != set(got_keys) and _keeps_everything(prune, space):
        return Case(label, "todo", f"prune returned all {len(space)} configs unchanged ({where}), even with "
                    "a 1-byte smem_limit and a 1x1x1 problem", "prune still keeps everything: fill in its TODO part")

    def diag():  # only when the answer is wrong: it calls prune again
        return _diagnose(prune, space, kept, M, N, K, db, limit)

    if must_keep is not None and _key(must_keep) not in set(got_keys):
        why = diag()
        return Case(label, "fail",
                    f"{_label(must_keep)} is missing from prune's answer ({where}); it needs "
                    f"{smem(must_keep, db)} B of shared memory",
                    f"pruned the best config: {_label(must_keep)} is {must_keep_why}, and it fits"
                    + (f". {why[0].upper()}{why[1:]}" if why else ": check which rule drops it"))
    extra = [c for c in kept if _key(c) not in exp_keys]
    missing = [c for c in expected if _key(c) not in set(got_keys)]
    if extra or missing:
        lines = [f"{where}: kept {len(kept)} of {len(space)} configs, expected {len(expected)}"]
        for c in extra[:3]:
            why = (f"needs {smem(c, db)} B > {limit} B" if smem(c, db) > limit
                   else f"a tile larger than the problem needs (max {max(16, _pow2(M))}x{max(16, _pow2(N))}"
                        f"x{max(16, _pow2(K))})")
            lines.append(f"  kept    {_label(c):<28} {why}")
        for c in missing[:3]:
            lines.append(f"  dropped {_label(c):<28} needs {smem(c, db)} B <= {limit} B and fits the problem")
        too_big = extra and all(smem(c, db) <= limit for c in extra)  # every extra fits: a tile-size mistake
        hint = diag() or (too_big and _tile_hint(extra, M, N, K)) or (
            "a kept config does not fit in shared memory: keep a config only when (BLOCK_M*BLOCK_K + "
            "BLOCK_K*BLOCK_N) * dtype_bytes * num_stages <= smem_limit and no tile side exceeds "
            "max(16, next_pow2(dim))"
            if extra else
            "prune drops configs that fit: drop only what exceeds smem_limit or is larger than the problem")
        return Case(label, "fail", "\n".join(lines), hint)
    if len(set(got_keys)) != len(got_keys):
        return Case(label, "fail", "prune returned a config twice", "keep each config at most once")
    if got_keys != [_key(c) for c in expected]:
        return Case(label, "fail", "prune kept the right configs in another order",
                    "return the kept configs in their original order (a list comprehension or an append loop "
                    "over configs does)")
    return Case(label, "pass")


# ------------------------------------------------------------------------------------------
# the config space
# ------------------------------------------------------------------------------------------


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _grade_space(mod):
    label = "config_space() returns a list of config dicts"
    try:
        space = mod.config_space()
    except Exception as exc:
        case = error_case(label, exc)
        if isinstance(exc, TypeError) and "'int' object is not iterable" in str(exc):
            case.hint = ("is an axis of itertools.product a bare number? Each axis is a tuple of values, and a "
                         "one-value axis needs its trailing comma: (8,), not (8), which is just 8")
        yield case
        return
    if space is None or (isinstance(space, (list, tuple)) and not space):
        yield Case(label, "todo", f"config_space() returned {space!r}",
                   "fill in config_space: a list of dicts, one per combination (itertools.product)")
        return
    if not isinstance(space, (list, tuple)) or not all(isinstance(c, dict) for c in space):
        what = type(space).__name__ if not isinstance(space, (list, tuple)) else \
            f"a list holding a {type(next(c for c in space if not isinstance(c, dict))).__name__}"
        tuples = isinstance(space, (list, tuple)) and all(isinstance(c, tuple) for c in space)
        yield Case(label, "fail", f"config_space() returned {what}",
                   ("itertools.product gives tuples of values: make a dict of each, " if tuples else "") +
                   "return a list of dicts such as dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, "
                   "num_warps=4, num_stages=3)")
        return
    yield Case(label, "pass")

    label = f"every config has exactly the keys {', '.join(KEYS)}"
    for c in space:
        missing, extra = [k for k in KEYS if k not in c], [k for k in c if k not in KEYS]
        if missing or extra:
            yield Case(label, "fail", f"{c}" + (f"\n  missing: {', '.join(missing)}" if missing else "")
                       + (f"\n  unknown: {', '.join(map(str, extra))}" if extra else ""),
                       "matmul(a, b, config=...) takes exactly these six keys: BLOCK_M, BLOCK_N, BLOCK_K and "
                       "GROUP_M for the kernel, num_warps and num_stages for the launch")
            return
    yield Case(label, "pass")

    label = f"at least {MIN_CONFIGS} configs"
    if len(space) < MIN_CONFIGS:
        yield Case(label, "fail", f"config_space() has {len(space)} configs",
                   f"a space of {len(space)} is too small to find a good config: take the product of several "
                   "values per key, e.g. 4 BLOCK_M x 3 BLOCK_N x 2 BLOCK_K x 2 num_warps x 2 num_stages = 96")
        return
    yield Case(label, "pass")

    label = "no config appears twice"
    seen = {}
    for i, c in enumerate(space):
        if _key(c) in seen:
            yield Case(label, "fail", f"config {i} ({_label(c)}) is also config {seen[_key(c)]}",
                       "a duplicate costs a compile and a benchmark for nothing: is a value listed twice "
                       "in one of your axes?")
            return
        seen[_key(c)] = i
    yield Case(label, "pass")

    label = "BLOCK_* are powers of two >= 16, num_warps a power of two, GROUP_M and num_stages >= 1"
    for c in space:
        bad = [k for k in KEYS if not _is_int(c[k])]
        if bad:
            yield Case(label, "fail", f"{c}: {bad[0]} = {c[bad[0]]!r} is not an integer",
                       "every value of a config is a whole number")
            return
        for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K"):
            v = c[k]
            if v < 16 or v & (v - 1):
                yield Case(label, "fail", f"{_label(c)}: {k} = {v}",
                           f"{k} must be a power of two (tl.arange needs one) and at least 16 (tl.dot's "
                           "K side needs 16, and the course keeps M and N there too (Triton would pad them))")
                return
        w = c["num_warps"]
        if w < 1 or w & (w - 1):
            stages = sorted({d["num_stages"] for d in space})
            swapped = all(v >= 4 and not v & (v - 1) for v in stages) and all(
                1 <= d["num_warps"] <= 8 for d in space)
            yield Case(label, "fail", f"{_label(c)}: num_warps = {w}",
                       "num_warps must be a power of two: 4 or 8 for a matmul (8 = two warpgroups on Hopper)"
                       + (f". Your num_stages take the values {', '.join(map(str, stages))}, and your num_warps "
                          f"{', '.join(map(str, sorted({d['num_warps'] for d in space})))}: are the two swapped where "
                          "you unpack the product's tuples? The names must come in the order of the axes"
                          if swapped else ""))
            return
        for k in ("GROUP_M", "num_stages"):
            if c[k] < 1:
                yield Case(label, "fail", f"{_label(c)}: {k} = {c[k]}", f"{k} must be at least 1")
                return
    yield Case(label, "pass")

    label = "tiles for skinny problems (BLOCK_M = 16) and for big ones (128 x 128 or larger)"
    if min(c["BLOCK_M"] for c in space) > 16:
        yield Case(label, "fail", f"the smallest BLOCK_M is {min(c['BLOCK_M'] for c in space)}",
                   "a problem with M = 16 (a small batch) wastes most of a larger tile: include BLOCK_M = 16")
        return
    if not any(c["BLOCK_M"] >= 128 and c["BLOCK_N"] >= 128 for c in space):
        most_n, most_k = max(c["BLOCK_N"] for c in space), max(c["BLOCK_K"] for c in space)
        yield Case(label, "fail", "no config has BLOCK_M >= 128 and BLOCK_N >= 128",
                   "big problems run fastest with big tiles (each loaded element feeds more FLOPs): include "
                   "128 and 256 for BLOCK_M and BLOCK_N"
                   + (f". Your BLOCK_K goes up to {most_k} while BLOCK_N stops at {most_n}: are BLOCK_N and BLOCK_K "
                      "swapped where you build each dict from the product's tuple?" if most_k >= 128 > most_n else ""))
        return
    yield Case(label, "pass")


#: A wrong estimate, as a formula of (BLOCK_M, BLOCK_N, BLOCK_K, num_stages, dtype_bytes), and the hint naming it;
#: named only when it gives the learner's values on every probe.
SMEM_MODELS = (
    (lambda m, n, k, s, db: (m * k + k * n) * db, "the estimate forgets num_stages: the pipeline holds num_stages "
     "copies of both tiles"),
    (lambda m, n, k, s, db: (m * k + k * n) * s, "dtype_bytes ignored: multiply the element count by dtype_bytes"),
    (lambda m, n, k, s, db: (m * k + k * n) * 2 * s, "dtype_bytes ignored: multiply by the dtype_bytes argument, "
     "not 2"),
    (lambda m, n, k, s, db: m * n * db * s, "wrong tiles: the pipeline holds A's (BLOCK_M, BLOCK_K) and B's "
     "(BLOCK_K, BLOCK_N) slices, not the (BLOCK_M, BLOCK_N) output tile"),
    (lambda m, n, k, s, db: m * k + k * n * db * s, "only B's tile is multiplied by dtype_bytes * num_stages: "
     "parenthesize the sum of the tiles, (BLOCK_M*BLOCK_K + BLOCK_K*BLOCK_N) * dtype_bytes * num_stages"),
    (lambda m, n, k, s, db: (m * k + k * n) * db * s / 1024, "the estimate is in KiB: return bytes (no / 1024), as "
     "smem_limit is"),
    (lambda m, n, k, s, db: (m * k + k * n) * db * s // 1024, "the estimate is in KiB: return bytes (no // 1024), "
     "as smem_limit is"),
    (lambda m, n, k, s, db: (m * k + k * n) * db * s * 8, "the estimate is in bits (* 8): dtype_bytes is already "
     "the size of an element in bytes"),
    (lambda m, n, k, s, db: (m * k + k * n + m * n) * db * s, "the output tile is counted: the accumulator "
     "(BLOCK_M, BLOCK_N) lives in registers, and only the A and B tiles are staged num_stages times in shared "
     "memory"),
    (lambda m, n, k, s, db: (m * k + k * n) * db * s + m * n * db, "the output tile is counted: the accumulator "
     "(BLOCK_M, BLOCK_N) lives in registers; only the A and B tiles are in shared memory"),
    (lambda m, n, k, s, db: (m * k + k * n) * db * (s - 1), "num_stages - 1 copies: the estimate keeps num_stages "
     "copies of both tiles"),
)


def _grade_smem(fn):
    label = "shared_memory_bytes(config, dtype_bytes)"
    probes = [(dict(FALLBACK_BEST), 2), (dict(BLOCK_M=64, BLOCK_N=32, BLOCK_K=128, GROUP_M=8, num_warps=4,
                                               num_stages=5), 4)]
    got = []
    for c, db in probes:
        try:
            got.append(fn(dict(c), db))
        except Exception as exc:
            yield error_case(label, exc)
            return
    wrong = [(c, db, g) for (c, db), g in zip(probes, got) if g != smem(c, db)]
    if not wrong:
        yield Case(label, "pass")
        return
    c, db, g = wrong[0]
    detail = f"shared_memory_bytes({_label(c)}, dtype_bytes={db}) = {g!r}, expected {smem(c, db)}"
    if g in (0, None):
        yield Case(label, "todo", detail, "fill in shared_memory_bytes")
        return

    def value(model, c, db):
        return model(c["BLOCK_M"], c["BLOCK_N"], c["BLOCK_K"], c["num_stages"], db)
    hint = next((h for model, h in SMEM_MODELS if all(
        isinstance(v, (int, float)) and v == value(model, c, db) for (c, db), v in zip(probes, got))), "")
    if not hint and isinstance(g, (int, float)) and g % (db * c["num_stages"]) == 0:  # what it counted, plainly
        per = int(g // (db * c["num_stages"]))
        tiles = c["BLOCK_M"] * c["BLOCK_K"] + c["BLOCK_K"] * c["BLOCK_N"]
        hint = (f"your estimate is {per} elements x dtype_bytes x num_stages; A's and B's tiles hold BLOCK_M*BLOCK_K "
                f"+ BLOCK_K*BLOCK_N = {tiles} elements: (BLOCK_M*BLOCK_K + BLOCK_K*BLOCK_N) * dtype_bytes * num_stages")
    yield Case(label, "fail", detail, hint or "(BLOCK_M*BLOCK_K + BLOCK_K*BLOCK_N) * dtype_bytes * num_stages")


def grade(mod):
    for case in _grade_space(mod):
        yield case
        if case.status != "pass":
            return
    if callable(getattr(mod, "shared_memory_bytes", None)):
        for case in _grade_smem(mod.shared_memory_bytes):
            yield case
            if case.status != "pass":
                return

    best, why = recorded_best()
    space = SPACE + ([best] if _key(best) not in {_key(c) for c in SPACE} else [])
    limit = max(H200_SMEM, smem(best, 2))  # the estimate may overshoot what a config really used
    yield _check_prune(mod.prune, f"prune keeps {_label(best)}, {why}", space, 4096, 4096, 4096, 2, limit,
                       must_keep=best, must_keep_why=why.replace("a known-good", "the known-good"))
    cases = [
        (f"prune at a tight limit ({TIGHT // 1024} KiB, fp16, 4096³) drops every config that does not fit, "
         "more than half the space", (4096, 4096, 4096, 2, TIGHT)),
        ("prune for fp32 (dtype_bytes=4, 96 KiB): fewer configs fit than in fp16", (4096, 4096, 4096, 4, 96 * 1024)),
        ("prune for a skinny problem (M=16, N=K=4096) drops BLOCK_M > 16", (16, 4096, 4096, 2, H200_SMEM)),
        ("prune for M=100, N=64, K=32 drops tiles larger than next_pow2 of each side", (100, 64, 32, 2, H200_SMEM)),
        ("prune for M=1 (one row, as in decoding) keeps BLOCK_M = 16", (1, 4096, 4096, 2, H200_SMEM)),
        ("prune for M=129, N=65, K=33: one past a power of two rounds up (next_pow2(129) = 256)",
         (129, 65, 33, 2, H200_SMEM)),
    ]
    for label, (M, N, K, db, lim) in cases:
        yield _check_prune(mod.prune, label, SPACE, M, N, K, db, lim)
    # random problems and limits (seeded, the seed in the label): a rule hard-coded to the cases above fails
    seed, dims = random_sizes(6, 1, 20_000)
    _, limits = random_sizes(2, 16 * 1024, H200_SMEM, seed=seed + 1)
    for i, lim in enumerate(limits):
        M, N, K = dims[3 * i: 3 * i + 3]
        db = (2, 4)[i % 2]
        yield _check_prune(mod.prune, seeded(f"prune for M={M} N={N} K={K}, dtype_bytes={db}, smem_limit={lim}", seed),
                           SPACE, M, N, K, db, lim)
