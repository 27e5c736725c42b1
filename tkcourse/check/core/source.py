"""The learner's kernel source: mistakes that show in the code itself (Python's ``and`` between tensors)."""

from __future__ import annotations

import ast
import inspect
import textwrap


def launched_kernels(fn, names) -> list:
    """The ``@triton.jit`` functions named ``names`` that ``fn`` can reach: its module's globals and its
    closure (a launcher's kernel lives beside it). Unknown names are left out."""
    from ... import triton_internals as ti

    names = set(names)
    found = []
    base = inspect.unwrap(fn) if callable(fn) else fn
    scopes = [getattr(base, "__globals__", {})]
    scopes.append({f"cell{i}": c.cell_contents for i, c in enumerate(getattr(base, "__closure__", None) or ())
                   if _cell_filled(c)})
    for scope in scopes:
        for obj in list(scope.values()):
            if not ti.is_kernel(obj):  # @triton.jit, compiled or interpreted; Autotuner; Heuristics
                continue
            k = obj
            while not inspect.isfunction(k) and hasattr(k, "fn"):
                k = k.fn
            if inspect.isfunction(k) and k.__name__ in names and k not in found:
                found.append(k)
    return found


def _cell_filled(cell) -> bool:
    try:
        cell.cell_contents  # noqa: B018
    except ValueError:
        return False
    return True


def _boolean_ops(py_fn) -> list[tuple[int, str, str, str]]:
    """``(line, source text, "and"/"or", the same with & or |)`` for each ``and``/``or`` between comparisons in ``py_fn``'s body
    that is not an ``if``/``while`` condition (where constexpr tests are fine)."""
    try:
        text = textwrap.dedent(inspect.getsource(py_fn))
        tree = ast.parse(text)
        first = inspect.getsourcelines(py_fn)[1]
    except (OSError, TypeError, SyntaxError):
        return []
    conditions = {id(node.test) for node in ast.walk(tree) if isinstance(node, (ast.If, ast.While, ast.IfExp))}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BoolOp) and id(node) not in conditions \
                and any(isinstance(v, ast.Compare) for v in node.values):
            word, op = ("and", "&") if isinstance(node.op, ast.And) else ("or", "|")
            fixed = f" {op} ".join(f"({ast.get_source_segment(text, v)})" for v in node.values)
            out.append((first + node.lineno - 1, ast.get_source_segment(text, node) or "", word, fixed))
    return out


def boolean_op_hint(fn, kernel_names) -> str:
    """A hint for ``a < n and a >= 0`` in a launched kernel: on tensors Python's ``and`` keeps one test only.

    In Triton's interpreter a kernel is plain Python: a block of booleans counts as true, so ``a and b``
    is ``b`` and ``a or b`` is ``a``; the other test is silently dropped (compiled kernels warn that
    ``and``/``or`` on tensors are deprecated). ``""`` when no launched kernel has one.
    """
    if fn is None or not kernel_names:
        return ""
    for py_fn in launched_kernels(fn, kernel_names):
        for line, text, word, fixed in _boolean_ops(py_fn):
            kept = "the last" if word == "and" else "the first"
            return (f"`{text}` ({py_fn.__name__}, line {line}): Python's `{word}` on tensors keeps only one of the "
                    f"tests ({kept}: a block of booleans counts as true), so the others are dropped. Combine "
                    f"tensor tests with `{'&' if word == 'and' else '|'}`, each in parentheses: {fixed}")
    return ""
