#!/usr/bin/env bash
# H200 validation of faulthunt on what real suites bring (issues 13 and 19). One call, about 2-3
# minutes, logs under $OUT/suites (6 files):
#
# (a) Child processes. scripts/gpu/suites_child/test_child_fault.py runs its GPU work in a child
#     (a `subprocess` running wild_store.py, and a spawned `multiprocessing` child); on one step
#     each the child makes a single wild store (CuPy, plain device memory, ~1 TiB past a 4 KiB
#     buffer) -> Xid 31 carrying the *child's* pid. Run under
#       faulthunt stress -n 2 --count 4 --timeout 60 --xid-source kmsg
#     check_children.py: every Xid 31 attributed to the test that started the child, as
#     "child pid N (python3) of worker gwK ...", never "a process outside the run".
# (b) numba-cuda's own unittest-style cudapy tests as installed in the image (docs: shared device
#     README, "A real public suite"): the listed modules copied into a folder with the three-line
#     conftest (scripts/gpu/suites_numba/), run under
#       faulthunt stress -n 8 --count 2 --timeout 120
#     and, for comparison, plain `pytest -n 8 --count 2`. check_numba.py: every test ran twice
#     (faulthunt repeats the unittest items pytest-repeat leaves alone), none left unrepeated,
#     subtests counted in summary.json, no pytest-benchmark warning.
#
# Needs in .whl/: the wheels of scripts/gpu/fetch_wheels.sh (pytest-repeat, py-spy, numpy 2.4,
# filecheck, cupti-python, msgspec). No test can hang: the kernels are single stores
# and every run is bounded by --timeout and `timeout`.
set -u
OUT=${OUT:-/tmp/out}; S=$OUT/suites; mkdir -p "$S"
WORK=$(mktemp -d /tmp/faulthunt-suites.XXXX)
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    > "$WORK/wheels.log" 2>&1 && export PYTHONPATH=/tmp/site && export PATH=/tmp/site/bin:$PATH
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . > "$WORK/install.log" 2>&1
{ date -u; nvidia-smi -L; cat /proc/driver/nvidia/version
  python3 -c 'import cupy, numba_cuda, numpy, pytest, xdist, msgspec; print("cupy", cupy.__version__, "numba-cuda", numba_cuda.__version__, "numpy", numpy.__version__, "pytest", pytest.__version__, "xdist", xdist.__version__, "msgspec", msgspec.__version__)'
  python3 -c 'import pytest_repeat, filecheck' && echo "pytest-repeat, filecheck: ok"
  python3 -m pip list 2>/dev/null | grep -i -E '^pytest' ; tail -n 3 "$WORK/wheels.log" "$WORK/install.log"
} > "$S/identity.txt" 2>&1

# --- (a) an Xid from a test's child process -------------------------------------------------------
A=$WORK/children
timeout 150 python3 -m faulthunt stress -n 2 --count 4 --timeout 60 --xid-source kmsg \
  --run-dir "$A" scripts/gpu/suites_child -- -p no:cacheprovider > "$S/children.txt" 2>&1
echo "stress rc=$?" >> "$S/children.txt"
python3 scripts/gpu/suites_child/check_children.py "$A" >> "$S/children.txt" 2>&1
echo "check rc=$?" >> "$S/children.txt"
tar -czf "$S/children_run.tgz" -C "$WORK" children 2>/dev/null

# --- (b) numba-cuda's own unittest-style suite ----------------------------------------------------
N=$WORK/numba_suite; mkdir -p "$N"
cp scripts/gpu/suites_numba/conftest.py scripts/gpu/suites_numba/pytest.ini "$N/"
TESTS=$(python3 -c "import numba.cuda.tests, os; print(os.path.dirname(numba.cuda.tests.__file__))")
for m in test_reduction test_atomics test_matmul test_sync test_laplace test_montecarlo \
         test_stream_api test_array test_ufuncs; do
  if [ -f "$TESTS/cudapy/$m.py" ]; then cp "$TESTS/cudapy/$m.py" "$N/"; else echo "missing: cudapy/$m.py" >> "$S/numba.txt"; fi
done
( cd "$N" && timeout 120 python3 -m pytest -p xdist -p repeat -n 8 --count 2 -q -p no:cacheprovider \
    > "$WORK/plain.txt" 2>&1; echo "plain pytest rc=$?" >> "$WORK/plain.txt" )
T0=$(date +%s.%N)
( cd "$N" && timeout 150 python3 -m faulthunt stress -n 8 --count 2 --timeout 120 --xid-source kmsg \
    --run-dir "$WORK/numba_run" . -- -p no:cacheprovider >> "$S/numba.txt" 2>&1; echo "stress rc=$?" >> "$S/numba.txt" )
T1=$(date +%s.%N)
echo "wall: faulthunt stress $(python3 -c "print(round($T1 - $T0, 1))") s; plain pytest: $(grep -o 'in [0-9.]*s' "$WORK/plain.txt" | tail -1)" >> "$S/numba.txt"
echo "--- plain pytest -n 8 --count 2 (last lines)" >> "$S/numba.txt"; tail -4 "$WORK/plain.txt" >> "$S/numba.txt"
python3 scripts/gpu/suites_numba/check_numba.py "$WORK/numba_run" 2 "$WORK/plain.txt" >> "$S/numba.txt" 2>&1
echo "check rc=$?" >> "$S/numba.txt"
tar -czf "$S/numba_run.tgz" -C "$WORK" --exclude='numba_run/ledger' numba_run 2>/dev/null

{ echo "(a) children: $(grep -E '^(OK|Xid 31 pid .* (attributed|is|:)|failing|no )' "$S/children.txt" | tail -3 | tr '\n' ' ')"
  echo "(b) numba-cuda: $(grep -E '^(OK|[0-9]+ test|no |pytest-benchmark|summary notes)' "$S/numba.txt" | tail -3 | tr '\n' ' ')"
} > "$S/verdict.txt"
cat "$S/verdict.txt" "$S/children.txt" "$S/numba.txt"
