"""The kernel-log capability: parse, classify and group NVIDIA Xid reports; read them from the kernel.

- :mod:`faulthunt.kernlog.parse`    pure: lines/text -> :class:`~faulthunt.records.xid.XidEvent`
- :mod:`faulthunt.kernlog.catalog`  pure: Xid number -> category, culprit and recommended action
- :mod:`faulthunt.kernlog.incident` pure: events -> incidents (one fault and its consequences)
- :mod:`faulthunt.kernlog.sources`  I/O: /dev/kmsg, dmesg, journalctl, files, NVML; cursors; Follower
"""

from __future__ import annotations

from faulthunt.kernlog.catalog import CatalogEntry, classify
from faulthunt.kernlog.incident import Incident, group_incidents
from faulthunt.kernlog.parse import parse_line, parse_text, scan_bytes, scan_text
from faulthunt.kernlog.sources import (
    Cursor,
    Follower,
    KernelLogSource,
    KernelLogUnreadable,
    ReadResult,
    open_source,
)

__all__ = [
    "CatalogEntry", "Cursor", "Incident", "group_incidents", "Follower", "KernelLogSource", "KernelLogUnreadable", "ReadResult",
    "classify", "open_source", "parse_line", "parse_text", "scan_bytes", "scan_text",
]
