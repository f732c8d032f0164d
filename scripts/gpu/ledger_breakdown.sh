#!/usr/bin/env bash
# The ledger's recording routes on the GPU (issue 16): cost on the allocation-heavy loop per route
# (off, current, python, activity, native, native-activity; CuPy, numba, cuda.core), the last
# launches of a dying worker, and the planted-fault verdicts per route. Run from the repository
# root on the GPU machine with .whl/ carried (scripts/gpu/fetch_wheels.sh). Writes 8 files to
# "$OUT/breakdown/": summary.txt, loops.jsonl, probe.jsonl, crash.json, errors.txt, ledgers.tgz,
# identity.txt, pip.log. Bounded: about 7 minutes (killed at 460 s); no GPU settings change.
set -uo pipefail
OUT=${OUT:-/tmp/out}
dest="$OUT/breakdown"
mkdir -p "$dest"
. scripts/gpu/_install.sh
install_for_gpu "$dest/pip.log"
lib_ok() { python3 -c 'from faulthunt.ledger import native; import sys; sys.exit(native.load()[0] is None)'; }
if ! lib_ok && command -v cc >/dev/null; then
  # pip could not build it (no setuptools compiler set-up?): the same source, the same flags
  cc -O2 -pthread -fvisibility=hidden -shared -fPIC -o harness/ledger/_native.built.so harness/ledger/_native.c \
    >>"$dest/pip.log" 2>&1
fi
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 --version
  (cc --version 2>/dev/null || echo "no cc") | head -1
  python3 -c 'import cupti, numpy; print("cupti-python ok, numpy", numpy.__version__)' 2>&1
  python3 -c 'from faulthunt.ledger.cupti_source import problem; print("cupti problem:", problem())' 2>&1
  python3 -c 'from faulthunt.ledger import native, route; lib, why = native.load(); r = route.choose("auto")
print("native library:", getattr(lib, "path", None) or why); print("auto route:", r.name, r.why or "")' 2>&1
  python3 -c 'from cupti import cupti; print("cupti-python dtypes:", [n for n in dir(cupti) if n.endswith("_dtype")])' 2>&1
} >"$dest/identity.txt"
cat "$dest/identity.txt"
timeout -k 5 460 python3 scripts/gpu/ledger_breakdown.py all "$dest" 2>&1 | tail -n 80
echo "rc=${PIPESTATUS[0]}"
