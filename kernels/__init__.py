"""faulthunt's planted-fault kernels: deliberate GPU bugs, their correct twins, and the evidence
each must leave (plain run, compute-sanitizer line, Xid). See docs/kernels.md.

- :mod:`faulthunt.kernels.catalog`: the catalog (pure data), ``faulthunt kernels list``
- :mod:`faulthunt.kernels.cuda_faults`: CUDA C++ (``planted.cu``) via NVRTC and ``cuda.core``
- :mod:`faulthunt.kernels.numba_faults`: numba kernels (GPU, or the CPU simulator)
- :mod:`faulthunt.kernels.standins`: SIMULATED CPU stand-ins for what the simulator cannot do
- :mod:`faulthunt.kernels.runner`: one planted kernel in a fresh process
- ``suite/``: the bundled pytest suite that ``faulthunt demo`` stress-runs (:data:`SUITE_DIR`)
"""

from __future__ import annotations

from pathlib import Path

from faulthunt.kernels.catalog import CATALOG, PlantedFault, fires, get, names

#: the bundled pytest suite over the planted kernels
SUITE_DIR = Path(__file__).parent / "suite"
#: ``faulthunt.kernels.suite`` per the contract: the suite directory
suite = SUITE_DIR

__all__ = ["CATALOG", "PlantedFault", "SUITE_DIR", "fires", "get", "names", "suite"]
