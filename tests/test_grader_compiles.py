"""The graders' last case in the interpreter: would Triton's compiler for a GPU take the learner's kernels?

The interpreter runs a kernel as Python and takes what a GPU's compiler refuses. Each planted kernel below is
right in the interpreter (every case of its lesson passes) and is refused by the compiler: the report fails at
the compile case, names the line of the learner's file, and its hint names the mistake."""

import json
import textwrap
from pathlib import Path

import pytest
from helpers import planted_file

from tkcourse import check, mode
from tkcourse.check.core import compiles

pytestmark = pytest.mark.skipif(not mode.INTERPRET, reason="on a GPU every launch compiles for real")


def _graded(tmp_path, lesson, edits):
    mod, lines = planted_file(tmp_path, lesson, edits)
    return check.run(lesson, module=mod, quiet=True), lines


def _line_of(lines, text):
    return next(i for i, t in enumerate(lines, 1) if text in t)


@pytest.mark.parametrize("lesson, edits, at, hint", [
    # the online softmax's running sum started as the int 0: numbers in the interpreter, a type change compiled
    ("online_softmax", [("    l = tl.zeros((), tl.float32)  # sum", "    l = 0  # sum")],
     "for block_start in tl.range(start, end, BLOCK", "l changes its type inside the loop: it starts as int32"),
    # FlashAttention's row sums started as one number: broadcast in the interpreter, a shape change compiled
    ("flash_attention", [("    l_i = tl.zeros([BLOCK_M], tl.float32)", "    l_i = 0.0")],
     "for start_n in range(0, hi, BLOCK_N)", "a block where it started as one value"),
    # int4: an fp16 accumulator, to which tl.dot adds fp32
    ("int4_matmul", [("acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
                      "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float16)")],
     "for k0 in range(0, half, BLOCK_K)", "an accumulator in 16 bits"),
    # the softmax's row loop run past the end and left by break
    ("softmax", [("    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0), num_stages=NUM_STAGES):\n",
                  "    for row in tl.range(tl.program_id(0), n_rows + 64, tl.num_programs(0), num_stages=NUM_STAGES):\n"
                  "        if row >= n_rows:\n            break\n")],
     "break", "loop has no break"),
    # decode: log2(e) taken from the module's global inside the kernel, the launcher passing sm_scale alone
    ("decode_attention", [("        sm_scale * LOG2E, splits,", "        sm_scale, splits,"),
                          ("* qk_scale  # (BLOCK_G", "* qk_scale * LOG2E  # (BLOCK_G")],
     "* qk_scale * LOG2E", "reads a module's global only when it is a tl.constexpr"),
])
def test_a_kernel_the_interpreter_runs_but_a_gpu_refuses_fails_at_the_compile_case(tmp_path, lesson, edits, at, hint):
    rep, lines = _graded(tmp_path, lesson, edits)
    bad = rep.first_problem()
    assert rep.status == "error" and bad.label == compiles.LABEL, rep
    assert all(c.status == "pass" for c in rep.cases[:-1]), rep  # right in the interpreter: only the compile fails
    assert f"exercises/{lesson}.py:{_line_of(lines, at)}" in bad.detail, bad
    assert hint in bad.hint and "on a GPU it would not compile" in bad.hint, bad


@pytest.mark.parametrize("lesson, kernels", [
    ("vector_add", ["add_kernel"]),
    ("online_softmax", ["online_softmax_kernel"]),  # its helpers compile with it
    ("flash_attention_backward", ["attn_bwd_dkdv", "attn_bwd_dq"]),
])
def test_the_reference_kernels_compile_and_the_case_says_which(lesson, kernels):
    import importlib

    rep = check.run(lesson, module=importlib.import_module(f"solutions.{lesson}"), quiet=True)
    last = rep.cases[-1]
    assert rep.passed and last.label == compiles.LABEL and last.status == "pass", rep
    assert all(k in last.detail for k in kernels), last


def test_switched_off_or_on_a_module_without_a_file_no_case_is_added(monkeypatch):
    from solutions import vector_add

    monkeypatch.setenv("TKCOURSE_GPU_COMPILE", "0")
    rep = check.run("vector_add", module=vector_add, quiet=True)
    assert rep.passed and all(c.label != compiles.LABEL for c in rep.cases)
    with compiles.recorded(object()) as seen:  # no __file__: nothing to import in another process
        vector_add.add(*[__import__("torch").ones(8)] * 2)
    assert seen == []


KERNELS = '''
import triton
import triton.language as tl

SCALE = 2.0


@triton.jit
def ok(x, n, B: tl.constexpr):
    o = tl.arange(0, B)
    tl.store(x + o, tl.load(x + o, mask=o < n) * 2, mask=o < n)


@triton.jit
def branch_type(x, n, B: tl.constexpr):
    v = 0
    if n > 3:
        v = tl.load(x + tl.arange(0, B))
    tl.store(x + tl.arange(0, B), v)


@triton.jit
def branch_only(x, n, B: tl.constexpr):
    if n > 3:
        v = tl.load(x + tl.arange(0, B))
    tl.store(x + tl.arange(0, B), v)


@triton.jit
def returns_in_loop(x, n, B: tl.constexpr):
    for i in range(0, n, B):
        if i > 4:
            return
        tl.store(x + i + tl.arange(0, B), 1.0)


@triton.jit
def continues(x, n, B: tl.constexpr):
    acc = 0.0
    for i in range(0, n, B):
        if i == 4:
            continue
        acc += tl.sum(tl.load(x + i + tl.arange(0, B)))
    tl.store(x, acc)


@triton.jit
def indexed(x, n, B: tl.constexpr):
    v = tl.load(x + tl.arange(0, B))
    tl.store(x, v[0])


@triton.jit
def short_k(x, n, B: tl.constexpr):
    a = tl.load(x + tl.arange(0, 16)[:, None] * 8 + tl.arange(0, 8)[None, :])
    b = tl.load(x + tl.arange(0, 8)[:, None] * 16 + tl.arange(0, 16)[None, :])
    tl.store(x + tl.arange(0, 16)[:, None] * 16 + tl.arange(0, 16)[None, :], tl.dot(a, b))


@triton.jit
def helper(v):
    out = 0
    for i in range(4):
        out += tl.sum(v)
    return out


@triton.jit
def calls_helper(x, n, B: tl.constexpr, DT: tl.constexpr):
    v = tl.load(x + tl.arange(0, B)).to(DT)
    tl.store(x, helper(v))
'''


@pytest.fixture(scope="module")
def kernels_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("kernels") / "kernels.py"
    path.write_text(textwrap.dedent(KERNELS))
    return path


def _spec(path, kernel, **constexprs):
    types = {"x": "*fp16", "n": "i32", "B": "constexpr", **{k: "constexpr" for k in constexprs}}
    return compiles.Spec("kernels", str(path), kernel, types, {"B": 16, **constexprs})


@pytest.mark.parametrize("kernel, words, hint", [
    ("branch_type", "the then block redefines it", "gets another type or shape inside an if"),
    ("branch_only", "v is not defined", "defined in only one branch of an if"),
    ("returns_in_loop", "Cannot have `return` statements", "cannot return from inside a loop"),
    ("continues", "Continue", "loop has no continue"),
    ("indexed", "unsupported tensor index", "cannot be indexed by a number"),
    ("short_k", "K >= 16", None),  # the message names the sizes; no lesson-made hint is needed
    ("calls_helper", "Loop-carried variable out", "out changes its type inside the loop"),
])
def test_each_refusal_names_the_line_and_what_it_means(kernels_file, kernel, words, hint):
    lines = kernels_file.read_text().splitlines()
    specs = [_spec(kernels_file, k) for k in ("ok", "branch_type", "branch_only", "returns_in_loop", "continues",
                                              "indexed", "short_k")]
    specs.append(_spec(kernels_file, "calls_helper", DT={"dtype": "fp32"}))
    compiles.case(specs)  # one child compiles them all; each is remembered
    spec = next(s for s in specs if s.kernel == kernel)
    case = compiles.case([spec])
    assert case.status == "error" and words in case.detail, case
    if hint:
        assert hint in case.hint, case
    # the line named is the one Triton pointed at, in the function it is in (the helper's loop, not the call)
    line = int(case.detail.split(f"{kernels_file.name}:")[1].split(":")[0])
    assert lines[line - 1].strip() and lines[line - 1].strip() in case.detail
    assert compiles.case([specs[0]]).status == "pass"


def test_a_compile_that_cannot_be_set_up_gives_no_case(tmp_path):
    gone = compiles.Spec("gone", str(tmp_path / "gone.py"), "k", {"x": "*fp32"}, {})
    assert compiles.case([gone]) is None
    odd = tmp_path / "odd.py"
    odd.write_text("raise ImportError('needs a GPU at import')\n")
    assert compiles.case([compiles.Spec("odd", str(odd), "k", {"x": "*fp32"}, {})]) is None


def test_a_launch_is_written_down_from_its_arguments():
    """The signature of a launch: pointers by dtype, ints and floats by size, None and constexprs as values; a
    kernel of another folder, or a constexpr that is a function, is not checked."""
    import torch
    import triton
    import triton.language as tl

    from tkcourse import triton_internals as ti

    def k(x, y, n, scale, maybe, BLOCK: tl.constexpr, DT: tl.constexpr = tl.float16):
        pass

    types, consts = ti.launch_signature(k, (torch.zeros(2), torch.zeros(2, dtype=torch.float16), 7, 0.5, None),
                                        {"BLOCK": 64, "num_warps": 4})
    assert types == {"x": "*fp32", "y": "*fp16", "n": "i32", "scale": "fp32", "maybe": "constexpr",
                     "BLOCK": "constexpr", "DT": "constexpr"}
    assert consts == {"maybe": None, "BLOCK": 64, "DT": tl.float16}
    here = str(Path(__file__).resolve().parent)
    spec = compiles.spec_of(k, (torch.zeros(2), torch.zeros(2), 7, 0.5, None), {"BLOCK": 64}, here)
    assert spec.constexprs["DT"] == {"dtype": "fp16"} and json.dumps(spec.constexprs)
    assert compiles.spec_of(k, (torch.zeros(2),) * 2 + (7, 0.5, None), {"BLOCK": 64}, "/elsewhere") is None
    assert compiles.spec_of(k, (torch.zeros(2),) * 2 + (7, 0.5, None), {"BLOCK": 64, "DT": triton.cdiv}, here) is None
