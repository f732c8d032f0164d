#!/usr/bin/env bash
# One-shot capture of real driver and tool output on the H200, for committed test data.
# Runs from the repo root on the GPU machine; everything lands in $OUT/cap, tarred to $OUT/capture.tgz.
#   faults.cu planted faults -> plain run output, Xid lines (dmesg, dmesg -T, iso, raw kmsg, journalctl),
#   compute-sanitizer text + XML for each tool, NVML Xid events, numba/CuPy host frames,
#   cuobjdump of an arch-gap module and real CUDA libraries, tool --help/--version.
set -u
OUT=${OUT:-/tmp/out}; C=$OUT/cap; mkdir -p "$C"
here=$(cd "$(dirname "$0")" && pwd)/capture
log() { echo "== $*" | tee -a "$C/steps.log"; }
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site && export PATH=/tmp/site/bin:$PATH
fi
{ date -u; uname -a; nvidia-smi; cat /proc/driver/nvidia/version; nvcc --version; compute-sanitizer --version;
  cuobjdump --version; which cuda-gdb tmux tmate py-spy; python3 -c 'import sys; print(sys.version)';
  python3 -m pip list 2>/dev/null | grep -iE "cuda|cupy|numba|numpy|torch|nvidia|pytest|cupti|spy"; } > "$C/identity.txt" 2>&1
nvidia-smi -q > "$C/nvidia-smi-q.txt" 2>&1
compute-sanitizer --help > "$C/compute-sanitizer-help.txt" 2>&1
for t in memcheck racecheck initcheck synccheck; do compute-sanitizer --tool $t --help > "$C/cs-help-$t.txt" 2>&1; done
cd "$C"
nvcc -lineinfo -arch=sm_90 -o faults "$here/faults.cu" > nvcc.log 2>&1 || { log "nvcc failed"; cat nvcc.log; }
# architecture gap: SASS for sm_75 only, no PTX
nvcc -lineinfo -gencode arch=compute_75,code=sm_75 -o faults_sm75 "$here/faults.cu" >> nvcc.log 2>&1
dmesg > dmesg_before.txt 2>&1
for m in ok wild misaligned oob1 readpast uaf streamrace uninit sharedrace syncdiv apierror leak; do
  log "plain $m"; timeout 60 ./faults $m > plain_$m.txt 2>&1; echo "rc=$?" >> plain_$m.txt; sleep 0.5
done
log "arch gap"; timeout 60 ./faults_sm75 ok > plain_archgap.txt 2>&1; echo "rc=$?" >> plain_archgap.txt
cuobjdump --list-elf faults_sm75 > cuobjdump_sm75_elf.txt 2>&1; cuobjdump --list-ptx faults_sm75 > cuobjdump_sm75_ptx.txt 2>&1
cuobjdump --list-elf faults > cuobjdump_sm90_elf.txt 2>&1; cuobjdump --list-ptx faults > cuobjdump_sm90_ptx.txt 2>&1
CS="compute-sanitizer --print-limit 20"
san() { name=$1; shift; log "sanitizer $name: $*"; timeout 120 $CS "$@" > san_$name.txt 2>&1; echo "rc=$?" >> san_$name.txt; }
san memcheck_oob1 --tool memcheck ./faults oob1
san memcheck_readpast --tool memcheck ./faults readpast
san memcheck_wild --tool memcheck ./faults wild
san memcheck_uaf --tool memcheck ./faults uaf
san memcheck_misaligned --tool memcheck ./faults misaligned
san memcheck_streamrace --tool memcheck --track-stream-ordered-races all ./faults streamrace
san memcheck_streamrace_plain --tool memcheck ./faults streamrace
san memcheck_apierror --tool memcheck ./faults apierror
san memcheck_leak --tool memcheck --leak-check full ./faults leak
san memcheck_padding --tool memcheck --padding 64 ./faults oob1
san memcheck_prefix --tool memcheck --prefix "CSAN> " ./faults oob1
san initcheck_uninit --tool initcheck ./faults uninit
san racecheck_shared --tool racecheck --racecheck-report all ./faults sharedrace
san racecheck_analysis --tool racecheck ./faults sharedrace
san synccheck_div --tool synccheck ./faults syncdiv
san memcheck_ok --tool memcheck ./faults ok
san memcheck_targetall --tool memcheck --target-processes all --error-exitcode 99 bash -c "./faults oob1; ./faults ok"
for x in memcheck:oob1 memcheck:streamrace initcheck:uninit racecheck:sharedrace synccheck:syncdiv memcheck:leak memcheck:uaf; do
  t=${x%%:*}; m=${x##*:}; extra=""; [ $m = streamrace ] && extra="--track-stream-ordered-races all"; [ $m = leak ] && extra="--leak-check full"
  log "xml $t $m"; timeout 120 compute-sanitizer --tool $t $extra --xml --save xml_${t}_$m.xml ./faults $m > xmlrun_${t}_$m.txt 2>&1
done
log "killed under sanitizer (Xid 43?)"
compute-sanitizer --tool memcheck ./faults hang > san_killed.txt 2>&1 & sp=$!; sleep 4; pkill -9 -f "faults hang"; sleep 1; kill -9 $sp 2>/dev/null; wait $sp; echo "rc=$?" >> san_killed.txt
log "numba"; timeout 120 python3 "$here/numba_oob.py" > plain_numba.txt 2>&1; echo "rc=$?" >> plain_numba.txt
timeout 180 compute-sanitizer --tool memcheck python3 "$here/numba_oob.py" > san_numba.txt 2>&1; echo "rc=$?" >> san_numba.txt
timeout 180 compute-sanitizer --tool memcheck --xml --save xml_memcheck_numba.xml python3 "$here/numba_oob.py" > /dev/null 2>&1
log "cupy"; timeout 120 compute-sanitizer --tool memcheck python3 "$here/cupy_oob.py" oob > san_cupy.txt 2>&1; echo "rc=$?" >> san_cupy.txt
timeout 60 python3 "$here/cupy_oob.py" wild > plain_cupy_wild.txt 2>&1; echo "rc=$?" >> plain_cupy_wild.txt
log "nvml events"; timeout 90 python3 "$here/nvml_events.py" "./faults wild" "./faults misaligned" "./faults ok" > nvml_events.jsonl 2>&1
log "kernel log"
dmesg > dmesg.txt 2>&1; dmesg -T > dmesg_T.txt 2>&1; dmesg --time-format iso > dmesg_iso.txt 2>&1
dmesg -r > dmesg_r.txt 2>&1; dmesg --decode > dmesg_decode.txt 2>&1
python3 "$here/kmsg_dump.py" > kmsg_raw.txt 2>&1
journalctl -k --no-pager > journalctl_k.txt 2>&1; journalctl -k -o short-monotonic --no-pager > journalctl_k_mono.txt 2>&1
sysctl kernel.dmesg_restrict kernel.yama.ptrace_scope > sysctl.txt 2>&1
log "cuda libraries"
for lib in $(python3 - <<'PY'
import glob, site, os
pats = ["**/libcudnn_cnn*.so*", "**/libcublasLt.so*", "**/libcufft.so*"]
seen = []
for base in set(site.getsitepackages() + ["/usr/local/cuda/lib64", "/opt"]):
    for p in pats:
        seen += glob.glob(os.path.join(base, p), recursive=True)
print("\n".join(sorted(set(seen))[:4]))
PY
); do b=$(basename $lib); cuobjdump --list-elf "$lib" 2>&1 | head -400 > "cuobjdump_elf_$b.txt"; cuobjdump --list-ptx "$lib" 2>&1 | head -400 > "cuobjdump_ptx_$b.txt"; done
log "py-spy"; python3 -c "import time; time.sleep(30)" & pp=$!; sleep 1; py-spy dump --native --locals --pid $pp > pyspy_dump.txt 2>&1; echo "rc=$?" >> pyspy_dump.txt; kill $pp
grep -h "NVRM" dmesg.txt | tail -100 > nvrm_lines.txt
cd "$OUT" && tar czf capture.tgz cap && cp cap/steps.log cap/nvrm_lines.txt "$OUT/" && ls -la "$OUT"
