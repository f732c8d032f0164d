"""faulthunt session: real detached tmux and tmate sessions on the kit, inspected with capture-pane.

tmate is the real binary (Debian's tmate 2.4, installed by .ci/run). No tmate server is reachable
from the test machine, and none may be contacted: each tmate test gets a HOME whose ~/.tmate.conf
points tmate at a port on 127.0.0.1 (closed, or a listener that never speaks ssh), which is also
what an air-gapped GPU node looks like to faulthunt.
"""
from __future__ import annotations

import socket
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from faulthunt.errors import ToolMissingError, UsageError
from faulthunt.session import (TMATE_CONF, close_session, local_plan, open_session, parse_tmate_server,
                               plan_session, session_alive, start_tmate, tmate_config, tmate_server,
                               tmux_commands, tmux_quote, wait_session)
from faulthunt.stage import stage
from test_stage import HOSTILE_IDS, make_project, make_run, no_sentinel

needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")
needs_tmate = pytest.mark.skipif(shutil.which("tmate") is None or shutil.which("tmux") is None,
                                 reason="tmate or tmux not installed (apt-get install tmate tmux; "
                                        ".ci/run installs both)")
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample user@host\n"


@pytest.fixture(autouse=True)
def plain_shell(monkeypatch: pytest.MonkeyPatch) -> None:
    """The session's windows run the tmux server's default shell, $SHELL: the machine's own
    interactive start-up files (a bash rc running pyenv's init took over 20 s here) are not what
    these tests check, so the panes run a plain POSIX shell."""
    monkeypatch.setenv("SHELL", "/bin/sh")
    monkeypatch.delenv("ENV", raising=False)


@pytest.fixture()
def kit(tmp_path: Path) -> Path:
    project = make_project(tmp_path)
    run = make_run(tmp_path, project, [f"test_hostile.py::test_h[{i}]" for i in HOSTILE_IDS])
    kit = tmp_path / "kit dir"
    stage(run, kit)
    return kit


def capture(plan, window: str) -> str:  # type: ignore[no-untyped-def]
    return subprocess.run(["tmux", "-S", str(plan.socket), "capture-pane", "-p", "-t",
                           f"{plan.name}:{window}"], capture_output=True, text=True).stdout


def wait_for(pred, timeout: float = 20.0) -> bool:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.2)
    return False


@needs_tmux
@pytest.mark.slow
def test_real_tmux_session_windows_and_continue(kit: Path) -> None:
    plan = plan_session(kit, name="fhtest", use_tmate=False, timeout=120)
    info = open_session(plan)
    try:
        assert "attach -t fhtest" in info["attach"] and str(plan.socket) in info["attach"]
        windows = subprocess.run(["tmux", "-S", str(plan.socket), "list-windows", "-t", "fhtest",
                                  "-F", "#{window_name}"], capture_output=True, text=True).stdout.split()
        assert windows == ["shell", "reproducer", "xid", "py-spy", "limit"]
        assert wait_for(lambda: "./run_reproducer.sh" in capture(plan, "reproducer"))
        assert wait_for(lambda: "./pyspy_workers.sh" in capture(plan, "py-spy"))
        assert wait_for(lambda: "Repro kit for run" in capture(plan, "shell"))
        assert wait_for(lambda: "touch" in capture(plan, "limit") and "continue" in capture(plan, "limit"))
        # the xid window runs faulthunt xid watch, or says why it fell back to dmesg -w
        assert wait_for(lambda: capture(plan, "xid").strip() != "" or session_alive(plan))
        with pytest.raises(UsageError):  # the same name twice is refused, with how to attach
            open_session(plan)
        (kit / "continue").touch()
        assert wait_for(lambda: not session_alive(plan), timeout=30)  # the watchdog ended it
        assert wait_session(plan, poll=0.1) == "continue"
    finally:
        close_session(plan)
    no_sentinel(kit.parent)


@needs_tmux
@pytest.mark.slow
def test_time_limit_ends_the_session(kit: Path) -> None:
    plan = plan_session(kit, name="fhlimit", use_tmate=False, timeout=1)
    open_session(plan)
    try:
        assert wait_for(lambda: not session_alive(plan), timeout=30)
    finally:
        close_session(plan)


def test_tmate_refuses_an_open_session(kit: Path, tmp_path: Path) -> None:
    which = lambda tool: f"/usr/bin/{tool}"  # noqa: E731 - tmate "installed" for the rule check
    with pytest.raises(UsageError) as info:
        plan_session(kit, use_tmate=True, which=which)
    assert "--authorized-keys" in (info.value.fix or "")
    empty = tmp_path / "keys"
    empty.write_text("\n")
    with pytest.raises(UsageError):
        plan_session(kit, use_tmate=True, authorized_keys=empty, which=which)
    empty.write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample user@host\n")
    plan = plan_session(kit, use_tmate=True, authorized_keys=empty, which=which)
    first = tmux_commands(plan)[0]
    assert first[:7] == ["tmate", "-S", str(plan.socket), "-f", str(plan.kit / TMATE_CONF),
                         "-a", str(empty.resolve())]
    assert plan_session(kit, use_tmate=True, allow_open=True, which=which).authorized_keys is None
    # by default tmate only when asked to share: no keys and not open means local tmux
    assert plan_session(kit, which=which).tool == "tmux"
    assert plan_session(kit, authorized_keys=empty, which=which).tool == "tmate"


def test_missing_tools_and_bad_input(kit: Path, tmp_path: Path) -> None:
    with pytest.raises(ToolMissingError) as info:
        plan_session(kit, use_tmate=False, which=lambda tool: None)
    assert "apt-get install tmux" in (info.value.fix or "")
    with pytest.raises(UsageError):
        plan_session(tmp_path, use_tmate=False)
    with pytest.raises(UsageError):
        plan_session(kit, name="x; rm -rf /", use_tmate=False)
    with pytest.raises(UsageError):
        plan_session(kit, timeout=0, use_tmate=False)


# --- tmate: the generated configuration (pure) -----------------------------------------------------

def test_tmate_config_restricts_after_the_users_file(kit: Path, tmp_path: Path) -> None:
    keys = tmp_path / "it's keys"
    keys.write_text(KEY)
    plan = plan_session(kit, use_tmate=True, authorized_keys=keys, which=lambda t: f"/usr/bin/{t}")
    text = tmate_config(plan, tmp_path / ".tmate.conf")
    lines = [ln for ln in text.splitlines() if not ln.startswith("#")]
    assert lines == [f"source-file {tmux_quote(str(tmp_path / '.tmate.conf'))}",
                     f"set -g tmate-authorized-keys {tmux_quote(str(keys.resolve()))}"]
    assert tmux_quote("a'b c") == "'a'\"'\"'b c'"
    with pytest.raises(UsageError):
        tmux_quote("a\nb")
    open_plan = plan_session(kit, use_tmate=True, allow_open=True, which=lambda t: f"/usr/bin/{t}")
    assert "tmate-authorized-keys" not in tmate_config(open_plan) and "OPEN session" in tmate_config(open_plan)


def test_parse_tmate_server() -> None:
    out = 'tmate-identity ""\ntmate-server-host "tmate.example.org"\ntmate-server-port 2222\n'
    assert parse_tmate_server(out) == ("tmate.example.org", 2222)
    assert parse_tmate_server("") == ("ssh.tmate.io", 22)


# --- tmate: the real binary -----------------------------------------------------------------------

def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def keys(tmp_path: Path) -> Path:
    path = tmp_path / "authorized keys"
    path.write_text(KEY)
    return path


def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, port: int) -> Path:
    """A HOME whose ~/.tmate.conf sends tmate to 127.0.0.1:port (never to a real server)."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / ".tmate.conf").write_text(f'set -g tmate-server-host "127.0.0.1"\nset -g tmate-server-port {port}\n')
    monkeypatch.setenv("HOME", str(home))
    return home


@pytest.fixture()
def silent_server() -> Iterator[int]:
    """A port on 127.0.0.1 that accepts connections and never says a word (not an ssh server)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    srv.settimeout(0.2)
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield srv.getsockname()[1]
    finally:
        stop.set()
        thread.join(timeout=5)
        for conn in held:
            conn.close()
        srv.close()


def _tmate_gone(plan) -> bool:  # type: ignore[no-untyped-def]
    return subprocess.run(["tmate", "-S", str(plan.socket), "has-session"], capture_output=True).returncode != 0


def _windows(tool: str, plan) -> list[str]:  # type: ignore[no-untyped-def]
    return subprocess.run([tool, "-S", str(plan.socket), "list-windows", "-t", plan.name, "-F", "#{window_name}"],
                          capture_output=True, text=True).stdout.split()


@needs_tmate
@pytest.mark.slow
def test_real_tmate_session_starts_with_the_key_restriction(kit: Path, keys: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    port = _closed_port()
    home = _home(tmp_path, monkeypatch, port)
    plan = plan_session(kit, name="fhtmate", authorized_keys=keys, timeout=120)
    assert plan.tool == "tmate"
    start_tmate(plan, home=home)
    try:
        assert _windows("tmate", plan) == ["shell", "reproducer", "xid", "py-spy", "limit"]
        conf = (kit / TMATE_CONF).read_text()
        assert f"set -g tmate-authorized-keys {tmux_quote(str(keys.resolve()))}" in conf
        assert f"source-file {tmux_quote(str(home / '.tmate.conf'))}" in conf
        options = subprocess.run(["tmate", "-S", str(plan.socket), "show-options", "-s"],
                                 capture_output=True, text=True).stdout
        assert f'tmate-authorized-keys "{keys.resolve()}"' in options  # the running server has it
        assert tmate_server(plan) == ("127.0.0.1", port)  # the user's own file was honoured
    finally:
        close_session(plan)
        subprocess.run(["tmate", "-S", str(plan.socket), "kill-server"], capture_output=True)


@needs_tmate
@pytest.mark.slow
def test_no_tmate_server_falls_back_to_tmux(kit: Path, keys: Path, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    port = _closed_port()
    _home(tmp_path, monkeypatch, port)
    plan = plan_session(kit, name="fhfall", authorized_keys=keys, timeout=120)
    t0 = time.monotonic()
    info = open_session(plan)
    local = local_plan(plan)
    try:
        assert time.monotonic() - t0 < 60  # "within seconds"; generous, against a hang only
        assert info["tool"] == "tmux" and info["ssh"] is None
        assert info["fallback"].startswith(f"no tmate server reachable at 127.0.0.1:{port} (")
        assert "refused" in info["fallback"].lower()
        assert info["attach"].startswith("tmux -S ") and str(local.socket) in info["attach"].replace("'", "")
        assert _tmate_gone(plan)  # the unshared tmate session is not left behind
        assert _windows("tmux", local) == ["shell", "reproducer", "xid", "py-spy", "limit"]
        assert wait_for(lambda: "Repro kit for run" in capture(local, "shell"))  # the same kit
    finally:
        close_session(local)
    no_sentinel(kit.parent)


@needs_tmate
@pytest.mark.slow
def test_tmate_server_that_never_answers(kit: Path, keys: Path, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch, silent_server: int) -> None:
    _home(tmp_path, monkeypatch, silent_server)
    plan = plan_session(kit, name="fhsilent", authorized_keys=keys, timeout=120)
    info = open_session(plan, ready_timeout=2)
    try:
        assert info["fallback"] == (f"the tmate server 127.0.0.1:{silent_server} did not make the session "
                                    "ready in 2 s")
        assert _tmate_gone(plan) and session_alive(local_plan(plan))
    finally:
        close_session(local_plan(plan))


@needs_tmate
@pytest.mark.slow
def test_session_command_says_so_and_falls_back(kit: Path, keys: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    from faulthunt.cli import main

    _home(tmp_path, monkeypatch, _closed_port())
    assert main(["session", "--kit", str(kit), "--name", "fhcli", "--authorized-keys", str(keys),
                 "--timeout", "60"]) == 0
    local = local_plan(plan_session(kit, name="fhcli", use_tmate=False))
    try:
        out = capsys.readouterr().out
        assert "tmate: no tmate server reachable at 127.0.0.1:" in out
        assert "opened the same kit in a local tmux session instead" in out
        assert f"attach: tmux -S {local.socket}" in out.replace("'", "")
        assert session_alive(local)
    finally:
        close_session(local)


def test_probe_is_bounded_even_when_the_lookup_hangs(monkeypatch: pytest.MonkeyPatch) -> None:
    """A name lookup that blocks (no reachable DNS server) still answers within the timeout."""
    from faulthunt import session

    release = threading.Event()

    def blocked_lookup(*args, **kwargs):  # type: ignore[no-untyped-def]
        release.wait(30)
        raise OSError("lookup released")

    monkeypatch.setattr(session.socket, "create_connection", blocked_lookup)
    try:
        assert session.probe_tcp("tmate.example", 22, 0.2) == "no answer within 0.2 s"
    finally:
        release.set()
    monkeypatch.undo()
    assert session.probe_tcp("127.0.0.1", _closed_port(), 5) == "Connection refused"


@needs_tmux
@pytest.mark.slow
def test_session_stages_named_tests_of_a_run_without_failures(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """The refusal's fix ("pass --test NODEID") works on session as written: it used to name an
    option only `faulthunt stage` had."""
    from faulthunt.cli import main
    from faulthunt.rundir import create_run_dir, write_json_atomic

    project = make_project(tmp_path)
    run = create_run_dir(tmp_path / "green")
    write_json_atomic(run / "run.json", {"id": "green", "cwd": str(project), "pytest_args": ["."]})
    write_json_atomic(run / "summary.json", {"tests_run": 3, "passed": 3, "failures": []})
    kit = tmp_path / "kit"
    assert main(["session", "--run", str(run), "--kit", str(kit), "--timeout", "5"]) == 2
    assert "fix: pass --test NODEID" in capsys.readouterr().err
    assert main(["session", "--run", str(run), "--kit", str(kit), "--timeout", "30", "--name", "fhtest",
                 "--test", "test_hostile.py::test_h[a b]"]) == 0
    try:
        assert (kit / "tests.txt").read_text().splitlines() == ['"test_hostile.py::test_h[a b]"']
    finally:
        close_session(plan_session(kit, name="fhtest", use_tmate=False))


@needs_tmux
@pytest.mark.slow
def test_the_continue_hint_is_quoted_for_the_shell(kit: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The kit's path has a space: `touch /tmp/kit dir/continue`, as printed, touched two other
    files and left the session running."""
    import shlex

    from faulthunt.cli import main

    hint = f"touch {shlex.quote(str(kit / 'continue'))}"
    try:
        assert main(["session", "--kit", str(kit), "--name", "fhquote", "--timeout", "30"]) == 0
        assert f"`{hint}`" in capsys.readouterr().out
        assert main(["session", "--kit", str(kit), "--name", "fhquote", "--timeout", "30"]) == 2
        assert f"`{hint}`" in capsys.readouterr().err
    finally:
        close_session(plan_session(kit, name="fhquote", use_tmate=False))


def test_the_limit_window_never_runs_the_kits_path(tmp_path: Path) -> None:
    """The kit's path is data: `$(...)` in it ran when the limit window started, because the
    quoted path sat inside a double-quoted echo."""
    from faulthunt.session import watchdog_command

    marker = tmp_path / "ran"
    kit = tmp_path / "kit $(touch ran) ;x"  # run in tmp_path: the marker lands there
    kit.mkdir()
    (kit / "run_reproducer.sh").touch()
    (kit / "continue").touch()  # ends the loop at once
    plan = plan_session(kit, name="fhw", use_tmate=False, timeout=5)
    cmd = watchdog_command(plan).rsplit("; ", 1)[0]  # without the kill-session of a session not opened
    out = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=30,
                         cwd=tmp_path).stdout
    assert not marker.exists()
    assert f"touch '{kit}/continue' to end it now" in out
