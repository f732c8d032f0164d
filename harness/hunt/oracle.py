"""The flaky oracle: run some tests N times and count failing runs.

Real runs go through ``faulthunt.stress.run_stress`` (a stress run of the given tests with
``--count N``); tests substitute any callable ``(n) -> (failures, runs)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from faulthunt.errors import FaulthuntError, UsageError
from faulthunt.nodeids import check_node_id, pytest_selection

#: ``oracle(n)`` runs the tests ``n`` times and returns (failing runs, runs done)
Oracle = Callable[[int], tuple[int, int]]


def oracle_selection(tests: Sequence[str]) -> list[str]:
    """pytest arguments that run exactly ``tests``: node ids (``--faulthunt-id``, so a
    parametrized id runs under ``--count``) or files and directories, always behind ``--``.

    Raises UsageError for anything that is not a node id or a path (an option such as ``-k``), and
    for a mix of ids and paths (``--faulthunt-id`` would keep only the ids).
    """
    checked = [check_node_id(t, "the tests to bisect") for t in tests]
    ids = [t for t in checked if "::" in t]
    if not ids:
        return ["--", *checked]
    if len(ids) < len(checked):
        raise UsageError("give node ids or paths, not both: "
                         f"{', '.join(t for t in checked if '::' not in t)} is a path",
                         fix="name every test (tests/test_x.py::test_y) or give only files and directories")
    return pytest_selection(ids, "the tests to bisect")


def stress_oracle(pytest_args: Sequence[str], *, cwd: Path | None = None, workers: int = 0,
                  base: Path | None = None, env: dict[str, str] | None = None) -> Oracle:
    """An oracle that stress-runs ``pytest_args`` with ``--count n`` via faulthunt.stress.run_stress.

    ``pytest_args`` selects the tests; from a user or a run, build it with :func:`oracle_selection`.
    """
    from faulthunt.stress import StressOptions, run_stress

    def run(n: int) -> tuple[int, int]:
        res = run_stress(StressOptions(pytest_args=tuple(pytest_args), workers=workers, count=n, cwd=cwd,
                                       base=base, env=env, quiet=True, xid_source="none", ledger="off"))
        s = res.summary
        fails = sum(1 for f in s.get("failures") or [] if f.get("outcome") != "collateral")
        runs = int(s.get("tests_run") or 0)
        if not runs:  # said here, with pytest's reason: "the bad side passed all 0 runs" said nothing
            why = s.get("no_tests_reason") or "pytest collected none of the tests"
            raise FaulthuntError(f"no test ran in {cwd or Path.cwd()}: {why}",
                                 fix="check the tests exist there: python -m pytest --collect-only -q "
                                     "(at the bad ref for bisect), and pass their ids as it lists them")
        return fails, runs

    return run
