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
        "out = torch.empty_like(x)", "out = torch.empty(x.numel() + 1, dtype=x.dtype)"), name="long_out"),
        "an output one element too long", "the shape of the result")
    assert "mask stopped early" not in rep.first_problem().hint
