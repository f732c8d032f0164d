"""The driver edge of guard mode: the CUDA virtual memory calls a guard slot needs.

:class:`VmmDriver` is the interface the allocator speaks (CPU tests drive it with
:class:`faulthunt.guard.fake.FakeVmmDriver`); :class:`CudaVmmDriver` implements it with
cuda-python's driver bindings (``cuda.bindings.driver``, cuda-bindings 12.x/13.x; the 11.x layout
``cuda.cuda`` also works). The calls and their order are those proven on the H200
(/work/shared/device/README.md and docs/guard.md): pinned device memory from ``cuMemCreate``,
mapped with ``cuMemMap`` into a ``cuMemAddressReserve`` range, read-write for the owning device
through ``cuMemSetAccess``; ``cuMemUnmap`` + ``cuMemRelease`` at the free keep the VA reserved;
``cuMemAddressFree`` gives it back.
"""

from __future__ import annotations

from typing import Any, Protocol

from faulthunt.errors import FaulthuntError


class GuardDriverError(FaulthuntError):
    """A CUDA driver call of the guard allocator failed."""

    def __init__(self, call: str, code: int, name: str) -> None:
        super().__init__(f"{call} failed: {name} ({code})",
                         fix="the allocation goes to the framework's own allocator instead; "
                             "lower the guard rate or max_bytes if device memory is short")
        self.call, self.code, self.name = call, code, name


class VmmDriver(Protocol):
    """What the guard allocator asks of the driver (addresses and sizes are ints)."""

    def current_device(self) -> int | None:
        """The device of the calling thread's current context, None without one."""

    def ensure_context(self, device: int) -> None:
        """Make ``device``'s primary context current if no context is (what the runtime does
        at its first call; a framework may allocate before it launched anything)."""

    def granularity(self, device: int) -> int: ...

    def reserve(self, size: int, align: int) -> int: ...

    def free_va(self, address: int, size: int) -> None: ...

    def create(self, size: int, device: int) -> Any: ...

    def map(self, address: int, size: int, handle: Any) -> None: ...

    def set_access(self, address: int, size: int, device: int) -> None: ...

    def unmap(self, address: int, size: int) -> None: ...

    def release(self, handle: Any) -> None: ...

    def synchronize(self) -> None: ...


def import_driver() -> Any:
    """cuda-python's driver module (raises ImportError with what to install)."""
    try:
        from cuda.bindings import driver
        return driver
    except ImportError:
        try:
            from cuda import cuda as driver  # type: ignore[no-redef, unused-ignore]  # cuda-python 11.x layout
            return driver
        except ImportError:
            raise ImportError("guard mode needs cuda-python's driver bindings: "
                              "pip install cuda-bindings (or faulthunt[gpu])") from None


class CudaVmmDriver:
    """:class:`VmmDriver` over ``cuda.bindings.driver`` (``cu``: the module, for tests)."""

    def __init__(self, cu: Any = None) -> None:
        self.cu = cu if cu is not None else import_driver()
        self._granularity: dict[int, int] = {}

    def _check(self, result: Any, call: str) -> Any:
        err, *values = result if isinstance(result, tuple) else (result,)
        if int(err) != 0:
            raise GuardDriverError(call, int(err), getattr(err, "name", None) or str(err))
        return values[0] if len(values) == 1 else None

    def _prop(self, device: int) -> Any:
        cu = self.cu
        prop = cu.CUmemAllocationProp()
        prop.type = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        prop.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        prop.location.id = device
        prop.requestedHandleTypes = cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_NONE
        prop.win32HandleMetaData = 0
        return prop

    def current_device(self) -> int | None:
        err, ctx = self.cu.cuCtxGetCurrent()
        if int(err) != 0 or ctx is None or int(ctx) == 0:
            return None
        return int(self._check(self.cu.cuCtxGetDevice(), "cuCtxGetDevice"))

    def ensure_context(self, device: int) -> None:
        cu = self.cu
        err, ctx = cu.cuCtxGetCurrent()
        if int(err) == 0 and ctx is not None and int(ctx) != 0:
            return
        self._check(cu.cuInit(0), "cuInit")
        dev = self._check(cu.cuDeviceGet(device), "cuDeviceGet")
        ctx = self._check(cu.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
        self._check(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")

    def granularity(self, device: int) -> int:
        g = self._granularity.get(device)
        if g is None:
            flag = self.cu.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM
            g = self._granularity[device] = int(self._check(
                self.cu.cuMemGetAllocationGranularity(self._prop(device), flag),
                "cuMemGetAllocationGranularity"))
        return g

    def reserve(self, size: int, align: int) -> int:
        return int(self._check(self.cu.cuMemAddressReserve(size, align, 0, 0), "cuMemAddressReserve"))

    def free_va(self, address: int, size: int) -> None:
        self._check(self.cu.cuMemAddressFree(address, size), "cuMemAddressFree")

    def create(self, size: int, device: int) -> Any:
        return self._check(self.cu.cuMemCreate(size, self._prop(device), 0), "cuMemCreate")

    def map(self, address: int, size: int, handle: Any) -> None:
        self._check(self.cu.cuMemMap(address, size, 0, handle, 0), "cuMemMap")

    def set_access(self, address: int, size: int, device: int) -> None:
        cu = self.cu
        desc = cu.CUmemAccessDesc()
        desc.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        desc.location.id = device
        desc.flags = cu.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        self._check(cu.cuMemSetAccess(address, size, [desc], 1), "cuMemSetAccess")

    def unmap(self, address: int, size: int) -> None:
        self._check(self.cu.cuMemUnmap(address, size), "cuMemUnmap")

    def release(self, handle: Any) -> None:
        self._check(self.cu.cuMemRelease(handle), "cuMemRelease")

    def synchronize(self) -> None:
        self._check(self.cu.cuCtxSynchronize(), "cuCtxSynchronize")
