"""A model of the CUDA virtual memory calls, for running guard mode where there is no GPU.

:class:`FakeVmmDriver` implements :class:`~faulthunt.guard.driver.VmmDriver` with the rules the
real driver enforces (mappings inside a reservation, granule-aligned, whole ranges unmapped, VA
freed only when nothing is mapped in it, handles freed when released and unmapped) and raises
:class:`FakeFault` from :meth:`FakeVmmDriver.touch` on an access to VA that is not mapped with
access: what the GPU turns into an Xid 31 naming the 4 KiB page. Used by the CPU tests of the
allocator and of every framework hook; never by a real run.
"""

from __future__ import annotations

import collections
from typing import Any

from faulthunt.guard.driver import GuardDriverError

PAGE = 4096


class FakeFault(Exception):
    """An access to unmapped VA: the model of an MMU fault (Xid 31 names ``page``)."""

    def __init__(self, address: int, write: bool) -> None:
        self.address = address
        self.page = address - address % PAGE
        self.write = write
        super().__init__(f"MMU fault: {'write' if write else 'read'} at {hex(address)} "
                         f"(page {hex(self.page)}) is not mapped")


class FakeDriverMisuse(AssertionError):
    """The allocator called the driver in a way the real one would reject."""


class FakeVmmDriver:
    """Reservations, physical handles and mappings of one fake device address space."""

    def __init__(self, granularity: int = 2 << 20, base: int = 0x7F00_0000_0000,
                 device: int | None = 0) -> None:
        self.g = granularity
        self.device = device
        self._bump = base
        self._free_va: list[tuple[int, int]] = []
        self.reservations: dict[int, int] = {}
        self.handles: dict[int, dict[str, Any]] = {}
        self.mappings: dict[int, dict[str, Any]] = {}
        self.calls: collections.Counter[str] = collections.Counter()
        self._fail: collections.Counter[str] = collections.Counter()
        self._next_handle = 1

    # test controls --------------------------------------------------------------------------
    def fail_next(self, call: str, times: int = 1) -> None:
        """Make the next ``times`` calls of ``call`` fail like CUDA_ERROR_OUT_OF_MEMORY."""
        self._fail[call] += times

    def _enter(self, call: str) -> None:
        self.calls[call] += 1
        if self._fail[call]:
            self._fail[call] -= 1
            raise GuardDriverError(call, 2, "CUDA_ERROR_OUT_OF_MEMORY")

    def leaks(self) -> dict[str, int]:
        return {"reservations": len(self.reservations), "mappings": len(self.mappings),
                "handles": len(self.handles)}

    def mapped_bytes(self) -> int:
        return sum(m["size"] for m in self.mappings.values())

    def touch(self, address: int, nbytes: int = 1, write: bool = True) -> None:
        """An access of ``nbytes`` at ``address``: FakeFault on the first byte not mapped."""
        a = address
        while a < address + nbytes:
            if not self._accessible(a):
                raise FakeFault(a, write)
            a = a - a % PAGE + PAGE
        return None

    def _accessible(self, a: int) -> bool:
        for start, m in self.mappings.items():
            if start <= a < start + m["size"]:
                return bool(m["access"])
        return False

    # VmmDriver ------------------------------------------------------------------------------
    def current_device(self) -> int | None:
        self.calls["current_device"] += 1
        return self.device

    def ensure_context(self, device: int) -> None:
        self._enter("ensure_context")
        if self.device is None:
            self.device = device

    def granularity(self, device: int) -> int:
        self._enter("granularity")
        return self.g

    def reserve(self, size: int, align: int) -> int:
        self._enter("reserve")
        if size <= 0 or size % self.g or align % self.g:
            raise FakeDriverMisuse(f"reserve({size}, {align}): not granule multiples")
        for start, n in sorted(self._free_va):
            if n >= size:  # first fit: freed VA comes back, as the real driver's does
                self._free_va.remove((start, n))
                if n > size:
                    self._free_va.append((start + size, n - size))
                self.reservations[start] = size
                return start
        start = self._bump
        self._bump += size
        self.reservations[start] = size
        return start

    def free_va(self, address: int, size: int) -> None:
        self._enter("free_va")
        if self.reservations.get(address) != size:
            raise FakeDriverMisuse(f"free_va({hex(address)}, {size}): not a reservation")
        if any(address <= m < address + size for m in self.mappings):
            raise FakeDriverMisuse(f"free_va({hex(address)}): still mapped inside")
        del self.reservations[address]
        self._free_va.append((address, size))

    def create(self, size: int, device: int) -> int:
        self._enter("create")
        if size <= 0 or size % self.g:
            raise FakeDriverMisuse(f"create({size}): not a granule multiple")
        h = self._next_handle
        self._next_handle += 1
        self.handles[h] = {"size": size, "device": device, "mapped": 0, "released": False}
        return h

    def map(self, address: int, size: int, handle: Any) -> None:
        self._enter("map")
        h = self.handles.get(handle)
        if h is None or h["released"] or h["size"] != size or address % self.g:
            raise FakeDriverMisuse(f"map({hex(address)}, {size}, {handle}): bad handle or alignment")
        if not any(r <= address and address + size <= r + n for r, n in self.reservations.items()):
            raise FakeDriverMisuse(f"map({hex(address)}, {size}): outside every reservation")
        if any(m < address + size and address < m + v["size"] for m, v in self.mappings.items()):
            raise FakeDriverMisuse(f"map({hex(address)}, {size}): overlaps a mapping")
        self.mappings[address] = {"size": size, "handle": handle, "access": False}
        h["mapped"] += 1

    def set_access(self, address: int, size: int, device: int) -> None:
        self._enter("set_access")
        inside = [m for m in self.mappings if address <= m < address + size]
        if sum(self.mappings[m]["size"] for m in inside) != size:
            raise FakeDriverMisuse(f"set_access({hex(address)}, {size}): not exactly mapped")
        for m in inside:
            self.mappings[m]["access"] = True

    def unmap(self, address: int, size: int) -> None:
        self._enter("unmap")
        m = self.mappings.get(address)
        if m is None or m["size"] != size:
            raise FakeDriverMisuse(f"unmap({hex(address)}, {size}): not a whole mapping")
        del self.mappings[address]
        h = self.handles[m["handle"]]
        h["mapped"] -= 1
        if h["released"] and not h["mapped"]:
            del self.handles[m["handle"]]

    def release(self, handle: Any) -> None:
        self._enter("release")
        h = self.handles.get(handle)
        if h is None or h["released"]:
            raise FakeDriverMisuse(f"release({handle}): unknown or released twice")
        h["released"] = True
        if not h["mapped"]:
            del self.handles[handle]

    def synchronize(self) -> None:
        self._enter("synchronize")
