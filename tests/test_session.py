"""faulthunt session: a real detached tmux session on the kit, inspected with capture-pane."""
from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from faulthunt.errors import ToolMissingError, UsageError
from faulthunt.session import (close_session, open_session, plan_session, session_alive,
                               tmux_commands, wait_session)
from faulthunt.stage import stage
from test_stage import HOSTILE_IDS, make_project, make_run, no_sentinel

needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")


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
    assert first[:5] == ["tmate", "-S", str(plan.socket), "-a", str(empty.resolve())]
    assert plan_session(kit, use_tmate=True, allow_open=True, which=which).authorized_keys is None


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
