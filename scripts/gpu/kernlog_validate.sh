#!/usr/bin/env bash
# GPU validation of the kernel-log capability. Runs from the repo root on the H200 as root,
# project installed; writes everything under "$OUT/kernlog/"; ends by itself in well under 3 minutes.
# Checks (each prints PASS/FAIL to checks.txt):
#   1. kmsg cursor + `faulthunt xid since`: a planted wild write (scripts/gpu/capture/faults.cu) gives exactly one
#      Xid 31 after the cursor, with the faulting process's pid and the 4 KiB page of its printed target address.
#   2. `faulthunt xid watch --source kmsg` (live Follower) sees the same Xid 31 and the misaligned run's Xid 13 lines.
#   3. NvmlSource with the real pynvml (no root needed) delivers Xid 31 and 13 as events (number only).
#   4. incident grouping of what `since` returned: the misaligned lines form one incident with that run's pid.
set -u
OUT=${OUT:-/tmp/out}; D="$OUT/kernlog"; mkdir -p "$D"
here=scripts/gpu/capture
check() { if eval "$2"; then echo "PASS $1" | tee -a "$D/checks.txt"; else echo "FAIL $1" | tee -a "$D/checks.txt"; fi; }
nvcc -arch=sm_90 -o "$D/faults" "$here/faults.cu" > "$D/nvcc.log" 2>&1 || { echo "FAIL nvcc" | tee -a "$D/checks.txt"; exit 1; }
python3 -m faulthunt xid cursor --source kmsg > "$D/cursor.json"
timeout 60 python3 -m faulthunt xid watch --source kmsg --json --duration 30 --interval 0.1 > "$D/watch.jsonl" 2> "$D/watch.err" &
WATCH=$!
python3 - "$D" > "$D/nvml.txt" 2>&1 <<'PY' &
import json, sys, time
from faulthunt.kernlog.sources import NvmlSource, Follower
src = NvmlSource()
f = Follower(src, src.cursor(), lambda e: None, interval=0.1); f.start()
time.sleep(25)
res = f.stop(); src.close()
with open(sys.argv[1] + "/nvml.jsonl", "w") as fh:
    for e in res.events: fh.write(json.dumps(e.to_json()) + "\n")
print("nvml events:", [e.xid for e in res.events], "warnings:", res.warnings)
PY
NVML=$!
sleep 3
timeout 30 "$D/faults" wild > "$D/wild.txt" 2>&1; echo "rc=$?" >> "$D/wild.txt"; sleep 1
timeout 30 "$D/faults" misaligned > "$D/misaligned.txt" 2>&1; echo "rc=$?" >> "$D/misaligned.txt"; sleep 2
python3 -m faulthunt xid since --json "$D/cursor.json" > "$D/since.jsonl" 2> "$D/since.err"
python3 -m faulthunt xid parse --incidents --json <(grep -v '"cursor"' "$D/since.jsonl" | python3 -c 'import sys,json; [print(json.loads(l)["raw"]) for l in sys.stdin]') > "$D/incidents.jsonl" 2>&1
dmesg | grep NVRM > "$D/nvrm_dmesg.txt"
wait $WATCH; wait $NVML
python3 - "$D" <<'PY' | tee -a "$D/checks.txt"
import json, re, sys
d = sys.argv[1]
wild = open(f"{d}/wild.txt").read(); mis = open(f"{d}/misaligned.txt").read()
wpid = int(re.search(r"pid=(\d+)", wild).group(1)); mpid = int(re.search(r"pid=(\d+)", mis).group(1))
target = int(re.search(r"target=(0x[0-9a-f]+)", wild).group(1), 16)
since = [json.loads(l) for l in open(f"{d}/since.jsonl")]
evs = [e for e in since if "xid" in e]
x31 = [e for e in evs if e["xid"] == 31 and e["pid"] == wpid]
ok = len(x31) == 1 and x31[0]["mmu"]["address"] == target & ~0xFFF and x31[0]["seq"] is not None
print(("PASS" if ok else "FAIL"), "1 since: Xid 31 pid", wpid, "page", hex(target & ~0xFFF), "->", [(e["mmu"] or {}).get("address_text") for e in x31], "lost", since[-1].get("lost"))
watch = [json.loads(l) for l in open(f"{d}/watch.jsonl") if l.strip()]
ok = any(e["xid"] == 31 and e["pid"] == wpid for e in watch) and any(e["xid"] == 13 for e in watch)
print(("PASS" if ok else "FAIL"), "2 watch saw", [(e["xid"], e["pid"]) for e in watch])
try:
    nv = [json.loads(l)["xid"] for l in open(f"{d}/nvml.jsonl")]
except OSError:
    nv = []
print(("PASS" if 31 in nv and 13 in nv else "FAIL"), "3 nvml events", nv)
incs = [json.loads(l) for l in open(f"{d}/incidents.jsonl") if l.startswith("{")]
ok = any(i["pid"] == mpid and 13 in i["xids"] for i in incs)
print(("PASS" if ok else "FAIL"), "4 incidents", [(i["xids"], i["pid"]) for i in incs])
PY
