#!/usr/bin/env bash
# H200 validation of guard mode (issue 15): every framework hook, overruns and use after free
# under `faulthunt stress --guard 1` named exactly from their Xid 31 (by the guard and by the run's
# own mapping.json), the planted suite at align 256 (overruns inside the slack: "inside the slack,
# not guardable") and 16 (past_end), the overhead of --guard 1 / the default rate on a stress run
# of the planted suite's twins and on an allocation-heavy loop.
# Run from the repository root after ../shared/device/fetch-wheels.sh filled .whl/ (numpy 2.4 for
# numba-cuda, cupti-python, pytest-repeat). Writes 4 files to $OUT/guard/: log.txt (the table;
# last line "ALL OK in N s" on success, then rc=0), results.json, runs.tgz (run directories:
# ledgers, xid.jsonl, mapping.json, summaries; stress logs), pip.log. Bounded: the python driver
# budgets 125 s and is killed at 135 s; the whole script stays under 150 s. Planted faults are
# single stores/loads (no spinning kernel); plain device memory only; no GPU setting is changed.
#
# GUARD_REHEARSE=1 rehearses it on a machine without a GPU (no pip, `rehearse` instead of `all`:
# guard mode's fake driver, numba's simulator, a SIMULATED CuPy; scripts/gpu/guard_validate.py).
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
dest="$OUT/guard"
work=${GUARD_WORK:-/tmp/guard_work}
mode=all
[ "${GUARD_REHEARSE:-0}" = 1 ] && mode=rehearse
mkdir -p "$dest"
rm -rf "$work"
if [ "$mode" = all ]; then
  if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
      >"$dest/pip.log" 2>&1
    export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
    export PATH=/tmp/site/bin:$PATH
  fi
  python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >>"$dest/pip.log" 2>&1
fi
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,pci.bus_id --format=csv,noheader 2>&1 || true
  python3 -c 'import cuda.bindings, cuda.core, cupy, numba_cuda, numpy, torch; print("cuda-bindings", cuda.bindings.__version__, "cuda-core", cuda.core.__version__, "cupy", cupy.__version__, "numba-cuda", numba_cuda.__version__, "numpy", numpy.__version__, "torch", torch.__version__)' 2>&1 | tail -1
  command -v cc gcc || echo "no C compiler: torch is not guarded"
} 2>&1 | tee "$dest/log.txt"
timeout -k 5 135 python3 scripts/gpu/guard_validate.py "$mode" "$work" "$dest" 2>&1 | tee -a "$dest/log.txt"
echo "rc=${PIPESTATUS[0]}" | tee -a "$dest/log.txt"
# the run directories (ledgers, xid.jsonl, mapping.json) as one file; the loops' ledgers and the
# overhead runs' ledgers stay behind
tar -C "$work" -czf "$dest/runs.tgz" --exclude='loop_*' --exclude='overhead_*/ledger' \
  --exclude='*.py-spy.txt' . 2>/dev/null
if [ "$(stat -c %s "$dest/runs.tgz" 2>/dev/null || echo 0)" -gt 15000000 ]; then  # 16 MiB a file comes back
  tar -C "$work" -czf "$dest/runs.tgz" --exclude='loop_*' --exclude='*.py-spy.txt' --exclude='ledger' . 2>/dev/null
  echo "runs.tgz: ledgers left out (over 15 MB); results.json has every verdict" | tee -a "$dest/log.txt"
fi
ls -la "$dest"
