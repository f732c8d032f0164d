"""System identity: what machine, GPU, driver and software a run (or a kit, or ``doctor``) saw.

``collect_basic`` is cheap and safe to call at the start of every stress run: it never raises and
needs no GPU (NVML is optional; without it the GPU list is empty and ``gpu_note`` says why).
``collect_full`` is what ``faulthunt doctor --json`` prints: the basics plus tool versions,
kernel-log and ptrace permissions, HMM, and the SASS/PTX coverage of the CUDA libraries the test
process would load (see :mod:`faulthunt.doctor`).
"""

from __future__ import annotations

import os
import platform
import re
import socket
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from faulthunt import __version__

#: packages whose versions matter when a CUDA fault is being chased (distribution names)
KEY_PACKAGES = (
    "pytest", "pytest-xdist", "pytest-repeat", "pytest-timeout", "numpy", "numba", "numba-cuda",
    "cupy-cuda12x", "cupy-cuda13x", "torch", "cuda-python", "cuda-bindings", "cuda-core",
    "nvidia-ml-py", "nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime", "nvidia-cudnn-cu12",
    "nvidia-cudnn-cu13", "nvidia-cublas-cu12", "nvidia-cublas", "nvidia-cuda-cupti-cu12",
    "nvidia-cuda-cupti", "cupti-python", "py-spy", "psutil",
)

#: the file the NVIDIA kernel module writes its banner to
PROC_DRIVER_VERSION = Path("/proc/driver/nvidia/version")


def parse_driver_banner(text: str) -> dict[str, Any]:
    """Parse ``/proc/driver/nvidia/version`` into ``{version, module}``.

    Real line (H200, driver 580)::

        NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (nixbld@)

    The proprietary module says ``NVIDIA UNIX x86_64 Kernel Module  535.104.05 ...`` instead.
    ``module`` is ``"open"``, ``"proprietary"`` or ``None`` when the text is not a banner.
    """
    for line in text.splitlines():
        if not line.startswith("NVRM version:"):
            continue
        body = line.split(":", 1)[1]
        version = re.search(r"\b(\d{3,}\.\d+(?:\.\d+)?)\b", body)
        module = "open" if re.search(r"\bOpen Kernel Module\b", body) else (
            "proprietary" if "Kernel Module" in body else None)
        return {"version": version.group(1) if version else None, "module": module,
                "banner": line.strip()}
    return {"version": None, "module": None, "banner": None}


def read_driver_banner() -> dict[str, Any]:
    """``parse_driver_banner`` of this machine's ``/proc/driver/nvidia/version`` (empty if absent)."""
    try:
        return parse_driver_banner(PROC_DRIVER_VERSION.read_text(errors="replace"))
    except OSError:
        return {"version": None, "module": None, "banner": None}


def cuda_version_text(encoded: int | None) -> str | None:
    """``13000`` -> ``"13.0"``: the encoding of cudaDriverGetVersion / NVML's CUDA driver version."""
    if not encoded:
        return None
    return f"{encoded // 1000}.{(encoded % 1000) // 10}"


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def collect_nvml() -> dict[str, Any]:
    """GPUs, driver and CUDA driver version through NVML; ``{"nvml": False, "nvml_error": ...}`` if not.

    Never raises: a machine without a GPU, without the driver or without ``nvidia-ml-py`` is a
    normal case for the CPU tier and for ``doctor``.
    """
    out: dict[str, Any] = {"nvml": False, "nvml_error": None, "gpus": [], "driver": None,
                           "cuda_driver": None}
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        out["nvml_error"] = "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
        return out
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        out["nvml_error"] = f"NVML unavailable: {exc}"
        return out
    try:
        out["nvml"] = True
        try:
            out["driver"] = _text(pynvml.nvmlSystemGetDriverVersion())
        except Exception as exc:
            out["nvml_error"] = f"nvmlSystemGetDriverVersion: {exc}"
        try:
            out["cuda_driver"] = cuda_version_text(pynvml.nvmlSystemGetCudaDriverVersion())
        except Exception:
            pass
        count = pynvml.nvmlDeviceGetCount()
        for index in range(count):
            gpu: dict[str, Any] = {"index": index, "name": None, "uuid": None, "pci": None,
                                   "cc": None, "driver": out["driver"], "memory_total": None}
            try:
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                gpu["name"] = _text(pynvml.nvmlDeviceGetName(handle))
                gpu["uuid"] = _text(pynvml.nvmlDeviceGetUUID(handle))
                gpu["pci"] = _text(pynvml.nvmlDeviceGetPciInfo(handle).busId)
                major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
                gpu["cc"] = f"{major}.{minor}"
                gpu["memory_total"] = int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)
            except Exception as exc:  # one odd device must not hide the others
                gpu["error"] = str(exc)
            out["gpus"].append(gpu)
    except Exception as exc:
        out["nvml_error"] = f"NVML query failed: {exc}"
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
    return out


def package_versions(names: tuple[str, ...] = KEY_PACKAGES) -> dict[str, str]:
    """Installed versions of ``names`` (absent packages are left out)."""
    found: dict[str, str] = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
        except Exception:  # a broken dist-info must not stop a run
            continue
    return found


def _os_release() -> str | None:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return None


def collect_basic() -> dict[str, Any]:
    """Fast (well under 2 s), never raises, needs no GPU: the identity every run records.

    Keys: ``host``, ``os``, ``kernel``, ``python``, ``faulthunt``, ``gpus`` (``[{index, name, uuid,
    pci, cc, driver, memory_total}]`` via NVML, empty without one), ``gpu_note`` (why the list is
    empty, or ``None``), ``driver``, ``driver_module`` (``open``/``proprietary``/``None``),
    ``cuda_driver`` (e.g. ``"13.0"``), ``nvml`` (bool), ``packages`` ({name: version}).
    """
    info: dict[str, Any] = {}
    try:
        info["host"] = socket.gethostname()
    except Exception:
        info["host"] = None
    try:
        info["os"] = _os_release() or platform.platform()
        info["kernel"] = platform.release()
        info["machine"] = platform.machine()
    except Exception:
        info.setdefault("os", None)
        info.setdefault("kernel", None)
    info["python"] = sys.version.split()[0]
    info["python_executable"] = sys.executable
    info["faulthunt"] = __version__
    info["pid"] = os.getpid()
    nvml = collect_nvml()
    banner = read_driver_banner()
    info["nvml"] = nvml["nvml"]
    info["gpus"] = nvml["gpus"]
    info["driver"] = nvml["driver"] or banner["version"]
    info["driver_module"] = banner["module"]
    info["cuda_driver"] = nvml["cuda_driver"]
    if nvml["gpus"]:
        info["gpu_note"] = None
    elif nvml["nvml"]:
        info["gpu_note"] = "NVML reports no GPUs"
    else:
        info["gpu_note"] = f"no GPU visible: {nvml['nvml_error']}"
    try:
        info["packages"] = package_versions()
    except Exception:
        info["packages"] = {}
    return info


def format_basic(info: dict[str, Any]) -> str:
    """Human-readable text of :func:`collect_basic` (what ``system_identity.txt`` starts with)."""
    lines = [
        f"host:        {info.get('host')}",
        f"os:          {info.get('os')} (kernel {info.get('kernel')}, {info.get('machine')})",
        f"python:      {info.get('python')} ({info.get('python_executable')})",
        f"faulthunt:   {info.get('faulthunt')}",
        f"driver:      {info.get('driver')} ({info.get('driver_module') or 'module unknown'})",
        f"cuda driver: {info.get('cuda_driver')}",
    ]
    gpus = info.get("gpus") or []
    if not gpus:
        lines.append(f"gpus:        none ({info.get('gpu_note')})")
    for gpu in gpus:
        lines.append(f"gpu {gpu.get('index')}:       {gpu.get('name')} cc {gpu.get('cc')} "
                     f"pci {gpu.get('pci')} uuid {gpu.get('uuid')}")
    packages = info.get("packages") or {}
    if packages:
        lines.append("packages:    " + ", ".join(f"{k}=={v}" for k, v in sorted(packages.items())))
    return "\n".join(lines) + "\n"


def collect_full() -> dict[str, Any]:
    """Everything ``faulthunt doctor --json`` prints (see :func:`faulthunt.doctor.collect`)."""
    from faulthunt.doctor import collect

    return collect()
