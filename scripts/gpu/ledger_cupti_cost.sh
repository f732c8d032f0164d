#!/usr/bin/env bash
# Where the compiled CUPTI source's cost on the allocation loops goes (issue 16): each part taken
# out in turn (ledger_cupti_cost.py), numba and cuda.core, then native profiles (py-spy --native)
# of cuda.core's loop off / auto / bare and numba's under auto. Run from the repository root on
# the GPU machine with .whl/ carried, after run_all.sh's install (or alone: it installs the same
# way). Writes "$OUT/cupti_cost/": cost.txt (wall and CPU medians, min-max), cost.jsonl (every
# sample), prof_*.txt (py-spy raw stacks), prof.txt (their leaf shares). About 6 minutes.
# COST_LOOPS, COST_VARIANTS, COST_ROUNDS narrow the table (ledger_cupti_cost.py); COST_NOPROF=1 skips
# the profiles.
set -uo pipefail
OUT=${OUT:-/tmp/out}
dest="$OUT/cupti_cost"
mkdir -p "$dest"
. scripts/gpu/_install.sh
install_for_gpu "$dest/pip.log"
timeout -k 5 ${COST_LIMIT:-330} python3 scripts/gpu/ledger_cupti_cost.py all "$dest" "${COST_LOOPS:-numba,cuda_core}" 2>&1 | tail -n 40
echo "rc=${PIPESTATUS[0]}"
[ -n "${COST_NOPROF:-}" ] && exit 0
{
  timeout -k 5 100 python3 scripts/gpu/ledger_cupti_cost.py prof "$dest" cuda_core off auto bare
  timeout -k 5 60 python3 scripts/gpu/ledger_cupti_cost.py prof "$dest" numba auto
} >"$dest/prof.txt" 2>&1
echo "prof rc=$?"
head -c 6000 "$dest/prof.txt"
