import os

os.environ.setdefault("TKCOURSE_SOLUTIONS", "1")  # the suite grades the reference solutions

import tkcourse  # noqa: E402,F401  (first: picks the interpreter on a machine with no GPU)
