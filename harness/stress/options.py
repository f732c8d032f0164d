"""What a stress run was asked to do, checked before anything starts, and the pytest command.

:func:`check` is the gate: every option is validated (and the kernel-log source opened) before a
run directory exists or pytest starts, so a bad option is exit 2 with the fix and nothing else
happens. :func:`build_pytest_argv` and :func:`build_env` are pure.
"""

from __future__ import annotations

import math
import os
import shlex
import sys
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec

from faulthunt.errors import FaulthuntError, UsageError
from faulthunt.nodeids import pytest_selection
from faulthunt.rundir import RUN_DIR_ENV, Layout
from faulthunt.stress.defaults import DEFAULT_MAX_WORKER_RESTART, DEFAULT_TIMEOUT_S, LEDGER_MODES

#: pytest options whose next argument is their value (so that value is not a test target)
_VALUE_OPTIONS = frozenset({
    "-k", "-m", "-p", "-o", "--override-ini", "-c", "--config-file", "-W", "--pythonwarnings",
    "--deselect", "--ignore", "--ignore-glob", "--rootdir", "--basetemp", "--confcutdir",
    "--junitxml", "--junit-xml", "--junit-prefix", "--tb", "-r", "--log-level", "--log-file",
    "--durations", "--maxfail", "--count", "-n", "--numprocesses", "--dist", "--tx",
    "--timeout", "--faulthunt-id", "--faulthunt-run-dir", "--import-mode", "--capture",
    "--cov", "--cov-report", "--randomly-seed",
})


#: the plugins a stress run needs: pytest's name of each, and its distribution
RUN_PLUGINS = (("faulthunt", "faulthunt"), ("xdist", "pytest-xdist"), ("repeat", "pytest-repeat"),
               ("timeout", "pytest-timeout"))
#: what turns off pytest's loading of installed plugins: its environment variable, its option
_NO_AUTOLOAD = ("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "--disable-plugin-autoload")


class StressOptions(msgspec.Struct, frozen=True):
    """What ``faulthunt stress`` was asked to do (see docs/stress.md)."""

    pytest_args: tuple[str, ...] = ()     # positional args and anything after `--`
    workers: int | str = 1                # -n (int or "auto"); 0 = no xdist
    count: int = 1                        # --count (pytest-repeat)
    keyword: str | None = None            # -k
    maxfail: int | None = None
    #: per-test seconds before a test counts as hung (thread method). None: the suite's own
    #: pytest `timeout` setting if it has one, else DEFAULT_TIMEOUT_S; 0: no timeout
    timeout: float | None = None
    launch_blocking: bool = True          # CUDA_LAUNCH_BLOCKING=1
    gpus: tuple[str, ...] | None = None   # round-robin CUDA_VISIBLE_DEVICES per worker
    run_dir: Path | None = None           # exact dir; else a new .faulthunt/runs/<id>
    base: Path | None = None
    xid_source: str = "auto"              # faulthunt.kernlog.open_source spec
    ledger: str = "auto"                  # auto|full|cupti|numba|cupy|torch|off
    cwd: Path | None = None
    env: Mapping[str, str] | None = None  # extra env for pytest
    quiet: bool = False
    max_worker_restart: int = DEFAULT_MAX_WORKER_RESTART
    recycle: bool = True                  # restart a worker after a sticky CUDA error
    guard: str | None = None              # guard mode spec (FAULTHUNT_GUARD; docs/guard.md)


class Timeout(msgspec.Struct, frozen=True):
    """The per-test timeout a run uses and where it came from (said in summary.json)."""

    seconds: float | None                 # None: off
    #: "--timeout", "default", "off", or the suite's own (:func:`suite_timeout`): "pytest.ini",
    #: "pyproject.toml addopts", "PYTEST_TIMEOUT", "PYTEST_ADDOPTS", "pytest arguments", ...
    source: str

    def text(self) -> str:
        if self.seconds is None:
            why = "--timeout 0" if self.source == "off" else f"{where_text(self.source)} turns it off"
            return (f"no per-test timeout ({why}): a hanging test is not reported, unless a "
                    "timeout mark of its own sets one")
        return (f"per-test timeout {self.seconds:g} s ({where_text(self.source)}; --timeout 0 "
                "turns it off)")


def where_text(source: str) -> str:
    """Where a timeout came from (:attr:`Timeout.source`), as a sentence says it."""
    if source in ("--timeout", "off"):
        return "--timeout"
    if source == "default":
        return "faulthunt's default"
    if source.startswith("PYTEST_"):  # PYTEST_TIMEOUT, PYTEST_ADDOPTS
        return f"the environment's {source}"
    if source == ARGS_SOURCE:
        return "--timeout among pytest's arguments"
    if source == "-o timeout":
        return "-o timeout among pytest's arguments"
    return f"the suite's {source}"  # pytest.ini, pyproject.toml addopts, ...


class Plan(msgspec.Struct, frozen=True):
    """A checked stress run: the options, the pytest command and what checking found."""

    opts: StressOptions
    cwd: Path
    argv: tuple[str, ...]
    timeout: Timeout
    #: the opened kernel-log source (None: --xid-source none)
    xid_source: Any
    #: what checking could not check or changed, said before the run (e.g. NVML unavailable)
    notes: tuple[str, ...] = ()


# --- pure pieces ---------------------------------------------------------------------------------

def parse_gpus(spec: str, device_count: Callable[[], int | None] | None = None) -> tuple[str, ...]:
    """``"0,1"`` -> ("0", "1"); ``"all"`` -> every NVML device; UUIDs pass through."""
    spec = spec.strip()
    if spec == "all":
        n = (device_count or nvml_device_count)()
        if not n:
            raise UsageError("--gpus all: NVML sees no GPU on this machine",
                             fix="pass --gpus 0,1,... explicitly, or drop --gpus")
        return tuple(str(i) for i in range(n))
    parts = tuple(p.strip() for p in spec.split(",") if p.strip())
    if not parts:
        raise UsageError(f"--gpus {spec!r} names no device", fix="use --gpus all or --gpus 0,1")
    for p in parts:
        if not (p.isdigit() or p.startswith(("GPU-", "MIG-"))):
            raise UsageError(f"--gpus: {p!r} is neither a device index nor a GPU-/MIG- UUID",
                             fix="use --gpus all, --gpus 0,1 or --gpus GPU-<uuid>,...")
    return parts


def nvml_device_count() -> int | None:
    """Number of GPUs NVML sees; None when NVML cannot be asked (no driver, no pynvml)."""
    from faulthunt import nvml

    try:
        with nvml.session() as n:
            return int(n.nvmlDeviceGetCount())
    except Exception:  # noqa: BLE001 - NvmlUnavailable, or pynvml's own NVMLError on the query
        return None


def worker_count(opts: StressOptions) -> int | str:
    if opts.gpus and opts.workers == "auto":
        return len(opts.gpus)
    return opts.workers


def positional_ids(args: Sequence[str]) -> list[str]:
    """The node ids (``a.py::test_a``, with or without parameters) among ``args`` that pytest
    reads as test paths: not options and not an option's value (``--deselect a.py::t``), and
    after a literal ``--`` every one."""
    ids = []
    previous = ""
    rest = False
    for arg in args:
        if arg == "--" and not rest:
            rest = True
        elif "::" in arg and (rest or (not arg.startswith("-") and previous not in _VALUE_OPTIONS)):
            ids.append(arg)
        previous = arg
    return ids


def split_targets(args: Sequence[str]) -> tuple[list[str], list[str], list[str]]:
    """(arguments kept in place, node ids selected by id, arguments after a literal ``--``).

    Positional node ids with parameters (``a.py::test_p[x y]``) are taken out: pytest-repeat
    renames them (``test_p[x y-1-3]``), so given to pytest as they are they match nothing with
    ``--count``; they go through :func:`faulthunt.nodeids.pytest_selection` instead, and so does
    every other positional ``::`` id beside one (the selection runs exactly the named tests, so
    an id left to pytest would be collected and then left out). Options, option values
    (``--deselect a.py::t[1]``) and paths stay where they were, and so do plain ids when no id
    has parameters.
    """
    positions: list[tuple[str, bool]] = []  # (argument, it is a positional node id)
    after_at = len(args)
    previous = ""
    for i, arg in enumerate(args):
        if arg == "--" and after_at == len(args):
            after_at = i
        is_id = not arg.startswith("-") and "::" in arg
        positions.append((arg, is_id and (i > after_at or previous not in _VALUE_OPTIONS)))
        previous = arg
    by_id = any(is_id and _is_param_id(arg) for arg, is_id in positions)
    kept: list[str] = []
    ids: list[str] = []
    after: list[str] = []
    for i, (arg, is_id) in enumerate(positions):
        if is_id and by_id:
            ids.append(arg)
        elif i > after_at:
            after.append(arg)
        elif i != after_at:
            kept.append(arg)
    return kept, ids, after


def _is_param_id(arg: str) -> bool:
    return not arg.startswith("-") and "::" in arg and "[" in arg.split("::", 1)[1]


def is_target(arg: str, previous: str) -> bool:
    """Whether a pytest argument names something to collect (a path, maybe with ``::``)."""
    return (not arg.startswith("-") and previous not in _VALUE_OPTIONS
            and ("::" in arg or "/" in arg or arg.endswith(".py")))


def timeout_argv(timeout: Timeout) -> list[str]:
    # thread: the signal method cannot interrupt a CUDA synchronize. The suite's own setting
    # is left to pytest-timeout (no --timeout), so it stays the suite's.
    argv = ["--timeout-method", "thread"]
    if timeout.source == "off":
        argv += ["--timeout", "0"]
    elif timeout.source in ("--timeout", "default") and timeout.seconds:
        argv += ["--timeout", f"{timeout.seconds:g}"]
    return argv


def build_pytest_argv(opts: StressOptions, python: str = sys.executable, *,
                      timeout: Timeout | None = None, autoloaded: Collection[str] = ()) -> list[str]:
    """The pytest command line a stress run executes.

    ``-p NAME`` for each of :data:`RUN_PLUGINS` that is not in ``autoloaded`` (what pytest loads
    by itself: :func:`autoloaded_plugins`). Parametrized node ids among ``pytest_args`` go last,
    through :func:`faulthunt.nodeids.pytest_selection` (which raises UsageError for a bad one).
    """
    argv = [python, "-m", "pytest"]
    for name, _ in RUN_PLUGINS:
        if name not in autoloaded:
            argv += ["-p", name]
    n = worker_count(opts)
    if opts.gpus:
        count = int(n) if n not in (0, "0") else len(opts.gpus)
        # One gateway spec per worker: xdist restarts a dead worker from its spec, so the
        # replacement keeps the slot's device (xdist/dsession.py: _clone_node).
        for i in range(count):
            argv += ["--tx", f"popen//env:CUDA_VISIBLE_DEVICES={opts.gpus[i % len(opts.gpus)]}"]
        argv += ["--dist", "load"]
    elif n not in (0, "0"):
        argv += ["-n", str(n)]
    if n not in (0, "0"):
        argv += ["--max-worker-restart", str(opts.max_worker_restart)]
    if opts.count > 1:
        argv += ["--count", str(opts.count)]
    if opts.keyword:
        argv += ["-k", opts.keyword]
    if opts.maxfail is not None:
        argv += ["--maxfail", str(opts.maxfail)]
    argv += timeout_argv(timeout or resolve_timeout(opts.timeout, None))
    if not opts.recycle:
        argv += ["--faulthunt-no-recycle"]
    kept, ids, after = split_targets(opts.pytest_args)
    argv += kept
    if ids:
        argv += pytest_selection(ids, "the command line") + after
    elif after:
        argv += ["--", *after]
    return argv


def build_env(opts: StressOptions, run_dir: Path,
              base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of the pytest child."""
    env = dict(os.environ if base is None else base)
    env.update(opts.env or {})
    env[RUN_DIR_ENV] = str(run_dir.resolve())
    env["PYTHONFAULTHANDLER"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    if opts.launch_blocking:
        env["CUDA_LAUNCH_BLOCKING"] = "1"
    if opts.ledger:
        env["FAULTHUNT_LEDGER"] = opts.ledger
    if opts.guard:
        env["FAULTHUNT_GUARD"] = opts.guard  # guard mode: faulthunt.guard.config.GUARD_ENV
    if opts.gpus:
        # CUDA_VISIBLE_DEVICES indices then mean what nvidia-smi/NVML (and our PCI map) mean.
        env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    return env


def resolve_timeout(asked: float | None, suite: tuple[str, float] | None) -> Timeout:
    """The timeout a run uses: asked (0 = off), else the suite's own, else the default."""
    if asked is not None:
        return Timeout(float(asked), "--timeout") if asked > 0 else Timeout(None, "off")
    if suite is not None:
        where, seconds = suite
        return Timeout(seconds if seconds > 0 else None, where)
    return Timeout(DEFAULT_TIMEOUT_S, "default")


# --- checking (I/O: the file system, NVML, the kernel log) ---------------------------------------

def check(opts: StressOptions, warn: Callable[[str], None]) -> Plan:
    """Validate every option before anything starts; UsageError (exit 2) with the fix.

    Opens the kernel-log source (an explicit one that cannot be read is refused; ``auto`` falls
    back and says so through ``warn``).
    """
    cwd = (opts.cwd or Path.cwd()).resolve()
    if opts.count < 1:
        raise UsageError(f"--count must be >= 1, not {opts.count}")
    if opts.timeout is not None and not (0 <= opts.timeout < math.inf):
        raise UsageError(f"--timeout must be a finite number >= 0 of seconds, not {opts.timeout:g}",
                         fix="--timeout 0 turns the per-test timeout off")
    if opts.maxfail is not None and opts.maxfail < 1:
        raise UsageError(f"--maxfail must be >= 1, not {opts.maxfail}", fix="drop --maxfail "
                         "to run everything")
    if opts.max_worker_restart < 0:
        raise UsageError(f"--max-worker-restart must be >= 0, not {opts.max_worker_restart}")
    if opts.ledger not in LEDGER_MODES:
        raise UsageError(f"--ledger {opts.ledger!r} is not a ledger mode",
                         fix=f"use one of: {', '.join(LEDGER_MODES)}")
    opts = check_ledger(opts, warn)
    if opts.run_dir is not None:
        check_run_dir(opts.run_dir if opts.run_dir.is_absolute() else cwd / opts.run_dir)
    notes = list(check_gpus(opts.gpus))
    check_targets(opts.pytest_args, cwd)
    env = {**os.environ, **(opts.env or {})}
    try:
        suite = suite_timeout(cwd, opts.pytest_args, env)
    except SuiteTimeoutError as exc:
        if opts.timeout is None or not exc.overridable:
            raise
        suite = None  # faulthunt's own --timeout wins over the suite's unusable setting
    if opts.timeout is not None and suite is not None and suite[0] == ARGS_SOURCE:
        raise UsageError(f"two per-test timeouts: --timeout {opts.timeout:g} and --timeout "
                         f"{suite[1]:g} among pytest's arguments (pytest would take the second)",
                         fix="give one of them")
    timeout = resolve_timeout(opts.timeout, suite)
    argv = tuple(build_pytest_argv(opts, timeout=timeout,  # a bad node id: UsageError
                                   autoloaded=autoloaded_plugins(opts, cwd)))
    source = open_kernel_log(opts.xid_source, warn)
    return Plan(opts=opts, cwd=cwd, argv=argv, timeout=timeout, xid_source=source,
                notes=tuple(notes))


def autoloaded_plugins(opts: StressOptions, cwd: Path,
                       installed: Callable[[tuple[str, ...]], Collection[str]] | None = None,
                       ) -> frozenset[str]:
    """The names of :data:`RUN_PLUGINS` that pytest will load by itself (from their installed
    distributions' entry points): those need no ``-p``. Each ``-p NAME`` makes every pytest
    process of the run read every installed distribution's entry points once more before its
    own loading reads them again (about 6 M instructions a process with 100 distributions:
    docs/performance.md). Empty, so that every plugin is named, when that loading may be off:
    its variable or option anywhere pytest could take it from (the environment, the pytest
    arguments, PYTEST_ADDOPTS, the suite's configuration files; a false alarm only costs the
    ``-p``), or when the run's own environment changes where Python looks for packages."""
    env = {**os.environ, **(opts.env or {})}
    if env.get(_NO_AUTOLOAD[0]) or any(key.startswith(("PYTHON", "PYTEST"))
                                       for key in opts.env or ()):
        return frozenset()
    addopts = env.get("PYTEST_ADDOPTS", "")
    texts = [*opts.pytest_args, addopts]
    texts += [_text_of(path) for path in _config_files(cwd, opts.pytest_args, addopts)]
    if any(word in text for text in texts for word in _NO_AUTOLOAD):
        return frozenset()
    if installed is None:
        from faulthunt.identity import package_versions

        installed = package_versions
    found = installed(tuple(dist for _, dist in RUN_PLUGINS))
    return frozenset(name for name, dist in RUN_PLUGINS if dist in found)


#: pytest's configuration files, in the order it looks for them in each directory (pytest 9
#: added the first two)
_CONFIG_NAMES = ("pytest.toml", ".pytest.toml", "pytest.ini", ".pytest.ini", "pyproject.toml",
                 "tox.ini", "setup.cfg")


def _config_files(cwd: Path, pytest_args: Sequence[str], addopts: str = "") -> list[Path]:
    """Every file pytest might take its configuration from (more than the one it takes: this is
    for a check whose false alarm costs little): one named with ``-c`` or ``--config-file`` in
    the arguments or in ``addopts`` (PYTEST_ADDOPTS), and each configuration file in ``cwd``,
    in the directory of each test path given, and in their parents (pytest looks from the
    paths' common ancestor up)."""
    found = [cwd / path for path in _config_options([*pytest_args, *_split(addopts)])]
    seen: set[Path] = set()
    for start in [cwd.resolve(), *_arg_paths(cwd, pytest_args)]:
        first = start if _is_dir(start) else start.parent
        for directory in (first, *first.parents):
            if directory in seen:
                break  # this one and its parents are looked at already
            seen.add(directory)
            found += [directory / name for name in _CONFIG_NAMES if (directory / name).is_file()]
    return found


def _text_of(path: Path) -> str:
    """A configuration file's text ("" when it cannot be read: pytest will say why)."""
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def check_ledger(opts: StressOptions, warn: Callable[[str], None],
                 cupti_problem: Callable[[], str | None] | None = None) -> StressOptions:
    """``--ledger cupti`` where CUPTI cannot load: said (``warn``: stderr and the summary's
    warnings), and the run falls back to ``auto`` (the framework refinements) instead of each
    worker recording nothing with one line in reproducer.log."""
    if opts.ledger != "cupti":
        return opts
    if cupti_problem is None:
        from faulthunt.ledger.cupti_source import problem
        cupti_problem = problem
    why = cupti_problem()
    if why is None:
        return opts
    warn(f"--ledger cupti: CUPTI is unavailable ({why}); falling back to --ledger auto "
         "(framework allocations only, no launch records)")
    return msgspec.structs.replace(opts, ledger="auto")


#: files that only a run writes: a directory holding one of them holds an earlier run
_RUN_FILES = (Layout.RUN, Layout.CONTROLLER, Layout.SUMMARY, Layout.REPRODUCER_LOG, Layout.XID)


def check_run_dir(path: Path) -> None:
    """Refuse a --run-dir that is a file or already holds a run (appending would mix two runs'
    records: a passing test would then report more runs than it had)."""
    if path.exists() and not path.is_dir():
        raise UsageError(f"--run-dir {path} is a file, not a directory",
                         fix="pass a directory that does not exist yet")
    if not path.is_dir():
        return
    held = [name for name in _RUN_FILES if (path / name).exists()]
    for sub in (Layout.EVENTS_DIR, Layout.LEDGER_DIR):
        try:
            if any((path / sub).glob("*.jsonl")):
                held.append(f"{sub}/")
        except OSError:
            continue
    if held:
        raise UsageError(f"--run-dir {path} already holds a run ({', '.join(held)}): a new run "
                         "there would mix its records with that one's",
                         fix=f"pass a new directory (e.g. --run-dir {path}-2), or remove this "
                             "one first")


def check_gpus(gpus: Sequence[str] | None,
               device_count: Callable[[], int | None] = nvml_device_count) -> list[str]:
    """Refuse device indexes NVML does not have; a note when NVML cannot be asked."""
    indexes = [int(g) for g in gpus or () if g.isdigit()]
    if not indexes:
        return []
    n = device_count()
    if n is None:
        return [f"--gpus {','.join(gpus or ())}: cannot check the indexes (NVML is not "
                "available here); workers get them as CUDA_VISIBLE_DEVICES as given"]
    bad = sorted({i for i in indexes if i >= n})
    if bad:
        have = f"0-{n - 1}" if n > 1 else ("0" if n == 1 else "none")
        raise UsageError(f"--gpus: no GPU {', '.join(map(str, bad))} on this machine "
                         f"(NVML sees {n}: {have})",
                         fix="pick indexes NVML lists (nvidia-smi -L), or use --gpus all")
    return []


def check_targets(args: Sequence[str], cwd: Path) -> None:
    """Refuse a test path that does not exist, and a path given beside parametrized ids: the
    ids run exactly the named tests, so the tests of a path beside them would be left out.
    Node ids (``a.py::C::t``, ``a.py::t[x]``) mix freely: each is selected by its id."""
    kept, ids, after = split_targets(args)
    others = [a for prev, a in zip(["", *kept], kept, strict=False) if is_target(a, prev)] + after
    for arg in [*ids, *others]:
        path = arg.split("::", 1)[0]
        if not (cwd / path).exists():
            raise UsageError(f"test path {path!r} does not exist (in {cwd})",
                             fix="check the path; paths are relative to the directory "
                                 "faulthunt runs in")
    if ids and others:
        raise UsageError(
            f"test paths ({others[0]}) cannot be mixed with parametrized test ids ({ids[0]}): "
            "with such ids, exactly the named tests run, so the path's tests would be left out",
            fix="run them in separate stress runs, or name the path's tests by their ids "
                "(a.py::test_a, a.py::TestC)")


#: where a --timeout among the pytest arguments (after stress's ``--``) is said to come from
ARGS_SOURCE = "pytest arguments"


class SuiteTimeoutError(UsageError):
    """The suite's own timeout is not a finite number of seconds. ``overridable``: faulthunt's
    ``--timeout S`` wins over it (a setting pytest-timeout reads only when no option is given);
    not so for an option's value, on which pytest's own argument parsing stops."""

    def __init__(self, where: str, value: Any, *, overridable: bool) -> None:
        self.overridable = overridable
        who = "pytest-timeout" if overridable else "pytest"
        super().__init__(f"{where_text(where)} sets the per-test timeout to "
                         f"{str(value)!r}, which is not a finite number of seconds ({who} would "
                         "stop the run on it)",
                         fix="set seconds there" + (", or give faulthunt's --timeout S, which "
                                                    "wins" if self.overridable else ""))


def suite_timeout(cwd: Path, pytest_args: Sequence[str] = (),
                  env: Mapping[str, str] | None = None) -> tuple[str, float] | None:
    """The per-test timeout the suite sets itself, as pytest-timeout will read it, and where:
    ``--timeout`` among the pytest arguments, in PYTEST_ADDOPTS or in the configuration file's
    ``addopts`` (pytest puts the three on one command line in the reverse order: the first found
    here is the one in force), then the environment's PYTEST_TIMEOUT, then the ``timeout``
    setting (``-o timeout=S`` there, else the file's). The file is the one pytest takes
    (:func:`pytest_config`). None when none is set; UsageError when the value in force is not a
    number of seconds (pytest-timeout would stop the run on it)."""
    env = os.environ if env is None else env
    addopts = env.get("PYTEST_ADDOPTS", "")
    config = pytest_config(cwd, pytest_args, addopts)
    name, settings = config if config is not None else ("", {})
    file_opts, env_opts = _option_list(settings.get("addopts")), _split(addopts)
    # (where, value, given as an option: pytest's own parser stops on a bad one)
    candidates: list[tuple[str, Any, bool]] = [
        (ARGS_SOURCE, _last(_option_values(_before_dashes(pytest_args), "--timeout")), True),
        ("PYTEST_ADDOPTS", _last(_option_values(_before_dashes(env_opts), "--timeout")), True),
        (f"{name} addopts", _last(_option_values(_before_dashes(file_opts), "--timeout")), True),
        ("PYTEST_TIMEOUT", env.get("PYTEST_TIMEOUT"), False),
        ("-o timeout", _ini_override([*file_opts, *env_opts, *pytest_args], "timeout"), False),
        (name, settings.get("timeout"), False)]
    for where, value, option in candidates:
        if value is None or str(value).strip() == "":
            continue
        seconds = _seconds(value)
        if seconds is None:
            raise SuiteTimeoutError(where, value, overridable=not option)
        return where, seconds
    return None


def _seconds(value: Any) -> float | None:
    """A timeout value as pytest-timeout takes it (a number or its text), None when it is none:
    not a number, true/false, a list or table of a TOML file, infinite or NaN."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) else None


def _split(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:  # unbalanced quotes: pytest will say so
        return text.split()


def _option_list(value: Any) -> list[str]:
    """A configuration value that holds options (``addopts``): a string (INI, or TOML's
    ini_options) or a list of strings (a TOML array)."""
    if isinstance(value, str):
        return _split(value)
    if isinstance(value, list):
        return [str(v) for v in value]
    return []


def _option_values(args: Sequence[str], *flags: str) -> list[str]:
    """The values ``args`` gives any of ``flags``, in order: ``FLAG V``, ``--flag=V``, and for a
    one-letter flag ``-fV`` (pytest takes no abbreviation of a long one)."""
    values = []
    for i, arg in enumerate(args):
        for flag in flags:
            if arg == flag and i + 1 < len(args):
                values.append(args[i + 1])
            elif flag.startswith("--") and arg.startswith(flag + "="):
                values.append(arg[len(flag) + 1:])
            elif len(flag) == 2 and arg.startswith(flag) and len(arg) > 2:
                values.append(arg[2:])
    return values


def _before_dashes(args: Sequence[str]) -> Sequence[str]:
    """``args`` up to a literal ``--`` (after it pytest reads every word as a test path)."""
    return args[:list(args).index("--")] if "--" in args else args


def _last(values: Sequence[str]) -> str | None:
    return values[-1] if values else None


def _ini_override(args: Sequence[str], key: str) -> str | None:
    """The value the last ``-o KEY=VALUE`` (``--override-ini``) in ``args`` gives ``key``, before
    any ``--``; None when none does."""
    given = [v.partition("=") for v in _option_values(_before_dashes(args), "-o", "--override-ini")]
    return _last([value for name, _, value in given if name.strip() == key])


def _config_options(args: Sequence[str]) -> list[str]:
    """The files ``args`` name with ``-c``/``--config-file``, in order."""
    return _option_values(args, "-c", "--config-file")


def pytest_config(cwd: Path, pytest_args: Sequence[str] = (),
                  addopts: str = "") -> tuple[str, dict[str, Any]] | None:
    """The configuration file pytest takes for these arguments (its name, its pytest settings),
    found as pytest 9 finds it: the file named with ``-c``/``--config-file`` (in the arguments or
    PYTEST_ADDOPTS), else the first file holding pytest settings among :data:`_CONFIG_NAMES`, in
    that order, from the test paths' common ancestor (``cwd`` without paths) up. None when there
    is none. A file that does not parse is passed over: pytest will say what is wrong with it."""
    named = _config_options([*pytest_args, *_split(addopts)])
    if named:
        path = cwd / named[-1]
        settings = _pytest_settings(path, path.name if path.name in _CONFIG_NAMES else path.suffix)
        return (path.name, settings) if settings is not None else None
    for directory in _ancestors(cwd, pytest_args):
        for name in _CONFIG_NAMES:
            path = directory / name
            if path.is_file():
                settings = _pytest_settings(path, name)
                if settings is not None:
                    return name, settings
    return None


def _ancestors(cwd: Path, pytest_args: Sequence[str]) -> list[Path]:
    """The test paths' common ancestor (as pytest's get_common_ancestor: the paths that exist;
    ``cwd`` when none does) and its parents."""
    paths = [p if _is_dir(p) else p.parent for p in _arg_paths(cwd, pytest_args) if _exists(p)]
    if not paths:
        return [cwd, *cwd.parents]
    common = Path(os.path.commonpath([str(p) for p in paths]))
    return [common, *common.parents]


def _arg_paths(cwd: Path, pytest_args: Sequence[str]) -> list[Path]:
    """The paths the words of ``pytest_args`` that are not options name (a node id's file),
    resolved from ``cwd``; a word that names no path pytest could read (too long a name, a NUL
    byte) is passed over."""
    paths = []
    for arg in pytest_args:
        if not arg or arg.startswith("-"):
            continue
        try:
            paths.append((cwd / arg.split("::", 1)[0]).resolve())
        except (OSError, ValueError):
            continue
    return paths


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


def _pytest_settings(path: Path, kind: str) -> dict[str, Any] | None:
    """The pytest settings of configuration file ``path`` read as ``kind`` (its name, or for a
    ``-c`` file of another name its suffix), None when pytest takes none from it. The parser of
    a format is imported only when a file of it is there (most suites have no ini file:
    configparser's import is most of this check's cost)."""
    if kind in ("pytest.toml", ".pytest.toml", "pyproject.toml", ".toml"):
        document = _toml(path)
        if document is None:
            return None
        tools = document.get("tool")
        tool = tools.get("pytest") if isinstance(tools, dict) else None
        tool = tool if isinstance(tool, dict) else {}
        native = {k: v for k, v in tool.items() if k != "ini_options"}
        ini_options = tool.get("ini_options")
        own = document.get("pytest")
        if kind == "pyproject.toml" or (kind == ".toml" and (native or ini_options is not None)):
            return native or (ini_options if isinstance(ini_options, dict) else None)
        return own if isinstance(own, dict) else ({} if kind != ".toml" else None)
    section = {"pytest.ini": "pytest", ".pytest.ini": "pytest", "tox.ini": "pytest",
               ".ini": "pytest", "setup.cfg": "tool:pytest", ".cfg": "tool:pytest"}.get(kind)
    if section is None:
        return None
    import configparser

    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(path, encoding="utf-8")
        if parser.has_section(section):
            return dict(parser.items(section))
    except (OSError, ValueError, configparser.Error):
        return None
    # pytest takes pytest.ini and .pytest.ini even without the section
    return {} if kind in ("pytest.ini", ".pytest.ini") else None


def _toml(path: Path) -> dict[str, Any] | None:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10: the same parser as the tomli package (pytest reads its config with it too)
        import tomli as tomllib
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, tomllib.TOMLDecodeError):
        return None


def open_kernel_log(spec: str, warn: Callable[[str], None]) -> Any:
    """The opened kernel-log source for ``--xid-source`` (None for ``none``)."""
    if spec == "none":
        return None
    from faulthunt.kernlog import sources

    try:
        source = sources.open_source(spec, warn=warn)
        if spec.startswith("file:"):
            source.cursor()  # a file source is not probed when opened: a missing file fails here
    except FaulthuntError as exc:
        raise UsageError(f"--xid-source {spec}: {exc.message}",
                         fix=exc.fix or f"use one of: {', '.join(sources.SPECS)}") from exc
    return source
