"""cuda.core: a ``MemoryResource`` that guards a sample of a device's allocations.

``GuardMemoryResource(inner, guard)`` wraps the resource a device had (by default cuda.core's
``DeviceMemoryResource`` over the driver's stream-ordered pool) and becomes the device's
``memory_resource``, so ``Device.allocate`` and everything built on it (``Buffer``, the copy
helpers) goes through it. Unsampled allocations are the inner resource's own buffers (they go back
to it when closed); a sampled one is a ``Buffer.from_handle`` over a guard slot with this resource
as its owner, so closing it lands in :meth:`deallocate`, which unmaps the slot.

Installed per device by :func:`guard_devices`, which guard mode calls at each test's setup and
call phases once the process has initialised CUDA (never earlier: making the ``Device`` objects
would initialise CUDA itself, which a test that forks before touching the GPU must not inherit).
A resource a program builds and uses directly (``DeviceMemoryResource(0).allocate(...)``) is not
guarded: cuda.core's classes are compiled and cannot be patched.
"""

from __future__ import annotations

from typing import Any

from faulthunt.guard.allocator import GuardAllocator

NAME = "cuda_core"


def make_resource_class(base: type, buffer_cls: Any) -> type:
    """A ``base`` (cuda.core ``MemoryResource``) subclass; ``buffer_cls``: cuda.core ``Buffer``."""

    class GuardMemoryResource(base):
        def __init__(self, inner: Any, guard: GuardAllocator) -> None:
            super().__init__()
            self.inner = inner
            self.guard = guard

        def allocate(self, size: int, *args: Any, **kwargs: Any) -> Any:
            guard = self.guard
            if guard.sample(size):
                slot = guard.allocate(size, NAME, _device_id(self.inner))
                if slot is not None:
                    return buffer_cls.from_handle(slot.address, size, mr=self)
            return self.inner.allocate(size, *args, **kwargs)

        def deallocate(self, ptr: Any, size: int, *args: Any, **kwargs: Any) -> None:
            if not self.guard.free(int(ptr) if ptr is not None else 0):
                self.inner.deallocate(ptr, size, *args, **kwargs)

        @property
        def is_device_accessible(self) -> bool:
            return True

        @property
        def is_host_accessible(self) -> bool:
            return False

        @property
        def device_id(self) -> int:
            return _device_id(self.inner)

    return GuardMemoryResource


def _device_id(mr: Any) -> int:
    d = getattr(mr, "device_id", 0)
    return int(d) if d is not None else 0


_cls: type | None = None


def resource_class() -> type:
    global _cls
    if _cls is None:
        try:
            from cuda.core import Buffer, MemoryResource
        except ImportError:  # cuda.core before 0.3
            from cuda.core.experimental import Buffer, MemoryResource  # type: ignore[no-redef, unused-ignore]
        _cls = make_resource_class(MemoryResource, Buffer)
    return _cls


def guard_device(device: Any, guard: GuardAllocator, cls: type | None = None) -> bool:
    """Make ``device.memory_resource`` a guarding one (once); True when it was changed."""
    cls = cls or resource_class()
    mr = device.memory_resource
    if isinstance(mr, cls) or getattr(mr, "is_host_accessible", False):
        return False
    device.memory_resource = cls(mr, guard)
    return True


def driver_initialised(cu: Any) -> bool:
    """CUDA was initialised in this process (cuDeviceGetCount answers only after cuInit)."""
    err, _count = cu.cuDeviceGetCount()
    return int(err) == 0


class CudaCoreGuard:
    name = NAME

    def __init__(self, guard: GuardAllocator) -> None:
        self.guard = guard
        self.devices: set[int] = set()

    def refresh(self) -> None:
        """Guard every device's resource, if CUDA is initialised; cheap when nothing is new."""
        try:
            from cuda.bindings import driver as cu

            if not driver_initialised(cu):
                return
            try:
                from cuda.core import Device
            except ImportError:
                from cuda.core.experimental import Device  # type: ignore[no-redef, unused-ignore]
            _err, count = cu.cuDeviceGetCount()
            for i in range(int(count)):
                if guard_device(Device(i), self.guard):
                    self.devices.add(i)
        except Exception as exc:  # noqa: BLE001 - never break a test over this
            self.guard._say("cuda_core", f"guard: cuda.core devices not guarded: {exc!r}")

    def stop(self) -> None:
        pass


def start(guard: GuardAllocator) -> CudaCoreGuard:
    g = CudaCoreGuard(guard)
    g.refresh()
    return g
