"""Checks a `faulthunt stress --count 2` run of numba-cuda's own unittest-style cudapy tests:
every test ran twice (faulthunt repeats the unittest items pytest-repeat leaves alone), nothing
was left unrepeated, subtests are counted, and pytest-benchmark said nothing. Prints a verdict;
exit 1 on any mismatch. Arguments: RUN_DIR COUNT [PLAIN_PYTEST_OUTPUT]."""

import re
import sys
from pathlib import Path

from faulthunt.records.events import Collected
from faulthunt.rundir import Layout, RunDir

run = RunDir(Path(sys.argv[1]))
count = int(sys.argv[2])
plain = Path(sys.argv[3]).read_text(errors="replace") if len(sys.argv) > 3 else ""
summary = run.summary()
if summary is None:
    print(f"no readable summary.json in {run.path}: {[str(p) for p in run.problems()]}")
    sys.exit(1)
problems = []
short = {r.base_nodeid: sum(r.outcomes.values()) for r in summary.by_test
         if sum(r.outcomes.values()) != count}
if short:
    problems.append(f"{len(short)} test(s) not run {count} times: "
                    + ", ".join(f"{k} x{v}" for k, v in list(short.items())[:10]))
collected = [e for e in run.worker_events() if isinstance(e, Collected)]
repeated = collected[0].repeated if collected else {}
not_repeated = [n for e in collected for n in e.not_repeated]
if not collected:
    problems.append("no 'collected' record from any worker")
if not_repeated:
    problems.append(f"{len(not_repeated)} item(s) not repeated, e.g. {not_repeated[0].nodeid}: "
                    f"{not_repeated[0].why}")
plain_sub = sum(int(n) for n in re.findall(r"(\d+) subtests? (?:passed|failed|skipped)", plain))
ours_sub = sum(summary.subtests.values())
# plain pytest runs each unittest-style test once whatever --count says (the bug faulthunt fixes)
if plain_sub and ours_sub != plain_sub * count:
    problems.append(f"subtests: plain pytest reported {plain_sub} (each test once), faulthunt "
                    f"counted {ours_sub}, expected {plain_sub * count}")
log = run.text(Layout.REPRODUCER_LOG) or ""
if "Benchmarks are automatically disabled" in log:
    problems.append("pytest-benchmark's xdist warning is in the output")
if ours_sub and not any(n.startswith("subtests:") for n in summary.notes):
    problems.append("summary notes do not mention the subtests")
plain_runs = re.findall(r"(\d+) (passed|failed|skipped|error|errors|subtests passed)", plain)
print(f"base tests: {len(summary.by_test)}; test runs: {summary.tests_run}; outcomes: "
      f"{summary.outcomes}; repeated by faulthunt: {repeated}; subtests: {summary.subtests}; "
      f"workers: slots {summary.workers.slots}, restarts {summary.workers.restarts}")
print(f"plain pytest -n 8 --count {count} said: {plain_runs}")
print("notes:\n  " + "\n  ".join(summary.notes))
print("\n".join(problems) if problems else
      f"OK: every one of {len(summary.by_test)} tests ran {count} times, subtests reported")
sys.exit(1 if problems else 0)
