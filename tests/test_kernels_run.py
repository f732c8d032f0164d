"""Planted kernels actually run: in numba's CUDA simulator and the SIMULATED stand-ins (fresh
processes, since NUMBA_ENABLE_CUDASIM is read when numba is imported), NVRTC compiles of
planted.cu where NVRTC is installed, and on a GPU the real thing."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from faulthunt.kernels import SUITE_DIR, backend, catalog, standins
from faulthunt.kernels.runner import parse_result, run_isolated

REPO = Path(__file__).resolve().parents[1]
H200 = REPO / "tests" / "data" / "h200"


# --- pure pieces -------------------------------------------------------------------------------

def test_simulated_xid31_is_the_drivers_format() -> None:
    real = next(ln for ln in (H200 / "nvrm_lines.txt").read_text().splitlines()
                if "31, pid=543," in ln)
    ours = standins.kernel_log_line(standins.xid31_message(543, "faults", 0x7FAF_E7E0_0000), 33.034470)
    # the real line, GPC client aside (it varies run to run on the H200 too)
    assert re.sub(r"GPCCLIENT_T1_\d+", "X", ours) == re.sub(r"GPCCLIENT_T1_\d+", "X", real)


def test_simulated_xid13_lines_are_the_drivers_format() -> None:
    real = [ln.split("] ", 1)[1] for ln in (H200 / "nvrm_lines.txt").read_text().splitlines()
            if ": 13, " in ln][:3]
    ours = [standins.kernel_log_line(m, 1.0).split("] ", 1)[1]
            for m in standins.xid13_messages(553, "faults")]
    assert ours == real


def test_simulated_lines_parse_with_the_kernlog_parser() -> None:
    parse = pytest.importorskip("faulthunt.kernlog.parse", reason="faulthunt.kernlog not built yet")
    ev = parse.parse_line(standins.kernel_log_line(standins.xid31_message(4242, "python3", 0x7FAF_E7E0_0000)))
    assert ev is not None and ev.xid == 31 and ev.pid == 4242
    assert ev.mmu is not None and ev.mmu.address == 0x7FAF_E7E0_0000


def test_append_kernel_log_without_a_target_writes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(standins.SIM_XID_LOG_ENV, raising=False)
    assert standins.append_kernel_log(["31, x"]) is None


def test_append_kernel_log_appends(tmp_path: Path) -> None:
    log = tmp_path / "k.log"
    standins.append_kernel_log(["13, a", "13, b"], str(log))
    standins.append_kernel_log(["31, c"], str(log))
    assert [ln.split("): ", 1)[1] for ln in log.read_text().splitlines()] == ["13, a", "13, b", "31, c"]


@pytest.mark.parametrize("env,have_gpu,want", [
    ({}, True, "gpu"), ({}, False, "sim"),
    ({"NUMBA_ENABLE_CUDASIM": "1"}, True, "sim"),
    ({backend.BACKEND_ENV: "sim"}, True, "sim"), ({backend.BACKEND_ENV: "gpu"}, False, "gpu"),
    ({backend.BACKEND_ENV: ""}, False, "sim"),
])
def test_backend_choice(env: dict[str, str], have_gpu: bool, want: str) -> None:
    assert backend.choose(env, have_gpu=have_gpu) == want


def test_backend_choice_rejects_junk() -> None:
    with pytest.raises(ValueError, match="gpu, sim or auto"):
        backend.choose({backend.BACKEND_ENV: "tpu"}, have_gpu=False)


def test_cpu_suite_runs_one_entry_per_fault() -> None:
    for f in catalog.CATALOG:
        assert backend.flavours_for(f, backend.SIM) == (catalog.NUMBA,)
        assert backend.flavours_for(f, backend.GPU) == f.flavours


def test_stale_cache_bug_is_the_missing_buffer_identity() -> None:
    from faulthunt.kernels.cuda_faults import LaunchCache

    bug, twin = LaunchCache(keyed_by_buffers=False), LaunchCache(keyed_by_buffers=True)
    first = bug.plan(1000, "float32", 0x1000, 0x2000)
    assert bug.plan(1000, "float32", 0x3000, 0x4000) is first and bug.hits == 1
    twin.plan(1000, "float32", 0x1000, 0x2000)
    assert twin.plan(1000, "float32", 0x3000, 0x4000)[2:4] == (0x3000, 0x4000) and twin.hits == 0


@pytest.mark.parametrize("arch,gap", [("90", "sm_75"), ("80", "sm_75"), ("75", "sm_90"), ("70", "sm_90")])
def test_other_arch_is_a_different_major(arch: str, gap: str) -> None:
    from faulthunt.kernels.cuda_faults import other_arch

    assert other_arch(arch) == gap


@pytest.mark.parametrize("data", [b"", b"\x7fELF", b"\x7fELF\x01" + bytes(60), b"MZ" + bytes(80)])
def test_cubin_sm_rejects_non_elf64(data: bytes) -> None:
    from faulthunt.kernels.cuda_faults import cubin_sm

    assert cubin_sm(data) is None


def test_parse_result_takes_the_last_line_and_tolerates_junk() -> None:
    out = 'noise\nFAULTHUNT-KERNEL-RESULT {"status": "error"}\nFAULTHUNT-KERNEL-RESULT {"status": "correct"}\n'
    assert parse_result(out) == {"status": "correct"}
    assert parse_result("FAULTHUNT-KERNEL-RESULT {torn") is None
    assert parse_result("") is None


# --- NVRTC (real compiler; needs cuda-core + an NVRTC library, no GPU) ----------------------------

def _nvrtc_or_skip():  # type: ignore[no-untyped-def]
    from faulthunt.kernels import cuda_faults

    if cuda_faults.available() is not None:
        pytest.skip(cuda_faults.available())
    try:
        return cuda_faults, cuda_faults.compile_module("sm_90")
    except Exception as exc:  # noqa: BLE001 - NVRTC missing: cuda.pathfinder's DynamicLibNotFoundError and kin
        pytest.skip(f"NVRTC is not loadable here ({type(exc).__name__}); pip install nvidia-cuda-nvrtc")


def test_nvrtc_compiles_planted_cu_for_the_h200() -> None:
    cuda_faults, module = _nvrtc_or_skip()
    assert cuda_faults.cubin_sm(bytes(module.code)) == 90


def test_nvrtc_arch_gap_module_is_sm75_sass_without_ptx() -> None:
    cuda_faults, _ = _nvrtc_or_skip()
    module = cuda_faults.compile_module(cuda_faults.other_arch("90"), lineinfo=False)
    data = bytes(module.code)
    assert module.code_type == "cubin" and cuda_faults.cubin_sm(data) == 75
    # a cubin is SASS; without -lineinfo it carries no PTX text at all (with it, a debug copy of
    # the PTX sits in a .nv_debug section, which the driver never JITs)
    assert b".target sm_" not in data and b".version " not in data


# --- the simulator and the stand-ins, each in a fresh process -------------------------------------

SIM = {"FAULTHUNT_KERNELS_BACKEND": "sim", "PYTHONWARNINGS": "ignore"}


@pytest.mark.slow
@pytest.mark.parametrize("name,variant,status,detail", [
    ("oob_write", "bug", "error", "IndexError: tid=[232, 0, 0] ctaid=[3, 0, 0]: index 1000 is out of bounds"),
    ("oob_write", "twin", "correct", "result correct"),
    ("oob_read", "bug", "error", "IndexError"),
    ("stale_cache", "bug", "wrong", "never written"),
    ("stale_cache", "twin", "correct", "both outputs correct"),
    ("bounded_hang", "twin", "correct", "SIMULATED"),
    ("use_after_free", "bug", "unavailable", "not visible in the numba simulator"),
])
def test_simulator_runs(name: str, variant: str, status: str, detail: str) -> None:
    got = run_isolated(name, variant, "numba", backend="sim", env=SIM, timeout=120)
    assert got.result is not None, got.stderr
    assert got.result["status"] == status and got.result["backend"] == "sim"
    assert detail in (got.result.get("detail") or got.result.get("error") or "")
    assert got.returncode == {"correct": 0, "wrong": 1, "error": 1, "unavailable": 3}[status]


@pytest.mark.slow
def test_wild_write_standin_aborts_after_its_xid_line(tmp_path: Path) -> None:
    log = tmp_path / "kernel.log"
    got = run_isolated("wild_write", "bug", "numba", backend="sim", timeout=120,
                       env={**SIM, standins.SIM_XID_LOG_ENV: str(log)})
    assert got.signal == signal.SIGABRT and got.result is None
    pid = int(re.search(r"pid=(\d+)", got.stdout).group(1))
    line = log.read_text()
    assert f": 31, pid={pid}, " in line and "faulted @ 0x7faf_e7e00000" in line
    assert "SIMULATED" in got.stderr


@pytest.mark.slow
def test_misaligned_standin_is_sticky(tmp_path: Path) -> None:
    log = tmp_path / "kernel.log"
    code = ("from faulthunt.kernels import backend as b; b.prepare('sim')\n"
            "for n in ('misaligned', 'oob_write'):\n"
            "    try: b.run(n, 'bug' if n == 'misaligned' else 'twin', 'numba', 'sim')\n"
            "    except Exception as e: print(n, e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, **SIM, standins.SIM_XID_LOG_ENV: str(log)}).stdout
    first, second = out.splitlines()[:2]
    assert first.startswith("misaligned CUDA_ERROR_MISALIGNED_ADDRESS (716)")
    assert second.startswith("oob_write CUDA_ERROR_MISALIGNED_ADDRESS (716)") and "sticky" in second
    assert [ln.split("): ")[1][:4] for ln in log.read_text().splitlines()] == ["13, "] * 3


@pytest.mark.slow
def test_bundled_suite_on_cpu_says_it_is_simulated_and_intermittent_mode_is_seeded(tmp_path: Path) -> None:
    every, seed, count = 3, 11, 6
    cmd = [sys.executable, "-m", "pytest", str(SUITE_DIR), "-p", "no:cacheprovider", "-p", "no:randomly",
           "-k", "test_planted and stale_cache", "--count", str(count), "-rf", "--rootdir", str(REPO)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO,
                          env={**os.environ, **SIM, "FAULTHUNT_PLANT_EVERY": str(every),
                               "FAULTHUNT_PLANT_SEED": str(seed)})
    out = proc.stdout
    assert "backend sim: NO GPU here" in out and "SIMULATED stand-ins" in out
    failed = sorted(re.findall(r"FAILED (\S+) ", out))
    predicted = sorted(f"kernels/suite/test_planted.py::test_planted[stale_cache-numba-{i}-{count}]"
                       for i in range(1, count + 1)
                       if catalog.fires(f"kernels/suite/test_planted.py::test_planted[stale_cache-numba-{i}-{count}]",
                                        every, seed))
    assert failed == predicted


# --- the real kernels ---------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("fault", catalog.CATALOG, ids=lambda f: f.name)
def test_gpu_twin_is_correct(fault: catalog.PlantedFault) -> None:
    for flavour in fault.flavours:
        got = run_isolated(fault.name, "twin", flavour, backend="gpu", timeout=120)
        assert got.returncode == 0 and got.result and got.result["status"] == "correct", got.stderr


@pytest.mark.gpu
@pytest.mark.parametrize("fault", [f for f in catalog.CATALOG if f.evidence.plain_error],
                         ids=lambda f: f.name)
def test_gpu_bug_raises_its_plain_error(fault: catalog.PlantedFault) -> None:
    got = run_isolated(fault.name, "bug", "cuda", backend="gpu", timeout=120)
    assert got.result and got.result["status"] == "error"
    assert fault.evidence.plain_error in got.result["error"]


@given(st.text())
def test_parse_result_never_raises_on_junk(text: str) -> None:
    got = parse_result(text)
    assert got is None or isinstance(got, dict)


@given(st.dictionaries(st.text(max_size=8), st.one_of(st.none(), st.integers(), st.text(max_size=20)), max_size=5),
       st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"), max_size=30))
def test_parse_result_round_trips_after_any_noise(record: dict, noise: str) -> None:
    assert parse_result(f"{noise}\nFAULTHUNT-KERNEL-RESULT {json.dumps(record)}\n") == record


def test_cuda_run_makes_a_context_current_before_any_driver_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """The H200's first validation run: every cuda runner that began with cuMemAlloc died with
    CUDA_ERROR_NOT_INITIALIZED in a fresh process (only the pytest suite's sessionstart had made a
    context current). run() must set GPU 0 current before the planted code's first driver call."""
    from faulthunt.kernels import cuda_faults

    order: list[str] = []

    class FakeDevice:
        def __init__(self, n: int) -> None:
            order.append(f"Device({n})")

        def set_current(self) -> None:
            order.append("set_current")

    monkeypatch.setattr(cuda_faults, "Device", FakeDevice)
    monkeypatch.setattr(cuda_faults, "cu", object())
    monkeypatch.setitem(cuda_faults.RUNNERS, "oob_write",
                        lambda variant: order.append(f"runner {variant}") or cuda_faults.Check(True, "ok"))
    cuda_faults.device.cache_clear()
    try:
        assert cuda_faults.run("oob_write", "bug").correct
    finally:
        cuda_faults.device.cache_clear()
    assert order == ["Device(0)", "set_current", "runner bug"]
