"""The bundled planted-fault suite: real kernels on a GPU, numba's simulator (and SIMULATED
stand-ins) on a CPU. Whichever it is, the header and the summary of every run say so.

Settings (environment):
  FAULTHUNT_KERNELS_BACKEND  gpu | sim | auto (default)
  FAULTHUNT_PLANT_EVERY      N: intermittent mode, each planted test runs its bug in 1 run of N
                             (the rest run the correct twin), seeded and reproducible
  FAULTHUNT_PLANT_SEED       the seed of that draw (default 0); "random": a fresh draw every run
"""

from __future__ import annotations

import pytest

from faulthunt.kernels import backend

# Before anything imports numba: the simulator is chosen at numba's import time.
BACKEND = backend.prepare()


def _statement() -> str:
    if BACKEND == backend.GPU:
        return ("faulthunt planted-fault suite: backend gpu: real CUDA C++ (NVRTC + cuda.core) "
                "and numba-cuda kernels on the GPU")
    return ("faulthunt planted-fault suite: backend sim: NO GPU here. numba kernels run in "
            "numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1); the wild write (os.abort + Xid 31 "
            "line), the misaligned store (Xid 13 lines + sticky error) and the bounded hang are "
            "SIMULATED stand-ins; faults the simulator cannot show are skipped with the reason")


def pytest_sessionstart(session: pytest.Session) -> None:
    """On a GPU, compile planted.cu and import numba-cuda before any test starts, so that the
    per-test timeout (which must stay below the planted hang's 6 s bound) is not spent on NVRTC
    and numba start-up. A failure here is left for the tests themselves to report."""
    if BACKEND != backend.GPU:
        return
    if getattr(session.config.option, "numprocesses", None) and not hasattr(session.config, "workerinput"):
        return  # the xdist controller runs no tests: no CUDA context for it
    try:
        from faulthunt.kernels import cuda_faults

        if cuda_faults.available() is None:
            cuda_faults.kernel("scale")
    except Exception:  # noqa: BLE001 - a warm-up only: the tests themselves report the real failure
        pass
    try:
        import numba.cuda  # noqa: F401
    except Exception:  # noqa: BLE001 - a warm-up only, as above
        pass


def pytest_configure(config: pytest.Config) -> None:
    """Installed (not editable), this suite lives inside the ``faulthunt`` package, so pytest
    sets up ``faulthunt/__init__.py`` as a test package and reads its ``pytest_plugins``
    (``faulthunt.plugin``, for ``-p faulthunt`` on old pytest). The entry point has already
    registered that module as ``faulthunt``: registering it again under its module name was a
    ValueError at the setup of every test ("Plugin already registered under a different
    name"), and ``faulthunt demo`` ran 0 tests. The module name is blocked instead."""
    import sys

    manager = config.pluginmanager
    plugin = sys.modules.get("faulthunt.plugin")
    if plugin is not None and manager.is_registered(plugin) and manager.get_plugin("faulthunt.plugin") is None:
        manager.set_blocked("faulthunt.plugin")


def pytest_report_header(config: pytest.Config) -> str:
    return _statement()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int,
                            config: pytest.Config) -> None:
    terminalreporter.write_line(_statement())
