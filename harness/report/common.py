"""What every view of a report says the same way: the headline, GPU cells, clipped messages.

Plain text out (each renderer escapes it for its medium). A simulated run says SIMULATED in its
headline, in every GPU cell and in every clipped message that carried the label.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from faulthunt.report.model import ReportModel

SIMULATED = "SIMULATED"
#: failure messages in tables are cut here (report.json has them whole)
MESSAGE_CHARS = 120


def headline(model: ReportModel) -> str:
    """The one-line verdict, ``SIMULATED: ...`` for a simulator run."""
    return f"{SIMULATED}: {model.headline}" if model.simulated else model.headline


def gpu_text(value: Any, model: ReportModel) -> str | None:
    """A GPU / PCI cell; a simulated run's ids are labelled as made up."""
    if value is None or value == "":
        return None
    return f"{value} ({SIMULATED})" if model.simulated else str(value)


def clip(message: Any, model: ReportModel, limit: int = MESSAGE_CHARS) -> str:
    """A message cut to ``limit`` characters without losing a SIMULATED label past the cut."""
    text = str(message or "")
    out = text[:limit]
    if SIMULATED in text[limit:] and SIMULATED not in out:
        out = out.rstrip() + f" ... [{SIMULATED}]"
    if model.simulated and out and SIMULATED not in out:
        out += f" [{SIMULATED}]"
    return out


def rate_text(t: Mapping[str, Any]) -> str:
    """``12.0% (5.0%-24.0%)`` from a by_test row, ``-`` without a rate."""
    from faulthunt.summary import interval_text

    rate = t.get("rate")
    interval = interval_text(t.get("failures"), t.get("runs"), t.get("ci95"))
    if rate is None or interval is None:
        return "-"
    return f"{100 * rate:.1f}% ({interval})"


def allocation_text(x: dict[str, Any]) -> str | None:
    """The mapping verdict of an Xid row with its allocation, or None when unmapped."""
    a = x.get("allocation")
    if not x.get("verdict"):
        return None
    if x.get("guard_text"):  # a guard slot: exact, in the guard's words
        return str(x["guard_text"])
    if not a:
        return str(x["verdict"])
    return (f"{x['verdict']}: {a.get('address')} +{a.get('size')} ({a.get('source') or '?'}, "
            f"from {a.get('nodeid') or '?'})")


def pid_text(rec: Mapping[str, Any]) -> str | None:
    """A pid; in a merged run also the pid on its own host (``10029767 (host pid 29767)``), which
    that host's dmesg names."""
    pid = rec.get("pid")
    if pid is None:
        return None
    host = rec.get("host_pid")
    return f"{pid} (host pid {host})" if host is not None and host != pid else str(pid)


def outcome_text(f: Mapping[str, Any]) -> str:
    """``crashed (SIGABRT)``."""
    return str(f.get("outcome")) + (f" ({f['signal_name']})" if f.get("signal_name") else "")


def failing_tests(model: ReportModel) -> list[dict[str, Any]]:
    """by_test rows that failed or had Xids (the Tests table)."""
    return [t for t in model.by_test if t.get("failures") or t.get("xids")]
