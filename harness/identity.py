"""System identity: what machine, GPU, driver and software a run (or a kit, or ``doctor``) saw.

``collect_basic`` is cheap and safe to call at the start of every stress run: it never raises and
needs no GPU (NVML is optional; without it the GPU list is empty and ``gpu_note`` says why).
``collect_full`` is what ``faulthunt doctor --json`` prints: the basics plus tool versions,
kernel-log and ptrace permissions, HMM, and the SASS/PTX coverage of the CUDA libraries the test
process would load (see :mod:`faulthunt.doctor`).
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import sys
from pathlib import Path
from typing import Any

from faulthunt import __version__, nvml

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
    stack = contextlib.ExitStack()  # closes the NVML session whatever the queries do
    try:
        pynvml = stack.enter_context(nvml.session())
    except nvml.NvmlUnavailable as exc:  # no nvidia-ml-py, no driver, ...
        out["nvml_error"] = exc.message
        return out
    try:
        out["nvml"] = True
        try:
            out["driver"] = _text(pynvml.nvmlSystemGetDriverVersion())
        except Exception as exc:  # noqa: BLE001 - pynvml raises a class per NVML return code, or AttributeError from a binding without the call
            out["nvml_error"] = f"nvmlSystemGetDriverVersion: {exc}"
        try:
            out["cuda_driver"] = cuda_version_text(pynvml.nvmlSystemGetCudaDriverVersion())
        except Exception:  # noqa: BLE001 - as above; the CUDA version is optional
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
            except Exception as exc:  # noqa: BLE001 - one odd device (any NVML error) must not hide the others
                gpu["error"] = str(exc)
            out["gpus"].append(gpu)
    except Exception as exc:  # noqa: BLE001 - collect_nvml never raises: pynvml raises a class per NVML return code, or AttributeError from a binding without the call
        out["nvml_error"] = f"NVML query failed: {exc}"
    finally:
        stack.close()
    return out


def package_versions(names: tuple[str, ...] = KEY_PACKAGES) -> dict[str, str]:
    """Installed versions of ``names`` (absent packages are left out), as
    ``importlib.metadata.version`` finds them: the first ``*.dist-info``/``*.egg-info`` of the name
    along ``sys.path``, its ``Version`` header. Read here with one directory listing per path
    entry, without importing ``importlib.metadata`` (its import and 25 scans of ``sys.path`` were
    about 25 ms of every stress run); anything this reading does not cover (a zip or egg on the
    path, another distribution finder, an odd metadata file) is asked of importlib.metadata."""
    if _other_distribution_finders():
        return _metadata_versions(names)
    wanted = {_dist_key(name): name for name in names}
    found: dict[str, str | None] = {}
    for entry in sys.path:
        root = entry or "."
        if root.endswith(".egg") or (not os.path.isdir(root) and os.path.exists(root)):
            return _metadata_versions(names)  # a zip or an egg: importlib.metadata's own ways
        try:
            children = os.listdir(root)
        except OSError:
            continue
        for child in children:
            low = child.lower()
            if not low.endswith((".dist-info", ".egg-info")):
                continue
            name = wanted.get(_dist_key(low.rpartition(".")[0].partition("-")[0]))
            if name is not None and name not in found:
                found[name] = _version_header(os.path.join(root, child))
    out: dict[str, str] = {}
    for name in names:
        if name not in found:
            continue
        version = found[name]
        if version is None:  # present, but its metadata did not read plainly here
            out.update(_metadata_versions((name,)))
        else:
            out[name] = version
    return out


def _dist_key(name: str) -> str:
    """A distribution name as importlib.metadata compares them (``Prepared.normalize``)."""
    return re.sub(r"[-_.]+", "-", name).lower().replace("-", "_")


def _other_distribution_finders() -> bool:
    """Whether a finder other than the path finder can name distributions (importlib.metadata
    asks every finder on ``sys.meta_path``)."""
    import importlib.machinery

    return any(hasattr(finder, "find_distributions") and finder is not importlib.machinery.PathFinder
               for finder in sys.meta_path)


def _version_header(path: str) -> str | None:
    """The ``Version`` header of a dist-info's METADATA (an egg-info's PKG-INFO, or the egg-info
    file itself); None when it does not read plainly."""
    for candidate in (os.path.join(path, "METADATA"), os.path.join(path, "PKG-INFO"), path):
        try:
            with open(candidate, encoding="utf-8") as fh:
                for line in fh:
                    if not line.strip():
                        return None  # the headers ended without a Version
                    if line[:8].lower() == "version:":
                        return line[8:].strip() or None
            return None
        except (IsADirectoryError, FileNotFoundError, NotADirectoryError):
            continue
        except (OSError, UnicodeDecodeError):
            return None
    return None


def _metadata_versions(names: tuple[str, ...]) -> dict[str, str]:
    """``importlib.metadata.version`` of each of ``names`` that is installed."""
    from importlib import metadata

    found: dict[str, str] = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
        except Exception:  # noqa: BLE001 - a broken dist-info raises whatever its parser hits; it must not stop a run
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
        # socket.gethostname()'s answer (glibc's gethostname is uname's nodename), without
        # importing socket: about 10 M instructions of every stress run's start-up
        info["host"] = os.uname().nodename
    except OSError:
        info["host"] = None
    try:
        info["os"] = _os_release() or platform.platform()
        info["kernel"] = platform.release()
        info["machine"] = platform.machine()
    except (OSError, ValueError):  # an unreadable or undecodable os-release, a failed uname
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
    info["packages"] = package_versions()  # never raises: each version is guarded
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


# ---------------------------------------------------------------------------------------------
# collect_full: what `faulthunt doctor --json` prints. Probes (I/O) first, then pure verdicts.
# ---------------------------------------------------------------------------------------------

#: tool -> (arguments that print its version, how to get it when missing)
TOOLS: dict[str, tuple[tuple[str, ...], str]] = {
    "compute-sanitizer": (("--version",), "pip install 'faulthunt[sanitizer]' (the "
                                          "nvidia-cuda-sanitizer-api wheel ships it), or install "
                                          "the CUDA toolkit (/usr/local/cuda/bin) and put its bin/ "
                                          "on PATH, or set FAULTHUNT_COMPUTE_SANITIZER to the "
                                          "executable"),
    "cuobjdump": (("--version",), "pip install 'faulthunt[cuobjdump]' (the nvidia-cuda-cuobjdump "
                                  "wheel), or the CUDA toolkit"),
    "cuda-gdb": (("--version",), "install the CUDA toolkit's cuda-gdb (/usr/local/cuda/bin)"),
    "py-spy": (("--version",), "pip install 'faulthunt[spy]' (or pip install py-spy)"),
    "tmux": (("-V",), "apt-get install tmux (faulthunt session needs it)"),
    "tmate": (("-V",), "apt-get install tmate (optional: shareable CI debugging sessions)"),
}
#: Linux capability bit numbers (include/uapi/linux/capability.h)
CAP_SYS_PTRACE = 19
CAP_SYSLOG = 34
#: environment prefixes worth recording for a CUDA investigation (values still redacted)
ENV_PREFIXES = ("CUDA", "NVIDIA", "LD_", "PYTORCH", "TORCH", "CUPY", "NUMBA", "PYTEST", "FAULTHUNT",
                "PATH", "PYTHON", "VIRTUAL_ENV", "CONDA", "SLURM", "GITHUB_", "CI")


def parse_tool_version(tool: str, text: str) -> str | None:
    """The version in a tool's ``--version``/``-V`` output, e.g. ``2025.3.1.0`` or ``13.0.85``.

    Real outputs: compute-sanitizer ``Version 2025.3.1.0 (build 36400806)``; cuobjdump
    ``Cuda compilation tools, release 13.0, V13.0.85``; py-spy ``py-spy 0.4.3``; tmux ``tmux 3.3a``.
    """
    if tool in ("cuobjdump", "nvcc"):
        match = re.search(r"\bV(\d+\.\d+\.\d+)", text)
        if match:
            return match.group(1)
    match = re.search(r"^Version\s+(\S+)", text, re.MULTILINE)
    if match:
        return match.group(1)
    for line in text.splitlines():
        match = re.search(r"\b(\d+\.\d+(?:\.\d+)*[a-z]?)\b", line)
        if match:
            return match.group(1)
    return None


def tool_search_path() -> list[str]:
    """PATH plus where CUDA tools live when not on it (toolkit, nvidia-* wheels)."""
    dirs = os.environ.get("PATH", "").split(os.pathsep)
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home:
            dirs += [os.path.join(home, "bin"), os.path.join(home, "compute-sanitizer")]
    for entry in sys.path:
        nvidia = Path(entry) / "nvidia"
        if nvidia.is_dir():
            # nvidia-cuda-cuobjdump 13.x: nvidia/cu13/bin; the cu12 wheels: nvidia/cuda_cuobjdump/bin
            dirs += [str(p) for p in sorted(nvidia.glob("*/bin"))]
            # nvidia-cuda-sanitizer-api 13.x: the binary itself in nvidia/cu13/compute-sanitizer
            dirs += [str(p) for p in sorted(nvidia.glob("*/compute-sanitizer"))]
    seen: list[str] = []
    for d in dirs:
        if d and d not in seen:
            seen.append(d)
    return seen


def find_tool(name: str) -> str | None:
    """Full path of ``name`` on :func:`tool_search_path`, or ``None``."""
    import shutil

    if name == "compute-sanitizer":  # what `faulthunt sanitize` runs, as its fix says
        given = os.environ.get("FAULTHUNT_COMPUTE_SANITIZER")
        if given and os.path.isfile(given) and os.access(given, os.X_OK):
            return given
    return shutil.which(name, path=os.pathsep.join(tool_search_path()))


def _run_quiet(argv: list[str], timeout: float = 20) -> tuple[int | None, str]:
    import subprocess

    try:
        proc = subprocess.run(argv, capture_output=True, text=True, errors="replace",
                              timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, str(exc)
    return proc.returncode, proc.stdout + proc.stderr


def collect_tools() -> dict[str, dict[str, Any]]:
    """``{tool: {path, version, fix}}`` for every tool in :data:`TOOLS`."""
    out: dict[str, dict[str, Any]] = {}
    for tool, (args, fix) in TOOLS.items():
        path = find_tool(tool)
        version = None
        if path:
            _, text = _run_quiet([path, *args])
            version = parse_tool_version(tool, text)
        out[tool] = {"path": path, "version": version, "fix": None if path else fix}
    return out


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text(errors="replace").strip()
    except OSError:
        return None


def parse_capabilities(status_text: str) -> int | None:
    """The effective capability mask (``CapEff:``) of a ``/proc/<pid>/status`` text."""
    match = re.search(r"^CapEff:\s*([0-9a-fA-F]+)\s*$", status_text, re.MULTILINE)
    return int(match.group(1), 16) if match else None


def has_cap(mask: int | None, bit: int) -> bool:
    """Whether capability ``bit`` is in ``mask``."""
    return mask is not None and bool(mask >> bit & 1)


def collect_kernel_log_access() -> dict[str, Any]:
    """dmesg_restrict, whether /dev/kmsg opens for reading here, CAP_SYSLOG, euid."""
    restrict = _read("/proc/sys/kernel/dmesg_restrict")
    caps = parse_capabilities(_read("/proc/self/status") or "")
    readable, error = False, None
    try:
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
        os.close(fd)
        readable = True
    except OSError as exc:
        error = f"{exc.strerror or exc}"
    return {"dmesg_restrict": int(restrict) if restrict and restrict.isdigit() else None,
            "kmsg_readable": readable, "kmsg_error": error,
            "cap_syslog": has_cap(caps, CAP_SYSLOG), "euid": os.geteuid()}


def collect_ptrace() -> dict[str, Any]:
    """kernel.yama.ptrace_scope (None without Yama) and CAP_SYS_PTRACE of this process."""
    scope = _read("/proc/sys/kernel/yama/ptrace_scope")
    caps = parse_capabilities(_read("/proc/self/status") or "")
    return {"ptrace_scope": int(scope) if scope and scope.isdigit() else None,
            "cap_sys_ptrace": has_cap(caps, CAP_SYS_PTRACE), "euid": os.geteuid()}


def collect_hmm() -> dict[str, Any]:
    """HMM/ATS addressing mode per GPU (NVML), and the nvidia_uvm ``uvm_disable_hmm`` parameter."""
    out: dict[str, Any] = {"uvm_disable_hmm": _read("/sys/module/nvidia_uvm/parameters/uvm_disable_hmm"),
                           "gpus": []}
    stack = contextlib.ExitStack()
    try:
        pynvml = stack.enter_context(nvml.session())
    except nvml.NvmlUnavailable:
        return out
    try:
        names = {0: "none", 1: "hmm", 2: "ats"}
        for index in range(pynvml.nvmlDeviceGetCount()):
            try:
                mode = pynvml.nvmlDeviceGetAddressingMode(pynvml.nvmlDeviceGetHandleByIndex(index))
                out["gpus"].append({"index": index, "addressing_mode": names.get(mode, str(mode))})
            except Exception as exc:  # noqa: BLE001 - older drivers: NVMLError_FunctionNotFound, or no such call in the binding
                out["gpus"].append({"index": index, "addressing_mode": None, "error": str(exc)})
    finally:
        stack.close()
    return out


def find_cudart() -> list[str]:
    """libcudart shared libraries a Python test process could load (wheels, toolkit)."""
    found: list[str] = []
    for entry in sys.path:
        nvidia = Path(entry) / "nvidia"
        if nvidia.is_dir():
            found += [str(p) for p in sorted(nvidia.glob("*/lib/libcudart.so*"))]
    for home in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if home:
            found += [str(p) for p in sorted(Path(home, "lib64").glob("libcudart.so.*"))]
    return list(dict.fromkeys(found))


def collect_cuda_runtime() -> list[dict[str, Any]]:
    """``cudaRuntimeGetVersion`` of each libcudart found (works without a GPU or driver)."""
    import ctypes

    out = []
    for path in find_cudart():
        entry: dict[str, Any] = {"path": path, "version": None}
        try:
            lib = ctypes.CDLL(path)
            value = ctypes.c_int(0)
            if lib.cudaRuntimeGetVersion(ctypes.byref(value)) == 0:
                entry["version"] = cuda_version_text(value.value)
        except OSError as exc:
            entry["error"] = str(exc)
        out.append(entry)
    return out


_FATBIN_SECTIONS = (b".nv_fatbin", b"__nv_relfatbin", b".nvFatBinSegment")


def elf_sections(path: str) -> dict[str, tuple[int, int]] | None:
    """``{section name: (file offset, size)}`` of a 64-bit ELF file (None: not a readable one).

    Reading the section table is ~1000x cheaper than running cuobjdump on every libc in a process.
    """
    import struct

    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2:
                return None
            endian = "<" if head[5] == 1 else ">"
            shoff, = struct.unpack_from(endian + "Q", head, 0x28)
            shentsize, shnum, shstrndx = struct.unpack_from(endian + "HHH", head, 0x3A)
            if not shoff or not shnum or shstrndx >= shnum or shentsize < 64 or shnum > 65535:
                return None
            f.seek(shoff)
            table = f.read(shentsize * shnum)
            if len(table) < shentsize * shnum:
                return None
            str_off, str_size = struct.unpack_from(endian + "QQ", table, shstrndx * shentsize + 0x18)
            f.seek(str_off)
            names = f.read(min(str_size, 1 << 20))
    except (OSError, struct.error):
        return None
    out: dict[str, tuple[int, int]] = {}
    for i in range(shnum):
        name_off, = struct.unpack_from(endian + "I", table, i * shentsize)
        offset, size = struct.unpack_from(endian + "QQ", table, i * shentsize + 0x18)
        end = names.find(b"\0", name_off)
        if 0 <= name_off < len(names) and end != -1:
            out[names[name_off:end].decode("latin-1")] = (offset, size)
    return out


def elf_has_device_code(path: str) -> bool | None:
    """Whether the ELF file has a CUDA fatbin section (None: not a readable 64-bit ELF)."""
    sections = elf_sections(path)
    if sections is None:
        return None
    return any(name.encode() in _FATBIN_SECTIONS for name in sections)


def library_visibility(path: str, release_sass: tuple[Any, ...] = ()) -> Any:
    """What the file shows beyond cuobjdump's listing (:class:`faulthunt.archcheck.Visibility`):
    ``.nv_fatbin`` size, file size, and fatbins embedded elsewhere (a read-only mmap scan, about
    0.25 s for the 287 MB libcufft.so.12). Never raises; unreadable parts are left None."""
    import mmap

    from faulthunt.archcheck import Visibility, scan_fatbins

    sections = elf_sections(path) or {}
    section = sections.get(".nv_fatbin")
    try:
        size = os.path.getsize(path)
    except OSError:
        return Visibility(section[1] if section else None, None, None, release_sass)
    embedded = None
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            embedded = scan_fatbins(m, skip=section)
    except (OSError, ValueError):
        pass
    return Visibility(section[1] if section else None, size, embedded, release_sass)


def parse_maps_libraries(maps_text: str) -> list[str]:
    """Shared-library paths in a ``/proc/<pid>/maps`` text, in load order, without duplicates."""
    libs: list[str] = []
    for line in maps_text.splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and ".so" in parts[5]:
            path = parts[5].strip()
            if path.startswith("/") and not path.endswith("(deleted)") and path not in libs:
                libs.append(path)
    return libs


def wheel_cuda_libraries() -> list[str]:
    """CUDA libraries shipped by Python wheels on sys.path (nvidia-*, torch): dlopen'ed lazily
    (cuDNN loads libcudnn_cnn on the first convolution), so a process map alone misses them."""
    found: list[str] = []
    for entry in sys.path:
        base = Path(entry)
        for pattern in ("nvidia/*/lib/lib*.so*", "nvidia/*/*/lib/lib*.so*", "torch/lib/lib*.so*",
                        "cupy_backends/**/lib*.so*"):
            found += [str(p) for p in sorted(base.glob(pattern)) if p.is_file()]
    return list(dict.fromkeys(os.path.realpath(p) for p in found))


def list_archs(cuobjdump: str, library: str, timeout: float = 120) -> tuple[str, str]:
    """Raw ``--list-elf`` and ``--list-ptx`` output (stdout+stderr) of one library."""
    _, elf = _run_quiet([cuobjdump, "--list-elf", library], timeout)
    _, ptx = _run_quiet([cuobjdump, "--list-ptx", library], timeout)
    return elf, ptx


def collect_libraries(libraries: list[str], devices: list[Any], cuobjdump: str | None,
                      jobs: int = 4) -> list[dict[str, Any]]:
    """Coverage of each library that carries device code, against each distinct device arch."""
    from concurrent.futures import ThreadPoolExecutor

    from faulthunt.archcheck import check_coverage, library_label, parse_listing

    candidates = [lib for lib in dict.fromkeys(libraries) if elf_has_device_code(lib) is not False]
    if not cuobjdump or not candidates:
        return []
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        outputs = list(pool.map(lambda lib: list_archs(cuobjdump, lib), candidates))
    parsed = [(lib, parse_listing(e, "elf"), parse_listing(p, "ptx")) for lib, (e, p) in zip(candidates, outputs)]
    # The SASS the libraries of one directory list, together: one wheel or toolkit lib/ is one
    # release, so a library listing far less than its neighbours is suspect (a stub listing).
    by_dir: dict[str, list[tuple[str, Any]]] = {}
    for lib, elf, _ in parsed:
        by_dir.setdefault(os.path.dirname(os.path.realpath(lib)), []).append((lib, elf.arch_set))
    results = []
    for lib, elf, ptx in parsed:
        label = library_label(lib)
        visibility = None
        for device in (devices or [None]):
            cov = check_coverage(label, elf, ptx, device)
            if cov.verdict == "no_device_code":
                break
            if cov.verdict in ("cannot_run", "unseen"):  # look at what cuobjdump cannot see
                if visibility is None:
                    neighbours = by_dir[os.path.dirname(os.path.realpath(lib))]
                    beside = {a for other, archs in neighbours if other != lib for a in archs}
                    visibility = library_visibility(lib, tuple(sorted(beside)))
                cov = check_coverage(label, elf, ptx, device, visibility)
            results.append({"path": lib, **cov.to_json(), "problem": cov.problem,
                            "members": elf.members + ptx.members})
    return results


def ptrace_verdict(scope: int | None, cap_sys_ptrace: bool, euid: int | None
                   ) -> tuple[str, str, str, str] | None:
    """(severity, area, message, fix) when py-spy could not attach to a pytest worker, else None.

    Yama (Documentation/admin-guide/LSM/Yama.rst): 0 = same uid may attach; 1 = only to
    descendants (py-spy run from a second shell is not an ancestor of the workers); 2 = only with
    CAP_SYS_PTRACE; 3 = never. Without Yama (``None``) the classic same-uid rule applies.
    """
    if scope == 3:
        return ("problem", "ptrace", "kernel.yama.ptrace_scope=3: no process may ptrace, so py-spy "
                "cannot dump stuck workers", "reboot with kernel.yama.ptrace_scope<=1 (3 cannot be "
                "lowered at runtime)")
    if cap_sys_ptrace:
        return None
    if scope in (1, 2):
        return ("problem", "ptrace", f"kernel.yama.ptrace_scope={scope} without CAP_SYS_PTRACE: "
                "py-spy cannot attach to pytest workers it did not start",
                "sudo sysctl kernel.yama.ptrace_scope=0, run py-spy under sudo, or grant "
                "CAP_SYS_PTRACE (docker --cap-add SYS_PTRACE)")
    if euid == 0:
        return ("warning", "ptrace", "root without CAP_SYS_PTRACE (a container?): py-spy may be "
                "refused by the container's seccomp profile",
                "docker --cap-add SYS_PTRACE (Kubernetes: securityContext.capabilities.add SYS_PTRACE)")
    return None


def problems_of(full: dict[str, Any]) -> list[dict[str, str]]:
    """Every problem (and notable warning) in a :func:`collect_full` result, each with its fix.

    Pure: takes the collected dict, so it is tested on constructed machine states.
    """
    out: list[dict[str, str]] = []

    def add(severity: str, area: str, message: str, fix: str | None) -> None:
        out.append({"severity": severity, "area": area, "message": message, "fix": fix or ""})

    gpus = full.get("gpus") or []
    if not gpus:
        add("info", "gpu", f"no GPU on this machine ({full.get('gpu_note')}); everything else is "
            "checked, and GPU-only work (sanitizer reruns, Xid capture) needs a GPU machine",
            "run faulthunt doctor on the GPU runner itself")
    elif full.get("driver_module") is None:
        add("warning", "driver", "the NVIDIA kernel module's type (open/proprietary) is unknown: "
            "/proc/driver/nvidia/version is not readable",
            "mount /proc/driver/nvidia into the container, or check `cat /proc/driver/nvidia/version` on the host")
    for tool, info in (full.get("tools") or {}).items():
        if not info.get("path"):
            severity = "info" if tool in ("tmate", "cuda-gdb") else "problem" if gpus else "warning"
            add(severity, "tools", f"{tool} not found (searched PATH, $CUDA_HOME/bin, "
                "/usr/local/cuda/bin, nvidia-* wheels)", info.get("fix"))
    klog = full.get("kernel_log") or {}
    if klog and not klog.get("kmsg_readable"):
        restrict = klog.get("dmesg_restrict")
        add("problem", "kernel_log",
            f"cannot read /dev/kmsg ({klog.get('kmsg_error')}; kernel.dmesg_restrict={restrict}, "
            f"CAP_SYSLOG {'held' if klog.get('cap_syslog') else 'not held'}): Xid lines will not "
            "be captured from the kernel log",
            "run as root, grant CAP_SYSLOG (docker --cap-add SYSLOG), set "
            "`sysctl kernel.dmesg_restrict=0`, or use --xid-source nvml (Xid numbers only)")
    pt = full.get("ptrace") or {}
    if pt:
        verdict = ptrace_verdict(pt.get("ptrace_scope"), bool(pt.get("cap_sys_ptrace")), pt.get("euid"))
        if verdict:
            add(*verdict)
    if not full.get("nvml") and gpus == []:
        pass  # said once above, with the GPU
    elif not full.get("nvml"):
        add("problem", "nvml", f"NVML unavailable: {full.get('gpu_note')}",
            "pip install nvidia-ml-py, and make libnvidia-ml.so.1 visible (NVIDIA container toolkit)")
    if not full.get("cuda_runtime"):
        add("info", "cuda_runtime", "no libcudart found in Python wheels or the CUDA toolkit",
            "pip install nvidia-cuda-runtime (or your framework's CUDA wheels)")
    for lib in full.get("libraries") or []:
        if lib["verdict"] == "unseen":
            add("info", "libraries", lib["message"], lib["fix"])
        elif lib["verdict"] in ("cannot_run", "jit") or (lib["verdict"] == "unknown" and lib.get("device")):
            add("problem" if lib["verdict"] != "jit" else "warning", "libraries", lib["message"], lib["fix"])
        elif lib["verdict"] == "unknown" and lib.get("fix"):
            add("warning", "libraries", lib["message"], lib["fix"])
    if full.get("libraries_note"):
        add("warning", "libraries", full["libraries_note"]["message"], full["libraries_note"]["fix"])
    return out


def collect_full(libraries: list[str] | None = None, pids: list[int] | None = None,
                 device_ccs: list[str] | None = None, scan_wheels: bool = True) -> dict[str, Any]:
    """Everything ``faulthunt doctor --json`` prints. Never raises for a missing GPU or tool.

    ``libraries``: extra library paths to check; ``pids``: processes whose mapped libraries are
    checked (a running pytest worker); ``device_ccs``: check against these compute capabilities
    instead of (or, without a GPU, in place of) the visible devices.
    """
    from faulthunt.archcheck import parse_arch
    from faulthunt.redact import redact_env

    full = collect_basic()
    full["driver_banner"] = read_driver_banner()["banner"]
    full["hmm"] = collect_hmm()
    full["cuda_runtime"] = collect_cuda_runtime()
    full["tools"] = collect_tools()
    full["kernel_log"] = collect_kernel_log_access()
    full["ptrace"] = collect_ptrace()
    full["env"] = redact_env({k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIXES)})
    libs = list(libraries or [])
    for pid in pids or []:
        maps = _read(f"/proc/{pid}/maps")
        if maps is None:
            full.setdefault("libraries_note", {"message": f"cannot read /proc/{pid}/maps",
                                               "fix": "give the pid of a running process you own (or run as root)"})
        else:
            libs += parse_maps_libraries(maps)
    if scan_wheels:
        libs += wheel_cuda_libraries()
    ccs = device_ccs or sorted({g["cc"] for g in full["gpus"] if g.get("cc")})
    devices = [parse_arch(cc) for cc in ccs]
    cuobjdump = full["tools"]["cuobjdump"]["path"]
    full["libraries_checked"] = len(libs)
    full["device_archs"] = [d.name for d in devices]
    if libs and not cuobjdump:
        full["libraries_note"] = {"message": f"{len(libs)} CUDA libraries not checked for SASS/PTX: "
                                             "cuobjdump not found",
                                  "fix": "pip install nvidia-cuda-cuobjdump"}
    full["libraries"] = collect_libraries(libs, devices, cuobjdump)
    full["problems"] = problems_of(full)
    return full
