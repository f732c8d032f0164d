#!/usr/bin/env bash
# H200: faulthunt stress keeps a real suite's own per-test timeout, however the suite sets it
# (pytest-timeout's order: --timeout among pytest's arguments, PYTEST_ADDOPTS, the config file's
# addopts, PYTEST_TIMEOUT, -o timeout, the file's `timeout`). numba-cuda's installed cudapy tests
# (test_reduction, test_sync: about 30 tests, seconds each) run under `faulthunt stress -n 4` with
# no --timeout of faulthunt's, four times, each with the timeout set another way; check: the
# summary's `timeout` names that source and value, the pytest command carries no --timeout of
# faulthunt's, and the tests ran and passed as under plain pytest. About 2 minutes; logs under
# $OUT/timeouts. No test can hang: the kernels are short and every run is bounded by `timeout`.
# Needs in .whl/: the wheels of scripts/gpu/fetch_wheels.sh (pytest-repeat, numpy 2.4, ...).
set -u
OUT=${OUT:-/tmp/out}; S=$OUT/timeouts; mkdir -p "$S"
WORK=$(mktemp -d /tmp/faulthunt-timeouts.XXXX)
. scripts/gpu/_install.sh
install_for_gpu "$WORK/install.log"
TESTS=$(python3 -c "import numba.cuda.tests, os; print(os.path.dirname(numba.cuda.tests.__file__))")
suite() {  # a fresh copy of the two modules with the conftest and the given config file
  d=$WORK/$1; mkdir -p "$d"; cp scripts/gpu/suites_numba/conftest.py "$d/"
  cp "$TESTS/cudapy/test_reduction.py" "$TESTS/cudapy/test_sync.py" "$d/"; printf '%b' "$2" > "$d/$3"
}
suite toml '[pytest]\ntimeout = 77\n' pytest.toml  # pytest-timeout 2.5 types it a float (2.4: a string)
suite addopts '[pytest]\naddopts = -ra --timeout=78\n' pytest.ini
suite env '[pytest]\naddopts = -ra\ntimeout = 5\n' pytest.ini
suite args '[tool.pytest.ini_options]\ntimeout = 5\n' pyproject.toml
for case in toml addopts env args; do
  extra=(); envs=()
  [ "$case" = env ] && envs=(PYTEST_TIMEOUT=79)
  [ "$case" = args ] && extra=(--timeout 80)
  ( cd "$WORK/$case" && env "${envs[@]}" timeout 150 python3 -m faulthunt stress -n 4 --xid-source none \
      --run-dir "$WORK/run_$case" . -- -p no:cacheprovider "${extra[@]}" ) > "$S/$case.txt" 2>&1
  echo "stress rc=$?" >> "$S/$case.txt"
  python3 - "$WORK/run_$case" "$case" >> "$S/$case.txt" 2>&1 <<'PY'
import json, sys
run, case = sys.argv[1], sys.argv[2]
want = {"toml": (77.0, "pytest.toml"), "addopts": (78.0, "pytest.ini addopts"),
        "env": (79.0, "PYTEST_TIMEOUT"), "args": (80.0, "pytest arguments")}[case]
s = json.load(open(f"{run}/summary.json")); r = json.load(open(f"{run}/run.json"))
argv = r.get("pytest_argv") or r.get("command") or []
t = s["timeout"]
print("timeout:", t["text"])
ours = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--timeout"]
ok = ((t["seconds"], t["from"]) == want and s["tests_run"] > 0 and not s["failures"])
print(f"tests_run={s['tests_run']} passed={s['passed']} failures={len(s['failures'])} "
      f"--timeout values in pytest's command: {ours}")
print("OK" if ok else f"UNEXPECTED: want {want}")
PY
done
for c in toml addopts env args; do echo "$c: $(grep -E '^(OK|UNEXPECTED|timeout:)' "$S/$c.txt" | tr '\n' ' ')"; done | tee "$S/verdict.txt"
