"""A small user-style suite: odd parameter ids, unittest classes with subTest, a doctest, tests
that start processes, a flaky test, and (only with USERSUITE_BROKEN=1) a module that cannot be
imported. Driven by tests/test_usersuite.py with real `faulthunt stress` runs; never collected by
faulthunt's own test suite (tests/conftest.py ignores this folder)."""

import os

collect_ignore = [] if os.environ.get("USERSUITE_BROKEN") == "1" else ["test_broken.py"]
