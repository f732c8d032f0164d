"""Frozen records every module speaks, one submodule per area.

- :mod:`faulthunt.records.xid`       XidEvent, MmuFault (kernel log)
- :mod:`faulthunt.records.run`       TestSpan and assemble_spans (stress run)
- :mod:`faulthunt.records.events`    worker and controller events (events/*.jsonl, controller.jsonl)
- :mod:`faulthunt.records.documents` RunInfo, Summary, XidLine, MappingEntry, Identity, SanitizerDoc
- :mod:`faulthunt.records.codec`     decoding that validates and names a bad record (Problem)
- :mod:`faulthunt.records.sanitizer` SanitizerRecord, Finding (compute-sanitizer)
- :mod:`faulthunt.records.ledger`    Allocation, Free, Launch (allocation ledger)

Import from the submodule; this package re-exports nothing so areas stay independent.
"""
