"""Checks a stress run of test_wild.py: every Xid 31 of a worker pid attributed to test_wild_store
and the right worker (the worker whose recorded pid the Xid line carries); an Xid 31 whose pid
belongs to no worker (another process on the GPU, e.g. a concurrent ledger_probe run) must be left
unattributed (worker and nodeid null, attributed_by unmatched_pid): that is the right answer, not
a failure. Prints a verdict; exit 1 on mismatch."""

import json
import sys
from pathlib import Path

run = Path(sys.argv[1])
expect_device = sys.argv[2] if len(sys.argv) > 2 else None
events = [json.loads(l) for f in sorted((run / "events").glob("*.jsonl"))
          for l in f.read_text().splitlines() if l.strip()]
pid_worker = {r["pid"]: r["worker"] for r in events if r.get("event") == "worker"}
xids = [json.loads(l) for l in (run / "xid.jsonl").read_text().splitlines() if l.strip()]
summary = json.loads((run / "summary.json").read_text())
x31 = [x for x in xids if x.get("xid") == 31]
wild_fail = [f for f in summary["failures"] if "test_wild_store" in f["nodeid"]
             and f["outcome"] == "failed"]
problems = []
ours = [x for x in x31 if x.get("pid") in pid_worker]
outside = [x for x in x31 if x.get("pid") not in pid_worker]
for x in ours:
    if not (x.get("nodeid") or "").startswith("test_wild.py::test_wild_store"):
        problems.append(f"Xid 31 pid {x.get('pid')} attributed to {x.get('nodeid')}")
    if pid_worker.get(x.get("pid")) != x.get("worker"):
        problems.append(f"Xid 31 pid {x.get('pid')}: worker {x.get('worker')} != "
                        f"{pid_worker.get(x.get('pid'))}")
    if expect_device is not None and str(x.get("device")) != expect_device:
        problems.append(f"Xid 31 on device {x.get('device')}, planted on {expect_device}")
for x in outside:
    if x.get("worker") is not None or x.get("nodeid") is not None:
        problems.append(f"Xid 31 pid {x.get('pid')} (no worker had it) attributed to "
                        f"{x.get('worker')} {x.get('nodeid')}")
    else:
        print(f"Xid 31 pid {x.get('pid')} ({x.get('process')}): not a worker, left unattributed: OK")
print(f"Xid 31: {len(x31)}; failing wild runs: {len(wild_fail)}; "
      f"other failures: {len(summary['failures']) - len(wild_fail)}; "
      f"attributed_by: {sorted({x.get('attributed_by') for x in x31})}")
print("by_test:", json.dumps(summary["by_test"]))
print("by_device:", json.dumps(summary["by_device"]))
print("xid_spread:", json.dumps(summary["xid_spread"]))
print("kernel_log:", json.dumps(summary.get("kernel_log")))
# every worker Xid 31 comes from one test in several processes: the reading must be the
# application (one_test), never the hardware one; and no device row may claim Xids with 0 runs
spread31 = [r for r in summary.get("xid_spread", []) if r.get("xid") == 31]
if len(ours) >= 2 and not problems and spread31 and spread31[0].get("verdict") != "one_test":
    problems.append(f"xid_spread for Xid 31 is {spread31[0].get('verdict')}, expected one_test")
for d in summary.get("by_device", []):
    if d.get("xids") and d.get("runs") == 0:
        problems.append(f"by_device: device {d.get('device')} has {d['xids']} Xids but 0 runs")
if not ours:
    problems.append("no Xid 31 captured from a worker")
print("\n".join(problems) if problems else "OK: every Xid 31 -> test_wild_store, right worker")
sys.exit(1 if problems else 0)
