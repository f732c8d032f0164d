#!/usr/bin/env bash
# H200: overhead of `faulthunt stress` over plain pytest on numba-cuda's own cudapy tests (issue 16),
# interleaved rounds of whole commands (scripts/gpu/stress_overhead_numba.py). About 5 minutes.
# Writes $OUT/overhead/: log.txt (every sample, medians, ratios), results.json, the last round's
# outputs. Needs in .whl/ the wheels of scripts/gpu/fetch_wheels.sh (numpy 2.4, filecheck,
# pytest-repeat, msgspec, cxxfilt). No GPU setting is changed; the tests are numba-cuda's own.
set -u
OUT=${OUT:-/tmp/out}; D=$OUT/overhead; mkdir -p "$D"
WORK=$(mktemp -d /tmp/faulthunt-overhead.XXXX)
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    > "$WORK/wheels.log" 2>&1 && export PYTHONPATH=/tmp/site && export PATH=/tmp/site/bin:$PATH
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . > "$WORK/install.log" 2>&1
N=$WORK/numba_suite; mkdir -p "$N"
cp scripts/gpu/suites_numba/conftest.py scripts/gpu/suites_numba/pytest.ini "$N/"
TESTS=$(python3 -c "import numba.cuda.tests, os; print(os.path.dirname(numba.cuda.tests.__file__))")
for m in test_reduction test_atomics test_matmul test_sync test_laplace test_montecarlo \
         test_stream_api test_array test_ufuncs; do
  cp "$TESTS/cudapy/$m.py" "$N/" 2>/dev/null || echo "missing: cudapy/$m.py" | tee -a "$D/log.txt"
done
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; git rev-parse HEAD 2>/dev/null; } \
  >> "$D/log.txt" 2>&1
# one warm-up of each side (numba's cache, imports), not counted
( cd "$N" && timeout 120 python3 -m pytest -p xdist -n 8 -q -p no:cacheprovider > "$WORK/warm.txt" 2>&1 )
LIMIT=${OVERHEAD_LIMIT:-480}  # the rounds stop starting 20 s before it (a round: 3 whole runs)
timeout -k 10 "$LIMIT" python3 scripts/gpu/stress_overhead_numba.py "$N" "$WORK/runs" "${ROUNDS:-6}" "$((LIMIT - 20))" \
  2>&1 | tee -a "$D/log.txt"
cp "$WORK/runs/results.json" "$D/" 2>/dev/null
for f in "$WORK"/runs/*_0.txt; do tail -5 "$f" > "$D/$(basename "$f")"; done
