"""What running one planted kernel produced, shared by every flavour and the runner. Pure."""

from __future__ import annotations

import dataclasses

BUG = "bug"
TWIN = "twin"
VARIANTS = (BUG, TWIN)


@dataclasses.dataclass(frozen=True)
class Check:
    """The outcome a test asserts on: was the result what the correct kernel computes?

    A planted bug that corrupts memory silently (a write one past the end inside a mapped page)
    comes back ``correct=True``: that is the point of planting it. CUDA errors are not caught
    here; they propagate as exceptions, the way they reach a user's test.
    """

    correct: bool
    detail: str


class PlantedCudaError(RuntimeError):
    """A CUDA driver call failed; the message leads with the driver's error name and number
    (``CUDA_ERROR_ILLEGAL_ADDRESS (700) in cuCtxSynchronize: ...``), as faulthunt.cudaerrors
    recognises it."""

    def __init__(self, name: str, code: int, call: str, message: str = "") -> None:
        self.name = name
        self.code = code
        self.call = call
        text = f"{name} ({code}) in {call}"
        super().__init__(f"{text}: {message}" if message else text)


class Unavailable(RuntimeError):
    """This flavour cannot run here (no cuda.core, no numba-cuda, no GPU); the message says why
    and what to install."""
