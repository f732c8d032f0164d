"""``faulthunt sanitize``: rerun the recorded failing tests under compute-sanitizer (the I/O edge).

Running a whole suite under compute-sanitizer costs 10-100x; ``pytest --lf`` after a killed run
reruns everything and pytest-repeat ids do not match without the same ``--count``. So this reruns
exactly the *base* tests a stress run recorded as failing (``summary.json``, or the raw
``events/`` when the run was killed before its summary), one pytest process per test and tool,
without xdist, under a per-test timeout, and turns the sanitizer's records into findings.

Everything lands in ``<run>/sanitizer/`` as it happens (docs/rundir.md, docs/sanitize.md):
``logs/NNN-<tool>.log`` (sanitizer text), ``logs/NNN-<tool>.pytest.log`` (the test's own output),
``xml/NNN-<tool>.xml``, and the combined ``sanitizer.log``, ``sanitizer.xml``, ``sanitizer.json``
and ``sanitizer_summary.txt`` (rewritten after every test, so a killed sanitize keeps what it had).
The tests run with the faulthunt plugin and the allocation ledger on
(``FAULTHUNT_RUN_DIR=<run>/sanitizer/run``, ``FAULTHUNT_LEDGER=auto``) so that the mapper can put
the sanitizer's addresses next to the allocations of the very process that made them.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any
from xml.sax.saxutils import quoteattr

from faulthunt import __version__
from faulthunt.errors import FaulthuntError, InputError, RunDirError, ToolMissingError, UsageError
from faulthunt.records.sanitizer import TOOLS, Finding, SanitizerRecord
from faulthunt.rundir import (
    DEFAULT_BASE, RUN_DIR_ENV, Layout, create_run_dir, read_json, read_jsonl_dir, resolve_run_dir,
    write_json_atomic, write_text_atomic,
)
from faulthunt.sanitizer import command as cmd
from faulthunt.sanitizer.parse_text import parse_text_log
from faulthunt.sanitizer.parse_xml import parse_xml_stream
from faulthunt.sanitizer.reduce import order_findings, reduce_records
from faulthunt.sanitizer.render import print_table, render_headline, render_summary

LEDGER_ENV = "FAULTHUNT_LEDGER"
SANITIZER_LOG = "sanitizer.log"
SANITIZER_XML = "sanitizer.xml"
SANITIZER_JSON = "sanitizer.json"
SANITIZER_SUMMARY = "sanitizer_summary.txt"
#: the run directory of the rerun itself (its events and ledger)
RERUN_DIR = "run"
#: failing outcomes of summary.json worth a rerun; "collateral" tests failed because an earlier
#: test poisoned their worker, so rerunning them alone tells nothing about the culprit
RERUN_OUTCOMES = frozenset({"failed", "error", "crashed", "hung", "incomplete"})
_KILL_GRACE = 10.0


@dataclasses.dataclass(frozen=True)
class SanitizeResult:
    """What a sanitize run produced."""

    out_dir: Path
    findings: list[Finding]
    exit_status: int
    tests: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    records: int = 0
    dropped: tuple[str, ...] = ()
    tool_version: str | None = None
    notes: tuple[str, ...] = ()


# --- which tests ---------------------------------------------------------------------------------

_BRACKET = re.compile(r"^(?P<head>.*?)\[(?P<ids>.*)\]$")


def base_of(nodeid: str) -> str:
    """A node id without pytest-repeat's ``<i>-<n>`` id: ``t.py::a[f32-3-50]`` -> ``t.py::a[f32]``.

    For ids read back from pytest's cache, where the item (and its callspec) is gone; the plugin
    records ``base_nodeid`` from the callspec itself during a stress run.
    """
    m = _BRACKET.match(nodeid)
    if not m:
        return nodeid
    parts = m.group("ids").split("-")
    for i in range(len(parts) - 2, -1, -1):
        a, b = parts[i], parts[i + 1]
        if a.isdigit() and b.isdigit() and 1 <= int(a) <= int(b):
            rest = parts[:i] + parts[i + 2:]
            return f"{m.group('head')}[{'-'.join(rest)}]" if rest else m.group("head")
    return nodeid


def _unique(items: Iterable[str]) -> list[str]:
    seen: dict[str, None] = {}
    for item in items:
        if item and item not in seen:
            seen[item] = None
    return list(seen)


def tests_from_summary(summary: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """(base node ids to rerun, collateral ones left out) from a ``summary.json`` document."""
    wanted: list[str] = []
    collateral: list[str] = []
    for f in summary.get("failures") or []:
        if not isinstance(f, Mapping):
            continue
        base = str(f.get("base_nodeid") or base_of(str(f.get("nodeid") or "")))
        if str(f.get("outcome")) == "collateral":
            collateral.append(base)
        else:
            wanted.append(base)
    for x in summary.get("xids") or []:
        if isinstance(x, Mapping) and x.get("base_nodeid"):
            wanted.append(str(x["base_nodeid"]))
    wanted = _unique(wanted)
    return wanted, [c for c in _unique(collateral) if c not in wanted]


def tests_from_events(run_dir: Path) -> list[str]:
    """Failing base ids straight from ``events/*.jsonl``: for a run killed before its summary."""
    got = read_jsonl_dir(run_dir / Layout.EVENTS_DIR)
    started: dict[tuple[Any, str], str] = {}
    failing: list[str] = []
    for rec in got.records:
        nodeid = str(rec.get("nodeid") or "")
        base = str(rec.get("base_nodeid") or base_of(nodeid))
        key = (rec.get("pid"), nodeid)
        if rec.get("event") == "start":
            started[key] = base
        elif rec.get("event") == "end":
            started.pop(key, None)
            if rec.get("outcome") in RERUN_OUTCOMES:
                failing.append(base)
    failing.extend(started.values())  # a start without an end: the test took its worker down
    return _unique(failing)


def read_last_failed(cwd: Path) -> list[str]:
    """Base ids of pytest's ``--lf`` cache (``.pytest_cache/v/cache/lastfailed``) under ``cwd``."""
    path = cwd / ".pytest_cache" / "v" / "cache" / "lastfailed"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"no failing tests to rerun: {path} does not exist",
                         fix="run the suite first (pytest or `faulthunt stress`), or pass --run RUN") from None
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read pytest's last-failed cache {path}: {exc}",
                         fix="delete .pytest_cache and rerun the suite") from exc
    if not isinstance(data, dict):
        raise InputError(f"{path} is not pytest's last-failed cache", fix="delete .pytest_cache and rerun the suite")
    return _unique(base_of(str(k)) for k, v in data.items() if v)


def select_tests(run_dir: Path) -> tuple[list[str], list[str], str]:
    """(tests to rerun, collateral left out, where the list came from) for a run directory."""
    summary = read_json(run_dir / Layout.SUMMARY, default=None)
    if isinstance(summary, Mapping):
        wanted, collateral = tests_from_summary(summary)
        return wanted, collateral, Layout.SUMMARY
    return tests_from_events(run_dir), [], f"{Layout.EVENTS_DIR}/ (no {Layout.SUMMARY}: the run did not finish)"


# --- running -------------------------------------------------------------------------------------

def pytest_argv(nodeid: str, out_dir: Path, python: str = sys.executable) -> list[str]:
    """The pytest command for one test: no xdist, its own cache dir, no pytest-timeout interference."""
    argv = [python, "-m", "pytest", "-p", "faulthunt", "-q", "-rfE", "--color=no",
            # the user's .pytest_cache (their --lf list) stays as it was
            "-o", f"cache_dir={out_dir / 'pytest_cache'}"]
    if importlib.util.find_spec("xdist") is not None:
        argv += ["-n", "0"]  # overrides an `-n` in the user's addopts
    if importlib.util.find_spec("pytest_timeout") is not None:
        argv += ["--timeout", "0"]  # the rerun has its own, longer per-test timeout
    argv.append(nodeid)
    return argv


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    for sig, wait in ((signal.SIGTERM, _KILL_GRACE), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _run_one(argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], output: Path,
             timeout: float) -> tuple[int | None, bool, float]:
    """Run one sanitizer+pytest command; (exit status, timed out, seconds)."""
    t0 = time.monotonic()
    with open(output, "wb") as fh:
        try:
            proc = subprocess.Popen(list(argv), cwd=cwd, env=dict(env), stdout=fh,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        except OSError as exc:
            raise InputError(f"cannot run {argv[0]}: {exc.strerror}",
                             fix="check that compute-sanitizer and python are executable") from exc
        try:
            rc: int | None = proc.wait(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            rc, timed_out = proc.returncode, True
        except BaseException:
            _kill_group(proc)  # Ctrl-C: leave no sanitizer behind
            raise
    return rc, timed_out, time.monotonic() - t0


def _read(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""


def salvage_xml(text: str) -> tuple[str, int, bool]:
    """A well-formed ``<ComputeSanitizerOutput>`` with every complete record of ``text``.

    (document, records, whole document was intact). A file cut off by a timeout kill loses only
    its unfinished record.
    """
    parser = ET.XMLPullParser(events=("start", "end"))
    kept: list[ET.Element] = []
    depth = 0
    intact = True
    step = 1 << 16
    try:
        for pos in range(0, len(text), step):
            parser.feed(text[pos:pos + step])
            for event, el in parser.read_events():
                if el.tag != "record":
                    continue
                if event == "start":
                    depth += 1
                else:
                    depth -= 1
                    if depth == 0:
                        kept.append(el)
        parser.close()
    except ET.ParseError:
        intact = False  # the events read before the error are kept
    body = "".join(ET.tostring(el, encoding="unicode") for el in kept)
    attr = "" if intact else ' faulthunt_truncated="true"'
    return f"<ComputeSanitizerOutput{attr}>{body}</ComputeSanitizerOutput>", len(kept), intact and bool(text.strip())


def merged_xml(parts: Sequence[tuple[Mapping[str, Any], str]]) -> str:
    """One document holding each test's XML: ``<FaulthuntSanitizer><test nodeid= tool=>...``."""
    out = ['<?xml version="1.0" encoding="utf-8"?>', "<FaulthuntSanitizer>"]
    for meta, text in parts:
        doc, _, _ = salvage_xml(text)
        out.append(f"<test nodeid={quoteattr(str(meta.get('nodeid')))} tool={quoteattr(str(meta.get('tool')))} "
                   f"exit_status={quoteattr(str(meta.get('exit_status')))}>{doc}</test>")
    out.append("</FaulthuntSanitizer>")
    return "\n".join(out) + "\n"


def _map_addresses(run_dir: Path, findings: Sequence[Finding]) -> str | None:
    """Let the mapper put sanitizer addresses next to ledger allocations; a note on what happened."""
    if not any(f.address_range for f in findings):
        return None
    try:
        from faulthunt.mapper import map_run  # engineer L's area; optional here
    except ImportError:
        return "addresses not mapped to allocations: faulthunt.mapper is not available in this build"
    try:
        verdicts = map_run(run_dir)
    except FaulthuntError as exc:
        return f"addresses not mapped: {exc}"
    except Exception as exc:  # noqa: BLE001 - the mapper failing must not lose the sanitizer's result
        return f"addresses not mapped: the mapper failed ({type(exc).__name__}: {exc})"
    return f"mapped {len(verdicts)} address(es) to allocations: {run_dir / Layout.MAPPING}"


def _write_run_json(run_dir: Path, cwd: Path, tests: Sequence[str], started: float) -> None:
    write_json_atomic(run_dir / Layout.RUN, {
        "id": run_dir.name, "argv": list(sys.argv), "pytest_args": list(tests), "cwd": str(cwd),
        "started": started, "ended": None, "faulthunt_version": __version__, "exit_status": None,
        "kind": "sanitize",
    })


def run_sanitize(run_dir: Path | None, *, tool: str = "memcheck", timeout: float = 600,
                 last_failed: bool = False, padding: int | None = None, cwd: Path | None = None,
                 quiet: bool = False, print_limit: int | None = cmd.DEFAULT_PRINT_LIMIT,
                 report_api_errors: str | None = "no", leak_check: bool = False,
                 kernel_filters: Sequence[str] = (), tests: Sequence[str] | None = None,
                 ledger: str = "auto",
                 env: Mapping[str, str] | None = None, out: IO[str] | None = None) -> SanitizeResult:
    """Rerun the recorded failing base tests of ``run_dir`` under compute-sanitizer.

    ``tool`` is memcheck|racecheck|initcheck|synccheck|all. Without a run (``run_dir`` None and no
    latest run under ``cwd``) or with ``last_failed``, the tests come from pytest's last-failed
    cache and a new run directory is made. Raises :class:`ToolMissingError` when compute-sanitizer
    is not installed. ``tests`` overrides the selection (node ids as given). ``ledger`` is the
    allocation-ledger mode of the rerun (``off`` if a CUPTI-based ledger and the sanitizer clash:
    NVIDIA documents that compute-sanitizer does not interoperate with other CUDA tools).
    """
    log: IO[str] = out if out is not None else sys.stderr
    say = (lambda msg: None) if quiet else (lambda msg: print(f"faulthunt sanitize: {msg}", file=log, flush=True))
    tools = list(TOOLS) if tool == "all" else [tool]
    if any(t not in TOOLS for t in tools):
        raise UsageError(f"unknown tool {tool!r}", fix="use memcheck, racecheck, initcheck, synccheck or all")
    base_env = dict(os.environ if env is None else env)
    exe = cmd.require_compute_sanitizer(base_env)
    info = cmd.probe(exe, env=base_env)
    here = Path(cwd) if cwd is not None else Path.cwd()
    notes: list[str] = []
    started = time.time()

    if run_dir is None and not last_failed:
        try:
            run_dir = resolve_run_dir(None, base=here / DEFAULT_BASE)
        except RunDirError:
            notes.append("no faulthunt run found: rerunning pytest's last-failed tests")
            last_failed = True
    collateral: list[str] = []
    if tests is not None:
        selected, source = list(tests), "the command line"
    elif last_failed:
        selected, source = read_last_failed(here), "pytest's last-failed cache"
    else:
        assert run_dir is not None
        selected, collateral, source = select_tests(run_dir)
    if run_dir is None:
        run_dir = create_run_dir(base=here / DEFAULT_BASE)
        _write_run_json(run_dir, here, selected, started)
    if cwd is None:
        recorded = read_json(run_dir / Layout.RUN, default={})
        rec_cwd = recorded.get("cwd") if isinstance(recorded, Mapping) else None
        if rec_cwd and Path(rec_cwd).is_dir():
            here = Path(rec_cwd)
    out_dir = run_dir / Layout.SANITIZER_DIR
    for sub in ("logs", "xml"):
        (out_dir / sub).mkdir(parents=True, exist_ok=True)
    rerun_dir = create_run_dir(out_dir / RERUN_DIR)
    if collateral:
        notes.append(f"left out {len(collateral)} collateral test(s) (failed only because an earlier test "
                     f"poisoned their worker): {', '.join(collateral[:5])}")
    say(f"compute-sanitizer {info.version or '?'} at {info.path}")
    say(f"{len(selected)} test(s) to rerun from {source}" + (f" with {', '.join(tools)}" if selected else ""))

    env_run = dict(base_env)
    env_run.update({RUN_DIR_ENV: str(rerun_dir), LEDGER_ENV: ledger,
                    "PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1"})
    for var in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        env_run.pop(var, None)

    test_meta: list[dict[str, Any]] = []
    findings: list[Finding] = []
    log_parts: list[str] = []
    xml_parts: list[tuple[Mapping[str, Any], str]] = []
    dropped: dict[str, None] = {}
    total_records = 0
    n = 0

    def flush(final: bool) -> None:
        ordered = order_findings(findings)
        write_text_atomic(out_dir / SANITIZER_LOG, "".join(log_parts))
        write_text_atomic(out_dir / SANITIZER_XML, merged_xml(xml_parts))
        doc = {
            "findings": [f.to_json() for f in ordered], "records": total_records, "tests": test_meta,
            "exit_status": status(ordered) if final else None, "complete": final,
            "headline": render_headline(ordered[0]) if ordered else None,
            "tool_path": info.path, "tool_version": info.version, "dropped": list(dropped),
            "selected_from": source, "collateral": collateral, "notes": notes,
        }
        write_json_atomic(out_dir / SANITIZER_JSON, doc)
        write_text_atomic(out_dir / SANITIZER_SUMMARY, render_summary(
            ordered, tests=test_meta, dropped=list(dropped), tool_version=info.version,
            records=total_records, notes=notes))

    def status(ordered: Sequence[Finding]) -> int:
        if ordered or any(t.get("timed_out") for t in test_meta):
            return 1
        if test_meta and all(t.get("tool_error") for t in test_meta):
            return ToolMissingError.exit_code  # nothing could be checked: as good as no tool
        return 0

    flush(False)
    for nodeid in selected:
        for t in tools:
            n += 1
            stem = f"{n:03d}-{t}"
            log_path = out_dir / "logs" / f"{stem}.log"
            out_path = out_dir / "logs" / f"{stem}.pytest.log"
            xml_path = out_dir / "xml" / f"{stem}.xml"
            for stale in (log_path, xml_path):
                stale.unlink(missing_ok=True)
            plan = cmd.build_command(info, tool=t, log_file=str(log_path), xml_file=str(xml_path),
                                     print_limit=print_limit, report_api_errors=report_api_errors,
                                     padding=padding, leak_check=leak_check, kernel_filters=kernel_filters)
            for d in plan.dropped:
                dropped.setdefault(d.render(), None)
            argv = list(plan.argv) + pytest_argv(nodeid, out_dir)
            say(f"[{n}/{len(selected) * len(tools)}] {t} {nodeid}")
            rc, timed_out, secs = _run_one(argv, cwd=here, env=env_run, output=out_path, timeout=timeout)
            text = _read(log_path) if plan.log_file else _read(out_path)
            parsed = parse_text_log(text, tool=t)
            xml_text = _read(xml_path) if plan.xml_file else ""
            xml_records, xml_ok = parse_xml_stream(xml_text) if xml_text else ([], False)
            records: list[SanitizerRecord] = list(parsed.records) or xml_records
            total_records += len(records)
            test_findings = reduce_records(records, nodeid=nodeid)
            findings.extend(test_findings)
            meta = {
                "nodeid": nodeid, "tool": t, "exit_status": rc, "timed_out": timed_out,
                "duration": round(secs, 3), "records": len(records), "xml_records": len(xml_records),
                "xml_intact": xml_ok, "error_summary": parsed.error_summary,
                "not_printed": parsed.not_printed, "findings": len(test_findings),
                "sanitizer_errors": rc == cmd.ERROR_EXITCODE,
                "log": str(log_path.relative_to(run_dir)) if plan.log_file else None,
                "output": str(out_path.relative_to(run_dir)),
                "xml": str(xml_path.relative_to(run_dir)) if plan.xml_file else None,
                "argv": argv,
            }
            test_meta.append(meta)
            log_parts.append(f"# faulthunt sanitize: test {nodeid} tool {t} exit {rc}"
                             f"{' (timed out)' if timed_out else ''}\n{text}"
                             + ("" if text.endswith("\n") or not text else "\n"))
            if xml_text:
                xml_parts.append((meta, xml_text))
            state = "timed out" if timed_out else f"exit {rc}"
            say(f"    {state}, {len(records)} record(s), {len(test_findings)} finding(s), {secs:.1f}s")
            if timed_out:
                notes.append(f"{nodeid} [{t}] ran past the {timeout:g}s timeout and was killed; "
                             "its log holds what the sanitizer printed until then")
            elif not records and rc not in (0, None, cmd.ERROR_EXITCODE):
                errors = [n for n in parsed.notices if n.startswith(("Error", "Internal Sanitizer Error"))]
                if errors or not parsed.banners:
                    # the sanitizer could not check this test at all (no GPU, a driver mismatch,
                    # the target died before CUDA started): not a clean result
                    meta["tool_error"] = "; ".join(errors) or "no compute-sanitizer output"
                    notes.append(f"compute-sanitizer could not check {nodeid} [{t}] (exit {rc}): "
                                 f"{meta['tool_error']}; see {meta['log'] or meta['output']}")
                elif rc in (4, 5):
                    # pytest's usage error / nothing collected: the node id is gone or mistyped
                    meta["tool_error"] = f"pytest could not run the test (exit {rc})"
                    notes.append(f"pytest could not run {nodeid} (exit {rc}: no such test, or a usage "
                                 f"error); see {meta['output']}")
                else:
                    notes.append(f"{nodeid} [{t}] still fails (exit {rc}) but the sanitizer reported nothing")
            flush(False)

    ordered = order_findings(findings)
    from faulthunt.ledger.writer import seal_dead  # the rerun's dead workers: this stage collected them
    seal_dead(rerun_dir / "ledger")
    note = _map_addresses(run_dir, ordered)
    if note:
        notes.append(note)
    flush(True)
    exit_status = status(ordered)
    if not quiet:
        if ordered:
            print_table(ordered, sys.stdout)
            print(f"offending kernel: {render_headline(ordered[0])}", file=sys.stdout)
        elif exit_status == ToolMissingError.exit_code:
            print("faulthunt sanitize: could not check any test under compute-sanitizer (see the notes below)",
                  file=sys.stdout)
        else:
            print("faulthunt sanitize: no sanitizer errors" + (" (nothing to rerun)" if not selected else ""),
                  file=sys.stdout)
        for d in dropped:
            say(f"left out {d}")
        for note_text in notes:
            say(note_text)
        say(f"wrote {out_dir / SANITIZER_SUMMARY}")
    return SanitizeResult(out_dir, ordered, exit_status, test_meta, total_records, tuple(dropped),
                          info.version, tuple(notes))
