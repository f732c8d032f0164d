#!/usr/bin/env bash
# GPU validation of doctor, stage and session on the H200. Run from the repo root
# with the project installed; writes everything under "$OUT/doctor/"; bounded (< 3 min), no hangs:
# every step has a timeout and the tmux session has a 90 s limit plus an explicit kill.
# What it checks: doctor's text/JSON on the real machine (and for a V100 with --cc 7.0); that cuFFT
# really runs here (a tiny cupy FFT) while doctor calls it "unseen" (cuobjdump lists one sm_75 stub),
# not a problem, also through --pid of that process; stage of a run with hostile test ids (none may
# execute); the tmux session's five windows (reproducer started with --start) and `continue`.
set -uo pipefail
D="${OUT:?set OUT}/doctor"
mkdir -p "$D"
exec > >(tee "$D/steps.log") 2>&1
step() { echo; echo "== $*"; }
PY=python3
# tmux capture-pane prints every row of the 50-row pane: drop the trailing empty rows.
trim() { awk '{ line[NR] = $0; if ($0 ~ /[^[:space:]]/) last = NR } END { for (i = 1; i <= last; i++) print line[i] }'; }

step "doctor (text, json, and against a V100 = cc 7.0)"
LIBS=()
while IFS= read -r lib; do LIBS+=(--lib "$lib"); done < <(find / -xdev \( -name 'libcudnn_cnn.so*' -o -name 'libcublasLt.so*' -o -name 'libcurand.so*' \) -type f 2>/dev/null | head -6)
timeout 120 $PY -m faulthunt doctor --all "${LIBS[@]}" > "$D/doctor.txt" 2>&1; echo "rc=$?" >> "$D/doctor.txt"
timeout 120 $PY -m faulthunt doctor --json "${LIBS[@]}" > "$D/doctor.json" 2> "$D/doctor_json.err"; echo "doctor --json rc=$?"
timeout 120 $PY -m faulthunt doctor --all --cc 7.0 "${LIBS[@]}" > "$D/doctor_cc70.txt" 2>&1; echo "rc=$?" >> "$D/doctor_cc70.txt"
for lib in $(find / -xdev -name 'libcudnn_cnn.so*' -type f 2>/dev/null | head -2); do
  CU=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
  timeout 60 "$CU" --list-elf "$lib" > "$D/cuobjdump_elf_$(basename "$lib").txt" 2>&1
  timeout 60 "$CU" --list-ptx "$lib" > "$D/cuobjdump_ptx_$(basename "$lib").txt" 2>&1
done
cat "$D/doctor.txt"
$PY - "$D/doctor.json" <<'PYEOF'
import json, sys
full = json.load(open(sys.argv[1]))
for lib in full.get("libraries") or []:
    if lib["library"].startswith("libcufft"):
        print("json:", lib["library"], lib["verdict"], json.dumps(lib.get("visibility")))
print("json problems:", [p["message"][:60] for p in full["problems"] if p["severity"] == "problem"])
PYEOF

step "cuFFT for real on this device, and doctor --pid of the process that used it"
timeout 90 $PY - > "$D/cufft_real.txt" 2>&1 <<'PYEOF' &
import os, sys, time
try:
    import cupy
except ImportError as exc:
    print("cupy not importable:", exc); sys.exit(3)
x = cupy.fft.fft(cupy.ones(8, dtype=cupy.complex64))
cupy.cuda.Device().synchronize()
print("cupy.fft.fft(ones(8)) on", cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(), "=", x.get().tolist())
libs = sorted({l.split()[-1] for l in open("/proc/self/maps") if "libcufft" in l})
print("libcufft loaded:", libs, "pid", os.getpid(), flush=True)
time.sleep(25)
PYEOF
FFT=$!   # the pid of `timeout`; the python process's own pid is in its output
for _ in $(seq 1 120); do grep -q "libcufft loaded" "$D/cufft_real.txt" 2>/dev/null && break; kill -0 $FFT 2>/dev/null || break; sleep 0.5; done
cat "$D/cufft_real.txt"
PYPID=$(sed -n 's/.*libcufft loaded:.* pid \([0-9][0-9]*\)$/\1/p' "$D/cufft_real.txt")
if [ -n "$PYPID" ] && kill -0 "$PYPID" 2>/dev/null; then
  timeout 120 $PY -m faulthunt doctor --no-wheels --all --pid "$PYPID" > "$D/doctor_pid_cufft.txt" 2>&1; echo "doctor --pid rc=$?"
  grep -i "cufft" "$D/doctor_pid_cufft.txt" | head -6
  kill $FFT 2>/dev/null
fi
wait $FFT 2>/dev/null; echo "cufft process rc=$?  (non-zero when ended by the kill above, after doctor --pid)"

step "a small run with a failing test (hostile id) to stage"
P="$D/proj"; mkdir -p "$P"
cat > "$P/test_small.py" <<'PYEOF'
import pytest
IDS = ["plain", "sp ace$(touch pwned)", "semi;touch pwned"]
@pytest.mark.parametrize("v", IDS, ids=IDS)
def test_small(v):
    try:
        import cupy
        a = cupy.arange(4); assert int(a.sum()) == 6
    except ImportError:
        pass
    assert v == "plain", "planted failure"
PYEOF
(cd "$P" && timeout 120 $PY -m faulthunt stress --run-dir "$D/run" -n 2 --count 2 -q -- test_small.py; echo "stress rc=$?")

step "stage"
timeout 60 $PY -m faulthunt stage --run "$D/run" "$D/kit"; echo "stage rc=$?"
ls -la "$D/kit"
timeout 60 bash "$D/kit/xid_since.sh" --all > "$D/xid_since.txt" 2>&1; echo "xid_since rc=$?"
(cd "$D" && timeout 120 bash "$D/kit/run_reproducer.sh" 1 -q > "$D/reproducer_rerun.txt" 2>&1; echo "reproducer rc=$?")
find "$D" -name pwned | sed 's/^/HOSTILE ID EXECUTED: /'

step "session (tmux, detached, 90 s limit)"
timeout 60 $PY -m faulthunt session --kit "$D/kit" --no-tmate --name fhgpu --timeout 90 --start --count 1; echo "session rc=$?"
# wait (at most 45 s) for the started reproducer to finish: its pane ends on a bare shell prompt
for _ in $(seq 1 45); do
  last=$(tmux -S "$D/kit/tmux.sock" capture-pane -p -t "fhgpu:reproducer" 2>/dev/null | trim | tail -1)
  n=$(tmux -S "$D/kit/tmux.sock" capture-pane -p -t "fhgpu:reproducer" 2>/dev/null | trim | wc -l)
  [ "$n" -gt 1 ] && [[ "$last" =~ [\#\$][[:space:]]*$ ]] && break
  sleep 1
done
for w in shell reproducer xid py-spy limit; do
  echo "--- pane $w" >> "$D/panes.txt"
  tmux -S "$D/kit/tmux.sock" capture-pane -p -t "fhgpu:$w" 2>&1 | trim >> "$D/panes.txt"
done
touch "$D/kit/continue"
sleep 4
tmux -S "$D/kit/tmux.sock" has-session -t fhgpu 2>/dev/null && { echo "session still alive after continue: killing"; tmux -S "$D/kit/tmux.sock" kill-session -t fhgpu; } || echo "session ended by continue"
cat "$D/panes.txt"
echo; echo "done: $D"
