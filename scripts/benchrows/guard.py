"""Guard mode rows (CPU side; the GPU overhead is scripts/gpu/guard_validate.sh, docs/guard.md).

- The unsampled path every allocation of a guarded run pays: the CuPy hook at the default rate in
  front of a stand-in pool allocator, against calling that pool directly. The difference per call
  is what guard mode adds to each allocation it does not guard.
- Verdicts: Xid pages against the guard slots of a long run, through ``GuardIndex`` (built once,
  included), against a linear scan of every slot for each page (the same records, the same rule).
"""

from __future__ import annotations

import random
import time

from benchrows import Row, Samples, paired


def unsampled_path(quick: bool) -> Row:
    from faulthunt.guard import GuardConfig
    from faulthunt.guard.allocator import GuardAllocator
    from faulthunt.guard.cupy_hook import make_allocator
    from faulthunt.guard.fake import FakeVmmDriver

    n = 50_000 if quick else 500_000
    guard = GuardAllocator(GuardConfig(rate=10**9), FakeVmmDriver(), None)  # never samples
    guard.sampler.reseed("bench")

    def pool(size: int) -> int:
        return size

    hooked = make_allocator(guard, pool, memory_cls=None, pointer_cls=None, get_device=lambda: 0)

    def ours() -> None:
        for _ in range(n):
            hooked(4000)

    def base() -> None:
        for _ in range(n):
            pool(4000)

    o, b = paired(ours, base, repeat=5)
    added_us = (o.median - b.median) / n * 1e6
    return Row(f"guard: {n:,} unsampled allocations", "CuPy hook -> pool", "pool called directly",
               o, b, "< 1 us added per allocation", goal_s=b.median + n * 1e-6,
               note=f"+{added_us:.2f} us per allocation (CuPy's pool allocation itself: ~8 us on the H200)")


def verdicts(quick: bool) -> Row:
    from faulthunt.guard.layout import plan_slot
    from faulthunt.guard.records import alloc_fields
    from faulthunt.guard.verdict import GuardIndex, _classify, _freed

    n_slots, n_pages = (20_000, 1_000) if quick else (100_000, 10_000)
    rng = random.Random(3)
    g = 2 << 20
    recs = []
    t = 1.0
    for i in range(n_slots):
        size = rng.choice((256, 4000, 4096, 65536, 3 << 20))
        lay = plan_slot(size, g, 256, "right")
        base = 0x7F00_0000_0000 + i * (8 << 20)
        recs.append({"event": "alloc", "t": t, "source": "guard", "nodeid": f"t::{i // 100}",
                     **alloc_fields(i, base, lay, 256, "cupy", 0)})
        t += 1.0
        recs.append({"event": "free", "t": t, "source": "guard", "address": base + lay.data_offset,
                     "phase": "requested", "guard": {"slot": i}})
        t += 1.0
    pages = [0x7F00_0000_0000 + rng.randrange(n_slots * (8 << 20) // 4096) * 4096 for _ in range(n_pages)]
    got: dict[str, list] = {}

    def ours() -> None:
        idx = GuardIndex.from_records(recs)
        got["ours"] = [idx.verdict(p, page=True) for p in pages]

    k = min(n_pages, 200)  # the scan of every page would take minutes: a subset, scaled

    parts: list[tuple[float, float]] = []

    def base() -> None:
        t0 = time.perf_counter()
        slots = GuardIndex.from_records(recs).slots  # the same replay; then a scan per page
        t1 = time.perf_counter()
        out = []
        for p in pages[:k]:
            hit = [s for s in slots if s.reserve[0] <= p < s.reserve[1]]
            s = max(hit, key=lambda s: s.t) if hit else None
            out.append(None if s is None else _classify(s, p, p + 4096, True, freed=_freed(s, None)))
        got["base"] = out
        parts.append((t1 - t0, time.perf_counter() - t1))

    o, b = paired(ours, base, repeat=3 if quick else 2, warmup=0)
    b = Samples(tuple(replay + scan * n_pages / k for replay, scan in parts))  # only the scan scaled
    same = [x and x.verdict for x in got["ours"][:k]] == [x and x.verdict for x in got["base"]]
    return Row(f"guard verdicts: {n_pages:,} pages, {n_slots:,} slots", "GuardIndex", "linear scan",
               o, b, "< 0.1x", goal_ratio=0.1,
               note=f"index build included; baseline timed on {k} pages and scaled; "
                    + ("same verdicts" if same else "VERDICTS DIFFER"))


ROWS = [unsampled_path, verdicts]
