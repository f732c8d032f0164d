#!/usr/bin/env bash
# H200 validation of how `faulthunt stress` stops (issue 13): SIGTERM, as a CI timeout sends it
# through `timeout`, arrives while 4 workers sit in CuPy kernels and synchronizes
# (scripts/gpu/stress_suite/test_busy.py). Expected, checked by the Python below and written to
# $OUT/stop/check.txt: faulthunt exits 143 within a few seconds of the signal (one SIGINT to
# pytest's process group, SIGKILL after 2 s); summary.json exists with stopped_by SIGTERM and the
# 4 test runs as `interrupted`; no process of the run is left (by FAULTHUNT_RUN_DIR in its
# environment) and nvidia-smi lists none of its pids as a compute app. About a minute.
set -u
OUT=${OUT:-/tmp/out}; S=$OUT/stop; mkdir -p "$S"
if ls .whl/*.whl >/dev/null 2>&1; then   # pytest-repeat and py-spy are not in the image
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site && export PATH=/tmp/site/bin:$PATH
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . > "$S/install.log" 2>&1
RUN=$S/run
start=$(date +%s.%N)
timeout -s TERM 40 python3 -m faulthunt stress -n 4 --count 4 --xid-source kmsg --run-dir "$RUN" \
  scripts/gpu/stress_suite/test_busy.py -- -p no:cacheprovider > "$S/stress.txt" 2>&1
echo "rc=$? (124: timeout sent its SIGTERM; faulthunt's own status is in summary.json)" >> "$S/stress.txt"
end=$(date +%s.%N)
sleep 2
nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader > "$S/apps_after.csv" 2>&1
python3 - "$RUN" "$start" "$end" "$S/apps_after.csv" > "$S/check.txt" 2>&1 <<'PY'
import json, sys
from pathlib import Path
import psutil
run, start, end, apps = Path(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
ok = True
def check(cond, what):
    global ok
    ok &= bool(cond)
    print(("ok   " if cond else "FAIL ") + what)
s = json.loads((run / "summary.json").read_text())
check(s.get("stopped_by") == "SIGTERM" and s.get("exit_status") == 143, f"stopped_by {s.get('stopped_by')}, exit {s.get('exit_status')}")
check(len(s.get("interrupted") or []) >= 1, f"interrupted runs: {s.get('interrupted')}")
check(end - start < 40 + 15, f"faulthunt ended {end - start:.1f} s after it started (SIGTERM at 40 s)")
left = []
for p in psutil.process_iter():
    try:
        if p.environ().get("FAULTHUNT_RUN_DIR") == str(run.resolve()):
            left.append(p.pid)
    except (psutil.Error, OSError):
        pass
check(not left, f"processes of the run left: {left}")
pids = {e.get("pid") for f in (run / "events").glob("*.jsonl") for e in map(json.loads, f.read_text().splitlines()) if e.get("pid")}
held = [line for line in Path(apps).read_text().splitlines() if line.split(",")[0].strip().isdigit() and int(line.split(",")[0]) in pids]
check(not held, f"GPU compute apps of the run's pids after it ended: {held}")
print("PASS" if ok else "FAIL")
PY
cat "$S/stress.txt" "$S/check.txt"
