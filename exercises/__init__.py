"""Your exercises: one module per lesson, generated from solutions/ (see tkcourse.stubs)."""
