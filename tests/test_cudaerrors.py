"""faulthunt.cudaerrors: sticky CUDA errors as frameworks print them."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from faulthunt.cudaerrors import KINDS, find_cuda_errors, find_sticky

H200 = "h200"


def _capture(data_dir, name: str) -> str:
    path = data_dir / H200 / name
    if not path.exists():
        pytest.skip(f"capture {path} not present")
    return path.read_text()


def test_real_cupy_wild_write_capture(data_dir):
    # H200 capture: CuPy after a wild write (tests/data/h200/PROVENANCE.md)
    text = _capture(data_dir, "plain_cupy_wild.txt")
    match = find_sticky(text)
    assert match is not None and match.kind.code == 700
    assert match.kind.runtime_name == "cudaErrorIllegalAddress"
    assert "CUDARuntimeError" in match.text


def test_real_misaligned_capture(data_dir):
    # H200 capture: the CUDA C check macro of scripts/gpu/capture/faults.cu
    text = _capture(data_dir, "plain_misaligned.txt")
    match = find_sticky(text)
    assert match is not None and match.kind.code == 716


def test_real_api_error_is_not_sticky(data_dir):
    text = _capture(data_dir, "plain_apierror.txt")
    assert find_sticky(text) is None
    assert [m.kind.code for m in find_cuda_errors(text)] == [1]


# One line per framework spelling (numba, torch, cuda-python, cuda.core, CuPy driver API).
SPELLINGS = [
    ("numba.cuda.cudadrv.driver.CudaAPIError: [700] Call to cuCtxSynchronize results in "
     "UNKNOWN_CUDA_ERROR", 700, "code"),
    ("numba.cuda.cudadrv.driver.CudaAPIError: [CUresult.CUDA_ERROR_ILLEGAL_ADDRESS] Call to "
     "cuMemcpyDtoH results in CUDA_ERROR_ILLEGAL_ADDRESS", 700, "name"),
    ("RuntimeError: CUDA error: an illegal memory access was encountered\nCUDA kernel errors "
     "might be asynchronously reported at some other API call", 700, "message"),
    ("torch.AcceleratorError: CUDA error: misaligned address", 716, "message"),
    ("RuntimeError: CUDA error: unspecified launch failure", 719, "message"),
    ("(<CUresult.CUDA_ERROR_LAUNCH_FAILED: 719>,)", 719, "name"),
    ("cuda.core._utils.cuda_utils.CUDAError: CUDA_ERROR_ILLEGAL_INSTRUCTION: While executing a "
     "kernel, the device encountered an illegal instruction.", 715, "name"),
    ("CUDADriverError: CUDA_ERROR_HARDWARE_STACK_ERROR: hardware stack error", 714, "name"),
    ("cudaErrorAssert: device-side assert triggered", 710, "name"),
    ("CUDA error 718 at kernel.cu:3", 718, "code"),
    # faulthunt.kernels' planted-fault error (kernels/results.py), cuda-python driver style
    ("PlantedCudaError: CUDA_ERROR_ILLEGAL_ADDRESS (700) in cuCtxSynchronize: an illegal memory "
     "access was encountered", 700, "name"),
]


@pytest.mark.parametrize(("text", "code", "by"), SPELLINGS)
def test_framework_spellings(text, code, by):
    match = find_sticky(text)
    assert match is not None
    assert (match.kind.code, match.by) == (code, by)
    assert match.to_json()["sticky"] is True


@pytest.mark.parametrize("text", [
    "",
    "AssertionError: assert 700 == 701",
    "ValueError: out of memory in the host allocator",     # not a CUDA name
    "cudaErrorMemoryAllocation: out of memory",             # CUDA, but not sticky
    "UNKNOWN_CUDA_ERROR_SOMETHING",
    "error 700 pages",
    "cudaErrorNotAThing: whatever",
])
def test_not_sticky(text):
    assert find_sticky(text) is None


def test_sticky_sorted_first_and_deduplicated():
    text = ("cudaErrorMemoryAllocation: out of memory\n"
            "CUDA_ERROR_ILLEGAL_ADDRESS then cudaErrorIllegalAddress (700) again")
    found = find_cuda_errors(text)
    assert [m.kind.code for m in found] == [700, 2]


def test_every_kind_recognised_by_each_name():
    for kind in KINDS:
        for name in (kind.runtime_name, kind.driver_name):
            (match,) = find_cuda_errors(f"xx {name} yy")
            assert match.kind == kind


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_fuzz_never_raises(text):
    found = find_cuda_errors(text)
    assert len({m.kind.code for m in found}) == len(found)
    sticky = find_sticky(text)
    assert sticky is None or sticky.sticky
