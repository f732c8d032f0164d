"""Bench row: the plugin's cost per test in a worker (issue 16: "about 64 us per test").

Ours and the baseline run the same generated suite of trivial tests in a fresh process each,
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


ROWS = [per_test_cost]
