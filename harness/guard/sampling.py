"""Which allocations get a guard (GWP-ASan style sampling) and how long freed slots stay fenced.

Both pure and deterministic: :class:`Sampler` draws from a ``random.Random`` seeded with the run's
seed and the running test's node id, so a test samples the same allocations every time it runs
with the same seed, while ``--count 50`` (whose repetitions have different node ids) samples
different ones in each repetition. :class:`Quarantine` is a bounded FIFO.
"""

from __future__ import annotations

import collections
import random
from typing import Generic, TypeVar

K = TypeVar("K")


class Sampler:
    """Says yes to 1 allocation in ``rate`` on average.

    Like GWP-ASan, the gap to the next sampled allocation is drawn uniformly from
    ``[1, 2 * rate - 1]`` (mean ``rate``), so the decision for an unsampled allocation is one
    decrement and one comparison. ``rate == 1`` samples every allocation.
    """

    def __init__(self, rate: int, seed: int = 0) -> None:
        if rate < 1:
            raise ValueError(f"rate must be >= 1, not {rate}")
        self.rate = rate
        self.seed = seed
        self.key: str | None = None
        self._rng = random.Random()
        self._countdown = 1
        self.reseed(None)

    def reseed(self, key: str | None) -> None:
        """Start the draw for ``key`` (a test's node id; None between tests)."""
        self.key = key
        self._rng.seed(f"{self.seed}\0{key}", version=2)
        self._countdown = self._gap()

    def _gap(self) -> int:
        return 1 if self.rate == 1 else self._rng.randint(1, 2 * self.rate - 1)

    def sample(self) -> bool:
        """True when this allocation is the one to guard."""
        self._countdown -= 1
        if self._countdown > 0:
            return False
        self._countdown = self._gap()
        return True


class Quarantine(Generic[K]):
    """Freed slots, oldest first, bounded by count and by reserved bytes.

    :meth:`add` returns the keys that must be released now to stay within both bounds (the oldest
    first); the newest entry is released at once only when the bounds leave room for nothing.
    """

    def __init__(self, max_slots: int, max_bytes: int) -> None:
        self.max_slots = max_slots
        self.max_bytes = max_bytes
        self._q: collections.deque[tuple[K, int]] = collections.deque()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._q)

    def add(self, key: K, nbytes: int) -> list[K]:
        self._q.append((key, nbytes))
        self.bytes += nbytes
        out: list[K] = []
        while self._q and (len(self._q) > self.max_slots or self.bytes > self.max_bytes):
            k, n = self._q.popleft()
            self.bytes -= n
            out.append(k)
        return out

    def drain(self) -> list[K]:
        """Everything still held, oldest first (at exit)."""
        out = [k for k, _ in self._q]
        self._q.clear()
        self.bytes = 0
        return out
