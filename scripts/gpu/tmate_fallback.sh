#!/usr/bin/env bash
# `faulthunt session` with the real tmate on the GPU node, where no tmate server is reachable (the
# lent H200 reaches nothing outside, like an air-gapped GPU node): faulthunt must say so within
# seconds and open the same kit in local tmux. tmate is not installed there and nothing can be
# downloaded, so Debian's tmate .deb and its libraries are carried in (default .tmate-deb/, see
# docs/session.md "tmate on a machine without it") and unpacked with `dpkg -x` into a folder of
# their own, never into /. Run from the repo root with the project installed; everything lands in
# "$OUT/tmate/"; bounded (< 2 min): every step has a timeout, the session a 60 s limit.
#   bash scripts/gpu/tmate_fallback.sh [DEB_DIR]
set -uo pipefail
D="${OUT:?set OUT}/tmate"
mkdir -p "$D"
exec > >(tee "$D/steps.log") 2>&1
step() { echo; echo "== $*"; }
check() { if eval "$2"; then echo "CHECK $1: ok"; else echo "CHECK $1: FAIL"; fi; }
DEBS=${1:-.tmate-deb}
PY=python3
W=$(mktemp -d /tmp/tmate-check.XXXXXX)

step "unpack the carried tmate into $W/root (dpkg -x, not into /)"
ls -la "$DEBS"
for f in "$DEBS"/*.deb; do dpkg -x "$f" "$W/root" || echo "dpkg -x $f failed"; done
export PATH="$W/root/usr/bin:$PATH"
export LD_LIBRARY_PATH="$W/root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
command -v tmate tmux
tmate -V; tmux -V
ldd "$(command -v tmate)" | tee "$D/ldd.txt" | grep "not found" && echo "MISSING LIBRARIES (carry their .debs too)"
check "tmate runs" "tmate -V >/dev/null 2>&1"
ls -la ~/.tmate.conf 2>/dev/null && echo "NOTE: ~/.tmate.conf exists; its server settings apply"

step "a kit from a small CPU stress run (one failing test)"
$PY -c 'import faulthunt' 2>/dev/null || $PY -m pip install -q --no-deps --no-build-isolation -e .
mkdir -p "$W/proj"
printf 'def test_fails():\n    assert False, "planted"\n' > "$W/proj/test_fail.py"
(cd "$W/proj" && timeout 120 $PY -m faulthunt stress -n 0 --count 1 --xid-source none \
  --run-dir "$W/run" test_fail.py -q); echo "stress rc=$?"
timeout 60 $PY -m faulthunt stage --run "$W/run" "$W/kit"; echo "stage rc=$?"
echo "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample lead@faulthunt" > "$W/authorized_keys"

step "faulthunt session with tmate, no tmate server reachable"
t0=$(date +%s.%N)
timeout 90 $PY -m faulthunt session --kit "$W/kit" --name fhgpu --authorized-keys "$W/authorized_keys" \
  --timeout 60 > "$D/session.txt" 2>&1
rc=$?
t1=$(date +%s.%N)
secs=$($PY -c "print(f'{$t1 - $t0:.1f}')")
echo "session rc=$rc after $secs s"
cat "$D/session.txt"
cp "$W/kit/tmate.conf" "$D/tmate.conf" 2>/dev/null; cat "$D/tmate.conf"
check "exit 0" "[ $rc = 0 ]"
check "says no tmate server reachable" "grep -q 'tmate: no tmate server reachable\|tmate: the tmate server' '$D/session.txt'"
check "within seconds (< 20 s)" "$PY -c 'import sys; sys.exit(not $secs < 20)'"
check "restriction in the generated configuration" "grep -q '^set -g tmate-authorized-keys ' '$D/tmate.conf'"
check "tmate session closed" "! tmate -S '$W/kit/tmate.sock' has-session 2>/dev/null"
tmux -S "$W/kit/tmux.sock" list-windows -t fhgpu -F '#{window_name}' | tee "$D/windows.txt"
check "tmux fallback has the kit's five windows" "[ \"\$(tr '\n' ' ' < '$D/windows.txt')\" = 'shell reproducer xid py-spy limit ' ]"
sleep 2
tmux -S "$W/kit/tmux.sock" capture-pane -p -t fhgpu:shell | awk 'NF' | head -20 | tee "$D/shell_pane.txt"
check "the same kit (README in the shell pane)" "grep -q 'Repro kit for run' '$D/shell_pane.txt'"

step "touch KIT/continue ends it"
touch "$W/kit/continue"
for _ in $(seq 1 10); do tmux -S "$W/kit/tmux.sock" has-session -t fhgpu 2>/dev/null || break; sleep 1; done
check "ended by continue" "! tmux -S '$W/kit/tmux.sock' has-session -t fhgpu 2>/dev/null"
tmux -S "$W/kit/tmux.sock" kill-server 2>/dev/null
tmate -S "$W/kit/tmate.sock" kill-server 2>/dev/null
grep -c "^CHECK .*: ok" "$D/steps.log" | sed 's/^/checks ok: /'
grep "^CHECK .*: FAIL" "$D/steps.log" || echo "no check failed"
