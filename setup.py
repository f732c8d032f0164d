"""Build glue for the compiled parts: the ledger's native recording library, and the ledger
reader's scanner (``harness/ledger/_mapfast.c``, a CPython extension: docs/mapper.md, "Speed").

Everything else is in pyproject.toml. ``harness/ledger/_native.c`` includes neither Python.h nor
CUDA headers (faulthunt loads it with ctypes), so the system C compiler alone builds it at
``pip install``. ``optional=True``: without a compiler (or on a platform it does not build on) the
install still succeeds and the ledger uses its pure-Python route, saying so (docs/ledger.md).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension(
    "faulthunt.ledger._native",
    sources=["harness/ledger/_native.c"],
    extra_compile_args=["-O2", "-pthread", "-fvisibility=hidden"],
    extra_link_args=["-pthread"],
    optional=True,
), Extension(
    "faulthunt.ledger._mapfast",
    sources=["harness/ledger/_mapfast.c"],
    extra_compile_args=["-O2", "-fvisibility=hidden"],
    optional=True,
)])
