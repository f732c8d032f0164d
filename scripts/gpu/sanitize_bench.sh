#!/usr/bin/env bash
# GPU bench of issue 4 on the H200: `faulthunt sanitize` on the one failing test of a 200-test suite
# against compute-sanitizer over the whole suite. Run from the repo root with the project installed;
# logs in $OUT/sanitize_bench/. Each side has a timeout; the whole script ends within 3 minutes.
# Prints both wall times and their ratio (recorded in docs/sanitize.md).
set -u
OUT=${OUT:-/tmp/out}; D=$OUT/sanitize_bench; mkdir -p "$D"
REPO=$(pwd); SUITE_SRC=$REPO/scripts/gpu/sanitize_suite
exec > >(tee "$D/bench.log") 2>&1
W=$D/work; rm -rf "$W"; mkdir -p "$W/suite"; cp "$SUITE_SRC/test_planted.py" "$W/suite/"
timeout 120 nvcc -lineinfo -arch=sm_90 -shared -Xcompiler -fPIC -o "$W/libplanted.so" "$SUITE_SRC/planted.cu" > "$D/nvcc.log" 2>&1 \
  || { echo "nvcc failed"; cat "$D/nvcc.log"; exit 1; }
export PLANTED_LIB=$W/libplanted.so PLANTED_STREAMRACE=0   # 199 passing tests + test_oob
cd "$W"
# the plain run that records the one failure (pytest's cache), not timed
timeout 60 python3 -m pytest -q -p no:faulthunt suite > "$D/plain.txt" 2>&1; tail -2 "$D/plain.txt"
t0=$(date +%s.%N)
timeout 80 python3 -m faulthunt sanitize --last-failed --timeout 70 -q > "$D/ours.txt" 2>&1; rc_ours=$?
t1=$(date +%s.%N)
timeout 85 compute-sanitizer --tool memcheck --target-processes all --print-limit 1000 --report-api-errors no \
  --track-stream-ordered-races all python3 -m pytest -q -p no:faulthunt -p no:cacheprovider suite > "$D/whole_suite.txt" 2>&1; rc_whole=$?
t2=$(date +%s.%N)
python3 - "$t0" "$t1" "$t2" "$rc_ours" "$rc_whole" <<'PY'
import sys
t0, t1, t2 = map(float, sys.argv[1:4])
ours, whole = t1 - t0, t2 - t1
print(f"faulthunt sanitize (1 failing test of 200): {ours:.1f} s (exit {sys.argv[4]})")
print(f"compute-sanitizer over the whole suite:      {whole:.1f} s (exit {sys.argv[5]}{'; hit the 85 s timeout' if sys.argv[5] in ('124', '137') else ''})")
print(f"ratio ours/whole: {ours / whole:.3f}")
PY
grep -h "ERROR SUMMARY" "$D/whole_suite.txt" | tail -2
