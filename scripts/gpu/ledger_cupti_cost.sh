#!/usr/bin/env bash
# Where the compiled CUPTI source's cost on the numba allocation loop goes (issue 16):
# each part taken out in turn (ledger_cupti_cost.py). Run from the repository root on the GPU
# machine with .whl/ carried, after run_all.sh's install (or alone: it installs the same way).
# Writes "$OUT/cupti_cost/": cost.txt (medians, min-max), cost.jsonl (every sample). About 90 s.
set -uo pipefail
OUT=${OUT:-/tmp/out}
dest="$OUT/cupti_cost"
mkdir -p "$dest"
. scripts/gpu/_install.sh
install_for_gpu "$dest/pip.log"
timeout -k 5 150 python3 scripts/gpu/ledger_cupti_cost.py all "$dest" numba 2>&1 | tail -n 40
echo "rc=${PIPESTATUS[0]}"
