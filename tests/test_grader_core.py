"""The graders' shared machinery (tkcourse.check.core): inputs, aliasing, changed inputs, traced launches,
seeded sizes and the runner that never dies. The lesson files plant whole mistakes; this checks the parts."""

import types

import numpy as np
import pytest
import torch
import triton
import triton.language as tl
from helpers import planted_file

from tkcourse import check, mode, traffic
from tkcourse.check import core


def test_strided_makers_keep_values_and_put_the_pad_in_the_gaps():
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    for make, stride in ((core.row_padded, (11, 1)), (core.sliced_rows, (8, 1)), (core.transposed, (1, 3))):
        v = make(x)
        assert torch.equal(v, x) and v.stride() == stride, make.__name__
        if make is not core.transposed:  # the storage between the rows is the loud pad value
            flat = torch.empty(0).set_(v.untyped_storage())
            assert (flat == core.INPUT_PAD).sum() >= v.stride(0) - 4
    s = core.strided(torch.arange(5.0), 3)
    assert s.stride() == (3,) and torch.equal(s, torch.arange(5.0))
    assert torch.empty(0).set_(s.untyped_storage())[1] == core.INPUT_PAD  # what a contiguous read sees


def test_random_sizes_reproduce_span_the_range_and_put_one_in_the_top_quarter():
    for seed in range(20):
        s, sizes = core.random_sizes(3, 2, 400_000, seed=seed)
        assert s == seed and sizes == core.random_sizes(3, 2, 400_000, seed=seed)[1]
        assert sizes[0] >= 100_000 and all(2 <= n <= 400_000 for n in sizes)
        assert not any(n > 2 and n & (n - 1) == 0 for n in sizes)
    assert len({tuple(core.random_sizes(3, 2, 400_000, seed=k)[1]) for k in range(5)}) == 5


def test_the_seed_comes_from_the_environment_and_is_in_the_label(monkeypatch):
    monkeypatch.setenv("TKCOURSE_CHECK_SEED", "123")
    assert core.random_sizes(2, 1, 100)[0] == 123
    assert "TKCOURSE_CHECK_SEED=123" in core.seeded("n=5", 123)
    monkeypatch.setenv("TKCOURSE_CHECK_SEED", "not a number")
    assert core.grading_seed() == 17


def test_storage_overlap_and_alias_case():
    big = torch.zeros(100)
    assert core.storage_overlap(big[:50], big[40:60]) and not core.storage_overlap(big[:50], big[50:])
    assert not core.storage_overlap(big, torch.zeros(100))
    x = torch.ones(10)
    assert "returned x itself" in core.alias_case("c", x, {"x": x}, "add").hint
    assert "a view of x" in core.alias_case("c", x.view(2, 5), {"x": x}, "add").hint
    assert core.alias_case("c", x.clone(), {"x": x}) is None


def test_snapshot_sees_values_nans_and_shape_changes():
    x, y = torch.tensor([1.0, float("nan"), 3.0]), torch.ones(2, 3)
    snap = core.Snapshot({"x": x, "y": y, "n": 3})
    assert snap.case("c") is None  # NaN == NaN here: an untouched NaN input is no change
    x[2] = 4.0
    assert snap.changed() == [("x", 1, 3)] and "changed its input x" in snap.case("c", "f").hint
    y.t_()  # same values, another shape: still a changed input
    assert "y" in [c[0] for c in snap.changed()]


def test_zero_size_allocations_are_not_poisoned():
    with core.poisoned_allocations() as allocs:
        e = torch.empty(0, dtype=torch.uint8)
        e.set_(torch.zeros(8, dtype=torch.uint8).untyped_storage())  # what the tracer does
        full = torch.empty(3)
    assert e.numel() == 8 and len(allocs) == 1 and torch.isnan(full).all()


@triton.jit
def _copy(x_ptr, out_ptr, n, SHIFT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs + SHIFT, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def _copier(shift, alloc=torch.zeros_like):
    def copy(x):
        out = alloc(x)
        _copy[(1,)](x, out, x.numel(), SHIFT=shift, BLOCK=triton.next_power_of_2(x.numel()))
        return out
    return copy


@pytest.mark.parametrize("shift, where", [(1, "one element past the end of out"), (-1, "before the start of out"),
                                          (1 << 20, "far past the end of out")])
def test_attempt_reports_an_out_of_bounds_store_into_a_zero_filled_output(shift, where):
    x = torch.randn(37, device=mode.DEVICE)
    guard = torch.zeros(4096, device=mode.DEVICE)  # a neighbour in memory: the stray store must not reach it
    case = core.attempt("c", _copier(shift), (x,), x)
    assert case.status == "fail" and where in case.hint and "tracer" in case.detail, case
    assert not guard.any()


def test_attempt_passes_a_correct_copy_and_a_full_allocation():
    x = torch.randn(37, device=mode.DEVICE)
    assert core.attempt("c", _copier(0, alloc=lambda t: torch.full_like(t, 7.0)), (x,), x).status == "pass"


@pytest.mark.parametrize("fn, status, hint", [
    (lambda x: (x.clone(), 1), "fail", "returns a tuple"),
    (lambda x: x, "fail", "returned x itself"),
    (lambda x: x.mul_(2).clone(), "fail", "changed its input x"),
    (lambda x: 1 / 0, "error", "your code raised"),
    (lambda x: None, "todo", "return the output tensor"),
])
def test_attempt_classifies_what_a_launcher_returns(fn, status, hint):
    x = torch.randn(8)
    case = core.attempt("c", fn, (x,), x.clone())
    assert case.status == status and hint in case.hint, case


def test_guarded_turns_a_grader_crash_into_one_error_case():
    def grader():
        yield core.Case("first", "pass")
        raise AttributeError("'module' object has no attribute 'add'")
    cases = list(core.guarded(grader()))
    assert [c.status for c in cases] == ["pass", "error"] and "lacks a name" in cases[1].hint
    cases = list(core.guarded(iter([core.Case("a", "pass")])))
    assert len(cases) == 1

    def exits():
        raise SystemExit(3)
        yield
    (case,) = core.guarded(exits())
    assert "sys.exit" in case.hint


def test_run_prints_a_report_for_a_module_that_breaks_the_grader(capsys):
    rep = check.run("softmax", module=types.SimpleNamespace(softmax=lambda x: "not a tensor"))
    out = capsys.readouterr().out
    assert rep.status == "fail" and "softmax" in out and "Traceback" not in out


def test_oob_case_for_a_raw_address_says_it_lies_in_no_argument():
    oob = traffic.OutOfBounds("load", (0, 0, 0), "out", np.array([-10**9]), 16, "k", derived=False)
    trace = traffic.Trace("k", [], [], [oob], [traffic.Launch("k", (1, 1, 1))])
    case = core.oob_case("c", traffic.OutOfBoundsError(trace))
    assert "lies in no tensor argument" in case.hint and "past the end" not in case.hint


def test_isolated_grading_returns_the_childs_report(monkeypatch):
    monkeypatch.setenv("TKCOURSE_SOLUTIONS", "1")
    rep = check.run("autotune", quiet=True, isolate=True)
    assert rep.passed and rep.cases and rep.source.endswith("autotune.py"), rep


@pytest.mark.parametrize("code, words", [
    ("import os; os.abort()", "killed by SIGABRT"),
    ("raise SystemExit(134)", "exit status 134"),
])
def test_a_child_that_dies_is_a_report_with_a_hint(code, words):
    rep = check._run_in_child("vector_add", code=code)
    assert rep.status == "error" and words in rep.first_problem().detail
    assert "TRITON_INTERPRET=1 python -m tkcourse check vector_add" in rep.first_problem().hint
    assert "Traceback" not in str(rep).split("First problem")[0]


def test_a_child_that_hangs_is_stopped(monkeypatch):
    monkeypatch.setenv("TKCOURSE_CHECK_TIMEOUT", "1")
    rep = check._run_in_child("vector_add", code="import time; time.sleep(30)")
    assert rep.status == "error" and "more than 1 s" in rep.first_problem().hint


def test_on_a_gpu_bf16_and_big_calls_run_untraced(monkeypatch):
    """The trace re-runs a GPU launch in the interpreter: no bfloat16 there, and big tensors are slow."""
    from tkcourse import mode
    monkeypatch.setattr(mode, "INTERPRET", False)
    assert core.traceable([torch.ones(8), 3])
    assert not core.traceable([torch.ones(8, dtype=torch.bfloat16)])
    assert not core.traceable([torch.empty(core.TRACE_MAX_BYTES // 4 + 1)])


def test_a_zero_filled_output_does_not_hide_elements_never_written():
    """torch.zeros defeats the NaN poison; the tracer still knows which elements no store reached."""
    from solutions import vector_add as sol

    def add(x, y, BLOCK=1024):
        out = torch.zeros_like(x)
        sol.add_kernel[(x.numel() // BLOCK,)](x, y, out, x.numel(), BLOCK=BLOCK)  # the grid rounds down
        return out
    rep = check.run("vector_add", module=types.SimpleNamespace(add=add), quiet=True)
    bad = rep.first_problem()
    assert rep.status == "fail" and "never wrote" in bad.detail and "triton.cdiv" in bad.hint, rep


def test_a_diagnosis_that_raises_gives_a_plain_failure():
    """A lesson's hint function meets whatever the learner returned; if it raises, the case still fails cleanly."""
    def broken(o, e, wrong):
        raise IndexError("a diagnosis that did not expect this output")

    case = core.compare("case", torch.zeros(4), torch.ones(4, dtype=torch.float64), dtype=torch.float32,
                        diagnose=broken)
    assert case.status == "fail" and "4 of 4 values wrong" in case.detail and case.hint


# ----- hints that name the mistake made: planted kernels ----------------------------------------


@triton.jit
def _add_with_and(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n and offsets >= 0  # Python's `and`: only the second test is kept
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)


def _add_module(kernel):
    def add(x, y, BLOCK=1024):
        if x.shape != y.shape:
            raise ValueError("shape")
        x, y = x.contiguous(), y.contiguous()
        out = torch.empty_like(x)
        kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, out, x.numel(), BLOCK=BLOCK)
        return out
    return types.SimpleNamespace(add=add, __name__="planted")


@pytest.mark.skipif(not mode.INTERPRET, reason="compiled, Triton turns `and` into a logical and (with a warning)")
def test_pythons_and_between_tensor_tests_is_named_not_the_store_mask():
    rep = check.run("vector_add", module=_add_module(_add_with_and), quiet=True)
    hint = rep.first_problem().hint
    assert rep.status == "fail" and "Python's `and`" in hint and "(offsets < n) & (offsets >= 0)" in hint, rep
    assert "Mask the store" not in hint


@triton.jit
def _mm_step(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
             BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, A_STRIDED_STEP: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_ptrs = a_ptr + rm[:, None] * sam + rk[None, :] * sak
    b_ptrs = b_ptr + rk[:, None] * sbk + rn[None, :] * sbn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        left = K - k * BK
        a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (rk[None, :] < left), other=0.0)
        b = tl.load(b_ptrs, mask=(rk[:, None] < left) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b, input_precision="ieee")
        if A_STRIDED_STEP:
            a_ptrs += BK * sak
        else:
            a_ptrs += BK  # the mistake: right only while a's columns are contiguous (sak == 1)
        b_ptrs += BK * sbk
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc.to(c_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def _mm_module(strided_step=False):
    def matmul(a, b):
        if a.shape[1] != b.shape[0] or a.dtype != b.dtype:
            raise ValueError("shapes or dtypes")
        (M, K), N = a.shape, b.shape[1]
        c = torch.empty((M, N), dtype=a.dtype, device=a.device)
        _mm_step[(triton.cdiv(M, 32), triton.cdiv(N, 32))](
            a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride(), BM=32, BN=32, BK=16,
            A_STRIDED_STEP=strided_step)
        return c
    return types.SimpleNamespace(matmul=matmul, __name__="planted")


def test_a_k_step_without_the_stride_is_named():
    """a_ptrs += BLOCK_K passes every row-major case and fails on a transposed A: the hint names the step,
    not the pointers' construction (which used both strides)."""
    rep = check.run("matmul", module=_mm_module(False), quiet=True)
    bad = rep.first_problem()
    assert rep.status == "fail" and "a transposed" in bad.label and len(rep.cases) > 5, rep  # row-major ones pass
    assert "a_ptrs += BLOCK_K * stride_ak" in bad.hint and "b_ptrs" not in bad.hint, bad


def _decode_with_table_stride(extra):
    """Decode attention as the reference launches it, but the block table's row stride is off by ``extra``."""
    from solutions import decode_attention as sol

    def decode_attention(q, k_cache, v_cache, seq_lens, block_table, sm_scale=None):
        sm_scale = sol.check_inputs(q, k_cache, v_cache, seq_lens, block_table, sm_scale)
        B, Hq, D = q.shape
        _, page_size, Hkv, _ = k_cache.shape
        max_pages = block_table.shape[1]
        splits, split_tokens = sol.split_plan(B, Hkv, max_pages, page_size, sol.BLOCK_N)
        m = torch.empty((B, Hq, splits), device=q.device, dtype=torch.float32)
        l = torch.empty_like(m)
        acc = torch.empty((B, Hq, splits, D), device=q.device, dtype=torch.float32)
        out = torch.empty_like(q)
        group = Hq // Hkv
        sol.decode_split[(B * Hkv, splits)](
            q, k_cache, v_cache, seq_lens, block_table, m, l, acc, max_pages + extra, split_tokens,
            sm_scale * sol.LOG2E, splits, HKV=Hkv, GROUP=group, BLOCK_G=max(16, triton.next_power_of_2(group)),
            HEAD_DIM=D, PAGE_SIZE=page_size, BLOCK_N=sol.BLOCK_N)
        sol.decode_combine[(B * Hq,)](m, l, acc, out, HEAD_DIM=D, SPLITS=splits,
                                       BLOCK_S=triton.next_power_of_2(splits))
        return out
    return types.SimpleNamespace(decode_attention=decode_attention, reference=sol.reference, __name__="planted")


def test_a_wrong_block_table_stride_names_the_lookup_not_the_mask():
    """The loads are masked; what ran past the table's end is the row index into it: the hint says so."""
    rep = check.run("decode_attention", module=_decode_with_table_stride(3), quiet=True)
    bad = rep.first_problem()
    assert rep.status == "fail" and "block_table" in bad.hint.lower() and "row stride" in bad.hint, rep
    assert "mask the load" not in bad.hint.lower() and "offsets < n" not in bad.hint + bad.detail, bad


@triton.jit
def _add_then_nan(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    nan = tl.sqrt(x * 0.0 - 1.0)  # sqrt(-1): NaN, computed and stored; numpy warns in the interpreter
    tl.store(out_ptr + offsets, tl.where(offsets == n - 1, nan, x + tl.load(y_ptr + offsets, mask=mask)), mask=mask)


def test_a_nan_the_kernel_computed_is_not_called_unwritten_and_warnings_wait_for_the_verdict(capfd):
    rep = check.run("vector_add", module=_add_module(_add_then_nan))
    out, err = capfd.readouterr()
    bad = rep.first_problem()
    assert rep.status == "fail" and "1 computed by your kernel (it stored NaN there)" in bad.detail, rep
    assert "never written" not in bad.detail + bad.hint and "stored NaN" in bad.hint, bad
    if mode.INTERPRET:  # numpy's warning, captured: shown with the case it explains, never raw
        assert "interpreter warned: RuntimeWarning: invalid value encountered in sqrt" in bad.detail, bad
        assert "RuntimeWarning" not in err and out.count("RuntimeWarning") == 1, (out, err)


def test_a_nan_never_written_is_called_so():
    """The other half: the poison left in place (the tracer saw no store there) reads as never written."""
    from solutions import vector_add as sol

    def add(x, y, BLOCK=1024):
        out = torch.empty_like(x)
        sol.add_kernel[(max(1, x.numel() // BLOCK),)](x, y, out, x.numel(), BLOCK=BLOCK)  # the grid rounds down
        return out
    bad = check.run("vector_add", module=types.SimpleNamespace(add=add), quiet=True).first_problem()
    assert "never written by your kernel" in bad.detail and "computed" not in bad.detail, bad


def test_after_check_runs_the_learners_module_only_once_it_passes(monkeypatch):
    """The one rule for every cell after a check: the learner's module once it passes, the reference until
    then, with a line that says which ran and why."""
    from solutions import vector_add as ref
    from tkcourse import labels

    mine = types.ModuleType("exercises.vector_add")  # what tkcourse.exercise returns once the file is edited
    report = check.Report("vector_add", "exercises/vector_add.py", [check.Case("n=1", "fail")]).finish()
    module, ran, line = labels.after_check(report, mine, ref)
    assert module is ref and not ran.learner and ran.label() == "the reference kernel"
    assert line.startswith("running the reference kernel: exercises/vector_add.py does not pass the check yet")
    assert labels.after_check(report, mine)[0] is ref  # the reference by default: solutions.<lesson>
    report = check.Report("vector_add", "exercises/vector_add.py", [check.Case("n=1", "pass")]).finish()
    module, ran, line = labels.after_check(report, mine, ref)
    assert module is mine and ran.learner and line == "running your kernel: exercises/vector_add.py passes the check"
    monkeypatch.delenv("TKCOURSE_SOLUTIONS", raising=False)  # as a learner
    monkeypatch.setattr(ref, "__tkcourse_whose__", labels.Whose("vector_add", False, "not done yet"), raising=False)
    todo = check.Report("vector_add", "exercises/vector_add.py", status="todo")  # the reference stands in for a stub
    assert labels.after_check(todo, ref, ref)[2].endswith("exercises/vector_add.py is not done yet")
    module, ran, line = labels.after_check(report, ref, ref)  # edited and passing, but loaded as the stub
    assert module is ref and "re-run the notebook's first cell" in line


@triton.jit
def _add_twice(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    s = tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, s + s, mask=mask)  # a mistake no lesson hint models


def test_a_hint_that_cannot_name_the_mistake_says_what_it_saw():
    bad = check.run("vector_add", module=_add_module(_add_twice), quiet=True).first_problem()
    assert "what the grader sees: every value is wrong, each is the expected value times 2" in bad.hint, bad


def test_out_of_bounds_hints_name_the_lessons_mask_not_vector_adds():
    """What an out-of-bounds hint says to mask comes from the lesson's grader; without one, it names no
    lesson's variables, and the detail says only what the tracer saw."""
    oob = traffic.OutOfBounds("store", (3, 0, 0), "out", np.arange(40, 48), 40, "k")
    trace = traffic.Trace("k", [], [], [oob], [traffic.Launch("k", (4, 1, 1))])
    plain = core.oob_case("c", traffic.OutOfBoundsError(trace))
    assert "stores 8 elements past the end of out (offsets 40..47" in plain.detail
    assert "offsets < n" not in plain.hint + plain.detail and core.EDGE_MASK in plain.hint, plain
    named = core.oob_case("c", traffic.OutOfBoundsError(trace), mask="(offs_m[:, None] < M) & (offs_n[None, :] < N)")
    assert "Mask the store with (offs_m[:, None] < M) & (offs_n[None, :] < N)" in named.hint, named


def test_a_loop_that_changes_a_values_type_gets_a_hint_that_names_it():
    """Triton's compiler on a GPU refuses a loop whose carried value changes type (an fp16 accumulator
    that tl.dot turns into fp32), where the interpreter runs it: the hint says so, not just "it raised"."""
    from tkcourse.check.core.reports import error_case

    exc = RuntimeError("at 14:4:\n    for k in range(0, steps):\n    ^\nAssertionError('Loop-carried variable acc has "
                       "initial type <[64, 64], fp16> but is re-assigned to <[64, 64], fp32> in loop!')")
    case = error_case("M=67 N=45 K=29 float32", exc)
    assert case.status == "error" and "accumulate in fp32" in case.hint and "changes its type" in case.hint
    other = error_case("M=1", RuntimeError("index out of range"))
    assert "accumulate" not in other.hint  # only that error gets that hint


@pytest.mark.skipif(not mode.INTERPRET, reason="on a GPU Triton's compiler names the kernel's line in its message")
def test_an_error_inside_the_kernel_is_reported_at_the_kernels_line(tmp_path):
    """The interpreter re-raises an error of the kernel's body as InterpreterError(...) from e, whose traceback
    stops at the launch: the hint names the kernel's line (in e.__cause__), not the launcher's."""
    mod, lines = planted_file(tmp_path, "vector_add", [("    pid = tl.program_id(axis=0)", "    who = tl.program_id(axis=0)")])
    line = next(i for i, t in enumerate(lines, 1) if "offsets = pid * BLOCK" in t)
    bad = check.run("vector_add", module=mod, quiet=True).first_problem()
    assert bad.status == "error" and "'pid' is not defined" in bad.detail, bad
    assert bad.hint.endswith(f": vector_add.py:{line} (add_kernel)"), bad


def test_where_an_error_was_raised_follows_the_chain_to_the_learners_innermost_line():
    """``learners_frame`` walks __cause__ / __context__ (a cycle once), keeps the outer line where no inner one is
    the learner's, stops at an error the learner's code raised itself, and ignores folders that only contain the
    word (a checkout in ~/solutions-course)."""
    from tkcourse.check.core.reports import error_case, learners_frame

    learner, library = "/home/a/exercises/lesson.py", "/home/a/.venv/lib/triton/interpreter.py"
    lib = {}
    exec(compile("def launch(e=None):\n    raise RuntimeError('launch') from e", library, "exec"), lib)

    def run(code, filename=learner):
        try:
            exec(compile(code, filename, "exec"), dict(lib))
        except Exception as e:
            return e
        raise AssertionError("did not raise")

    # the learner's launcher (line 1) calls the library, which raises from an error of the kernel (line 3)
    inner = run("\n\nraise KeyError('kernel')")
    lib["e"] = inner
    outer = run("launch(e)")
    assert outer.__cause__ is inner and outer.__traceback__ is not None
    assert (learners_frame(outer).filename, learners_frame(outer).lineno) == (learner, 3)
    assert "lesson.py:3 (<module>)" in error_case("c", outer).hint
    inner.__context__ = outer  # a cycle: walked once
    assert learners_frame(outer).lineno == 3
    # no learner's frame in the cause: the launcher's line stays
    lib["e"] = run("raise KeyError('deep')", library)
    assert learners_frame(run("\nlaunch(e)")).lineno == 2
    # an error the learner raised while handling another: its own line, not the handled one's
    handled = run("try:\n    raise KeyError('x')\nexcept KeyError:\n    raise ValueError('mine')")
    assert isinstance(handled.__context__, KeyError) and learners_frame(handled).lineno == 4
    # a folder that only contains the word is not the learner's: no place named
    assert learners_frame(run("raise KeyError('x')", "/home/solutions-course/.venv/triton/x.py")) is None
    assert error_case("c", run("raise KeyError('x')", library)).hint == "your code raised; the message above says where"


@pytest.mark.parametrize("message, words", [
    ("arange's range must be a power of 2", "must be a power of two"),
    ("arange's end argument must be greater than the start argument", "got a BLOCK of 0"),
    ("Both operands must be same dtype. Got fp32 and fp16", "tl.dot takes two operands of one dtype"),
    ("Cannot make_shape_compatible: incompatible dimensions at index 0: 32 and 16", "two blocks of different shapes"),
    ("Input shapes should have M >= 1, N >= 1 and K >= 16", "the side it sums over (K"),
    ("Pointer argument (at 2) cannot be accessed from Triton (cpu tensor?)", "lies in the CPU's memory"),
])
def test_error_case_says_what_tritons_own_refusals_mean(message, words):
    """Triton's interpreter re-raises a kernel's error as InterpreterError(repr(e)) from e: the message is read
    along the chain, and the hint says what it means instead of only where it was raised."""
    from triton.runtime.errors import InterpreterError

    try:
        try:
            raise ValueError(message)
        except ValueError as inner:
            raise InterpreterError(repr(inner)) from inner
    except InterpreterError as exc:
        case = core.error_case("c", exc)
    assert case.status == "error" and words in case.hint, case
    assert core.error_case("c", RuntimeError("something else")).hint.startswith("your code raised"), case


def test_a_python_name_error_is_not_taken_for_the_compilers():
    """A typo in the learner's Python (NameError: name 'x' is not defined) keeps the plain hint; only the
    compiler's NameError('x is not defined'), a name defined in one branch of an if, gets the branch hint."""
    try:
        undefined_name  # noqa: F821, B018
    except NameError as exc:
        typo = core.error_case("c", exc)
    assert "one branch of an if" not in typo.hint and typo.hint.startswith("your code raised"), typo
    compiled = core.error_case("c", RuntimeError("at 4:4:\nNameError('v is not defined')"))
    assert "one branch of an if" in compiled.hint, compiled


def test_a_lesson_hint_that_raises_leaves_the_default_hint():
    """oob_hint, error_hint and trace_hint are a grader's guesses about a learner's mistake: one that raises on an
    input nobody foresaw gives no hint, and the case keeps core's own, never a crash of the grader."""
    def broken(*args):
        raise IndexError("a guess that went wrong")

    def raising(x):
        raise RuntimeError("the learner's launcher")

    case = core.attempt("c", raising, (torch.ones(4),), torch.ones(4), error_hint=broken)
    assert case.status == "error" and case.hint.startswith("your code raised"), case
    x = torch.randn(37, device=mode.DEVICE)
    case = core.attempt("c", _copier(0), (x,), x * 2, trace_hint=broken)  # a wrong result, the launch traced
    assert case.status == "fail" and case.hint, case
    case = core.attempt("c", _copier(1 << 20), (x,), x, oob_hint=broken)
    assert case.status == "fail" and "far past the end of out" in case.hint, case
