#!/usr/bin/env bash
# End-to-end validation of faulthunt on a real GPU, with its own planted faults (kernels/).
#
#   scripts/validate_gpu.sh            # full: every planted fault + twin through faulthunt
#                                      #   stress, sanitize and map; prints the table (~2 min:
#                                      #   the first H200 run took 65 s without the twin reruns)
#   scripts/validate_gpu.sh --smoke    # quick: each planted kernel once, plainly and under its
#                                      #   sanitizer tool, outputs printed (~2-3 min)
#
# Runs from the repository root on the GPU machine (root, no network). Installs the wheels in
# .whl/ (scripts/gpu/fetch_wheels.sh: pytest-repeat, py-spy, numpy 2.4 for numba-cuda, msgspec)
# and the project itself. Everything it writes goes under $OUT/validate/:
#   validate.log   what ran, in order          table.md / table.json   the result table
#   smoke.txt      (--smoke) every output      validate.tgz            all run directories and logs
# No planted kernel can hang: the planted hang has a 6 s clock bound in the kernel itself and
# every command here has a timeout besides; the parallel phase as a whole is cut at 300 s (what
# did not finish reads as "not run" in the table), so the script ends within about 6 minutes.
set -u
MODE=full; [ "${1:-}" = "--smoke" ] && MODE=smoke
OUT=${OUT:-/tmp/out}; V=$OUT/validate; mkdir -p "$V"
W=${FAULTHUNT_VALIDATE_WORK:-/tmp/faulthunt-validate}; rm -rf "$W"; mkdir -p "$W"
LOG=$V/validate.log; : > "$LOG"
say() { echo "== $*" | tee -a "$LOG"; }
T0=$(date +%s)

if [ -n "${FAULTHUNT_VALIDATE_NO_INSTALL:-}" ]; then   # a second run on the same machine
  say "not installing (FAULTHUNT_VALIDATE_NO_INSTALL set)"
elif ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >> "$LOG" 2>&1 && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} && export PATH=/tmp/site/bin:$PATH
fi
[ -z "${FAULTHUNT_VALIDATE_NO_INSTALL:-}" ] && { python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . \
  >> "$LOG" 2>&1 || say "pip install -e . failed (see log)"; }
{ date -u; nvidia-smi -L; cat /proc/driver/nvidia/version; compute-sanitizer --version | tail -1;
  python3 -c 'import cuda.core, numpy, numba_cuda; print("cuda.core", cuda.core.__version__, "numpy", numpy.__version__, "numba-cuda", numba_cuda.__version__)';
} > "$W/identity.txt" 2>&1
cat "$W/identity.txt" | tee -a "$LOG"
export FAULTHUNT_KERNELS_BACKEND=gpu PYTHONWARNINGS=ignore
SUITE=$(python3 -c 'from faulthunt.kernels import SUITE_DIR; print(SUITE_DIR)')

# name flavour tool "extra sanitizer options", one line per planted fault and flavour
python3 - > "$W/jobs.txt" <<'PY'
from faulthunt.kernels.catalog import CATALOG
jobs = [(f, fl) for f in CATALOG for fl in f.flavours]
# longest first (numba compiles under the sanitizer, the 6 s hang), so the parallel slots even out
jobs.sort(key=lambda j: (j[1] != "numba", j[0].name != "bounded_hang"))
for f, fl in jobs:
    # options joined with commas: xargs -L 1 splits on blanks, and the first run lost the "all"
    # of "--track-stream-ordered-races all" that way (compute-sanitizer then refused to start)
    print(f.name, fl, f.evidence.tool or "memcheck", ",".join(f.evidence.tool_options) or "-")
PY

# direct runs of one kernel in a fresh process: plain, then under its tool (--error-exitcode 99)
direct() {  # name flavour tool opts folder variant
  local n=$1 fl=$2 tool=$3 opts=${4//,/ } d=$5 v=$6; [ "$opts" = "-" ] && opts=""
  timeout 90 python3 -m faulthunt.kernels.runner "$n" --variant "$v" --flavour "$fl" --backend gpu > "$d/plain_$v.txt" 2>&1
  echo $? > "$d/plain_$v.rc"
  timeout 150 compute-sanitizer --tool "$tool" $opts --error-exitcode 99 --print-limit 20 \
    python3 -m faulthunt.kernels.runner "$n" --variant "$v" --flavour "$fl" --backend gpu > "$d/san_$v.txt" 2>&1
  echo $? > "$d/san_$v.rc"
}
# the full path: faulthunt stress (planted + twin, -n 1 so a sticky error recycles the worker),
# faulthunt sanitize of the planted test AND the twin test with the fault's tool (the table's
# sanitizer and twin verdicts rest on its findings), faulthunt map, and the direct runs
job() {  # name flavour tool opts
  local n=$1 fl=$2 tool=$3 opts=$4 d=$W/$1-$2 sopts=""; mkdir -p "$d"
  # the one catalog option faulthunt sanitize does not pass by default (arch_gap's API error);
  # --track-stream-ordered-races all it passes already
  case "$opts" in *--report-api-errors,*) sopts="--report-api-errors ${opts#*--report-api-errors,}"; sopts=${sopts%%,*};; esac
  timeout 90 python3 -m faulthunt stress -n 1 --timeout 5 --xid-source kmsg -q -k "$n-$fl" \
    --run-dir "$d/run" "$SUITE" -- -p no:cacheprovider > "$d/stress.txt" 2>&1; echo "stress rc=$?" >> "$d/stress.txt"
  timeout 200 python3 -m faulthunt sanitize --run "$d/run" --tool "$tool" --timeout 90 -q $sopts \
    --test "$SUITE/test_planted.py::test_planted[$n-$fl]" --test "$SUITE/test_planted.py::test_twin[$n-$fl]" \
    > "$d/sanitize.txt" 2>&1; echo "sanitize rc=$?" >> "$d/sanitize.txt"
  timeout 60 python3 -m faulthunt map --run "$d/run" > "$d/map.txt" 2>&1; echo "map rc=$?" >> "$d/map.txt"
  direct "$n" "$fl" "$tool" "$opts" "$d" bug
  direct "$n" "$fl" "$tool" "$opts" "$d" twin
  echo "done $n-$fl ($(( $(date +%s) - T0 )) s)"
}
smoke() {  # name flavour tool opts
  local n=$1 fl=$2 tool=$3 opts=$4 d=$W/$1-$2; mkdir -p "$d"
  direct "$n" "$fl" "$tool" "$opts" "$d" bug
  timeout 90 python3 -m faulthunt.kernels.runner "$n" --variant twin --flavour "$fl" --backend gpu > "$d/plain_twin.txt" 2>&1
  echo $? > "$d/plain_twin.rc"
  echo "done $n-$fl ($(( $(date +%s) - T0 )) s)"
}
export -f direct job smoke; export W SUITE T0

if [ "$MODE" = smoke ]; then
  say "smoke: each planted kernel once, plainly and under its tool"
  timeout 300 xargs -P 10 -L 1 bash -c 'smoke "$@"' _ < "$W/jobs.txt" 2>&1 | tee -a "$LOG"
  : > "$V/smoke.txt"
  while read -r n fl tool opts; do
    d=$W/$n-$fl
    for f in plain_bug plain_twin san_bug; do
      { echo "######## $n ($fl) $f rc=$(cat "$d/$f.rc" 2>/dev/null)"; grep -v '^\s*$' "$d/$f.txt" 2>/dev/null | head -40; } >> "$V/smoke.txt"
    done
  done < "$W/jobs.txt"
  cat "$V/smoke.txt"
else
  say "full: faulthunt stress + sanitize + map for every planted fault and twin (10 at a time)"
  timeout 300 xargs -P 10 -L 1 bash -c 'job "$@"' _ < "$W/jobs.txt" 2>&1 | tee -a "$LOG"
  say "table"
  python3 -m faulthunt.kernels.validate "$W" > "$V/table.md" 2>> "$LOG"; echo "validate rc=$?" >> "$LOG"
  cp "$W/table.json" "$V/" 2>/dev/null
  { echo; echo "GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"; date -u; } >> "$V/table.md"
  cat "$V/table.md"
fi
# Xid lines the whole validation left (for the record)
dmesg 2>/dev/null | grep NVRM > "$W/nvrm_lines.txt"
tar -czf "$V/validate.tgz" -C "$(dirname "$W")" "$(basename "$W")" 2>> "$LOG"
say "finished in $(( $(date +%s) - T0 )) s; logs and run directories in $V/validate.tgz"
