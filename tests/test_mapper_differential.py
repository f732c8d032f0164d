"""The columnar reader and index give the verdicts the mapper gave before them.

Two references: golden answers of every committed H200 ledger and run (tests/golden_mapper.py,
captured before the change), and the previous implementation itself (tests/ledger_reference.py),
run side by side with the new one on hypothesis-generated ledgers and queries: whole
``to_json()`` objects are compared, not just verdict names.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import golden_mapper as golden
import ledger_reference as ref
from faulthunt.ledger import index as index_mod
from faulthunt.ledger.reader import build_ledger, load_ledger
from faulthunt.mapper import map_address, map_run

MiB = 1 << 20
BASE = 0x7000_0000_0000


# --- golden: the committed real ledgers ---------------------------------------------------------

def test_golden_answers_of_the_committed_h200_ledgers_and_runs(tmp_path):
    want = json.loads(golden.GOLDEN.read_text())
    got = golden.answers(load_ledger, map_address, map_run, tmp_path)
    for rel, w in want["ledgers"].items():
        g = got["ledgers"][rel]
        assert (g["records"], g["skipped"]) == (w["records"], w["skipped"]), rel
        bad = [(a, b) for a, b in zip(g["answers"], w["answers"]) if a != b]
        assert not bad and len(g["answers"]) == len(w["answers"]), (rel, bad[:3])
    assert got["runs"] == want["runs"]


def test_mapping_a_run_leaves_every_file_byte_identical(tmp_path):
    """`faulthunt map --run` reads a run; it must not change it (seal_dead used to cut dead
    writers' files). The copy gets a dead writer's NUL reserve and a torn line to tempt it."""
    import shutil

    from faulthunt.cli import main

    run = tmp_path / "run"
    shutil.copytree(golden.ROOT / "report" / "h200_stress_run", run)
    ledger = next((run / "ledger").glob("*.jsonl"))
    with open(ledger, "ab") as fh:
        fh.write(b'{"event": "alloc", "addr' + b"\0" * 70000)
    (run / "ledger" / "999999.jsonl").write_bytes(b'{"event":"note","t":1.0}\n' + b"\0" * 4096)
    (run / "mapping.json").unlink(missing_ok=True)

    def digests() -> dict[str, str]:
        return {str(p.relative_to(run)): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted(run.rglob("*")) if p.is_file() and p.name != "mapping.json"}

    before = digests()
    assert main(["map", "--run", str(run), "--json"]) == 0
    assert main(["map", hex(BASE), "--run", str(run), "--json"]) in (0, 3)
    assert digests() == before


# --- the previous implementation, side by side ---------------------------------------------------

TIMES = [1.0, 1.5, 2.0, 2.0, 3.0, 3.25, 4.0, 5.0]
PIDS = [7, 8]
KINDS = [None, "device", "segment", "block", "block"]


@st.composite
def records(draw: Any) -> list[dict[str, Any]]:
    """Ledgers with reuse, nesting, pools, merged sources, deferred frees, ties, unsorted times,
    several pids, and a few malformed records."""
    slots = draw(st.integers(2, 12))
    out = []
    for _ in range(draw(st.integers(0, 40))):
        what = draw(st.sampled_from(["alloc"] * 5 + ["free"] * 4 + ["launch", "sync", "note", "junk"]))
        t = draw(st.one_of(st.sampled_from(TIMES), st.floats(0.5, 6.0, allow_nan=False), st.integers(1, 5)))
        rec: dict[str, Any] = {"event": what, "t": t}
        if draw(st.booleans()):
            rec["pid"] = draw(st.sampled_from(PIDS))
        if draw(st.integers(0, 3)):
            rec["nodeid"] = draw(st.sampled_from(["t.py::a", "t.py::b", "t.py::c[1]", None]))
        addr = BASE + draw(st.integers(0, slots)) * 4096 + draw(st.sampled_from([0, 0, 0, 512, 4095]))
        if what == "alloc":
            rec.update(address=addr, size=draw(st.sampled_from([0, 1, 512, 4000, 4096, 8192, 3 * MiB])),
                       source=draw(st.sampled_from(["cupti", "numba", "cupy", "torch", None])))
            kind = draw(st.sampled_from(KINDS))
            if kind is not None:
                rec["kind"] = kind
            if draw(st.booleans()):
                rec["stack"] = draw(st.sampled_from([["t.py:1 in f"], None, []]))
        elif what == "free":
            rec["address"] = addr
            kind = draw(st.sampled_from(KINDS + ["weird"]))
            if kind is not None:
                rec["kind"] = kind
            phase = draw(st.sampled_from([None, "requested", "completed"]))
            if phase:
                rec["phase"] = phase
        elif what == "launch":
            rec["kernel"] = draw(st.sampled_from(["k1", "k2", "k3(int)"]))
        elif what == "junk":
            rec = draw(st.sampled_from([
                {"event": "alloc", "address": -1, "size": 1, "t": 1.0},
                {"event": "alloc", "address": BASE, "size": 1, "t": 1.0, "kind": "weird"},
                {"event": "guard_fault", "t": 2.0, "address": BASE},
                {"event": "launch", "t": 2.0},
                {"event": "free", "t": "x", "address": BASE},
            ]))
        if draw(st.integers(0, 9)) == 0:
            rec["t_mono"] = float(draw(st.integers(0, 100)))
        out.append(rec)
        if what == "alloc" and draw(st.integers(0, 3)) == 0:  # the same allocation from a second source
            out.append({**rec, "source": "cupti", "t": t, **({"kind": "segment"} if draw(st.booleans()) else {})})
    return out


def queries() -> Any:
    at = st.one_of(st.none(), st.sampled_from(TIMES), st.floats(0.0, 7.0, allow_nan=False),
                   st.just(float("inf")))
    addr = st.one_of(
        st.integers(BASE - 3 * MiB, BASE + 16 * 4096 + 3 * MiB),
        st.integers(0, 12).map(lambda s: BASE + s * 4096 + 4000),
        st.integers(0, 12).map(lambda s: BASE + s * 4096 - 1),
        st.integers(0, 0x20000),
    )
    return st.lists(st.tuples(addr, st.sampled_from([None, 7, 8]), at, st.booleans()), min_size=1, max_size=8)


def _answer(impl_map: Any, ledger: Any, a: int, pid: int | None, at: float | None, page: bool) -> Any:
    try:
        return impl_map(ledger, a, pid=pid, at=at, page=page).to_json()
    except Exception as exc:  # noqa: BLE001 - the error (type and words) is part of the answer
        return (type(exc).__name__, str(exc))


def _same_ledger(new: Any, old: Any) -> None:
    assert (new.records, new.skipped, new.problems) == (old.records, old.skipped, old.problems)
    assert set(new.pids) == set(old.pids)
    for pid, o in old.pids.items():
        n = new.pids[pid]
        assert (n.t_first, n.t_last, n.mono_offset, n.unmatched_frees) == (
            o.t_first, o.t_last, o.mono_offset, o.unmatched_frees)
        assert n.tests == o.tests
        assert list(n.launch_times) == o.launch_times and list(n.sync_times) == o.sync_times
        assert list(n.launches) == o.launches
        assert len(n.containers) == len(o.containers) and len(n.blocks) == len(o.blocks)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records(), queries(), st.sampled_from([96, 2, 0]))
def test_new_index_answers_as_the_old_one(recs, qs, budget):
    """Every answer equal to the previous implementation's, whole; with a small descent budget
    the exact stabbing index answers instead of the pruned descent, and must agree too."""
    index_mod.DESCENT_BUDGET, saved = budget, index_mod.DESCENT_BUDGET
    try:
        new, old = build_ledger(recs), ref.build_ledger(recs)
        _same_ledger(new, old)
        for a, pid, at, page in qs:
            assert _answer(map_address, new, a, pid, at, page) == _answer(ref.map_address, old, a, pid, at, page)
    finally:
        index_mod.DESCENT_BUDGET = saved


def _write_files(tmp: Path, recs: list[dict[str, Any]], style: int, tail: bytes) -> None:
    for p in tmp.glob("*"):
        p.unlink()
    by_file: dict[str, list[str]] = {}
    for r in recs:
        pid = r.get("pid")
        name = f"{pid}.jsonl" if pid is not None and style != 2 else "hand.jsonl"
        r2 = {k: v for k, v in r.items() if not (k == "pid" and style == 1)}
        sep = (",", ":") if style == 1 else (", ", ": ")
        by_file.setdefault(name, []).append(json.dumps(r2, separators=sep))
    for name, lines in by_file.items():
        data = ("\n".join(lines) + "\n").encode()
        (tmp / name).write_bytes(data + tail if name != "hand.jsonl" else data)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(records(), queries(), st.integers(0, 2),
       st.sampled_from([b"", b"\0" * 100, b'{"event": "alloc", "t"', b'{"event":"note","t":9}\0\0',
                        b"\n\n  \n", b"junk line\n", b'{"event": "x"} {"event": "y"}\n', b"\xff\xfe\n",
                        b'{"event":"note","t":1.0} {"event":"sync","t":2.0}\n\n']))
def test_files_read_as_the_old_reader_read_them(tmp_path_factory, recs, qs, style, tail):
    """Through files: file-name pids, compact and spaced JSON, NUL reserves, torn, blank, junk
    and non-UTF-8 lines; the new streaming reader and the old whole-file reader agree."""
    tmp = tmp_path_factory.mktemp("ledger")
    _write_files(tmp, recs, style, tail)
    try:
        old = ref.load_ledger(tmp)
    except Exception as exc:  # noqa: BLE001 - then the new one must refuse too
        with pytest.raises(type(exc)):
            load_ledger(tmp)
        return
    new = load_ledger(tmp)
    _same_ledger(new, old)
    assert new.torn_files == old.torn_files
    for a, pid, at, page in qs:
        assert _answer(map_address, new, a, pid, at, page) == _answer(ref.map_address, old, a, pid, at, page)


def test_small_chunks_split_lines_anywhere(tmp_path, monkeypatch):
    """Chunk edges inside lines, inside NUL reserves and right after newlines change nothing."""
    from faulthunt.ledger import reader

    recs = [{"event": "alloc", "address": BASE + i * 4096, "size": 4000 + i, "t": 1.0 + i, "pid": 5,
             "nodeid": f"t.py::t{i}", "stack": ["x" * (i * 7 % 50)]} for i in range(60)]
    recs += [{"event": "free", "address": BASE + i * 4096, "t": 100.0 + i, "pid": 5} for i in range(0, 60, 3)]
    body = "".join(json.dumps(r) + "\n" for r in recs).encode()
    (tmp_path / "5.jsonl").write_bytes(body + b'{"event":"alloc","address":1' + b"\0" * 333)
    old = ref.load_ledger(tmp_path)
    for chunk in (1, 7, 64, 4096):
        monkeypatch.setattr(reader, "CHUNK", chunk)
        new = load_ledger(tmp_path)
        _same_ledger(new, old)
        assert new.torn_files == old.torn_files
        for a in range(BASE - 10, BASE + 61 * 4096, 997):
            assert _answer(map_address, new, a, 5, None, False) == _answer(ref.map_address, old, a, 5, None, False)


def test_unknown_events_and_kinds_are_skipped_and_counted_by_reason():
    L = build_ledger([{"event": "alloc", "address": BASE, "size": 64, "t": 1.0, "pid": 1},
                      {"event": "guard_fault", "t": 2.0, "pid": 1},
                      {"event": "guard_fault", "t": 3.0, "pid": 1},
                      {"event": "alloc", "address": BASE, "size": 64, "t": 1.0, "pid": 1, "kind": "guard"},
                      {"event": "alloc", "address": BASE + 4096, "size": 64, "t": 1.0, "pid": 1,
                       "source": "guard"}])
    assert L.skipped == 3
    assert L.skipped_by == {"unknown event 'guard_fault'": 2, "unknown kind 'guard'": 1}
    assert map_address(L, BASE + 4096 + 1, pid=1).verdict == "inside"  # unknown sources are records


def test_nothing_is_held_open_and_files_are_opened_read_only(tmp_path, monkeypatch):
    (tmp_path / "3.jsonl").write_text(json.dumps({"event": "alloc", "address": BASE, "size": 8, "t": 1.0}) + "\n")
    flags = []
    real_open = os.open

    def spy(path: Any, fl: int, *a: Any) -> int:
        flags.append(fl)
        return real_open(path, fl, *a)

    monkeypatch.setattr(os, "open", spy)
    L = load_ledger(tmp_path)
    assert map_address(L, BASE + 1, pid=3).allocation["pid"] == 3
    assert flags and all(f & (os.O_WRONLY | os.O_RDWR) == 0 for f in flags)


@pytest.mark.parametrize("spanning", [False, True])
def test_forked_readers_give_the_same_ledger(tmp_path, spanning):
    """Files read by forked processes (jobs > 1) load as one process loads them: answers,
    counts, problems in file order, torn files; a pid whose records span files read by
    different processes is read again in one (spanning=True)."""
    import random

    rng = random.Random(3)
    for pid in (11, 12, 13, 14):
        lines = [json.dumps({"event": "note", "t": 0.5, "t_mono": 3.0})]
        for i in range(300):
            a = BASE + rng.randrange(40) * 4096
            lines.append(json.dumps({"event": rng.choice(["alloc", "alloc", "free", "launch"]), "t": 1.0 + i,
                                     "address": a, "size": 4000, "kernel": "k", "nodeid": f"t::{i // 50}"}))
        lines.append('{"event": "alloc", "address": -1, "size": 4, "t": 2.0}')
        if spanning and pid == 13:
            lines.append(json.dumps({"event": "alloc", "address": BASE, "size": 64, "t": 9.0, "pid": 11}))
        (tmp_path / f"{pid}.jsonl").write_text("\n".join(lines) + "\n" + ('{"event": "fr' if pid == 12 else ""))
    one = load_ledger(tmp_path, jobs=1)
    many = load_ledger(tmp_path, jobs=3)
    old = ref.load_ledger(tmp_path)
    for got in (one, many):
        _same_ledger(got, old)
        assert got.torn_files == old.torn_files and got.skipped_by == one.skipped_by
    for a in range(BASE - 5000, BASE + 41 * 4096, 1531):
        for pid in (11, 12, 13, 14, None):
            assert _answer(map_address, many, a, pid, None, False) == _answer(ref.map_address, old, a, pid, None, False)
