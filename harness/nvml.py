"""One NVML session helper: import pynvml, ``nvmlInit``, hand the module over, ``nvmlShutdown``.

Every NVML user in faulthunt (doctor's GPU list and HMM mode, the stress runner's GPU count, the
kernels' backend choice, the NVML Xid source) goes through :func:`session`, so the rules live in
one place: NVML is optional (a CPU-only machine has no driver; ``nvidia-ml-py`` may be absent),
so failing to start is :class:`NvmlUnavailable` with the reason and the fix, never a traceback;
and whatever the body does, the session is shut down (NVML counts init/shutdown pairs, so nested
sessions are fine).

    with nvml.session() as n:
        count = n.nvmlDeviceGetCount()

Tests pass a fake module (``session(fake)``) or put one in ``sys.modules["pynvml"]``.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

from faulthunt.errors import FaulthuntError

FIX_MISSING = "pip install nvidia-ml-py"
FIX_NO_DRIVER = "install the NVIDIA driver (NVML comes with it), or run where a GPU is visible"


class NvmlUnavailable(FaulthuntError):
    """NVML cannot be used here: the package is missing (``missing``) or ``nvmlInit`` failed."""

    exit_code = 4

    def __init__(self, message: str, fix: str, *, missing: bool = False) -> None:
        super().__init__(message, fix)
        self.missing = missing


#: pynvml's words when the library does not load (str of NVMLError_LibraryNotFound)
LIBRARY_NOT_FOUND = "NVML Shared Library Not Found"


def _pynvml_origin() -> str | None:
    """The file ``import pynvml`` would load, "" when there is none, None when that cannot be
    told (the import below then says what is wrong)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("pynvml")
    except (ImportError, ValueError):
        return None
    if spec is None:
        return ""
    return spec.origin


def _is_nvidia_ml_py(origin: str) -> bool:
    """Whether ``origin`` is nvidia-ml-py's own pynvml (its dist-info beside it), whose
    nvmlInit loads the library exactly as :func:`_library_loads` tries; a stand-in elsewhere
    (tests, a shim) is imported and asked."""
    import os

    try:
        return any(n.startswith("nvidia_ml_py-") and n.endswith(".dist-info")
                   for n in os.listdir(os.path.dirname(origin)))
    except OSError:
        return False


def _library_loads() -> bool:
    """Whether NVML's library loads as pynvml loads it on Linux (elsewhere: left to pynvml)."""
    if not sys.platform.startswith("linux"):
        return True
    # what ctypes.CDLL calls, with the same flags, without making ctypes' classes (~7 M
    # instructions of a stress run's start-up on a machine without NVML)
    from _ctypes import dlopen

    try:
        dlopen("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


@contextlib.contextmanager
def session(module: Any = None) -> Iterator[Any]:
    """An initialised NVML for the ``with`` body: yields the pynvml module (or ``module``)."""
    if module is None:
        module = sys.modules.get("pynvml")
    if module is None:
        origin = _pynvml_origin()
        if origin == "":
            raise NvmlUnavailable("nvidia-ml-py is not installed (pip install nvidia-ml-py)", FIX_MISSING,
                                  missing=True)
        if origin is not None and _is_nvidia_ml_py(origin) and not _library_loads():
            # what nvmlInit says then, without importing pynvml first (about 20 ms of CPU: every
            # stress run's identity.json asks NVML, most machines that run CPU suites have none)
            raise NvmlUnavailable(f"NVML unavailable: {LIBRARY_NOT_FOUND}", FIX_NO_DRIVER)
        try:
            import pynvml  # nvidia-ml-py
        except ImportError:
            raise NvmlUnavailable("nvidia-ml-py is not installed (pip install nvidia-ml-py)", FIX_MISSING,
                                  missing=True) from None
        module = pynvml
    try:
        module.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - any NVMLError (library not found, driver not loaded, ...) or a loader OSError
        raise NvmlUnavailable(f"NVML unavailable: {exc}", FIX_NO_DRIVER) from None
    try:
        yield module
    finally:
        try:
            module.nvmlShutdown()
        except Exception:  # noqa: BLE001 - shutting down after the body failed must not hide the body's own error
            pass


def device_count(module: Any = None) -> int:
    """How many GPUs NVML sees; 0 when NVML cannot start or cannot count."""
    try:
        with session(module) as n:
            return int(n.nvmlDeviceGetCount())
    except Exception:  # noqa: BLE001 - NvmlUnavailable or any NVMLError on the query: no GPU through NVML
        return 0
