"""compute-sanitizer: build its command, parse its text and XML output, reduce records to findings.

- :mod:`.parse_text`  text logs of every tool and era (pure)
- :mod:`.parse_xml`   ``--xml --save`` files (pure)
- :mod:`.reduce`      records -> findings, the offending kernel first (pure)
- :mod:`.demangle`    C++ and numba-cuda kernel names
- :mod:`.command`     find the tool, read its ``--help``, build its command line
- :mod:`.render`      the findings renderers' old import path (they live in faulthunt.report.sanitize)
- :mod:`.plan`        which tests to rerun, as which ids, how many times
- :mod:`.collect`     the sanitizer processes, several at once (I/O)
- :mod:`.analyse`     runs -> found / reproduced but silent / not reproduced in K runs
- :mod:`.run`         ``faulthunt sanitize``: plan -> collect -> analyse, written as it goes
- :mod:`.rerun_plugin` the pytest side of a rerun (its pid, a replayed sequence's order)
"""

from typing import Any

from faulthunt.records.sanitizer import Finding, SanitizerRecord
from faulthunt.sanitizer.parse_text import iter_records, parse_text, parse_text_log
from faulthunt.sanitizer.parse_xml import parse_xml
from faulthunt.sanitizer.reduce import Reducer, reduce_records


def __getattr__(name: str) -> Any:
    # the rerun engine (subprocesses, the run directory) is imported when used: `sanitize parse`
    # and the other pure users do not pay for it
    if name in ("run_sanitize", "SanitizeOptions", "SanitizeResult"):
        from faulthunt.sanitizer import run

        return getattr(run, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["run_sanitize", "SanitizeOptions", "SanitizeResult", "parse_text", "parse_text_log", "iter_records", "parse_xml",
           "reduce_records", "Reducer", "Finding", "SanitizerRecord"]
