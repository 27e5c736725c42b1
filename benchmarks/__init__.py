"""What the course measures for each lesson: one module per lesson, above both the solutions and ``tkcourse``.

``benchmarks/<lesson>.py`` lists a lesson's cases (``cases() -> list[Case]``, optionally
``extra_rows(provenance) -> rows``): it imports the reference kernels from ``solutions`` and the
measuring code from ``tkcourse.bench``. This is the one place that imports both, so that nothing in
``tkcourse`` imports ``solutions``: ``tkcourse bench`` finds these modules by name through the lesson
table in ``tkcourse.course`` (``BENCHMARKS``). The autotune sweep targets live here too.
"""
