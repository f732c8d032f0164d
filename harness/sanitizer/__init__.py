"""compute-sanitizer: build its command, parse its text and XML output, reduce records to findings.

- :mod:`.parse_text`  text logs of every tool and era (pure)
- :mod:`.parse_xml`   ``--xml --save`` files (pure)
- :mod:`.reduce`      records -> findings, the offending kernel first (pure)
- :mod:`.demangle`    C++ and numba-cuda kernel names
- :mod:`.command`     find the tool, read its ``--help``, build its command line
- :mod:`.render`      summary text and the findings table
- :mod:`.run`         ``faulthunt sanitize``: rerun recorded failures under the sanitizer (I/O)
"""

from faulthunt.records.sanitizer import Finding, SanitizerRecord
from faulthunt.sanitizer.parse_text import parse_text, parse_text_log
from faulthunt.sanitizer.parse_xml import parse_xml
from faulthunt.sanitizer.reduce import reduce_records
from faulthunt.sanitizer.run import SanitizeResult, run_sanitize

__all__ = ["run_sanitize", "SanitizeResult", "parse_text", "parse_text_log", "parse_xml",
           "reduce_records", "Finding", "SanitizerRecord"]
