"""Lesson 01: the solution passes, and each classic mistake is caught with a fitting hint."""

import types

import pytest
import torch
import triton
import triton.language as tl
from helpers import assert_grader_catches

from solutions import vector_add
from tkcourse import check, mode


def test_solution_matches_torch():
    for n in (1, 17, 1025):
        x, y = torch.randn(n, device=mode.DEVICE), torch.randn(n, device=mode.DEVICE)
        torch.testing.assert_close(vector_add.add(x, y), x + y)


@pytest.mark.parametrize("bad, message", [
    (lambda d: (torch.ones(3, device=d), torch.ones(4, device=d)), "shape"),
    (lambda d: (torch.ones(3, device=d), torch.ones(3, device=d, dtype=torch.float16)), "dtype"),
    (lambda d: (torch.ones(3, 2, device=d), torch.ones(3, 2, device=d)), "1-D"),
    (lambda d: (torch.ones(3, device=d), [1.0, 2.0, 3.0]), "torch.Tensor"),
    (lambda d: (torch.ones(0, device=d), torch.ones(0, device=d)), "empty"),
])
def test_bad_input_raises_valueerror(bad, message):
    with pytest.raises(ValueError, match=message):
        vector_add.add(*bad(mode.DEVICE))


@pytest.mark.skipif(not mode.INTERPRET, reason="bf16 is fine on a GPU")
def test_bf16_refused_in_interpreter():
    x = torch.ones(8, dtype=torch.bfloat16)
    with pytest.raises(mode.UnsupportedInInterpreter, match="bfloat16"):
        vector_add.add(x, x)


def test_grader_passes_solution():
    assert check.run("vector_add", module=vector_add, quiet=True).passed


# ----- planted mistakes: each must fail, with the hint that names it -------------------------


@triton.jit
def _unmasked(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) + tl.load(y_ptr + offs))


@triton.jit
def _off_by_one(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs + 1, mask=m) + tl.load(y_ptr + offs + 1, mask=m), mask=m)


@triton.jit
def _first_block_only(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)  # forgot tl.program_id
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


@triton.jit
def _good(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


@triton.jit
def _store_one_past(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs <= n  # one lane too many
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + tl.load(y_ptr + offs, mask=offs < n), mask=m)


@triton.jit
def _loads_unmasked(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) + tl.load(y_ptr + offs), mask=offs < n)  # only the store masked


@triton.jit
def _store_far_away(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs * 4096, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


def _module(kernel, grid=lambda n, B: triton.cdiv(n, B), out_dtype=None, contiguous=True, alloc=None,
            into=None, ret=None):
    """A planted ``add``: ``alloc(x)`` makes the output (torch.empty_like by default), ``into`` picks
    where the kernel writes ("x": over the input), ``ret(out, x)`` what is returned."""
    def add(x, y, BLOCK=1024):
        if x.shape != y.shape:
            raise ValueError("shape")
        if contiguous:
            x, y = x.contiguous(), y.contiguous()
        out = alloc(x) if alloc else torch.empty_like(x, dtype=out_dtype or x.dtype)
        target = x if into == "x" else out
        kernel[(grid(x.numel(), BLOCK),)](x, y, target, x.numel(), BLOCK=BLOCK)
        return ret(target, x) if ret else target
    return types.SimpleNamespace(add=add, __name__="planted")


def _raises(x, y):
    raise RuntimeError("planted: the launcher fails")


@pytest.mark.parametrize("name, module, hint", [
    ("unmasked tail", _module(_unmasked), "unmasked tail"),
    ("offset off by one", _module(_off_by_one), "off by one"),
    ("only the first block", _module(_first_block_only), "only the first block"),
    ("grid rounds down", _module(_good, grid=lambda n, B: n // B), "triton.cdiv"),
    ("wrong output dtype", _module(_good, out_dtype=torch.float64), "wrong output dtype"),
    # classes the fixed sizes and torch.empty canaries alone let through (issue 17)
    ("result written over x, x returned", _module(_good, into="x"), "returned x itself"),
    ("x changed in place, a copy returned", _module(_good, into="x", ret=lambda out, x: out.clone()),
     "changed its input x"),
    ("strided x read as contiguous", _module(_good, contiguous=False), "strided input"),
    ("store one past the end of a zero-filled output", _module(_store_one_past, alloc=torch.zeros_like),
     "stores one element past the end of out"),
    ("store past the end of a torch.full output", _module(_unmasked, alloc=lambda x: torch.full_like(x, 7.0)),
     "unmasked tail"),
    ("loads past the end under a masked store", _module(_loads_unmasked), "loads past the end of x"),
    ("the grid with 1024 typed in for BLOCK", _module(_good, grid=lambda n, B: triton.cdiv(n, 1024)),
     "the launcher must use the BLOCK it is given"),
])
def test_grader_catches_planted_mistake(name, module, hint):
    rep = assert_grader_catches("vector_add", module, name, hint)
    bad = rep.first_problem()
    assert bad.detail and hint in str(rep)


def test_hard_coded_grid_is_caught_on_the_first_small_size():
    """98 programs (enough for every fixed size) whatever n is: the first case, at n=1500 and 2500, sees them idle."""
    rep = assert_grader_catches("vector_add", _module(_good, grid=lambda n, B: 98), "hard-coded grid",
                                "does not follow n")
    assert rep.first_problem().label.startswith("n=1500"), rep


def test_capped_grid_is_caught_at_a_seeded_random_size():
    """A grid capped at 98 programs fits the fixed sizes and the first small ones; a random size shows it."""
    rep = assert_grader_catches("vector_add", _module(_good, grid=lambda n, B: min(triton.cdiv(n, B), 98)),
                                "capped grid", "too few programs")
    assert "seed" in rep.first_problem().label and "TKCOURSE_CHECK_SEED=" in rep.first_problem().label


@pytest.mark.parametrize("name, module, status, hint", [
    ("a store far past the end of a zero-filled output", _module(_store_far_away, alloc=torch.zeros_like),
     "fail", "far past the end of out"),
    ("a launcher that raises", types.SimpleNamespace(add=_raises), "error", "your code raised"),
    ("a launcher that returns a tuple", _module(_good, ret=lambda out, x: (out, x)), "fail", "returns a tuple"),
    ("a launcher that returns x itself", _module(_good, ret=lambda out, x: x), "fail", "returned x itself"),
    ("a module without add", types.SimpleNamespace(), "error", "lacks a name"),
])
def test_grader_never_crashes(name, module, status, hint):
    """Whatever the learner's code does, the grader reports; the stray stores are masked, not performed."""
    rep = check.run("vector_add", module=module, quiet=True)
    assert rep.status == status, f"{name}:\n{rep}"
    assert hint in rep.first_problem().hint, f"{name}: {rep.first_problem()}"
    assert "Traceback" not in str(rep)


def test_correct_planted_kernel_passes():
    assert check.run("vector_add", module=_module(_good), quiet=True).passed


def test_untouched_stub_reads_not_done(monkeypatch):
    monkeypatch.setenv("TKCOURSE_SOLUTIONS", "0")
    rep = check.run("vector_add", quiet=True)
    from tkcourse import stubs
    if stubs.status("vector_add").state == "edited":
        pytest.skip("you have edited exercises/vector_add.py")
    assert rep.status == "todo" and "not done yet" in str(rep)
    assert "Traceback" not in str(rep)


def test_stub_module_itself_reads_not_done(tmp_path):
    """Graded directly (bypassing the file check), the stub still reads as not done, not a traceback."""
    import importlib.util

    from tkcourse import stubs
    path = tmp_path / "stub_vector_add.py"  # a real file: on a GPU, @triton.jit reads its kernel's source
    path.write_text(stubs.expected("vector_add"))
    spec = importlib.util.spec_from_file_location("stub_vector_add", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rep = check.run("vector_add", module=mod, quiet=True)
    assert rep.status == "todo", rep


def test_integer_scratch_allocations_keep_their_canary():
    """A launcher's integer scratch buffer (a TMA descriptor workspace, say) is no store past the end."""
    from tkcourse.check.core import poisoned_allocations

    with poisoned_allocations() as allocs:
        scratch = torch.empty(128, dtype=torch.int8)
        scratch.fill_(7)
        out = torch.empty(5)
        out.fill_(1.0)
    assert all(a.canary_intact() for a in allocs)
    with poisoned_allocations() as allocs:
        out = torch.empty(5)
    out.as_strided((6,), (1,))[5] = 2.0  # one element past the end
    assert not allocs[0].canary_intact() and allocs[0].first_overwrite() == 0
