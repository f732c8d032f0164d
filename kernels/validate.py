"""Judge a validation run: planted fault -> expected evidence -> seen? (twin -> clean?).

``scripts/validate_gpu.sh`` runs every planted fault and its twin on the GPU through
``faulthunt stress``, ``faulthunt sanitize`` (the planted test AND the twin test, under the
fault's tool) and ``faulthunt map`` (one work folder per fault/flavour, below), and also runs each
kernel directly under its compute-sanitizer tool; then ``python -m faulthunt.kernels.validate
WORKDIR`` reads what they left and prints the table.

What each verdict rests on:

* **sanitizer seen?** rests on ``faulthunt sanitize``'s findings for the planted test
  (``run/sanitizer/sanitizer.json``): a finding in the kernel the catalog names, at a source line
  inside that kernel's body (planted.cu / numba_kernels.py), whose text carries the catalog's
  ``sanitizer_line``. For a fault no tool sees, zero findings for the planted test.
* **twin clean?** rests on the twin's plain outcome in the stress run and on ``faulthunt
  sanitize``'s findings for the twin test (zero); where faulthunt sanitize did not rerun the twin
  (older work folders), on the direct compute-sanitizer run of the twin, if it ran.
* **direct run** is the kernel run alone in ``compute-sanitizer python -m
  faulthunt.kernels.runner``: a cross-check reported in its own column. A direct run that did not
  start (the H200's first run: ``CUDA_ERROR_NOT_INITIALIZED`` before the first instrumented API
  call) is said as such and does not decide the row; a direct run that ran and disagrees does.
* **mapped** says what each address's mapping rested on: which ledger, what it held (a rerun under
  compute-sanitizer has no CUPTI: it is a CUPTI subscriber itself), and the mapper's own basis
  field where it gives one.

Work folder layout, per ``<name>-<flavour>``::

    <name>-<flavour>/run/                    the faulthunt run directory (stress, sanitize, map)
    <name>-<flavour>/san_bug.txt             compute-sanitizer --tool T [opts] on the bug (runner)
    <name>-<flavour>/san_twin.txt            the same on the twin
    <name>-<flavour>/san_bug.rc, san_twin.rc exit statuses (--error-exitcode 99)

Reading is tolerant: a missing or broken file is a "not run" cell, never a crash. The judging is
pure (:func:`judge`), tested on a CPU against a real capture of the H200's first run
(tests/data/validate/) and hand-made cases.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from pathlib import Path
from typing import Any

from faulthunt.kernels import catalog
from faulthunt.records.documents import MappingEntry
from faulthunt.records.events import TestEnd
from faulthunt.rundir import RunDir

SAN_ERROR_EXIT = 99
#: plain outcomes that depend on timing/memory contents: reported, not judged
UNJUDGED_PLAIN = {"shared_race", "uninit_read"}
#: the direct run never reached the GPU: said so, never read as a sanitizer verdict
_NOT_STARTED = ("terminated before first instrumented API call", "CUDA_ERROR_NOT_INITIALIZED")
_RESULT = re.compile(r"^FAULTHUNT-KERNEL-RESULT (\{.*\})\s*$", re.M)
SOURCES = {catalog.CUDA: Path(__file__).with_name("planted.cu"),
           catalog.NUMBA: Path(__file__).with_name("numba_kernels.py")}


@dataclasses.dataclass(frozen=True)
class SanFinding:
    """One ``faulthunt sanitize`` finding, reduced to what the judge compares."""

    nodeid: str
    tool: str
    kernel: str | None     # as the finding names it (numba: dotted module path + name)
    file: str | None
    line: int | None
    text: str              # error, message and printed lines, joined


@dataclasses.dataclass(frozen=True)
class MapEntry:
    """One ``mapping.json`` entry, reduced to what the mapped column says."""

    origin: str            # sanitizer | xid
    verdict: str | None
    reason: str | None
    basis: str | None      # the mapper's own basis field, where it gives one
    attributed: str | None
    xid: int | None
    pid: int | None = None
    #: with basis "sanitizer": what the ledger alone said (the mapper's ``ledger_verdict``)
    ledger_verdict: str | None = None


@dataclasses.dataclass(frozen=True)
class Observed:
    """What one fault/flavour left behind (read from its work folder)."""

    planted_outcome: str | None      # passed | failed | crashed | hung | collateral | None (not run)
    planted_message: str
    planted_xids: tuple[int, ...]    # Xids attributed to the planted test
    twin_outcome: str | None
    twin_xids: tuple[int, ...]
    #: nodeids faulthunt sanitize reran (None: it did not run / left no sanitizer.json)
    san_tests: tuple[str, ...] | None = None
    san_findings: tuple[SanFinding, ...] = ()
    san_version: str | None = None
    san_bug_text: str | None = None  # direct compute-sanitizer output on the bug
    san_bug_rc: int | None = None
    san_twin_text: str | None = None
    san_twin_rc: int | None = None
    mapping: tuple[MapEntry, ...] = ()
    #: what the sanitizer rerun's ledger held, in words (None: no ledger there)
    rerun_ledger: str | None = None
    #: source text of the flavour's kernels (planted.cu / numba_kernels.py) for the line check
    source: str | None = None


@dataclasses.dataclass(frozen=True)
class Row:
    name: str
    flavour: str
    expected: str
    plain: str      # seen? cells: "yes: ...", "NO: ...", "n/a", "not run", "(reported) ..."
    sanitizer: str
    xid: str
    twin: str
    direct: str     # "yes: ...", "NO: ...", "did not start: ...", "not run"
    mapped: str

    @property
    def ok(self) -> bool:
        cells = (self.plain, self.sanitizer, self.xid, self.twin)
        return (not any(c.startswith(("NO", "not run")) for c in cells)
                and not self.direct.startswith("NO"))

    @property
    def direct_started(self) -> bool:
        return not self.direct.startswith(("did not start", "not run"))

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "ok": self.ok}


# --- pure helpers ---------------------------------------------------------------------------------

def kernel_span(source: str, kernel: str, flavour: str) -> tuple[int, int] | None:
    """The 1-based (first, last) source lines of ``kernel``'s definition, or None if absent.

    planted.cu: from the line declaring ``void kernel(`` to its closing ``}`` in column 0.
    numba_kernels.py: from ``def kernel(`` to the line before the next top-level statement.
    """
    lines = source.splitlines()
    if flavour == catalog.CUDA:
        pat = re.compile(r"\bvoid\s+" + re.escape(kernel) + r"\s*\(")
    else:
        pat = re.compile(r"^def\s+" + re.escape(kernel) + r"\s*\(")
    for i, text in enumerate(lines):
        if not pat.search(text):
            continue
        last = i
        for j in range(i + 1, len(lines)):
            if flavour == catalog.CUDA:
                if lines[j].startswith("}"):
                    return i + 1, j + 1
                continue
            if lines[j] and not lines[j][0].isspace():
                break
            if lines[j].strip():
                last = j
        else:
            if flavour == catalog.CUDA:
                return None
        return i + 1, last + 1
    return None


def _short_kernel(kernel: str | None) -> str | None:
    """``faulthunt.kernels.numba_kernels.add_one`` / ``a::b::add_one[abi..](..)`` -> ``add_one``."""
    if not kernel:
        return None
    base = re.split(r"[\[(]", kernel, maxsplit=1)[0]
    return re.split(r"\.|::", base)[-1] or None


def _for(findings: tuple[SanFinding, ...], test: str, name: str, flavour: str) -> list[SanFinding]:
    key = f"{test}[{name}-{flavour}]"
    return [f for f in findings if key in f.nodeid]


def _matches(fault: catalog.PlantedFault, flavour: str, f: SanFinding,
             source: str | None) -> tuple[bool, str]:
    """Whether finding ``f`` is the catalog's evidence for ``fault``, and where it points."""
    ev = fault.evidence
    where = f"{f.file}:{f.line}" if f.file and f.line else (f.file or "no source line")
    if ev.sanitizer_line and ev.sanitizer_line not in f.text:
        return False, where
    short = _short_kernel(f.kernel)
    if short is None:
        # an API-level record (e.g. CUDA_ERROR_NO_BINARY_FOR_GPU): no kernel, no device line
        return f.text.lstrip().startswith("Program hit") or "CUDA API call" in f.text, where
    want = fault.cuda_kernels[0] if fault.cuda_kernels else None
    if want is None or short != want:
        return False, where
    if f.line is not None and source is not None:
        span = kernel_span(source, want, flavour)
        if span is None or not span[0] <= f.line <= span[1]:
            return False, f"{where} (outside {want})"
    return True, f"{short} at {where}"


def _direct(text: str | None, rc: int | None, *, tool: str, line: str | None,
            want_clean: bool) -> str:
    """One direct compute-sanitizer run, in words."""
    if text is None:
        return "not run"
    m = list(_RESULT.finditer(text))
    result: dict[str, Any] = {}
    if m:
        try:
            result = json.loads(m[-1].group(1))
        except ValueError:
            result = {}
    if result.get("status") == "unavailable":
        return "not run (the kernel could not run there)"
    error = str(result.get("error") or "")
    if "Usage: compute-sanitizer" in text and not result:
        bad = re.search(r"the argument for option '([^']+)' is invalid", text)
        return ("did not start: compute-sanitizer refused "
                + (f"the argument of {bad.group(1)}" if bad else "its command line"))
    if any(s in text for s in _NOT_STARTED) and not (line and line in text):
        why = next((e for e in ("CUDA_ERROR_NOT_INITIALIZED",) if e in error + text), "")
        return f"did not start{': ' + why if why else ''}, no instrumented API call"
    if want_clean:
        if rc == SAN_ERROR_EXIT:
            return f"NO: {tool} reported errors"
        if "ERROR SUMMARY: 0 errors" in text or "RACECHECK SUMMARY: 0 hazards" in text \
                or "0 errors" in text:
            return f"yes: {tool} clean"
        return f"NO: {tool} left no summary (rc {rc})"
    if line and line in text:
        return "yes: line seen"
    return "NO: line not seen" + (f" (rc {rc})" if rc is not None else "")


def _mapped(entries: tuple[MapEntry, ...], key: str, rerun_ledger: str | None) -> str:
    """The mapped cell: each of this test's addresses, its verdict, and what that rested on."""
    parts, other = [], 0
    for e in entries:
        if e.origin == "xid":
            mine = e.attributed is not None and key in e.attributed
            if not mine and (e.attributed is not None or (e.reason or "").startswith(
                    "the ledger has no records for pid")):
                other += 1   # another job's process (validate_gpu.sh runs 10 at a time)
                continue
            label = f"Xid {e.xid or '?'}"
            ledger = "stress run's ledger" + (f", pid {e.pid}" if e.pid is not None else "")
        else:
            label = "sanitizer"
            ledger = f"rerun ledger: {rerun_ledger}" if rerun_ledger else "no rerun ledger"
        if e.basis == "sanitizer":   # the mapper's fallback (docs/mapper.md)
            base = (f"compute-sanitizer's nearest-allocation line; the ledger said "
                    f"{e.ledger_verdict or 'nothing'} ({ledger})")
        elif e.basis in (None, "ledger"):
            base = ledger
        else:
            base = e.basis
        verdict = e.verdict or ("not mapped: " + (e.reason or "no reason given"))
        parts.append(f"{label}: {verdict} [{base}]")
    if other:
        parts.append(f"{other} Xid page(s) of other processes (concurrent jobs), not this test's")
    return "; ".join(parts) or "-"


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
    tool = ev.tool or "memcheck"
    key = f"[{fault.name}-{flavour}]"
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
    # sanitizer: faulthunt sanitize's findings for the planted test
    ran = obs.san_tests is not None and any(f"test_planted{key}" in t for t in obs.san_tests)
    mine = _for(obs.san_findings, "test_planted", fault.name, flavour)
    if not ran:
        sanitizer = "not run (faulthunt sanitize left no result for the planted test)"
    elif ev.tool is None:
        sanitizer = (f"yes: clean, as expected ({tool}: 0 findings)" if not mine else
                     f"NO: {tool}: {len(mine)} finding(s), first in {mine[0].kernel or 'an API call'}")
    else:
        hits = [w for ok, w in (_matches(fault, flavour, f, obs.source) for f in mine) if ok]
        if hits:
            sanitizer = f"yes: {tool}: {hits[0]}"
        elif mine:
            where = _matches(fault, flavour, mine[0], obs.source)[1]
            sanitizer = (f"NO: {tool}: {len(mine)} finding(s), none is "
                         f"'{ev.sanitizer_line}' in {fault.cuda_kernels[0] if fault.cuda_kernels else '?'}"
                         f" (first: {mine[0].kernel or 'API call'} at {where})")
        else:
            sanitizer = f"NO: {tool}: 0 findings"
    # Xid
    if out is None or out == "skipped":
        xid = "not run"
    else:
        want, got = set(ev.xids), set(obs.planted_xids)
        if want:
            xid = ("yes: " if want <= got else "NO: ") + (", ".join(map(str, sorted(got))) or "none")
        else:
            xid = ("yes: none" if not got else "NO: " + ", ".join(map(str, sorted(got))))
    # direct runs (a cross-check, said separately)
    d_bug = _direct(obs.san_bug_text, obs.san_bug_rc, tool=tool, line=ev.sanitizer_line,
                    want_clean=ev.tool is None)
    d_twin = _direct(obs.san_twin_text, obs.san_twin_rc, tool=tool, line=None, want_clean=True)
    if d_bug.startswith("NO") or d_twin.startswith("NO"):
        direct = f"NO: bug {d_bug}; twin {d_twin}"
    elif d_bug.startswith("did not start") and d_twin == d_bug:
        direct = d_bug.replace("did not start", "did not start (bug and twin)", 1)
    elif d_bug.startswith("did not start") or d_twin.startswith("did not start"):
        direct = f"did not start: bug {d_bug}; twin {d_twin}"
    elif d_bug.startswith("not run") and d_twin.startswith("not run"):
        direct = "not run"
    else:
        direct = f"yes: bug {d_bug.removeprefix('yes: ')}; twin {d_twin.removeprefix('yes: ')}"
    # twin
    if obs.twin_outcome is None or obs.twin_outcome == "skipped":
        twin = "not run" + (" (skipped)" if obs.twin_outcome else "")
    else:
        parts = [f"plain {obs.twin_outcome}"]
        good = obs.twin_outcome == "passed" and not obs.twin_xids
        twin_ran = obs.san_tests is not None and any(f"test_twin{key}" in t for t in obs.san_tests)
        if twin_ran:
            theirs = _for(obs.san_findings, "test_twin", fault.name, flavour)
            parts.append(f"{tool} clean" if not theirs else f"{tool} NOT clean ({len(theirs)} finding(s))")
            good = good and not theirs
        elif d_twin.startswith(("yes", "NO")):
            parts.append(f"direct {tool} {'clean' if d_twin.startswith('yes') else 'NOT clean'}")
            good = good and d_twin.startswith("yes")
        else:
            parts.append(f"{tool} not run on the twin")
        twin = ("yes: " if good else "NO: ") + ", ".join(parts)
    mapped = _mapped(obs.mapping, key, obs.rerun_ledger)
    expected = f"{_expected_plain(fault)} | {ev.tool or 'no sanitizer'} | Xid {','.join(map(str, ev.xids)) or 'none'}"
    return Row(fault.name, flavour, expected, plain, sanitizer, xid, twin, direct, mapped)


# --- reading a work folder (I/O) ------------------------------------------------------------------

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


def _outcome(run: RunDir, test: str, name: str, flavour: str) -> tuple[str | None, str]:
    """The outcome of ``test[name-flavour]`` in a run's summary, else its events."""
    key = f"{test}[{name}-{flavour}"
    summary = run.summary()
    for f in summary.failures if summary is not None else ():
        if key in f.nodeid:
            return f.outcome, f.message or ""
    ends = [r for r in run.worker_events() if isinstance(r, TestEnd) and key in r.nodeid]
    if ends:
        return ends[-1].outcome, ends[-1].longrepr or ""
    return None, ""


def _xids(run: RunDir, test: str, name: str, flavour: str) -> tuple[int, ...]:
    key = f"{test}[{name}-{flavour}"
    summary = run.summary()
    return tuple(sorted({x.xid for x in (summary.xids if summary is not None else ())
                         if x.xid is not None and key in (x.nodeid or x.base_nodeid or "")}))


def _san_finding(f: dict[str, Any]) -> SanFinding:
    ex = f.get("example")
    if not isinstance(ex, dict):
        ex = {}
    lines = ex.get("lines")
    if not isinstance(lines, list):
        lines = []
    text = "\n".join(str(x) for x in (f.get("error"), ex.get("message"), *lines) if x)
    line = f.get("line")
    return SanFinding(nodeid=str(f.get("nodeid") or ""), tool=str(f.get("tool") or ""),
                      kernel=f.get("kernel") if isinstance(f.get("kernel"), str) else None,
                      file=f.get("file") if isinstance(f.get("file"), str) else None,
                      line=line if isinstance(line, int) else None, text=text)


def _map_entry(m: MappingEntry) -> MapEntry:
    return MapEntry(origin=m.origin or "?", verdict=m.verdict, reason=m.reason, basis=m.basis,
                    attributed=m.attributed_nodeid, xid=m.xid, pid=m.pid,
                    ledger_verdict=m.ledger_verdict)


def _rerun_ledger(ledger_dir: Path) -> str | None:
    """What the sanitizer rerun's ledger held: allocation records, and why CUPTI did not start."""
    from faulthunt.rundir import read_jsonl_dir

    if not ledger_dir.is_dir():
        return None
    recs = read_jsonl_dir(ledger_dir).records
    allocs = sum(1 for r in recs if r.get("event") == "alloc")
    cupti = next((str(r.get("message")) for r in recs if r.get("event") == "note"
                  and "CUPTI failed to start" in str(r.get("message"))), None)
    words = f"{allocs} allocation(s)"
    if cupti:
        m = re.search(r"\((\w+) \(\d+\)\)", cupti) or re.search(r"\(([^)]*)", cupti)
        words += f"; CUPTI did not start under compute-sanitizer ({m.group(1) if m else cupti})"
    return words


def observe(folder: Path, name: str, flavour: str) -> Observed:
    """Read one ``<name>-<flavour>`` work folder."""
    run = RunDir(folder / "run")
    p_out, p_msg = _outcome(run, "test_planted", name, flavour)
    t_out, _ = _outcome(run, "test_twin", name, flavour)
    san = run.sanitizer()
    san_tests: tuple[str, ...] | None = None
    findings: tuple[SanFinding, ...] = ()
    version = None
    if san is not None:
        san_tests = tuple(str(t.get("nodeid")) for t in san.tests if isinstance(t, dict))
        findings = tuple(_san_finding(f) for f in san.findings)
        version = san.tool_version
    entries = tuple(_map_entry(m) for m in run.mapping() or ())
    return Observed(
        planted_outcome=p_out, planted_message=p_msg,
        planted_xids=_xids(run, "test_planted", name, flavour),
        twin_outcome=t_out, twin_xids=_xids(run, "test_twin", name, flavour),
        san_tests=san_tests, san_findings=findings, san_version=version,
        san_bug_text=_read_text(folder / "san_bug.txt"), san_bug_rc=_rc(folder / "san_bug.rc"),
        san_twin_text=_read_text(folder / "san_twin.txt"), san_twin_rc=_rc(folder / "san_twin.rc"),
        mapping=entries, rerun_ledger=_rerun_ledger(run.sanitizer_run().ledger_dir()),
        source=_read_text(SOURCES[flavour]) if flavour in SOURCES else None)


def rows_for(workdir: Path) -> list[Row]:
    """Judge every catalog fault/flavour against ``workdir`` (missing folders read as not run)."""
    rows = []
    for fault in catalog.CATALOG:
        for flavour in fault.flavours:
            folder = workdir / f"{fault.name}-{flavour}"
            rows.append(judge(fault, flavour, observe(folder, fault.name, flavour)))
    return rows


def render(rows: list[Row]) -> str:
    """A Markdown table (it goes into docs/validation.md as is)."""
    head = ("| # | planted fault | flavour | expected (plain / sanitizer / Xid) | plain seen? | "
            "sanitizer seen? (faulthunt sanitize) | Xid seen? | twin clean? | direct compute-sanitizer run | "
            "mapped (and what it rested on) |")
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        n = catalog.get(r.name).number
        cells = (str(n), r.name, r.flavour, r.expected, r.plain, r.sanitizer, r.xid, r.twin,
                 r.direct, r.mapped)
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    ok = sum(r.ok for r in rows)
    not_started = sum(r.direct.startswith("did not start") for r in rows)
    lines.append("")
    lines.append(f"{ok} of {len(rows)} rows as expected")
    if not_started:
        lines.append(f"{not_started} row(s) whose direct compute-sanitizer run did not start "
                     "(reported, not judged: the sanitizer verdict rests on faulthunt sanitize)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m faulthunt.kernels.validate WORKDIR", file=sys.stderr)
        return 2
    workdir = Path(args[0])
    rows = rows_for(workdir)
    try:
        (workdir / "table.json").write_text(json.dumps([r.to_json() for r in rows], indent=2) + "\n")
    except OSError as exc:  # a read-only capture: the table still prints
        print(f"table.json not written: {exc}", file=sys.stderr)
    print(render(rows))
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
