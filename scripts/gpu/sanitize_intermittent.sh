#!/usr/bin/env bash
# H200 check of repeated, parallel sanitizer reruns (issue 14): a planted intermittent fault (the
# suite's wild_write, 1 run in 8) recorded by a stress run, missed by a single rerun (said as "not
# reproduced in 1 run"), found by `faulthunt sanitize --until-found -n 4` with kernel and line, and
# the same number of runs timed on one sanitizer process and on four (goal: >= 3x).
# Run from the repository root after scripts/gpu/fetch_wheels.sh filled .whl/ (pytest-repeat,
# msgspec). One call, under 5 minutes (the driver is killed at 265 s).
# Writes $OUT/sanitize_intermittent/: log.txt (PASS/FAIL lines, "ALL OK" last on success),
# results.json (every figure), steps.txt (each command's output), runs.tgz (the run directories
# without ledgers), pip.log. Plain device memory only; no GPU setting is changed.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
dest="$OUT/sanitize_intermittent"
work=/tmp/sanitize_intermittent
mkdir -p "$dest"
rm -f "$dest/steps.txt"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >"$dest/pip.log" 2>&1
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
  export PATH=/tmp/site/bin:$PATH
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >>"$dest/pip.log" 2>&1
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,pci.bus_id --format=csv,noheader
  nproc
  compute-sanitizer --version 2>&1 | tail -2 || echo "compute-sanitizer not on PATH"
  python3 -c 'import pytest_repeat, msgspec; print("pytest-repeat", pytest_repeat.__version__ if hasattr(pytest_repeat, "__version__") else "?", "msgspec", msgspec.__version__)' 2>&1
} 2>&1 | tee "$dest/log.txt"
timeout -k 10 265 python3 scripts/gpu/sanitize_intermittent.py "$work" "$dest" 2>&1 | tee -a "$dest/log.txt"
echo "rc=${PIPESTATUS[0]}" | tee -a "$dest/log.txt"
tar -C "$work" -czf "$dest/runs.tgz" --exclude='ledger' --exclude='pytest_cache' \
  --exclude='kmsg_before.txt' --exclude='kmsg_after.txt' . 2>/dev/null
if [ "$(stat -c %s "$dest/runs.tgz" 2>/dev/null || echo 0)" -gt 15000000 ]; then  # 16 MiB a file comes back
  tar -C "$work" -czf "$dest/runs.tgz" --exclude='ledger' --exclude='pytest_cache' --exclude='kmsg_*' \
    --exclude='logs' --exclude='xml' . 2>/dev/null
  echo "runs.tgz: per-run logs left out (over 15 MB); steps.txt and results.json have the figures" | tee -a "$dest/log.txt"
fi
ls -la "$dest"
