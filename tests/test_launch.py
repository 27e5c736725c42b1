"""Lesson 08: a launch plan made once per key; the grader catches each planted mistake with its hint.

Planted modules are the solution's own source with one mistake written in (``_mutant``), run as a
module of their own, so the grader sees exactly what a learner's file would give it.
"""

import types
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl
from helpers import assert_grader_catches, assert_softmax
from helpers import randn as _randn

from solutions import launch as lesson
from tkcourse import check, mode

DEV = mode.DEVICE
SOURCE = (Path(__file__).resolve().parents[1] / "solutions" / "launch.py").read_text()


GRID = "self.grid = (num_programs(x, x, self.BLOCK, self.num_warps, self.num_stages),)"


def _mutant(*edits, name="planted_launch"):
    """solutions/launch.py with each ``(old, new)`` of ``edits`` applied (each ``old`` found exactly once)."""
    text = SOURCE
    for old, new in edits:
        assert text.count(old) == 1, f"the planted edit no longer matches solutions/launch.py: {old!r}"
        text = text.replace(old, new)
    mod = types.ModuleType(f"solutions.{name}")
    mod.__package__ = "solutions"
    exec(compile(text, f"<planted {name}>", "exec"), mod.__dict__)
    return mod


def test_softmax_matches_torch_over_keys_and_reuses_plans():
    lesson._PLANS.clear()
    inputs = [_randn(8, 100), _randn(8, 100, seed=1), _randn(8, 300), _randn(40, 100), _randn(3, 100),
              _randn(8, 100, dtype=torch.float16), _randn(8, 128)[:, :100], _randn(100, 8).t(), _randn(1, 1)]
    outs = [lesson.softmax(x) for x in inputs]
    for x, y in zip(inputs, outs):
        assert_softmax(y, x, lesson.reference)
    assert len(lesson._PLANS) == len(inputs) - 1  # the second 8x100 float32 reused the first's plan
    assert outs[0].data_ptr() != outs[1].data_ptr()


def test_plan_key_separates_what_a_plan_depends_on():
    x = torch.randn(8, 100, device=DEV)
    assert lesson.plan_key(x) == lesson.plan_key(torch.randn(8, 100, device=DEV))
    buf = torch.randn(804, device=DEV)
    for other in (torch.randn(9, 100, device=DEV), torch.randn(8, 101, device=DEV), x.half(),
                  torch.empty(8, 100, device="meta"), torch.randn(8, 128, device=DEV)[:, :100], buf[1:801].view(8, 100)):
        assert lesson.plan_key(other) != lesson.plan_key(x)
    hash(lesson.plan_key(x))


def test_planned_call_does_no_planning(monkeypatch):
    x = _randn(8, 100)
    plan = lesson.SoftmaxPlan(x)
    calls = []
    real = triton.next_power_of_2
    monkeypatch.setattr(triton, "next_power_of_2", lambda n: calls.append(n) or real(n))
    assert_softmax(plan(x), x, lesson.reference)
    assert calls == []


@pytest.mark.parametrize("bad, message", [
    (lambda: torch.ones(8, device=DEV), "2-D"),
    (lambda: torch.ones(0, 4, device=DEV), "empty"),
    (lambda: torch.zeros(1, lesson.MAX_COLS + 1, device=DEV), "online"),
    (lambda: [[1.0, 2.0]], "torch.Tensor"),
])
def test_bad_input_raises_valueerror(bad, message):
    with pytest.raises(ValueError, match=message):
        lesson.softmax(bad())


def test_grader_passes_the_solution_and_a_faithful_copy():
    assert check.run("launch", module=lesson, quiet=True).passed
    assert check.run("launch", module=_mutant(), quiet=True).passed


# ----- planted mistakes, each caught with the hint that names it ------------------------------

PLANTED = [
    ("one plan for every input (reused for longer rows)",
     [("_PLANS.get(plan_key(x))", "_PLANS.get('one')"), ("_PLANS[plan.key] = plan", "_PLANS['one'] = plan")],
     "softmax reused the plan made for 8x100 float32 (call 1) for 8x300 float32: they differ in columns. BLOCK"),
    ("a key without the dtype",
     [("x.stride(), x.dtype, x.device", "x.stride(), x.device")], "put x.dtype in it"),
    ("a key without the device",
     [("x.stride(), x.dtype, x.device", "x.stride(), x.dtype")], "put x.device in it"),
    ("a key without the alignment",
     [(", x.data_ptr() % 16 == 0)", ")")], "put x.data_ptr() % 16 == 0 in it"),
    ("a key holding the address",
     [("x.data_ptr() % 16 == 0)", "x.data_ptr())")], "it holds the tensor's address"),
    ("a key with the size in place of the shape",
     [("return (tuple(x.shape), x.stride(), x.dtype, x.device, x.data_ptr() % 16 == 0)",
       "return (x.numel(), x.stride(), x.dtype, x.device, x.data_ptr() % 16 == 0)")], "not x.numel()"),
    ("a key that is a list",
     [("return (tuple(x.shape), x.stride(), x.dtype, x.device, x.data_ptr() % 16 == 0)",
       "return [tuple(x.shape), x.stride(), x.dtype, x.device]")], "a list is not hashable"),
    ("the launcher's own key, without the dtype",
     [("_PLANS.get(plan_key(x))", "_PLANS.get((tuple(x.shape), x.stride()))"),
      ("_PLANS[plan.key] = plan", "_PLANS[(tuple(x.shape), x.stride())] = plan")],
     "they differ in dtype. The output was allocated in the other dtype"),
    ("a stale grid: the launcher keys on the row length only",
     [("_PLANS.get(plan_key(x))", "_PLANS.get((x.shape[1], x.stride(1), x.dtype))"),
      ("_PLANS[plan.key] = plan", "_PLANS[(x.shape[1], x.stride(1), x.dtype)] = plan"),
      ("out = torch.empty(self.shape,", "out = torch.empty((x.shape[0], self.shape[1]),")],
     "they differ in rows"),
    ("planning redone on every call",
     [("plan = _PLANS.get(plan_key(x)) if isinstance(x, torch.Tensor) else None", "plan = None")],
     "planning redone on every call"),
    ("the plan works BLOCK out again in each call",
     [("BLOCK=self.BLOCK, NUM_STAGES", "BLOCK=triton.next_power_of_2(x.shape[1]), NUM_STAGES")],
     "the plan works its launch out again on every call"),
    ("one output buffer for every call",
     [("        ### BEGIN SOLUTION\n        out = torch.empty(self.shape, dtype=self.dtype, device=self.device)",
       "        ### BEGIN SOLUTION\n        if not hasattr(self, 'out'):\n"
       "            self.out = torch.empty(self.shape, dtype=self.dtype, device=self.device)\n        out = self.out")],
     "returned the same output tensor to two calls"),
    ("a plan whose stride is the column count",
     [("row_stride = n_cols if self.copy else x.stride(0)", "row_stride = n_cols")], "pass x.stride(0) as x's row stride"),
    # keys that hold part of the layout: two inputs share the partial key and differ in what it leaves out
    ("a key with the row stride alone",
     [("x.stride(), x.dtype, x.device", "x.stride(0), x.dtype, x.device")], "put the whole x.stride() in it"),
    ("a key with whether x is contiguous",
     [("x.stride(), x.dtype, x.device", "x.is_contiguous(), x.dtype, x.device")], "not whether x is contiguous"),
    ("a key with the element size for the dtype",
     [("x.stride(), x.dtype, x.device", "x.stride(), x.element_size(), x.device")], "put x.dtype itself in it"),
    ("a key with 8-byte alignment",
     [("x.data_ptr() % 16 == 0)", "x.data_ptr() % 8 == 0)")], "an address 8 bytes off that grid"),
    ("the launcher's own key, without the alignment",
     [("_PLANS.get(plan_key(x))", "_PLANS.get(plan_key(x)[:4])"), ("_PLANS[plan.key] = plan", "_PLANS[plan.key[:4]] = plan")],
     "they differ in 16-byte alignment. Triton compiles a kernel for a 16-byte aligned pointer"),
    # out's row stride: out is a new contiguous tensor, its rows n_cols apart whatever x's are
    ("out's row stride taken from x",
     [("self.ints = (row_stride, n_cols, n_rows, n_cols)", "self.ints = (row_stride, x.stride(0), n_rows, n_cols)")],
     "your plan passes the wrong row stride for out: its rows are stored 200 elements apart, x's row stride"),
    ("x's row stride passed for both",
     [("self.ints = (row_stride, n_cols, n_rows, n_cols)", "self.ints = (row_stride, row_stride, n_rows, n_cols)")],
     "your plan passes the wrong row stride for out"),
    ("the two row strides in the other order",
     [("self.ints = (row_stride, n_cols, n_rows, n_cols)", "self.ints = (n_cols, row_stride, n_rows, n_cols)")],
     "x's row stride, out's row stride, n_rows, n_cols, in that order"),
    ("out's row stride left out",
     [("self.ints = (row_stride, n_cols, n_rows, n_cols)", "self.ints = (row_stride, n_rows, n_cols)")],
     "softmax_kernel was launched with the wrong arguments"),
    ("n_rows and n_cols in the other order",
     [("self.ints = (row_stride, n_cols, n_rows, n_cols)", "self.ints = (row_stride, n_cols, n_cols, n_rows)")],
     "the plan passes n_rows and n_cols the other way round: the kernel ran 100 rows (x has 8)"),
    ("the launcher's own key, with the row stride alone",
     [("_PLANS.get(plan_key(x))", "_PLANS.get((x.shape, x.stride(0), x.dtype))"),
      ("_PLANS[plan.key] = plan", "_PLANS[(x.shape, x.stride(0), x.dtype)] = plan")],
     "they differ in strides. The strides were the other input's"),
    # the launch's settings: right values either way, a slow launch on a GPU
    ("num_warps from stages_for",
     [("self.num_warps = warps_for(self.BLOCK)", "self.num_warps = stages_for(self.BLOCK, x.element_size())")],
     "num_warps = warps_for(BLOCK)"),
    ("num_warps of the row length, not BLOCK",
     [("self.num_warps = warps_for(self.BLOCK)", "self.num_warps = warps_for(n_cols)")], "the plan's launch settings are not the lesson's: num_warps"),
    ("num_warps and NUM_STAGES swapped in the launch",
     [("NUM_STAGES=self.num_stages,\n                                   num_warps=self.num_warps)",
       "NUM_STAGES=self.num_warps,\n                                   num_warps=self.num_stages)")],
     "num_warps and NUM_STAGES are swapped"),
    ("a grid of one program", [(GRID, "self.grid = (1,)")], "the grid is (num_programs(x, x, BLOCK"),
    ("a grid that is an int", [(GRID, "self.grid = num_programs(x, x, self.BLOCK, self.num_warps, self.num_stages)")],
     "with its comma"),
    ("BLOCK of the row count", [("self.BLOCK = triton.next_power_of_2(n_cols)  #", "self.BLOCK = triton.next_power_of_2(n_rows)  #")],
     "the plan's BLOCK is 8, shorter than a row of 100"),
    ("BLOCK the row length itself", [("self.BLOCK = triton.next_power_of_2(n_cols)  #", "self.BLOCK = n_cols  #")],
     "BLOCK must be a power of two"),
    ("x and out in the other order", [("softmax_kernel[self.grid](x, out,", "softmax_kernel[self.grid](out, x,")],
     "x goes first and the new output second"),
    ("the last plan reused while the shape fits",
     [("plan = _PLANS.get(plan_key(x)) if isinstance(x, torch.Tensor) else None",
       "plan = _PLANS.get('last')\n    if plan is not None and plan.shape != tuple(x.shape):\n        plan = None"),
      ("_PLANS[plan.key] = plan", "_PLANS['last'] = plan")],
     "reused the plan made for 8x100 float16 (call 6) for 8x100 float32 strides (200, 1): they differ in dtype and strides"),
    ("a plan made without the checks", [("plan = _new_plan(x)", "plan = SoftmaxPlan(x)")], "not SoftmaxPlan(x)"),
    ("the plan never kept", [("        _PLANS[plan.key] = plan\n", "")], "planning redone on every call"),
]


@pytest.mark.parametrize("name, edits, hint", PLANTED, ids=[p[0] for p in PLANTED])
def test_grader_catches_planted_mistake(name, edits, hint):
    assert_grader_catches("launch", _mutant(*edits), name, hint)


def test_lesson_02_kernel_not_done_is_named():
    mod = _mutant()

    @triton.jit
    def stub_kernel(x_ptr, out_ptr, a, b, c, d, BLOCK: triton.language.constexpr, NUM_STAGES: triton.language.constexpr):
        pass

    mod.softmax_kernel = stub_kernel
    rep = assert_grader_catches("launch", mod, "lesson 02 stub", "Finish lesson 02 first")
    assert rep.first_problem().label.startswith("lesson 02's softmax_kernel")
    # what the check saw in lesson 02's kernel follows as a sentence of its own
    assert "(tkcourse check softmax). What the check saw in that kernel: " in rep.first_problem().hint


@pytest.mark.parametrize("state, words", [("untouched", "your exercises/softmax.py is still the generated stub"),
                                           ("edited", "your exercises/softmax.py does not pass lesson 02's check yet")])
def test_the_hint_says_where_lesson_02_stands(monkeypatch, state, words):
    """A learner who reaches lesson 08 with lesson 02's exercise untouched is told so, not that it is wrong."""
    from tkcourse import stubs

    mod = _mutant()

    @triton.jit
    def stub_kernel(x_ptr, out_ptr, a, b, c, d, BLOCK: triton.language.constexpr, NUM_STAGES: triton.language.constexpr):
        pass

    stub_kernel.fn.__module__ = "exercises.softmax"  # as the learner's plan imports it
    real = stubs.status
    monkeypatch.setattr(stubs, "status", lambda name: stubs.Status(name, state, real(name).path)
                        if name == "softmax" else real(name))
    mod.softmax_kernel = stub_kernel
    rep = assert_grader_catches("launch", mod, "lesson 02 " + state, words)
    assert "Finish lesson 02 first" in rep.first_problem().hint
    # what the check saw in a stub (nothing written) is no advice; in a kernel the learner wrote it is
    assert ("What the check saw" in rep.first_problem().hint) == (state == "edited")


def test_lesson_02_kernel_storing_at_x_row_stride_is_lesson_02s():
    """A lesson-02 kernel that stores rows at x's row stride fails its own check (x's rows apart from out's there),
    so the plan's hint about out's row stride never blames a plan that passes the right one."""
    mod = _mutant()

    @triton.jit
    def x_pitch_kernel(x_ptr, out_ptr, x_row_stride, out_row_stride, n_rows, n_cols,
                       BLOCK: tl.constexpr, NUM_STAGES: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * x_row_stride + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        num = tl.exp(x - tl.max(x, axis=0))
        tl.store(out_ptr + row * x_row_stride + cols, num / tl.sum(num, axis=0), mask=cols < n_cols)

    mod.softmax_kernel = x_pitch_kernel
    rep = assert_grader_catches("launch", mod, "lesson 02 storing at x's pitch", "Finish lesson 02 first")
    assert rep.first_problem().label.startswith("lesson 02's softmax_kernel")


def test_the_exercise_stub_is_not_done():
    stub = types.ModuleType("exercises.planted_stub")
    stub.__package__ = "solutions"  # relative imports as the solution's (lesson 02 done)
    from tkcourse import stubs

    exec(compile(stubs.stub_text(SOURCE, "launch"), "<stub>", "exec"), stub.__dict__)
    rep = check.run("launch", module=stub, quiet=True)
    assert rep.status == "todo" and "plan_key returned None" in rep.first_problem().detail, rep


def test_grader_never_crashes_on_a_module_that_raises():
    mod = types.SimpleNamespace(plan_key=lambda x: (_ for _ in ()).throw(SystemExit(3)), __name__="planted")
    rep = check.run("launch", module=mod, quiet=True)
    assert rep.status == "error" and "sys.exit" in rep.first_problem().hint, rep
    assert check.run("launch", module=types.SimpleNamespace(__name__="empty"), quiet=True).status == "error"


def test_counting_restores_what_it_patched():
    from tkcourse.check.launch import counting

    mod = _mutant()
    real_plan, real_p2 = mod.SoftmaxPlan, triton.next_power_of_2
    with pytest.raises(RuntimeError), counting(mod) as counts:
        triton.next_power_of_2(5)
        mod.SoftmaxPlan(_randn(2, 3))
        raise RuntimeError
    assert counts == {"next_power_of_2": 2, "SoftmaxPlan": 1, "warps_for": 1, "stages_for": 1, "num_programs": 1}
    assert mod.SoftmaxPlan is real_plan and triton.next_power_of_2 is real_p2


# ----- the picture of lesson 08, from the bench table ------------------------------------------


def test_host_vs_gpu_plot_reads_the_new_columns():
    from tkcourse.plots.launch import host_vs_gpu, timed_rows

    row = dict(kernel="softmax", provider="triton", shape="4096x1024", dtype="float16", ms=0.012, host_us=30.0,
               graph_ms=0.005, gpu="NVIDIA H200", date="2026-12-01", triton="3.6.0", torch="2.11")
    rows = [row, {**row, "provider": "torch", "host_us": 11.0}, {**row, "shape": "8x8", "host_us": None}]
    assert len(timed_rows(rows)) == 2
    fig = host_vs_gpu(rows, labels={"triton": "reference kernel (triton)"})
    texts = {t.get_text() for t in fig.axes[0].texts}
    assert {" 30.0", " 12.0", " 5.0", " 11.0"} <= texts
    assert "reference kernel (triton)" in fig.axes[0].get_yticklabels()[0].get_text()
    with pytest.raises(ValueError, match="recorded before the column existed"):
        host_vs_gpu(rows[2:])


def test_a_provenance_label_names_every_date_of_its_rows():
    from tkcourse.plots.bench import provenance_label

    row = dict(gpu="NVIDIA H200", date="2026-12-04", triton="3.6.0", torch="2.11.0+cu130")
    assert provenance_label([row, row]) == "measured on NVIDIA H200, 2026-12-04, triton 3.6.0, torch 2.11.0+cu130"
    label = provenance_label([row, dict(row, date="2026-12-02")])
    assert "2026-12-02 and 2026-12-04" in label and provenance_label([]) == ""
