"""PCI addresses and GPU UUIDs as the kernel log and NVML spell them, in one canonical form.

The same GPU is spelt several ways: the Xid line's ``PCI:0000:3b:00``, NVML's ``00000000:3B:00.0``,
a pre-2010 driver's ``0000:01:00`` without ``PCI:``, MIG's ``PCI:0000:3b:00 GPU-I:05 GPU-CI:01``,
a user's ``3b:00``. :func:`normalize_pci` turns every one of them into ``dddd:bb:dd`` (lower-case
hex; the domain is 0 when none is written, at least four digits; bus and device two; the function
and any MIG suffix dropped, since an Xid names a device, not a function), so that lines, NVML
records and identity.json compare equal. Text that is not a PCI address comes back lower-cased and
stripped, so two spellings of the same junk still compare equal, and nothing here raises.

The driver prints each GPU's UUID once per load::

    NVRM: GPU at PCI:0000:00:06: GPU-f443d679-49ad-ee2e-df61-53505888c8f0

:func:`parse_gpu_uuids` reads those lines (keys normalised; only a whole 36-character UUID counts,
so a line cut inside the UUID names no GPU rather than a wrong one).
"""

from __future__ import annotations

import re

_PCI_RE = re.compile(
    r"\s*(?:PCI:)?(?:(?P<dom>[0-9A-Fa-f]{1,8}):)?(?P<bus>[0-9A-Fa-f]{1,2}):(?P<dev>[0-9A-Fa-f]{1,2})"
    r"(?:\.[0-7])?(?![0-9A-Fa-f:.])"
)
_HEX = "[0-9A-Fa-f]"
_UUID_RE = re.compile(
    r"NVRM: GPU at (?:PCI:)?(?P<pci>[0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{1,2}:[0-9A-Fa-f]{1,2}(?:\.[0-7])?): "
    rf"(?P<uuid>GPU-{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}})(?![0-9A-Fa-f-])"
)


def normalize_pci(pci: object) -> str | None:
    """``dddd:bb:dd`` for any spelling of a PCI address; None for None or blank; other text lower-cased.

    >>> [normalize_pci(p) for p in ("PCI:0000:3B:00", "00000000:3b:00.0", "3b:00", "PCI:0000:3b:00 GPU-I:05")]
    ['0000:3b:00', '0000:3b:00', '0000:3b:00', '0000:3b:00']
    """
    if pci is None:
        return None
    text = str(pci)
    m = _PCI_RE.match(text)
    if m is None:
        return text.strip().lower() or None
    dom = m.group("dom")
    return f"{int(dom, 16) if dom else 0:04x}:{int(m.group('bus'), 16):02x}:{int(m.group('dev'), 16):02x}"


def parse_gpu_uuids(text: str) -> dict[str, str]:
    """Normalised PCI address -> ``GPU-<uuid>``, from the driver's ``NVRM: GPU at PCI:...`` lines."""
    out: dict[str, str] = {}
    for m in _UUID_RE.finditer(text):
        key = normalize_pci(m.group("pci"))
        if key:
            out[key] = m.group("uuid")
    return out
