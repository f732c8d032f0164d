"""``faulthunt sanitize``: rerun the recorded failing tests under compute-sanitizer, as often as
the fault needs, on several sanitizer processes at once (the engine).

Running a whole suite under compute-sanitizer costs 10-100x, and an intermittent fault that hits
one run in eight passes a single rerun seven times in eight. So this reruns exactly the tests a
stress run recorded as failing (``summary.json``, or the raw ``events/`` when the run was killed
before its summary), each up to N times or until its fault shows, spread over ``parallel``
sanitizer processes, and says per test what the runs add up to: ``found`` (in which run),
``reproduced, sanitizer silent``, or ``not reproduced in K runs`` with the failure rate that rules
out. Three steps: :mod:`.plan` (which ids, how many runs), :mod:`.collect` (the processes),
:mod:`.analyse` (the outcomes); :mod:`faulthunt.report.sanitize` renders; the CLI picks the exit
status.

Everything lands in ``<run>/sanitizer/`` as it happens (docs/rundir.md, docs/sanitize.md):
``logs/NNN-<tool>.log`` (sanitizer text), ``logs/NNN-<tool>.pytest.log`` (the test's own output),
``xml/NNN-<tool>.xml``, the appended ``sanitizer.log``, and ``sanitizer.xml``, ``sanitizer.json``
and ``sanitizer_summary.txt`` (rewritten after every run, so a killed sanitize keeps what it had).
The tests run with the faulthunt plugin and the allocation ledger on
(``FAULTHUNT_RUN_DIR=<run>/sanitizer/run``, ``FAULTHUNT_LEDGER=auto``) so that the mapper can put
the sanitizer's addresses next to the allocations of the very process that made them.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, cast
from xml.sax.saxutils import quoteattr

from faulthunt.errors import FaulthuntError, RunDirError, UsageError
from faulthunt.guard.config import GUARD_ENV
from faulthunt.nodeids import check_node_id
from faulthunt.records.documents import RunInfo, SanitizeOutcome
from faulthunt.records.sanitizer import TOOLS, Finding
from faulthunt.report.sanitize import render_headline, render_summary
from faulthunt.rundir import (
    DEFAULT_BASE, RUN_DIR_ENV, Layout, RunDir, create_run_dir, resolve_run_dir, write_json_atomic,
    write_run_info, write_text_atomic,
)
from faulthunt.sanitizer import command as cmd
from faulthunt.sanitizer.analyse import Analysis, RunResult, analyse
from faulthunt.sanitizer.collect import Collector, Lane, Settings, have_repeat, pytest_argv
from faulthunt.sanitizer.parse_xml import parse_xml_stream
from faulthunt.sanitizer.plan import (
    ID_MODES, RERUN_OUTCOMES, Target, base_of, given_targets, plan_targets, read_last_failed,
    recorded_failures, select_tests, split_repeat, tests_from_events, tests_from_summary,
)

LEDGER_ENV = "FAULTHUNT_LEDGER"
SANITIZER_LOG = "sanitizer.log"
SANITIZER_XML = "sanitizer.xml"
SANITIZER_JSON = "sanitizer.json"
SANITIZER_SUMMARY = "sanitizer_summary.txt"
#: the run directory of the rerun itself (its events and ledger)
RERUN_DIR = "run"
#: the whole sanitize stops starting runs after this many seconds unless --budget says otherwise
DEFAULT_BUDGET = 30 * 60.0

__all__ = ["SanitizeOptions", "SanitizeResult", "run_sanitize", "select_tests", "base_of",
           "split_repeat", "read_last_failed", "tests_from_summary", "tests_from_events",
           "pytest_argv", "salvage_xml", "merged_xml", "parse_xml_stream", "RERUN_OUTCOMES"]


@dataclasses.dataclass(frozen=True)
class SanitizeOptions:
    """What ``faulthunt sanitize`` was asked to do (docs/sanitize.md)."""

    #: memcheck | racecheck | initcheck | synccheck | all
    tool: str = "memcheck"
    #: runs per test (None: enough for the stress run's failure rate, else one)
    count: int | None = None
    #: no run limit: until the fault shows, within the budget
    until_found: bool = False
    #: every asked run even after the fault showed (its rate under the sanitizer, timings)
    keep_going: bool = False
    #: seconds after which no run starts and the runs going are stopped (None: no limit)
    budget: float | None = DEFAULT_BUDGET
    #: sanitizer processes at once
    parallel: int = 1
    #: auto | exact | base (faulthunt.sanitizer.plan)
    ids: str = "auto"
    #: replay the stress worker's sequence before each run, in order
    with_predecessors: bool = False
    #: seconds one run may take before its process group is killed
    timeout: float = 600.0
    padding: int | None = None
    print_limit: int | None = cmd.DEFAULT_PRINT_LIMIT
    report_api_errors: str | None = "no"
    leak_check: bool = False
    kernel_filters: tuple[str, ...] = ()
    #: allocation-ledger mode of the reruns (``off`` if a CUPTI ledger and the sanitizer clash:
    #: NVIDIA documents that compute-sanitizer does not interoperate with other CUDA tools)
    ledger: str = "auto"
    #: node ids to rerun instead of the recorded ones (as given)
    tests: tuple[str, ...] | None = None
    #: take the tests from pytest's last-failed cache
    last_failed: bool = False
    cwd: Path | None = None
    env: Mapping[str, str] | None = None

    def tools(self) -> list[str]:
        return list(TOOLS) if self.tool == "all" else [self.tool]

    def check(self) -> None:
        """A :class:`UsageError` with the fix for options that cannot work."""
        if self.tool != "all" and self.tool not in TOOLS:
            raise UsageError(f"unknown tool {self.tool!r}",
                             fix="use memcheck, racecheck, initcheck, synccheck or all")
        if self.count is not None and self.count < 1:
            raise UsageError(f"--count {self.count}: a test needs at least one run", fix="use --count 1 or more")
        if self.parallel < 1:
            raise UsageError(f"-n {self.parallel}: at least one sanitizer process", fix="use -n 1 or more")
        if self.budget is not None and self.budget <= 0:
            raise UsageError(f"--budget {self.budget:g}: no time to run anything",
                             fix="give a positive budget such as 10m, or none for no limit")
        if not 0 < self.timeout < float("inf"):  # nan too
            raise UsageError(f"--timeout {self.timeout:g}: must be a finite positive number of seconds",
                             fix="give seconds per run, e.g. 600")
        if self.ids not in ID_MODES:
            raise UsageError(f"--ids {self.ids!r}", fix="use auto, exact or base")
        if self.until_found and self.keep_going:
            raise UsageError("--until-found stops at the first finding; --keep-going never stops",
                             fix="use --count N --keep-going for every run, or --until-found alone")


@dataclasses.dataclass(frozen=True)
class SanitizeResult:
    """What a sanitize run produced (the CLI turns it into an exit status)."""

    out_dir: Path
    #: each test's findings from the run where they first showed, offending kernel first
    findings: list[Finding]
    outcomes: tuple[SanitizeOutcome, ...] = ()
    #: one entry per sanitizer run
    tests: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    records: int = 0
    dropped: tuple[str, ...] = ()
    tool_version: str | None = None
    notes: tuple[str, ...] = ()
    wall_s: float = 0.0


# --- the merged XML ------------------------------------------------------------------------------

def salvage_xml(text: str) -> tuple[str, int, bool]:
    """A well-formed ``<ComputeSanitizerOutput>`` with every complete record of ``text``.

    (document, records, whole document was intact). A file cut off by a timeout kill loses only
    its unfinished record.
    """
    parser: ET.XMLPullParser[ET.Element] = ET.XMLPullParser(events=("start", "end"))
    kept: list[ET.Element] = []
    depth = 0
    intact = True
    step = 1 << 16
    try:
        for pos in range(0, len(text), step):
            parser.feed(text[pos:pos + step])
            # typeshed's event union includes queue entries that start/end events never are
            for event, el in cast("Iterator[tuple[str, Any]]", parser.read_events()):
                if not isinstance(el, ET.Element) or el.tag != "record":
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
    """One document holding each run's XML: ``<FaulthuntSanitizer><test nodeid= tool= run=>...``."""
    return _wrap_xml([(meta, salvage_xml(text)[0]) for meta, text in parts])


def _wrap_xml(parts: Sequence[tuple[Mapping[str, Any], str]]) -> str:
    """:func:`merged_xml` of parts already salvaged."""
    out = ['<?xml version="1.0" encoding="utf-8"?>', "<FaulthuntSanitizer>"]
    for meta, doc in parts:
        run = f" run={quoteattr(str(meta['run']))}" if meta.get("run") is not None else ""
        out.append(f"<test nodeid={quoteattr(str(meta.get('nodeid')))} tool={quoteattr(str(meta.get('tool')))}"
                   f"{run} exit_status={quoteattr(str(meta.get('exit_status')))}>{doc}</test>")
    out.append("</FaulthuntSanitizer>")
    return "\n".join(out) + "\n"


def _map_addresses(run_dir: Path, findings: Sequence[Finding]) -> str | None:
    """Let the mapper put sanitizer addresses next to ledger allocations; a note on what happened."""
    if not any(f.address_range for f in findings):
        return None
    from faulthunt.mapper import map_run

    try:
        verdicts = map_run(run_dir)
    except FaulthuntError as exc:
        return f"addresses not mapped: {exc}"
    except Exception as exc:  # noqa: BLE001 - the mapper failing must not lose the sanitizer's result
        return f"addresses not mapped: the mapper failed ({type(exc).__name__}: {exc})"
    return f"mapped {len(verdicts)} address(es) to allocations: {run_dir / Layout.MAPPING}"


# --- selection -----------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class _Selection:
    run_dir: Path
    targets: list[Target]
    collateral: list[str]
    source: str
    cwd: Path
    run_info: RunInfo | None
    #: pytest's rootdir in the run the ids come from (None: pytest's cache, or not recorded)
    rootdir: str | None


def _select(run_dir: Path | None, opts: SanitizeOptions, here: Path, notes: list[str]) -> _Selection:
    """The run directory to write into and the targets to rerun, with where they came from."""
    last_failed = opts.last_failed
    if run_dir is None and not last_failed:
        try:
            run_dir = resolve_run_dir(None, base=here / DEFAULT_BASE)
        except RunDirError:
            if opts.tests is None:
                notes.append("no faulthunt run found: rerunning pytest's last-failed tests")
            last_failed = True
    collateral: list[str] = []
    if opts.tests is not None:
        targets = given_targets(opts.tests, count=opts.count, until_found=opts.until_found)
        source = "the command line"
    elif last_failed:
        targets = plan_targets(read_last_failed(here), count=opts.count, until_found=opts.until_found,
                               ids_mode=opts.ids, have_repeat=have_repeat())
        source = "pytest's last-failed cache"
    else:
        assert run_dir is not None
        run = RunDir(run_dir)
        recorded, collateral, source = recorded_failures(run)
        targets = plan_targets(recorded, count=opts.count, until_found=opts.until_found,
                               ids_mode=opts.ids, have_repeat=have_repeat(), run=run,
                               with_predecessors=opts.with_predecessors)
    if opts.with_predecessors and (opts.tests is not None or last_failed):
        notes.append("--with-predecessors needs a stress run (its workers' sequences): each test runs alone")
    for t in targets:  # ids are data: a hand-edited run cannot smuggle an option into pytest
        for nodeid in (*t.sequence, *t.ids):
            check_node_id(nodeid, source)
    source_run = RunDir(run_dir) if run_dir is not None else None
    info = source_run.run_info() if source_run is not None else None
    # the ids are relative to the run's rootdir, which is not its cwd when the suite has its own
    # ini file in a subfolder: the reruns run in the cwd, with that rootdir pinned
    rootdir = source_run.rootdir() if source_run is not None and not last_failed else None
    if run_dir is None:
        run_dir = create_run_dir(base=here / DEFAULT_BASE)
        write_run_info(run_dir, RunInfo.begin(run_dir.name, kind="sanitize", cwd=str(here),
                                              pytest_args=[t.base for t in targets]))
    cwd = here
    if opts.cwd is None and info is not None and info.cwd and Path(info.cwd).is_dir():
        cwd = Path(info.cwd)
    return _Selection(run_dir, targets, collateral, source, cwd, info, rootdir)


def _guard(env: dict[str, str], info: RunInfo | None, notes: list[str]) -> None:
    """Guard mode in the reruns: as the environment says, else as the stress run had it."""
    if env.get(GUARD_ENV):
        notes.append(f"guard mode in the reruns: {GUARD_ENV}={env[GUARD_ENV]} (from the environment)")
        return
    spec = info.option("guard") if info is not None else None
    if isinstance(spec, str) and spec:
        env[GUARD_ENV] = spec
        notes.append(f"guard mode in the reruns: {GUARD_ENV}={spec} (as the stress run had it)")


def _prepare(out_dir: Path) -> Path:
    """A fresh ``sanitizer/`` for this sanitize: the previous one's per-run files and rerun
    directory go (its sanitizer.json is replaced anyway); returns the rerun's run directory."""
    for sub in ("logs", "xml", RERUN_DIR):
        path = out_dir / sub
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
    try:
        for sub in ("logs", "xml"):
            (out_dir / sub).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunDirError(f"cannot write {out_dir}: {exc.strerror or exc}",
                          fix="make the run directory writable") from exc
    try:
        (out_dir / SANITIZER_LOG).write_text("", encoding="utf-8")
    except OSError as exc:
        raise RunDirError(f"cannot write {out_dir / SANITIZER_LOG}: {exc.strerror or exc}",
                          fix="make the run directory writable") from exc
    return create_run_dir(out_dir / RERUN_DIR)


# --- output --------------------------------------------------------------------------------------

class _Output:
    """sanitizer.log (appended run by run), sanitizer.xml, sanitizer.json, sanitizer_summary.txt."""

    def __init__(self, out_dir: Path, info: cmd.ToolInfo, sel: _Selection, opts: SanitizeOptions,
                 notes: list[str]) -> None:
        self.out_dir, self.info, self.sel, self.opts, self.notes = out_dir, info, sel, opts, notes
        self.runs: list[RunResult] = []
        self.xml_parts: list[tuple[Mapping[str, Any], str]] = []
        self.dropped: Sequence[str] = ()
        self.t0 = time.monotonic()

    def add(self, result: RunResult, log_text: str, xml_text: str) -> None:
        self.runs.append(result)
        head = (f"# faulthunt sanitize: test {result.target} tool {result.tool} run {result.run} "
                f"exit {result.exit_status}"
                + (" (timed out)" if result.timed_out else "")
                + (f" (stopped: {result.cancelled})" if result.cancelled else "") + "\n")
        with open(self.out_dir / SANITIZER_LOG, "a", encoding="utf-8") as fh:
            fh.write(head + log_text + ("" if log_text.endswith("\n") or not log_text else "\n"))
        if result.records and xml_text:
            # only runs with records: a thousand clean runs add nothing to read
            self.xml_parts.append(({"nodeid": result.target, "tool": result.tool, "run": result.run,
                                    "exit_status": result.exit_status}, salvage_xml(xml_text)[0]))
            write_text_atomic(self.out_dir / SANITIZER_XML, _wrap_xml(self.xml_parts))

    def analysis(self, lanes: Sequence[Lane]) -> Analysis:
        stopped = {(lane.target.base, lane.tool): lane.stopped for lane in lanes if lane.stopped}
        return analyse(self.sel.targets, self.opts.tools(), self.runs, stopped=stopped,
                       notes=_outcome_notes(self.dropped))

    def write(self, analysis: Analysis, *, complete: bool) -> None:
        findings = list(analysis.findings)
        tests = [{**r.meta, "state": r.state} for r in self.runs]
        doc = {
            "findings": [f.to_json() for f in findings], "records": analysis.records, "tests": tests,
            "outcomes": [o.to_json() for o in analysis.outcomes], "exit_status": None,
            "complete": complete, "headline": render_headline(findings[0]) if findings else None,
            "tool_path": self.info.path, "tool_version": self.info.version, "dropped": list(self.dropped),
            "selected_from": self.sel.source, "collateral": self.sel.collateral, "notes": self.notes,
            "parallel": self.opts.parallel, "wall_s": round(time.monotonic() - self.t0, 3),
        }
        write_json_atomic(self.out_dir / SANITIZER_JSON, doc)
        if complete and not self.xml_parts:
            write_text_atomic(self.out_dir / SANITIZER_XML, _wrap_xml([]))
        write_text_atomic(self.out_dir / SANITIZER_SUMMARY, render_summary(
            findings, tests=tests, dropped=list(self.dropped), tool_version=self.info.version,
            records=analysis.records, notes=self.notes, outcomes=analysis.outcomes))


def _outcome_notes(dropped: Sequence[str]) -> list[str]:
    """What a not-reproduced outcome must also say about this compute-sanitizer."""
    if any(d.startswith("--target-processes") for d in dropped):
        return ["this compute-sanitizer cannot follow the test's child processes "
                "(--target-processes needs 2020.1.1+): a fault in a child is not seen"]
    return []


def _run_line(r: RunResult, planned: int | None) -> str:
    of = f"/{planned}" if planned else ""
    state = {"found": f"found ({r.records} record(s))", "failed": "failed, no sanitizer record",
             "cancelled": f"stopped ({r.cancelled})", "timed_out": "timed out",
             "not_checked": f"not checked ({r.tool_error or f'exit {r.exit_status}'})"}.get(r.state, r.state)
    return f"[{r.tool}] {r.target} run {r.run}{of}: {state}, {r.duration:.1f}s"


def _printer(out: IO[str] | None) -> Callable[[str], None]:
    log = out if out is not None else sys.stderr
    return lambda msg: print(f"faulthunt sanitize: {msg}", file=log, flush=True)


# --- the engine ----------------------------------------------------------------------------------

def run_sanitize(run_dir: Path | None, opts: SanitizeOptions | None = None, *,
                 progress: Callable[[str], None] | None = None, quiet: bool = False,
                 out: IO[str] | None = None, **fields: Any) -> SanitizeResult:
    """Rerun the recorded failing tests of ``run_dir`` under compute-sanitizer (docs/sanitize.md).

    ``opts`` (or its fields as keywords) says how; ``progress`` gets one line per step and run
    (default: stderr, none with ``quiet``). Without a run (``run_dir`` None and no latest run
    under the working directory) or with ``last_failed``, the tests come from pytest's
    last-failed cache and a new run directory is made. Raises :class:`ToolMissingError` when
    compute-sanitizer is not installed. Prints nothing else: the CLI renders the result.
    """
    if "kernel_filters" in fields:
        fields["kernel_filters"] = tuple(fields["kernel_filters"])
    if fields.get("tests") is not None:
        fields["tests"] = tuple(fields["tests"])
    opts = dataclasses.replace(opts or SanitizeOptions(), **fields)
    opts.check()
    say = progress or (_printer(out) if not quiet else (lambda msg: None))
    base_env = dict(os.environ if opts.env is None else opts.env)
    info = cmd.probe(cmd.require_compute_sanitizer(base_env), env=base_env)
    notes: list[str] = []
    # absolute: every path handed to compute-sanitizer and pytest is read from the test's cwd
    here = (Path(opts.cwd) if opts.cwd is not None else Path.cwd()).resolve()
    sel = _select(Path(run_dir).resolve() if run_dir is not None else None, opts, here, notes)
    out_dir = sel.run_dir / Layout.SANITIZER_DIR
    rerun_dir = _prepare(out_dir)
    if sel.collateral:
        notes.append(f"left out {len(sel.collateral)} collateral test(s) (failed only because an earlier "
                     f"test poisoned their worker): {', '.join(sel.collateral[:5])}")
    env = _rerun_env(base_env, rerun_dir, opts, sel, notes)
    _announce(say, info, sel, opts)
    no_gpu = _no_gpu_note(env)
    if no_gpu:
        say(no_gpu)
        notes.append(no_gpu)

    output = _Output(out_dir, info, sel, opts, notes)
    lanes = [Lane(t, tool) for t in sel.targets for tool in opts.tools()]
    planned = {t.base: t.planned for t in sel.targets}

    def on_run(result: RunResult, log_text: str, xml_text: str) -> None:
        output.dropped = list(collector.dropped)
        output.add(result, log_text, xml_text)
        say(_run_line(result, planned.get(result.base)))
        output.write(output.analysis(lanes), complete=False)

    settings = Settings(out_dir, sel.cwd, env, opts.timeout, functools.partial(_build, info, opts),
                        rootdir=sel.rootdir)
    collector = Collector(settings, lanes, parallel=opts.parallel, budget=opts.budget, keep_going=opts.keep_going,
                          on_run=on_run, say=say)
    output.write(output.analysis(lanes), complete=False)
    try:
        collector.run()
    except BaseException:
        output.write(output.analysis(lanes), complete=False)  # what the runs so far say
        raise
    analysis = output.analysis(lanes)
    if any(o.order_kept is False for o in analysis.outcomes):
        notes.append("a recorded sequence did not run in its order: see tests[].tests in sanitizer.json")
    from faulthunt.ledger.writer import seal_dead  # the rerun's dead workers: this stage collected them
    seal_dead(rerun_dir / "ledger")
    note = _map_addresses(sel.run_dir, analysis.findings)
    if note:
        notes.append(note)
    output.write(analysis, complete=True)
    say(f"wrote {out_dir / SANITIZER_SUMMARY}")
    return SanitizeResult(out_dir, list(analysis.findings), analysis.outcomes,
                          [{**r.meta, "state": r.state} for r in output.runs], analysis.records,
                          tuple(output.dropped), info.version, tuple(notes),
                          round(time.monotonic() - output.t0, 3))


def _rerun_env(base: Mapping[str, str], rerun_dir: Path, opts: SanitizeOptions, sel: _Selection,
               notes: list[str]) -> dict[str, str]:
    """The reruns' environment: the plugin and ledger on, no xdist leftovers, guard mode carried."""
    env = dict(base)
    env.update({RUN_DIR_ENV: str(rerun_dir), LEDGER_ENV: opts.ledger,
                "PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1"})
    for var in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        env.pop(var, None)
    _guard(env, sel.run_info, notes)
    return env


def _no_gpu_note(env: Mapping[str, str]) -> str | None:
    """Why these reruns cannot show a GPU fault on this machine (None: a GPU is visible)."""
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        why = f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU"
    else:
        from faulthunt.nvml import device_count

        if device_count() > 0:
            return None
        why = "no GPU is visible on this machine (NVML sees none)"
    return (f"{why}: compute-sanitizer checks GPU work only, so here each test just fails or "
            "passes as it does on the CPU (a 'sanitizer silent' or 'not reproduced' outcome is "
            "unchecked); run `faulthunt sanitize` on the GPU machine (`faulthunt stage DIR` "
            "makes a kit to carry there)")


def _announce(say: Callable[[str], None], info: cmd.ToolInfo, sel: _Selection, opts: SanitizeOptions) -> None:
    """The plan in words: the tool, the tests, and for each which ids and how many runs."""
    budget = f", budget {opts.budget:g}s" if opts.budget else ""
    say(f"compute-sanitizer {info.version or '?'} at {info.path}")
    say(f"{len(sel.targets)} test(s) to rerun from {sel.source}"
        + (f" with {', '.join(opts.tools())}, {opts.parallel} sanitizer process(es) at once{budget}"
           if sel.targets else ""))
    for t in sel.targets:
        say(f"  {t.base}: {t.why}; {t.planned_why}")


def _build(info: cmd.ToolInfo, opts: SanitizeOptions, tool: str, log_file: str,
           xml_file: str) -> cmd.CommandPlan:
    return cmd.build_command(info, tool=tool, log_file=log_file, xml_file=xml_file,
                             print_limit=opts.print_limit, report_api_errors=opts.report_api_errors,
                             padding=opts.padding, leak_check=opts.leak_check,
                             kernel_filters=opts.kernel_filters)
