"""Run-directory rows: the cost of the records the workers write and the readers read.

Worker side (per test: one ``start`` and one ``end`` line, each one ``write(2)``): ours builds the
typed records (faulthunt.records.events) and encodes them with msgspec, as the plugin does;
the baseline is what the plugin did before: a dict, ``json.dumps``, ``os.write``. Reader side:
ours is ``RunDir.spans()`` (msgspec decoding with validation into typed events, then pairing);
the baseline is the earlier reader: ``json.loads`` per line into dicts, no validation, then the
same pairing into TestSpan objects. Both sides write and read the same 20,000 tests.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from benchrows import Row, paired

TESTS = 20_000
LONGREPR = None


def _fields(i: int) -> dict[str, Any]:
    return {"nodeid": f"tests/test_k.py::test_a[{i % 7}-{i}-50]", "base_nodeid": "tests/test_k.py::test_a",
            "worker": "gw0", "pid": 4242, "t": time.time(), "t_mono": time.monotonic()}


def write_ours(path: Path, tests: int) -> None:
    from faulthunt.records.events import TestEnd, TestStart
    from faulthunt.rundir import JsonlWriter

    with JsonlWriter(path) as w:
        for i in range(tests):
            w.write(TestStart(**_fields(i), device=None))
            w.write(TestEnd(**_fields(i), outcome="passed", duration=0.001, longrepr=LONGREPR,
                            sticky_cuda_error=None, collateral_of=None))


def write_baseline(path: Path, tests: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        for i in range(tests):
            for rec in ({"event": "start", **_fields(i), "device": None},
                        {"event": "end", **_fields(i), "outcome": "passed", "duration": 0.001,
                         "longrepr": LONGREPR, "sticky_cuda_error": None, "collateral_of": None}):
                os.write(fd, (json.dumps(rec) + "\n").encode("utf-8"))
    finally:
        os.close(fd)


def read_baseline(run: Path) -> int:
    """The earlier reader: json.loads per line into dicts (no validation), then the earlier
    pairing into TestSpan objects by (pid, nodeid), sorted and collateral-labelled alike."""
    import dataclasses

    from faulthunt.records.run import TestSpan

    records: list[dict[str, Any]] = []
    for path in sorted((run / "events").glob("*.jsonl")):
        for line in path.read_bytes().decode("utf-8", "replace").splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict):
                records.append(rec)
    open_: dict[Any, dict[str, Any]] = {}
    spans = []
    for rec in records:
        nodeid = rec.get("nodeid")
        if not isinstance(nodeid, str):
            continue
        key = (rec.get("pid"), nodeid)
        if rec.get("event") == "start":
            open_[key] = rec
        elif rec.get("event") == "end":
            start = open_.pop(key, None) or {}
            spans.append(TestSpan(
                nodeid=nodeid, base_nodeid=str(rec.get("base_nodeid") or nodeid),
                worker=str(rec.get("worker") or start.get("worker") or "?"), pid=rec.get("pid"),
                t0=start.get("t"), t0_mono=start.get("t_mono"), t1=rec.get("t"),
                t1_mono=rec.get("t_mono"), outcome=str(rec.get("outcome") or "incomplete"),
                longrepr=rec.get("longrepr"), sticky_cuda_error=rec.get("sticky_cuda_error"),
                device=start.get("device")))
    for (pid, nodeid), start in open_.items():
        spans.append(TestSpan(nodeid=nodeid, base_nodeid=str(start.get("base_nodeid") or nodeid),
                              worker=str(start.get("worker") or "?"), pid=pid, t0=start.get("t"),
                              t0_mono=start.get("t_mono"), outcome="crashed"))
    spans.sort(key=lambda s: s.t0 if s.t0 is not None else float("inf"))
    poisoned: set[Any] = set()
    out = []
    for span in spans:
        if span.pid in poisoned and span.outcome in ("failed", "error"):
            span = dataclasses.replace(span, outcome="collateral")
        if span.sticky_cuda_error and span.outcome in ("failed", "error"):
            poisoned.add(span.pid)
        out.append(span)
    return len(out)


def read_ours(run: Path) -> int:
    from faulthunt.rundir import RunDir

    return len(RunDir(run).spans())


def row_worker_write(quick: bool) -> Row:
    tests = TESTS // 10 if quick else TESTS
    with tempfile.TemporaryDirectory() as d:
        n = [0]

        def ours() -> None:
            n[0] += 1
            write_ours(Path(d) / f"o{n[0]}.jsonl", tests)

        def baseline() -> None:
            n[0] += 1
            write_baseline(Path(d) / f"b{n[0]}.jsonl", tests)

        ours_t, base_t = paired(ours, baseline, repeat=3 if quick else 7)
    per = 1e6 / tests
    return Row(capability="worker records: start + end line per test",
               ours="typed records, msgspec encode, os.write", baseline="dict, json.dumps, os.write",
               ours_t=ours_t, base_t=base_t, goal="<= 0.5x", goal_ratio=0.5,
               note=f"{tests} tests; per test: ours {ours_t.median * per:.1f} us, "
                    f"baseline {base_t.median * per:.1f} us (medians)")


def row_reader(quick: bool) -> Row:
    tests = TESTS // 10 if quick else TESTS
    with tempfile.TemporaryDirectory() as d:
        run = Path(d)
        (run / "events").mkdir()
        write_ours(run / "events" / "gw0-4242.jsonl", tests)
        assert read_ours(run) == read_baseline(run) == tests
        ours_t, base_t = paired(lambda: read_ours(run), lambda: read_baseline(run),
                                repeat=3 if quick else 7)
    return Row(capability="run reader: events -> test spans",
               ours="RunDir.spans(): msgspec decode + validation, typed",
               baseline="json.loads per line, dicts, no validation",
               ours_t=ours_t, base_t=base_t, goal="<= 1x (validation for free)", goal_ratio=1.0,
               note=f"{tests} tests ({2 * tests} lines)")


ROWS = [row_worker_write, row_reader]
