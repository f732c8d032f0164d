"""``faulthunt session``: open a repro kit in a tmux (or tmate) session.

Windows: ``shell`` (a shell in the kit), ``reproducer`` (``./run_reproducer.sh`` typed, or run
with ``start=True``), ``xid`` (live Xid watch through ``xid_watch.sh`` -> ``faulthunt xid watch``),
``py-spy`` (``./pyspy_workers.sh`` typed), and ``limit``: a watchdog that kills the session when
its time limit passes or when ``touch KIT/continue`` ends it early (what CI debugging needs).

The session lives on its own socket in the kit (``KIT/tmux.sock``), never on the user's default
tmux server. tmate, when installed, is used only with an authorized-keys file (``tmate -a``):
an open, anyone-with-the-link session needs ``allow_open=True``.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from faulthunt.errors import ToolMissingError, UsageError
from faulthunt.stage import CONTINUE_FILE

DEFAULT_TIMEOUT = 3600.0


@dataclass(frozen=True)
class SessionPlan:
    """What to open (pure data; :func:`tmux_commands` turns it into command lines)."""

    name: str
    kit: Path
    tool: str                       # "tmux" or "tmate"
    socket: Path
    timeout: float
    authorized_keys: Path | None
    start_reproducer: bool
    count: int | None


def plan_session(kit: Path, *, name: str = "faulthunt", use_tmate: bool | None = None,
                 authorized_keys: Path | None = None, allow_open: bool = False,
                 timeout: float = DEFAULT_TIMEOUT, start_reproducer: bool = False,
                 count: int | None = None, which=shutil.which) -> SessionPlan:  # type: ignore[no-untyped-def]
    """Decide tmux vs tmate and check the access rules; raises with a fix when it must refuse."""
    if not (kit / "run_reproducer.sh").exists():
        raise UsageError(f"{kit} is not a repro kit (no run_reproducer.sh)",
                         fix="run `faulthunt stage` first, or pass --kit DIR of a staged kit")
    if timeout <= 0:
        raise UsageError("--timeout must be > 0 seconds")
    if not all(c.isalnum() or c in "-_" for c in name):
        raise UsageError(f"session name {name!r} may only hold letters, digits, - and _")
    tmate = which("tmate") is not None if use_tmate is None else use_tmate
    if tmate and which("tmate") is None:
        raise ToolMissingError("tmate is not installed", fix="apt-get install tmate, or drop --tmate")
    if not tmate and which("tmux") is None:
        raise ToolMissingError("tmux is not installed", fix="apt-get install tmux (or conda install tmux)")
    if tmate:
        if authorized_keys is None and not allow_open:
            raise UsageError("refusing an open tmate session: anyone with its address could type "
                             "into this GPU runner",
                             fix="pass --authorized-keys FILE (e.g. curl https://github.com/USER.keys "
                                 "> keys), or --allow-open if you really mean it, or --no-tmate")
        if authorized_keys is not None and not authorized_keys.is_file():
            raise UsageError(f"authorized-keys file {authorized_keys} not found",
                             fix="curl -fsS https://github.com/USER.keys > keys and pass --authorized-keys keys")
        if authorized_keys is not None and not authorized_keys.read_text(errors="replace").strip():
            raise UsageError(f"authorized-keys file {authorized_keys} is empty: nobody could join",
                             fix="put at least one ssh public key in it")
    return SessionPlan(name=name, kit=kit.resolve(), tool="tmate" if tmate else "tmux",
                       socket=kit.resolve() / f"{'tmate' if tmate else 'tmux'}.sock",
                       timeout=timeout, authorized_keys=authorized_keys.resolve() if authorized_keys else None,
                       start_reproducer=start_reproducer, count=count)


def watchdog_command(plan: SessionPlan) -> str:
    """The shell loop of the ``limit`` window: ends the session at the limit or on KIT/continue."""
    cont = shlex.quote(str(plan.kit / CONTINUE_FILE))
    kill = " ".join(shlex.quote(a) for a in [plan.tool, "-S", str(plan.socket), "kill-session",
                                             "-t", plan.name])
    return (f"end=$(( $(date +%s) + {int(plan.timeout)} )); "
            f"echo \"session ends at $(date -d @$end 2>/dev/null || echo +{int(plan.timeout)}s); "
            f"touch {cont} to end it now\"; "
            f"while [ $(date +%s) -lt $end ] && [ ! -e {cont} ]; do sleep 1; done; {kill}")


def tmux_commands(plan: SessionPlan) -> list[list[str]]:
    """The tmux/tmate command lines that build the session (pure, tested)."""
    base = [plan.tool, "-S", str(plan.socket)]
    if plan.tool == "tmate" and plan.authorized_keys:
        base += ["-a", str(plan.authorized_keys)]
    kit = str(plan.kit)
    target = plan.name
    count = f" {plan.count}" if plan.count else ""
    cmds = [
        [*base, "new-session", "-d", "-s", target, "-n", "shell", "-c", kit, "-x", "200", "-y", "50"],
        [*base, "set-option", "-t", target, "remain-on-exit", "on"],
        [*base, "new-window", "-d", "-t", target, "-n", "reproducer", "-c", kit],
        [*base, "new-window", "-d", "-t", target, "-n", "xid", "-c", kit, "bash ./xid_watch.sh"],
        [*base, "new-window", "-d", "-t", target, "-n", "py-spy", "-c", kit],
        [*base, "new-window", "-d", "-t", target, "-n", "limit", "-c", kit, watchdog_command(plan)],
        [*base, "send-keys", "-t", f"{target}:reproducer", f"./run_reproducer.sh{count}"]
        + (["Enter"] if plan.start_reproducer else []),
        [*base, "send-keys", "-t", f"{target}:py-spy", "./pyspy_workers.sh"],
        [*base, "send-keys", "-t", f"{target}:shell", "cat README.md", "Enter"],
    ]
    return cmds


def attach_command(plan: SessionPlan) -> str:
    """What to type to attach (local tmux; for tmate see :func:`open_session`'s ssh line)."""
    return " ".join(shlex.quote(a) for a in [plan.tool, "-S", str(plan.socket), "attach", "-t", plan.name])


def _run(argv: list[str]) -> str:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        raise ToolMissingError(f"{argv[0]} did not answer in 30 s: {' '.join(argv[3:5])}",
                               fix="check that it starts by hand") from None
    if proc.returncode != 0:
        raise ToolMissingError(f"{' '.join(argv[:1] + argv[3:5])} failed: {proc.stderr.strip()}",
                               fix=f"check that {argv[0]} works here (try `{argv[0]} -V`)")
    return proc.stdout


def open_session(plan: SessionPlan) -> dict[str, str | None]:
    """Create the detached session; returns ``{name, attach, ssh, web}``."""
    if subprocess.run([plan.tool, "-S", str(plan.socket), "has-session", "-t", plan.name],
                      capture_output=True).returncode == 0:
        raise UsageError(f"a session {plan.name!r} is already open on {plan.socket}",
                         fix=f"attach with `{attach_command(plan)}`, or touch "
                             f"{plan.kit / CONTINUE_FILE} to end it, or pass --name")
    try:
        (plan.kit / CONTINUE_FILE).unlink()
    except FileNotFoundError:
        pass
    for argv in tmux_commands(plan):
        _run(argv)
    info: dict[str, str | None] = {"name": plan.name, "attach": attach_command(plan), "ssh": None, "web": None}
    if plan.tool == "tmate":
        base = ["tmate", "-S", str(plan.socket)]
        _run([*base, "wait", "tmate-ready"])
        info["ssh"] = _run([*base, "display", "-p", "#{tmate_ssh}"]).strip() or None
        if plan.authorized_keys is None:  # open session: the read-write web link exists too
            info["web"] = _run([*base, "display", "-p", "#{tmate_web}"]).strip() or None
    return info


def session_alive(plan: SessionPlan) -> bool:
    """Whether the session still exists."""
    return subprocess.run([plan.tool, "-S", str(plan.socket), "has-session", "-t", plan.name],
                          capture_output=True).returncode == 0


def wait_session(plan: SessionPlan, poll: float = 2.0) -> str:
    """Block until the session ends (limit, ``continue`` file, or the user exits); says why."""
    deadline = time.monotonic() + plan.timeout + 10
    while session_alive(plan):
        if (plan.kit / CONTINUE_FILE).exists():
            time.sleep(poll)  # the watchdog kills it; give it a moment, then make sure
            close_session(plan)
            return "continue"
        if time.monotonic() > deadline:
            close_session(plan)
            return "timeout"
        time.sleep(poll)
    return "continue" if (plan.kit / CONTINUE_FILE).exists() else "ended"


def close_session(plan: SessionPlan) -> None:
    """Kill the session (no error if it is already gone)."""
    subprocess.run([plan.tool, "-S", str(plan.socket), "kill-session", "-t", plan.name],
                   capture_output=True)
