#!/usr/bin/env bash
# H200: the ledger where cupti-python is NOT installed (the image's default: it ships libcupti but
# not the Python binding). `--ledger auto` then cannot start CUPTI; nothing records until a
# framework is imported and allocates, and the writer (its file, mapping and flush thread) is made
# when the first refinement starts (docs/ledger.md, "Without CUPTI"). This runs the planted-fault
# cases of scripts/gpu/ledger_probe.py with every wheel of .whl/ EXCEPT cupti-python, so each
# verdict must come from the CuPy / numba refinements alone. Writes $OUT/ledger_nocupti/
# (identity.txt, results.jsonl, summary.txt, overhead.json). Bounded by 170 s; single-store faults.
set -uo pipefail
OUT=${OUT:-/tmp/out}
dest="$OUT/ledger_nocupti"; mkdir -p "$dest"
site=/tmp/site-nocupti
wheels=$(ls .whl/*.whl 2>/dev/null | grep -v -i cupti)
[ -n "$wheels" ] && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
  --upgrade --target "$site" $wheels >"$dest/pip.log" 2>&1
export PYTHONPATH=$site PATH=$site/bin:$PATH   # replaces run_all.sh's /tmp/site (which has cupti)
python3 -c 'import faulthunt' 2>/dev/null || \
  python3 -m pip install --no-index --no-deps --no-build-isolation -e . >>"$dest/pip.log" 2>&1
{
  date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; git rev-parse HEAD 2>/dev/null
  python3 -c 'import cupti' 2>&1 | tail -1
  python3 -c 'from faulthunt.ledger.cupti_source import problem; print("cupti problem:", problem())' 2>&1
} >"$dest/identity.txt"
cat "$dest/identity.txt"
if python3 -c 'import cupti' 2>/dev/null; then echo "cupti-python importable: not the case under test" >&2; exit 2; fi
export FAULTHUNT_LEDGER=auto
timeout -k 5 170 python3 scripts/gpu/ledger_probe.py all "$dest" 2>&1 | tee "$dest/summary.txt"
echo "rc=${PIPESTATUS[0]}" >>"$dest/summary.txt"
rm -rf "$dest/ledgers"/loop_* 2>/dev/null
