#!/usr/bin/env bash
# The README's real report: `faulthunt demo` on the H200 (real kernels, real kernel log, real
# compute-sanitizer), then `faulthunt report --format all` of that run. Logs in $OUT/demo/.
# Bounded: the demo's per-test timeout is below the planted hang's 6 s clock bound; the whole step
# has a timeout besides.
set -u
OUT=${OUT:-/tmp/out}; D=$OUT/demo; mkdir -p "$D"
export PYTHONWARNINGS=ignore
{ date -u; nvidia-smi -L; cat /proc/driver/nvidia/version | head -1; } > "$D/identity.txt" 2>&1
timeout 300 python3 -m faulthunt demo --run-dir "$D/run" -n 4 --count 4 --every 2 --seed 7 > "$D/demo.txt" 2>&1
echo "rc=$?" >> "$D/demo.txt"
timeout 60 python3 -m faulthunt report --run "$D/run" --format all > "$D/report_cli.txt" 2>&1
echo "rc=$?" >> "$D/report_cli.txt"
cat "$D/demo.txt" | tail -60
ls "$D/run"
