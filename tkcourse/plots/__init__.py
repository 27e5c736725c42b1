"""Pictures: each function returns a matplotlib Figure (and widgets drive some of them)."""
