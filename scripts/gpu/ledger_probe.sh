#!/usr/bin/env bash
# GPU validation of the allocation ledger and the mapper (issue 5). Run from the repository root
# on the H200 after scripts/gpu/fetch_wheels.sh filled .whl/ (cupti-python 13.0, numpy 2.4).
# Writes everything under "$OUT/ledger/": results.jsonl (one verdict per planted fault), per case
# <fw>_<fault>.log / .dmesg.txt / .map.txt, ledgers/<case>/<pid>.jsonl, overhead.json.
# Bounded: each case has a 60 s timeout, the cases stop starting after 140 s, the whole script is
# killed at 170 s. Planted faults are single writes (no spinning kernels); no GPU settings change.
set -uo pipefail
OUT=${OUT:-/tmp/out}
dest="$OUT/ledger"
mkdir -p "$dest"
. scripts/gpu/_install.sh
install_for_gpu "$dest/pip.log"
{
  nvidia-smi --query-gpu=name,driver_version,pci.bus_id --format=csv,noheader
  python3 -c 'import cupti, numpy; print("cupti-python ok, numpy", numpy.__version__)' 2>&1
  python3 -c 'from faulthunt.ledger.cupti_source import problem; print("cupti problem:", problem())' 2>&1
} >"$dest/identity.txt"
cat "$dest/identity.txt"
export FAULTHUNT_LEDGER=auto
timeout -k 5 170 python3 scripts/gpu/ledger_probe.py all "$dest" 2>&1 | tee "$dest/summary.txt"
echo "rc=${PIPESTATUS[0]}" >>"$dest/summary.txt"
