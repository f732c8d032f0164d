#!/usr/bin/env bash
# Where the compiled CUPTI source's cost on the numba allocation loop goes (issue 16):
# each part taken out in turn (ledger_cupti_cost.py). Run from the repository root on the GPU
# machine with .whl/ carried, after run_all.sh's install (or alone: it installs the same way).
# Writes "$OUT/cupti_cost/": cost.txt (medians, min-max), cost.jsonl (every sample). About 90 s.
set -uo pipefail
OUT=${OUT:-/tmp/out}
dest="$OUT/cupti_cost"
mkdir -p "$dest"
if [ -d .whl ] && ! python3 -c 'import cupti' 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >"$dest/pip.log" 2>&1
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
python3 -c 'import faulthunt' 2>/dev/null || \
  python3 -m pip install --no-index --no-deps --no-build-isolation -e . >>"$dest/pip.log" 2>&1
timeout -k 5 150 python3 scripts/gpu/ledger_cupti_cost.py all "$dest" numba 2>&1 | tail -n 40
echo "rc=${PIPESTATUS[0]}"
