# Sourced by GPU scripts (the ledger's, timeout_sources.sh): `install_for_gpu LOG` makes what
# they need importable.
# The wheels of .whl/ (scripts/gpu/fetch_wheels.sh) go to /tmp/site unless they already import
# (run_all.sh installs them first), then faulthunt itself, editable, with its compiled parts
# built by the system compiler (setup.py). Everything pip prints goes to LOG.
install_for_gpu() {
  local log=$1
  if [ -d .whl ] && ! python3 -c 'import cupti' 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
      >"$log" 2>&1
    export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
    export PATH=/tmp/site/bin:$PATH
  fi
  python3 -c 'import faulthunt' 2>/dev/null || \
    python3 -m pip install --no-index --no-deps --no-build-isolation -e . >>"$log" 2>&1
}
