"""Frozen records every module speaks, one submodule per area.

- :mod:`faulthunt.records.xid`       XidEvent, MmuFault (kernel log)
- :mod:`faulthunt.records.run`       TestSpan, WorkerCrash (stress run)
- :mod:`faulthunt.records.sanitizer` SanitizerRecord, Finding (compute-sanitizer)
- :mod:`faulthunt.records.ledger`    Allocation, Free, Launch (allocation ledger)

Import from the submodule; this package re-exports nothing so areas stay independent.
"""
