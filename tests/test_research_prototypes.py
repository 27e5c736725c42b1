"""Gluon kernels that a CPU test can only compile (a research prototype, and the library's Gluon backward): they still compile for an
H100/H200 (sm_90a) with the installed Triton, as their probes will need, and within the registers they were
built for. A change in Triton's Gluon API shows here before a GPU session is spent on it.

Each compile runs in a process of its own with ``TRITON_INTERPRET=0``: this process runs Triton's
interpreter (``tkcourse.mode``), which cannot build a Gluon kernel for a GPU."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def compiled(code: str) -> str:
    """What ``code`` prints, run from the checkout in a process that compiles for the GPU."""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT,
                         env=dict(os.environ, TRITON_INTERPRET="0", PYTHONPATH=str(ROOT)))
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout


def test_the_gluon_decode_prototype_compiles_for_sm90_without_spills():
    out = compiled("import torch\nfrom research.decode import gluon_decode as g\n"
                   "shared, line = g.compile_for_sm90(torch.float16, 128, 16, 4, 64, 3)[:2]\nprint(shared)\nprint(line)")
    shared, line = out.splitlines()[-2:]
    assert int(shared) <= 227 * 1024, shared  # what an H100/H200 gives one program
    assert "0 bytes spill stores" in line, line


def test_the_gluon_attention_backward_compiles_clean_for_sm90():
    """The library's Gluon backward (``solutions/kernels/gluon_attention_backward.py``) at D 64, causal: no
    spills, no wgmma serialized by ptxas, and no write of a wgmma's register operand while that wgmma may run
    (the race ``wgmma_races.py`` finds)."""
    summary = compiled("import torch\nfrom research.hopper import compile_check as c\n"
                       "print(c.ptxas_summary(c.compile_backward(torch.float16, 64, True).asm['ptx']))")
    summary = summary.splitlines()[-1]
    assert "spill stores/loads 0/0 bytes" in summary and "not serialized" in summary, summary
    assert summary.endswith("register-operand races: none"), summary


def test_the_table_ahead_decode_prototype_is_right_in_the_interpreter():
    """``research/decode/table_ahead.py``: the split kernel with the block table read before the loop gives
    the library's outputs (pages 1, 4 and 16, one and several splits) and its NaN rows (a zero length, a page
    outside the pool), in Triton's interpreter."""
    run = subprocess.run([sys.executable, "research/decode/table_ahead.py"], capture_output=True, text=True,
                         timeout=300, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert run.stdout.count(": ok (") == 4 and "NaN rows [False, True]" in run.stdout, run.stdout


def test_the_table_ahead_prototype_gives_k_and_v_two_buffers_at_three_stages():
    """Its premise, compiled for sm_90a: at 3 stages Triton's pipeliner keeps one buffer of K and of V for the
    library's split kernel (their addresses come from a load of the loop) and two for the prototype, whose
    page indices come from registers."""
    out = compiled("from research.decode import table_ahead as t\nfor line in t.compile_pair(3).values(): print(line)")
    library, ahead = out.splitlines()[-2:]
    assert "'1x128x128'" in library and "2x128x128" not in library, library
    assert "'2x128x128'" in ahead, ahead


def test_the_tma_decode_prototype_is_right_in_the_interpreter():
    """``research/decode/tma_pages.py``: the split kernel with K and V by tensor descriptors gives the library's
    outputs (pages 16 and 32, boxes of 16 and 32 tokens, several boxes a step, one and several splits), lets no
    NaN of the pool's rows past a sequence's end in, and keeps the library's NaN rows (a zero length, a page
    outside the pool), in Triton's interpreter."""
    run = subprocess.run([sys.executable, "research/decode/tma_pages.py"], capture_output=True, text=True,
                         timeout=300, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert run.stdout.count(": ok (") == 4 and "NaN rows [False, True]" in run.stdout, run.stdout


def test_the_decode_pattern_probe_reads_what_its_kernels_sum():
    """``research/decode/pattern_probe.py --check``: its read-only kernels (a KV head's rows
    through the block table, whole pages through it) sum exactly the cache's live tokens, in the interpreter, so
    their GPU times are times of reading those bytes."""
    run = subprocess.run([sys.executable, "research/decode/pattern_probe.py", "--check"], capture_output=True,
                         text=True, timeout=300, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "sum what they read" in run.stdout, run.stdout
