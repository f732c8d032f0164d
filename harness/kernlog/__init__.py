"""The kernel-log capability: parse, classify and group NVIDIA Xid reports; read them from the kernel.

- :mod:`faulthunt.kernlog.parse`    pure: lines/text/bytes -> :class:`~faulthunt.records.xid.XidEvent`
- :mod:`faulthunt.kernlog.catalog`  pure: Xid number -> category, culprit and recommended action
- :mod:`faulthunt.kernlog.incident` pure: events -> incidents (one fault and its consequences), linear time
- :mod:`faulthunt.kernlog.pci`      pure: the one PCI-address / GPU-UUID normaliser
- :mod:`faulthunt.kernlog.jsonl`    pure: events -> JSON Lines
- :mod:`faulthunt.kernlog.stream`   I/O: a file or pipe read in bounded memory, lines to the parser
- :mod:`faulthunt.kernlog.sources`  I/O: /dev/kmsg, dmesg, journalctl, files, NVML; cursors; Follower

The names below are importable from this package, but each submodule is imported only when one of
its names is first used: ``faulthunt xid parse`` needs the parser, not the sources' subprocess and
threading machinery, and a command's start-up time is part of what a user waits for.
"""

from __future__ import annotations

import importlib
from typing import Any

#: the kernel-log sources :func:`~faulthunt.kernlog.sources.open_source` knows (``--xid-source``)
SPECS = ("auto", "kmsg", "dmesg", "journalctl", "nvml", "file:PATH", "none")

_WHERE = {
    "CatalogEntry": "catalog", "classify": "catalog",
    "Incident": "incident", "IncidentGrouper": "incident", "group_incidents": "incident",
    "parse_line": "parse", "parse_text": "parse", "scan_bytes": "parse", "scan_text": "parse", "StreamScan": "stream",
    "normalize_pci": "pci", "parse_gpu_uuids": "pci",
    "event_json": "jsonl", "events_jsonl": "jsonl",
    "Cursor": "sources", "Follower": "sources", "KernelLogSource": "sources", "KernelLogUnreadable": "sources",
    "ReadResult": "sources", "open_source": "sources",
}

__all__ = ["SPECS", *_WHERE]  # noqa: PLE0604 - _WHERE's keys: the lazily imported names


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{where}"), name)
    globals()[name] = value
    return value
