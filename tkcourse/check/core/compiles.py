"""Would a GPU compile it? The graders' last case on a machine without one.

Triton's interpreter runs a kernel as Python, line by line, so it takes kernels that Triton's compiler
refuses: a ``break`` in a loop, a sum started as the int ``0`` and then added an fp32 block (a loop-carried
value that changes type), a variable given a block inside an ``if`` after an int before it, a K side of
``tl.dot`` under 16, a global read that is not a ``tl.constexpr``. A learner on a laptop would pass every
check and meet the error only on a GPU. So once a lesson's cases pass in the interpreter, each kernel of the
learner's files that the grading launched goes through Triton's front end (Python to TTIR, where those
refusals are made) for an H100/H200, with the signature of a launch the grading made.

The compile runs in a child process with ``TRITON_INTERPRET=0`` (this process's ``triton.language`` is set
up for the interpreter, and patched by it during launches), one child for the whole lesson, and its result is
remembered for the same source and signature. A child that cannot set up a compile (an older Triton, an
import that needs a GPU) gives no case: only a refusal of Triton's own fails a learner.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from ... import mode
from ... import triton_internals as ti
from .reports import Case, triton_hint

#: The case's label in a report.
LABEL = "compiles for a GPU (sm_90)"

#: Seconds the child may take for a lesson's kernels before the check is given up (no case).
TIMEOUT_S = 120

_MARK = "tkcourse-compiles:"
_DONE: dict[str, dict] = {}  # spec key -> the child's result for it


@dataclass(frozen=True)
class Spec:
    """One kernel to compile: where it is defined (module name and file), its name there, and the signature
    of a launch (``types``; ``constexprs`` JSON-encoded, a ``tl.dtype`` as ``{"dtype": name}``)."""

    module: str
    file: str
    kernel: str
    types: dict
    constexprs: dict

    def key(self) -> str:
        source = Path(self.file).read_bytes() if Path(self.file).is_file() else b""
        return hashlib.sha1(source + json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()


def enabled() -> bool:
    """In the interpreter only (on a GPU every launch compiles for real), unless ``TKCOURSE_GPU_COMPILE=0``."""
    switch = os.environ.get("TKCOURSE_GPU_COMPILE", "1").strip().lower()
    return mode.INTERPRET and switch not in ("0", "false", "no", "off")


def _encoded(value):
    """A constexpr's value for JSON, or raise TypeError (a function, an object: that kernel is not checked)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    name = getattr(value, "name", None)
    if type(value).__name__ == "dtype" and isinstance(name, str):
        return {"dtype": name}
    raise TypeError(type(value).__name__)


def _decoded(value):
    if isinstance(value, dict) and set(value) == {"dtype"}:
        import triton.language as tl

        return tl.dtype(value["dtype"])
    return value


def spec_of(fn, args, kwargs, folder: str) -> Spec | None:
    """The ``Spec`` of a launch of the Python kernel function ``fn`` defined in a file of ``folder``; None for a
    kernel defined elsewhere (the course's own) or whose launch cannot be written down."""
    code = getattr(fn, "__code__", None)
    if code is None or os.path.dirname(os.path.abspath(code.co_filename)) != folder:
        return None
    try:
        signature = ti.launch_signature(fn, args, kwargs)
        if signature is None:
            return None
        types, constexprs = signature
        return Spec(fn.__module__, os.path.abspath(code.co_filename), fn.__name__, types,
                    {k: _encoded(v) for k, v in constexprs.items()})
    except Exception:  # noqa: BLE001 -- a launch the check cannot describe is not checked, never an error
        return None


@contextlib.contextmanager
def recorded(module):
    """The ``Spec`` of each distinct launch, inside the block, of a kernel defined beside ``module``'s file (the
    learner's exercises): a list that fills as kernels launch. Empty where ``enabled()`` is false."""
    seen: list[Spec] = []
    file = getattr(module, "__file__", None)
    if not enabled() or not file:
        yield seen
        return
    folder = os.path.dirname(os.path.abspath(file))
    keys = set()

    def interpreted_run(orig):
        def run(self, *args, grid, warmup, **kwargs):
            spec = spec_of(getattr(self, "fn", None), args, kwargs, folder)
            if spec is not None:
                key = json.dumps(asdict(spec), sort_keys=True)
                if key not in keys:
                    keys.add(key)
                    seen.append(spec)
            return orig(self, *args, grid=grid, warmup=warmup, **kwargs)
        return run

    with ti.launches_replaced(lambda orig: orig, interpreted_run, lambda orig: orig):
        yield seen


def case(specs: list[Spec]) -> Case | None:
    """A passing case when every kernel in ``specs`` compiles, an error case naming the first that Triton's
    compiler refuses (where, and what it means), or None when nothing could be checked."""
    if not specs:
        return None
    todo = [s for s in specs if s.key() not in _DONE]
    if todo:
        for spec, result in zip(todo, _compile_in_child(todo)):
            _DONE[spec.key()] = result
    results = [(s, _DONE.get(s.key(), {"status": "skip"})) for s in specs]
    for spec, result in results:
        if result["status"] == "refused":
            return _refused_case(spec, result)
    checked = [s.kernel for s, r in results if r["status"] == "ok"]
    if not checked:
        return None
    return Case(LABEL, "pass", f"{', '.join(dict.fromkeys(checked))}: Triton's compiler takes "
                + ("it" if len(set(checked)) == 1 else "them"))


def _refused_case(spec: Spec, result: dict) -> Case:
    where = f"{Path(spec.file).parent.name}/{Path(spec.file).name}"
    if result.get("line"):
        where += f":{result['line']}"
    message = result["message"].strip()
    if len(message) > 600:
        message = message[:600] + " ..."
    detail = f"{result.get('kind', 'CompilationError')} in {result.get('function') or spec.kernel}, {where}"
    if result.get("code"):
        detail += f":\n    {result['code'].strip()}"
    detail += f"\n{message}"
    said = triton_hint(message) or "the message above says what Triton's compiler refused, and the line where"
    return Case(LABEL, "error", detail, f"the interpreter ran your kernel, but on a GPU it would not compile: {said}")


def _compile_in_child(specs: list[Spec]) -> list[dict]:
    """Each spec's result from one child process (``TRITON_INTERPRET=0``): ``{"status": "ok"}``, ``"refused"``
    with Triton's message, or ``"skip"`` (the compile could not be set up)."""
    env = dict(os.environ, TRITON_INTERPRET="0")
    env.pop("TKCOURSE_SOLUTIONS", None)  # the child imports files by path, never by lesson
    root = str(Path(__file__).resolve().parents[3])
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in [env.get("PYTHONPATH")] if p])
    try:
        proc = subprocess.run([sys.executable, "-m", __name__], input=json.dumps([asdict(s) for s in specs]),
                              env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return [{"status": "skip"} for _ in specs]
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(_MARK):
            results = json.loads(line[len(_MARK):])
            if len(results) == len(specs):
                return results
    return [{"status": "skip"} for _ in specs]


# -- in the child ---------------------------------------------------------------------------------------


def _kernel(spec: dict):
    """The compiled-mode ``JITFunction`` of ``spec``'s kernel, its file imported afresh."""
    import importlib.util

    file = Path(spec["file"])
    name = spec["module"] if spec["module"] not in ("__main__", "") else file.stem
    root = file.parents[name.count(".")] if name.count(".") < len(file.parents) else file.parent
    for path in (str(root), str(file.parent)):
        if path not in sys.path:
            sys.path.insert(0, path)
    if name in sys.modules and os.path.abspath(getattr(sys.modules[name], "__file__", "") or "") == str(file):
        module = sys.modules[name]
    else:
        loader_spec = importlib.util.spec_from_file_location(name, file)
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[name] = module
        loader_spec.loader.exec_module(module)
    kernel = getattr(module, spec["kernel"])
    while not ti.is_jit(kernel) and hasattr(kernel, "fn"):  # an Autotuner's or Heuristics' kernel
        kernel = kernel.fn
    if not ti.is_jit(kernel):
        raise TypeError(f"{spec['kernel']} is not a @triton.jit kernel here")
    return kernel


def _refusal(error, file: Path) -> dict:
    """What a ``CompilationError`` says: its innermost cause of Triton's kind (an error in a helper the kernel
    calls is raised again at the call), the function and line of the learner's file it points at, and the
    message (Triton's own, or the Python error it wraps)."""
    inner = error
    while isinstance(inner.__cause__, ti.compile_errors()):
        inner = inner.__cause__
    message = getattr(inner, "error_message", None) or (repr(inner.__cause__) if inner.__cause__ else str(inner))
    src, node = getattr(inner, "src", None) or "", getattr(inner, "node", None)
    function = next((ln.split("(")[0][4:].strip() for ln in src.splitlines() if ln.lstrip().startswith("def ")), "")
    line = code = None
    lines = file.read_text().splitlines() if file.is_file() else []
    starts = [i for i, ln in enumerate(lines, 1) if function and ln.lstrip().startswith(f"def {function}(")]
    if getattr(node, "lineno", None) and len(starts) == 1:
        line = starts[0] + node.lineno - 1
        code = lines[line - 1] if line <= len(lines) else None
    return {"status": "refused", "kind": type(inner).__name__, "message": message, "line": line, "code": code,
            "function": function}


def _compile_one(spec: dict) -> dict:
    try:
        kernel = _kernel(spec)
    except Exception as e:  # noqa: BLE001 -- cannot set up the compile: no case
        return {"status": "skip", "why": f"{type(e).__name__}: {e}"}
    constexprs = {k: _decoded(v) for k, v in spec["constexprs"].items()}
    try:
        ti.front_end_compile(kernel, spec["types"], constexprs)
    except ti.compile_errors() as e:
        return _refusal(e, Path(spec["file"]))
    except Exception as e:  # noqa: BLE001 -- this Triton's compiler API differs: no case
        return {"status": "skip", "why": f"{type(e).__name__}: {e}"}
    return {"status": "ok"}


def _main() -> None:
    specs = json.load(sys.stdin)
    print(_MARK + json.dumps([_compile_one(s) for s in specs]), flush=True)


if __name__ == "__main__":
    _main()
