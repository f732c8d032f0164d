"""Find compute-sanitizer, read which options it has from its ``--help``, build its command line.

Option names changed across releases (from the ReleaseNotes of the 2026.4 wheel):
``--filter``/``--exclude`` (<= 2021.1) became ``--kernel-regex``/``--kernel-regex-exclude``
(2021.2), then ``--kernel-name``/``--kernel-name-exclude`` (2023.3, which added the ``regex``
key); ``--padding`` came in 2021.1, ``--target-processes`` in 2020.1.1 (default ``all`` only
since 2024.1), stream-ordered race detection in 2022.2 (default ``no`` until the 2025.x
releases, e.g. the H200's 2025.3.1; ``all`` in 2026.4), ``--report-api-errors extended`` in
2026.1. So the command is built only from options the installed tool lists, and every option
left out is reported with the reason. ``--help`` and ``--version`` run without a GPU.

:func:`parse_help` and :func:`build_command` are pure; :func:`find_compute_sanitizer` and
:func:`probe` do the I/O.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from faulthunt.errors import ToolMissingError

#: env var naming the compute-sanitizer executable to use (overrides the search)
ENV_EXECUTABLE = "FAULTHUNT_COMPUTE_SANITIZER"
#: exit status asked of compute-sanitizer when it found errors (pytest uses 0-5)
ERROR_EXITCODE = 86
DEFAULT_PRINT_LIMIT = 1000

#: where the PyPI wheels put the binary, under site-packages
WHEEL_PATHS = (
    "nvidia/cu13/compute-sanitizer/compute-sanitizer",   # nvidia-cuda-sanitizer-api 13.x
    "nvidia/cu13/bin/compute-sanitizer",                 # 13.0-13.2 (13.5: a sh wrapper of the above)
    "nvidia/cuda_sanitizer_api/bin/compute-sanitizer",   # nvidia-cuda-sanitizer-api-cu12 12.9
    "nvidia/cu12/bin/compute-sanitizer",
)
TOOLKIT_PATHS = ("bin/compute-sanitizer", "compute-sanitizer/compute-sanitizer")

#: the release that added an option (ReleaseNotes of compute-sanitizer 2026.4)
SINCE = {
    "target-processes": "2020.1.1", "padding": "2021.1", "kernel-regex": "2021.2",
    "track-stream-ordered-races": "2022.2", "kernel-name": "2023.3",
}

HOW_TO_GET = (
    "install the CUDA toolkit (compute-sanitizer is in <cuda>/bin, e.g. /usr/local/cuda/bin) and put it "
    "on PATH, or `pip install 'faulthunt[sanitizer]'` (the nvidia-cuda-sanitizer-api wheel, which puts "
    "it in site-packages/nvidia/cu13/compute-sanitizer/), or point FAULTHUNT_COMPUTE_SANITIZER at the "
    "executable"
)

_OPT = re.compile(r"^\s{1,6}(?:-\w \[ )?--(?P<name>[a-z0-9][a-z0-9-]*)(?: \])?(?P<arg> arg|\s+<[^>]*>)?"
                  r"(?: \(=(?P<default>[^)]*)\))?")
_VERSION = re.compile(r"Version (?P<v>\d+\.\d+(?:\.\d+)*)")


@dataclasses.dataclass(frozen=True)
class ToolInfo:
    """What the installed compute-sanitizer is and which options its ``--help`` lists."""

    path: str
    version: str | None
    options: frozenset[str]
    defaults: Mapping[str, str]
    legacy: bool = False

    @property
    def version_tuple(self) -> tuple[int, ...]:
        return version_tuple(self.version)


@dataclasses.dataclass(frozen=True)
class Dropped:
    """An option faulthunt wanted and left out, and why."""

    option: str
    reason: str

    def render(self) -> str:
        return f"{self.option}: {self.reason}"


@dataclasses.dataclass(frozen=True)
class CommandPlan:
    """The compute-sanitizer part of the command line (the target goes after it)."""

    argv: tuple[str, ...]
    dropped: tuple[Dropped, ...]
    #: the text log goes to --log-file (else it is in the target's stdout)
    log_file: str | None
    xml_file: str | None


def version_tuple(version: str | None) -> tuple[int, ...]:
    if not version:
        return ()
    return tuple(int(p) for p in version.split(".") if p.isdigit())


def parse_help(text: str) -> tuple[frozenset[str], dict[str, str]]:
    """Long option names (without ``--``) listed by ``--help``, and their ``(=default)`` values."""
    names: set[str] = set()
    defaults: dict[str, str] = {}
    for line in text.splitlines():
        m = _OPT.match(line)
        if m:
            names.add(m.group("name"))
            if m.group("default") is not None:
                defaults[m.group("name")] = m.group("default")
    return frozenset(names), defaults


def parse_version(text: str) -> str | None:
    m = _VERSION.search(text)
    return m.group("v") if m else None


def tool_info_from_help(path: str, help_text: str, version_text: str = "") -> ToolInfo:
    """A :class:`ToolInfo` from captured ``--help`` (and ``--version``) output."""
    options, defaults = parse_help(help_text)
    version = parse_version(version_text) or parse_version(help_text)
    legacy = "CUDA-MEMCHECK" in help_text.upper() and "COMPUTE SANITIZER" not in help_text.upper()
    return ToolInfo(path, version, options, defaults, legacy)


def _since(option: str) -> str:
    s = SINCE.get(option)
    return f" (added in {s})" if s else ""


def build_command(info: ToolInfo, *, tool: str = "memcheck", log_file: str | None = None,
                  xml_file: str | None = None, error_exitcode: int = ERROR_EXITCODE,
                  print_limit: int | None = DEFAULT_PRINT_LIMIT, report_api_errors: str | None = "no",
                  target_processes: str = "all", track_stream_ordered_races: str | None = "all",
                  padding: int | None = None, leak_check: bool = False,
                  kernel_filters: Sequence[str] = (), extra: Sequence[str] = ()) -> CommandPlan:
    """compute-sanitizer's argv up to the target, using only options ``info`` lists. Pure."""
    have = info.options
    ver = info.version or "this version"
    argv: list[str] = [info.path]
    dropped: list[Dropped] = []

    def want(option: str, *values: str, memcheck_only: bool = False) -> bool:
        if memcheck_only and tool != "memcheck":
            return False
        if option not in have:
            dropped.append(Dropped(f"--{option}", f"not supported by compute-sanitizer {ver}{_since(option)}"))
            return False
        argv.append(f"--{option}")
        argv.extend(values)
        return True

    want("tool", tool)
    want("target-processes", target_processes)
    want("error-exitcode", str(error_exitcode))
    if print_limit is not None:
        want("print-limit", str(print_limit))
    if report_api_errors is not None:
        want("report-api-errors", report_api_errors, memcheck_only=True)
    if track_stream_ordered_races is not None:
        want("track-stream-ordered-races", track_stream_ordered_races, memcheck_only=True)
    if padding:
        want("padding", str(padding), memcheck_only=True)
    if leak_check:
        want("leak-check", "full", memcheck_only=True)
    for flt in kernel_filters:
        if "kernel-name" in have:
            argv += ["--kernel-name", flt]
        elif "kernel-regex" in have or "filter" in have:
            opt = "--kernel-regex" if "kernel-regex" in have else "--filter"
            if "regex=" in flt:
                dropped.append(Dropped(f"--kernel-name {flt}", f"the regex key needs compute-sanitizer 2023.3+ ({ver} has {opt})"))
            else:
                argv += [opt, flt]
        else:
            dropped.append(Dropped(f"--kernel-name {flt}", f"no kernel filter option in compute-sanitizer {ver}"))
    got_xml = None
    if xml_file is not None:
        if "xml" in have and "save" in have:
            argv += ["--xml", "--save", xml_file]
            got_xml = xml_file
        else:
            missing = [o for o in ("xml", "save") if o not in have]
            dropped.append(Dropped("--xml --save", f"compute-sanitizer {ver} lacks --{' --'.join(missing)}; "
                                   "only the text log is kept"))
    got_log = None
    if log_file is not None:
        if "log-file" in have:
            argv += ["--log-file", log_file]
            got_log = log_file
        else:
            dropped.append(Dropped("--log-file", f"not supported by compute-sanitizer {ver}; the text log is "
                                   "read from the target's output instead"))
    argv.extend(extra)
    return CommandPlan(tuple(argv), tuple(dropped), got_log, got_xml)


# --- I/O: finding and probing the executable -----------------------------------------------------

def _wheel_roots() -> list[Path]:
    roots: list[Path] = []
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        roots.extend(Path(p).parent for p in spec.submodule_search_locations)
    return roots


def find_compute_sanitizer(env: Mapping[str, str] | None = None, *, search_wheels: bool = True) -> Path | None:
    """The compute-sanitizer to use: $FAULTHUNT_COMPUTE_SANITIZER, PATH, the CUDA toolkit, the wheel."""
    env = os.environ if env is None else env
    explicit = env.get(ENV_EXECUTABLE)
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise ToolMissingError(f"{ENV_EXECUTABLE}={explicit} does not name a file",
                                   fix=f"unset it or point it at compute-sanitizer; else {HOW_TO_GET}")
        return path
    found = shutil.which("compute-sanitizer", path=env.get("PATH", os.defpath))
    if found:
        return Path(found)
    homes = [env.get(k) for k in ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT")] + ["/usr/local/cuda"]
    for home in homes:
        if not home:
            continue
        for rel in TOOLKIT_PATHS:
            cand = Path(home) / rel
            if cand.is_file() and os.access(cand, os.X_OK):
                return cand
    if search_wheels:
        for root in _wheel_roots():
            for rel in WHEEL_PATHS:
                cand = root / rel
                if cand.is_file():
                    return cand
    return None


def require_compute_sanitizer(env: Mapping[str, str] | None = None) -> Path:
    """Like :func:`find_compute_sanitizer`, but a missing tool is a :class:`ToolMissingError`."""
    path = find_compute_sanitizer(env)
    if path is None:
        raise ToolMissingError("compute-sanitizer not found (looked on PATH, in $CUDA_HOME and "
                               "/usr/local/cuda, and for the nvidia-cuda-sanitizer-api wheel)",
                               fix=HOW_TO_GET)
    return path


def probe(path: Path | str, timeout: float = 60.0, env: Mapping[str, str] | None = None) -> ToolInfo:
    """Run ``--help`` and ``--version`` (no GPU needed) and read the options."""
    path = str(path)
    if not os.access(path, os.X_OK):
        raise ToolMissingError(f"{path} is not executable",
                               fix=f"chmod +x {path} (a wheel unpacked without pip loses the bit)")
    try:
        run_env = dict(env) if env is not None else None
        helped = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=timeout,
                                errors="replace", check=False, env=run_env)
        version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=timeout,
                                 errors="replace", check=False, env=run_env)
    except (OSError, subprocess.SubprocessError) as exc:
        raise ToolMissingError(f"cannot run {path} --help: {exc}", fix=HOW_TO_GET) from exc
    text = helped.stdout + helped.stderr
    info = tool_info_from_help(path, text, version.stdout + version.stderr)
    if "tool" not in info.options and "xml" not in info.options:
        raise ToolMissingError(f"{path} --help does not look like compute-sanitizer's (exit {helped.returncode}): "
                               f"{text.strip()[:300]!r}", fix=HOW_TO_GET)
    return info
