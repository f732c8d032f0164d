#!/usr/bin/env python3
"""faulthunt's performance table: one row per capability, each a ratio against the obvious baseline.

Every row is measured side by side in this one run (ours and the baseline on the same input, same
machine, paired and interleaved, min/median/max), never compared with a number remembered from elsewhere.

    python scripts/bench.py              # every row
    python scripts/bench.py kernlog      # rows whose name contains "kernlog"
    python scripts/bench.py --quick      # smaller inputs (a smoke test of the bench itself)
    python scripts/bench.py stress --pairs 45   # more pairs for the noisy stress row

Rows live in ``scripts/benchrows/<name>.py``; each defines ``ROWS``: a list of callables taking
``quick: bool`` and returning a :class:`benchrows.Row`. GPU-only rows measured on the H200 are
recorded in docs/performance.md (this script prints them as "recorded" when no GPU is here).
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import benchrows
from benchrows import Row, format_table

#: Order of the table; modules not listed here come after, by name.
ORDER = ["cli", "kernlog", "stress", "plugin", "rundir", "sanitizer", "sanitize_rerun", "mapper", "ledger", "guard"]


def discover() -> list[str]:
    import benchrows

    found = [m.name for m in pkgutil.iter_modules(benchrows.__path__) if not m.name.startswith("_")]
    return [n for n in ORDER if n in found] + sorted(n for n in found if n not in ORDER)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("filter", nargs="*", help="only rows whose module or title contains this")
    parser.add_argument("--quick", action="store_true", help="small inputs: checks the bench runs")
    parser.add_argument("--pairs", type=int, metavar="N",
                        help="pairs for the rows whose noise needs many (the stress row; default 15)")
    args = parser.parse_args(argv)
    benchrows.PAIRS = args.pairs
    rows: list[Row] = []
    for name in discover():
        module = importlib.import_module(f"benchrows.{name}")
        for fn in module.ROWS:
            if args.filter and not any(f in name or f in fn.__name__ for f in args.filter):
                continue
            print(f"... {name}.{fn.__name__}", file=sys.stderr, flush=True)
            rows.append(fn(quick=args.quick))
    print(format_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
