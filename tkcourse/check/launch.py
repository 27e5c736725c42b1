"""Grader for lesson 08: ``plan_key``, ``SoftmaxPlan`` and the cached ``softmax`` (host work done once).

In order: the lesson-02 kernel the module launches works; ``plan_key`` gives one key to inputs of one
kind and different keys when the shape, strides, dtype, device or alignment differ, each difference
tried against a key that holds only part of it (the row stride alone, whether x is contiguous, the
element size, 8-byte alignment); a plan is right for the input it was made for, and for later inputs
of its key, without planning again and without handing the same output buffer to two calls;
``softmax`` over a sequence of inputs of several keys (rows of one stride and columns of another, an
address off the 16-byte grid) is right at every call and makes a plan for every key it has not seen,
even where reusing one would compute the right values. A plan's launch is also checked against the lesson-02
helpers (BLOCK, num_warps, NUM_STAGES, the grid), which the values cannot show. Outputs compare with float64
torch references.

How "planning again" is seen: during the calls that should only launch, ``triton.next_power_of_2``,
``triton.cdiv`` and the module's own planning helpers (``warps_for``, ``stages_for``,
``num_programs``, ``SoftmaxPlan`` itself) count their calls.
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch
import triton

from .. import mode, stubs
from .core import (
    INPUT_PAD,
    Case,
    at_pitch,
    error_case,
    graded_call,
    padded,
    refuses,
    row_padded,
    transposed,
    written_case,
)

HELPERS = ("warps_for", "stages_for", "num_programs")  # the lesson-02 planning helpers a plan calls once


def _spec(x: torch.Tensor) -> dict:
    """What a plan depends on, as the grader sees it (the fields a hint names)."""
    return {"rows": x.shape[0], "columns": x.shape[1], "dtype": x.dtype, "strides": None if x.is_contiguous() else tuple(x.stride()),
            "device": x.device, "aligned": x.data_ptr() % 16 == 0}


def _words(x: torch.Tensor) -> str:
    s = _spec(x)
    text = f"{s['rows']}x{s['columns']} {str(s['dtype'])[6:]}"
    if s["strides"] is not None:
        text += f" strides {s['strides']}"
    if not s["aligned"]:
        text += " not 16-byte aligned"
    return text


# what each field of a reused plan breaks, for the hint
WHY = {
    "rows": "the grid (a program per row in the interpreter, a wave of programs on a GPU) and the output's shape "
            "were made for the other number of rows: a stale grid leaves rows unwritten, or reads and writes past "
            "the end",
    "columns": "BLOCK (triton.next_power_of_2 of the columns) and the output's shape were made for the other row "
               "length: a longer row is cut short, a shorter one is read past its end",
    "dtype": "the output was allocated in the other dtype, and Triton compiles a kernel per pointer dtype",
    "strides": "the strides were the other input's: the row stride the plan passes to the kernel, and whether it "
               "copies x first (columns that are not contiguous)",
    "aligned": "Triton compiles a kernel for a 16-byte aligned pointer and another for one that is not: a plan that "
               "keeps its compiled kernel must not run it on the other kind",
}


@contextlib.contextmanager
def counting(mod):
    """Count calls of the planning functions, in triton and in ``mod``, during the block: yields a dict."""
    counts: dict[str, int] = {}
    patched = []

    def wrap(owner, name):
        real = getattr(owner, name, None)
        if not callable(real) or getattr(real, "__tkcourse_counting__", False):
            return

        def counted(*args, **kwargs):
            counts[name] = counts.get(name, 0) + 1
            return real(*args, **kwargs)

        counted.__tkcourse_counting__ = True
        patched.append((owner, name, real))
        setattr(owner, name, counted)

    for name in ("next_power_of_2", "cdiv"):
        wrap(triton, name)
    for name in HELPERS + ("SoftmaxPlan",):
        if name in getattr(mod, "__dict__", {}):
            wrap(mod, name)
    try:
        yield counts
    finally:
        for owner, name, real in reversed(patched):
            setattr(owner, name, real)


def _counted_words(counts) -> str:
    return ", ".join(f"{name} {n} time{'s' * (n != 1)}" for name, n in sorted(counts.items()))


OUT_STRIDE = ("the kernel's int arguments are x's row stride, out's row stride, n_rows, n_cols, in that order, and "
              "out is a new contiguous (n_rows, n_cols) tensor, so its row stride is n_cols whatever x's is")


def _plan_oob_hint(x):
    """An out-of-bounds hint for a plan's launch (the kernel itself passed its own check): n_rows and n_cols passed
    the other way round (n_cols rows of n_rows columns: rows past the last, a few lanes each), or whole rows of out
    stored past its end, as a row stride other than n_cols for out (x's, say) puts them."""
    n_rows, n_cols = x.shape
    pitch = {"x": x.stride(0) if x.stride(1) == 1 else n_cols, "out": n_cols}

    def swapped(bad) -> bool:
        if n_cols <= n_rows or not bad or any(o.tensor not in pitch for o in bad):
            return False
        for o in bad:
            offs = np.asarray(o.offsets, dtype=np.int64)
            rows, cols = offs // pitch[o.tensor], offs % pitch[o.tensor]
            if not ((rows >= n_rows) & (rows < n_cols) & (cols < n_rows)).all():
                return False
        return True

    def hint(bad, default):
        if swapped(bad):
            return (f"the plan passes n_rows and n_cols the other way round: the kernel ran {n_cols} rows (x has "
                    f"{n_rows}) of {n_rows} columns, past x's last row. The kernel's int arguments are x's row stride, "
                    "out's row stride, n_rows, n_cols, in that order")
        stores = [o for o in bad if o.kind == "store" and o.derived and o.tensor == "out"]
        if not stores or len(stores) < len(bad):
            return ""
        offs = np.concatenate([o.offsets for o in stores]).astype(np.int64)
        v = x.stride(0)
        seen = ""
        if v > n_cols and at_pitch(offs, v, n_rows, n_cols):
            seen = f" {v} elements apart, x's row stride,"
        return (f"your plan passes the wrong row stride for out: its rows are stored{seen} past the end of out. "
                + OUT_STRIDE[0].upper() + OUT_STRIDE[1:] + ": pass n_cols for out, x's row stride only for x")
    return hint


def _error_hint(exc, default):
    """A launch with an int argument left out (or one too many): the kernel's argument list, in order; a grid
    that is an int, not a tuple."""
    if isinstance(exc, TypeError) and "softmax_kernel" in str(exc) and "argument" in str(exc):
        return f"softmax_kernel was launched with the wrong arguments ({exc}): {OUT_STRIDE}"
    if "power of 2" in f"{exc} {exc.__cause__!r}":
        return ("BLOCK must be a power of two (tl.arange's length), at least the row length: self.BLOCK = "
                "triton.next_power_of_2(n_cols); the mask cols < n_cols turns off the lanes past the row")
    if isinstance(exc, TypeError) and "'int' has no len()" in str(exc):
        return ("the grid is a tuple with one entry per grid axis: self.grid = (num_programs(...),), with its "
                "comma, not the int itself")
    return ""


SWAPPED = ("your plan changed its input x: softmax_kernel[grid](x, out, ...) reads its first pointer and writes its "
           "second, so x goes first and the new output second")


def _graded(label, fn, x, fn_name="softmax", oob_hint=None):
    """(case, output): ``fn(x)`` traced, under poisoned allocations, compared with softmax in float64."""
    g = graded_call(label, fn, (x,), mask="cols < n_cols", oob_hint=oob_hint, error_hint=_error_hint)
    if isinstance(g, Case):
        return g, None
    if isinstance(g.out, tuple):
        return Case(label, "fail", f"returned a tuple of {len(g.out)}, not a torch.Tensor",
                    f"your {fn_name} returns a tuple: return only the output tensor"), None
    f16 = x.dtype == torch.float16
    case = written_case(label, g.out, torch.softmax(x.double(), dim=-1), g, dtype=x.dtype,
                        atol=1e-3 if f16 else 1e-5, rtol=1e-2 if f16 else 1e-4)
    if case.status == "pass":
        case = g.snap.case(label, fn_name) or case
    if case.status == "fail" and "of the input x had changed" in case.detail:
        case.hint = SWAPPED
    return case, g.out


def _inputs(gen):
    """The inputs of the sequence, each of a key of its own but the repeats (named *again*)."""
    def r(rows, cols, dtype=torch.float32):
        return torch.randn(rows, cols, generator=gen, dtype=torch.float64).to(dtype).to(mode.DEVICE)

    def loud(*shape):
        return torch.full(shape, INPUT_PAD, device=mode.DEVICE)

    wide, every_other, off = loud(8, 200), loud(8, 200), loud(8 * 100 + 4096)
    wide[:, :100] = r(8, 100)
    every_other[:, ::2] = r(8, 100)
    off[1:801] = r(8, 100).reshape(-1)
    return [("8x100 float32", padded(r(8, 100))),
            ("8x100 float32 again, other values", padded(r(8, 100))),
            ("8x300 float32 (longer rows)", padded(r(8, 300))),
            ("40x100 float32 (more rows)", padded(r(40, 100))),
            ("3x100 float32 (fewer rows)", padded(r(3, 100))),
            ("8x100 float16 (another dtype)", padded(r(8, 100, torch.float16))),
            ("8x100 float32, rows 200 apart (another stride)", wide[:, :100]),
            ("8x100 float32, every other column, rows 200 apart (another column stride)", every_other[:, ::2]),
            ("8x100 float32, column-major (copied first)", transposed(r(8, 100))),
            ("8x100 float32, 4 bytes past a 16-byte boundary (not aligned)", off[1:801].view(8, 100)),
            ("8x100 float32 a third time", padded(r(8, 100)))]


def _key_cases(mod):
    """``plan_key``: equal for inputs of one kind, different when anything a plan depends on differs."""
    base = torch.randn(8, 100, device=mode.DEVICE)
    other = torch.randn(8, 100, device=mode.DEVICE) + 1
    buf = torch.randn(8 * 100 + 4, device=mode.DEVICE)
    wide = torch.randn(8, 128, device=mode.DEVICE)
    big = torch.randn(8, 200, device=mode.DEVICE)
    # (what, x, hint): x must get another key than base. Then (what, a, b, hint): a key holding part of what a
    # plan depends on (the row stride alone, whether x is contiguous, the element size, 8-byte alignment) gives
    # a and b one key; the whole of it, two.
    pairs = [("two layouts that are both not contiguous (strides (128, 1) and (1, 8))", wide[:, :100],
              base.t().contiguous().t(),
              "put x.stride() itself in it, not whether x is contiguous: the plan passes the row stride to the "
              "kernel, and copies x first when its columns are not contiguous"),
             ("rows of one stride, columns of another (strides (200, 1) and (200, 2))", big[:, :100], big[:, ::2],
              "put the whole x.stride() in it, not x.stride(0) alone: with columns that are not contiguous the plan "
              "copies x first, so two inputs of one row stride may need two plans"),
             ("two shapes of one size and one stride ((8, 100) and (16, 50), rows of 128)", wide[:, :100],
              torch.randn(16, 128, device=mode.DEVICE)[:, :50],
              "put x.shape itself in it, not x.numel(): two shapes of one size need two grids, two BLOCKs and two "
              "outputs"),
             ("float16 and bfloat16 (one element size)", base.half(), base.bfloat16(),
              "put x.dtype itself in it, not its size: float16 and bfloat16 take 2 bytes each, but the output is "
              "allocated in x's dtype and Triton compiles a kernel per pointer dtype"),
             ("addresses 8 bytes apart, one 16-byte aligned and one not", buf[:800].view(8, 100),
              torch.randn(8 * 100 + 4, device=mode.DEVICE)[2:802].view(8, 100),
              "put x.data_ptr() % 16 == 0 in it: Triton specializes a pointer on 16-byte alignment, and an address "
              "8 bytes off that grid is not aligned for it")]
    differ = [("more rows", torch.randn(40, 100, device=mode.DEVICE),
               "put x.shape in it: the grid and the output's shape depend on the number of rows"),
              ("longer rows", torch.randn(8, 300, device=mode.DEVICE),
               "put x.shape in it: BLOCK and the output's shape depend on the number of columns"),
              ("another dtype", base.half(),
               "put x.dtype in it: the output's dtype depends on it, and Triton compiles a kernel per pointer dtype"),
              ("another device", torch.empty(8, 100, device="meta"),
               "put x.device in it: a plan allocates its outputs on its device, and its grid comes from that GPU's "
               "SM count"),
              ("another row stride", wide[:, :100],
               "put x.stride() in it: the plan passes the row stride to the kernel"),
              ("a pointer not 16-byte aligned", buf[1:801].view(8, 100),
               "put x.data_ptr() % 16 == 0 in it: Triton compiles another kernel for a misaligned pointer, and a "
               "plan that keeps its compiled kernel must not run it on a misaligned input")]

    def key(x):
        return mod.plan_key(x)

    label = "plan_key: one key for two tensors of one shape, dtype, device and strides"
    try:
        k1, k2 = key(base), key(other)
        hash(k1)
        same = bool(k1 == k2)
    except Exception as exc:  # noqa: BLE001
        case = error_case(label, exc)
        if isinstance(exc, (TypeError, RuntimeError)) and ("unhashable" in str(exc) or "ambiguous" in str(exc)):
            case.status = "fail"
            case.hint = ("plan_key must return a tuple of plain values (ints, tuples of ints, torch.dtype, torch.device, "
                         "bools): a list is not hashable, and a tensor in the key compares element by element")
        yield case
        return
    if k1 is None:
        yield Case(label, "todo", "plan_key returned None", "fill in plan_key: return a tuple")
        return
    if not same:
        yield Case(label, "fail", f"plan_key gave {k1!r} and {k2!r}",
                   "the key differs between two tensors of one shape, dtype, device and strides: it holds the "
                   "tensor's address or values (x.data_ptr(), id(x), x itself), so every new tensor would get a plan "
                   "of its own. Keep only what the plan depends on (x.data_ptr() % 16 == 0 for the alignment)")
        return
    yield Case(label, "pass")
    checks = [(f"plan_key: a different key for {what}", base, x,
               lambda ka, what=what: f"plan_key gave {ka!r} for 8x100 float32 and for {what}",
               f"the key misses something: {hint}") for what, x, hint in differ]
    checks += [(f"plan_key: different keys for {what}", a, b, lambda ka: f"plan_key gave {ka!r} for both",
                f"the key holds only part of the layout: {hint}") for what, a, b, hint in pairs]
    for label, a, b, detail, hint in checks:
        case = _keys_differ(key, label, a, b, detail, hint)
        yield case
        if case.status != "pass":
            return


def _keys_differ(key, label, a, b, detail, hint) -> Case:
    """Passes when ``key`` tells ``a`` from ``b``; fails with ``detail(key(a))`` and ``hint`` when it does not."""
    try:
        ka, kb = key(a), key(b)
        differs = bool(ka != kb)
    except Exception as exc:  # noqa: BLE001 (the learner's key may raise anything)
        return error_case(label, exc)
    return Case(label, "pass") if differs else Case(label, "fail", detail(ka), hint)


def _lesson_02_state(kernel) -> tuple[str, bool]:
    """Where the lesson-02 kernel the plan launches stands, in words, and whether it is the learner's untouched stub."""
    fn = getattr(kernel, "fn", kernel)
    if getattr(fn, "__module__", None) != "exercises.softmax":
        return "it does not compute lesson 02's softmax", False
    if stubs.status("softmax").state in ("untouched", "missing"):
        return "your exercises/softmax.py is still the generated stub", True
    return "your exercises/softmax.py does not pass lesson 02's check yet", False


def _kernel_case(mod):
    """The lesson-02 kernel the module launches, on its own: a failure there is lesson 02's, not the plan's."""
    label = "lesson 02's softmax_kernel, which the plan launches"
    kernel = getattr(mod, "softmax_kernel", None)
    if kernel is None:
        return None
    x = row_padded(torch.randn(3, 10, device=mode.DEVICE))  # rows 17 apart, out's 10: each stride where it belongs

    def launch(x):
        out = torch.empty(3, 10, dtype=x.dtype, device=x.device)
        kernel[(3,)](x, out, x.stride(0), 10, 3, 10, BLOCK=16, NUM_STAGES=1)
        return out

    case, _ = _graded(label, launch, x, fn_name="softmax_kernel")
    if case.status != "pass":
        state, stub = _lesson_02_state(kernel)
        # what the check saw in a stub is only that it does nothing: said for a kernel someone wrote
        saw = f" What the check saw in that kernel: {case.hint}" if case.hint and not stub else ""
        case.hint = (f"the kernel this lesson plans is lesson 02's softmax_kernel, and {state}. "
                     "Finish lesson 02 first (tkcourse check softmax)." + saw)
    return case


def _plan_cases(mod, inputs):
    """Each input through a plan made for it; then one plan for several inputs of its key."""
    def plan_then_call(x):
        return mod.SoftmaxPlan(x)(x)

    plan_then_call.__name__ = "plan"
    for label, x in inputs:
        if "again" in label or "third" in label:
            continue
        case, _ = _graded(f"SoftmaxPlan(x)(x), {label}", plan_then_call, x, fn_name="plan",
                          oob_hint=_plan_oob_hint(x))
        if case.status == "fail" and isinstance(block := _block_of(mod, x), int) and block < x.shape[1]:
            case.hint = (f"the plan's BLOCK is {block}, shorter than a row of {x.shape[1]}: the columns past BLOCK are "
                         "never read nor written. BLOCK = triton.next_power_of_2(n_cols), the row length, not the "
                         "number of rows")
        if case.status == "fail" and "stride" in label and "for out" not in case.hint:  # x's stride is wrong
            case.hint = ("a strided input is wrong while contiguous ones pass: the plan must pass x.stride(0) as x's "
                         "row stride (n_cols only when x was copied to a contiguous tensor), and copy x first when "
                         "its columns are not contiguous (x.stride(1) != 1)")
        yield case
        if case.status != "pass":
            return
    for x in (dict(inputs)["8x100 float32"], padded(torch.randn(2, 5000, device=mode.DEVICE))):
        case = _launch_case(mod, x)  # 5000 columns: BLOCK 8192, warps_for(BLOCK) 8, warps_for(n_cols) 4
        yield case
        if case.status != "pass":
            return
    by_label = dict(inputs)
    a, b, c = by_label["8x100 float32"], by_label["8x100 float32 again, other values"], by_label["8x100 float32 a third time"]
    try:
        plan = mod.SoftmaxPlan(a)
    except Exception as exc:  # noqa: BLE001
        yield error_case("one plan, three inputs of its key", exc)
        return
    outs = []
    with counting(mod) as counts:
        for i, x in enumerate((a, b, c), 1):
            case, out = _graded(f"one plan, call {i} of 3 with inputs of its key", plan, x, fn_name="plan")
            if case.status != "pass":
                yield case
                return
            outs.append(out)
    label = "one plan, three inputs of its key: no planning in the calls"
    if counts:
        yield Case(label, "fail", f"during the three calls of one plan: {_counted_words(counts)}",
                   "the plan works its launch out again on every call: compute BLOCK, num_warps, the grid and the "
                   "output's shape once in __init__, keep them on self, and only allocate and launch in __call__")
        return
    yield Case(label, "pass")
    yield _kept_case("one plan, three inputs of its key: each result kept", (a, b, c), outs, "plan")


def _block_of(mod, x):
    """The BLOCK a plan for ``x`` keeps (None: no such attribute, or the plan raised)."""
    try:
        return getattr(mod.SoftmaxPlan(x), "BLOCK", None)
    except Exception:  # noqa: BLE001
        return None


class _Recorder:
    """Stands for ``softmax_kernel`` in the module during a call: records each launch's grid and keyword
    arguments, then launches the real kernel."""

    def __init__(self, kernel):
        self.kernel, self.launches = kernel, []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.launches.append((grid, kwargs))
            return self.kernel[grid](*args, **kwargs)
        return launch

    def __getattr__(self, name):
        return getattr(self.kernel, name)


def _launch_case(mod, x) -> Case:
    """A plan's launch uses the lesson-02 helpers the stub names: BLOCK = next_power_of_2(n_cols), num_warps =
    warps_for(BLOCK), NUM_STAGES = stages_for(BLOCK, element size), grid = (num_programs(...),). A slip there
    gives right values (the interpreter ignores num_warps, and the kernel loops over the rows whatever the grid)
    and a slow launch on a GPU."""
    label = f"SoftmaxPlan: the launch's BLOCK, num_warps, NUM_STAGES and grid, {_words(x)}"
    helpers = [getattr(mod, n, None) for n in HELPERS]
    kernel = getattr(mod, "softmax_kernel", None)
    if kernel is None or not all(callable(h) for h in helpers):
        return Case(label, "pass")
    warps_for, stages_for, num_programs = helpers
    rec = _Recorder(kernel)
    try:
        plan = mod.SoftmaxPlan(x)
        mod.softmax_kernel = rec
        try:
            plan(x)
        finally:
            mod.softmax_kernel = kernel
    except Exception as exc:  # noqa: BLE001
        return error_case(label, exc)
    if len(rec.launches) != 1:
        return Case(label, "pass")  # launched another way: the values were graded above
    grid, kw = rec.launches[0]
    BLOCK = triton.next_power_of_2(x.shape[1])
    warps, stages = warps_for(BLOCK), stages_for(BLOCK, x.element_size())
    want = {"BLOCK": BLOCK, "num_warps": warps, "NUM_STAGES": stages}
    saw = {k: kw.get(k) for k in want}
    wrong = [k for k in want if saw[k] != want[k]]
    if wrong:
        swapped = saw["num_warps"] == stages and saw["NUM_STAGES"] == warps and warps != stages
        how = {"BLOCK": "BLOCK = triton.next_power_of_2(n_cols)", "num_warps": "num_warps = warps_for(BLOCK)",
               "NUM_STAGES": "NUM_STAGES = stages_for(BLOCK, x.element_size())"}
        return Case(label, "fail", "the launch had " + ", ".join(f"{k}={saw[k]}" for k in wrong) + "; the lesson's "
                    "helpers give " + ", ".join(f"{k}={want[k]}" for k in wrong),
                    ("num_warps and NUM_STAGES are swapped in the launch: " if swapped else
                     "the plan's launch settings are not the lesson's: ") + "; ".join(how[k] for k in wrong)
                    + ". Work them out once in __init__ and pass them to every launch; the values come out right "
                    "either way, but the kernel runs slower on a GPU")
    programs = num_programs(x, x, BLOCK, warps, stages)
    got = grid(kw) if callable(grid) else grid
    if tuple(got) != (programs,):
        return Case(label, "fail", f"the launch's grid was {tuple(got)}; num_programs gives {programs} for this input",
                    "the grid is (num_programs(x, x, BLOCK, num_warps, num_stages),): as many programs as fit at "
                    "once (a program per row in the interpreter). The kernel loops over the rows, so fewer programs "
                    "give right values, but the rows run one program after another instead of side by side")
    return Case(label, "pass")


def _kept_case(label, inputs, outs, fn_name):
    """Earlier results are still right after later calls (no output buffer handed out twice)."""
    for i, (x, y) in enumerate(zip(inputs, outs)):
        later = [j for j, z in enumerate(outs) if j > i and z.untyped_storage().data_ptr() == y.untyped_storage().data_ptr()]
        still = torch.allclose(y.double(), torch.softmax(x.double(), dim=-1), atol=1e-3, rtol=1e-2)
        if later or not still:
            j = (later or [len(outs) - 1])[0]
            return Case(label, "fail", f"after call {j + 1}, the result of call {i + 1} had changed"
                        + (" (both calls returned one buffer)" if later else ""),
                        f"your {fn_name} returned the same output tensor to two calls: the later call overwrote the "
                        "earlier result. Allocate the output in each call (torch.empty(shape, dtype=..., device=...): "
                        "PyTorch's caching allocator makes that cheap), so each caller gets a result of its own")
    return Case(label, "pass")


def _reused_hint(i, inputs, out=None) -> str:
    """The hint for a call that a plan of its own gets right, but ``softmax`` got wrong: a plan was reused (one
    whose output has the wrong output's shape and dtype, where one does)."""
    x = inputs[i][1]
    mine = _spec(x)
    earlier = [(sum(_spec(y)[k] != mine[k] for k in WHY), j) for j, (_, y) in enumerate(inputs[:i])]
    earlier = [e for e in earlier if e[0] > 0]
    if isinstance(out, torch.Tensor):
        made = [e for e in earlier if inputs[e[1]][1].dtype == out.dtype and tuple(inputs[e[1]][1].shape) == tuple(out.shape)]
        earlier = made or earlier
    if not earlier:
        return ""
    _, j = min(earlier)
    y = inputs[j][1]
    fields = [k for k in WHY if _spec(y)[k] != mine[k]]
    why = "; ".join(WHY[k] for k in fields)
    return (f"a plan of its own gets this input right (checked above), so softmax reused the plan made for "
            f"{_words(y)} (call {j + 1}) for {_words(x)}: they differ in {_fields_words(fields)}. {why[0].upper() + why[1:]}. "
            "softmax must look plans up by plan_key(x), and the key must hold x.shape, x.stride() and x.dtype")


def _fields_words(fields) -> str:
    return " and ".join({"aligned": "16-byte alignment"}.get(k, k) for k in fields)


def _unplanned_hint(i, inputs) -> str:
    """The hint for an input of a new key that ``softmax`` ran with an earlier plan (right values or not)."""
    x = inputs[i][1]
    mine = _spec(x)
    diffs = [([k for k in mine if _spec(y)[k] != mine[k]], j) for j, (_, y) in enumerate(inputs[:i])]
    fields, j = min((d for d in diffs if d[0]), key=lambda d: len(d[0]))
    why = "; ".join(WHY[k] for k in fields if k in WHY)
    return (f"softmax reused the plan made for {_words(inputs[j][1])} (call {j + 1}, or another of its key) for "
            f"{_words(x)}: they differ in {_fields_words(fields)}" + (f". {why[0].upper() + why[1:]}" if why else "")
            + ". softmax must look plans up by plan_key(x), and the key must hold x.shape, x.stride(), x.dtype, "
            "x.device and x.data_ptr() % 16 == 0")


def _launcher_cases(mod, inputs):
    """``softmax`` over the sequence: right at every call, no planning for a key seen before, results kept."""
    plans = getattr(mod, "_PLANS", None)
    if isinstance(plans, dict):
        plans.clear()
    seen, outs, keys = set(), [], []
    made = 0
    for i, (label, x) in enumerate(inputs):
        key = tuple(_spec(x).values())
        with counting(mod) as counts:
            case, out = _graded(f"softmax, call {i + 1}: {label}", mod.softmax, x)
        if case.status == "fail":
            case.hint = _reused_hint(i, inputs, out) or case.hint
        if case.status != "pass":
            yield case
            return
        if key not in seen and made and not counts.get("SoftmaxPlan", 0):  # plans are counted, and none was made
            yield Case(f"softmax, call {i + 1}: a plan of its own for a key not seen before", "fail",
                       f"softmax made no plan for {_words(x)}, which no earlier call had, and ran a plan made before",
                       _unplanned_hint(i, inputs))
            return
        made += counts.get("SoftmaxPlan", 0)
        if key in seen and counts:
            yield Case(f"softmax, call {i + 1}: no planning for a key seen before", "fail",
                       f"softmax was called with {_words(x)} before; this call ran {_counted_words(counts)}",
                       "planning redone on every call: softmax must keep the plan it made for a key (in _PLANS, under "
                       "plan_key(x)) and reuse it, not make a new one or work BLOCK and the grid out again")
            return
        seen.add(key)
        outs.append(out)
        keys.append(x)
        yield case
    if made > len(seen):
        yield Case("softmax: one plan per key", "fail", f"{made} plans made for {len(seen)} keys",
                   "planning redone: softmax made more than one plan for some key; keep each plan in _PLANS under "
                   "plan_key(x)")
        return
    yield _kept_case("softmax: every result kept after the later calls", keys, outs, "softmax")


def grade(mod):
    kernel = _kernel_case(mod)
    if kernel is not None:
        yield kernel
        if kernel.status != "pass":
            return
    for case in _key_cases(mod):
        yield case
        if case.status != "pass":
            return
    gen = torch.Generator().manual_seed(0)
    inputs = _inputs(gen)
    for case in _plan_cases(mod, inputs):
        yield case
        if case.status != "pass":
            return
    for case in _launcher_cases(mod, _inputs(gen)):
        yield case
        if case.status != "pass":
            return
    yield refuses("a row too long for one block raises ValueError pointing to lesson 05", mod.softmax,
                  torch.zeros(1, 1 << 16, device=mode.DEVICE),
                  hint="rows longer than MAX_COLS must be refused (a ValueError that points to lesson 05) when the plan "
                       "is made: softmax makes a new plan with _new_plan(x), which checks x first, not SoftmaxPlan(x)",
                  message_hint=(lambda m: "05" in m or "online" in m,
                                                "say where to go: lesson 05, the online softmax"))
    yield refuses("a 1-D x raises ValueError", mod.softmax, torch.ones(8, device=mode.DEVICE),
                  hint="check a new input before planning for it (validate(x, names=['x'], ndim=2))")
