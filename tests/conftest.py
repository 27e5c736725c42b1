import os

os.environ.setdefault("TKCOURSE_SOLUTIONS", "1")  # the suite grades the reference solutions
if "PYTEST_XDIST_WORKER" in os.environ:  # one thread each (torch's, numpy's; inherited by the notebooks' kernels):
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):  # two workers on two cores
        os.environ.setdefault(var, "1")  # otherwise each spreads over both and they slow each other

import pytest  # noqa: E402

import tkcourse  # noqa: E402,F401  (first of the course: picks the interpreter on a machine with no GPU)

#: Files whose tests share what they leave in build/executed/. ``make test`` runs the suite on two workers
#: (pytest-xdist, ``--dist loadgroup``): one worker runs these, in this order, and gets them first, since
#: they are the longest part; the other worker meanwhile runs the rest.
NOTEBOOK_FILES = ("test_learner_path.py", "test_book.py")


def pytest_collection_modifyitems(items):
    """tests/test_learner_path.py first, tests/test_book.py (which builds the site from the notebooks the
    first ran) last, both on one worker; the rest keep their order."""
    items.sort(key=lambda item: (item.path.name != "test_learner_path.py", item.path.name == "test_book.py"))
    for item in items:
        if item.path.name in NOTEBOOK_FILES:
            item.add_marker(pytest.mark.xdist_group("notebooks"))
