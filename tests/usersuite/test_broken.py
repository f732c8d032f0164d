"""A module that cannot be imported (only collected with USERSUITE_BROKEN=1)."""

import a_module_that_is_not_installed  # noqa: F401


def test_never_runs():
    pass
