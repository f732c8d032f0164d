"""Build glue for the compiled parts: the ledger's native recording library, the ledger
reader's scanner (docs/mapper.md, "Speed"), the kernel-log line finder, the sanitizer parse loop
and its record JSON writer.

Everything else is in pyproject.toml. ``harness/ledger/_native.c`` includes neither Python.h nor
CUDA headers (faulthunt loads it with ctypes), so the system C compiler alone builds it at
``pip install``. ``optional=True``: without a compiler (or on a platform it does not build on) the
install still succeeds and the ledger uses its pure-Python route, saying so (docs/ledger.md).
``harness/kernlog/_scan.c`` is a CPython extension (Python.h only), optional the same way: without
it ``faulthunt.kernlog.parse`` finds the Xid lines in pure Python, with the same result
(docs/kernlog.md). ``harness/sanitizer/_fold.c`` and ``harness/records/_record_json.c`` are
CPython extensions built the same way; without them ``sanitize parse`` runs the same loop and
writes the same JSON in Python (docs/sanitize.md).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension(
    "faulthunt.ledger._native",
    sources=["harness/ledger/_native.c"],
    extra_compile_args=["-O2", "-pthread", "-fvisibility=hidden"],
    extra_link_args=["-pthread"],
    optional=True,
), Extension(
    "faulthunt.kernlog._scan",
    sources=["harness/kernlog/_scan.c"],
    extra_compile_args=["-O2"],
    optional=True,
), Extension(
    # the line loop of `sanitize parse` (a CPython extension; parse_text.py has the same loop in Python)
    "faulthunt.sanitizer._fold",
    sources=["harness/sanitizer/_fold.c"],
    extra_compile_args=["-O2"],
    optional=True,
), Extension(
    # SanitizerRecord.json_text in one step (a CPython extension; records/sanitizer.py keeps the Python route)
    "faulthunt.records._record_json",
    sources=["harness/records/_record_json.c"],
    extra_compile_args=["-O2"],
    optional=True,
), Extension(
    "faulthunt.ledger._mapfast",
    sources=["harness/ledger/_mapfast.c"],
    extra_compile_args=["-O2", "-fvisibility=hidden"],
    optional=True,
)])
