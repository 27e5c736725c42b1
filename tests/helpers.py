"""What several test files share (pytest puts tests/ on sys.path: `from helpers import ...`)."""

import importlib.util
from pathlib import Path

import torch
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from tkcourse import check, mode  # first: the interpreter is chosen before triton is imported


def book_build():
    """book/build.py as a module (the site's builder is a script, not a package module)."""
    spec = importlib.util.spec_from_file_location("book_build", Path(__file__).resolve().parents[1] / "book" / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def randn(*shape, dtype=torch.float32, scale=1.0, seed=0):
    """Seeded normal values on the mode's device, made in fp32 and then cast to ``dtype``."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to(dtype).to(mode.DEVICE)


def assert_softmax(out, x, reference):
    """``out`` is softmax(x) over the last dim: x's dtype and shape, within one rounding of fp16."""
    assert out.dtype == x.dtype and out.shape == x.shape
    # fp16: one rounding of the fp32 result (~1e-3 relative); fp32: exp.approx on a GPU
    tol = dict(rtol=2e-3, atol=1e-5) if x.dtype == torch.float16 else dict(rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(out, reference(x), **tol)


def assert_grader_catches(lesson, module, name, hint=None):
    """The grader of ``lesson`` fails the planted ``module`` and, given ``hint``, its first problem's
    hint names the mistake. A planted kernel that does not compile (Triton's compiler on a GPU is
    stricter than the interpreter) may end in an error instead, if its hint names the mistake.
    Returns the grader's report."""
    rep = check.run(lesson, module=module, quiet=True)
    named = hint is not None and rep.first_problem() is not None and hint in rep.first_problem().hint
    assert rep.status == "fail" or (rep.status == "error" and named), f"{name} slipped through:\n{rep}"
    bad = rep.first_problem()
    if hint is not None:
        assert hint in bad.hint, f"{name}: {bad}"
    return rep


def assert_grader_reports(lesson, fn, words, name="matmul"):
    """The grader of ``lesson``, given a module whose function ``name`` is ``fn`` (one that raises, returns
    None, the wrong shape, ...), reports a problem instead of crashing, and its first problem says ``words``.
    Returns the grader's report."""
    import types

    rep = check.run(lesson, module=types.SimpleNamespace(**{name: fn}, __name__="planted"), quiet=True)
    assert rep.status in ("fail", "error", "todo"), rep
    bad = rep.first_problem()
    assert words in bad.detail + bad.hint, rep
    return rep


@triton.jit
def _copy(src_ptr, dst_ptr, n, SHIFT: tl.constexpr, MASK_LOAD: tl.constexpr, BLOCK: tl.constexpr):
    """dst[i + SHIFT] = src[i] for i < n; the store is masked, the load only with MASK_LOAD."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(src_ptr + offs, mask=mask) if MASK_LOAD else tl.load(src_ptr + offs)
    tl.store(dst_ptr + offs + SHIFT, x, mask=mask)


def copied_out_of_bounds(result, bug):
    """``result`` copied by a Triton kernel into a torch.zeros output, with the out-of-bounds ``bug``:
    "store far" (every store 100000 elements past the end) or "load past" (the last block's load
    unmasked). The planted kernels of the attention graders return this."""
    src = result.contiguous()
    out = torch.zeros_like(src)  # zero-filled: the canary after torch.empty* does not guard it
    n, block = src.numel(), 512  # graded sizes are rarely multiples of 512: the last block is partial
    shift = 100_000 if bug == "store far" else 0
    _copy[(triton.cdiv(n, block),)](src, out, n, SHIFT=shift, MASK_LOAD=bug != "load past", BLOCK=block)
    return out


def mutant(source: str, edits, name: str, origin: str):
    """A lesson's solution with each edit applied, as a module of its own (``solutions.<name>``): an edit is
    ``(old, new)`` or ``(old, new, count)``, ``old`` found exactly ``count`` times (once by default) in
    ``source``, the text of ``origin`` (named in the failure when a solution changes under a planted edit)."""
    import linecache
    import types

    text = source
    for old, new, *count in edits:
        expected = count[0] if count else 1
        assert text.count(old) == expected, f"the planted edit no longer matches {origin}: {old!r}"
        text = text.replace(old, new)
    mod = types.ModuleType(f"solutions.{name}")
    mod.__package__ = "solutions"
    filename = f"<planted {name}>"
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)  # @triton.jit reads its source
    exec(compile(text, filename, "exec"), mod.__dict__)
    return mod


def planted_file(tmp_path, lesson: str, edits, origin: str = "solutions"):
    """``<origin>/<lesson>.py`` as a learner would have finished it (the answer, no markers), each edit ``(old,
    new)`` applied (``old`` found once), written to ``tmp_path/exercises/`` (a folder of that name, as a learner's
    file lies in) and imported from there: the module, and the file's lines. A real file, unlike ``mutant``'s:
    what reads the kernel's file (a compile in another process, say) finds it."""
    import importlib.util
    import re
    from pathlib import Path

    from tkcourse import stubs

    text = stubs.answer_text((Path(__file__).resolve().parents[1] / origin / f"{lesson}.py").read_text())
    for old, new in edits:
        assert text.count(old) == 1, f"the planted edit no longer matches {origin}/{lesson}.py: {old!r}"
        text = text.replace(old, new)
    text = re.sub(r"^(\s*)from \.(\w*) import", lambda m: f"{m[1]}from {origin}{'.' if m[2] else ''}{m[2]} import",
                  text, flags=re.M)  # the package's relative imports, from outside it
    path = tmp_path / "exercises" / f"{lesson}.py"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(f"planted_exercise_{lesson}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod, text.splitlines()
