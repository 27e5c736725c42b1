"""Hints of the graders of lessons 01 and 04 for more of the mistakes a learner makes: each test plants the
mistake in the solution as a learner would have finished it (``stubs.answer_text``), grades it, and checks that
the grader fails it (or reports the error) with a hint that names the mistake, not another one."""

from pathlib import Path

import pytest
from helpers import assert_grader_catches, mutant

from tkcourse import check, stubs

ROOT = Path(__file__).resolve().parents[1]


def _planted(lesson: str, *edits, name: str):
    text = stubs.answer_text((ROOT / "solutions" / f"{lesson}.py").read_text())
    return mutant(text, edits, f"planted_{name}", f"solutions/{lesson}.py")


# ----- lesson 01: vector add ----------------------------------------------------------------------------

OFFSETS = "offsets = pid * BLOCK + tl.arange(0, BLOCK)"
GRID = "grid = (triton.cdiv(n, BLOCK),)"
LAUNCH = "add_kernel[grid](x, y, out, n, BLOCK=BLOCK)"
STORE = "tl.store(out_ptr + offsets, x + y, mask=mask)"

VECTOR_ADD = [
    ("program id from axis 1", ("tl.program_id(axis=0)", "tl.program_id(axis=1)"), "tl.program_id(axis=0)"),
    ("offsets one block late", (OFFSETS, OFFSETS.replace("pid * BLOCK", "(pid + 1) * BLOCK")),
     "not (pid + 1) * BLOCK"),
    ("offsets start at 1", (OFFSETS, OFFSETS.replace("pid * BLOCK", "pid * BLOCK + 1")), "shifted by 1"),
    ("* BLOCK left out", (OFFSETS, OFFSETS.replace("pid * BLOCK", "pid")), "* BLOCK is missing"),
    ("mask against BLOCK", ("mask = offsets < n", "mask = offsets < BLOCK"), "only program 0 stored anything"),
    ("BLOCK passed for n", (LAUNCH, LAUNCH.replace("out, n,", "out, BLOCK,")), "only program 0 stored anything"),
    ("n one short", ("n = x.numel()", "n = x.numel() - 1"), "Pass n = x.numel()"),
    ("grid n // BLOCK", (GRID, "grid = (n // BLOCK,)"), "n // BLOCK rounds down"),
    ("cdiv arguments swapped", (GRID, "grid = (triton.cdiv(BLOCK, n),)"), "its arguments are n, then BLOCK"),
    ("grid a bare number", (GRID, "grid = triton.cdiv(n, BLOCK)"), "with the trailing comma"),
    ("x + x", (STORE, STORE.replace("x + y", "x + x")), "your output is x + x"),
    ("y loaded from x_ptr", ("y = tl.load(y_ptr", "y = tl.load(x_ptr"), "your output is x + x"),
    ("x - y", (STORE, STORE.replace("x + y", "x - y")), "your output is x - y"),
    ("x * y", (STORE, STORE.replace("x + y", "x * y")), "your output is x * y"),
    ("stored into x", (STORE, STORE.replace("out_ptr", "x_ptr")), "your kernel stores into x"),
    ("launch arguments in another order", (LAUNCH, LAUNCH.replace("x, y, out,", "out, x, y,")),
     "passes the tensors in another order"),
    ("BLOCK typed in for the launch", (LAUNCH, LAUNCH.replace("BLOCK=BLOCK", "BLOCK=1024")),
     "the launch passes a BLOCK of its own"),
    ("BLOCK typed in for tl.arange", (OFFSETS, OFFSETS.replace("tl.arange(0, BLOCK)", "tl.arange(0, 1024)")),
     "tl.arange(0, 1024)"),
    ("BLOCK typed in for the offsets", (OFFSETS, OFFSETS.replace("pid * BLOCK", "pid * 1024")),
     "is 1024 typed in for BLOCK?"),
    ("a program an element", (GRID, "grid = (n,)"), "The grid is (n,)"),
    ("a grid of BLOCK programs", (GRID, "grid = (BLOCK,)"), "The grid does not follow n"),
]


@pytest.mark.parametrize("name, edit, hint", VECTOR_ADD, ids=[p[0] for p in VECTOR_ADD])
def test_vector_add_slip_is_named(name, edit, hint):
    assert_grader_catches("vector_add", _planted("vector_add", edit, name=name.replace(" ", "_")), name, hint)


@pytest.mark.parametrize("name, edit", [
    ("out allocated like y", ("out = torch.empty_like(x)", "out = torch.empty_like(y)")),
    ("a spare program when BLOCK divides n", (GRID, "grid = (n // BLOCK + 1,)")),
])
def test_vector_add_harmless_variants_pass(name, edit):
    mod = _planted("vector_add", edit, name=name.replace(" ", "_"))
    rep = check.run("vector_add", module=mod, quiet=True)
    assert rep.passed, f"{name}:\n{rep}"


def test_the_wrong_shape_is_named_before_what_the_programs_stored():
    rep = assert_grader_catches("vector_add", _planted("vector_add", (
        "out = torch.empty_like(x)", "out = torch.empty(x.numel() + 1, dtype=x.dtype, device=x.device)"),
        name="long_out"),
        "an output one element too long", "the shape of the result")
    assert "mask stopped early" not in rep.first_problem().hint


# ----- lesson 04: autotune ------------------------------------------------------------------------------

SMEM = 'return tiles * dtype_bytes * config["num_stages"]'
TILES = 'tiles = config["BLOCK_M"] * config["BLOCK_K"] + config["BLOCK_K"] * config["BLOCK_N"]'
SIDES = [f'c["BLOCK_{s}"] > max(16, next_pow2({s}))' for s in "MNK"]
RETURN = "        kept.append(c)\n    return kept"

AUTOTUNE = [
    ("num_warps and num_stages swapped in the unpacking",
     [("for bm, bn, bk, g, w, s in axes", "for bm, bn, bk, g, s, w in axes")], "are the two swapped"),
    ("BLOCK_N and BLOCK_K swapped in the dict", [("BLOCK_N=bn, BLOCK_K=bk", "BLOCK_N=bk, BLOCK_K=bn")],
     "are BLOCK_N and BLOCK_K swapped"),
    ("a one-value axis without its comma", [("(8,),  # GROUP_M", "(8),  # GROUP_M")], "(8,), not (8)"),
    ("the product's tuples returned", [("return [dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=g, num_warps=w, "
                                        "num_stages=s)\n            for bm, bn, bk, g, w, s in axes]",
                                        "return list(axes)")], "make a dict of each"),
    ("estimate without parentheses", [(TILES + "\n    " + SMEM, "return " + TILES[8:] + ' * dtype_bytes * '
                                       'config["num_stages"]')], "parenthesize the sum of the tiles"),
    ("estimate in KiB", [(SMEM, SMEM + " // 1024")], "the estimate is in KiB"),
    ("estimate in bits", [(SMEM, SMEM.replace("dtype_bytes", "dtype_bytes * 8"))], "the estimate is in bits"),
    ("estimate counts the output tile", [(SMEM, SMEM.replace("tiles", '(tiles + config["BLOCK_M"] * '
                                                              'config["BLOCK_N"])'))], "the output tile is counted"),
    ("estimate with num_stages - 1", [(SMEM, SMEM.replace('config["num_stages"]', '(config["num_stages"] - 1)'))],
     "num_stages - 1 copies"),
    ("estimate with B's tile BLOCK_K x BLOCK_K", [(TILES, TILES.replace('config["BLOCK_N"]', 'config["BLOCK_K"]'))],
     "A's and B's tiles hold"),
    ("break for continue", [("continue  # would fail", "break  # would fail")], "break ends the whole loop"),
    ("return inside the loop", [(RETURN, RETURN.replace("    return", "        return"))], "return kept is inside"),
    ("the tile tests joined with and", [(") or c", ") and c"), ("\n                or c", "\n                and c")],
     "join the three tests with or"),
    ("the tile test the wrong way round", [("continue  # the tile", "kept.append(c)  # the tile"),
                                           (RETURN, "    return kept")], "the tile test is the wrong way round"),
    ("min for max", [(s, s.replace("max(", "min(")) for s in SIDES], "capped at 16 by min(16"),
    ("smem_limit taken as KiB", [("> smem_limit:", "> smem_limit * 1024:")], "not smem_limit * 1024"),
    ("the estimate compared in bits", [("shared_memory_bytes(c, dtype_bytes) > smem_limit",
                                        "shared_memory_bytes(c, dtype_bytes) * 8 > smem_limit")],
     "compared in bits"),
    ("dtype_bytes not passed on", [("shared_memory_bytes(c, dtype_bytes) > smem_limit",
                                    "shared_memory_bytes(c) > smem_limit")], "shared_memory_bytes(c, dtype_bytes)"),
    ("next_pow2 of one less", [(s, s.replace("))", " - 1))")) for s in SIDES], "not next_pow2(M - 1)"),
]


@pytest.mark.parametrize("name, edits, hint", AUTOTUNE, ids=[p[0] for p in AUTOTUNE])
def test_autotune_slip_is_named(name, edits, hint):
    assert_grader_catches("autotune", _planted("autotune", *edits, name=name.replace(" ", "_")), name, hint)


def test_a_forgotten_num_stages_is_no_longer_named_for_a_limit_taken_as_kib():
    """smem_limit * 1024 keeps every config at the H200's limit, as a forgotten num_stages does there: the
    probes tell them apart."""
    rep = check.run("autotune", module=_planted("autotune", ("> smem_limit:", "> smem_limit * 1024:"),
                                                name="kib_limit"), quiet=True)
    assert "forgets num_stages" not in rep.first_problem().hint, rep


@pytest.mark.parametrize("name, edit", [
    ("the tiles as (BLOCK_M + BLOCK_N) * BLOCK_K", (TILES, 'tiles = (config["BLOCK_M"] + config["BLOCK_N"]) * '
                                                   'config["BLOCK_K"]')),
    ("elif for the tile test", ("out of shared memory\n        if", "out of shared memory\n        elif")),
    ("copies of the kept dicts", ("kept.append(c)", "kept.append(dict(c))")),
])
def test_autotune_harmless_variants_pass(name, edit):
    rep = check.run("autotune", module=_planted("autotune", edit, name=name.replace(" ", "_")), quiet=True)
    assert rep.passed, f"{name}:\n{rep}"
