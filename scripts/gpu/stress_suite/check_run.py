"""Checks a stress run of test_wild.py: every Xid 31 of a worker pid attributed to test_wild_store
and the right worker (the worker whose recorded pid the Xid line carries); an Xid 31 whose pid
belongs to no worker (another process on the GPU, e.g. a concurrent ledger_probe run) must be left
unattributed (worker and nodeid null, attributed_by unmatched_pid): that is the right answer, not
a failure. Prints a verdict; exit 1 on mismatch. Reads the run through faulthunt.rundir.RunDir."""

import json
import sys
from pathlib import Path

from faulthunt.records.events import WorkerHello
from faulthunt.rundir import RunDir

run = RunDir(Path(sys.argv[1]))
expect_device = sys.argv[2] if len(sys.argv) > 2 else None
pid_worker = {e.pid: e.worker for e in run.worker_events() if isinstance(e, WorkerHello)}
summary = run.summary()
if summary is None:
    print(f"no readable summary.json in {run.path}: {[str(p) for p in run.problems()]}")
    sys.exit(1)
x31 = [x for x in run.xids() if x.xid == 31]
wild_fail = [f for f in summary.failures if "test_wild_store" in f.nodeid and f.outcome == "failed"]
problems = [str(p) for p in run.problems()]
ours = [x for x in x31 if x.pid in pid_worker]
outside = [x for x in x31 if x.pid not in pid_worker]
for x in ours:
    if not (x.nodeid or "").startswith("test_wild.py::test_wild_store"):
        problems.append(f"Xid 31 pid {x.pid} attributed to {x.nodeid}")
    if pid_worker.get(x.pid) != x.worker:
        problems.append(f"Xid 31 pid {x.pid}: worker {x.worker} != {pid_worker.get(x.pid)}")
    if expect_device is not None and str(x.device) != expect_device:
        problems.append(f"Xid 31 on device {x.device}, planted on {expect_device}")
for x in outside:
    if x.worker is not None or x.nodeid is not None:
        problems.append(f"Xid 31 pid {x.pid} (no worker had it) attributed to {x.worker} {x.nodeid}")
    else:
        print(f"Xid 31 pid {x.pid} ({x.process}): not a worker, left unattributed: OK")
print(f"Xid 31: {len(x31)}; failing wild runs: {len(wild_fail)}; "
      f"other failures: {len(summary.failures) - len(wild_fail)}; "
      f"attributed_by: {sorted({str(x.attributed_by) for x in x31})}")
doc = summary.to_json()
for key in ("by_test", "by_device", "xid_spread", "kernel_log"):
    print(f"{key}:", json.dumps(doc.get(key)))
# every worker Xid 31 comes from one test in several processes: the reading must be the
# application (one_test), never the hardware one; and no device row may claim Xids with 0 runs
spread31 = [r for r in summary.xid_spread if r.xid == 31]
if len(ours) >= 2 and not problems and spread31 and spread31[0].verdict != "one_test":
    problems.append(f"xid_spread for Xid 31 is {spread31[0].verdict}, expected one_test")
for d in summary.by_device:
    if d.xids and d.runs == 0:
        problems.append(f"by_device: device {d.device} has {d.xids} Xids but 0 runs")
if not ours:
    problems.append("no Xid 31 captured from a worker")
print("\n".join(problems) if problems else "OK: every Xid 31 -> test_wild_store, right worker")
sys.exit(1 if problems else 0)
