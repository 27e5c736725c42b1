"""Lesson 05: the online softmax matches torch on rows of any length, split or not (the lesson and its steps)."""

import math

import pytest
import torch
import triton
import triton.language as tl
from helpers import assert_grader_catches, assert_softmax
from helpers import randn as _randn

from solutions import online_softmax as lesson
from solutions.kernels import online_softmax_one_read as one_read
from solutions.kernels import online_softmax_split as split
from tkcourse import mode

DEV = mode.DEVICE


def _assert_softmax(out, x):
    assert_softmax(out, x, lesson.reference)


@pytest.mark.parametrize("dtype", mode.float_dtypes())
@pytest.mark.parametrize("n_cols", [1, 3, 17, 1000, 1025])
def test_matches_torch(n_cols, dtype):
    x = _randn(4, n_cols, dtype=dtype, scale=3.0)
    _assert_softmax(lesson.softmax(x), x)  # the mode's plan
    _assert_softmax(lesson.softmax(x, block=128), x)  # several blocks a row


@pytest.mark.parametrize("parts", [2, 4, 8])
def test_rows_split_over_programs(parts):
    # 1000 columns, block 128: parts of 512/256/128 columns; with 8 parts the last one is empty
    x = _randn(3, 1000, scale=4.0, seed=parts)
    _assert_softmax(split.softmax(x, parts=parts, block=128), x)
    xh = _randn(2, 517, dtype=torch.float16, scale=4.0, seed=parts)
    _assert_softmax(split.softmax(xh, parts=parts, block=64), xh)


def test_rows_longer_than_lesson_02_allows():
    x = _randn(2, 40_000, scale=3.0)
    _assert_softmax(lesson.softmax(x), x)


def test_max_moves_every_block():
    # an ascending row: every block raises the max, so the running sum is rescaled every step
    x = torch.linspace(-50, 50, 3000, device=DEV).repeat(3, 1)
    _assert_softmax(lesson.softmax(x, block=256), x)
    _assert_softmax(split.softmax(x, parts=4, block=256), x)


def test_large_magnitudes_and_leading_minus_inf():
    x = _randn(3, 2000, scale=300.0) + 1e4
    assert torch.isinf(torch.exp(x)).any()
    _assert_softmax(lesson.softmax(x, block=256), x)
    y = _randn(3, 2000, scale=3.0)
    y[:, :700] = float("-inf")  # whole blocks of -inf before the first finite value
    _assert_softmax(lesson.softmax(y, block=256), y)
    _assert_softmax(split.softmax(y, parts=4, block=256), y)


def test_strided_rows():
    base = _randn(12, 1500)
    x = base[::2, 100:1400]
    assert not x.is_contiguous() and x.stride(1) == 1
    _assert_softmax(lesson.softmax(x, block=256), x)
    _assert_softmax(split.softmax(x, parts=2, block=256), x)
    _assert_softmax(lesson.softmax(x.t().contiguous().t()), x)  # columns strided: copied


def test_step_states():
    row = torch.linspace(-5, 5, 1000) * torch.linspace(1, -1, 1000) ** 2
    states = lesson.step_states(row, 128)
    assert len(states) == math.ceil(1000 / 128)
    ms = [m for m, _ in states]
    assert ms == sorted(ms)  # the running max never goes down
    for i, (m, l) in enumerate(states):  # after block i: the max and sum of exp(x - max) seen so far
        seen = row[: (i + 1) * 128]
        assert m == seen.max().item()
        assert l == pytest.approx(torch.exp(seen - seen.max()).sum().item(), rel=1e-5)


@pytest.mark.parametrize("kwargs, message", [
    (dict(parts=3), "parts must be a power of two"),
    (dict(block=100), "block must be a power of two"),
])
def test_bad_arguments_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        split.softmax(_randn(2, 10), **kwargs)


@pytest.mark.parametrize("bad, message", [
    (lambda: torch.ones(8, device=DEV), "2-D"),
    (lambda: torch.ones(2, 0, device=DEV), "empty"),
])
def test_bad_input_raises_valueerror(bad, message):
    with pytest.raises(ValueError, match=message):
        lesson.softmax(bad())


@pytest.mark.skipif(not mode.INTERPRET, reason="bf16 is fine on a GPU")
def test_bf16_refused_in_interpreter():
    with pytest.raises(mode.UnsupportedInInterpreter):
        lesson.softmax(torch.ones(2, 4, dtype=torch.bfloat16))


# ----- the ascending row catches a missing rescale -------------------------------------------


@triton.jit
def _no_rescale(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    m = tl.full((), float("-inf"), tl.float32)
    l = tl.zeros((), tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        m = tl.maximum(m, tl.max(x, axis=0))
        l += tl.sum(tl.exp(x - m), axis=0)  # forgot l * exp(m_old - m_new)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        tl.store(out_ptr + row * n_cols + cols, tl.exp(x - m) / l, mask=cols < n_cols)


def test_missing_rescale_is_caught():
    x = torch.linspace(-20, 20, 3000, device=DEV).repeat(2, 1)
    out = torch.empty_like(x)
    _no_rescale[(2,)](x, out, 3000, BLOCK=256)
    with pytest.raises(AssertionError):
        _assert_softmax(out, x)
    one_block = torch.empty_like(x)  # with the whole row in one block there is nothing to rescale
    _no_rescale[(2,)](x, one_block, 3000, BLOCK=4096)
    _assert_softmax(one_block, x)


# ----- the grader catches planted mistakes, each with the hint that names it ------------------
# Planted in torch code that streams the row block by block as the kernel does: the grader only
# sees the function, and torch keeps these tests quick.

import types  # noqa: E402

from tkcourse import check  # noqa: E402


def _streamed(x, block=1024, rescale=True, subtract_max=True):
    xd = x.double()
    m = torch.full((x.shape[0],), float("-inf"), dtype=torch.float64, device=x.device)
    l = torch.zeros(x.shape[0], dtype=torch.float64, device=x.device)
    for j in range(0, x.shape[1], block):
        b = xd[:, j:j + block]
        m_new = torch.maximum(m, b.amax(1)) if subtract_max else torch.zeros_like(m)
        shift = torch.where(m_new == float("-inf"), 0.0, m_new)  # rows that start with -inf blocks
        l = (l * torch.exp(m - shift) if rescale else l) + torch.exp(b - shift[:, None]).sum(1)
        m = m_new
    return (torch.exp(xd - m[:, None]) / l[:, None]).to(x.dtype)


def _grader_module(**mistake):
    def softmax(x):
        if x.dim() != 2 or x.numel() == 0:
            raise ValueError("x must be a non-empty 2-D tensor")
        if mistake.get("contiguous_rows"):
            x = torch.as_strided(x, x.shape, (x.shape[1], 1))  # ignores the row stride
        return _streamed(x, rescale=mistake.get("rescale", True), subtract_max=mistake.get("subtract_max", True))
    return types.SimpleNamespace(softmax=softmax, __name__="planted")


@pytest.mark.parametrize("name, mistake, hint", [
    ("running sum not rescaled", dict(rescale=False), "rescale"),
    ("no running max", dict(subtract_max=False), "overflow"),
    ("row stride ignored", dict(contiguous_rows=True), "x.stride(0)"),
])
def test_grader_catches_planted_mistake(name, mistake, hint):
    assert_grader_catches("online_softmax", _grader_module(**mistake), name, hint)


def test_grader_passes_a_correct_planted_function():
    assert check.run("online_softmax", module=_grader_module(), quiet=True).passed


# ----- the one-read plan (GPU only for more than one part: parts wait for each other) ----------


@pytest.mark.parametrize("n_cols", [1, 100, 1000])
def test_one_read_kernel_with_one_part(n_cols):
    """A part per row runs anywhere, the interpreter too: the row is read once, kept, written."""
    x = _randn(5, n_cols, scale=3.0)
    out = torch.empty_like(x)
    _assert_softmax(one_read.one_read_launch(x, out, 1, triton.next_power_of_2(n_cols), 4), x)


def test_one_read_plan_only_where_it_is_safe(monkeypatch):
    if mode.INTERPRET:  # one program at a time: a part would wait its whole bound for the next one
        assert one_read.one_read_plan(262144, torch.device("cpu")) is None
        return
    dev = torch.device("cuda", torch.cuda.current_device())
    for n_cols in (1, 1000, 32768, 131072, 262144, 1_000_000):
        parts, part, warps = one_read.one_read_plan(n_cols, dev)
        assert parts * part >= n_cols and part <= one_read.ONE_READ_MAX_PART, (n_cols, parts, part)
        most = one_read.LANES_PARTS if n_cols >= one_read.LANES_MIN_COLS else one_read.ONE_READ_MAX_PARTS
        assert parts <= min(most, torch.cuda.get_device_properties(dev).multi_processor_count)
        assert 1 <= warps <= 32 and part <= 32 * warps * one_read.ONE_READ_MAX_VALUES_PER_THREAD
    assert one_read.one_read_plan(1 << 30, dev) is None  # parts too long for one program: the two-pass split
    # one_read=False (the explicit argument that replaced a module switch) takes the two passes
    monkeypatch.setattr(one_read, "one_read_launch", lambda *a, **k: pytest.fail("one_read=False ran the one-read kernel"))
    x = _randn(2, 262144, dtype=torch.float16)
    _assert_softmax(one_read.softmax(x, one_read=False), x)


@pytest.mark.parametrize("n_cols, plan", [(32768, (32, 1024, 1)), (131072, (64, 2048, 1)), (262144, (128, 2048, 1)),
                                          (524288, (128, 4096, 2)), (1 << 20, (128, 8192, 4)), (100_000, (64, 2048, 1))])
def test_one_read_split_is_the_measured_plan(n_cols, plan):
    """The plans measured best on the H200 (128 parts at most there), computed anywhere: at most
    64 parts of at least 1024 values below LANES_MIN_COLS; from there 128 parts of 64 values a thread."""
    assert one_read.one_read_split(n_cols) == plan
    parts, part, warps = one_read.one_read_split(n_cols, sm_parts=64)  # a GPU with 64 to 127 SMs
    assert parts <= 64 and parts * part >= n_cols and part <= 32 * warps * one_read.ONE_READ_MAX_VALUES_PER_THREAD


@pytest.mark.skipif(mode.INTERPRET, reason="parts wait for each other: GPU only")
@pytest.mark.parametrize("shape", [(3, 100_000), (64, 32768), (2, 262144), (37, 262144), (5, 600_000), (300, 8193)])
def test_one_read_plan_matches_torch_on_a_gpu(shape):
    x = _randn(*shape, dtype=torch.float16, scale=4.0)
    assert one_read.one_read_plan(shape[1], x.device) is not None
    _assert_softmax(lesson.softmax(x), x)
    _assert_softmax(lesson.softmax(x[:, : shape[1] - 1]), x[:, : shape[1] - 1])  # strided rows


def _slots_with_parts_published(x, parts, part):
    """Exchange slots ((rows, parts) words) as a launch on new, zeroed slots finds them when every part
    but part 0 of each row has published already: each part's (m, l) as ``publish_part`` writes it (m
    in the low half, l in the high half, tag 1 in l's lowest bit: a launch on zeroed slots takes tag
    1, ``launch_tag``), and part 0's word still 0."""
    n_rows, n_cols = x.shape
    xp = torch.nn.functional.pad(x.float(), (0, parts * part - n_cols), value=float("-inf")).view(n_rows, parts, part)
    m_parts = xp.amax(-1)
    l_parts = torch.exp(xp - m_parts.nan_to_num(neginf=0.0)[..., None]).sum(-1)
    words = (m_parts.view(torch.int32).long() & 0xFFFFFFFF) | ((l_parts.view(torch.int32).long() | 1) << 32)
    words[:, 0] = 0  # part 0 of each row is not published yet; it publishes, then finds the others there
    return words.contiguous()


_PROGRAM_ORDER = pytest.mark.skipif(not mode.INTERPRET, reason="the interpreter's program order (part 0 first) holds "
                                    "this state; on a GPU the parts that published would read their tag first")


@_PROGRAM_ORDER
@pytest.mark.parametrize("parts, n_cols", [(2, 1000), (4, 1000), (8, 4100)])
def test_one_read_combine_with_the_other_parts_already_published(parts, n_cols):
    """The multi-part path in the interpreter: every part's (m, l) word but part 0's is published
    beforehand, with the tag of a launch on zeroed slots, so part 0, which runs first, publishes and
    finds the row complete with no poll: it must combine the words. (The parts after it find their
    own words with that tag, take the other tag, and fall back: no polls.)"""
    x = _randn(3, n_cols, scale=3.0)
    part = triton.next_power_of_2(-(-n_cols // parts))
    slots = _slots_with_parts_published(x, parts, part)
    out = torch.empty_like(x)
    one_read.one_read_softmax_kernel[(parts * 3,)](x, out, x.stride(0), out.stride(0), n_cols, slots, 0,
                                                  one_read.exchange_span(4), PARTS=parts, PART=part, FALLBACK_BLOCK=128,
                                                  SPAN=one_read.exchange_span(4), num_warps=4)
    _assert_softmax(out, x)


@_PROGRAM_ORDER
@pytest.mark.parametrize("lanes", [1, 2, 5])
@pytest.mark.parametrize("parts, n_cols", [(2, 1000), (4, 4100)])
def test_lanes_combine_with_the_other_parts_already_published(lanes, parts, n_cols):
    """The persistent grid in the interpreter: lanes * parts programs, each walking rows lane,
    lane + lanes, ... (5 lanes for 7 rows: lanes of 2 rows and of 1). Every part's word but part 0's
    is published beforehand, as in the test above: part 0 combines, the others fall back; each row
    must come out."""
    n_rows = 7
    x = _randn(n_rows, n_cols, scale=3.0)
    part = triton.next_power_of_2(-(-n_cols // parts))
    slots = _slots_with_parts_published(x, parts, part)
    out = torch.empty_like(x)
    one_read.lanes_softmax_kernel[(parts * lanes,)](x, out, x.stride(0), out.stride(0), n_rows, n_cols,
                                                   slots, 0, one_read.exchange_span(4), PARTS=parts, PART=part,
                                                   FALLBACK_BLOCK=128, SPAN=one_read.exchange_span(4), num_warps=4)
    _assert_softmax(out, x)


@pytest.mark.parametrize("lanes", [None, 1, 3])
@pytest.mark.parametrize("parts, n_cols", [(2, 1000), (4, 1000), (8, 4100)])
def test_one_read_falls_back_when_a_part_has_not_run(parts, n_cols, lanes):
    """A program that stops waiting reads the whole row itself. In the interpreter programs run one
    at a time in id order, so with no polls the first parts of each row fall back and the last one
    combines: both ways must give the same softmax."""
    x = _randn(3, n_cols, scale=3.0)
    part = triton.next_power_of_2(-(-n_cols // parts))
    _assert_softmax(one_read.one_read_launch(x, torch.empty_like(x), parts, part, 4, max_polls=0, lanes=lanes), x)


def _kept_slot_launches(launches, lanes=None):
    """``launches`` launches of the one-read kernels on one set of slots, never zeroed in between, each
    on a new input: (the largest error of each launch, the tags its words carried after it)."""
    n_rows, n_cols, parts, part = 5, 300, 4, 128
    slots = torch.zeros(one_read.slot_words(n_rows, parts), dtype=torch.int64, device=DEV)
    errors, tags = [], []
    for launch in range(launches):
        x = _randn(n_rows, n_cols, scale=1.0 + 3 * launch, seed=launch)
        out = one_read.one_read_launch(x, torch.empty_like(x), parts, part, 1, max_polls=2, lanes=lanes, slots=slots)
        errors.append((out.float() - lesson.reference(x).float()).abs().max().item())
        tags.append(sorted(set(((slots >> 32) & 1).tolist())))
    return errors, tags


@pytest.mark.parametrize("lanes", [None, 2])
def test_one_read_kept_slots_alternate_their_tag(lanes):
    """Slots kept from launch to launch, never zeroed by the caller: each launch tags its words with the
    other tag than the last launch's (``launch_tag``), so a program never takes a word of the last
    launch for one of this launch. In the interpreter the first parts of a row run before their
    siblings have published: they must find the words missing and fall back, while the last part
    combines this launch's words. A new input every launch, so an old word gives a wrong row."""
    errors, tags = _kept_slot_launches(4, lanes)
    assert max(errors) < 1e-5, errors
    assert tags == [[1], [0], [1], [0]], "every word of a launch has the launch's tag"


@triton.jit
def _stale_tag(slots_ptr, own, mask=True):
    """A planted mistake: every launch takes tag 1, so the words the last launch left count as new."""
    return tl.full((), 1, tl.int32)


@triton.jit
def _own_tag(slots_ptr, own, mask=True):
    """A planted mistake: a launch takes the last launch's tag (its own word's), not the other one."""
    return (tl.load(slots_ptr + own, mask=mask, other=0) >> 32).to(tl.int32) & 1


@pytest.mark.parametrize("mistake", [_stale_tag, _own_tag], ids=["one tag", "the last launch's tag"])
@pytest.mark.parametrize("lanes", [None, 2])
def test_kept_slots_without_the_tag_turning_are_wrong(monkeypatch, mistake, lanes):
    """The check above bites: with one tag for every launch, a launch combines the words of the launch
    before (another input's max and sum); with the last launch's tag, every part waits in vain (on
    zeroed slots tag 0 is what unpublished words have) or takes old words: wrong rows either way,
    on the second launch at the latest."""
    if not mode.INTERPRET:
        pytest.skip("the interpreter's program order makes the old words certain to be read")
    monkeypatch.setattr(one_read, "launch_tag", mistake)
    errors, _ = _kept_slot_launches(2, lanes)
    assert errors[-1] > 1e-2, errors


@pytest.mark.skipif(mode.INTERPRET, reason="parts wait for each other: GPU only")
@pytest.mark.parametrize("lanes", [None, 16])
@pytest.mark.parametrize("parts, part, warps", [(128, 2048, 1), (64, 2048, 1), (16, 2048, 2), (32, 4096, 4)])
def test_one_read_falls_back_on_a_gpu(parts, part, warps, lanes):
    """No polls: every program whose row is not complete when it first looks reads the row itself,
    while its siblings combine the words. The warps of a program must agree on which, or the
    fallback's shared-memory reductions hang or mix values: a wrong answer or a timeout here."""
    n_cols = parts * part - 5
    x = _randn(512, n_cols, dtype=torch.float16, scale=4.0)
    _assert_softmax(one_read.one_read_launch(x, torch.empty_like(x), parts, part, warps, max_polls=0, lanes=lanes), x)


@pytest.mark.skipif(mode.INTERPRET, reason="a persistent grid is sized from the GPU")
def test_lanes_fill_the_gpu_once():
    """Rows of LANES_MIN_COLS or more take a grid of lanes * parts programs, as many lanes as fit at
    once and no more (else a lane's parts could wait on a sibling that cannot start); shorter rows
    take a program per part."""
    dev = torch.device("cuda", torch.cuda.current_device())
    n_cols = one_read.LANES_MIN_COLS
    x = _randn(256, n_cols, dtype=torch.float16)
    out = torch.empty_like(x)
    parts, part, warps = one_read.one_read_plan(n_cols, dev)
    lanes = one_read.persistent_lanes(x, out, parts, part, warps)
    fit = one_read.programs_per_sm(one_read.lanes_softmax_kernel, x, out, x.stride(0), out.stride(0), 256, n_cols,
                                 torch.zeros(1, dtype=torch.int64, device=dev), 1, one_read.exchange_span(warps), PARTS=parts,
                                 PART=part, FALLBACK_BLOCK=32 * warps, SPAN=one_read.exchange_span(warps), num_warps=warps,
                                 device_index=dev.index)
    assert lanes is not None
    assert lanes * parts <= one_read.sm_count(dev.index) * fit < (lanes + 1) * parts
    assert one_read.persistent_lanes(x[:, : n_cols // 2], out[:, : n_cols // 2], parts, part, warps) is None


# ----- the ladder: the lesson runs the learner's kernel; the steps share its API ------------------


def test_the_lesson_imports_none_of_its_steps():
    """The exercise is generated from the lesson file, so what a learner completes is what runs, on a
    GPU too: the lesson must not reach for a step's kernels."""
    source = open(lesson.__file__).read()
    assert "online_softmax_" not in "".join(l for l in source.splitlines(True) if l.startswith(("import", "from")))
    assert not hasattr(lesson, "ONE_READ") and not hasattr(lesson, "one_read_launch")


@pytest.mark.parametrize("step", [lesson, split, one_read], ids=lambda m: m.__name__)
def test_every_step_has_the_lesson_api(step):
    x = _randn(3, 3000, scale=3.0)
    _assert_softmax(step.softmax(x), x)
    _assert_softmax(step.softmax(x, block=256), x)
    assert step.reference is lesson.reference and step.step_states is lesson.step_states


@pytest.mark.skipif(mode.INTERPRET, reason="the one-read plan runs on a GPU only")
def test_grader_passes_the_one_read_step_on_a_gpu():
    """The grader grades the step's two passes traced (one_read=False), then its one-read plan untraced."""
    rep = check.run("online_softmax", module=one_read, quiet=True)
    assert rep.passed, rep
    assert sum("one-read" in c.label for c in rep.cases) == 3
