"""Mapping costs O(log n) per address on every ledger shape: the work done is counted, not timed.

Each shape is built at two sizes (4x apart); every tree node the index reads while mapping a set
of addresses is counted (the trees' level arrays are wrapped in counting sequences). A scan would
read 4x more nodes at the larger size; a logarithmic search a few more. The previous reader
scanned every group per address on the all-freed shape (issue 16: 70 ms per address at 1M).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from faulthunt.ledger import index as index_mod
from faulthunt.ledger.reader import build_ledger
from faulthunt.mapper import map_address

BASE = 0x7000_0000_0000
MiB = 1 << 20


class Counting:
    """A sequence that counts reads (stands in for a tree level array)."""

    reads = 0

    def __init__(self, data: Any) -> None:
        self.data = data

    def __getitem__(self, i: int) -> Any:
        Counting.reads += 1
        return self.data[i]

    def __len__(self) -> int:
        return len(self.data)


def _count(ledger: Any) -> None:
    for pl in ledger.pids.values():
        for level in (pl.containers, pl.blocks):
            level.index.build()
            for tree in (level.index.end_tree, level.index.r0_tree, level.index.r1_tree):
                tree.levels = [Counting(lv) for lv in tree.levels]


def _alloc(addr: int, size: int, t: float, pid: int = 1, kind: str = "device") -> dict[str, Any]:
    return {"event": "alloc", "address": addr, "size": size, "t": t, "pid": pid, "kind": kind}


def _free(addr: int, t: float, pid: int = 1, kind: str = "device") -> dict[str, Any]:
    return {"event": "free", "address": addr, "t": t, "pid": pid, "kind": kind}


def live(n: int) -> list[dict[str, Any]]:
    return [_alloc(BASE + i * 8192, 4000, float(i)) for i in range(n)]


def churn_all_freed(n: int) -> list[dict[str, Any]]:
    rng = random.Random(n)
    out = []
    for i in range(n):
        a = BASE + rng.randrange(64) * 2 * MiB
        out += [_alloc(a, rng.choice((256, 4000, MiB)), 2.0 * i), _free(a, 2.0 * i + 1)]
    return out


def teardown(n: int) -> list[dict[str, Any]]:
    """The same addresses every test, all freed between tests (an Xid between two tests)."""
    out = []
    per = max(16, n // 16)  # addresses grow with the ledger: a scan over them would show
    for test in range(n // per):
        t = test * 10.0
        out += [_alloc(BASE + s * 2 * MiB, 4096, t + 1) for s in range(per)]
        out += [_free(BASE + s * 2 * MiB, t + 2) for s in range(per)]
    return out


def pools(n: int) -> list[dict[str, Any]]:
    rng = random.Random(n)
    out = []
    chunks = [BASE + c * 4 * MiB for c in range(max(1, n // 256))]
    for c in chunks:
        out.append(_alloc(c, 2 * MiB, 0.5, kind="segment"))
    for i in range(n):
        b = rng.choice(chunks) + rng.randrange(256) * 4096
        out += [_alloc(b, 4000, 1.0 + 2 * i, kind="block"), _free(b, 2.0 + 2 * i, kind="block")]
    return out


def huge_spanning(n: int) -> list[dict[str, Any]]:
    out = [_alloc(BASE, 1 << 40, 0.0), _free(BASE, 0.5)]
    out += [_alloc(BASE + MiB + i * 8192, 4000, 1.0 + i) for i in range(n)]
    return out


def same_start_over_time(n: int) -> list[dict[str, Any]]:
    out = []
    for i in range(n):  # sizes shrink over time: every older life reaches further
        out += [_alloc(BASE, (n - i) * 16, 2.0 * i), _free(BASE, 2.0 * i + 1)]
    return out


def interleaved_pids(n: int) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        pid = 1 + i % 4
        out += [_alloc(BASE + i * 8192, 4000, float(i), pid=pid)]
        if i % 3 == 0:
            out.append(_free(BASE + i * 8192, i + 0.5, pid=pid))
    return out


SHAPES: dict[str, Callable[[int], list[dict[str, Any]]]] = {
    "live": live, "churn_all_freed": churn_all_freed, "teardown": teardown, "pools": pools,
    "huge_spanning": huge_spanning, "same_start_over_time": same_start_over_time,
    "interleaved_pids": interleaved_pids,
}


def _reads(recs: list[dict[str, Any]], n: int, page: bool) -> int:
    ledger = build_ledger(recs)
    _count(ledger)
    rng = random.Random(7)
    pids = sorted(p for p in ledger.pids if p is not None)
    t_end = max(r["t"] for r in recs)
    queries = []
    for _ in range(40):
        a = BASE + rng.randrange(0, 300 * 2 * MiB)
        at = rng.choice([None, t_end * rng.random(), 5.0 + 10.0 * rng.randrange(max(1, n // 64))])
        queries.append((a, rng.choice(pids), at))
    Counting.reads = 0
    for a, pid, at in queries:
        map_address(ledger, a, pid=pid, at=at, page=page)
    return Counting.reads


@pytest.mark.parametrize("page", [False, True])
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_work_per_address_grows_logarithmically(shape, page):
    small, big = 1024, 4096
    r_small = _reads(SHAPES[shape](small), small, page)
    r_big = _reads(SHAPES[shape](big), big, page)
    # 4x the records: a scan reads 4x the nodes; a logarithmic search a few levels more each
    assert r_big <= 1.6 * r_small + 4000, (shape, r_small, r_big)


def test_teardown_shape_uses_the_exact_stabbing_index():
    """Nothing live at the fault's time, lives before and after it at every address: the time-
    pruned descent gives up within its budget and the interval tree answers."""
    ledger = build_ledger(teardown(1024))
    pl = ledger.pid(1)
    v = map_address(ledger, BASE + 2 * MiB + 5000, pid=1, at=15.0)
    assert v.verdict == "freed" and "past its end" in v.note
    assert v.below["allocation"]["t"] == 11.0  # no live neighbour: the nearest freed one
    assert pl.containers.index.fallbacks >= 1
    # and at a time when the addresses are live, the neighbours are the live ones
    v = map_address(ledger, BASE + 2 * MiB + 5000, pid=1, at=11.5)
    assert v.verdict == "past_end" and v.allocation["address"] == BASE + 2 * MiB


def test_descent_budget_does_not_change_answers():
    recs = teardown(1024) + churn_all_freed(300)
    saved = index_mod.DESCENT_BUDGET
    try:
        answers = []
        for budget in (0, 3, 10_000):
            index_mod.DESCENT_BUDGET = budget
            L = build_ledger(recs)
            answers.append([map_address(L, BASE + k * 777_777, pid=1, at=at).to_json()
                            for k in range(180) for at in (None, 15.0, 333.3)])
        assert answers[0] == answers[1] == answers[2]
    finally:
        index_mod.DESCENT_BUDGET = saved
