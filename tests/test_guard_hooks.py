"""Each framework hook's translation, driven with the fake VMM driver (no GPU).

What is exercised here and what is not:
- CuPy: the allocator function with stand-ins for ``UnownedMemory``/``MemoryPointer`` (CuPy is not
  installed here), and ``start`` against a stand-in ``cupy`` module; CuPy's real classes only on
  the H200 (scripts/gpu/guard_validate.sh).
- numba: the EMM subclass with numba's *real* manager and pointer classes (numba is installed;
  its simulator does not use EMM plugins, so the pointer lifetime runs without a context), plus a
  stand-in base to check the fall-back path and the bypass of the low-level hook.
- cuda.core: the MemoryResource subclass over stand-in ``MemoryResource``/``Buffer`` classes.
- cuda-python bindings: the cuMemAlloc/cuMemFree wrappers over a stand-in driver module; the
  ``CudaVmmDriver`` calls (argument construction, error translation) over a stand-in module too.
- torch: the C trampoline is really compiled and called through ctypes (torch itself is not
  installed; CUDAPluggableAllocator only on the H200).
"""

from __future__ import annotations

import ctypes
import gc
import sys
import types

import pytest

from faulthunt.guard import parse_spec
from faulthunt.guard import bindings_hook, cuda_core_mr, cupy_hook, numba_emm, torch_alloc
from faulthunt.guard.allocator import GuardAllocator, bypassed
from faulthunt.guard.driver import CudaVmmDriver, GuardDriverError
from faulthunt.guard.fake import FakeVmmDriver


def make(spec: str = "1") -> tuple[GuardAllocator, FakeVmmDriver]:
    drv = FakeVmmDriver()
    return GuardAllocator(parse_spec(spec), drv, None), drv


# --- CuPy ----------------------------------------------------------------------------------------

class FakeUnownedMemory:
    def __init__(self, ptr, size, owner, device_id=-1):
        self.ptr, self.size, self.owner, self.device_id = ptr, size, owner, device_id


class FakeMemoryPointer:
    def __init__(self, mem, offset):
        self.mem, self.ptr = mem, mem.ptr + offset


def test_cupy_allocator_guards_a_sample_and_frees_when_cupy_lets_go():
    guard, drv = make("1")
    fallback_calls = []
    alloc = cupy_hook.make_allocator(guard, lambda n: fallback_calls.append(n) or "pool",
                                     memory_cls=FakeUnownedMemory, pointer_cls=FakeMemoryPointer,
                                     get_device=lambda: 0)
    p = alloc(4096)
    assert isinstance(p, FakeMemoryPointer) and guard.owns(p.ptr) and p.mem.device_id == 0
    drv.touch(p.ptr, 4096)
    assert alloc(0) == "pool" and fallback_calls == [0]   # nothing to guard in an empty allocation
    del p
    gc.collect()
    assert guard.counts.freed == 1 and drv.mapped_bytes() == 0


def test_cupy_unsampled_and_failed_allocations_go_to_the_pool():
    guard, drv = make("1000000")
    alloc = cupy_hook.make_allocator(guard, lambda n: ("pool", n), memory_cls=FakeUnownedMemory,
                                     pointer_cls=FakeMemoryPointer, get_device=lambda: 0)
    assert [alloc(8) for _ in range(3)] == [("pool", 8)] * 3
    guard2, drv2 = make("1")
    drv2.fail_next("create")
    alloc2 = cupy_hook.make_allocator(guard2, lambda n: "pool", memory_cls=FakeUnownedMemory,
                                      pointer_cls=FakeMemoryPointer, get_device=lambda: 0)
    assert alloc2(8) == "pool" and guard2.counts.failed == 1


def test_cupy_start_wraps_the_current_allocator_once(monkeypatch):
    state = {"alloc": lambda n: ("pool", n)}
    cuda = types.SimpleNamespace(
        get_allocator=lambda: state["alloc"], set_allocator=lambda a: state.update(alloc=a),
        UnownedMemory=FakeUnownedMemory, MemoryPointer=FakeMemoryPointer,
        runtime=types.SimpleNamespace(getDevice=lambda: 0))
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(cuda=cuda))
    guard, _ = make("1000000")
    src = cupy_hook.start(guard)
    assert state["alloc"](8) == ("pool", 8) and guard.counts.seen == 1
    assert cupy_hook.start(guard) is None       # never wrapped twice
    src.stop()
    assert state["alloc"](8) == ("pool", 8) and guard.counts.seen == 1


# --- numba ---------------------------------------------------------------------------------------

class _Ctx:
    pass


def test_numba_guarded_memalloc_with_numbas_own_classes():
    from numba.cuda.cudadrv import driver as nd

    guard, drv = make("1")
    cls = numba_emm.make_manager_class(nd.NumbaCUDAMemoryManager, guard)
    ctx = _Ctx()
    mgr = cls(context=ctx)
    owned = mgr.memalloc(4000)
    addr = owned.device_pointer_value
    assert guard.owns(addr) and addr in mgr.allocations and owned.size == 4000
    drv.touch(addr, 4000)
    view = owned.view(0, 100)                  # a view keeps the buffer alive
    del owned
    gc.collect()
    assert guard.owns(addr)
    del view
    gc.collect()
    assert not guard.owns(addr) and addr not in mgr.allocations and drv.mapped_bytes() == 0


def test_numba_unsampled_goes_to_the_base_inside_a_bypass():
    seen = []

    class Base:
        def __init__(self, context=None):
            self.context = context

        def memalloc(self, size):
            seen.append(bypassed())
            return ("base", size)

    guard, _ = make("1000000")
    mgr = numba_emm.make_manager_class(Base, guard)(context=_Ctx())
    assert mgr.memalloc(8) == ("base", 8) and seen == [True] and not bypassed()
    guard2, drv2 = make("1")
    drv2.fail_next("reserve")
    assert numba_emm.make_manager_class(Base, guard2)(context=_Ctx()).memalloc(8) == ("base", 8)


def test_numba_without_autofree_uses_a_plain_pointer_with_a_finalizer():
    made = {}

    class Pointers:
        class MemoryPointer:
            def __init__(self, ctx, ptr, size, finalizer=None):
                made.update(ptr=ptr.value, size=size, finalizer=finalizer)

    class Base:
        def __init__(self, context=None):
            self.context = context

    guard, _ = make("1")
    numba_emm.make_manager_class(Base, guard, Pointers)(context=_Ctx()).memalloc(64)
    assert guard.owns(made["ptr"])
    made["finalizer"]()
    assert not guard.owns(made["ptr"])


def test_numba_start_does_nothing_in_the_simulator(monkeypatch):
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")
    guard, _ = make("1")
    assert numba_emm.start(guard) is None


# --- cuda.core -----------------------------------------------------------------------------------

class FakeMR:
    def __init__(self):
        pass


class FakeBuffer:
    def __init__(self, ptr, size, mr):
        self.handle, self.size, self.mr = ptr, size, mr

    @classmethod
    def from_handle(cls, ptr, size, mr=None):
        return cls(ptr, size, mr)

    def close(self, stream=None):
        self.mr.deallocate(self.handle, self.size, stream=stream)


class InnerMR:
    device_id = 0
    is_host_accessible = False

    def __init__(self):
        self.calls = []

    def allocate(self, size, stream=None):
        self.calls.append(("allocate", size, stream))
        return FakeBuffer(0x1000, size, self)

    def deallocate(self, ptr, size, stream=None):
        self.calls.append(("deallocate", ptr, size, stream))


def test_cuda_core_resource_guards_and_defers_to_the_inner_one():
    cls = cuda_core_mr.make_resource_class(FakeMR, FakeBuffer)
    guard, drv = make("1")
    inner = InnerMR()
    dev = types.SimpleNamespace(memory_resource=inner)
    assert cuda_core_mr.guard_device(dev, guard, cls) and not cuda_core_mr.guard_device(dev, guard, cls)
    mr = dev.memory_resource
    buf = mr.allocate(4096, stream="s")
    assert buf.mr is mr and guard.owns(buf.handle) and mr.device_id == 0 and mr.is_device_accessible
    drv.touch(buf.handle, 4096)
    buf.close()
    assert not guard.owns(buf.handle) and inner.calls == []
    guard.broken = "off"                        # nothing sampled: the inner resource's own buffer
    b2 = mr.allocate(8, stream="s")
    assert b2.mr is inner and inner.calls == [("allocate", 8, "s")]
    mr.deallocate(0x1000, 8, stream="s")        # not a guard slot: the inner resource frees it
    assert inner.calls[-1] == ("deallocate", 0x1000, 8, "s")


def test_cuda_core_pinned_host_resources_are_left_alone():
    cls = cuda_core_mr.make_resource_class(FakeMR, FakeBuffer)
    guard, _ = make("1")
    host = types.SimpleNamespace(is_host_accessible=True)
    dev = types.SimpleNamespace(memory_resource=host)
    assert not cuda_core_mr.guard_device(dev, guard, cls) and dev.memory_resource is host


def test_cuda_core_waits_for_cuda_to_be_initialised():
    not_yet = types.SimpleNamespace(cuDeviceGetCount=lambda: (3, 0))  # CUDA_ERROR_NOT_INITIALIZED
    ready = types.SimpleNamespace(cuDeviceGetCount=lambda: (0, 1))
    assert not cuda_core_mr.driver_initialised(not_yet) and cuda_core_mr.driver_initialised(ready)


# --- cuda-python bindings ------------------------------------------------------------------------

class CUdeviceptr(int):
    pass


def fake_cu():
    calls = []

    def cuMemAlloc(n):
        calls.append(("alloc", n))
        return (0, CUdeviceptr(0x5000))

    def cuMemFree(p):
        calls.append(("free", int(p)))
        return (0,)

    cu = types.SimpleNamespace(CUresult=types.SimpleNamespace(CUDA_SUCCESS=0), CUdeviceptr=CUdeviceptr,
                               cuMemAlloc=cuMemAlloc, cuMemFree=cuMemFree)
    return cu, calls


def test_bindings_wrappers():
    guard, drv = make("1")
    cu, calls = fake_cu()
    src = bindings_hook.start(guard, cu)
    err, ptr = cu.cuMemAlloc(4000)
    assert err == 0 and guard.owns(int(ptr)) and calls == []
    drv.touch(int(ptr), 4000)
    assert cu.cuMemFree(ptr) == (0,) and not guard.owns(int(ptr)) and calls == []
    assert cu.cuMemFree(CUdeviceptr(0x5000)) == (0,) and calls == [("free", 0x5000)]
    from faulthunt.guard.allocator import bypass

    with bypass():
        assert cu.cuMemAlloc(8) == (0, 0x5000)  # inside a framework hook: not sampled again
    assert guard.counts.seen == 1
    assert bindings_hook.start(guard, cu) is None
    src.stop()
    assert cu.cuMemAlloc(8) == (0, 0x5000) and guard.counts.seen == 1


def test_numba_hook_over_the_bindings_hook_samples_once():
    guard, _ = make("1")
    cu, calls = fake_cu()
    bindings_hook.start(guard, cu)

    class Base:
        def __init__(self, context=None):
            self.context = context

        def memalloc(self, size):
            return cu.cuMemAlloc(size)

    guard.broken = None
    mgr = numba_emm.make_manager_class(Base, guard)(context=_Ctx())
    guard.sampler.rate = 10**9
    guard.sampler.reseed("t")                   # the next sample is far away: unsampled
    assert mgr.memalloc(8) == (0, 0x5000) and guard.counts.seen == 1 and calls == [("alloc", 8)]


# --- the CUDA driver edge ------------------------------------------------------------------------

def fake_driver_module(fail: str | None = None):
    calls = []

    class Loc:
        type = id = None

    class Prop:
        def __init__(self):
            self.location = Loc()

    class Desc:
        def __init__(self):
            self.location = Loc()

    class Err(int):
        @property
        def name(self):
            return "CUDA_ERROR_OUT_OF_MEMORY" if self else "CUDA_SUCCESS"

    def call(name, *ret):
        def f(*args):
            calls.append((name, args))
            return (Err(2),) + (None,) * len(ret) if name == fail else (Err(0), *ret)
        return f

    ns = types.SimpleNamespace
    cu = ns(
        CUmemAllocationProp=Prop, CUmemAccessDesc=Desc,
        CUmemAllocationType=ns(CU_MEM_ALLOCATION_TYPE_PINNED="pinned"),
        CUmemLocationType=ns(CU_MEM_LOCATION_TYPE_DEVICE="device"),
        CUmemAllocationHandleType=ns(CU_MEM_HANDLE_TYPE_NONE="none"),
        CUmemAllocationGranularity_flags=ns(CU_MEM_ALLOC_GRANULARITY_MINIMUM="min"),
        CUmemAccess_flags=ns(CU_MEM_ACCESS_FLAGS_PROT_READWRITE="rw"),
        cuCtxGetCurrent=call("cuCtxGetCurrent", 77), cuCtxGetDevice=call("cuCtxGetDevice", 3),
        cuMemGetAllocationGranularity=call("gran", 2 << 20), cuMemAddressReserve=call("reserve", 0x7000),
        cuMemAddressFree=call("free_va"), cuMemCreate=call("create", "h1"), cuMemMap=call("map"),
        cuMemSetAccess=call("access"), cuMemUnmap=call("unmap"), cuMemRelease=call("release"),
        cuCtxSynchronize=call("sync"), cuInit=call("cuInit"), cuDeviceGet=call("cuDeviceGet", 3),
        cuDevicePrimaryCtxRetain=call("retain", 55), cuCtxSetCurrent=call("set_current"))
    return cu, calls


def test_cuda_vmm_driver_builds_the_calls_as_proven_on_the_h200():
    cu, calls = fake_driver_module()
    d = CudaVmmDriver(cu)
    assert d.current_device() == 3
    assert d.granularity(3) == 2 << 20 and d.granularity(3) == 2 << 20
    guard = GuardAllocator(parse_spec("1"), d, None)
    slot = guard.allocate(4000, "cupy")
    guard.free(slot.address)
    names = [c[0] for c in calls]
    assert names == ["cuCtxGetCurrent", "cuCtxGetDevice", "gran", "cuCtxGetCurrent", "cuCtxGetDevice",
                     "reserve", "create", "map", "access", "sync", "unmap", "release"]
    prop = calls[2][1][0]
    assert (prop.type, prop.location.type, prop.location.id, prop.requestedHandleTypes) == \
        ("pinned", "device", 3, "none")
    assert calls[5][1] == (4 << 20, 2 << 20, 0, 0)            # VA for data + guard, granule-aligned
    assert calls[7][1] == (0x7000, 2 << 20, 0, "h1", 0)         # map the data granule at the start
    access = calls[8][1]
    assert access[0:2] == (0x7000, 2 << 20) and access[3] == 1 and access[2][0].flags == "rw"
    assert slot.address == 0x7000 + (2 << 20) - 4096


def test_the_allocator_makes_the_cuda_driver_at_its_first_sampled_allocation(monkeypatch):
    cu, calls = fake_driver_module()
    monkeypatch.setattr("faulthunt.guard.driver.import_driver", lambda: cu)
    guard = GuardAllocator(parse_spec("1"), CudaVmmDriver, None)   # the class, as install() passes it
    assert guard.driver is None and calls == []
    slot = guard.allocate(64, "cupy")
    assert isinstance(guard.driver, CudaVmmDriver) and slot is not None and guard.owns(slot.address)


def test_cuda_vmm_driver_makes_the_primary_context_current_only_without_one():
    cu, calls = fake_driver_module()
    CudaVmmDriver(cu).ensure_context(3)
    assert [c[0] for c in calls] == ["cuCtxGetCurrent"]
    cu.cuCtxGetCurrent = lambda: (0, 0)
    CudaVmmDriver(cu).ensure_context(3)
    assert [c[0] for c in calls][1:] == ["cuInit", "cuDeviceGet", "retain", "set_current"]
    assert calls[-1][1] == (55,)


def test_cuda_vmm_driver_errors_name_the_call():
    cu, _ = fake_driver_module(fail="create")
    with pytest.raises(GuardDriverError) as e:
        CudaVmmDriver(cu).create(2 << 20, 0)
    assert "cuMemCreate failed: CUDA_ERROR_OUT_OF_MEMORY (2)" in str(e.value) and e.value.fix


# --- torch ---------------------------------------------------------------------------------------

@pytest.mark.skipif(torch_alloc.find_compiler() is None, reason="no C compiler on this machine")
def test_torch_shim_compiles_and_calls_back_into_the_guard(tmp_path):
    so = torch_alloc.build_shim(torch_alloc.find_compiler(), tmp_path)
    assert torch_alloc.build_shim(torch_alloc.find_compiler(), tmp_path) == so   # cached
    guard, drv = make("1")
    fell_back = []
    callbacks = torch_alloc.make_callbacks(guard, lambda n, d, s: fell_back.append(n) or 0xBEEF000,
                                           lambda p, n, d, s: fell_back.append(("free", p)))
    lib = ctypes.CDLL(str(so))
    lib.faulthunt_guard_set(*callbacks)
    lib.faulthunt_guard_malloc.restype = ctypes.c_void_p
    lib.faulthunt_guard_malloc.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
    lib.faulthunt_guard_free.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
    p = lib.faulthunt_guard_malloc(4096, 0, None)    # as torch calls it: through the C entry point
    assert guard.owns(p)
    drv.touch(p, 4096)
    lib.faulthunt_guard_free(p, 4096, 0, None)
    assert not guard.owns(p) and drv.mapped_bytes() == 0
    guard.broken = "off"
    assert lib.faulthunt_guard_malloc(8, 0, None) == 0xBEEF000
    lib.faulthunt_guard_free(0xBEEF000, 8, 0, None)
    assert fell_back == [8, ("free", 0xBEEF000)]


def test_torch_without_a_compiler_says_it_is_not_guarded(monkeypatch):
    monkeypatch.setattr(torch_alloc, "find_compiler", lambda: None)
    guard, _ = make("1")
    with pytest.raises(RuntimeError, match="torch is not guarded"):
        torch_alloc.start(guard)
