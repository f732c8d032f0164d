"""Interval indexes over allocation lives: every query O(log n), whatever the ledger's shape.

Pure. A :class:`LevelIndex` holds one level (driver allocations and pool chunks, or framework
blocks) of one process as parallel arrays, lives sorted by (start address, time): no Python
object per allocation. Time enters as *ranks*: the position of a record in the process's
time-sorted records, so "live at time T" is ``r0 <= q < r1`` with ``q`` the rank of the last
record at or before T (exactly the old float comparisons, ties included).

The queries and what bounds them:

- point containment (``containing``): a max-tree over ends finds each group of lives at one start
  that ever reached the address, O(log n) per such group (the answer's size, not the ledger's);
  inside a group, the newest life begun by T that reaches the address is one bisect and one
  descent (address reuse with any mix of sizes).
- nearest live neighbour (``nearest_above`` / ``nearest_below``): a descent over min(r0) and
  max(r1) trees, pruned by time. Ledgers where nothing is live at T (a long run with churn, read
  at its end), live ledgers, allocations made after T: O(log n). A shape where the pruned
  descent cannot settle quickly (lives before and after T everywhere, none live at T) goes to
  :class:`StabbingIndex`, a centred interval tree over ranks built once on first need:
  O(log^2 n) per query, O(n) memory.
- nearest begun neighbour (``*_any``): a min(r0) tree: O(log n).
"""

from __future__ import annotations

import bisect
import importlib
import os
from array import array
from collections.abc import Callable, Iterator, Sequence
from itertools import compress, islice
from operator import itemgetter, le, ne
from typing import Any

#: node visits a pruned descent may spend before the exact stabbing index takes over
DESCENT_BUDGET = 96

#: environment: 1 reads ledgers with the pure-Python route even where the compiled part is built
PURE_ENV = "FAULTHUNT_MAP_PURE"


def compiled_part() -> Any:
    """The optional compiled part of reading and indexing (``_mapfast.c``, built by setup.py),
    or None: not built here, or :data:`PURE_ENV` set. Every use has a pure-Python route."""
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        return None
    try:
        return importlib.import_module("faulthunt.ledger._mapfast")
    except ImportError:  # pragma: no cover - a machine without a compiler at install
        return None


_FAST = compiled_part()


class Tree:
    """A segment tree (min or max) over a sequence, as per-level arrays; leaves are level 0.

    The searches take a C-level predicate (``x.__ge__``, ``x.__lt__``...) applied to a node's
    value: a node passes when some leaf under it may pass (exact for min/max trees).
    """

    __slots__ = ("levels", "n")

    def __init__(self, values: Sequence[int], op: Callable[[int, int], int], pad: int, code: str) -> None:
        self.n = len(values)
        size = 1
        while size < self.n:
            size <<= 1
        leaves = array(code, values)
        if size > self.n:
            leaves.extend(array(code, [pad]) * (size - self.n))
        levels = [leaves]
        fast = _FAST is not None and op in (min, max)
        while len(levels[-1]) > 1:
            lv = levels[-1]
            if fast:
                up = array(code)
                up.frombytes(_FAST.pairwise(lv, op is max))
                levels.append(up)
            else:
                levels.append(array(code, map(op, lv[0::2], lv[1::2])))
        self.levels = levels

    def first(self, lo: int, ok: Callable[[int], bool]) -> int:
        """The first index >= ``lo`` whose value passes ``ok``, or -1."""
        lv = self.levels
        top = len(lv) - 1
        if lo >= self.n or lo < 0:
            return -1
        i, k = lo, 0
        while not ok(lv[k][i]):
            while i & 1:
                i >>= 1
                k += 1
            i += 1
            if k == top or i >= len(lv[k]):
                return -1
        while k:
            k -= 1
            i <<= 1
            if not ok(lv[k][i]):
                i += 1
        return i if i < self.n else -1

    def last(self, hi: int, ok: Callable[[int], bool]) -> int:
        """The last index <= ``hi`` whose value passes ``ok``, or -1."""
        lv = self.levels
        top = len(lv) - 1
        if hi < 0 or not self.n:
            return -1
        if hi >= self.n:
            hi = self.n - 1
        i, k = hi, 0
        while not ok(lv[k][i]):
            while not i & 1:
                if k == top:
                    return -1
                i >>= 1
                k += 1
            i -= 1
        while k:
            k -= 1
            i = (i << 1) | 1
            if not ok(lv[k][i]):
                i -= 1
        return i


def _pair_first(t0: Tree, t1: Tree, lo: int, ok0: Callable[[int], bool], ok1: Callable[[int], bool],
                budget: int, stop: int | None = None) -> int | None:
    """First index in [``lo``, ``stop``) passing both ``ok0`` (on t0) and ``ok1`` (on t1); -1 when
    none; None when ``budget`` node visits were not enough (the caller asks an exact index)."""
    a, b = t0.levels, t1.levels
    top = len(a) - 1
    n = t0.n if stop is None else min(stop, t0.n)
    if lo >= n or lo < 0:
        return -1
    i, k = lo, 0
    while True:
        budget -= 1
        if budget < 0:
            return None
        if ok0(a[k][i]) and ok1(b[k][i]):
            if k == 0:
                return i if i < n else -1
            k -= 1
            i <<= 1
            continue
        while i & 1:
            i >>= 1
            k += 1
        i += 1
        if k >= top or (i << k) >= n:
            return -1


def _pair_last(t0: Tree, t1: Tree, hi: int, ok0: Callable[[int], bool], ok1: Callable[[int], bool],
               budget: int) -> int | None:
    """Mirror of :func:`_pair_first`: the last index <= ``hi`` passing both."""
    a, b = t0.levels, t1.levels
    top = len(a) - 1
    if hi < 0 or not t0.n:
        return -1
    if hi >= t0.n:
        hi = t0.n - 1
    i, k = hi, 0
    while True:
        budget -= 1
        if budget < 0:
            return None
        if ok0(a[k][i]) and ok1(b[k][i]):
            if k == 0:
                return i
            k -= 1
            i = (i << 1) | 1
            continue
        while not i & 1:
            if k >= top:
                return -1
            i >>= 1
            k += 1
        i -= 1


def _array(code: str, data: bytes) -> array[int]:
    out = array(code)
    out.frombytes(data)
    return out


class StabbingIndex:
    """Lives as rank intervals [r0, r1) in a centred interval tree over ranks (exact, O(n) memory).

    A life sits in the one node (level L, number k) whose midpoint it contains, L being the
    highest bit where its first and last rank differ. The nodes holding lives live at rank q are
    the ones on q's path (k = q >> L for each L); inside one, a life is live at q when its first
    rank is <= q (q left of the midpoint) or its last rank is >= q (right of it): a one-sided
    test, answered by a min-tree over first ranks and a max-tree over last ranks of the lives
    in node order. Each node's lives are in index (address) order, so the first / last live
    life at or after / before an index is a bisect and a descent per level: O(log^2 n).
    """

    __slots__ = ("keys", "starts", "idx", "xs", "ys", "xtree", "ytree", "height")

    def __init__(self, r0: Sequence[int], r1: Sequence[int], limit: int) -> None:
        self.height = max(1, limit.bit_length())
        node = array("q")
        for x, e in zip(r0, r1):
            lvl = (x ^ (e - 1)).bit_length() if e > x else 0
            node.append((lvl << 48) | (x >> lvl) if e > x else -1)  # -1: never live, left out
        order = sorted(compress(range(len(node)), map((-1).__ne__, node)), key=node.__getitem__)
        self.idx = array("q", order)
        self.xs = array("q", map(r0.__getitem__, order))
        self.ys = array("q", (r1[i] - 1 for i in order))
        keyed = array("q", map(node.__getitem__, order))
        del node, order
        n = len(keyed)
        firsts = [0, *compress(range(1, n), map(ne, keyed, islice(keyed, 1, None)))] if n else []
        self.keys = array("q", map(keyed.__getitem__, firsts))
        self.starts = array("q", firsts)
        self.starts.append(n)
        big = 1 << 62
        self.xtree = Tree(self.xs, min, big, "q")
        self.ytree = Tree(self.ys, max, -1, "q")

    def _nodes(self, q: int) -> Iterator[tuple[int, int, Tree | None, Any]]:
        """(lo, hi, tree, one-sided test) per level holding rank q; tree and test are None at level 0."""
        keys, starts = self.keys, self.starts
        if q < 0:
            return
        for lvl in range(self.height + 1):
            key = (lvl << 48) | (q >> lvl)
            p = bisect.bisect_left(keys, key)
            if p == len(keys) or keys[p] != key:
                continue
            lo, hi = starts[p], starts[p + 1]
            if lvl == 0:
                yield lo, hi, None, None
            elif q < (((q >> lvl) << lvl) | (1 << (lvl - 1))):
                yield lo, hi, self.xtree, q.__ge__
            else:
                yield lo, hi, self.ytree, q.__le__

    def first_live(self, lo_index: int, q: int) -> int:
        """The smallest life index >= ``lo_index`` live at rank ``q``, or -1."""
        best = -1
        idx = self.idx
        for lo, hi, tree, ok in self._nodes(q):
            p = bisect.bisect_left(idx, lo_index, lo, hi)
            if best >= 0:
                hi = bisect.bisect_left(idx, best, p, hi)
            if p >= hi:
                continue
            if tree is not None:
                p = tree.first(p, ok)
                if p < 0 or p >= hi:
                    continue
            best = idx[p]
        return best

    def last_live(self, hi_index: int, q: int) -> int:
        """The largest life index <= ``hi_index`` live at rank ``q``, or -1."""
        best = -1
        idx = self.idx
        for lo, hi, tree, ok in self._nodes(q):
            p = bisect.bisect_right(idx, hi_index, lo, hi) - 1
            if best >= 0:
                lo = bisect.bisect_right(idx, best, lo, p + 1)
            if p < lo:
                continue
            if tree is not None:
                p = tree.last(p, ok)
                if p < lo:
                    continue
            best = idx[p]
        return best


class LevelIndex:
    """One level of one process: lives sorted by (start, time) as parallel arrays.

    ``addr``/``end`` bytes, ``r0``/``r1`` ranks of the records that began and closed each life
    (``r1`` = ``limit`` while open), ``lives`` the life numbers in the owner's own tables (the
    caller keeps what is needed to show a life). Groups: one per distinct start, ``glo[g]`` its
    first index. Trees and the stabbing index are made on first use.
    """

    def __init__(self, addr: Sequence[int], end: Sequence[int], r0: Sequence[int],
                 r1: Sequence[int], lives: Sequence[int], limit: int) -> None:
        rank = "i" if limit < 1 << 31 else "q"  # ranks fit in 32 bits unless 2**31 records
        if not self._fast_columns(addr, end, r0, r1, lives, rank):
            self._columns(addr, end, r0, r1, lives, rank)
        self.limit = limit
        self._end_tree: Tree | None = None
        self._r0_tree: Tree | None = None
        self._r1_tree: Tree | None = None
        self._stab: StabbingIndex | None = None
        self._ends: array[int] | None = None
        #: pruned descents that ran out of budget (tests read it: the exact index took over)
        self.fallbacks = 0

    def _fast_columns(self, addr: Sequence[int], end: Sequence[int], r0: Sequence[int], r1: Sequence[int],
                      lives: Sequence[int], rank: str) -> bool:
        """The columns sorted and grouped by the compiled part; False when it cannot take them
        (not built, or columns that are not 8-byte arrays, or lives that are not 0..n-1)."""
        if _FAST is None or not (isinstance(lives, range) and lives == range(len(addr))) \
                or not all(isinstance(c, array) for c in (addr, end, r0, r1)):
            return False
        got = _FAST.index_columns(addr, end, r0, r1, rank == "i")
        if got is None:
            return False
        self.addr, self.end, self.r0, self.r1, self.lives, self.glo, self.starts = (
            _array(code, data) for code, data in zip(("Q", "Q", rank, rank, "q", "q", "Q"), got))
        return True

    def _columns(self, addr: Sequence[int], end: Sequence[int], r0: Sequence[int], r1: Sequence[int],
                 lives: Sequence[int], rank: str) -> None:
        if all(map(le, addr, islice(addr, 1, None))):  # allocated upwards (a bump allocator)
            self.addr = array("Q", addr)
            self.end = array("Q", end)
            self.r0 = array(rank, r0)
            self.r1 = array(rank, r1)
            self.lives = array("q", lives)
        else:
            order = sorted(range(len(addr)), key=addr.__getitem__)  # stable: time order per start
            take = itemgetter(*order)  # one C call per column (several of them are large)
            self.addr = array("Q", take(addr))
            self.end = array("Q", take(end))
            self.r0 = array(rank, take(r0))
            self.r1 = array(rank, take(r1))
            self.lives = array("q", order if isinstance(lives, range) and lives.start == 0 and lives.step == 1
                               else take(lives))
        n = len(self.addr)
        a = self.addr
        firsts = [0, *compress(range(1, n), map(ne, a, islice(a, 1, None)))] if n else []
        self.glo = array("q", firsts)
        self.glo.append(n)
        self.starts = array("Q", map(a.__getitem__, firsts))

    def __len__(self) -> int:
        return len(self.addr)

    def build(self) -> None:
        """Make the trees now (a forked reader does, so its parent does not have to)."""
        _ = self.end_tree, self.r0_tree, self.r1_tree

    # lazily built structures -----------------------------------------------------------------
    @property
    def end_tree(self) -> Tree:
        if self._end_tree is None:
            self._end_tree = Tree(self.end, max, 0, "Q")
        return self._end_tree

    @property
    def r0_tree(self) -> Tree:
        if self._r0_tree is None:
            self._r0_tree = Tree(self.r0, min, (1 << 31) - 1 if self.r0.typecode == "i" else 1 << 62,
                                 self.r0.typecode)
        return self._r0_tree

    @property
    def r1_tree(self) -> Tree:
        if self._r1_tree is None:
            self._r1_tree = Tree(self.r1, max, -1, self.r1.typecode)
        return self._r1_tree

    @property
    def stabbing(self) -> StabbingIndex:
        if self._stab is None:
            self._stab = StabbingIndex(self.r0, self.r1, self.limit)
        return self._stab

    # helpers ---------------------------------------------------------------------------------
    def group_of(self, i: int) -> int:
        return bisect.bisect_right(self.glo, i) - 1

    def upto(self, address: int) -> int:
        """Index of the last life starting at or below ``address`` (-1 when none)."""
        g = bisect.bisect_right(self.starts, address)
        return self.glo[g] - 1

    def begun_in_group(self, i: int, q: int) -> int:
        """The newest life of ``i``'s group begun by rank ``q`` (-1 when none)."""
        g = self.group_of(i)
        lo, hi = self.glo[g], self.glo[g + 1]
        j = bisect.bisect_right(self.r0, q, lo, hi) - 1
        return j if j >= lo else -1

    def first_live(self, lo: int, q: int) -> int:
        got = _pair_first(self.r0_tree, self.r1_tree, lo, q.__ge__, q.__lt__, DESCENT_BUDGET)
        if got is None:
            self.fallbacks += 1
            return self.stabbing.first_live(lo, q)
        return got

    def last_live(self, hi: int, q: int) -> int:
        got = _pair_last(self.r0_tree, self.r1_tree, hi, q.__ge__, q.__lt__, DESCENT_BUDGET)
        if got is None:
            self.fallbacks += 1
            return self.stabbing.last_live(hi, q)
        return got

    # the queries -----------------------------------------------------------------------------
    def containing(self, address: int, q: int) -> tuple[list[int], list[int]]:
        """(live, freed) indices: per start at or below ``address``, the newest life begun by rank
        ``q`` that reaches ``address``, live or freed at ``q``; highest start first."""
        live: list[int] = []
        freed: list[int] = []
        cur = self.upto(address)
        if cur < 0:
            return live, freed
        tree = self.end_tree
        reaches = address.__lt__
        r0, r1, glo = self.r0, self.r1, self.glo
        while cur >= 0:
            i = tree.last(cur, reaches)
            if i < 0:
                break
            g = bisect.bisect_right(glo, i) - 1
            lo = glo[g]
            if r0[i] > q:  # reached only by lives begun after q: the newest begun one that reaches
                j = bisect.bisect_right(r0, q, lo, i) - 1
                i = tree.last(j, reaches) if j >= lo else -1
            if i >= lo:
                (live if r1[i] > q else freed).append(i)
            cur = lo - 1
        return live, freed

    def _below(self, address: int, q: int, pick: Callable[[int], int]) -> int:
        """The candidate (``pick``: a life index -> its group's candidate, or -1) ending at or below
        ``address`` with the highest end, the higher start on a tie; -1 when none."""
        best, best_end = -1, -1
        cur = self.upto(address)
        end, glo = self.end, self.glo
        while cur >= 0:
            i = pick(cur)
            if i < 0:
                break
            g = bisect.bisect_right(glo, i) - 1
            e = end[i]
            if best_end < e <= address:
                best, best_end = i, e
            cur = glo[g] - 1
            if best >= 0 and cur >= 0:
                # a lower start can win only with a higher end
                j = self.end_tree.last(cur, best_end.__lt__)
                if j < 0:
                    break
                cur = glo[bisect.bisect_right(glo, j)] - 1
        return best

    def nearest_below(self, address: int, q: int) -> int:
        """The life live at ``q`` ending at or before ``address`` with the highest end."""
        def pick(cur: int) -> int:
            return self.last_live(cur, q)
        return self._below(address, q, pick)

    def nearest_above(self, address: int, q: int) -> int:
        """The life live at ``q`` with the lowest start above ``address``."""
        return self.first_live(self.upto(address) + 1, q)

    def nearest_below_any(self, address: int, q: int) -> int:
        """Like :meth:`nearest_below` over each start's newest life begun by ``q`` (freed or not)."""
        def pick(cur: int) -> int:  # the last begun life at or below cur is its start's newest
            return self.r0_tree.last(cur, q.__ge__)
        return self._below(address, q, pick)

    def nearest_above_any(self, address: int, q: int) -> int:
        """Like :meth:`nearest_above` over each start's newest life begun by ``q``."""
        i = self.r0_tree.first(self.upto(address) + 1, q.__ge__)
        return -1 if i < 0 else self.begun_in_group(i, q)

    def edges(self, lo: int, hi: int) -> list[int]:
        """Distinct starts and ends of lives (any time) in (lo, hi]: where a page's verdict may change."""
        s = self.starts
        out = list(s[bisect.bisect_right(s, lo):bisect.bisect_right(s, hi)])
        if self._ends is None:
            self._ends = array("Q", sorted(set(self.end)))
        e = self._ends
        out.extend(e[bisect.bisect_right(e, lo):bisect.bisect_right(e, hi)])
        return out

    def any_overlapping(self, lo: int, hi: int, before: int, after: int) -> bool:
        """Is there a life starting in [lo, hi) begun before rank ``before`` and open at rank ``after``
        (``r0 < before`` and ``r1 >= after``)?"""
        s = self.starts
        first = self.glo[bisect.bisect_left(s, lo)]
        stop = self.glo[bisect.bisect_left(s, hi)]
        if first >= stop:
            return False
        got = _pair_first(self.r0_tree, self.r1_tree, first, before.__gt__, after.__le__, 1 << 62, stop)
        return got is not None and got >= 0
