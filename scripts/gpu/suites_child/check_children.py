"""Checks a stress run of test_child_fault.py: every Xid 31 comes from a child (a pid no worker
had), is attributed to the test that started it, and says "child pid N (...) of worker gwK".
Prints a verdict; exit 1 on any mismatch. Reads the run through faulthunt.rundir.RunDir."""

import sys
from pathlib import Path

from faulthunt.records.events import ChildProcess, WorkerHello
from faulthunt.rundir import RunDir

WILD = {"test_child_fault.py::test_subprocess_child[2-4]",
        "test_child_fault.py::test_multiprocessing_child[4-4]"}

run = RunDir(Path(sys.argv[1]))
workers = {e.pid: e.worker for e in run.worker_events() if isinstance(e, WorkerHello)}
children = {e.child_pid: e for e in run.worker_events() if isinstance(e, ChildProcess)}
summary = run.summary()
if summary is None:
    print(f"no readable summary.json in {run.path}: {[str(p) for p in run.problems()]}")
    sys.exit(1)
x31 = [x for x in summary.xids if x.xid == 31]
problems = []
for x in x31:
    print(f"Xid 31 pid={x.pid} name={x.process}: {x.attributed_by} -> {x.nodeid}; {x.attribution}")
    if x.pid in workers:
        problems.append(f"Xid 31 pid {x.pid} is a worker's own pid, not a child's")
    elif x.pid not in children:
        problems.append(f"Xid 31 pid {x.pid}: no child record for it")
    if x.nodeid not in WILD:
        problems.append(f"Xid 31 pid {x.pid} attributed to {x.nodeid}, expected one of {sorted(WILD)}")
    if not str(x.attributed_by or "").startswith("child"):
        problems.append(f"Xid 31 pid {x.pid}: attributed_by {x.attributed_by}")
    want = f"child pid {x.pid} ("
    if not (x.attribution or "").startswith(want) or " of worker gw" not in (x.attribution or ""):
        problems.append(f"Xid 31 pid {x.pid}: attribution {x.attribution!r}")
    if x.worker_pid not in workers:
        problems.append(f"Xid 31 pid {x.pid}: worker_pid {x.worker_pid} is no worker's")
failed = {f.nodeid for f in summary.failures}
if not WILD <= failed:
    problems.append(f"failing runs {sorted(failed)}, expected {sorted(WILD)} among them")
if {x.nodeid for x in x31} != WILD:
    problems.append(f"Xid 31 from {sorted({str(x.nodeid) for x in x31})}, expected both of {sorted(WILD)}")
outside = [s for s in summary.xid_spread if s.outside]
print(f"Xid 31: {len(x31)}; children recorded: {len(children)}; failures: {sorted(failed)}; "
      f"xid_spread outside: {[(s.xid, s.outside) for s in outside]}")
print("\n".join(problems) if problems else
      "OK: every Xid 31 -> the test that started the child, as 'child pid N (name) of worker gwK'")
sys.exit(1 if problems else 0)
