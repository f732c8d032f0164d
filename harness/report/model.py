"""Everything a report says, built from one run directory (docs/rundir.md) and nothing else.

Pure once the files are read: :func:`build_model` reads the run directory through
:class:`faulthunt.rundir.RunDir` (any file may be missing or damaged; a bad line is skipped,
counted and noted) and :func:`model_from_parts` derives the model.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from faulthunt.records.documents import Identity, RunInfo, Summary
from faulthunt.records.events import Hang, OtherEvent
from faulthunt.redact import redact_argv, redact_text
from faulthunt.rundir import Layout, RunDir
from faulthunt.stats import wilson_interval
from faulthunt.summary import SEVERITY, ci95


@dataclasses.dataclass(frozen=True)
class Lane:
    """One worker process on the timeline: its test spans and point events (same clock: ``t``)."""

    worker: str
    pid: int | None
    spans: tuple[dict[str, Any], ...]      # {nodeid, base_nodeid, t0, t1, outcome}
    markers: tuple[dict[str, Any], ...]    # {kind: crash|hang|xid|recycle, t, label, nodeid}
    device: str | None = None              # the worker's CUDA_VISIBLE_DEVICES (None: not pinned)


@dataclasses.dataclass(frozen=True)
class ReportModel:
    """The content of report.md / report.json / report.html."""

    run_id: str
    reproduce: str | None
    headline: str
    rate: dict[str, Any]                   # failures, runs, ci95, text
    failures: tuple[dict[str, Any], ...]
    by_test: tuple[dict[str, Any], ...]
    xids: tuple[dict[str, Any], ...]       # decoded, with mapping verdict
    sanitizer: tuple[dict[str, Any], ...]
    sanitizer_ran: bool
    hangs: tuple[dict[str, Any], ...]
    environment: dict[str, Any]
    next_steps: tuple[str, ...]
    lanes: tuple[Lane, ...]
    t_range: tuple[float, float] | None
    notes: tuple[str, ...]                 # what was missing or damaged
    #: why this run is not real evidence (None: a real run): the demo's simulator backend
    simulated: str | None = None
    #: sanitizer.json ``outcomes``: per test and tool, found / reproduced but silent / not
    #: reproduced in K runs (empty for sanitize runs that predate them)
    sanitizer_outcomes: tuple[dict[str, Any], ...] = ()
    #: what guard mode did (summary.json ``guard`` and its one line, ``line``); None: not guarded
    guard: dict[str, Any] | None = None
    #: modules that failed to import: ``{nodeid, message}`` with pytest's first error line
    collection_errors: tuple[dict[str, Any], ...] = ()
    #: what pytest said when no test ran (its usage error, "no tests collected"); None otherwise
    no_tests_reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The report.json object (same content as the Markdown)."""
        return dataclasses.asdict(self)


def _plain(event: Any) -> dict[str, Any]:
    """A typed event as the mapping the derivation below reads (an unknown kind: its own data)."""
    if isinstance(event, OtherEvent):
        return dict(event.data)
    data: dict[str, Any] = event.to_json()
    return data


def build_model(run_dir: Path | RunDir) -> ReportModel:
    """Read ``run_dir`` (through :class:`RunDir`) and build its :class:`ReportModel`.

    Every file may be missing or damaged: what could not be read becomes a note of the report.
    """
    run = run_dir if isinstance(run_dir, RunDir) else RunDir(Path(run_dir))
    notes: list[str] = []
    docs: dict[str, Any] = {Layout.RUN: run.run_info(), Layout.IDENTITY: run.identity(),
                            Layout.SUMMARY: run.summary(), Layout.MAPPING: run.mapping()}
    sanitizer = run.sanitizer()
    events = [_plain(e) for e in run.worker_events()]
    controller = [_plain(e) for e in run.controller()]
    xids = [x.to_json() for x in run.xids()]
    damaged = {p.file for p in run.problems()}
    for name, doc in docs.items():
        # no Xid, nothing to map: a run without mapping.json lacks nothing
        nothing_to_map = name == Layout.MAPPING and not xids
        if doc is None and name not in damaged and not nothing_to_map:
            notes.append(f"{name} missing")
    for name, counted in run.skipped_lines().items():
        if counted:
            label = {"events": "events/", "controller": Layout.CONTROLLER, "xid": Layout.XID}[name]
            notes.append(f"{label}: {counted} malformed line(s) skipped")
    summary_doc = docs[Layout.SUMMARY]
    summary: dict[str, Any] = summary_doc.to_json() if isinstance(summary_doc, Summary) else {}
    if summary_doc is None and events:
        # no usable summary.json (stress killed before it finished, or damaged): derive it
        from faulthunt.summary import summarize_run
        summary = summarize_run(run)
        why = "damaged" if Layout.SUMMARY in damaged else "missing"
        notes.append(f"summary recomputed from events/ (summary.json {why})")
    if not summary.get("guard") and run.has_ledger():
        # a run recorded before summary.json had a guard section: its ledger still says
        from faulthunt.summary import guard_of_run

        guard = guard_of_run(run, docs[Layout.MAPPING] or ())
        if guard is not None:
            summary["guard"] = guard
    hang_texts: dict[str, str | None] = {}
    for rec in run.worker_events():
        if isinstance(rec, Hang):
            for rel in (rec.pyspy, rec.faulthandler):
                if rel:
                    hang_texts[rel] = _dump_text(run, rel, rec.worker)
    notes.extend(_problem_notes(run))
    info = docs[Layout.RUN]
    identity = docs[Layout.IDENTITY]
    mapping = docs[Layout.MAPPING]
    return model_from_parts(
        run_id=str((info.id if isinstance(info, RunInfo) else None) or run.path.name),
        run=info.to_json() if isinstance(info, RunInfo) else {},
        identity=identity.to_json() if isinstance(identity, Identity) else {},
        summary=summary, mapping=[m.to_json() for m in mapping or ()],
        sanitizer=sanitizer.to_json() if sanitizer is not None else None,
        events=events, controller=controller, xids=xids, hang_texts=hang_texts, notes=notes,
        run_path=str(run.path))


#: a hang's stack in the report: whole lines up to this many characters, then a count of the rest
STACK_CHARS = 4000
#: what is read of a dump file (the count of lines left out is exact below this size)
STACK_READ_CHARS = 1 << 20


def _dump_text(run: RunDir, rel: str, worker: str | None) -> str | None:
    """A hang's dump; in a run merged before merge pointed dump paths into ``runners/<runner>/``,
    found there by the runner its worker names (``node-a/gw0``)."""
    text = run.text(rel, limit=STACK_READ_CHARS)
    if text is None and worker and "/" in worker and not rel.startswith("runners/"):
        text = run.text(f"runners/{worker.split('/')[0]}/{rel}", limit=STACK_READ_CHARS)
    return text


def cut_stack(text: str, rel: str, limit: int = STACK_CHARS) -> str:
    """``text`` cut at a line boundary near ``limit`` characters, with ``... N more lines (rel)``."""
    lines = text.rstrip("\n").splitlines()
    kept: list[str] = []
    size = 0
    for line in lines:
        if kept and size + len(line) + 1 > limit:
            break
        kept.append(line)
        size += len(line) + 1
    rest = len(lines) - len(kept)
    if rest:
        kept.append(f"\u2026 {rest} more line{'s' if rest != 1 else ''} ({rel})")
    return "\n".join(kept)


#: a thread header: py-spy's ``Thread 123 (idle): "name"``, faulthandler's ``Thread 0x7f.. (most
#: recent call first):`` / ``Current thread 0x..``
_THREAD = re.compile(r"^(?:Current thread|Thread) (?:0x[0-9a-fA-F]+|\d+)\b(?:[^\n\"]*\"([^\"]*)\")?")
#: faulthunt's own threads (the hang watchdog that takes the dump, the child poller): py-spy names
#: them; faulthandler shows only their frames in faulthunt's own modules
_OWN_NAME = re.compile(r"^faulthunt-")
_OWN_FRAME = re.compile(r"[/\\](?:faulthunt|harness)[/\\](?:supervise|children)\.py\b")


def _threads(text: str) -> list[list[str]]:
    """The dump's thread blocks (header line first); what precedes the first thread is left out
    (the dump command, ``Process PID: ...``, the Python version)."""
    blocks: list[list[str]] = []
    for line in text.splitlines():
        if _THREAD.match(line):
            blocks.append([line])
        elif blocks and line.strip():
            blocks[-1].append(line)
    return blocks


def _own_thread(block: list[str]) -> bool:
    m = _THREAD.match(block[0])
    if m and m.group(1) is not None:
        return bool(_OWN_NAME.match(m.group(1)))
    return any(_OWN_FRAME.search(line) for line in block[1:])


def _stack_key(text: str, pid: Any = None) -> str:
    """What says where a process is stuck, for grouping equal stacks: each thread's frames, without
    faulthunt's own threads (the watchdog that took the dump: active in one dump, idle in the next),
    the thread ids and states, py-spy's Arguments/Locals (worker ids, start times, lengths) and
    addresses (ASLR). ``pid``: taken out of a text that is no dump of threads."""
    blocks = _threads(text)
    if not blocks:  # not a dump of threads: compared whole, less the pid, addresses and times
        key = re.sub(r"0x[0-9a-fA-F]+", "0x", text)
        key = re.sub(r" at \d+(\.\d+)?", " at T", key)
        return key if pid is None else re.sub(rf"\b(Process|Thread|pid) {int(pid)}\b", r"\1 PID", key)
    out: list[str] = []
    for block in blocks:
        if _own_thread(block):
            continue
        m = _THREAD.match(block[0])
        out.append(f"thread {m.group(1) if m and m.group(1) is not None else ''}")
        # py-spy frames are indented 4 spaces; their Arguments/Locals 8 and more
        out += [re.sub(r"0x[0-9a-fA-F]+", "0x", line.strip()) for line in block[1:]
                if not line.startswith("        ")]
    return "\n".join(out)


def _hangs(events: Sequence[Mapping[str, Any]], hang_texts: Mapping[str, str | None]) -> list[dict[str, Any]]:
    """Each hang with its stack (py-spy, else faulthandler), cut at line boundaries; a stack the
    same as an earlier hang's is said once: ``same_stack_in`` on the first, ``same_as`` on the rest."""
    hangs: list[dict[str, Any]] = []
    first_of: dict[str, dict[str, Any]] = {}
    for rec in events:
        if rec.get("event") != "hang":
            continue
        stack = source = whole = None
        for key, name in (("pyspy", "py-spy"), ("faulthandler", "faulthandler")):
            rel = rec.get(key)
            if isinstance(rel, str) and hang_texts.get(rel):
                whole = redact_text(hang_texts[rel] or "")  # py-spy --locals shows values
                stack, source = cut_stack(whole, rel), name
                break
        hang: dict[str, Any] = {"nodeid": rec.get("nodeid"), "worker": rec.get("worker"), "pid": rec.get("pid"),
                "timeout": rec.get("timeout"), "stack": stack, "stack_source": source,
                "why_no_stack": None if stack else (rec.get("pyspy_error") or rec.get("faulthandler_error")
                                                    or "no dump file in the run directory"),
                "same_stack_in": [], "same_as": None}
        if whole is not None:
            first = first_of.setdefault(f"{source}\0{_stack_key(whole, rec.get('pid'))}", hang)
            if first is not hang:
                first["same_stack_in"].append(str(rec.get("worker")))
                hang["same_as"] = str(first.get("worker"))
                hang["stack"] = None
        hangs.append(hang)
    return hangs


def _problem_notes(run: RunDir, limit: int = 10) -> list[str]:
    """What the reader could not read, for the report's notes (bad lines are counted above)."""
    named = [p for p in run.problems() if p.line is None]
    out = [f"{p.file} unreadable: {p.why}" for p in named[:limit]]
    if len(named) > limit:
        out.append(f"{len(named) - limit} more unreadable part(s) of the run")
    return out


# --- derivation (pure) ---------------------------------------------------------------------------

def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _reproduce(run: Mapping[str, Any], timeout: Any = None) -> str | None:
    """The command that makes the run again; for a merged run, each input's own command (the
    merge command reproduces nothing). ``timeout``: summary.json's ``timeout`` (a timeout the
    run took from its environment is passed on the command, which a new shell lacks)."""
    sources = run.get("merged_from")
    if isinstance(sources, list) and sources:
        return _reproduce_merged([s for s in sources if isinstance(s, Mapping)])
    return _command(run, timeout)


def _reproduce_merged(sources: Sequence[Mapping[str, Any]]) -> str | None:
    """``# on vm, vm-2`` above each distinct input command, in the order of the inputs."""
    by_command: dict[str, list[str]] = {}
    for src in sources:
        cmd = _command(src) or "(command not recorded: the input's run.json had no argv)"
        by_command.setdefault(cmd, []).append(str(src.get("runner") or src.get("id") or "?"))
    if not by_command:
        return None
    return "\n".join(f"# on {', '.join(runners)}\n{cmd}" for cmd, runners in by_command.items())


def _command(run: Mapping[str, Any], timeout: Any = None) -> str | None:
    import shlex
    argv = run.get("argv")
    if isinstance(argv, list) and argv:
        parts = _rerunnable(redact_argv([str(a) for a in argv]), timeout)
        # `python -m faulthunt` records argv[0] as the path of harness/__main__.py
        if parts and (parts[0].endswith("faulthunt") or parts[0].endswith("__main__.py")):
            parts[0] = "faulthunt"
        return " ".join(shlex.quote(p) for p in parts)
    args = run.get("pytest_args")
    if isinstance(args, list):
        return "faulthunt stress " + " ".join(shlex.quote(a) for a in redact_argv(args))
    return None


#: timeouts a run took from its environment (options.suite_timeout's sources)
_ENV_TIMEOUTS = ("PYTEST_TIMEOUT", "PYTEST_ADDOPTS")


def _rerunnable(parts: list[str], timeout: Any) -> list[str]:
    """A stress command as one pastes it again: without ``--run-dir`` (that directory holds
    this run, and stress refuses to mix a new one into it: a new run gets its own), and with
    ``--timeout S`` when the run's timeout came from its environment."""
    if "stress" not in parts[:3]:
        return parts
    end = parts.index("--") if "--" in parts else len(parts)
    out: list[str] = []
    skip = False
    for i, part in enumerate(parts):
        if skip:
            skip = False
        elif i < end and part == "--run-dir":
            skip = True
        elif not (i < end and part.startswith("--run-dir=")):
            out.append(part)
    if (isinstance(timeout, Mapping) and timeout.get("from") in _ENV_TIMEOUTS
            and isinstance(timeout.get("seconds") or 0, (int, float))
            and not any(p == "--timeout" or p.startswith("--timeout=") for p in parts[:end])):
        at = out.index("stress") + 1
        out[at:at] = ["--timeout", f"{timeout.get('seconds') or 0:g}"]  # None: it was 0, off
    return out


def _simulated(run: Mapping[str, Any]) -> str | None:
    """Why the run is not real GPU evidence, from its recorded options; None for a real run.

    ``faulthunt demo`` on a machine without a GPU runs the planted suite on numba's simulator
    with SIMULATED stand-ins and a simulated kernel log (faulthunt.demo): its failures, Xid lines
    and PCI ids are made up, and every view of the run must say so.
    """
    from faulthunt.demo import SIM_KERNEL_LOG
    from faulthunt.kernels.backend import BACKEND_ENV, SIM

    opts = run.get("options")
    if not isinstance(opts, Mapping):
        return None
    env = got if isinstance(got := opts.get("env"), Mapping) else {}
    source = str(opts.get("xid_source") or "")
    if str(env.get(BACKEND_ENV, "")).lower() == SIM or source.endswith(SIM_KERNEL_LOG):
        return ("SIMULATED run: no GPU; numba's CUDA simulator and SIMULATED stand-ins "
                "(faulthunt demo --backend sim). Its crashes, Xid lines and PCI ids are made up "
                "to show the pipeline, not evidence about any GPU.")
    return None


_WORDS = {1: "first", 2: "second", 3: "third", 4: "fourth", 5: "fifth", 6: "sixth", 7: "seventh",
          8: "eighth", 9: "ninth", 10: "tenth"}


def _ordinal(n: int) -> str:
    """'second', '17th', '21st', '112th'."""
    if n in _WORDS:
        return _WORDS[n]
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _position_text(positions: Sequence[int], plural: bool = False) -> str:
    """' on its first or second test' from the positions (1-based) at which workers failed.

    ``plural``: several workers are the subject ("4 of 6 workers on their ...").
    """
    uniq = sorted(set(positions))
    if not uniq:
        return ""
    its = "their" if plural else "its"
    words = [_ordinal(p) for p in uniq]
    if len(words) == 1:
        return f" on {its} {words[0]} test"
    if len(words) <= 4:
        return f" on {its} {', '.join(words[:-1])} or {words[-1]} test"
    return f" anywhere from {its} {words[0]} to {its} {words[-1]} test"


def _who(procs: int, bad_procs: int, unit: str = "worker") -> tuple[str, bool]:
    """'1 worker in 8' when that is exact, else '4 of 6 workers'; and whether the subject is plural.

    ``unit``: what is counted, "worker" (slots: gw0..gw3 of ``-n 4``, whatever the restarts) or
    "worker process" (runs recorded before slots were: restarted workers count again)."""
    if bad_procs == 1 or (procs % bad_procs == 0 and procs // bad_procs >= 2):
        return f"1 {unit} in {procs // bad_procs}", False
    plural = unit + ("es" if unit.endswith("s") else "s")
    return f"{bad_procs} of {procs} {plural}", True


def _workers_failing(summary: Mapping[str, Any], failing: Sequence[Mapping[str, Any]],
                     lanes: int) -> tuple[str, bool, str] | None:
    """Who failed, counted in worker slots (and the restarts said apart), or in worker processes
    for a run recorded before slots were; None when no failure names its worker."""
    workers = summary.get("workers") or {}
    slots = workers.get("slots")
    if isinstance(slots, int) and slots > 0:
        slot_of = workers.get("slot_of") or {}
        bad = len({slot_of.get(f.get("worker"), f.get("worker")) for f in failing
                   if f.get("worker")})
        if not bad:
            return None
        restarts = workers.get("restarts") or 0
        extra = (f"; {restarts} worker restart{'s' if restarts != 1 else ''}"
                 if restarts else "")
        return (*_who(slots, bad), extra)
    procs = lanes or int(workers.get("processes") or 0)
    bad_procs = len({f.get("pid") for f in failing if f.get("pid") is not None})
    if not (procs and bad_procs):
        return None
    return (*_who(procs, bad_procs, "worker process"), "")


def _failing_every_run(summary: Mapping[str, Any]) -> int:
    """How many tests failed, when each of them failed in every one of its runs and ran at least
    twice (summary.json ``by_test``); 0 otherwise (some failure is intermittent, or is collateral
    of another test's sticky error, or a test ran once: that says nothing either way)."""
    failed = [t for t in summary.get("by_test") or []
              if isinstance(t, Mapping) and (t.get("failures") or t.get("collateral"))]
    for t in failed:
        runs, failures = t.get("runs"), t.get("failures")
        if (t.get("collateral") or not isinstance(runs, int) or runs < 2
                or failures != runs):
            return 0
    return len(failed)


def _lanes(events: Sequence[Mapping[str, Any]], controller: Sequence[Mapping[str, Any]],
           xids: Sequence[Mapping[str, Any]]) -> tuple[list[Lane], dict[Any, list[dict[str, Any]]]]:
    """Timeline lanes per worker process and each pid's ordered span list."""
    spans: dict[Any, dict[str, dict[str, Any]]] = {}
    order: dict[Any, list[dict[str, Any]]] = {}
    workers: dict[Any, str] = {}
    devices: dict[Any, str] = {}
    markers: dict[Any, list[dict[str, Any]]] = {}
    span: dict[str, Any] | None
    for rec in events:
        pid = rec.get("pid")
        if pid is not None and not isinstance(pid, int):
            continue  # only a kind this faulthunt does not know can carry one: kept, not read
        worker = str(rec.get("worker") or "main")
        workers.setdefault(pid, worker)
        kind = rec.get("event")
        if rec.get("device") is not None:
            devices.setdefault(pid, str(rec["device"]))
        if kind == "start":
            span = {"nodeid": rec.get("nodeid"), "base_nodeid": rec.get("base_nodeid"), "t0": rec.get("t"),
                    "t1": None, "outcome": "crashed"}
            spans.setdefault(pid, {})[str(rec.get("nodeid"))] = span
            order.setdefault(pid, []).append(span)
        elif kind == "end":
            span = spans.get(pid, {}).get(str(rec.get("nodeid")))
            if span is not None:
                span["t1"] = rec.get("t")
                span["outcome"] = rec.get("outcome") or "passed"
        elif kind == "hang":
            markers.setdefault(pid, []).append({"kind": "hang", "t": rec.get("t"), "nodeid": rec.get("nodeid"),
                                                "label": f"hang: {rec.get('nodeid')}"})
        elif kind == "recycle":
            markers.setdefault(pid, []).append({"kind": "recycle", "t": rec.get("t"),
                                                "nodeid": rec.get("poisoned_by"),
                                                "label": f"recycled after {rec.get('poisoned_by')}"})
    for rec in controller:
        if rec.get("event") == "crash" and rec.get("kind") != "hung":
            pid = rec.get("pid")
            workers.setdefault(pid, str(rec.get("worker") or "?"))
            sig = rec.get("signal_name") or (f"exit {rec.get('exit_status')}" if rec.get("exit_status") is not None else "died")
            markers.setdefault(pid, []).append({"kind": "crash", "t": rec.get("t"), "nodeid": rec.get("nodeid"),
                                                "label": f"crash ({sig}): {rec.get('nodeid')}"})
    offset = _mono_to_wall(events)
    for x in xids:
        pid = x.get("pid") if x.get("pid") in workers else x.get("worker_pid")
        if pid not in workers:
            continue  # an Xid of another process: listed in the table, not on a lane
        t = _xid_wall_time(x, offset)
        markers.setdefault(pid, []).append({"kind": "xid", "t": t, "nodeid": x.get("nodeid"),
                                            "label": f"Xid {x.get('xid')}"})
    lanes = []
    for pid in sorted(workers, key=lambda p: (workers[p], p if isinstance(p, int) else -1)):
        # a crashed span ends where its crash marker is
        crash_t = [m["t"] for m in markers.get(pid, []) if m["kind"] == "crash" and m.get("t") is not None]
        for span in order.get(pid, []):
            if span["t1"] is None and crash_t:
                span["t1"] = max(crash_t)
        lanes.append(Lane(worker=workers[pid], pid=pid if isinstance(pid, int) else None,
                          spans=tuple(dict(s) for s in order.get(pid, [])),
                          markers=tuple(sorted(markers.get(pid, []), key=lambda m: m.get("t") or 0)),
                          device=devices.get(pid)))
    return lanes, order


def _mono_to_wall(events: Sequence[Mapping[str, Any]]) -> float | None:
    """``t - t_mono`` of the run's events (the median): turns a monotonic time into wall clock."""
    diffs = sorted(rec["t"] - rec["t_mono"] for rec in events
                   if isinstance(rec.get("t"), (int, float)) and isinstance(rec.get("t_mono"), (int, float)))
    return diffs[len(diffs) // 2] if diffs else None


def _xid_wall_time(x: Mapping[str, Any], offset: float | None) -> float | None:
    """An Xid's wall-clock time: its own ``t``, else its kernel timestamp (``ts``, the monotonic
    clock of /dev/kmsg) or the time the follower saw it (``t_seen_mono``) moved onto the wall clock."""
    if isinstance(x.get("t"), (int, float)):
        return float(x["t"])
    if offset is None:
        return None
    for key in ("ts", "t_seen_mono"):
        if isinstance(x.get(key), (int, float)):
            return float(x[key]) + offset
    return None


def _decode_xid(x: Mapping[str, Any], mapping: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    mmu = x.get("mmu") or {}
    page = mmu.get("address")
    page_hex = hex(page) if isinstance(page, int) else (str(page) if page else None)
    verdict = None
    for m in mapping:
        addr = m.get("address_int", m.get("address"))
        if page is not None and (addr == page or str(m.get("address")) == page_hex) and \
                (m.get("pid") in (None, x.get("pid"))):
            verdict = m
            break
    alloc = (verdict or {}).get("allocation") or {}
    return {"xid": x.get("xid"), "category": x.get("category"), "pid": x.get("pid"),
            "worker": x.get("worker"), "nodeid": x.get("nodeid"), "device": x.get("device"),
            "pci": x.get("pci"), "page": page_hex, "engine": mmu.get("engine"),
            "client": mmu.get("client"), "access_type": mmu.get("access_type"),
            "fault_type": mmu.get("fault_type"), "message": x.get("message"),
            "verdict": (verdict or {}).get("verdict"),
            # "child pid N (name) of worker gwK ...": an Xid from a process a test started
            "attribution": x.get("attribution"),
            "allocation": ({"address": alloc.get("address"), "size": alloc.get("size"),
                            "nodeid": alloc.get("nodeid"), "source": alloc.get("source"),
                            "freed": alloc.get("freed")} if alloc else None),
            "mapped_test": (verdict or {}).get("nodeid"),
            # a guard slot's exact verdict in the guard's own words (docs/guard.md)
            "guard_text": (verdict or {}).get("text") if (verdict or {}).get("basis") == "guard" else None}


def next_steps(summary: Mapping[str, Any], xids: Sequence[Mapping[str, Any]],
               sanitizer: Mapping[str, Any] | None, failures: Sequence[Mapping[str, Any]],
               run: str) -> list[str]:
    """'What to try next', each item derived from a piece of evidence in the run.

    ``run``: what ``--run`` takes to find this run again (its path; quoted for the shell here)."""
    import shlex

    steps: list[str] = []
    verdicts = {x.get("verdict") for x in xids}
    if "freed" in verdicts:
        steps.append("Xid 31 on a page the ledger shows already freed: a use-after-free; look at who "
                     "frees that allocation before the kernel that faults (stream order, caching allocator).")
    if verdicts & {"past_end", "before_start"}:
        steps.append("Xid 31 just past/before a live allocation: an out-of-bounds index; check the "
                     "kernel's bounds against the allocation size shown above.")
    if "pool_slack" in verdicts:
        steps.append("The fault lands in pool slack: the caching allocator hides the overrun from Xid; "
                     "rerun with the pool disabled (e.g. PYTORCH_NO_CUDA_MEMORY_CACHING=1) and under `faulthunt sanitize`.")
    for spread in summary.get("xid_spread") or []:
        if spread.get("verdict") == "same_gpu" and len(spread.get("tests") or []) > 1:
            steps.append(f"Xid {spread.get('xid')} repeats on GPU {','.join(map(str, spread.get('devices') or []))} "
                         "across different tests: suspect the machine; run `faulthunt doctor` and the suite "
                         "pinned to another GPU (`--gpus`) before blaming the code.")
    steps += _machine_steps(xids)
    sticky = [f for f in failures if f.get("sticky_cuda_error")]
    if sticky:
        steps.append("Sticky CUDA errors poison the context, so the failing line may be later than the "
                     "faulting kernel: rerun with CUDA_LAUNCH_BLOCKING=1 (stress sets it unless "
                     "--no-launch-blocking) to stop at the faulting launch.")
    if sanitizer is None and (failures or xids):
        steps.append(f"No sanitizer run yet: `faulthunt sanitize --run {shlex.quote(run)}` reruns the failing tests "
                     "under compute-sanitizer memcheck to name the kernel and source line.")
    elif sanitizer is not None and not sanitizer.get("findings") and (failures or xids):
        kinds = {o.get("outcome") for o in sanitizer.get("outcomes") or [] if isinstance(o, Mapping)}
        if "not_reproduced" in kinds and "reproduced_silent" not in kinds:
            steps.append("The failure did not come back under compute-sanitizer: rerun it more often "
                         f"(`faulthunt sanitize --run {shlex.quote(run)} --until-found -n 4`) or after "
                         "the tests that ran before it (`--with-predecessors`).")
        else:
            steps.append(f"memcheck found nothing: try `faulthunt sanitize --run {shlex.quote(run)} --tool "
                         "racecheck` / `synccheck` / `initcheck`, or `faulthunt isolate --run "
                         f"{shlex.quote(run)} NODEID` if it fails only after other tests.")
    hung = [f for f in failures if f.get("outcome") == "hung"]
    if hung:
        steps.append("A test hung: the stacks above show where; a kernel spinning on a flag or a "
                     "deadlocked stream sync is typical; "
                     f"`faulthunt stage --run {shlex.quote(run)}` makes a kit to attach a debugger.")
    few = [t for t in summary.get("by_test") or [] if t.get("failures") and t.get("runs", 0) and
           t["failures"] / t["runs"] < 1]
    if few and not steps:
        steps.append(f"The failure is flaky: `faulthunt isolate --run {shlex.quote(run)} NODEID` checks "
                     "whether it needs a "
                     "predecessor test; `faulthunt bisect` finds the commit that made it start.")
    if summary.get("stopped_by"):
        steps.append(f"The run was {_stopped_text(summary, ids=False)}: its counts cover only the runs that "
                     "ended before; rerun it to the end (a CI job: a longer timeout, or a lower "
                     "--count).")
    elif not summary.get("tests_run"):
        steps.append(_nothing_ran_step(summary))
    elif not failures and not xids:
        steps.append("Nothing failed in this run: raise --count or -n until the failure shows, "
                     "then report again.")
    return steps


def _stopped_text(summary: Mapping[str, Any], ids: bool = True) -> str:
    """``stopped by SIGINT while 2 test runs were running (t.py::test_a[1-4], ...)``; without the
    ids for a next step (steps are Markdown as written: ids go only where they are escaped)."""
    running = [str(n) for n in summary.get("interrupted") or []]
    text = f"stopped by {redact_text(str(summary['stopped_by']))}"
    if running:
        shown = ", ".join(running[:3]) + (", ..." if len(running) > 3 else "")
        text += (f" while {len(running)} test run{'s were' if len(running) != 1 else ' was'} "
                 f"running" + (f" ({shown})" if ids else ""))
    return text


def _machine_steps(xids: Sequence[Mapping[str, Any]]) -> list[str]:
    """One step per Xid number that is the machine's or the driver's, in the catalog's words
    (faulthunt.kernlog.catalog): its remedy is NVIDIA's, never one of ours."""
    from faulthunt.kernlog.catalog import classify

    steps = []
    for number in dict.fromkeys(x.get("xid") for x in xids):
        if not isinstance(number, int):
            continue
        entry = classify(number)
        if entry.culprit in ("machine", "driver"):
            whose = "the machine's" if entry.culprit == "machine" else "the driver's"
            steps.append(f"Xid {number} ({entry.description}) is {whose}, not your code: "
                         f"{entry.action}")
    return steps


def _nothing_ran_step(summary: Mapping[str, Any]) -> str:
    """The fix when no test ran: more --count cannot help a command that runs nothing."""
    reason = summary.get("no_tests_reason")
    if reason and summary.get("pytest_exit_status") == 2:  # pytest stopped at them (-n 0)
        return f"No test ran: {redact_text(str(reason))}."
    if summary.get("collection_errors") or summary.get("collection_error_count"):
        return ("No test ran: every collected module failed to import (listed above); fix the "
                "imports (install what is missing, set PYTHONPATH or the rootdir) and run again.")
    said = f" ({redact_text(str(reason))})" if reason else ""
    return (f"No test ran{said}: check the test paths, the -k expression and the pytest options "
            "of the command above (reproducer.log has pytest's whole output), then run again.")


_RUNNER_KEYS = ("host", "os", "kernel", "machine", "python", "faulthunt", "driver",
                "driver_module", "cuda_driver", "cuda")


def _with_runners(identity: Mapping[str, Any]) -> Mapping[str, Any]:
    """A merged run's identity keeps each runner's under ``runners``: the environment shown is
    theirs, one value when all runners agree, else each runner's (``vm: 580.1; vm-2: 575.5``)."""
    runners = identity.get("runners")
    if not isinstance(runners, Mapping) or not runners:
        return identity
    out = dict(identity)
    for key in _RUNNER_KEYS:
        if out.get(key):
            continue
        values = {label: r.get(key) for label, r in runners.items()
                  if isinstance(r, Mapping) and r.get(key)}
        if len(set(values.values())) == 1:
            out[key] = next(iter(values.values()))
        elif values:
            out[key] = "; ".join(f"{label}: {v}" for label, v in values.items())
    packages = [r.get("packages") for r in runners.values() if isinstance(r, Mapping)]
    if not out.get("packages") and packages and all(p == packages[0] for p in packages):
        out["packages"] = packages[0] or {}
    return out


def model_from_parts(*, run_id: str, run: Mapping[str, Any], identity: Mapping[str, Any],
                     summary: Mapping[str, Any], mapping: Sequence[Mapping[str, Any]],
                     sanitizer: Mapping[str, Any] | None, events: Sequence[Mapping[str, Any]],
                     controller: Sequence[Mapping[str, Any]], xids: Sequence[Mapping[str, Any]],
                     hang_texts: Mapping[str, str | None], notes: Sequence[str],
                     run_path: str | None = None) -> ReportModel:
    """Derive the report from already-read run-directory content (pure).

    ``run_path``: the run directory as the report was asked for it (the commands it suggests
    name it; None: by its id)."""
    # messages are what tests printed and asserted: secrets of known shapes scrubbed
    failures = [_failure_row(f) for f in summary.get("failures") or [] if isinstance(f, Mapping)]
    failures = by_severity(failures, summary.get("xids") or xids)
    host_pid = _host_pids(run)
    for f in failures:
        f.setdefault("host_pid", host_pid(f))
    lanes, order = _lanes(events, controller, xids)
    runs = _rated_runs(summary, order)
    # collateral runs say nothing of their test; lost ones never ran (said apart below)
    failing = [f for f in failures if f.get("outcome") not in ("collateral", "lost")]
    lost = len(failures) - len(failing) - sum(1 for f in failures
                                              if f.get("outcome") == "collateral")
    nfail = len(failing)
    lo, hi = wilson_interval(nfail, runs) if runs else (0.0, 1.0)
    # which test in its worker's life each failure was: the "on its first or second test" fact
    positions: list[int] = []
    for f in failing:
        for i, span in enumerate(order.get(f.get("pid"), []), 1):
            if span.get("nodeid") == f.get("nodeid"):
                positions.append(i)
                break
    outcomes = _count(f.get("outcome") for f in failing)
    # "crashes" only when every failing run took its worker down; otherwise the plain "fails"
    verb = "crashes" if outcomes and set(outcomes) == {"crashed"} else ("hangs" if outcomes and set(outcomes) == {"hung"} else "fails")
    reason = summary.get("no_tests_reason")
    rate_text = (f"{nfail} of {runs} runs failed, 95% interval {_pct(lo)}-{_pct(hi)}" if runs else
                 f"no test ran: {redact_text(str(reason))}" if reason else "no test ran")
    unrated = _unrated(summary)
    if unrated:
        rate_text += f" (not counted: {unrated}: they could not fail)"
    who = _workers_failing(summary, failing, len(lanes))
    every = _failing_every_run(summary)
    kinds = ", ".join(f"{v} {k}" for k, v in sorted(outcomes.items(), key=_outcome_order))
    if every and failing:
        # which workers and which of their tests say nothing when each failing test fails
        # every time it runs: the failure is not intermittent, and the headline says so
        headline = (f"{verb} in every run of {every} test{'s' if every != 1 else ''} ({kinds}): "
                    f"not intermittent; {nfail} of {runs} runs, 95% interval "
                    f"{_pct(lo)}-{_pct(hi)}{who[2] if who else ''}")
    elif who is not None:
        headline = (f"{verb} {who[0]}{_position_text(positions, who[1])} ({kinds}); "
                    f"{nfail} of {runs} runs, 95% interval {_pct(lo)}-{_pct(hi)}{who[2]}")
    else:
        headline = rate_text
    if lost:
        headline += (f"; {lost} test{'s' if lost != 1 else ''} lost (worker died before "
                     f"{'they' if lost != 1 else 'it'} started)")
    errors = summary.get("collection_errors") or []
    if errors:
        headline += (f"; {len(errors)} module{'s' if len(errors) != 1 else ''} failed to "
                     "import (their tests never ran)")
    if summary.get("stopped_early"):  # -n 0 ended by a crash or hang, -x, the restart budget
        headline += f"; stopped early: {redact_text(str(summary['stopped_early']))}"
    if summary.get("stopped_by"):  # Ctrl-C, a CI timeout's SIGTERM: the counts are a part
        headline += f"; {_stopped_text(summary)}"
    decoded = [_decode_xid(x, mapping) for x in (summary.get("xids") or xids)]
    hangs = _hangs(events, hang_texts)
    for h in hangs:
        h["host_pid"] = host_pid(h)
    findings = list((sanitizer or {}).get("findings") or [])
    identity = _with_runners(identity)
    gpus = identity.get("gpus") or []
    # keys as faulthunt.identity.collect_basic() writes them (docs/rundir.md identity.json)
    env = {"host": identity.get("host"), "os": identity.get("os"), "kernel": identity.get("kernel"),
           "machine": identity.get("machine"), "python": identity.get("python"),
           "faulthunt": identity.get("faulthunt"),
           "gpus": [{k: g.get(k) for k in ("index", "name", "uuid", "pci", "cc", "driver", "memory_total")}
                    for g in gpus if isinstance(g, Mapping)],
           "gpu_note": identity.get("gpu_note"),
           "driver": identity.get("driver") or next((g.get("driver") for g in gpus
                                                     if isinstance(g, Mapping) and g.get("driver")), None),
           "driver_module": identity.get("driver_module"),
           "cuda": identity.get("cuda_driver") or identity.get("cuda"),
           "packages": dict(sorted((identity.get("packages") or {}).items()))}
    # a failure with no CUDA_VISIBLE_DEVICES has no device of its own; the Xid attributed to
    # the same process says which GPU faulted
    for f in failures:
        if f.get("device") is None and f.get("pid") is not None:
            x = next((x for x in (summary.get("xids") or xids) if x.get("pid") == f.get("pid")
                      and x.get("device") is not None and x.get("nodeid") in (None, f.get("nodeid"))), None)
            if x is not None:
                f["device"] = f"{x['device']} (from Xid)"
    ts = [s[k] for lane in lanes for s in lane.spans for k in ("t0", "t1") if isinstance(s.get(k), (int, float))]
    ts += [m["t"] for lane in lanes for m in lane.markers if isinstance(m.get("t"), (int, float))]
    return ReportModel(
        run_id=run_id, reproduce=_reproduce(run, summary.get("timeout")), headline=headline,
        rate={"failures": nfail, "runs": runs, "ci95": ci95(nfail, runs) if runs else [0.0, 1.0], "text": rate_text,
              "outcomes": dict(sorted(outcomes.items(), key=_outcome_order))},
        failures=tuple(failures),
        # by_test in summary.json's order (summary.row_order)
        by_test=tuple(summary.get("by_test") or ()), xids=tuple(decoded),
        sanitizer=tuple(findings), sanitizer_ran=sanitizer is not None, hangs=tuple(hangs),
        environment=env,
        next_steps=tuple(next_steps(summary, decoded, sanitizer, failures, run_path or run_id)),
        lanes=tuple(lanes), t_range=(min(ts), max(ts)) if ts else None,
        notes=tuple(redact_text(n) for n in [*notes, *(w for w in summary.get("warnings") or []
                                                       if isinstance(w, str)),
                                             *(n for n in summary.get("notes") or []
                                               if isinstance(n, str))]),
        simulated=_simulated(run),
        sanitizer_outcomes=tuple(dict(o) for o in (sanitizer or {}).get("outcomes") or [] if isinstance(o, Mapping)),
        guard=_guard(summary.get("guard")),
        collection_errors=tuple(_collection_errors(summary)),
        no_tests_reason=(redact_text(str(summary["no_tests_reason"]))
                         if summary.get("no_tests_reason") else None))


def _host_pids(run: Mapping[str, Any]) -> Callable[[Mapping[str, Any]], int | None]:
    """For a merged run: a function giving a record's pid on its own host (what that host's kernel
    log says) from the merged pid and the runner its worker names; None where it is the same."""
    offsets = {str(s.get("runner")): s.get("pid_offset") for s in run.get("merged_from") or []
               if isinstance(s, Mapping) and isinstance(s.get("pid_offset"), int)}

    def host_pid(rec: Mapping[str, Any]) -> int | None:
        pid, worker = rec.get("pid"), str(rec.get("worker") or "")
        offset = offsets.get(worker.split("/", 1)[0]) if "/" in worker else None
        if not isinstance(pid, int) or offset is None or not 0 < pid - offset:
            return None
        return pid - offset
    return host_pid


def _collection_errors(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each module that failed to import with the first line of its error (secrets scrubbed)."""
    out = []
    for e in summary.get("collection_errors") or []:
        if isinstance(e, Mapping):
            text = str(e.get("message") or e.get("longrepr") or "").strip()
            first = text.splitlines()[0] if text else None
            out.append({"nodeid": e.get("nodeid"),
                        "message": redact_text(first) if first else None})
    return out


def _unrated(summary: Mapping[str, Any]) -> str:
    """``1 skipped, 2 xfailed``: the runs said apart from the rate ("" when none)."""
    outcomes = summary.get("outcomes")
    if not isinstance(outcomes, Mapping):
        return ""
    return ", ".join(f"{outcomes[k]} {k}" for k in ("skipped", "xfailed", "xpassed")
                     if outcomes.get(k))


def _rated_runs(summary: Mapping[str, Any], order: Mapping[Any, list[dict[str, Any]]]) -> int:
    """Runs that could have failed: skipped, xfailed, xpassed, collateral and lost runs are
    outside every rate (a run that skipped says nothing about how often the test fails)."""
    from faulthunt.summary import rated_runs

    outcomes = summary.get("outcomes")
    if isinstance(outcomes, Mapping) and outcomes:
        return rated_runs(outcomes)
    return int(summary.get("tests_run") or sum(len(v) for v in order.values()))


#: the Failures tables' order: what took a worker down first, a plain assertion last
_SEVERITY = SEVERITY


def _outcome_order(item: tuple[str, int]) -> tuple[int, str]:
    """Outcome counts in the order of :data:`_SEVERITY` (the worst first), others after by name."""
    return _SEVERITY.get(item[0], len(_SEVERITY)), item[0]


def _failure_row(f: Mapping[str, Any]) -> dict[str, Any]:
    """A summary.json failure for the report: its message scrubbed of secrets; a failed fixture
    of a run recorded before ``error`` was kept apart (``failed`` with ``phase``) reads ``error``."""
    row = dict(f)
    if isinstance(row.get("message"), str):
        row["message"] = redact_text(row["message"])
    if row.get("outcome") == "failed" and row.get("phase"):
        row["outcome"] = "error"
    return row


def _severity(f: Mapping[str, Any], xid_keys: set[tuple[Any, Any]]) -> int:
    outcome = str(f.get("outcome"))
    if outcome in ("crashed", "hung"):
        return _SEVERITY[outcome]
    if (f.get("pid"), f.get("nodeid")) in xid_keys or (None, f.get("nodeid")) in xid_keys:
        return _SEVERITY["xid"]
    if outcome == "error" or (outcome == "failed" and f.get("phase")):  # a failed fixture
        return _SEVERITY["error"]
    if outcome == "failed":
        return _SEVERITY["failed"]
    return len(_SEVERITY)  # collateral, lost, what a newer run may add


def by_severity(failures: Sequence[dict[str, Any]],
                xids: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Failures ordered crashed, hung, Xid-attributed, error, failed (then as recorded), so a
    crash is never hidden behind a page of assertion failures."""
    keys = {(x.get("pid"), x.get("nodeid")) for x in xids if x.get("nodeid")}
    keys |= {(None, nodeid) for _pid, nodeid in keys}
    return sorted(failures, key=lambda f: _severity(f, keys))


def _guard(guard: Any) -> dict[str, Any] | None:
    """summary.json's guard section with its one line (None for a run without guard mode)."""
    from faulthunt.guard.summary import guard_line

    if not isinstance(guard, Mapping) or not guard.get("enabled"):
        return None
    line = guard_line(guard)
    catches = [dict(c) for c in guard.get("catches") or [] if isinstance(c, Mapping)]
    return {**guard, "line": line, "catches": catches}


def _count(items: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        if item:
            out[str(item)] = out.get(str(item), 0) + 1
    return out
