import os

os.environ.setdefault("TKCOURSE_SOLUTIONS", "1")  # the suite grades the reference solutions

import tkcourse  # noqa: E402,F401  (first: picks the interpreter on a machine with no GPU)


def pytest_collection_modifyitems(items):
    """tests/test_book.py builds the site from the notebooks tests/test_learner_path.py ran: it goes last."""
    items.sort(key=lambda item: item.path.name == "test_book.py")  # a stable sort: the rest keep their order
