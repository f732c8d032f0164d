"""The defaults of a stress run, importable without importing the engine (the CLI's --help)."""

from __future__ import annotations

#: restart budget handed to xdist: a stress run may crash many workers (xdist's default is 4*n)
DEFAULT_MAX_WORKER_RESTART = 1000
#: per-test seconds before a test counts as hung, when neither --timeout nor the suite's own
#: pytest configuration says: far above a GPU test's usual seconds, far below a CI job's limit
DEFAULT_TIMEOUT_S = 300.0
#: the --ledger modes (faulthunt.ledger.MODES, which tests/test_stress_output.py checks)
LEDGER_MODES = ("auto", "full", "cupti", "numba", "cupy", "torch", "off")
#: the workers' guard-mode variable (faulthunt.guard.config.GUARD_ENV, which
#: tests/test_stress_lazy.py checks): read here without importing the guard package
GUARD_ENV = "FAULTHUNT_GUARD"
