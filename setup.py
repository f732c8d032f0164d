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
writes the same JSON in Python (docs/sanitize.md). ``harness/_childwake.c`` (a CPython extension:
a worker imports it without ctypes) is the child-process watch's clock; without it the watch wakes
in Python (docs/plugin.md).
"""

from setuptools import Extension, setup


def optional_extension(name: str, source: str, *flags: str, link: tuple[str, ...] = ()) -> Extension:
    """One compiled part: built with -O2 (and ``flags``) where a compiler is, skipped where not."""
    return Extension(name, sources=[source], extra_compile_args=["-O2", *flags],
                     extra_link_args=list(link), optional=True)


setup(ext_modules=[
    optional_extension("faulthunt.ledger._native", "harness/ledger/_native.c",
                       "-pthread", "-fvisibility=hidden", link=("-pthread",)),
    optional_extension("faulthunt.kernlog._scan", "harness/kernlog/_scan.c"),
    # the line loop of `sanitize parse` (parse_text.py has the same loop in Python)
    optional_extension("faulthunt.sanitizer._fold", "harness/sanitizer/_fold.c"),
    # SanitizerRecord.json_text in one step (records/sanitizer.py keeps the Python route)
    optional_extension("faulthunt.records._record_json", "harness/records/_record_json.c"),
    optional_extension("faulthunt.ledger._mapfast", "harness/ledger/_mapfast.c", "-fvisibility=hidden"),
    # the child-process watch's clock (faulthunt.children wakes in Python without it)
    optional_extension("faulthunt._childwake", "harness/_childwake.c",
                       "-pthread", "-fvisibility=hidden", link=("-pthread",)),
])
