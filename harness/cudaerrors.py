"""Recognise sticky CUDA errors in failure text, whatever framework printed them.

A *sticky* error (CUDA runtime docs: "This leaves the process in an inconsistent state and any
further CUDA work will return the same error. To continue using CUDA, the process must be
terminated and relaunched") poisons the worker's context: every later test in that process fails
too. The stress plugin recycles a worker after one and labels later failures in the same process
``collateral``.

The same error reaches a test's traceback in many spellings; all of these name error 700::

    cupy_backends.cuda.api.runtime.CUDARuntimeError: cudaErrorIllegalAddress: an illegal memory access was encountered
    cupy_backends.cuda.api.driver.CUDADriverError: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered
    numba.cuda.cudadrv.driver.CudaAPIError: [700] Call to cuCtxSynchronize results in UNKNOWN_CUDA_ERROR
    CudaAPIError: [CUresult.CUDA_ERROR_ILLEGAL_ADDRESS] Call to cuCtxSynchronize results in CUDA_ERROR_ILLEGAL_ADDRESS
    RuntimeError: CUDA error: an illegal memory access was encountered        (torch)
    (<CUresult.CUDA_ERROR_ILLEGAL_ADDRESS: 700>,)                             (cuda-python bindings)
    cuda.core CUDAError: CUDA_ERROR_ILLEGAL_ADDRESS: While executing a kernel, the device encountered ...

Pure: text in, a frozen record out.
"""

from __future__ import annotations

import dataclasses
import re


@dataclasses.dataclass(frozen=True)
class CudaErrorKind:
    """One CUDA error: its number, runtime and driver names, the runtime's message."""

    code: int
    runtime_name: str      # cudaErrorIllegalAddress
    driver_name: str       # CUDA_ERROR_ILLEGAL_ADDRESS
    message: str           # cudaGetErrorString text
    sticky: bool


#: The errors that matter here. Sticky per the CUDA runtime API documentation of each enum value.
KINDS: tuple[CudaErrorKind, ...] = (
    CudaErrorKind(700, "cudaErrorIllegalAddress", "CUDA_ERROR_ILLEGAL_ADDRESS",
                  "an illegal memory access was encountered", True),
    CudaErrorKind(702, "cudaErrorLaunchTimeout", "CUDA_ERROR_LAUNCH_TIMEOUT",
                  "the launch timed out and was terminated", True),
    CudaErrorKind(710, "cudaErrorAssert", "CUDA_ERROR_ASSERT",
                  "device-side assert triggered", True),
    CudaErrorKind(714, "cudaErrorHardwareStackError", "CUDA_ERROR_HARDWARE_STACK_ERROR",
                  "hardware stack error", True),
    CudaErrorKind(715, "cudaErrorIllegalInstruction", "CUDA_ERROR_ILLEGAL_INSTRUCTION",
                  "an illegal instruction was encountered", True),
    CudaErrorKind(716, "cudaErrorMisalignedAddress", "CUDA_ERROR_MISALIGNED_ADDRESS",
                  "misaligned address", True),
    CudaErrorKind(717, "cudaErrorInvalidAddressSpace", "CUDA_ERROR_INVALID_ADDRESS_SPACE",
                  "operation not supported on global/shared address space", True),
    CudaErrorKind(718, "cudaErrorInvalidPc", "CUDA_ERROR_INVALID_PC",
                  "invalid program counter", True),
    CudaErrorKind(719, "cudaErrorLaunchFailure", "CUDA_ERROR_LAUNCH_FAILED",
                  "unspecified launch failure", True),
    # Not sticky, recognised so that a report can name them.
    CudaErrorKind(2, "cudaErrorMemoryAllocation", "CUDA_ERROR_OUT_OF_MEMORY",
                  "out of memory", False),
    CudaErrorKind(1, "cudaErrorInvalidValue", "CUDA_ERROR_INVALID_VALUE",
                  "invalid argument", False),
    CudaErrorKind(400, "cudaErrorInvalidResourceHandle", "CUDA_ERROR_INVALID_HANDLE",
                  "invalid resource handle", False),
)

_BY_CODE = {k.code: k for k in KINDS}
_BY_NAME = {k.runtime_name.lower(): k for k in KINDS} | {k.driver_name.lower(): k for k in KINDS}


@dataclasses.dataclass(frozen=True)
class CudaErrorMatch:
    """A CUDA error found in failure text."""

    kind: CudaErrorKind
    #: the matched piece of text (for the report)
    text: str
    #: how it was recognised: "name", "code" or "message"
    by: str

    @property
    def sticky(self) -> bool:
        return self.kind.sticky

    def to_json(self) -> dict[str, object]:
        return {"code": self.kind.code, "name": self.kind.runtime_name,
                "driver_name": self.kind.driver_name, "sticky": self.kind.sticky,
                "text": self.text, "by": self.by}


_NAME_RE = re.compile(r"\b(CUDA_ERROR_[A-Z_]+|cudaError[A-Za-z]+)\b")
# Numbers only in contexts where they are certainly CUDA error codes:
#   numba: "[700] Call to cuCtxSynchronize results in UNKNOWN_CUDA_ERROR"
#   "cudaErrorIllegalAddress (700)", "CUDA error 700", "CUDA error: 700", "CUDA_ERROR_...: 700>"
_CODE_RES = (
    re.compile(r"\[(\d{1,3})\] Call to cu"),
    re.compile(r"\bCUDA (?:error|Error|ERROR)[ :]+(?:code )?(\d{1,3})\b"),
    re.compile(r"\bcuda(?:Error)?[A-Za-z]* ?\((\d{1,3})\)"),
    re.compile(r"\bCUresult\.CUDA_ERROR_[A-Z_]+: (\d{1,3})>"),
    re.compile(r"\b(?:error|err) code[ =:]+(\d{3})\b", re.IGNORECASE),
)
_MESSAGE_RES = tuple((re.compile(re.escape(k.message), re.IGNORECASE), k) for k in KINDS
                     # "out of memory" / "invalid argument" are too common in unrelated text
                     if k.sticky)


def find_cuda_errors(text: str) -> list[CudaErrorMatch]:
    """Every distinct CUDA error named in ``text``, sticky ones first, in order of appearance."""
    if not text:
        return []
    found: dict[int, CudaErrorMatch] = {}
    order: list[tuple[int, int]] = []

    def add(kind: CudaErrorKind, pos: int, snippet: str, by: str) -> None:
        if kind.code not in found:
            found[kind.code] = CudaErrorMatch(kind, snippet, by)
            order.append((pos, kind.code))

    for m in _NAME_RE.finditer(text):
        kind = _BY_NAME.get(m.group(1).lower())
        if kind is not None:
            add(kind, m.start(), _line_at(text, m.start()), "name")
    for rx in _CODE_RES:
        for m in rx.finditer(text):
            kind = _BY_CODE.get(int(m.group(1)))
            if kind is not None:
                add(kind, m.start(), _line_at(text, m.start()), "code")
    for rx, kind in _MESSAGE_RES:
        hit = rx.search(text)
        if hit is not None:
            add(kind, hit.start(), _line_at(text, hit.start()), "message")
    order.sort()
    matches = [found[code] for _, code in order]
    return sorted(matches, key=lambda m: not m.sticky)


def find_sticky(text: str) -> CudaErrorMatch | None:
    """The first sticky CUDA error named in ``text``, or ``None``."""
    for match in find_cuda_errors(text):
        if match.sticky:
            return match
    return None


def _line_at(text: str, pos: int, limit: int = 300) -> str:
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    line = text[start:end if end >= 0 else len(text)].strip()
    return line[:limit]
