"""faulthunt: a CUDA memory-fault investigation harness.

Import name ``faulthunt`` (sources in ``harness/``); the planted-fault kernels are
``faulthunt.kernels`` (sources in ``kernels/``).

This package is also the pytest plugin: ``pytest -p faulthunt`` imports ``faulthunt`` and
registers its ``pytest_*`` functions, thin forwarders into :mod:`faulthunt.plugin` that import it
only when pytest calls them, so ``import faulthunt`` for the CLI stays cheap and does not import
pytest. See docs/plugin.md.
"""

__version__ = "0.1.0"

# The two hooks pytest needs to find on the package for ``pytest -p faulthunt``. They are real
# functions (pluggy >= 1.7, with pytest 9.2, looks hooks up statically and no longer sees a module
# ``__getattr__``) that import faulthunt.plugin only when pytest calls them, so ``import faulthunt``
# for the CLI stays cheap. Options mirror faulthunt.plugin's own hookimpls.
def pytest_addoption(parser):  # type: ignore[no-untyped-def]
    from faulthunt import plugin

    plugin.pytest_addoption(parser)


def _trylast(fn):  # type: ignore[no-untyped-def]
    # pytest.hookimpl(trylast=True) without importing pytest at package import
    fn.pytest_impl = {"wrapper": False, "hookwrapper": False, "optionalhook": False,
                      "tryfirst": False, "trylast": True, "specname": None}  # what pluggy marks
    return fn


@_trylast
def pytest_configure(config):  # type: ignore[no-untyped-def]
    from faulthunt import plugin

    plugin.pytest_configure(config)
