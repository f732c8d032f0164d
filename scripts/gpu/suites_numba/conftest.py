"""What numba-cuda's repository conftest gives its tests (it is not shipped in the wheel): the
--dump-failed-filechecks option and the class-scoped initialize_from_pytest_config fixture."""

import pytest


def pytest_addoption(parser):
    parser.addoption("--dump-failed-filechecks", action="store_true", default=False)


@pytest.fixture(scope="class")
def initialize_from_pytest_config(request):
    request.cls._dump_failed_filechecks = request.config.getoption("dump_failed_filechecks")
