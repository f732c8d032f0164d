#!/usr/bin/env bash
# GPU validation of engineer D's area (doctor, stage, session) on the H200. Run from the repo root
# with the project installed; writes everything under "$OUT/doctor/"; bounded (< 3 min), no hangs:
# every step has a timeout and the tmux session has a 90 s limit plus an explicit kill.
set -uo pipefail
D="${OUT:?set OUT}/doctor"
mkdir -p "$D"
exec > >(tee "$D/steps.log") 2>&1
step() { echo; echo "== $*"; }
PY=python3

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
timeout 60 $PY -m faulthunt session --kit "$D/kit" --no-tmate --name fhgpu --timeout 90; echo "session rc=$?"
sleep 8
for w in shell reproducer xid py-spy limit; do
  echo "--- pane $w" >> "$D/panes.txt"
  tmux -S "$D/kit/tmux.sock" capture-pane -p -t "fhgpu:$w" >> "$D/panes.txt" 2>&1
done
touch "$D/kit/continue"
sleep 4
tmux -S "$D/kit/tmux.sock" has-session -t fhgpu 2>/dev/null && { echo "session still alive after continue: killing"; tmux -S "$D/kit/tmux.sock" kill-session -t fhgpu; } || echo "session ended by continue"
cat "$D/panes.txt"
echo; echo "done: $D"
