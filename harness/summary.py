"""The result of a stress run, computed from what the run directory recorded.

Pure core: :func:`assemble_spans`, :func:`attribute_xids`, :func:`build_summary` take the records
(typed, as :class:`faulthunt.rundir.RunDir` reads them from ``events/*.jsonl``,
``controller.jsonl`` and ``xid.jsonl``, or plain mappings) and return the summary.json object;
:func:`summarize_run` is the thin reader around them. The schema is in docs/rundir.md.

Attribution is by pid and time (docs/stress.md): an Xid line carries the pid of the process whose
channel faulted; the worker with that pid ran a known sequence of tests, each with monotonic start
and end times; the kernel timestamp of the Xid picks the test. A fault surfaces a moment after the
kernel that caused it, so an Xid that lands just after a test that failed with a sticky CUDA error
goes to that test, not to the next one. An Xid from a process a test started (a subprocess, a
multiprocessing child, a helper binary's own child: the worker records them, faulthunt.children)
goes to that test, "child pid N (name) of worker gwK"; one from an unrecorded process whose name
matches a child that exactly one running test had started goes to that test, said as a guess by
name. Xids without a pid (Xid 13 on drivers >= 570) borrow the attribution of a pid-carrying Xid
on the same GPU within a few seconds.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from faulthunt.records import run as run_records
from faulthunt.records.documents import MappingEntry, XidLine
from faulthunt.records.events import (ChildProcess, Collected, CollectError, Crash, Recycled,
                                      SessionFinish, SessionStart, WorkerUp,
                                      controller_event_from_json, worker_event_from_json)
# One canonical PCI/UUID reader for the kernel log, NVML and this module; the names stay
# importable from here (faulthunt.summary.normalize_pci / parse_gpu_uuid_lines).
from faulthunt.kernlog.pci import normalize_pci
from faulthunt.kernlog.pci import parse_gpu_uuids as parse_gpu_uuid_lines
from faulthunt.records.run import FAILING, LOST, TestSpan
from faulthunt.redact import redact_text
from faulthunt.rundir import RunDir
from faulthunt.stats import wilson_interval

#: seconds after a sticky-error test ended within which an Xid is still that test's
STICKY_GRACE_S = 3.0
#: a kernel timestamp further than this from when the follower saw the line is not trusted
CLOCK_TRUST_S = 10.0
#: window for giving a pid-less Xid the attribution of a neighbour on the same GPU
NEIGHBOUR_S = 3.0

# --- PCI / device helpers ------------------------------------------------------------------------

def build_pci_map(gpus: Iterable[Mapping[str, Any]] = (),
                  uuid_lines: Mapping[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """PCI -> {index, uuid, name} from identity's NVML GPU list and kernel-log UUID lines."""
    out: dict[str, dict[str, Any]] = {}
    for gpu in gpus:
        key = normalize_pci(str(gpu.get("pci") or "")) if gpu.get("pci") else None
        if key:
            out[key] = {"index": gpu.get("index"), "uuid": gpu.get("uuid"), "name": gpu.get("name")}
    for pci, uuid in (uuid_lines or {}).items():
        entry = out.setdefault(pci, {"index": None, "uuid": None, "name": None})
        if not entry.get("uuid"):
            entry["uuid"] = uuid
    return out


def _device_label(index: Any, uuid: Any, pci: str | None) -> str | None:
    if index is not None:
        return str(index)
    return uuid or pci


# --- spans ---------------------------------------------------------------------------------------

def _worker_events(items: Iterable[Any]) -> list[Any]:
    """Typed worker events; mappings (as tests and older callers pass them) decoded by records."""
    return [ev for ev in map(worker_event_from_json, items) if ev is not None]


def _controller_events(items: Iterable[Any]) -> list[Any]:
    return [ev for ev in map(controller_event_from_json, items) if ev is not None]


def assemble_spans(records: Iterable[Any], controller_events: Iterable[Any] = ()) -> list[TestSpan]:
    """Pair worker ``start``/``end`` events into spans (:func:`faulthunt.records.run.assemble_spans`);
    events may be typed or plain mappings."""
    return run_records.assemble_spans(_worker_events(records), _controller_events(controller_events))


# --- Xid attribution -----------------------------------------------------------------------------

def _xid_time(xid: Mapping[str, Any]) -> tuple[float | None, str]:
    ts, seen = xid.get("ts"), xid.get("t_seen_mono")
    if isinstance(ts, (int, float)) and (not isinstance(seen, (int, float))
                                         or abs(ts - seen) <= CLOCK_TRUST_S):
        return float(ts), "kernel_time"
    if isinstance(seen, (int, float)):
        return float(seen), "seen_time"
    return None, "no_time"


def attribute_xids(xids: Iterable[Mapping[str, Any] | XidLine], spans: Iterable[TestSpan],
                   pci_map: Mapping[str, Mapping[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Each Xid with ``worker``, ``nodeid``, ``base_nodeid``, ``device`` and ``attributed_by``.

    ``attributed_by``: ``pid+kernel_time`` / ``pid+seen_time`` (the test running in that pid at
    that time), ``...+sticky`` (the sticky-error test that had just ended in that pid),
    ``pid`` (no usable time: the pid's sticky-error test, else its last test), ``child+...``
    (the pid is a process a test started: ``worker_pid`` and ``attribution`` say whose),
    ``child_name+time`` (an unrecorded pid whose process name is that of a child of the one test
    running then), ``neighbour`` (pid-less Xid next to an attributed one on the same GPU),
    ``unmatched_pid`` (no worker had that pid: another process, or a pid namespace), ``none``.
    """
    xids = list(xids)
    if not xids:  # a healthy run: no index of the spans to build
        return []
    spans = [s for s in spans if s.outcome != LOST]
    by_pid: dict[Any, list[TestSpan]] = defaultdict(list)
    children: dict[int, list[tuple[ChildProcess, TestSpan]]] = defaultdict(list)
    span: TestSpan | None
    for span in spans:
        by_pid[span.pid].append(span)
        for child in span.children:
            children[child.child_pid].append((child, span))
    for lst in by_pid.values():
        lst.sort(key=lambda s: s.t0_mono if s.t0_mono is not None else float("inf"))
    for records in children.values():
        records.sort(key=lambda k: k[0].t_mono if k[0].t_mono is not None else float("-inf"))
    pci_map = pci_map or {}
    out: list[dict[str, Any]] = []
    for xid in xids:
        rec = xid.to_json() if isinstance(xid, XidLine) else dict(xid)
        pci = normalize_pci(rec.get("pci"))
        dev = pci_map.get(pci or "", {})
        rec["device"] = _device_label(dev.get("index"), dev.get("uuid"), pci)
        rec["gpu_index"] = dev.get("index")
        rec["gpu_uuid"] = dev.get("uuid")
        rec["worker_pid"] = rec["attribution"] = None
        span, by = _pick_span(rec, by_pid)
        if span is None and by == "unmatched_pid":
            span, by = _pick_child(rec, by_pid, children)
        rec["worker"] = span.worker if span else (by_pid[rec.get("pid")][0].worker
                                                  if by_pid.get(rec.get("pid")) else None)
        rec["nodeid"] = span.nodeid if span else None
        rec["base_nodeid"] = span.base_nodeid if span else None
        rec["worker_device"] = span.device if span else None
        rec["attributed_by"] = by
        out.append(rec)
    _attribute_neighbours(out)
    return out


def _pick_child(xid: dict[str, Any], by_pid: Mapping[Any, list[TestSpan]],
                children: Mapping[int, list[tuple[ChildProcess, TestSpan]]]
                ) -> tuple[TestSpan | None, str]:
    """The test behind an Xid whose pid is no worker's: a recorded child of one, or (by the
    process name the Xid line carries) an unrecorded one next to a child of that name."""
    t, clock = _xid_time(xid)
    pid = xid.get("pid")
    known = children.get(pid) if isinstance(pid, int) else None
    if known:
        # the latest start of that pid before the Xid (a pid can be reused in a long run); an
        # "exec" record only renames a child already started
        starts = [k for k in known if k[0].how != "exec"] or known
        before = [k for k in starts if t is None or k[0].t_mono is None or k[0].t_mono <= t + 1.0]
        child, started_by = (before or starts)[-1]
        span = started_by
        running = _running(by_pid.get(child.pid, []), t)
        if running is not None and not started_by.contains_mono(t or 0.0, STICKY_GRACE_S):
            span = running  # the child outlived the test that started it: the test now running
        xid["worker_pid"] = child.pid
        # the Xid line names the process as the kernel saw it when it faulted
        name = xid.get("process") or child.name or "?"
        xid["attribution"] = (f"child pid {pid} ({name}) of worker {span.worker} (pid {child.pid}),"
                              f" started by {started_by.nodeid}"
                              + (f", while {span.nodeid} ran" if span is not started_by else ""))
        return span, f"child+{clock}" if t is not None else "child"
    name = str(xid.get("process") or "")[:15]
    if not name or t is None:
        return None, "unmatched_pid"
    hits = {id(span): (child, span) for lst in children.values() for child, span in lst
            if (child.name or "")[:15] == name and span.contains_mono(t, STICKY_GRACE_S)}
    if len(hits) != 1:
        return None, "unmatched_pid"
    (child, span), = hits.values()
    xid["worker_pid"] = child.pid
    xid["attribution"] = (f"pid {pid} ({name}) was not seen by faulthunt; while it faulted, "
                          f"{span.nodeid} ran in worker {span.worker}, which had started "
                          f"{name} (pid {child.child_pid}): attributed by name and time")
    return span, "child_name+time"


def _running(spans: list[TestSpan], t: float | None) -> TestSpan | None:
    if t is None:
        return None
    inside = [s for s in spans if s.contains_mono(t)]
    return inside[-1] if inside else None


def _pick_span(xid: Mapping[str, Any], by_pid: Mapping[Any, list[TestSpan]]
               ) -> tuple[TestSpan | None, str]:
    pid = xid.get("pid")
    if pid is None:
        return None, "none"
    spans = by_pid.get(pid)
    if not spans:
        return None, "unmatched_pid"
    sticky = [s for s in spans if s.sticky_cuda_error]
    t, clock = _xid_time(xid)
    if t is None:
        return (sticky[0] if sticky else spans[-1]), "pid"
    containing = [s for s in spans if s.contains_mono(t)]
    chosen = containing[-1] if containing else None
    if chosen is None:
        before = [s for s in spans if s.t0_mono is not None and s.t0_mono <= t]
        chosen = before[-1] if before else spans[0]
    if not chosen.sticky_cuda_error:
        recent = [s for s in sticky if s.t1_mono is not None and 0 <= t - s.t1_mono <= STICKY_GRACE_S]
        if recent:
            return recent[-1], f"pid+{clock}+sticky"
    return chosen, f"pid+{clock}"


def _attribute_neighbours(xids: list[dict[str, Any]]) -> None:
    anchors = [x for x in xids if x.get("nodeid")]
    for x in xids:
        if x.get("nodeid") or x.get("pid") is not None:
            continue
        tx, _ = _xid_time(x)
        best, best_dt = None, None
        for a in anchors:
            if normalize_pci(a.get("pci")) != normalize_pci(x.get("pci")):
                continue
            ta, _ = _xid_time(a)
            if tx is None or ta is None:
                # no times: neighbours in kmsg sequence order
                sx, sa = x.get("seq"), a.get("seq")
                if not isinstance(sx, (int, float)) or not isinstance(sa, (int, float)):
                    continue
                # within a few kmsg records of each other (one fault prints 13s and a 31 together)
                if abs(float(sx) - float(sa)) > 5:
                    continue
                dt = abs(float(sx) - float(sa)) * 1e-3
            else:
                dt = abs(tx - ta)
            if dt <= NEIGHBOUR_S and (best_dt is None or dt < best_dt):
                best, best_dt = a, dt
        if best is not None:
            for k in ("worker", "nodeid", "base_nodeid", "worker_device"):
                x[k] = best.get(k)
            x["attributed_by"] = "neighbour"


# --- the summary ---------------------------------------------------------------------------------

def ci95(failures: int, runs: int) -> list[float]:
    """The 95% Wilson interval as summary.json keeps it (4 digits: data, not what is shown)."""
    lo, hi = wilson_interval(failures, runs)
    return [round(lo, 4), round(hi, 4)]


def interval_text(failures: Any, runs: Any, ci: Any = None) -> str | None:
    """``20.7%-100.0%``: the 95% interval as every view shows it, computed from k and n (the
    stored 4-digit ``ci`` rounded again would say 20.6% for 1 of 1); ``ci`` only when k, n are
    not numbers. None without either."""
    if isinstance(failures, int) and isinstance(runs, int) and runs > 0:
        lo, hi = wilson_interval(failures, runs)
    elif isinstance(ci, (list, tuple)) and len(ci) == 2 and all(isinstance(c, (int, float)) for c in ci):
        lo, hi = ci
    else:
        return None
    return f"{100 * lo:.1f}%-{100 * hi:.1f}%"


#: how bad an outcome is, worst first: the order of the report's Failures, of the outcome counts
#: and of equal-rate rows in the Tests tables (a crash never hides below plain assertion failures)
SEVERITY = {"crashed": 0, "hung": 1, "xid": 2, "error": 3, "failed": 4}


def worst_outcome(row: Mapping[str, Any]) -> int:
    """The :data:`SEVERITY` of a by_test row's worst outcome (its Xids count as ``xid``)."""
    kinds = [k for k, v in (row.get("outcomes") or {}).items() if v and k in SEVERITY]
    if row.get("xids"):
        kinds.append("xid")
    return min((SEVERITY[k] for k in kinds), default=len(SEVERITY))


def row_order(row: Mapping[str, Any]) -> tuple[Any, ...]:
    """Tests tables' order: most failures first, then the worst outcome, most Xids, the id."""
    return (-int(row.get("failures") or 0), worst_outcome(row), -int(row.get("xids") or 0),
            str(row.get("base_nodeid")))


def xid_spread(xids: Iterable[Mapping[str, Any]], gpus_visible: int | None = None
               ) -> list[dict[str, Any]]:
    """Per Xid number: on how many GPUs, from how many tests and processes, and what that suggests.

    NVIDIA's Xid catalog reads repeats differently: the same Xid repeating on one GPU across
    *different applications* points at that GPU (hardware, e.g. ECC or a bad board); the same Xid
    across several GPUs, or always from the same code, points at the application. So the verdict
    looks at the tests and worker processes behind the Xids, not only at the devices:

    - ``single``: one occurrence;
    - ``spread``: several GPUs (follows the code);
    - ``one_test``: every attributed Xid comes from one test (in one or more worker processes):
      the application, that test, whatever the device count;
    - ``same_gpu``: one GPU out of several visible, from different tests or processes outside
      the run: suspect that device;
    - ``one_gpu``: one GPU visible and several tests: same-GPU vs spread cannot be told apart;
    - ``unknown_device``: the Xid lines' GPU could not be mapped.

    ``gpus_visible`` is how many GPUs the run could see (None: unknown); with 1 the reading says
    that same-GPU vs spread cannot be told apart. Xids no worker produced (``base_nodeid`` None:
    another process on the machine, e.g. a concurrent job) are counted in ``outside`` and do not
    make the attributed ones look like several applications' faults.
    """
    groups: dict[Any, list[Mapping[str, Any]]] = defaultdict(list)
    for x in xids:
        groups[x.get("xid")].append(x)
    one_gpu_note = "only one GPU: same-GPU vs spread cannot be told apart"
    out = []
    for number, group in sorted(groups.items(), key=lambda kv: (kv[0] is None, kv[0])):
        devices = sorted({str(x.get("device")) for x in group if x.get("device") is not None})
        attributed = [x for x in group if x.get("base_nodeid")]
        tests = sorted({str(x.get("base_nodeid")) for x in attributed})
        processes = len({x.get("pid") for x in attributed if x.get("pid") is not None})
        outside = len(group) - len(attributed)
        one_gpu = gpus_visible == 1
        if len(group) == 1:
            verdict, reading = "single", "one occurrence: no pattern yet"
        elif len(devices) > 1:
            verdict, reading = "spread", "on several GPUs: follows the code (application)"
        elif len(tests) == 1 and len(attributed) >= 2:
            procs = (f"in {processes} different worker processes" if processes > 1
                     else "in one worker process")
            verdict = "one_test"
            reading = (f"all {len(attributed)} attributed to one test, {tests[0]}, {procs}: "
                       "follows that test (application), not the device")
        elif len(devices) == 1 and one_gpu:
            verdict = "one_gpu"
            reading = (f"{len(tests)} tests" if tests else "no test") + (
                " behind them; hardware vs application needs another GPU or machine")
        elif len(devices) == 1:
            verdict, reading = "same_gpu", (
                f"repeats on one GPU from {len(tests)} test(s) of the run"
                + (f" and {outside} other process(es)" if outside else "")
                + ": suspect that device (hardware)")
        else:
            verdict, reading = "unknown_device", "GPU of the Xid lines unknown"
        if one_gpu and verdict != "single":
            reading = f"{one_gpu_note}; {reading}"
        if outside and verdict != "same_gpu":
            reading += f"; {outside} more from process(es) outside the run (not attributed)"
        out.append({"xid": number, "count": len(group), "devices": devices, "tests": tests,
                    "processes": processes, "outside": outside, "gpus_visible": gpus_visible,
                    "verdict": verdict, "reading": reading})
    return out


def visible_gpus(pci_map: Mapping[str, Mapping[str, Any]] | None,
                 cuda_visible_devices: str | None = None) -> list[str] | None:
    """The device labels unpinned workers could use: None when not known.

    From the GPUs the run saw (identity.json's NVML list and the driver's UUID lines, i.e. the
    PCI map), narrowed by the run's own ``CUDA_VISIBLE_DEVICES`` when that names devices by index
    or UUID. An empty ``CUDA_VISIBLE_DEVICES`` hides every GPU: [].
    """
    labels = []
    for pci, dev in sorted((pci_map or {}).items()):
        label = _device_label(dev.get("index"), dev.get("uuid"), pci)
        if label is not None:
            labels.append((label, dev))
    if cuda_visible_devices is not None:
        wanted = [w.strip() for w in cuda_visible_devices.split(",")]
        if wanted == [""]:
            return []
        # CUDA stops at the first entry it cannot resolve; so do we (only index/UUID forms)
        picked = []
        for w in wanted:
            hit = next((lab for lab, dev in labels
                        if w == str(dev.get("index")) or (dev.get("uuid") and
                                                          str(dev["uuid"]).startswith(w)
                                                          and w.startswith("GPU-"))), None)
            if hit is None:
                break
            picked.append(hit)
        if picked:
            return picked
    return [lab for lab, _ in labels] if labels else None


def build_summary(spans: Iterable[Any],
                  controller_events: Iterable[Any],
                  xids: Iterable[Mapping[str, Any] | XidLine], *,
                  pci_map: Mapping[str, Mapping[str, Any]] | None = None,
                  exit_status: int | None = None,
                  visible: list[str] | None = None,
                  events: Iterable[Any] = ()) -> dict[str, Any]:
    """summary.json from worker events (or assembled spans), controller events and Xids.

    Events may be typed (faulthunt.records.events) or plain mappings; the result is the
    summary.json object (:class:`faulthunt.records.documents.Summary` reads it back).

    ``visible``: the devices unpinned workers could use (:func:`visible_gpus`); default: every
    device of ``pci_map``. With exactly one, unpinned runs are counted on that device.
    ``events``: the worker events, when ``spans`` are already assembled (for what the workers
    said about the whole run: items repeated or not, how children were watched).
    """
    controller = _controller_events(controller_events)
    items = list(spans)
    if items and isinstance(items[0], TestSpan):
        span_list: list[TestSpan] = items
        worker_events = _worker_events(events)
    else:
        worker_events = _worker_events(items) or _worker_events(events)
        span_list = assemble_spans(worker_events, controller)
    attributed = attribute_xids(xids, span_list, pci_map)
    crash_by_key = {(c.worker, c.nodeid): c for c in controller if isinstance(c, Crash)}
    failures = [_failure(s, crash_by_key.get((s.worker, s.nodeid))) for s in span_list
                if s.outcome in FAILING or s.outcome == LOST]
    if visible is None:
        visible = visible_gpus(pci_map)
    start = next((c for c in controller if isinstance(c, SessionStart)), None)
    finish = next((c for c in reversed(controller) if isinstance(c, SessionFinish)), None)
    outcomes = Counter(s.outcome for s in span_list)
    workers = _workers(span_list, controller, start)
    summary: dict[str, Any] = {
        "tests_run": sum(1 for s in span_list if s.outcome != LOST),
        "passed": outcomes.get("passed", 0),
        "skipped": outcomes.get("skipped", 0),
        "outcomes": dict(sorted(outcomes.items())),
        "failures": failures,
        "xids": [_xid_summary(x) for x in attributed],
        "by_test": _by_test(span_list, attributed),
        "by_device": _by_device(span_list, attributed, pci_map, visible),
        "xid_spread": xid_spread(attributed, len(visible) if visible is not None else None),
        "workers": workers,
        "stopped_early": (finish.shouldstop or finish.shouldfail) if finish else None,
        "session_finished": finish is not None,
        "exit_status": exit_status,
        "collection_errors": _collection_errors(controller),
        "subtests": _subtests(span_list),
        "random_seed": start.random_seed if start is not None else None,
    }
    summary["notes"] = _notes(summary, span_list, worker_events)
    return summary


def _failure(s: TestSpan, crash: Crash | None) -> dict[str, Any]:
    return {
        "nodeid": s.nodeid, "base_nodeid": s.base_nodeid,
        "outcome": s.outcome,  # error (a failed fixture) stays its own outcome
        "phase": "setup/teardown" if s.outcome == "error" else None,
        "worker": s.worker, "pid": s.pid, "device": s.device,
        "message": _message(s),
        "sticky_cuda_error": s.sticky_cuda_error.to_json() if s.sticky_cuda_error else None,
        "signal": crash.signal if crash else None,
        "signal_name": crash.signal_name if crash else None,
        "exit_status": crash.exit_status if crash else None,
        "reruns": s.reruns,
        "subtests_failed": [f.to_json() for f in s.subtests_failed],
    }


#: outcomes outside every rate: they could not fail (skipped, xfailed, xpassed), say nothing of
#: their test (collateral: the context was already broken) or never ran (lost)
UNRATED = frozenset({"skipped", "xfailed", "xpassed", "collateral", LOST})


def rated_runs(outcomes: Mapping[str, int]) -> int:
    """Runs that could have failed (passed, failed, error, crashed, hung ...): a rate's denominator."""
    return sum(int(v) for k, v in outcomes.items() if k not in UNRATED)


def _by_test(span_list: list[TestSpan], attributed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    xids_by_test = Counter(x.get("base_nodeid") for x in attributed if x.get("base_nodeid"))
    per_base: dict[str, Counter[str]] = defaultdict(Counter)
    for s in span_list:
        per_base[s.base_nodeid][s.outcome] += 1
    by_test: list[dict[str, Any]] = []
    for base, counts in per_base.items():
        collateral = counts.get("collateral", 0)
        # Collateral runs say nothing about this test: their context was already broken; a
        # lost one never ran.
        runs = rated_runs(counts)
        fails = sum(v for k, v in counts.items() if k in FAILING and k != "collateral")
        by_test.append({"base_nodeid": base, "runs": runs, "failures": fails,
                        "rate": round(fails / runs, 6) if runs else 0.0,
                        "ci95": ci95(fails, runs), "outcomes": dict(sorted(counts.items())),
                        "collateral": collateral, "xids": xids_by_test.get(base, 0)})
    by_test.sort(key=row_order)
    return by_test


def _by_device(span_list: list[TestSpan], attributed: list[dict[str, Any]],
               pci_map: Mapping[str, Mapping[str, Any]] | None,
               visible: list[str] | None) -> list[dict[str, Any]]:
    # An unpinned worker on a machine (or CUDA_VISIBLE_DEVICES) with one GPU ran on that GPU;
    # with several it could have used any of them, so its runs stay under "unpinned".
    only = visible[0] if visible is not None and len(visible) == 1 else None
    by_device: dict[str, dict[str, Any]] = {}
    for s in span_list:
        if s.outcome in UNRATED and s.outcome != "collateral":
            continue  # lost, skipped, xfailed, xpassed: not runs that could fail on this GPU
        label = s.device or only or "unpinned"
        row = by_device.setdefault(label, {"device": label, "runs": 0, "failures": 0, "xids": 0})
        row["runs"] += 1
        if not s.device and only is not None:
            row["unpinned_runs"] = row.get("unpinned_runs", 0) + 1
        if s.outcome in FAILING and s.outcome != "collateral":
            row["failures"] += 1
    for x in attributed:
        label = x.get("device") or "unknown"
        row = by_device.setdefault(label, {"device": label, "runs": 0, "failures": 0, "xids": 0})
        row["xids"] += 1
    for label, row in by_device.items():
        for pci, dev in (pci_map or {}).items():
            if label in (str(dev.get("index")), dev.get("uuid"), pci):
                row.update({"pci": pci, "uuid": dev.get("uuid"), "name": dev.get("name")})
        if row["runs"] == 0 and row["xids"] and "unpinned" in by_device:
            # its Xids came from unpinned workers (or other processes): their runs are not
            # attributable to one device, so say so instead of showing "0 runs"
            row["runs"] = None
            row["failures"] = None
            row["note"] = "workers were unpinned: runs and failures are under 'unpinned'"
    return sorted(by_device.values(), key=lambda r: r["device"])


def _workers(span_list: list[TestSpan], controller: list[Any],
             start: SessionStart | None) -> dict[str, Any]:
    """Worker processes, and the slots they ran in: ``-n 4`` has four slots whatever the
    restarts; a restarted worker gets a new id (xdist) and keeps its slot (``worker_up``)."""
    kinds = Counter(c.kind for c in controller if isinstance(c, Crash) and c.started is not False)
    ups = [c for c in controller if isinstance(c, WorkerUp)]
    ran = {s.worker for s in span_list}
    slots: int | None
    restarts: int | None
    if ups:
        slot_of = {str(u.worker): str(u.slot or u.worker) for u in ups}
        for w in ran - set(slot_of):
            slot_of[w] = w
        slots = len(set(slot_of.values()))
        restarts = sum(1 for w, slot in slot_of.items() if w != slot)
    elif (start is not None and start.xdist is False) or ran == {"main"}:
        slot_of, slots, restarts = {w: w for w in ran}, 1, 0
    else:
        slot_of, slots, restarts = {}, None, None  # recorded before slots were
    return {
        "processes": len({s.pid for s in span_list if s.outcome != LOST}),
        "slots": slots, "restarts": restarts, "slot_of": dict(sorted(slot_of.items())),
        "recycled": sum(1 for c in controller if isinstance(c, Recycled)),
        # without xdist no controller sees the hang end the process: the span says it (the
        # table counts the same spans, so the two never disagree)
        "crashed": kinds.get("crashed", 0),
        "hung": max(kinds.get("hung", 0), sum(1 for s in span_list if s.outcome == "hung")),
        "lost": sum(1 for s in span_list if s.outcome == LOST),
    }


def _collection_errors(controller: list[Any]) -> list[dict[str, Any]]:
    seen: dict[str, dict[str, Any]] = {}
    for c in controller:
        if isinstance(c, CollectError) and c.nodeid not in seen:
            seen[c.nodeid] = {"nodeid": c.nodeid,
                              "message": redact_text(c.message) if c.message
                              else _first_line(c.longrepr)}
    return list(seen.values())


def _subtests(span_list: list[TestSpan]) -> dict[str, int]:
    total: Counter[str] = Counter()
    for s in span_list:
        total.update(s.subtests or {})
    return dict(sorted(total.items()))


def plural(n: int, noun: str) -> str:
    """``1 test run``, ``3 test runs``, ``0 Xids``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def nothing_ran_text(summary: Mapping[str, Any], run_dir: Path | None) -> str | None:
    """Why a run that ran no test ran none, in one line (the terminal's table and ``stress -q``
    say it alike), or None when tests ran or the run was stopped."""
    if summary.get("tests_run") or summary.get("stopped_by"):
        return None
    where = f" (full output: {Path(run_dir) / 'reproducer.log'})" if run_dir is not None else ""
    reason = summary.get("no_tests_reason")
    if reason:
        return f"no test ran: {reason}{where}"
    status = summary.get("pytest_exit_status")
    if status not in (None, 0, 5):  # a run recorded before the reason was
        return f"pytest exited {status} before any test ran{where}"
    return None


def _notes(summary: Mapping[str, Any], span_list: list[TestSpan],
           events: list[Any]) -> list[str]:
    """What the run says about itself, one line each: what was not run as asked, what was
    counted differently from plain pytest, and how to replay it."""
    notes: list[str] = []
    collected = next((e for e in events if isinstance(e, Collected)), None)
    ran = any(s.outcome != LOST for s in span_list)
    # what faulthunt repeated is news only when a test ran (a -k that deselected everything, a
    # usage error: nothing was repeated in effect)
    if collected is not None and collected.repeated and ran:
        kinds = ", ".join(f"{n} {k}" for k, n in sorted(collected.repeated.items()))
        notes.append(f"faulthunt repeated {sum(collected.repeated.values())} item(s) "
                     f"{collected.count} times that pytest-repeat leaves alone ({kinds})")
    if collected is not None and collected.not_repeated:
        first = collected.not_repeated[0]
        notes.append(f"NOT REPEATED: {len(collected.not_repeated)} item(s) ran once instead of "
                     f"{collected.count} times, e.g. {first.nodeid}: {first.why}")
    if collected is not None and collected.child_polling and \
            collected.child_polling.startswith("unavailable"):
        notes.append(f"child processes: seen only when Python starts them; polling "
                     f"{collected.child_polling}")
    reran = [s for s in span_list if s.reruns]
    if reran:
        notes.append(f"pytest-rerunfailures reran {sum(s.reruns for s in reran)} time(s) in "
                     f"{len(reran)} run(s): each such run counts as failed here, even when a "
                     "rerun passed (a rerun hides a flaky failure; faulthunt hunts them)")
    lost = summary["workers"].get("lost") or 0
    if lost:
        notes.append(f"{plural(lost, 'test')} lost: their worker died between two tests, before "
                     "they started (xdist blames the queued test); not counted as runs or failures")
    if summary.get("collection_errors"):
        n = len(summary["collection_errors"])
        notes.append(f"{plural(n, 'collection error')}: the tests of "
                     f"{'those modules' if n != 1 else 'that module'} never ran")
    sub = summary.get("subtests") or {}
    if sub:
        notes.append("subtests: " + ", ".join(f"{v} {k}" for k, v in sub.items())
                     + " (a failed subtest fails its test run)")
    if summary.get("random_seed") is not None:
        notes.append(f"test order shuffled by pytest-randomly, seed {summary['random_seed']}: "
                     f"replay it with `-- -p randomly --randomly-seed={summary['random_seed']}`")
    return notes


def found_something(summary: Mapping[str, Any]) -> bool:
    """Failures of any kind (lost tests included), collection errors or any Xid: the run found
    something (exit status 1)."""
    return (bool(summary.get("failures")) or bool(summary.get("xids"))
            or bool(summary.get("collection_errors")))


def _xid_summary(x: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("xid", "pid", "worker", "nodeid", "base_nodeid", "pci", "device", "gpu_index",
            "gpu_uuid", "worker_device", "category", "mmu", "ts", "seq", "attributed_by",
            "process", "message", "worker_pid", "attribution")
    return {k: x.get(k) for k in keys}


#: a native traceback's last line: ``ValueError: bad``, ``pkg.mod.CUDARuntimeError: ...``
_EXCEPTION_RE = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Warning|"
                           r"Failure|Failed|Timeout|Abort)\b(?::.*)?$")
#: pytest's --showlocals lines (``faults_bin = PosixPath(...)``): never a failure's message
_LOCALS_RE = re.compile(r"^[A-Za-z_]\w*\s+= ")
#: pytest's ``path:line: ExcType`` location line
_LOCATION_RE = re.compile(r"^\S+:\d+: (?P<what>\S.*)$")


def exception_line(text: str | None, limit: int = 300) -> str | None:
    """The line of a failure text that says what failed: the exception line, not a source or
    locals line.

    pytest prints each exception of a chain with ``E   `` lines, the cause first and the
    exception that failed the test last: the first line of the last such block
    (``E   AssertionError: ...``). Without ``E`` lines (``--tb=native``, a crash text): the last
    line shaped like ``SomeError: ...``, else pytest's ``path:12: SomeError``, else the first
    line that is not a ``name = value`` locals line.
    """
    if not text:
        return None
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return None
    blocks: list[list[str]] = []
    previous_e = False
    for ln in text.splitlines():
        is_e = ln.startswith("E ") and not _LOCALS_RE.match(ln)
        if is_e:
            if not previous_e:
                blocks.append([])
            blocks[-1].append(ln[1:].strip())
        previous_e = is_e or (previous_e and not ln.strip())
    picked = next((b[0] for b in reversed(blocks) if b and b[0]), None)
    if picked is None:
        picked = next((ln for ln in reversed(lines) if _EXCEPTION_RE.match(ln)), None)
    if picked is None:
        loc = next((m for m in map(_LOCATION_RE.match, reversed(lines)) if m), None)
        picked = loc.group("what") if loc else None
    if picked is None:
        picked = next((ln for ln in lines if not _LOCALS_RE.match(ln)), lines[0])
    return picked[:limit]


def _first_line(text: str | None, limit: int = 300) -> str | None:
    """A failure's message for the table and report: its exception line, secrets scrubbed."""
    line = exception_line(text, limit)
    return redact_text(line) if line else None


def _message(span: TestSpan) -> str | None:
    if span.message:
        return redact_text(span.message)
    return _first_line(span.longrepr)


# --- I/O edge ------------------------------------------------------------------------------------

def _run(run_dir: Path | RunDir) -> RunDir:
    return run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)


def pci_map_of_run(run_dir: Path | RunDir) -> dict[str, dict[str, Any]]:
    """PCI -> device from identity.json's GPUs and the NVRM UUID lines of the kmsg snapshots."""
    run = _run(run_dir)
    identity = run.identity()
    gpus = [g.to_json() for g in identity.gpus] if identity is not None else []
    return build_pci_map(gpus, parse_gpu_uuid_lines(run.kmsg_text()))


def visible_of_run(run_dir: Path | RunDir, pci_map: Mapping[str, Mapping[str, Any]]) -> list[str] | None:
    """:func:`visible_gpus` with the ``CUDA_VISIBLE_DEVICES`` the run was started with (env.json)."""
    cvd = (_run(run_dir).env() or {}).get("CUDA_VISIBLE_DEVICES")
    return visible_gpus(pci_map, cvd if cvd is not None and cvd != "<redacted>" else None)


def guard_of_run(run_dir: Path | RunDir,
                 mapping: Iterable[Mapping[str, Any] | MappingEntry] | None = None) -> dict[str, Any] | None:
    """summary.json's ``guard`` section: what guard mode did in the run
    (:func:`faulthunt.guard.summarize_guard` over the ledger's guard records, streamed, and the
    mapping's guard verdicts); None for a run without guard mode. ``mapping``: the run's mapping
    entries (default: its mapping.json)."""
    run = _run(run_dir)
    if not run.has_ledger():
        return None
    from faulthunt.guard.summary import summarize_guard
    from faulthunt.ledger.reader import iter_guard_records

    if mapping is None:
        mapping = run.mapping() or ()
    entries = [m.to_json() if isinstance(m, MappingEntry) else m for m in mapping]
    got = summarize_guard(iter_guard_records(run.ledger_dir()), entries)
    return got if got["enabled"] else None


def summarize_run(run_dir: Path | RunDir) -> dict[str, Any]:
    """The summary of a run directory, from its records; writes nothing.

    ``kernel_log`` (how the log was followed: lost records, warnings) is only known while the run
    is live; it is carried over from the run's own summary.json when that one reads.
    """
    run = _run(run_dir)
    info = run.run_info()
    pci_map = pci_map_of_run(run)
    summary = build_summary(run.spans(), run.controller(), run.xids(), pci_map=pci_map,
                            exit_status=info.exit_status if info is not None else None,
                            visible=visible_of_run(run, pci_map), events=run.worker_events())
    summary["skipped_lines"] = run.skipped_lines()
    previous = run.summary()
    if previous is not None and previous.kernel_log is not None:
        summary["kernel_log"] = previous.kernel_log.to_json()
    guard = guard_of_run(run)
    if guard is not None:
        summary["guard"] = guard
    return summary
