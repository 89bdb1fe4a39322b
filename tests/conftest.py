"""Order of the cross-package suite under pytest-xdist (``--dist loadfile`` hands out whole
files in collection order, one per free worker): the longest single tests go first, so they
overlap the learning-matrix files instead of starting after them and ending the run alone."""

from __future__ import annotations

#: files whose one long test (minutes) should start first, longest first
LONG_FIRST = ("tests/test_trl_compare.py", "tests/test_quickstart.py")


def pytest_collection_modifyitems(session, config, items):
    def rank(item) -> int:
        path = item.nodeid.split("::", 1)[0]
        return LONG_FIRST.index(path) if path in LONG_FIRST else len(LONG_FIRST)

    items.sort(key=rank)  # stable: the rest keep their order
