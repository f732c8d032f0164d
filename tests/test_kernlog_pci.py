"""One PCI/UUID reader for the kernel log, NVML and the run summary (faulthunt.kernlog.pci)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from faulthunt import summary
from faulthunt.kernlog import parse
from faulthunt.kernlog.pci import normalize_pci, parse_gpu_uuids

UUID = "GPU-f443d679-49ad-ee2e-df61-53505888c8f0"


@pytest.mark.parametrize(("raw", "canonical"), [
    ("0000:00:06", "0000:00:06"),
    ("PCI:0000:00:06", "0000:00:06"),           # the Xid line
    ("00000000:3B:00.0", "0000:3b:00"),         # NVML's busId
    ("0000:3b:00.0", "0000:3b:00"),
    ("0000:3B:00", "0000:3b:00"),
    ("3b:00", "0000:3b:00"),                    # the two used to disagree: kept as "3b:00" by the parser
    ("3b:00.0", "0000:3b:00"),
    ("PCI:0001:6c:00", "0001:6c:00"),
    ("PCI:0000:0:6", "0000:00:06"),
    ("PCI:0000:3b:00 GPU-I:05 GPU-CI:01", "0000:3b:00"),  # MIG: the device, not the instance
    ("  0000:3b:00  ", "0000:3b:00"),
    ("10000:3b:00", "10000:3b:00"),             # a domain wider than 16 bits keeps its digits
    ("junk", "junk"), ("JUNK ", "junk"), ("", None), ("   ", None), (None, None),
    ("0000:3b:00:00", "0000:3b:00:00"),         # not an address: left as text
    (b"00000000:3B:00.0".decode(), "0000:3b:00"),
])
def test_normalize_pci(raw: str | None, canonical: str | None) -> None:
    assert normalize_pci(raw) == canonical


def test_every_module_uses_the_one_normaliser() -> None:
    assert summary.normalize_pci is normalize_pci is parse.normalize_pci
    assert summary.parse_gpu_uuid_lines is parse_gpu_uuids is parse.parse_gpu_uuids


def test_uuid_lines() -> None:
    text = (f"[1.0] NVRM: GPU at PCI:0000:3B:00: {UUID}\n"
            f"NVRM: GPU at 0000:01:00: {UUID.replace('f443', 'aaaa')}\n"
            "NVRM: GPU at PCI:0000:02:00: GPU-f443d679-49ad\n"          # cut inside the UUID: no GPU
            f"NVRM: GPU at PCI:0000:03:00: {UUID}deadbeef\n")           # not a UUID either
    assert parse_gpu_uuids(text) == {"0000:3b:00": UUID, "0000:01:00": UUID.replace("f443", "aaaa")}


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=40), st.integers(), st.none(), st.binary(max_size=20)))
def test_normalize_never_raises_and_is_idempotent(raw: object) -> None:
    once = normalize_pci(raw)
    assert once is None or normalize_pci(once) == once
