"""Traffic the lesson's kernel does not make, under a right result.

Steps that read nothing: a K loop that runs past its data gives the right result (every load past the end is
masked off) and does the work of many more steps. The tracer records each load with every lane masked off
(``Trace.idle``); the matmul graders fail a right result that made such loads, and say where the loop ends.

Reads again: a fused kernel (lesson 02's softmax, lesson 09's RMSNorm) reads its input once and never loads what
it writes; loading a row twice, or the sum it just stored, gives the right result at twice the traffic."""

from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl
from helpers import assert_grader_catches, mutant

from tkcourse import mode, stubs, traffic

ROOT = Path(__file__).resolve().parents[1]


@triton.jit
def _sum_steps(x_ptr, out_ptr, n, steps, BLOCK: tl.constexpr):
    acc = tl.zeros((BLOCK,), tl.float32)
    for s in range(steps):
        offs = s * BLOCK + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr + tl.arange(0, BLOCK), acc)


def test_a_load_with_every_lane_masked_off_is_recorded_as_idle():
    """(On the CPU: the trace's run is the launch there, so its result is out's, on a GPU machine too.)"""
    x, out = torch.arange(40, dtype=torch.float32), torch.empty(16)
    right = traffic.trace(_sum_steps, (1,), x, out, 40, 3, BLOCK=16)  # 3 steps cover 40 elements
    assert right.idle == []
    past = traffic.trace(_sum_steps, (1,), x, out, 40, 7, BLOCK=16)  # 4 steps more, each loading nothing
    assert [kind for kind, _, _ in past.idle] == ["load"] * 4
    assert {right.tensors[i].name for _, _, i in past.idle} == {"x"}  # the pointer's own tensor
    assert torch.equal(out, torch.stack([x[i::16].sum() for i in range(16)]))  # the result is right all the same
    assert len(traffic.combine([right, past]).idle) == 4


def _planted(lesson, old, new):
    text = stubs.answer_text((ROOT / "solutions" / f"{lesson}.py").read_text())
    return mutant(text, [(old, new)], f"planted_idle_{lesson}", f"solutions/{lesson}.py")


@pytest.mark.parametrize("lesson, old, new, hint", [
    ("matmul", "    for k in range(0, tl.cdiv(K, BLOCK_K)):", "    for k in range(0, K):", "range(K) takes K of them"),
    ("int4_matmul", "    for k0 in range(0, half, BLOCK_K):", "    for k0 in range(0, K, BLOCK_K):",
     "takes twice as many steps"),
    ("hopper", "        for k in range(k_steps):", "        for k in range(K):", "range(K) takes K of them"),
])
def test_a_k_loop_past_the_data_fails_with_its_bound_named(lesson, old, new, hint):
    rep = assert_grader_catches(lesson, _planted(lesson, old, new), f"{lesson}: K loop past the data", hint)
    assert "every lane masked off" in rep.first_problem().detail


def _pass_one_loop() -> str:
    """Lesson 05's pass 1 loop as the solution writes it (the max and the sum in one pass), to plant over."""
    text = stubs.answer_text((ROOT / "solutions" / "online_softmax.py").read_text())
    start = text.index("    for block_start in tl.range(start, end, BLOCK, num_stages=NUM_STAGES):")
    return text[start:text.index("        m = m_new\n", start) + len("        m = m_new\n")]


#: Lesson 05's pass 1 as the three-pass softmax has it: a loop for the max, then one for the sum
THREE_PASS = (_pass_one_loop(), """    for block_start in tl.range(start, end, BLOCK, num_stages=NUM_STAGES):
        cols = block_start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < end, other=float("-inf")).to(tl.float32)
        m = tl.maximum(m, tl.max(x, axis=0))
    shift = tl.where(m == float("-inf"), 0.0, m)
    for block_start in tl.range(start, end, BLOCK, num_stages=NUM_STAGES):
        cols = block_start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < end, other=float("-inf")).to(tl.float32)
        l += tl.sum(tl.exp(x - shift), axis=0)
""")


@pytest.mark.parametrize("lesson, edits, hint", [
    ("online_softmax", [THREE_PASS], "the three-pass softmax this lesson does away with"),
    ("flash_attention", [("        s = tl.dot(q, tl.trans(k)) * sm_scale  # (BLOCK_M, BLOCK_N) scores",
                          "        q = tl.load(Q + head + offs_m[:, None] * stride_n + offs_d[None, :], "
                          "mask=offs_m[:, None] < N, other=0.0)\n        s = tl.dot(q, tl.trans(k)) * sm_scale")],
     "the Q block is loaded more than once"),
    ("decode_attention", [("        s = tl.dot(q, tl.trans(k)) * qk_scale  # (BLOCK_G, BLOCK_N) scores, log2 units",
                           "        q = tl.load(Q + (b * HKV * GROUP + heads)[:, None] * HEAD_DIM + d[None, :], "
                           "mask=g[:, None] < GROUP, other=0.0)\n        s = tl.dot(q, tl.trans(k)) * qk_scale")],
     "the queries are loaded more than once a split"),
    ("softmax", [("        z = x - tl.max(x, axis=0)",
                  '        z = tl.load(x_ptr + row64 * x_row_stride + cols, mask=mask, other=float("-inf")) - tl.max(x, axis=0)')],
     "the row of x is loaded more than once"),
    ("rmsnorm", [("    x = x.to(tl.float32)  # fp32 statistics whatever the input dtype",
                  "    if HAS_RESIDUAL:\n        x = tl.load(sum_ptr + row * out_row_stride + cols, mask=mask, other=0.0)\n"
                  "    x = x.to(tl.float32)")],
     "the kernel loads back h = x + residual"),
])
def test_a_fused_kernel_that_reads_again_fails_with_the_read_named(lesson, edits, hint):
    text = stubs.answer_text((ROOT / "solutions" / f"{lesson}.py").read_text())
    rep = assert_grader_catches(lesson, mutant(text, edits, f"planted_reads_{lesson}", f"solutions/{lesson}.py"),
                                f"{lesson}: reads again", hint)
    assert "the right result, but" in rep.first_problem().detail


@triton.jit
def _double(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    first = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr + offs, first + tl.load(x_ptr + offs, mask=offs < n, other=0.0), mask=offs < n)


def test_loads_past_what_is_allowed_are_counted_by_argument():
    from tkcourse.check.core import loaded_again

    x, out = torch.arange(40, dtype=torch.float32, device=mode.DEVICE), torch.empty(16, device=mode.DEVICE)
    once = traffic.trace(_sum_steps, (1,), x, out, 40, 3, BLOCK=16)  # each element of x loaded once
    assert loaded_again("c", [once], {"x": (1, "h"), "out": (0, "h")}) is None
    assert loaded_again("c", [once], {"x": (0, "x is written only")}).hint == "x is written only"
    twice = traffic.trace(_double, (1,), x, out, 10, BLOCK=16)  # the first 10 elements of x, each loaded twice
    case = loaded_again("c", [twice], {"x": (1, "once")})
    assert case.hint == "once" and "loaded 10 elements of x 2 times each" in case.detail
