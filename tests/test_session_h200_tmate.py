"""The tmate fallback as seen on the H200 (tests/data/session/h200_tmate/PROVENANCE.md): every check
of scripts/gpu/tmate_fallback.sh passed, and what faulthunt printed and generated there is what
today's session planning produces for the same kit."""

from __future__ import annotations

import re
from pathlib import Path

from faulthunt.session import SessionPlan, attach_command, local_plan, tmate_config, tmux_commands

D = Path(__file__).parent / "data" / "session" / "h200_tmate"
WORK = Path("/tmp/tmate-check.S1sNT2")  # the script's folder on the machine
PLAN = SessionPlan(name="fhgpu", kit=WORK / "kit", tool="tmate", socket=WORK / "kit" / "tmate.sock",
                   timeout=60.0, authorized_keys=WORK / "authorized_keys", start_reproducer=False, count=None)


def test_every_check_passed() -> None:
    log = (D / "steps.log").read_text()
    checks = re.findall(r"^CHECK (.+): (\w+)$", log, re.M)
    assert len(checks) == 9 and all(result == "ok" for _, result in checks)
    assert "checks ok: 9" in log and "no check failed" in log


def test_fallback_said_why_and_how_to_attach() -> None:
    said = (D / "session.txt").read_text().splitlines()
    assert said[0].startswith("tmate: no tmate server reachable at ssh.tmate.io:22 (")
    assert said[0].endswith("opened the same kit in a local tmux session instead")
    assert said[-1] == f"attach: {attach_command(local_plan(PLAN))}"


def test_generated_config_and_windows_are_todays() -> None:
    assert (D / "tmate.conf").read_text() == tmate_config(PLAN)
    names = [c[c.index("-n") + 1] for c in tmux_commands(local_plan(PLAN)) if "-n" in c]
    assert (D / "windows.txt").read_text().split() == names
    assert (D / "shell_pane.txt").read_text().splitlines()[1] == "# Repro kit for run run"
