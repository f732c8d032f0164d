#!/usr/bin/env bash
# Cost breakdown of the ledger on the allocation-heavy loop (issue 5), and whether CUPTI hands over
# a kernel record for a faulting launch. Run from the repository root on the GPU machine, after
# ../shared/device/fetch-wheels.sh filled .whl/. Writes under "$OUT/breakdown/": breakdown.json,
# profile_<fw>/profile.txt (cProfile of the auto loop), fault_records.json. Bounded: 400 s in all; no GPU settings change.
set -uo pipefail
OUT=${OUT:-/tmp/out}
dest="$OUT/breakdown"
mkdir -p "$dest"
if [ -d .whl ] && ! python3 -c 'import cupti' 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >"$dest/pip.log" 2>&1
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
  export PATH=/tmp/site/bin:$PATH
fi
python3 -c 'import faulthunt' 2>/dev/null || \
  python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >>"$dest/pip.log" 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >"$dest/identity.txt"
timeout -k 5 330 python3 scripts/gpu/ledger_breakdown.py all "$dest" 2>&1 | tee "$dest/summary.txt"
