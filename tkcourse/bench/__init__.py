"""Benchmarks: every solution against its peer, in one run, into one long-format table.

``core`` measures what the top-level ``benchmarks/<lesson>.py`` lists (``cases() -> list[Case]``,
found by name through ``tkcourse.course.BENCHMARKS``, so that this package never imports ``solutions``) (``triton.testing.do_bench`` medians on a GPU) and writes rows of the table that
every plot reads. Recorded H200 results ship in ``tkcourse/data/h200/bench.csv``.
"""

from .core import (  # noqa: F401
    COLUMNS,
    HOST_BURST,
    HOST_ROUNDS,
    METRICS,
    OPTIONAL,
    RECORDED,
    RECORDED_MODEL,
    TIME_ROUNDS,
    Case,
    GraphTimer,
    RecordsFormatError,
    RecordsNotFound,
    attention_flops,
    bytes_moved,
    capture,
    eager_times,
    graph_ms,
    host_us,
    host_us_interleaved,
    lessons,
    load_model_run,
    load_records,
    matmul_flops,
    measure,
    median_p20_p80,
    provenance,
    run,
    select,
    write_records,
)
from .host import host_and_gpu_time  # noqa: F401
from .peers import copy_case, kernel_copy  # noqa: F401
