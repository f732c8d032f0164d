"""Bench rows: the plugin's cost per test in a worker (issue 16: "about 64 us per test").

``hook_cost``: the plugin's own per-test work, in this process, without pytest around it: the
hook bodies a worker runs for one passing test of a pytest-repeat step (the protocol wrapper with
its ``start`` and ``end`` records, three reports), against the same loop through no-op hooks.
Precise (no process start-up or scheduling in it), so the figure holds on a busy machine.

``per_test_cost``: the whole thing. Ours and the baseline run the same generated suite of trivial tests in a fresh process each,
``pytest -p no:cacheprovider -p no:randomly`` without xdist (one process, so the figure is what
one worker pays), ours with the plugin active (``FAULTHUNT_RUN_DIR`` set), the baseline with it
kept out (``-p no:faulthunt``). Each process reports the CPU time of its run loop alone (from
``pytest_collection_finish`` to ``pytest_sessionfinish``: start-up and imports left out, so the
difference is the per-test work: two records per test, the context, the output bounding, the
child-process wrappers). Goal: under 20 us of CPU per test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from benchrows import Row, Samples, paired

HOOKS = textwrap.dedent('''
    import json, os, pathlib, sys, tempfile, time, types
    import pytest
    from faulthunt import plugin

    N, ROUNDS = int(sys.argv[1]), int(sys.argv[2])
    run = pathlib.Path(tempfile.mkdtemp(prefix="faulthunt-bench-hooks-"))

    class Config:
        option = types.SimpleNamespace()
        def __init__(self):
            self.stash = pytest.Stash()
        def getoption(self, name, default=None):
            return default

    class Callspec:
        def __init__(self, i):
            self.params = {"x": i, plugin.REPEAT_PARAM: 2}
            self.id = f"{i}-3-50"

    class Parent:
        nodeid = "tests/test_k.py"

    class Item:  # a pytest-repeat step of a parametrized test, as pytest makes it
        def __init__(self, i, config):
            self.nodeid = f"tests/test_k.py::test_t[{i}-3-50]"
            self.name, self.originalname = f"test_t[{i}-3-50]", "test_t"
            self.stash, self.config, self.parent = pytest.Stash(), config, Parent()
            self.callspec = Callspec(i)
        def get_closest_marker(self, name):
            return None

    class Report:
        failed = skipped = False
        outcome, longrepr = "passed", None
        def __init__(self, when):
            self.when, self.sections = when, []

    class Noop:  # the same calls, doing nothing
        def pytest_runtest_protocol(self, item, nextitem):
            yield
        def pytest_runtest_logreport(self, report):
            pass

    config = Config()
    ours = plugin.WorkerRecorder(config, run, recycle=False)
    reports = [Report("setup"), Report("call"), Report("teardown")]
    out = {}
    for name, rec in (("base", Noop()), ("ours", ours)):
        best = float("inf")
        for _ in range(ROUNDS):
            items = [Item(i, config) for i in range(N)]  # fresh: nothing cached from a round
            t0 = time.perf_counter()
            for item in items:
                gen = rec.pytest_runtest_protocol(item, None)
                next(gen)
                for r in reports:
                    rec.pytest_runtest_logreport(r)
                for _ in gen:
                    pass
            best = min(best, time.perf_counter() - t0)
        out[name] = best
    print(json.dumps(out))
''')


def hook_cost(quick: bool) -> Row:
    tests, rounds, repeat = (2000, 2, 2) if quick else (20000, 3, 5)
    tmp = Path(tempfile.mkdtemp(prefix="faulthunt-bench-hooks-"))
    try:
        (tmp / "hooks.py").write_text(HOOKS)
        got: dict[str, list[float]] = {"ours": [], "base": []}
        for _ in range(repeat):
            env = {k: v for k, v in os.environ.items() if not k.startswith("FAULTHUNT_")}
            out = subprocess.run([sys.executable, "hooks.py", str(tests), str(rounds)], cwd=tmp,
                                 env=env, capture_output=True, text=True, check=True)
            sample = json.loads(out.stdout.strip().splitlines()[-1])
            for side in got:
                got[side].append(sample[side])
        ours_t, base_t = Samples(tuple(got["ours"])), Samples(tuple(got["base"]))
        per_test = sorted((o - b) / tests * 1e6 for o, b in zip(ours_t.values, base_t.values))
        return Row(capability="plugin: its own work per test (hook bodies, no pytest around)",
                   ours=f"{tests} pytest-repeat steps through the worker hooks",
                   baseline="same calls, no-op hooks",
                   ours_t=ours_t, base_t=base_t, goal="< 10 us per test",
                   goal_s=base_t.median + tests * 10e-6,
                   note=(f"per test: {per_test[len(per_test) // 2]:.1f} us median "
                         f"({per_test[0]:.1f}-{per_test[-1]:.1f}), best of {rounds} rounds "
                         f"x {repeat} processes"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

TIMER = textwrap.dedent('''
    import json, sys, time
    import pytest

    class Timer:
        def pytest_collection_finish(self, session):
            self.t0 = time.process_time()
        def pytest_sessionfinish(self, session):
            self.cpu = time.process_time() - self.t0

    timer = Timer()
    status = pytest.main(sys.argv[1:], plugins=[timer])
    print(json.dumps({"cpu": timer.cpu, "status": int(status)}))
''')


def per_test_cost(quick: bool) -> Row:
    tests, repeat = (500, 2) if quick else (4000, 7)
    tmp = Path(tempfile.mkdtemp(prefix="faulthunt-bench-plugin-"))
    try:
        (tmp / "test_trivial.py").write_text(
            f"import pytest\n@pytest.mark.parametrize('i', range({tests}))\ndef test_t(i): pass\n")
        (tmp / "timer.py").write_text(TIMER)
        common = [sys.executable, "timer.py", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                  "test_trivial.py"]
        cpu: dict[str, list[float]] = {"ours": [], "base": []}

        def run(side: str) -> None:
            env = {k: v for k, v in os.environ.items() if not k.startswith("FAULTHUNT_")}
            argv = list(common)
            if side == "ours":
                run_dir = tmp / "run"
                shutil.rmtree(run_dir, ignore_errors=True)
                env["FAULTHUNT_RUN_DIR"] = str(run_dir)
            else:
                argv += ["-p", "no:faulthunt"]
            out = subprocess.run(argv, cwd=tmp, env=env, capture_output=True, text=True, check=True)
            got = json.loads(out.stdout.strip().splitlines()[-1])
            if got["status"] != 0:
                raise RuntimeError(f"{side}: pytest exited {got['status']}")
            cpu[side].append(got["cpu"])

        paired(lambda: run("ours"), lambda: run("base"), repeat=repeat)
        ours_t = Samples(tuple(cpu["ours"][-repeat:]))
        base_t = Samples(tuple(cpu["base"][-repeat:]))
        per_test = sorted((o - b) / tests * 1e6 for o, b in zip(ours_t.values, base_t.values))
        return Row(capability="plugin: per-test cost in a worker (CPU of the run loop)",
                   ours=f"{tests} trivial tests, plugin active",
                   baseline="same, -p no:faulthunt",
                   ours_t=ours_t, base_t=base_t, goal="< 20 us CPU per test",
                   goal_s=base_t.median + tests * 20e-6,
                   note=(f"per test: {per_test[len(per_test) // 2]:.1f} us median "
                         f"({per_test[0]:.1f}-{per_test[-1]:.1f}), {repeat} pairs"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


ROWS = [hook_cost, per_test_cost]
