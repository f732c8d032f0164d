"""The reader's compiled part (harness/ledger/_mapfast.c) against its pure-Python route.

Every ledger here is loaded twice, with the compiled scanner and replay and with them absent
(``reader._FAST = None``, as on a machine that built no extension), and the two loads must be the
same ledger: columns, lives, merges, counts, problems, and every verdict. The scanner takes a
chunk only when all its lines are in the shape it checks strictly; tricky lines (escapes,
non-ASCII, duplicate keys, numbers at the edges, two objects on a line) must leave the chunk to
msgspec, so they are mixed into ledgers and compared too. The golden answers are checked on the
pure route here (the rest of the suite runs with the compiled part when it is built; with
``FAULTHUNT_MAP_PURE=1`` the whole suite runs without it).
"""

from __future__ import annotations

import json
from array import array
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import golden_mapper as golden
from faulthunt.ledger import index, reader
from faulthunt.ledger.reader import Ledger, build_ledger, load_ledger
from faulthunt.mapper import map_address, map_run

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from benchrows.mapper import make_ledger

FAST = reader._FAST
needs_fast = pytest.mark.skipif(FAST is None, reason="the compiled part is not built here")


def summary(ledger: Ledger) -> str:
    """Everything a load decides, as text (two equal summaries: the same ledger; NaN equals NaN)."""
    out: list[Any] = [ledger.records, ledger.skipped, ledger.problems, ledger.skipped_by,
                      ledger.torn_files, list(ledger.pids)]
    for pid, pl in ledger.pids.items():
        row = [pid, list(pl.times), list(pl.launch_times), list(pl.launch_kernels), list(pl.sync_times),
               pl.mono_offset, pl.unmatched_frees, pl.t_first, pl.t_last, list(pl.records._refs),
               list(pl.guard._refs), list(pl.launches._refs)]
        for level in (pl.containers, pl.blocks):
            ix, lv = level.index, level.lives
            row += [ix.addr, ix.end, ix.r0, ix.r1, ix.lives, ix.glo, ix.starts, lv.free, lv.done, lv.ref,
                    lv.kind, dict(lv.extra), [t.levels for t in (ix.end_tree, ix.r0_tree, ix.r1_tree)]]
        out.append(row)
    return repr(out)


def pure_route(monkeypatch: pytest.MonkeyPatch) -> None:
    """As on a machine that built no extension."""
    monkeypatch.setattr(reader, "_FAST", None)
    monkeypatch.setattr(index, "_FAST", None)


def both(monkeypatch: pytest.MonkeyPatch, load: Any) -> tuple[Any, Any]:
    """(compiled, pure) loads; the trees are built now, by the route that loaded."""
    fast = load()
    _trees(fast)
    pure_route(monkeypatch)
    pure = load()
    _trees(pure)
    monkeypatch.setattr(reader, "_FAST", FAST)
    monkeypatch.setattr(index, "_FAST", FAST)
    return fast, pure


def _trees(ledger: Ledger) -> None:
    for pl in ledger.pids.values():
        for level in (pl.containers, pl.blocks):
            level.index.build()


def verdicts(ledger: Ledger, addresses: list[tuple[int | None, int]]) -> list[Any]:
    out = []
    for pid, a in addresses:
        try:
            out.append(repr(map_address(ledger, a, pid=pid).to_json()))
        except Exception as exc:  # noqa: BLE001 - the same error either way is the same answer
            out.append(repr(exc))
    return out


@needs_fast
@pytest.mark.parametrize("shape", ["churn", "live", "pools"])
def test_bench_shapes_load_the_same_both_ways(tmp_path, monkeypatch, shape):
    probes = make_ledger(tmp_path, shape, 24_000)
    calls: list[bool] = []
    scan = FAST.scan

    def counted(*args: Any) -> Any:
        got = scan(*args)
        calls.append(got is not None)
        return got

    monkeypatch.setattr(FAST, "scan", counted)
    fast, pure = both(monkeypatch, lambda: load_ledger(tmp_path, jobs=1))
    assert calls and all(calls)  # the writer's own lines are the scanner's shape: every chunk taken
    assert summary(fast) == summary(pure)
    qs = random.Random(3).sample(probes, 300)
    assert verdicts(fast, qs) == verdicts(pure, qs)


TRICKY = [
    '{"event":"alloc","t":1.5,"pid":7,"address":4096,"size":64,"kind":"device","source":"a\\u00e9"}',
    '{"event":"alloc","t":1.5,"pid":7,"address":4096,"size":64,"source":"caf\u00e9"}',
    '{"event":"alloc","t":1.5,"pid":7,"address":4096,"address":8192,"size":64}',
    '{"event":"alloc","t":1.5,"pid":7,"address":18446744073709551615,"size":1}',
    '{"event":"alloc","t":1.5,"pid":7,"address":18446744073709551616,"size":1}',
    '{"event":"alloc","t":1.5,"pid":7,"address":-1,"size":1}',
    '{"event":"alloc","t":1.5,"pid":7,"address":-0,"size":0}',
    '{"event":"alloc","t":1.5,"pid":7,"address":1.0,"size":1}',
    '{"event":"alloc","t":1e400,"pid":7,"address":1,"size":1}',
    '{"event":"alloc","t":NaN,"pid":7,"address":1,"size":1}',
    '{"event":"alloc","t":"1","pid":7,"address":1,"size":1}',
    '{"event":"alloc","t":1,"pid":true,"address":1,"size":1}',
    '{"event":"alloc","t":1,"pid":12345678901234567890,"address":1,"size":1}',
    '{"event":"alloc","t":1,"pid":null,"address":1,"size":1}',
    '{"event":"alloc","t":1,"address":1,"size":1,"kind":"pinned"}',
    '{"event":"alloc","t":1,"address":1,"size":1,"kind":null,"source":null}',
    '{"event":"alloc","t":1,"address":1,"size":1,"source":5}',
    '{"event":"free","t":2,"address":1,"kind":"other"}',
    '{"event":"free","t":2,"address":1,"phase":"later"}',
    '{"event":"free","t":2,"address":1,"phase":"completed","size":"x"}',
    '{"event":"launch","t":3,"kernel":5}',
    '{"event":"launch","t":3}',
    '{"event":"launch","t":3,"kernel":"k","address":"anything","kind":[1,{"a":null}]}',
    '{"event":"sync","t":3.0000000000000004,"t_mono":2}',
    '{"event":"note","t":4,"t_mono":null,"message":"x\\"y"}',
    '{"event":"bogus","t":4}',
    '{"t":4}',
    '{}',
    '[1,2]',
    '{"event":"sync","t":5} {"event":"sync","t":6}',
    '{"event":"sync","t":5}{"event":"sync","t":6}',
    '   ',
    '',
    '{"event":"sync","t":5,}',
    '{"event":"sync","t":01}',
    '{"event":"sync","t":1.}',
    '{"event":"sync","t":.5}',
    '{"event":"sync","t":1e5,"x":[1,2,]}',
    '{"event":"sync","t":1E+5,"x":{"a":tru}}',
    '{"event":"sync","t":-0.0,"stack":["a","b"]}\r',
    ' \t{ "event" : "sync" , "t" : 7 } \t',
    '{"event":"sync","t":8,"x":"\x01"}',
    '{"event":"alloc","t":1,"address":18446744073709551615,"size":2}',
    '{"event":"alloc","t":123456789012345678901234,"address":1,"size":2}',
    '{"event":"alloc","t":1234567890123456789,"address":1,"size":2}',
    '{"event":"alloc","t":0.1e-400,"address":1,"size":2}',
]

GOOD = ('{"event":"alloc","t":%d.25,"pid":7,"address":%d,"size":4096,"kind":"device","source":"cupti",'
        '"stack":["f.py:1 in g"]}')


@needs_fast
@pytest.mark.parametrize("k", range(len(TRICKY)))
def test_a_doubtful_line_reads_as_msgspec_reads_it(tmp_path, monkeypatch, k):
    lines = [GOOD % (i, 4096 * i) for i in range(1, 6)]
    lines.insert(3, TRICKY[k])
    for name, text in (("7.jsonl", "\n".join(lines) + "\n"), ("8.jsonl", TRICKY[k] + "\n")):
        (tmp_path / name).write_bytes(text.encode())
    fast, pure = both(monkeypatch, lambda: load_ledger(tmp_path, jobs=1))
    assert summary(fast) == summary(pure)


@needs_fast
def test_random_ledgers_with_doubtful_lines_load_the_same(tmp_path, monkeypatch):
    rng = random.Random(11)
    for f in range(4):
        lines = []
        for i in range(3000):
            r = rng.random()
            a = 0x7000_0000 + rng.randrange(64) * 4096
            if r < 0.02:
                lines.append(rng.choice(TRICKY))
            elif r < 0.5:
                kind = rng.choice(['"device"', '"segment"', '"block"', "null"])
                lines.append(f'{{"event":"alloc","t":{rng.randrange(2000)}.5,"address":{a},"size":'
                             f'{rng.choice((512, 4096))},"kind":{kind},"source":"{rng.choice("ab")}"}}')
            elif r < 0.9:
                kind = rng.choice(['"device"', '"segment"', '"block"', "null", '"odd"', "3"])
                phase = rng.choice(['"requested"', '"completed"', "null"])
                lines.append(f'{{"event":"free","t":{rng.randrange(2000)}.5,"address":{a},"kind":{kind},'
                             f'"phase":{phase}}}')
            else:
                lines.append(f'{{"event":"launch","t":{rng.randrange(2000)},"kernel":"k{i % 3}","t_mono":{i}}}')
        (tmp_path / f"{100 + f}.jsonl").write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(reader, "CHUNK", 4096)  # many chunks: clean ones scanned, others not
    fast, pure = both(monkeypatch, lambda: load_ledger(tmp_path, jobs=1))
    assert summary(fast) == summary(pure)
    qs = [(100 + rng.randrange(4), 0x7000_0000 + rng.randrange(-4, 70) * 4096 + rng.randrange(-8, 8))
          for _ in range(300)]
    assert verdicts(fast, qs) == verdicts(pure, qs)


@needs_fast
def test_records_given_in_memory_replay_the_same(monkeypatch):
    rng = random.Random(5)
    recs: list[Any] = []
    for _ in range(4000):
        a = 0x5000_0000 + rng.randrange(40) * 8192
        ev = rng.choice(("alloc", "alloc", "free", "free", "launch"))
        rec: dict[str, Any] = {"event": ev, "t": float(rng.randrange(3000)), "pid": rng.choice((1, 2))}
        if ev == "alloc":
            rec |= {"address": a, "size": rng.choice((4096, 8192)), "source": rng.choice(("x", "y", None)),
                    "kind": rng.choice(("device", "segment", "block", None))}
        elif ev == "free":
            rec |= {"address": a, "kind": rng.choice(("device", "block", None, ["odd"], 7)),
                    "phase": rng.choice(("requested", "completed", None, 3))}
        else:
            rec["kernel"] = "k"
        recs.append(rec)
    fast, pure = both(monkeypatch, lambda: build_ledger(json.loads(json.dumps(recs))))
    assert summary(fast) == summary(pure)


def test_golden_answers_on_the_pure_route(tmp_path, monkeypatch):
    pure_route(monkeypatch)
    want = json.loads(golden.GOLDEN.read_text())
    got = golden.answers(load_ledger, map_address, map_run, tmp_path)
    for rel, w in want["ledgers"].items():
        g = got["ledgers"][rel]
        assert (g["records"], g["skipped"], g["answers"]) == (w["records"], w["skipped"], w["answers"]), rel
    assert got["runs"] == want["runs"]


@needs_fast
def test_line_finding_and_newline_marks_match_python():
    rng = random.Random(1)
    for _ in range(3000):
        data = bytes(rng.choice(b"ab\n") for _ in range(rng.randrange(0, 60)))
        at, step = rng.randrange(0, 50), rng.choice((1, 3, 7, 16))
        mark = (at + step - 1) // step * step
        seen = rng.randrange(5)
        got, after = FAST.newlines(data, at, step, mark, seen)
        want, n, last = [], seen, 0
        while mark < at + len(data):  # reader._read_file's pure route
            n += data.count(b"\n", last, mark - at)
            last = mark - at
            want.append(n)
            mark += step
        n += data.count(b"\n", last)
        marks = array("q")
        marks.frombytes(got)
        assert (list(marks), after) == (want, n)
        skip = rng.randrange(0, 5)
        parts = data.split(b"\n")
        assert FAST.nth_line(data, skip) == (parts[skip] if len(parts) > skip + 1 else None)


def test_the_environment_forces_the_pure_route():
    code = "from faulthunt.ledger import index, reader; print(reader._FAST is None and index._FAST is None)"
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, index.PURE_ENV: "1"})
    assert got.stdout.strip() == "True"


@needs_fast
def test_times_parse_to_the_same_float_as_msgspec():
    rng = random.Random(7)
    nums = ["-0", "0", "-0.0", "1764000000000040000e-9", "9007199254740993", "0.1e-400", "1e-320"]
    for _ in range(4000):
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randrange(1, 26))).lstrip("0") or "0"
        frac = "." + "".join(rng.choice("0123456789") for _ in range(rng.randrange(1, 20))) if rng.random() < 0.5 else ""
        exp = f"e{rng.randrange(-40, 40)}" if rng.random() < 0.6 else ""
        nums.append(rng.choice(("", "-")) + digits + frac + exp)
    for num in nums:
        line = f'{{"event":"sync","t":{num},"t_mono":{num}}}\n'.encode()
        got = FAST.scan(line, 1, 0, None, {}, reader._FAST_CONSTS)
        if got is None:
            continue
        want = reader._DECODER.decode(line[:-1])
        t = array("d")
        t.frombytes(got[0][1])
        assert (repr(t[0]), repr(got[1][2])) == (repr(want.t), repr(want.t_mono)), num
