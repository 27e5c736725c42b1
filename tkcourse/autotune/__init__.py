"""Sweeps: time every config of a kernel at one problem shape, keep failures, save with provenance.

Three modules, one idea each:

    format.py   configs (config_space, config_label, axes_of), Result, Sweep, the JSON file and its
                schema (JSON_SCHEMA, checked with jsonschema), load_sweep/load_sweeps, SWEEPS
    runner.py   sweep(): compile and time each config (do_bench on a GPU, a wall clock in the
                interpreter), record failures with their reason, show progress
    cli.py      ``python -m tkcourse.autotune KERNEL``: the course's kernels, found by name
                (``tkcourse.course.SWEEP_TARGETS`` -> ``benchmarks/sweeps.py``), one JSON per shape

Everything public is importable from here: ``from tkcourse import autotune as at; at.sweep(...)``.
"""

from __future__ import annotations

from .cli import Target, close_to, main, parse_axes, smem_limit
from .format import (
    JSON_SCHEMA,
    MAX_SWEEP_BYTES,
    METRICS,
    SCHEMA,
    SWEEPS,
    Result,
    Sweep,
    SweepFormatError,
    SweepNotFound,
    axes_of,
    config_label,
    config_space,
    higher_is_better,
    load_sweep,
    load_sweeps,
    validate_sweep,
)
from .runner import environment, sweep

__all__ = ["JSON_SCHEMA", "MAX_SWEEP_BYTES", "METRICS", "SCHEMA", "SWEEPS", "Result", "Sweep", "SweepFormatError",
           "SweepNotFound", "Target", "axes_of", "close_to", "config_label", "config_space", "environment",
           "higher_is_better", "load_sweep", "load_sweeps", "main", "parse_axes", "smem_limit", "sweep",
           "validate_sweep"]
