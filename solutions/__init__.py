"""Reference kernels of the course: a small Triton kernel library with a stable API.

Each module is one lesson (``vector_add``, ``softmax``, ``matmul``, ...). The regions between
``### BEGIN SOLUTION`` and ``### END SOLUTION`` are what ``exercises/`` leaves for the learner
(``make exercises`` regenerates them). ``kernels/`` is the library of fast paths, one module per
kernel behind its lesson's API, above every lesson (no lesson imports it). Importing
``tkcourse.mode`` first makes the kernels run in Triton's interpreter when there is no GPU.
"""

import tkcourse.mode  # noqa: E402,F401  (before triton: its own jit functions must see TRITON_INTERPRET)
