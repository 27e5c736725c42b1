"""Your exercises: one module per lesson, generated from solutions/ (see tkcourse.stubs)."""

import tkcourse.mode  # noqa: F401  (before triton: its own jit functions must see TRITON_INTERPRET)
