"""Tests whose GPU work runs in a child process, which makes the wild store on one step each.

scripts/gpu/suites_validate.sh runs this under `faulthunt stress -n 2 --count 4` with the real
kernel log: the Xid 31 lines carry the *child's* pid, and faulthunt must attribute each to the
test that started the child ("child pid N (name) of worker gwK"), not to "a process outside the
run". The subprocess test faults on its 2nd run, the multiprocessing one on its 4th."""

import multiprocessing
import subprocess
import sys
from pathlib import Path

import wild_store

HELPER = Path(__file__).with_name("wild_store.py")


def _step(request) -> int:
    return request.node.callspec.params.get("__pytest_repeat_step_number", 0)


def test_subprocess_child(request):
    mode = "wild" if _step(request) == 1 else "clean"
    proc = subprocess.run([sys.executable, str(HELPER), mode], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_multiprocessing_child(request):
    mode = "wild" if _step(request) == 3 else "clean"
    child = multiprocessing.get_context("spawn").Process(target=wild_store.run, args=(mode,))
    child.start()
    child.join(120)
    assert child.exitcode == 0, f"child exit status {child.exitcode}"
