"""``faulthunt session``: open a repro kit in a tmux (or tmate) session.

Windows: ``shell`` (a shell in the kit), ``reproducer`` (``./run_reproducer.sh`` typed, or run
with ``start=True``), ``xid`` (live Xid watch through ``xid_watch.sh`` -> ``faulthunt xid watch``),
``py-spy`` (``./pyspy_workers.sh`` typed), and ``limit``: a watchdog that kills the session when
its time limit passes or when ``touch KIT/continue`` ends it early (what CI debugging needs).

The session lives on its own socket in the kit (``KIT/tmux.sock``), never on the user's default
tmux server. tmate, when installed, is used only with an authorized-keys file: the restriction is
written into the configuration faulthunt generates for the session (``KIT/tmate.conf``, loaded
with ``tmate -f``) and passed as ``tmate -a`` too; an open, anyone-with-the-link session needs
``allow_open=True``. With no tmate server reachable (an air-gapped GPU node, a firewall) the
session says so within seconds and falls back to a local tmux session of the same kit.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from faulthunt.errors import ToolMissingError, UsageError
from faulthunt.stage import CONTINUE_FILE

DEFAULT_TIMEOUT = 3600.0
#: the generated tmate configuration inside the kit
TMATE_CONF = "tmate.conf"
#: seconds to wait for a TCP connection to the tmate server
CONNECT_TIMEOUT = 5.0
#: seconds to wait for tmate to report its session ready (ssh handshake with the server)
READY_TIMEOUT = 15.0


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
                 count: int | None = None, which: Callable[[str], str | None] = shutil.which) -> SessionPlan:
    """Decide tmux vs tmate and check the access rules; raises with a fix when it must refuse."""
    if not (kit / "run_reproducer.sh").exists():
        raise UsageError(f"{kit} is not a repro kit (no run_reproducer.sh)",
                         fix="run `faulthunt stage` first, or pass --kit DIR of a staged kit")
    if timeout <= 0:
        raise UsageError("--timeout must be > 0 seconds")
    if not all(c.isalnum() or c in "-_" for c in name):
        raise UsageError(f"session name {name!r} may only hold letters, digits, - and _")
    if use_tmate is None:  # by default tmate only when installed and asked to share (keys or open)
        use_tmate = which("tmate") is not None and (authorized_keys is not None or allow_open)
    tmate = use_tmate
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
    # the hint is its own quoted word: inside the double-quoted line, the path's single quotes
    # were literal and a `$(...)` in the kit's path ran when the window started
    hint = shlex.quote(f"touch {cont} to end it now")
    return (f"end=$(( $(date +%s) + {int(plan.timeout)} )); "
            f"echo \"session ends at $(date -d @$end 2>/dev/null || echo +{int(plan.timeout)}s);\" {hint}; "
            f"while [ $(date +%s) -lt $end ] && [ ! -e {cont} ]; do sleep 1; done; {kill}")


def tmux_quote(text: str) -> str:
    """``text`` as one literal word of a tmux configuration line (single quotes, like the shell)."""
    if "\n" in text or "\r" in text:
        raise UsageError(f"a path with a line break cannot go into {TMATE_CONF}: {text!r}")
    return "'" + text.replace("'", "'\"'\"'") + "'"


def tmate_config(plan: SessionPlan, user_conf: Path | None = None) -> str:
    """The configuration a tmate session is started with (``tmate -f KIT/tmate.conf``).

    ``-f`` replaces ``~/.tmate.conf``, so the user's own file (a self-hosted server, say) is
    sourced first when there is one; the authorized-keys restriction comes after it, so nothing
    in the user's file can lift it.
    """
    lines = ["# generated by faulthunt session for this kit; do not edit (it is rewritten each time)"]
    if user_conf is not None:
        lines.append(f"source-file {tmux_quote(str(user_conf))}")
    if plan.authorized_keys is not None:
        lines.append("# only the holders of these ssh keys may join")
        lines.append(f"set -g tmate-authorized-keys {tmux_quote(str(plan.authorized_keys))}")
    else:
        lines.append("# OPEN session (--allow-open): anyone with its address may join")
    return "\n".join(lines) + "\n"


def tmux_commands(plan: SessionPlan) -> list[list[str]]:
    """The tmux/tmate command lines that build the session (pure, tested)."""
    base = [plan.tool, "-S", str(plan.socket)]
    if plan.tool == "tmate":
        base += ["-f", str(plan.kit / TMATE_CONF)]
        if plan.authorized_keys:
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
    what = shlex.join(argv)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        raise ToolMissingError(f"{argv[0]} did not answer in 30 s: {what}",
                               fix="check that it starts by hand") from None
    if proc.returncode != 0:
        raise ToolMissingError(f"{what} failed: {proc.stderr.strip()}",
                               fix=f"check that {argv[0]} works here (try `{argv[0]} -V`)")
    return proc.stdout


def open_session(plan: SessionPlan, *, connect_timeout: float = CONNECT_TIMEOUT,
                 ready_timeout: float = READY_TIMEOUT, which: Callable[[str], str | None] = shutil.which,
                 ) -> dict[str, str | None]:
    """Create the detached session; returns ``{name, tool, attach, ssh, web, fallback}``.

    A tmate session whose server cannot be reached (or does not make the session ready in
    ``ready_timeout`` seconds) is closed and the same kit opened in tmux instead; ``fallback`` then
    says why, and ``tool`` is ``tmux``.
    """
    _refuse_if_open(plan)
    try:
        (plan.kit / CONTINUE_FILE).unlink()
    except FileNotFoundError:
        pass
    if plan.tool == "tmate":
        start_tmate(plan)
        why = tmate_unreachable(plan, connect_timeout=connect_timeout, ready_timeout=ready_timeout)
        if why is None:
            info = _info(plan)
            base = ["tmate", "-S", str(plan.socket)]
            info["ssh"] = _run([*base, "display", "-p", "#{tmate_ssh}"]).strip() or None
            if plan.authorized_keys is None:  # open session: the read-write web link exists too
                info["web"] = _run([*base, "display", "-p", "#{tmate_web}"]).strip() or None
            return info
        close_session(plan)
        subprocess.run(["tmate", "-S", str(plan.socket), "kill-server"], capture_output=True)
        if which("tmux") is None:
            raise ToolMissingError(f"tmate: {why}, and tmux (the local fallback) is not installed",
                                   fix="apt-get install tmux, or run where the tmate server is reachable")
        plan = local_plan(plan)
        _refuse_if_open(plan)
        for argv in tmux_commands(plan):
            _run(argv)
        info = _info(plan)
        info["fallback"] = why
        return info
    for argv in tmux_commands(plan):
        _run(argv)
    return _info(plan)


def local_plan(plan: SessionPlan) -> SessionPlan:
    """The same session in plain tmux on the kit's own tmux socket."""
    return dataclasses.replace(plan, tool="tmux", socket=plan.kit / "tmux.sock", authorized_keys=None)


def start_tmate(plan: SessionPlan, home: Path | None = None) -> None:
    """Write KIT/tmate.conf and build the tmate session (windows as for tmux)."""
    user_conf = (home or Path.home()) / ".tmate.conf"
    text = tmate_config(plan, user_conf if user_conf.is_file() else None)
    (plan.kit / TMATE_CONF).write_text(text, encoding="utf-8")
    for argv in tmux_commands(plan):
        _run(argv)


def tmate_server(plan: SessionPlan) -> tuple[str, int]:
    """The server the running tmate session connects to (its options; the user's file may set it)."""
    out = _run(["tmate", "-S", str(plan.socket), "show-options", "-s"])
    return parse_tmate_server(out)


def parse_tmate_server(show_options: str) -> tuple[str, int]:
    """``(host, port)`` from ``tmate show-options -s`` output; tmate's defaults where absent."""
    host = re.search(r'^tmate-server-host\s+"?([^"\s]*)"?\s*$', show_options, re.M)
    port = re.search(r"^tmate-server-port\s+(\d+)\s*$", show_options, re.M)
    return (host.group(1) if host and host.group(1) else "ssh.tmate.io",
            int(port.group(1)) if port else 22)


def tmate_unreachable(plan: SessionPlan, *, connect_timeout: float = CONNECT_TIMEOUT,
                      ready_timeout: float = READY_TIMEOUT) -> str | None:
    """Why the tmate session cannot be shared, or None when it is ready.

    First a plain TCP connection to the server (a name that does not resolve or a refused port
    answers at once; a dropped packet takes ``connect_timeout``), then tmate's own readiness.
    """
    host, port = tmate_server(plan)
    reason = probe_tcp(host, port, connect_timeout)
    if reason is not None:
        return f"no tmate server reachable at {host}:{port} ({reason})"
    try:
        proc = subprocess.run(["tmate", "-S", str(plan.socket), "wait", "tmate-ready"],
                              capture_output=True, timeout=ready_timeout)
    except subprocess.TimeoutExpired:
        return f"the tmate server {host}:{port} did not make the session ready in {ready_timeout:g} s"
    if proc.returncode != 0:
        return f"tmate failed while connecting to {host}:{port}: {proc.stderr.decode(errors='replace').strip()}"
    return None


def probe_tcp(host: str, port: int, timeout: float) -> str | None:
    """Why a TCP connection to ``host:port`` cannot be made within ``timeout`` s; None if it can.

    The name lookup is bounded too (``create_connection``'s timeout is not): on a node without
    a reachable DNS server ``getaddrinfo`` can block for tens of seconds.
    """
    outcome: list[str | None] = []

    def connect() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                outcome.append(None)
        except OSError as exc:
            outcome.append(exc.strerror or str(exc) or type(exc).__name__)

    worker = threading.Thread(target=connect, name="faulthunt-tmate-probe", daemon=True)
    worker.start()
    worker.join(timeout + 1.0)
    return outcome[0] if outcome else f"no answer within {timeout:g} s"


def _refuse_if_open(plan: SessionPlan) -> None:
    if subprocess.run([plan.tool, "-S", str(plan.socket), "has-session", "-t", plan.name],
                      capture_output=True).returncode == 0:
        raise UsageError(f"a session {plan.name!r} is already open on {plan.socket}",
                         fix=f"attach with `{attach_command(plan)}`, or "
                             f"`touch {shlex.quote(str(plan.kit / CONTINUE_FILE))}` to end it, or pass --name")


def _info(plan: SessionPlan) -> dict[str, str | None]:
    return {"name": plan.name, "tool": plan.tool, "attach": attach_command(plan), "ssh": None, "web": None,
            "fallback": None}


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
