"""``faulthunt stage``: a self-contained repro kit for the failing tests of a run.

The kit is what a maintainer works in after a hunt (``/tmp/repro`` by default): scripts that
rerun exactly the failing tests, a standalone reproducer per failing base test, helpers for
py-spy and the kernel log, a cheatsheet, the system identity and the run's own logs.

Every test id, path and argument that comes from the run directory is *data*: shell scripts get
it through :func:`shlex.quote` (inside bash arrays), Python scripts through :func:`repr`, so ids
with spaces, quotes, ``$()``, backticks or semicolons are passed to pytest and never executed.
Ids are checked to be node ids when the kit is planned (:func:`faulthunt.nodeids.check_node_id`:
a crafted ``--basetemp=/victim`` is refused) and reach pytest only as ``--faulthunt-id=ID``
options followed by ``--`` and the collection roots (:func:`faulthunt.nodeids.pytest_selection`),
which also makes a parametrized id run with ``--count``. The scripts run in the run's own cwd (a
test may read files relative to it) with pytest's rootdir pinned to the run's (``--rootdir``: node
ids are relative to it, and it is not the cwd when the suite has its own ini file in a subfolder)
and the roots given as paths from the cwd. The run's files are copied into ``run/`` with known
secret shapes scrubbed (:mod:`faulthunt.scrub`).
:func:`plan_kit` reads, :func:`render_kit` is pure (file name -> text), :func:`write_kit` writes.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import shutil
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from faulthunt.errors import RunDirError, UsageError
from faulthunt.nodeids import check_node_id, pytest_selection, rebase, rootdir_option
from faulthunt.records.documents import Failure, RunInfo, Summary
from faulthunt.redact import redact_argv, redact_env, redact_text
from faulthunt.rundir import Layout, RunDir, write_json_atomic, write_text_atomic
from faulthunt.scrub import copy_scrubbed
from faulthunt.stress.defaults import LEDGER_MODES

DEFAULT_KIT_DIR = Path("/tmp/repro")
#: marks a directory as a faulthunt kit, so restaging may replace its files (and nothing else)
KIT_MARKER = ".faulthunt-kit.json"
#: the file whose creation ends a session's time limit early (faulthunt session)
CONTINUE_FILE = "continue"
#: run-directory entries copied into the kit's run/ (``stage/`` of the run would recurse)
_SKIP_IN_COPY = {Layout.STAGE_DIR}


@dataclass(frozen=True)
class FailingTest:
    """One failing base test of the run."""

    base_nodeid: str
    nodeids: tuple[str, ...]      # the concrete (repeat-step) ids that failed
    outcomes: tuple[str, ...]     # failed / crashed / hung / collateral, as recorded
    failures: int
    runs: int | None              # from summary by_test, when known


@dataclass(frozen=True)
class KitPlan:
    """Everything the kit's files are made from (no I/O after this)."""

    run_dir: Path
    run_id: str
    cwd: str
    #: pytest's rootdir in the run: node ids are relative to it (None: a run that did not say)
    rootdir: str | None
    python: str
    pytest_args: tuple[str, ...]  # the run's own selection, for reference in the README
    failing: tuple[FailingTest, ...]
    count: int                    # default count of run_reproducer.sh
    workers: str
    staged_mono: float            # time.monotonic() at staging: the clock of /dev/kmsg timestamps
    staged_wall: float
    identity_text: str
    #: the run's stress options that change what a rerun does (--timeout, --ledger, --guard...)
    stress_options: tuple[str, ...] = ()
    #: the run's own pytest options (``-p no:randomly``), without its paths and ids
    pytest_options: tuple[str, ...] = ()
    #: what could not be read from the run, and what the kit assumed instead (said in the
    #: README, by `faulthunt stage`, and in the scripts' header)
    damaged: tuple[str, ...] = ()

    @property
    def redacted_options(self) -> tuple[str, ...]:
        """The run's options that held a secret: the kit passes them as ``<redacted>``, which
        is not what the run had (said in the README and by `faulthunt stage`)."""
        from faulthunt.redact import REDACTED

        return tuple(o for o in (*self.stress_options, *self.pytest_options) if REDACTED in o)


def failing_tests(summary: Summary) -> tuple[FailingTest, ...]:
    """Failing base tests of a run's summary (docs/rundir.md), first failure first.

    Collateral failures (tests that died because a neighbour broke the GPU context) are kept
    only when nothing else failed: a kit of the innocent bystanders is the wrong kit.
    """
    primary = [f for f in summary.failures if f.outcome != "collateral"]
    chosen = primary or list(summary.failures)
    runs = {b.base_nodeid: b.runs for b in summary.by_test}
    order: dict[str, list[Failure]] = {}
    for f in chosen:
        order.setdefault(f.base_nodeid or f.nodeid, []).append(f)
    return tuple(
        FailingTest(base, tuple(dict.fromkeys(f.nodeid for f in fs)),
                    tuple(dict.fromkeys(f.outcome or "failed" for f in fs)),
                    len(fs), runs.get(base))
        for base, fs in order.items())


def _checked(failing: tuple[FailingTest, ...], where: str) -> tuple[FailingTest, ...]:
    """``failing`` when every id in it is a node id; else a UsageError naming the bad one."""
    for test in failing:
        for nodeid in (test.base_nodeid, *test.nodeids):
            check_node_id(nodeid, where)
    return failing


def _workers(value: Any) -> str:
    """``-n`` of run_reproducer.sh from run.json's options: a count or xdist's words, else 1."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return str(value)
    return value if value in ("auto", "logical") else "1"


def _positive_int(value: Any) -> int | None:
    """A count or worker number from run.json options (hand-edited: anything at all)."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


def run_stress_options(run_info: RunInfo, summary: Summary | None) -> tuple[str, ...]:
    """The stress options of the run that its rerun needs (a hang must end in the kit as it
    did in the run): the per-test timeout in force, the ledger, guard mode, recycling, the
    restart budget, CUDA_LAUNCH_BLOCKING. Hand-edited values that do not read are left out."""
    opt = run_info.option
    out: list[str] = []
    timeout = summary.timeout if summary is not None else None
    if timeout is not None and (timeout.seconds or timeout.source == "off"):
        out += ["--timeout", f"{timeout.seconds or 0:g}"]
    elif isinstance(opt("timeout"), (int, float)) and not isinstance(opt("timeout"), bool):
        out += ["--timeout", f"{opt('timeout'):g}"]
    if opt("ledger") in LEDGER_MODES and opt("ledger") != "auto":
        out += ["--ledger", str(opt("ledger"))]
    guard = opt("guard")
    if isinstance(guard, str) and guard and guard[0].isdigit():
        out.append(f"--guard={guard}")
    if opt("recycle") is False:
        out.append("--no-recycle")
    if opt("launch_blocking") is False:
        out.append("--no-launch-blocking")
    restarts = opt("max_worker_restart")
    if isinstance(restarts, int) and not isinstance(restarts, bool) and restarts >= 0:
        out += ["--max-worker-restart", str(restarts)]
    return tuple(out)


#: pytest options of the run that select tests: the kit selects the failing ones itself
_SELECTING = frozenset({"-k", "--deselect", "--ignore", "--ignore-glob", "--lf", "--last-failed",
                        "--ff", "--failed-first", "--sw", "--stepwise"})


def run_pytest_options(pytest_args: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """The run's own pytest options with their values (``-p no:randomly``, ``-o x=y``), without
    its paths, node ids and selecting options (the kit's selection is the failing tests)."""
    from faulthunt.stress.options import _VALUE_OPTIONS

    out: list[str] = []
    args = list(pytest_args)
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            break
        takes = arg in _VALUE_OPTIONS
        if arg.startswith("-") and arg.split("=", 1)[0] not in _SELECTING:
            out += args[i:i + 2] if takes else [arg]
        i += 2 if takes else 1
    return tuple(out)


def plan_kit(run_dir: Path, *, tests: list[str] | None = None, count: int | None = None,
             identity_text: str | None = None) -> KitPlan:
    """Read a run directory (its summary and run.json, through RunDir) into a :class:`KitPlan`.

    ``tests`` overrides the failing tests (ids taken as given). A missing or damaged summary.json
    is recomputed from the run's events. Raises UsageError with a fix when the run has no
    failures to stage.
    """
    run = RunDir(run_dir)
    run_info = run.run_info() or RunInfo()
    summary = run.summary()
    if tests:
        failing = _checked(tuple(FailingTest(t, (t,), ("requested",), 0, None) for t in tests),
                           "--test")
    else:
        if summary is None:  # a run killed before it wrote summary.json, or a damaged one
            from faulthunt.summary import summarize_run

            summary = msgspec.convert(summarize_run(run), Summary)
        failing = _checked(failing_tests(summary), f"the failures in {run_dir / Layout.SUMMARY}")
    if not failing:
        raise UsageError(f"run {run_dir.name} has no failing tests to stage",
                         fix="pass --test NODEID to stage a kit for a test anyway")
    by_test = {f.base_nodeid: f for f in failing}
    default_count = count or _positive_int(run_info.option("count")) or 1
    python = run_info.pytest_argv[0] if run_info.pytest_argv else sys.executable
    damaged = _damage(run, run_info, python)
    if identity_text is None:
        from faulthunt.identity import collect_basic, format_basic

        identity_text = format_basic(collect_basic())
    return KitPlan(
        run_dir=run_dir, run_id=run_info.id or run_dir.name,
        cwd=run_info.cwd or str(Path.cwd()), rootdir=run.rootdir(), python=python,
        pytest_args=tuple(redact_argv(run_info.pytest_args)),
        failing=tuple(by_test.values()), count=default_count,
        workers=_workers(run_info.option("workers")),
        stress_options=tuple(redact_argv(run_stress_options(run_info, summary))),
        pytest_options=tuple(redact_argv(run_pytest_options(run_info.pytest_args))),
        damaged=damaged,
        staged_mono=time.monotonic(), staged_wall=time.time(),
        identity_text=identity_text)


def _damage(run: RunDir, run_info: RunInfo, python: str) -> tuple[str, ...]:
    """What the run could not tell (a damaged or missing run.json, summary.json, events) and
    what the kit uses instead; empty for a whole run."""
    said = [str(p) for p in run.problems()]
    if not (run.path / Layout.RUN).is_file():
        said.append(f"{Layout.RUN}: missing")
    if said:
        if not run_info.cwd:
            said.append(f"the run's directory is unknown: the scripts run in {Path.cwd()} "
                        "(where the kit was staged); edit the cd line of the scripts if that is wrong")
        if not run_info.pytest_argv:
            said.append(f"the run's Python is unknown: the scripts use {python}")
        if not run_info.options:
            said.append("the run's options are unknown: count 1, one worker, stress's own "
                        "default timeout")
    return tuple(redact_text(s) for s in said)


def selection(plan: KitPlan, ids: list[str]) -> list[str]:
    """pytest's selection of ``ids``, run from the run's cwd (with its rootdir pinned, if known)."""
    return pytest_selection(ids, rootdir=plan.rootdir, cwd=plan.cwd)


def plain_selection(plan: KitPlan, nodeid: str) -> list[str]:
    """``nodeid`` for a pytest without faulthunt: the id itself after ``--``, its path as seen
    from the cwd (it runs once per pytest session: nothing renames it)."""
    if plan.rootdir is None:
        return ["--", nodeid]
    return [*rootdir_option(plan.rootdir), "--", rebase(nodeid, plan.rootdir, plan.cwd)]


def script_name(base_nodeid: str, taken: set[str]) -> str:
    """``repro_<test>.py`` with a file-system-safe, unique ``<test>`` from the node id: the test's
    name and its parameters (a parameter may hold ``::`` and ``/``: it is split off first)."""
    name_part, bracket, params = base_nodeid.partition("[")
    func = name_part.split("::")[-1] + (f"_{params}" if bracket else "")
    slug = re.sub(r"[^A-Za-z0-9_]+", "_", func).strip("_")[:60] or "test"
    name = f"repro_{slug}.py"
    if name in taken:  # same function name in two files or params: disambiguate stably
        name = f"repro_{slug}_{hashlib.sha1(base_nodeid.encode()).hexdigest()[:8]}.py"
    taken.add(name)
    return name


def _bash_array(name: str, items: tuple[str, ...] | list[str]) -> str:
    body = "".join(f"  {shlex.quote(i)}\n" for i in items)
    return f"{name}=(\n{body})\n"


_HEADER = """#!/usr/bin/env bash
# Generated by `faulthunt stage` from run {run_id}. Test ids are data (quoted), never code.
set -euo pipefail
KIT="$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)"
"""


def render_run_reproducer(plan: KitPlan) -> str:
    """``run_reproducer.sh [count] [stress options...] [-- pytest options...]``: stress exactly
    the failing tests, selected by ``--faulthunt-id`` (any count, ids never read as options)."""
    return (_HEADER.format(run_id=plan.run_id)
            + f"COUNT=\"${{1:-{plan.count}}}\"\n"
            + 'if ! [[ "$COUNT" =~ ^[1-9][0-9]*$ ]]; then\n'
            + '  echo "usage: $0 [count] [faulthunt stress options...] [-- pytest options...]'
            + '  (count: a positive integer)" >&2\n'
            + "  exit 2\nfi\nshift $(( $# > 0 ? 1 : 0 ))\n"
            + "# stress options, then (after a --) pytest options: both go before the selection,\n"
            + "# which ends with its own -- and the collection roots, last on the line\n"
            + 'STRESS=()\nPYTEST=()\nwhile [ $# -gt 0 ]; do\n'
            + '  if [ "$1" = "--" ]; then shift; PYTEST=("$@"); break; fi\n'
            + '  STRESS+=("$1"); shift\ndone\n'
            + "# the run's own options (its timeout, ledger, guard...; pytest's): given first, so\n"
            + "# the options given to this script win\n"
            + _bash_array("RUN_STRESS", list(plan.stress_options))
            + _bash_array("RUN_PYTEST", list(plan.pytest_options))
            + _bash_array("TESTS", [f.base_nodeid for f in plan.failing])
            + _bash_array("SELECTION", selection(plan, [f.base_nodeid for f in plan.failing]))
            + f"PYTHON={shlex.quote(plan.python)}\n"
            + f"cd -- {shlex.quote(plan.cwd)}\n"
            + 'RUN="$KIT/runs/$(date +%Y%m%d-%H%M%S)-$$"\n'
            + 'echo "stressing ${#TESTS[@]} test(s) x $COUNT into $RUN"\n'
            + f'exec "$PYTHON" -m faulthunt stress --count "$COUNT" -n {shlex.quote(plan.workers)} '
            + '--run-dir "$RUN" ${RUN_STRESS[@]+"${RUN_STRESS[@]}"} ${STRESS[@]+"${STRESS[@]}"} '
            + '-- ${RUN_PYTEST[@]+"${RUN_PYTEST[@]}"} ${PYTEST[@]+"${PYTEST[@]}"} '
            + '"${SELECTION[@]}"\n')


def render_run_sanitizer(plan: KitPlan) -> str:
    """``run_sanitizer.sh [tool] [sanitize options...]``: the failing tests under compute-sanitizer."""
    # --test=ID: one word, so argparse can never read the id as an option of its own
    tests = "".join(f"  {shlex.quote('--test=' + f.base_nodeid)}\n" for f in plan.failing)
    return (_HEADER.format(run_id=plan.run_id)
            + 'TOOL="${1:-memcheck}"\nshift $(( $# > 0 ? 1 : 0 ))\n'
            + f"ARGS=(\n{tests})\n"
            + f"PYTHON={shlex.quote(plan.python)}\n"
            + f"cd -- {shlex.quote(plan.cwd)}\n"
            + '# results land in the kit: $KIT/run/sanitizer/\n'
            + 'exec "$PYTHON" -m faulthunt sanitize --run "$KIT/run" --tool "$TOOL" "${ARGS[@]}" "$@"\n')


def render_repro(plan: KitPlan, test: FailingTest, name: str) -> str:
    """``repro_<test>.py [count]`` (``name``): one base test in this fresh process, hang-dumps armed.

    faulthunt repeats every item type under ``--count`` (pytest-repeat alone skips unittest
    methods and doctests), so a python without faulthunt hands over to the run's own; where that
    is gone too, the test runs ``count`` pytest sessions in this one process.
    """
    return f'''#!/usr/bin/env python3
"""Standalone reproducer for one failing test (generated by `faulthunt stage`, run {plan.run_id}).

Runs the test in this fresh process with CUDA_LAUNCH_BLOCKING=1, prints the pid, and arms
faulthandler so that a hang dumps every thread's stack every HANG_SECONDS seconds.
Usage: python3 {name} [count] [pytest options...]
"""
import faulthandler
import importlib.util
import os
import sys

NODEID = {test.base_nodeid!r}
# --faulthunt-id options, then "--" and the collection roots: the id is never read as an option,
# and every item type runs --count times (a parametrized one renamed test_p[x-1-3], a unittest
# method test_m[1-3])
SELECTION = {selection(plan, [test.base_nodeid])!r}
# without faulthunt: the id itself after "--", once per pytest session
PLAIN = {plain_selection(plan, test.base_nodeid)!r}
CWD = {plan.cwd!r}
# the interpreter of the run (it has faulthunt): used when this one has not
PYTHON = {plan.python!r}
HANDED_OVER = "FAULTHUNT_REPRO_HANDED_OVER"
HANG_SECONDS = float(os.environ.get("FAULTHUNT_HANG_SECONDS", "120"))
OUTCOMES_SEEN = {list(test.outcomes)!r}


def hand_over() -> None:
    """Rerun this script with the run's python when this one cannot import faulthunt."""
    if importlib.util.find_spec("faulthunt") is not None or os.environ.get(HANDED_OVER):
        return
    if os.access(PYTHON, os.X_OK):
        print(f"faulthunt is not importable by {{sys.executable}}: rerunning with the run's {{PYTHON}}",
              flush=True)
        os.environ[HANDED_OVER] = "1"
        os.execv(PYTHON, [PYTHON, os.path.abspath(__file__), *sys.argv[1:]])


def main() -> int:
    hand_over()
    args = sys.argv[1:]
    count = 1
    if args and args[0].isdigit():
        count = int(args.pop(0))
    os.environ.setdefault("CUDA_LAUNCH_BLOCKING", "1")
    os.chdir(CWD)
    sys.path.insert(0, CWD)
    pid = os.getpid()
    print(f"repro pid {{pid}}: {{NODEID}} x {{count}} (seen: {{', '.join(OUTCOMES_SEEN)}})", flush=True)
    print(f"  stuck? in another shell: py-spy dump --native --locals --pid {{pid}}", flush=True)
    faulthandler.enable()
    faulthandler.dump_traceback_later(HANG_SECONDS, repeat=True)
    import pytest

    argv = ["-x", "-q", "-p", "no:cacheprovider", *args]
    try:
        if importlib.util.find_spec("faulthunt") is not None:
            repeat = ["-p", "repeat", "--count", str(count)] if count > 1 else []
            return int(pytest.main([*repeat, *argv, "-p", "faulthunt", *SELECTION]))
        print("faulthunt is not installed here: running the test once per pytest session, "
              f"{{count}} session(s) in this process", flush=True)
        for _ in range(count):  # modules stay imported between sessions, as between repeats
            status = int(pytest.main([*argv, *PLAIN]))
            if status != 0:
                return status
        return 0
    finally:
        faulthandler.cancel_dump_traceback_later()


if __name__ == "__main__":
    sys.exit(main())
'''


def render_pyspy_workers(plan: KitPlan) -> str:
    """``pyspy_workers.sh [pid...]``: py-spy dump of this kit's processes (or those given).

    Only the run's own processes: pytest processes whose ``FAULTHUNT_RUN_DIR`` is the staged run
    or one of the kit's ``runs/``, and this kit's ``repro_*.py``, of the current user; never
    every pytest on a shared host. A process that exits between the listing and its dump says so.
    """
    run_dir = str(plan.run_dir.resolve())
    return (_HEADER.format(run_id=plan.run_id)
            + f"RUN_DIR={shlex.quote(run_dir)}\n" + r'''
PYSPY="${PYSPY:-py-spy}"
command -v "$PYSPY" >/dev/null || { echo "py-spy not found: pip install py-spy" >&2; exit 4; }
ours() {  # $1: a pid of this kit's run: its FAULTHUNT_RUN_DIR, or one of this kit's repro_*.py
  local pid="$1" env_dir script
  env_dir="$({ tr '\0' '\n' < "/proc/$pid/environ"; } 2>/dev/null | sed -n 's/^FAULTHUNT_RUN_DIR=//p' | head -n1)"
  case "$env_dir" in
    "$RUN_DIR"|"$KIT"/runs/*) return 0 ;;
  esac
  while IFS= read -r script; do
    script="$(cd "/proc/$pid/cwd" 2>/dev/null && realpath -e -- "$script" 2>/dev/null || true)"
    [ "${script%/*}" = "$KIT" ] && return 0
  done < <({ tr '\0' '\n' < "/proc/$pid/cmdline"; } 2>/dev/null | grep -E '(^|/)repro_[^/]*\.py$' || true)
  return 1
}
PIDS=("$@")
if [ ${#PIDS[@]} -eq 0 ]; then
  for dir in /proc/[0-9]*; do
    pid="${dir#/proc/}"
    [ "$pid" = "$$" ] && continue
    [ -O "$dir" ] || continue  # other users' processes are never ours to dump
    ours "$pid" && PIDS+=("$pid")
  done
fi
if [ ${#PIDS[@]} -eq 0 ]; then
  echo "no process of this kit's run is running (its pytest workers carry FAULTHUNT_RUN_DIR=$RUN_DIR or $KIT/runs/...; repro_*.py from $KIT); give pids as arguments"
  exit 0
fi
rc=0
for pid in "${PIDS[@]}"; do
  cmd="$({ tr '\0' ' ' < "/proc/$pid/cmdline"; } 2>/dev/null | cut -c1-200)" || true
  if [ ! -d "/proc/$pid" ]; then
    echo "=== pid $pid: exited before it could be dumped"
    continue
  fi
  echo "=== pid $pid: $cmd"
  if ! out="$("$PYSPY" dump --native --locals --pid "$pid" 2>&1)"; then
    if [ ! -d "/proc/$pid" ]; then
      echo "exited while being dumped"
      continue
    fi
    rc=1
    printf '%s\n' "$out" >&2
    echo "py-spy could not attach to $pid: try sudo, kernel.yama.ptrace_scope=0, or CAP_SYS_PTRACE (see faulthunt doctor)" >&2
    continue
  fi
  printf '%s\n' "$out"
done
exit $rc
''')


def render_xid_since(plan: KitPlan) -> str:
    """``xid_since.sh [--all]``: kernel-log lines since the kit was made (NVRM/Xid only by default)."""
    return (_HEADER.format(run_id=plan.run_id)
            + f"SINCE={plan.staged_mono:.6f}  # time.monotonic() when staged: /dev/kmsg's clock\n"
            + r'''FILTER="NVRM|Xid"
[ "${1:-}" = "--all" ] && FILTER="."
exec python3 - "$SINCE" "$FILTER" <<'PY'
import os, re, subprocess, sys
since, pattern = float(sys.argv[1]), re.compile(sys.argv[2])
lines = []
try:  # /dev/kmsg records: "PRI,SEQ,TS_USEC,FLAGS;MESSAGE"
    fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    while True:
        try:
            rec = os.read(fd, 8192).decode(errors="replace")
        except BlockingIOError:
            break
        except OSError:  # EPIPE: the ring buffer overwrote records; go on
            continue
        head, _, msg = rec.partition(";")
        fields = head.split(",")
        if len(fields) >= 3 and int(fields[2]) / 1e6 >= since:
            lines.append(f"[{int(fields[2]) / 1e6:12.6f}] {msg.splitlines()[0] if msg else ''}")
except OSError as exc:
    try:
        out = subprocess.run(["dmesg"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        sys.exit(f"cannot read the kernel log (/dev/kmsg: {exc.strerror}; dmesg failed): run as root, "
                 "grant CAP_SYSLOG, or set sysctl kernel.dmesg_restrict=0")
    for line in out.splitlines():
        m = re.match(r"^\[\s*(\d+\.\d+)\]", line)
        if m and float(m.group(1)) >= since:
            lines.append(line)
shown = [l for l in lines if pattern.search(l)]
print("\n".join(shown) if shown else f"no matching kernel-log lines since the kit was staged ({len(lines)} lines in all)")
PY
''')


def render_xid_watch(plan: KitPlan) -> str:
    """``xid_watch.sh``: follow Xid reports live (``faulthunt xid watch``; raw NVRM lines without it)."""
    return (_HEADER.format(run_id=plan.run_id)
            + f"PYTHON={shlex.quote(plan.python)}\n"
            + r'''if "$PYTHON" -m faulthunt xid watch --help >/dev/null 2>&1; then
  exec "$PYTHON" -m faulthunt xid watch "$@"
fi
echo "faulthunt xid watch cannot run with $PYTHON (faulthunt not installed there, or older than this kit); following raw NVRM lines with dmesg -w" >&2
exec dmesg -w | grep --line-buffered -E "NVRM|Xid"
''')


def _listed_section(heading: str, intro: str, items: Iterable[str]) -> str:
    """A README section: ``heading``, ``intro`` and one escaped bullet an item ("" for none)."""
    bullets = list(items)
    if not bullets:
        return ""
    from faulthunt.report.escape import md_text

    return f"## {heading}\n{intro}\n" + "".join(f"- {md_text(b)}\n" for b in bullets) + "\n"


def _redacted_section(plan: KitPlan) -> str:
    return _listed_section(
        "Secrets left out",
        "These options of the run held a secret, scrubbed before it was written: the kit "
        "passes them as they are now, `<redacted>` in place of the secret, which is not what "
        "the run had. Give the real value yourself, after the kit's own (yours win): "
        "`./run_reproducer.sh N -- OPTION`.", plan.redacted_options)


def _damage_section(plan: KitPlan) -> str:
    return _listed_section(
        "Damaged run: check before trusting this kit",
        "The run directory could not be read whole; the kit was staged from what could be "
        "read, and assumed the rest:", plan.damaged)


def render_readme(plan: KitPlan, scripts: dict[str, FailingTest]) -> str:
    """The cheatsheet: what failed, the edit-rebuild-rerun loop, how to read the logs."""
    from faulthunt.report.escape import md_code  # ids exact: a long enough fence, `\|` in cells

    q = shlex.quote
    rows = "".join(
        f"| {md_code(t.base_nodeid)} | {', '.join(t.outcomes)} | "
        f"{t.failures}{'/' + str(t.runs) if t.runs else ''} | `{name}` |\n"
        for name, t in scripts.items())
    first = next(iter(scripts), "repro_<test>.py")
    rooted = (f" (pytest rootdir `{plan.rootdir}`: the ids are relative to it)"
              if plan.rootdir and plan.rootdir != plan.cwd else "")
    return f"""# Repro kit for run {plan.run_id}

Staged {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(plan.staged_wall))} from `{plan.run_dir}`.
Tests run from `{plan.cwd}` with `{plan.python}`{rooted}.

{_damage_section(plan)}{_redacted_section(plan)}| failing test | outcome | failures/runs | standalone reproducer |
|---|---|---|---|
{rows}
## The loop: edit, rebuild, rerun
1. Edit the kernel or the test; rebuild your extension (e.g. `pip install -e . --no-build-isolation`).
2. `./run_reproducer.sh 50` stresses exactly these tests 50 times each (`./run_reproducer.sh 200 -x
   --timeout 60 -- -s` passes stress options, then pytest options after `--`; the run's own
   `--timeout` and options are passed first, yours win). Each run lands in
   `runs/<time>/`; `faulthunt report --run runs/<time>`.
3. `python3 {first} [count]`: one test in a fresh process; prints its pid; a hang dumps all stacks
   every `FAULTHUNT_HANG_SECONDS` (120 s) through faulthandler.
4. `./run_sanitizer.sh [memcheck|racecheck|initcheck|synccheck]`: the failing tests under
   compute-sanitizer; results in `run/sanitizer/` (`sanitizer_summary.txt` first).
5. Hung? `./pyspy_workers.sh` dumps this kit's pytest workers and repro scripts (`--native --locals`;
   other processes on the host are left alone; pids as arguments dump those).
6. `./xid_since.sh` shows NVRM/Xid lines since this kit was staged (`--all` for every line).
   Xid 31 = MMU fault (address in `faulted @ 0x..._...`), 13 = graphics exception, 43 = process
   torn down after an error. `faulthunt map --run run` maps fault addresses to allocations.

## Reading the logs (run/)
- `summary.json`: what failed, how often (`by_test`), Xids attributed to tests.
- `reproducer.log`: pytest's own output. `events/*.jsonl`: each test's start/end per worker.
- `controller.jsonl`: crashes, hangs, restarts. `xid.jsonl`: Xid lines with worker and test.
- `kmsg_added.txt`: raw kernel-log lines added during the run. `system_identity.txt`: this machine.

Quoted for a shell, the first test is: {q(next(iter(scripts.values())).base_nodeid) if scripts else ''}
"""


def render_kit(plan: KitPlan) -> dict[str, str]:
    """All generated files of the kit, name -> text (pure)."""
    taken: set[str] = set()
    scripts = {script_name(t.base_nodeid, taken): t for t in plan.failing}
    files = {
        "run_reproducer.sh": render_run_reproducer(plan),
        "run_sanitizer.sh": render_run_sanitizer(plan),
        "pyspy_workers.sh": render_pyspy_workers(plan),
        "xid_since.sh": render_xid_since(plan),
        "xid_watch.sh": render_xid_watch(plan),
        "README.md": render_readme(plan, scripts),
        "tests.txt": "".join(json.dumps(t.base_nodeid) + "\n" for t in plan.failing),
    }
    for name, test in scripts.items():
        files[name] = render_repro(plan, test, name)
    return files


def _identity_file(plan: KitPlan) -> str:
    text = plan.identity_text
    run = RunDir(plan.run_dir)
    run_identity = run.identity()
    if run_identity is not None:
        text += "\n# identity.json of the run\n" + json.dumps(run_identity.to_json(), indent=2,
                                                             default=str) + "\n"
    env = run.env()
    if env is not None:  # already redacted by stress; redact again, the kit gets shared
        text += "\n# environment of the run (secrets redacted)\n" + "".join(
            f"{k}={v}\n" for k, v in redact_env(env).items())
    return redact_text(text)


def _check_target(kit_dir: Path, force: bool) -> None:
    if not kit_dir.exists():
        return
    if not kit_dir.is_dir():
        raise UsageError(f"{kit_dir} exists and is not a directory", fix="pick another DIR")
    if any(kit_dir.iterdir()) and not (kit_dir / KIT_MARKER).exists() and not force:
        raise UsageError(f"{kit_dir} is not empty and is not a faulthunt kit",
                         fix="pick an empty or new DIR, or pass --force to write into it anyway")


def _copy_run(run_dir: Path, dest: Path) -> list[str]:
    """Copy the run's files into the kit, secrets scrubbed; returns what could not be copied
    (never fatal)."""
    if dest.exists():
        shutil.rmtree(dest, ignore_errors=True)
    return copy_scrubbed(run_dir, dest, skip=frozenset(_SKIP_IN_COPY))


def write_kit(plan: KitPlan, kit_dir: Path, *, force: bool = False) -> dict[str, Any]:
    """Write the kit into ``kit_dir``; returns ``{kit, files, copy_problems}``.

    Restaging into an existing kit replaces its generated files and ``run/``, and keeps ``runs/``
    (the reproducer's own runs).
    """
    kit_dir = kit_dir.resolve()
    _check_target(kit_dir, force)
    try:
        kit_dir.mkdir(parents=True, exist_ok=True)
        (kit_dir / "runs").mkdir(exist_ok=True)
    except OSError as exc:  # a path under a file, a read-only or full file system
        raise UsageError(f"cannot create the kit directory {kit_dir}: {exc.strerror or exc}",
                         fix="pick a DIR whose parent is a writable directory "
                             "(not a path under a file)") from None
    files = render_kit(plan)
    for name, text in files.items():
        path = kit_dir / name
        write_text_atomic(path, text)
        if name.endswith((".sh", ".py")):
            path.chmod(0o755)
    write_text_atomic(kit_dir / "system_identity.txt", _identity_file(plan))
    problems = _copy_run(plan.run_dir, kit_dir / "run")
    try:  # a stale `continue` from an earlier session would end the next one at once
        (kit_dir / CONTINUE_FILE).unlink()
    except FileNotFoundError:
        pass
    marker = {"run": str(plan.run_dir), "run_id": plan.run_id, "staged": plan.staged_wall,
              "staged_mono": plan.staged_mono, "tests": [t.base_nodeid for t in plan.failing],
              "files": sorted(files), "copy_problems": problems}
    write_json_atomic(kit_dir / KIT_MARKER, marker)
    try:  # let the run know where its kit is (reports link it); the run may be read-only
        write_json_atomic(plan.run_dir / Layout.STAGE_DIR / "kit.json",
                          {"kit": str(kit_dir), "staged": plan.staged_wall})
    except RunDirError:
        pass
    return {"kit": kit_dir, "files": sorted([*files, "system_identity.txt", "run/"]),
            "copy_problems": problems}


def stage(run_dir: Path, kit_dir: Path = DEFAULT_KIT_DIR, *, tests: list[str] | None = None,
          count: int | None = None, force: bool = False) -> dict[str, Any]:
    """Plan and write a kit for ``run_dir``; what ``faulthunt stage`` does."""
    if not run_dir.is_dir():
        raise RunDirError(f"run directory {run_dir} not found",
                          fix="pass --run with a run directory (faulthunt stress makes one)")
    plan = plan_kit(run_dir, tests=tests, count=count)
    result = write_kit(plan, kit_dir, force=force)
    result["plan"] = plan
    return result
