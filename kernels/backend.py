"""Where planted kernels run: the real GPU, or (no GPU) numba's simulator plus SIMULATED stand-ins.

``FAULTHUNT_KERNELS_BACKEND`` picks ``gpu``, ``sim`` or ``auto`` (default: ``gpu`` when a GPU is
visible and the simulator was not asked for). :func:`prepare` must run before numba is imported,
because ``NUMBA_ENABLE_CUDASIM`` is read at import time.
"""

from __future__ import annotations

import os
from pathlib import Path

from faulthunt.kernels import catalog
from faulthunt.kernels.results import Check, Unavailable

BACKEND_ENV = "FAULTHUNT_KERNELS_BACKEND"
GPU = "gpu"
SIM = "sim"


def gpu_visible() -> bool:
    """A CUDA GPU is visible to this process (NVML, else the device nodes)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    from faulthunt import nvml

    try:
        with nvml.session() as n:
            return int(n.nvmlDeviceGetCount()) > 0
    except Exception:  # noqa: BLE001 - NvmlUnavailable or any NVMLError on the count: fall back to the device node
        return Path("/dev/nvidia0").exists()


def choose(env: dict[str, str] | None = None, *, have_gpu: bool | None = None) -> str:
    """The backend for these settings (``env`` defaults to os.environ)."""
    env = dict(os.environ) if env is None else env
    asked = env.get(BACKEND_ENV, "auto").strip().lower() or "auto"
    if asked in (GPU, SIM):
        return asked
    if asked != "auto":
        raise ValueError(f"{BACKEND_ENV}={asked!r}: use gpu, sim or auto")
    if env.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"):
        return SIM
    return GPU if (gpu_visible() if have_gpu is None else have_gpu) else SIM


def prepare(backend: str | None = None) -> str:
    """Settle the backend for this process (sets NUMBA_ENABLE_CUDASIM=1 for ``sim``)."""
    chosen = backend or choose()
    os.environ[BACKEND_ENV] = chosen
    if chosen == SIM:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    return chosen


def flavours_for(fault: catalog.PlantedFault, backend: str) -> tuple[str, ...]:
    """The flavours of ``fault`` the suite runs on ``backend``: all of them on a GPU; on a CPU
    one entry, ``numba`` (the simulator or a stand-in), also for faults it cannot show."""
    if backend == GPU:
        return fault.flavours
    return (catalog.NUMBA,)


def run(name: str, variant: str, flavour: str, backend: str) -> Check:
    """Run one planted kernel (or, on ``sim``, its simulator run or stand-in) in this process."""
    fault = catalog.get(name)
    if backend == GPU:
        if flavour == catalog.CUDA:
            from faulthunt.kernels import cuda_faults

            return cuda_faults.run(name, variant)
        if flavour == catalog.NUMBA:
            from faulthunt.kernels import numba_faults

            return numba_faults.run(name, variant)
        raise Unavailable(f"unknown flavour {flavour!r}")
    from faulthunt.kernels import standins

    if fault.cpu == catalog.SIM_STANDIN:
        return standins.run(name, variant)
    if fault.cpu == catalog.SIM_NUMBA:
        standins.check_poisoned()
        from faulthunt.kernels import numba_faults

        return numba_faults.run(name, variant)
    raise Unavailable(f"{name}: {fault.evidence.cpu}")
