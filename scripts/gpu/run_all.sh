#!/usr/bin/env bash
# One device call, several validation scripts: each runs with its own time limit and writes under
# $WORK/<area>/; everything is tarred into $OUT/gpu.tgz (the device tool brings back at most 8 files,
# 2 folders deep, so run directories travel as one archive).
#   bash scripts/gpu/run_all.sh 'a.sh:170,b.sh:60' 'c.sh:200'   (groups run side by side)
set -u
OUT=${OUT:-/tmp/out}; WORK=/tmp/gpu-out; rm -rf "$WORK"; mkdir -p "$WORK"
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site && export PATH=/tmp/site/bin:$PATH
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . > "$WORK/install.log" 2>&1 || tail "$WORK/install.log"
run_one() {
  spec=$1; s=${spec%%:*}; lim=${spec##*:}; [ "$lim" = "$spec" ] && lim=240
  name=$(basename "$s" | sed 's/\.[a-z]*$//')
  echo "===== $s (limit ${lim}s) start $(date -u +%T)"
  t0=$(date +%s)
  OUT="$WORK" timeout -k 10 "$lim" bash "$s" > "$WORK/$name.console.txt" 2>&1
  rc=$?
  echo "===== $s rc=$rc wall=$(( $(date +%s) - t0 ))s" | tee -a "$WORK/$name.console.txt"
}
# Each argument is a group: scripts separated by commas run one after another; groups run side by side.
for group in "$@"; do
  ( IFS=,; for spec in $group; do run_one "$spec"; done ) &
done
wait
for f in "$WORK"/*.console.txt; do echo "----- $f"; tail -25 "$f"; done
dmesg | grep NVRM > "$WORK/nvrm_after.txt" 2>&1
cd "$WORK/.." && tar czf "$OUT/gpu.tgz" "$(basename "$WORK")" && ls -la "$OUT"
