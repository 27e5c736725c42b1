"""What several test files share (pytest puts tests/ on sys.path: `from helpers import ...`)."""

import torch

from tkcourse import check, mode


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
    hint names the mistake. Returns the grader's report."""
    rep = check.run(lesson, module=module, quiet=True)
    assert rep.status == "fail", f"{name} slipped through:\n{rep}"
    bad = rep.first_problem()
    if hint is not None:
        assert hint in bad.hint, f"{name}: {bad}"
    return rep
