"""Judge a validation run: planted fault -> expected evidence -> seen? (twin -> clean?).

``scripts/validate_gpu.sh`` runs every planted fault and its twin on the GPU through
``faulthunt stress``, ``faulthunt sanitize`` and ``faulthunt map`` (one work folder per
fault/flavour, below) and also runs each kernel directly under its compute-sanitizer tool; then
``python -m faulthunt.kernels.validate WORKDIR`` reads what they left and prints the table.

Work folder layout, per ``<name>-<flavour>``::

    <name>-<flavour>/run/                    the faulthunt run directory (stress, sanitize, map)
    <name>-<flavour>/san_bug.txt             compute-sanitizer --tool T [opts] on the bug (runner)
    <name>-<flavour>/san_twin.txt            the same on the twin
    <name>-<flavour>/san_bug.rc, san_twin.rc exit statuses (--error-exitcode 99)

Reading is tolerant: a missing file is a "not run" cell, never a crash. The judging is pure
(:func:`judge`), so it is tested on a CPU against hand-made run directories.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from faulthunt.kernels import catalog

SAN_ERROR_EXIT = 99
#: plain outcomes that depend on timing/memory contents: reported, not judged
UNJUDGED_PLAIN = {"shared_race", "uninit_read"}


@dataclasses.dataclass(frozen=True)
class Observed:
    """What one fault/flavour left behind (read from its work folder)."""

    planted_outcome: str | None      # passed | failed | crashed | hung | collateral | None (not run)
    planted_message: str
    planted_xids: tuple[int, ...]    # Xids attributed to the planted test
    twin_outcome: str | None
    twin_xids: tuple[int, ...]
    san_bug_text: str | None         # direct compute-sanitizer output on the bug
    san_twin_rc: int | None
    san_twin_text: str | None
    findings: int | None             # faulthunt sanitize's findings for the run (None: not run)
    finding_kinds: tuple[str, ...]
    mapping: tuple[str, ...]         # verdicts in mapping.json


@dataclasses.dataclass(frozen=True)
class Row:
    name: str
    flavour: str
    expected: str
    plain: str      # seen? cells: "yes: ...", "NO: ...", "n/a", "not run", "(reported) ..."
    sanitizer: str
    xid: str
    twin: str
    mapped: str

    @property
    def ok(self) -> bool:
        cells = (self.plain, self.sanitizer, self.xid, self.twin)
        return not any(c.startswith(("NO", "not run")) for c in cells)

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "ok": self.ok}


def _expected_plain(fault: catalog.PlantedFault) -> str:
    ev = fault.evidence
    if ev.plain_error:
        return f"failed: {ev.plain_error}"
    if fault.name == "bounded_hang":
        return "hung (clock bound > --timeout)"
    if fault.name == "stale_cache":
        return "failed: wrong result"
    return "passed (silent)"


def judge(fault: catalog.PlantedFault, flavour: str, obs: Observed) -> Row:
    """Compare what was observed with the catalog's evidence for ``fault``. Pure."""
    ev = fault.evidence
    # plain run ("skipped": the kernel could not run there, e.g. no cuda.core: nothing was seen)
    out = obs.planted_outcome
    if out is None or out == "skipped":
        plain = "not run" + (" (skipped)" if out else "")
    elif fault.name in UNJUDGED_PLAIN:
        plain = f"(reported) {out}"
    elif ev.plain_error:
        plain = ("yes: " if out == "failed" and ev.plain_error in obs.planted_message else "NO: ") + out
    elif fault.name == "bounded_hang":
        plain = ("yes: " if out == "hung" else "NO: ") + out
    elif fault.name == "stale_cache":
        plain = ("yes: " if out == "failed" else "NO: ") + out
    else:
        plain = ("yes: " if out == "passed" else "NO: ") + out
    # sanitizer
    if obs.san_bug_text is not None and '"status": "unavailable"' in obs.san_bug_text:
        sanitizer = "not run (the kernel could not run under it)"
    elif ev.tool is None:
        if obs.san_bug_text is None:
            sanitizer = "n/a"
        else:
            clean = "0 errors" in obs.san_bug_text or "0 hazards" in obs.san_bug_text
            sanitizer = "yes: clean, as expected" if clean else "NO: the sanitizer reported something"
    elif obs.san_bug_text is None:
        sanitizer = "not run"
    else:
        seen = ev.sanitizer_line in obs.san_bug_text  # type: ignore[operator]
        found = f"; faulthunt sanitize: {obs.findings} finding(s)" if obs.findings is not None else ""
        sanitizer = ("yes" if seen else "NO") + f": {ev.tool}{found}"
    # Xid
    if out is None or out == "skipped":
        xid = "not run"
    else:
        want, got = set(ev.xids), set(obs.planted_xids)
        if want:
            xid = ("yes: " if want <= got else "NO: ") + (", ".join(map(str, sorted(got))) or "none")
        else:
            xid = ("yes: none" if not got else "NO: " + ", ".join(map(str, sorted(got))))
    # twin
    if obs.twin_outcome is None or obs.twin_outcome == "skipped":
        twin = "not run" + (" (skipped)" if obs.twin_outcome else "")
    else:
        parts = [f"plain {obs.twin_outcome}"]
        good = obs.twin_outcome == "passed" and not obs.twin_xids
        if obs.san_twin_rc is not None:
            san_clean = obs.san_twin_rc != SAN_ERROR_EXIT
            parts.append(f"{ev.tool or 'memcheck'} {'clean' if san_clean else 'NOT clean'}")
            good = good and san_clean
        twin = ("yes: " if good else "NO: ") + ", ".join(parts)
    mapped = ", ".join(obs.mapping) or "-"
    expected = f"{_expected_plain(fault)} | {ev.tool or 'no sanitizer'} | Xid {','.join(map(str, ev.xids)) or 'none'}"
    return Row(fault.name, flavour, expected, plain, sanitizer, xid, twin, mapped)


# --- reading a work folder (I/O) ------------------------------------------------------------------

def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


def _rc(path: Path) -> int | None:
    text = _read_text(path)
    try:
        return int(text.strip()) if text else None
    except ValueError:
        return None


def _outcome(run: Path, test: str, name: str, flavour: str) -> tuple[str | None, str]:
    """The outcome of ``test[name-flavour]`` in a run's events (start/end spans) and summary."""
    from faulthunt.rundir import read_jsonl_dir

    key = f"{test}[{name}-{flavour}"
    summary = _read_json(run / "summary.json") or {}
    for f in summary.get("failures", []) or []:
        if isinstance(f, dict) and key in str(f.get("nodeid", "")):
            return str(f.get("outcome")), str(f.get("message") or "")
    ends = [r for r in read_jsonl_dir(run / "events").records
            if r.get("event") == "end" and key in str(r.get("nodeid", ""))]
    if ends:
        return str(ends[-1].get("outcome")), str(ends[-1].get("longrepr") or "")
    return None, ""


def _xids(run: Path, test: str, name: str, flavour: str) -> tuple[int, ...]:
    key = f"{test}[{name}-{flavour}"
    summary = _read_json(run / "summary.json") or {}
    return tuple(sorted({int(x["xid"]) for x in summary.get("xids", []) or []
                         if isinstance(x, dict) and isinstance(x.get("xid"), int)
                         and key in str(x.get("nodeid") or x.get("base_nodeid") or "")}))


def observe(folder: Path, name: str, flavour: str) -> Observed:
    """Read one ``<name>-<flavour>`` work folder."""
    run = folder / "run"
    p_out, p_msg = _outcome(run, "test_planted", name, flavour)
    t_out, _ = _outcome(run, "test_twin", name, flavour)
    san = _read_json(run / "sanitizer" / "sanitizer.json")
    findings = san.get("findings") if isinstance(san, dict) else None
    mapping = _read_json(run / "mapping.json")
    verdicts = tuple(sorted({str(m.get("verdict")) for m in mapping if isinstance(m, dict)})) \
        if isinstance(mapping, list) else ()
    return Observed(
        planted_outcome=p_out, planted_message=p_msg,
        planted_xids=_xids(run, "test_planted", name, flavour),
        twin_outcome=t_out, twin_xids=_xids(run, "test_twin", name, flavour),
        san_bug_text=_read_text(folder / "san_bug.txt"),
        san_twin_rc=_rc(folder / "san_twin.rc"), san_twin_text=_read_text(folder / "san_twin.txt"),
        findings=len(findings) if isinstance(findings, list) else None,
        finding_kinds=tuple(sorted({str(f.get("kind")) for f in findings or [] if isinstance(f, dict)})),
        mapping=verdicts)


def rows_for(workdir: Path) -> list[Row]:
    rows = []
    for fault in catalog.CATALOG:
        for flavour in fault.flavours:
            folder = workdir / f"{fault.name}-{flavour}"
            rows.append(judge(fault, flavour, observe(folder, fault.name, flavour)))
    return rows


def render(rows: list[Row]) -> str:
    """A Markdown table (it goes into docs/validation.md as is)."""
    head = ("| # | planted fault | flavour | expected (plain / sanitizer / Xid) | plain seen? | "
            "sanitizer seen? | Xid seen? | twin clean? | mapped |")
    lines = [head, "|" + "---|" * 9]
    for r in rows:
        n = catalog.get(r.name).number
        cells = (str(n), r.name, r.flavour, r.expected, r.plain, r.sanitizer, r.xid, r.twin, r.mapped)
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    ok = sum(r.ok for r in rows)
    lines.append("")
    lines.append(f"{ok} of {len(rows)} rows as expected")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m faulthunt.kernels.validate WORKDIR", file=sys.stderr)
        return 2
    workdir = Path(args[0])
    rows = rows_for(workdir)
    (workdir / "table.json").write_text(json.dumps([r.to_json() for r in rows], indent=2) + "\n")
    print(render(rows))
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
