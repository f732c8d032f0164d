"""faulthunt: a CUDA memory-fault investigation harness.

Import name ``faulthunt`` (sources in ``harness/``); the planted-fault kernels are
``faulthunt.kernels`` (sources in ``kernels/``).
"""

__version__ = "0.1.0"
