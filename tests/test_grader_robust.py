"""Every grader, given a learner's function that returns anything but the right tensor or raises anything,
reports a failing (or erroring) case of its own: it never raises, never passes, and never ends in the guard's
"grading (after n cases)" error, which would mean the grader itself broke (sys.exit is the one exception: the
guard names it). The graders' hint functions (diagnose, oob_hint, trace_hint, error_hint) see these outputs
first, so this is their guard too."""

import types

import pytest
import torch

from tkcourse import check

#: lesson -> the function its grader calls first
LESSONS = {"vector_add": "add", "softmax": "softmax", "matmul": "matmul", "online_softmax": "softmax",
           "flash_attention": "attention", "flash_attention_backward": "attention_backward",
           "rmsnorm": "rmsnorm", "decode_attention": "decode_attention", "int4_matmul": "matmul", "hopper": "matmul"}


def _first(*args):
    return next((a for a in args if isinstance(a, torch.Tensor)), torch.zeros(4))


def _raise(exc):
    def fn(*args, **kwargs):
        raise exc
    return fn


JUNK = {
    "None": lambda *a, **k: None,
    "an int": lambda *a, **k: 3,
    "a string": lambda *a, **k: "out",
    "a list": lambda *a, **k: [1.0, 2.0],
    "a dict": lambda *a, **k: {"out": _first(*a)},
    "a generator": lambda *a, **k: (x for x in range(3)),
    "a tuple of tensors": lambda *a, **k: (torch.zeros(2), torch.zeros(2)),
    "a 0-d tensor": lambda *a, **k: torch.tensor(1.0),
    "an empty tensor": lambda *a, **k: torch.empty(0),
    "a tensor of another shape": lambda *a, **k: torch.zeros(3, 5, 7),
    "an int32 tensor": lambda *a, **k: torch.zeros_like(_first(*a), dtype=torch.int32),
    "a bool tensor": lambda *a, **k: torch.zeros_like(_first(*a), dtype=torch.bool),
    "a complex tensor": lambda *a, **k: torch.zeros_like(_first(*a), dtype=torch.complex64),
    "NaN everywhere": lambda *a, **k: torch.full_like(_first(*a), float("nan")),
    "inf everywhere": lambda *a, **k: torch.full_like(_first(*a), float("inf")),
    "the input itself": lambda *a, **k: _first(*a),
    "a meta tensor": lambda *a, **k: torch.empty(_first(*a).shape, device="meta"),
    "a numpy array": lambda *a, **k: _first(*a).cpu().numpy(),
    "ValueError": _raise(ValueError("no")),
    "IndexError": _raise(IndexError("no")),
    "RecursionError": _raise(RecursionError("deep")),
    "MemoryError": _raise(MemoryError()),
    "SystemExit": _raise(SystemExit(1)),
}


@pytest.mark.parametrize("lesson", LESSONS)
def test_a_grader_reports_whatever_the_learners_function_does(lesson):
    name = LESSONS[lesson]
    for what, fn in JUNK.items():
        names = {name: fn, "attention_forward": fn} if lesson == "flash_attention" else {name: fn}
        rep = check.run(lesson, module=types.SimpleNamespace(**names, __name__="planted"), quiet=True)
        bad = rep.first_problem()
        assert rep.status in ("fail", "error", "todo") and bad is not None, f"{lesson}, {what}: {rep}"
        if what == "SystemExit":
            assert "sys.exit" in bad.hint, f"{lesson}, {what}: {rep}"
        else:
            assert not bad.label.startswith("grading (after"), f"{lesson}, {what}: the grader broke: {rep}"


@pytest.mark.parametrize("lesson, names", [
    ("autotune", ("config_space", "shared_memory_bytes", "prune")),
    ("autotune", ("config_space",)),
    ("launch", ("softmax", "plan_key", "SoftmaxPlan")),
])
def test_the_graders_of_plans_and_configs_report_whatever_the_functions_do(lesson, names):
    """Lessons 04 and 08 grade functions that return configs and plans, not tensors: the same junk, the same rule."""
    for what, fn in JUNK.items():
        rep = check.run(lesson, module=types.SimpleNamespace(**dict.fromkeys(names, fn), __name__="planted"),
                        quiet=True)
        bad = rep.first_problem()
        assert rep.status in ("fail", "error", "todo") and bad is not None, f"{lesson}, {what}: {rep}"
        assert what == "SystemExit" or not bad.label.startswith("grading (after"), f"{lesson}, {what}: {rep}"
