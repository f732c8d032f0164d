#!/usr/bin/env bash
# Downloads the Python packages that the GPU validation machine lacks (or has in a broken pairing)
# into .whl/ at the project root (git-ignored through .git/info/exclude). That machine has no
# package index, so the wheels travel with the working tree.
#
#   scripts/gpu/fetch_wheels.sh                 # once, from the project root (needs the network)
#   then, first thing on the GPU machine:
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
#     && export PYTHONPATH=/tmp/site:$PYTHONPATH && export PATH=/tmp/site/bin:$PATH
#   python3 -m pip install -q --no-index --no-deps --no-build-isolation -e .   # the project itself
#
# Why each one:
#   pytest-repeat  not in the image (xdist is)
#   py-spy         not in the image; hung-worker dumps need it (binary lands in /tmp/site/bin)
#   cupti-python   not in the image; 13.0.x matches the image's CUDA 13.0 / nvidia-cuda-cupti 13.0
#   numpy 2.4      the image pairs numba-cuda 0.30.4 with numpy 2.5, and numba-cuda then fails to
#                  compile any kernel ("module 'numpy' has no attribute 'row_stack'")
#   filecheck      numba-cuda's own test suite imports it (numba.cuda.testing); needed to run that
#                  real suite on the GPU machine
#   msgspec        faulthunt's run-directory documents; not in the image
#   cxxfilt        faulthunt's C++ demangler for sanitizer kernel names; not in the image
set -euo pipefail
top=$(git rev-parse --show-toplevel)
cd "$top"
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl \
  pytest-repeat==0.9.4 py-spy==0.4.3 'cupti-python==13.0.*' 'numpy==2.4.*' 'filecheck==1.0.*' 'msgspec>=0.18' 'cxxfilt>=0.3' "$@"
ls -la .whl
