"""isolate: ddmin on a fake probe, and a real polluting suite run in fresh pytest processes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from faulthunt.hunt.isolate import ddmin, isolate, predecessors, pytest_probe


@pytest.mark.parametrize("culprits", [{"t3"}, {"t0"}, {"t7"}, {"t2", "t5"}])
def test_ddmin_finds_culprits(culprits: set[str]) -> None:
    items = [f"t{i}" for i in range(8)]
    calls = []

    def fails(sub):  # fails when every culprit is present
        calls.append(list(sub))
        return culprits <= set(sub)

    got = ddmin(items, fails)
    assert set(got) == culprits
    assert len(calls) < 2 ** len(items)


def test_isolate_reading_alone() -> None:
    res = isolate("t", ["a"], lambda preds: True)
    assert res["fails_alone"] and res["minimal"] is None


def _events(run: Path, order: list[str]) -> None:
    (run / "events").mkdir(parents=True)
    lines = [{"event": "worker", "worker": "gw0", "pid": 1}]
    for nid in order:
        lines.append({"event": "start", "nodeid": nid, "pid": 1, "worker": "gw0"})
        lines.append({"event": "end", "nodeid": nid, "pid": 1, "worker": "gw0",
                      "outcome": "failed" if nid.endswith("test_reader") else "passed"})
    (run / "events" / "gw0-1.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


SUITE = '''
_CACHE = {}

def test_a():
    assert True

def test_filler_b():
    assert True

def test_polluter():
    _CACHE["buf"] = "freed-buffer"   # a stale pointer left for the next test

def test_filler_c():
    assert True

def test_reader():
    assert "buf" not in _CACHE, "picked up stale state"
'''


@pytest.mark.slow
def test_isolate_polluting_suite(tmp_path: Path) -> None:
    (tmp_path / "test_leak.py").write_text(SUITE)
    run = tmp_path / "run"
    names = ["test_a", "test_filler_b", "test_polluter", "test_filler_c", "test_reader"]
    _events(run, [f"test_leak.py::{n}" for n in names])
    target = "test_leak.py::test_reader"
    preds = predecessors(run, target)
    assert preds == [f"test_leak.py::{n}" for n in names[:-1]]
    res = isolate(target, preds, pytest_probe(target, cwd=tmp_path, repeats=3))
    assert res["fails_alone"] is False and res["fails_after_predecessors"] is True
    assert res["minimal"] == ["test_leak.py::test_polluter"]



def test_a_test_that_always_fails_alone_is_an_ordinary_failure_not_flaky() -> None:
    from faulthunt.hunt.isolate import CountingProbe

    res = isolate("t", ["a", "b"], CountingProbe(lambda preds: True, repeats=3))
    assert res["minimal"] is None and res["alone"] == {"failed": 3, "runs": 3}
    assert res["reading"].startswith("fails alone, every run (failed 3 of 3 runs alone")
    assert "flaky" not in res["reading"]

def test_a_purely_flaky_test_gets_no_culprit() -> None:
    """Fails 1 in 3 whatever ran before it: passing alone 3 times is luck, not evidence."""
    from faulthunt.hunt.isolate import CountingProbe

    calls = iter(range(10_000))
    probe = CountingProbe(lambda preds: next(calls) % 3 == 2, repeats=3)
    # alone: runs 0,1,2 -> fails once: "fails alone too"
    res = isolate("t", ["a", "b", "c", "d"], probe)
    assert res["minimal"] is None and res["reading"].startswith("inconclusive: fails alone too")
    assert res["alone"] == {"failed": 1, "runs": 3}
    # alone passes by luck (0 of 3), after fails 1 of 3: chance, not a cause
    seq = iter([False] * 3 + [False, True, False] + [False] * 100)
    probe = CountingProbe(lambda preds: next(seq), repeats=3)
    res = isolate("t", ["a", "b", "c", "d"], probe)
    assert res["minimal"] is None and res["reading"].startswith("inconclusive: failed 0 of 3 runs")
    assert res["confidence"] == 0.5 and "--repeats" in res["reading"]


def test_a_real_leak_is_named_with_its_counts() -> None:
    from faulthunt.hunt.isolate import CountingProbe

    probe = CountingProbe(lambda preds: "c" in preds, repeats=3)
    res = isolate("t", ["a", "b", "c", "d"], probe)
    assert res["minimal"] == ["c"] and res["after_minimal"] == {"failed": 3, "runs": 3}
    assert res["confidence"] == 0.95 and "confidence 95%" in res["reading"]


SUBTEST_SUITE = '''
import unittest


class TestSub(unittest.TestCase):
    def test_sub(self):
        for i in range(3):
            with self.subTest(i=i):
                self.assertNotEqual(i, 1)
'''


def test_a_failed_subtest_fails_the_probe() -> None:
    """pytest prints `SUBFAILED(i=1) id - ...` and then `PASSED id` for the test itself: the
    probe read only PASSED and isolate said "did not reproduce" of a test failing every run."""
    from faulthunt.hunt.isolate import _short_summary

    t = "t.py::TestSub::test_sub"
    assert _short_summary(f"SUBFAILED(i=1) {t} - AssertionError: 1 == 1\nPASSED {t}\n", [t]) == {
        "FAILED", "PASSED"}
    assert _short_summary(f"SUBFAIL {t} (i=1) - AssertionError\nPASSED {t}\n", [t]) == {"FAILED", "PASSED"}
    assert _short_summary(f"SUBFAILED(i=1) {t}2 - x\nPASSED {t}\n", [t]) == {"PASSED"}


@pytest.mark.slow
def test_isolate_a_unittest_with_a_failing_subtest(tmp_path: Path) -> None:
    (tmp_path / "t.py").write_text(SUBTEST_SUITE)
    target = "t.py::TestSub::test_sub"
    res = isolate(target, [], pytest_probe(target, cwd=tmp_path, repeats=1))
    assert res["alone"] == {"failed": 1, "runs": 1}
