"""One NVML session helper (faulthunt.nvml), used by every NVML caller, with a fake pynvml."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from faulthunt import nvml


class FakeNvml(SimpleNamespace):
    """Counts init/shutdown pairs; ``fail_init`` makes nvmlInit raise as a machine without a driver does."""

    def __init__(self, count: int = 2, fail_init: bool = False) -> None:
        super().__init__(inits=0, shutdowns=0, count=count, fail_init=fail_init)

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise RuntimeError("NVML Shared Library Not Found")
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return self.count


def test_session_inits_and_always_shuts_down() -> None:
    fake = FakeNvml()
    with nvml.session(fake) as n:
        assert n is fake and fake.inits == 1 and fake.shutdowns == 0
    assert fake.shutdowns == 1
    with pytest.raises(ValueError), nvml.session(fake):
        raise ValueError("the body failed")
    assert (fake.inits, fake.shutdowns) == (2, 2)


def test_init_failure_is_unavailable_with_the_fix() -> None:
    fake = FakeNvml(fail_init=True)
    with pytest.raises(nvml.NvmlUnavailable) as err, nvml.session(fake):
        pass
    assert "Shared Library Not Found" in err.value.message and err.value.fix and not err.value.missing
    assert fake.shutdowns == 0 and nvml.device_count(fake) == 0


def test_missing_package_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises ImportError
    with pytest.raises(nvml.NvmlUnavailable) as err, nvml.session():
        pass
    assert err.value.missing and "pip install nvidia-ml-py" in str(err.value)
    assert nvml.device_count() == 0


def test_every_caller_goes_through_the_session(monkeypatch: pytest.MonkeyPatch) -> None:
    """identity (doctor), the stress runner, the kernels' backend choice: each pairs init with shutdown."""
    from faulthunt import identity
    from faulthunt.kernels import backend
    from faulthunt.stress import options as stress

    fake = FakeNvml(count=0)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert stress.nvml_device_count() == 0
    assert backend.gpu_visible() in (True, False)
    info = identity.collect_nvml()
    assert info["nvml"] is True and info["gpus"] == []
    assert identity.collect_hmm()["gpus"] == []
    assert fake.inits == fake.shutdowns >= 3


def test_identity_says_why_without_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    from faulthunt import identity

    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(fail_init=True))
    info = identity.collect_nvml()
    assert info["nvml"] is False and info["nvml_error"].startswith("NVML unavailable: ")


def test_the_nvml_xid_source_ends_its_session_when_it_cannot_start() -> None:
    from faulthunt.kernlog.sources import KernelLogUnreadable, NvmlSource

    fake = FakeNvml(count=1)  # no event API at all: registration fails
    with pytest.raises(KernelLogUnreadable):
        NvmlSource(fake)
    assert fake.inits == fake.shutdowns == 1
    with pytest.raises(KernelLogUnreadable) as err:
        NvmlSource(FakeNvml(fail_init=True))
    assert "another --xid-source" in (err.value.fix or "")
