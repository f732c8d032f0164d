"""Guard mode: guard pages for CUDA allocations, GWP-ASan style (docs/guard.md).

A sample of device allocations (1 in RATE) gets a slot of its own through the CUDA virtual memory
API: the allocation ends right before an unmapped guard granule (or starts right after one), and
when freed its granules are unmapped while the VA stays reserved for a while. An overrun, an
underrun or a use after free of a guarded allocation then faults at once (Xid 31) instead of
silently corrupting a shared 2 MiB page, and the guard's ledger records let :func:`guard_verdict`
name the fault exactly.

- :mod:`.config`     ``--guard [RATE]`` / ``FAULTHUNT_GUARD`` spec -> :class:`GuardConfig` (pure)
- :mod:`.layout`     where an allocation sits in its slot (pure)
- :mod:`.sampling`   the sampler and the quarantine (pure)
- :mod:`.verdict`    guard records + fault address -> exact verdict (pure)
- :mod:`.summary`    a run's guard records -> counts and catches (pure)
- :mod:`.records`    the record format (one place)
- :mod:`.allocator`  slots over a :class:`~.driver.VmmDriver`; :mod:`.driver` (cuda-python),
  :mod:`.fake` (a model for CPU tests)
- hooks: :mod:`.cupy_hook`, :mod:`.numba_emm`, :mod:`.cuda_core_mr`, :mod:`.bindings_hook`,
  :mod:`.torch_alloc`; :mod:`.install` arms them in a worker
"""

from __future__ import annotations

from faulthunt.guard.config import DEFAULT_RATE, GUARD_ENV, GuardConfig, parse_spec
from faulthunt.guard.summary import guard_line, summarize_guard
from faulthunt.guard.verdict import GuardIndex, GuardVerdict, guard_verdict

__all__ = ["DEFAULT_RATE", "GUARD_ENV", "GuardConfig", "parse_spec", "GuardIndex", "GuardVerdict",
           "guard_verdict", "summarize_guard", "guard_line"]
