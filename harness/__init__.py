"""faulthunt: a CUDA memory-fault investigation harness.

Import name ``faulthunt`` (sources in ``harness/``); the planted-fault kernels are
``faulthunt.kernels`` (sources in ``kernels/``).

The pytest plugin is :mod:`faulthunt.plugin`, loaded through the ``pytest11`` entry point named
``faulthunt`` (every pytest session where faulthunt is installed; it does nothing without a run
directory). ``pytest -p faulthunt`` stays an alias, for sessions that disable plugin autoloading:
it registers this package, whose ``pytest_plugins`` makes pytest load faulthunt.plugin. The two
never load the plugin twice: ``-p faulthunt`` takes the name ``faulthunt`` first, and pytest
then passes over the entry point of that name. ``import faulthunt`` for the CLI stays cheap:
nothing here imports pytest. See docs/plugin.md.
"""

__version__ = "0.1.0"

#: what ``pytest -p faulthunt`` loads along with this package (pytest reads it on registration)
pytest_plugins = ["faulthunt.plugin"]
