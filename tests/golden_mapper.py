"""Golden mapper outputs for the committed H200 ledgers, captured with the implementation before the
columnar reader (commit eed7246) and compared in tests/test_mapper_differential.py.

``queries`` is deterministic: for every pid, addresses around each recorded allocation (both edges,
one byte and one page either side, the end of its reach) at the end of the ledger and at each
alloc/free time, as bytes and as pages, with and without the pid. Each answer is kept as its
verdict and a SHA-256 of its whole ``to_json()`` (sorted keys), so any change of allocation,
offset, neighbours, launches, test or note shows.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).parent / "data"
#: every directory of real ledger files under tests/data (H200 captures)
LEDGER_DIRS = sorted({str(p.parent.relative_to(ROOT)) for p in ROOT.rglob("ledger/*.jsonl")}
                     | {"ledger/h200_numba_oob1", "ledger/h200_round3/cases/cuda_core_past_end",
                        "ledger/h200_round3/cases/cupy_wild"})
RUN_DIRS = sorted({str(p.parent.relative_to(ROOT)) for p in ROOT.rglob("xid.jsonl")}
                  | {str(p.parent.parent.relative_to(ROOT)) for p in ROOT.rglob("sanitizer/sanitizer.json")})
GOLDEN = ROOT / "ledger" / "golden_map.json"
NEAR = 2 << 20
MAX_PER_DIR = 600


def queries(ledger_dir: Path) -> Iterator[tuple[int | None, int, float | None, bool]]:
    """(pid, address, at, page) to ask of the ledger in ``ledger_dir``."""
    out: list[tuple[int | None, int, float | None, bool]] = []
    for path in sorted(ledger_dir.glob("*.jsonl")):
        recs = []
        for line in path.read_bytes().rstrip(b"\0").decode("utf-8", "replace").splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict):
                recs.append(rec)
        pid = int(path.stem) if path.stem.isdigit() else None
        allocs = [r for r in recs if r.get("event") == "alloc" and isinstance(r.get("address"), int)]
        times = sorted({float(r["t"]) for r in recs if r.get("event") in ("alloc", "free")
                        and isinstance(r.get("t"), (int, float))})
        for r in allocs:
            a, n = r["address"], int(r.get("size") or 0)
            for off in (-4097, -1, 0, 1, n - 1, n, n + 1, n + 4096, n + NEAR, -NEAR - 1):
                for at in [None, *times[:6], *times[-3:]]:
                    for page in (False, True):
                        out.append((pid, a + off, at, page))
                out.append((None, a + off, None, False))
    # a fixed, spread-out subset keeps the golden file small
    step = max(1, len(out) // MAX_PER_DIR)
    yield from (q for q in out[::step] if q[1] >= 0)


def digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:20]


def answers(load: Any, map_address: Any, map_run: Any, tmp: Path) -> dict[str, Any]:
    """Every golden answer from the given implementation (``load``: a directory -> Ledger)."""
    import shutil

    got: dict[str, Any] = {"ledgers": {}, "runs": {}}
    for rel in LEDGER_DIRS:
        ledger = load(ROOT / rel)
        rows = []
        for pid, address, at, page in queries(ROOT / rel):
            try:
                v = map_address(ledger, address, pid=pid, at=at, page=page).to_json()
                rows.append([pid, address, at, page, v["verdict"], digest(v)])
            except Exception as exc:  # noqa: BLE001 - the error (type and words) is part of the answer
                rows.append([pid, address, at, page, type(exc).__name__, digest(str(exc))])
        got["ledgers"][rel] = {"records": ledger.records, "skipped": ledger.skipped, "answers": rows}
    for rel in RUN_DIRS:
        copy = tmp / rel.replace("/", "_")
        shutil.copytree(ROOT / rel, copy)
        entries = map_run(copy)
        got["runs"][rel] = [[e.get("verdict"), digest(e)] for e in entries]
    return got
