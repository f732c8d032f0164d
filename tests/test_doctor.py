"""doctor on this CPU-only machine (real probes), and its verdicts on constructed machine states."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from faulthunt import identity
from faulthunt.cli import main
from faulthunt.redact import REDACTED

LOCAL = Path(__file__).parent / "data" / "cuobjdump"


def test_doctor_without_gpu_says_so_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    if identity.collect_basic()["gpus"]:
        pytest.skip("this machine has a GPU; the no-GPU path is for CPU runners")
    assert main(["doctor", "--no-wheels"]) == 0
    out = capsys.readouterr().out
    assert "gpus        none:" in out and "no GPU on this machine" in out


def test_doctor_json_is_complete(capsys: pytest.CaptureFixture[str],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_FAKE_TOKEN", "ghp_" + "z" * 36)
    monkeypatch.setenv("CUDA_NOTE", "see https://u:hunter2@example.org/x")
    assert main(["doctor", "--json", "--no-wheels"]) == 0
    full = json.loads(capsys.readouterr().out)
    for key in ("gpus", "driver", "driver_module", "cuda_driver", "cuda_runtime", "hmm", "tools",
                "kernel_log", "ptrace", "nvml", "libraries", "problems", "env"):
        assert key in full, key
    assert set(full["tools"]) == {"compute-sanitizer", "cuobjdump", "cuda-gdb", "py-spy", "tmux", "tmate"}
    for problem in full["problems"]:
        assert problem["message"] and problem["fix"], problem
    assert full["env"]["CUDA_FAKE_TOKEN"] == REDACTED
    assert "hunter2" not in json.dumps(full)


def test_tmux_version_is_real() -> None:
    if not shutil.which("tmux"):
        pytest.skip("tmux not installed")
    tools = identity.collect_tools()
    assert tools["tmux"]["path"] and tools["tmux"]["version"]


@pytest.mark.slow
def test_doctor_checks_a_real_library_against_a_v100() -> None:
    # Uses the real cuobjdump (nvidia-cuda-cuobjdump wheel) on a real binary when both are here.
    cuobjdump = identity.find_tool("cuobjdump")
    lib = os.environ.get("FAULTHUNT_TEST_CUDA_LIB")
    candidates = [lib] if lib else identity.wheel_cuda_libraries()
    candidates = [c for c in candidates if c and identity.elf_has_device_code(c)]
    if not cuobjdump or not candidates:
        pytest.skip("needs cuobjdump (pip install nvidia-cuda-cuobjdump) and a CUDA library wheel")
    proc = subprocess.run([sys.executable, "-m", "faulthunt", "doctor", "--json", "--no-wheels",
                           "--lib", candidates[0], "--cc", "5.0"], capture_output=True, text=True)
    full = json.loads(proc.stdout)
    assert full["libraries"] and full["libraries"][0]["verdict"] == "cannot_run"


def test_elf_fatbin_section_probe(tmp_path: Path) -> None:
    assert identity.elf_has_device_code(sys.executable) is False
    sections = identity.elf_sections(sys.executable)
    assert sections and ".text" in sections and ".nv_fatbin" not in sections
    assert all(offset >= 0 and size >= 0 for offset, size in sections.values())
    junk = tmp_path / "junk.so"
    junk.write_bytes(b"\x7fELF\x02" + b"\x00" * 10)
    assert identity.elf_has_device_code(str(junk)) is None
    assert identity.elf_has_device_code(str(tmp_path / "missing.so")) is None


def test_collect_libraries_with_a_fake_cuobjdump(tmp_path: Path) -> None:
    # The probe runs the cuobjdump it is given; this one replays the real captures.
    fake = tmp_path / "cuobjdump"
    fake.write_text("#!/bin/sh\n"
                    f'case "$1" in --list-elf) cat {LOCAL}/libcurand_elf.txt;; '
                    f'--list-ptx) cat {LOCAL}/libcurand_ptx.txt;; esac\n')
    fake.chmod(0o755)
    lib = tmp_path / "libcurand.so.10"
    lib.write_bytes(b"not an elf: the section probe says None, so cuobjdump decides")
    from faulthunt.archcheck import Arch
    out = identity.collect_libraries([str(lib)], [Arch(7, 0)], str(fake))
    assert out[0]["verdict"] == "cannot_run"
    assert out[0]["message"].endswith("this sm_70 device cannot run its kernels")


H200 = Path(__file__).parent / "data" / "h200"


def _replaying_cuobjdump(tmp_path: Path) -> Path:
    """A cuobjdump that replays real listings: cuFFT's (H200) for libstub*, cuRAND's otherwise."""
    fake = tmp_path / "cuobjdump"
    fake.write_text("#!/bin/sh\n"
                    f'case "$2" in *libstub*) E={H200}/cuobjdump_elf_libcufft.so.12.txt P={H200}/cuobjdump_ptx_libcufft.so.12.txt;; '
                    f"*) E={LOCAL}/libcurand_elf.txt P={LOCAL}/libcurand_ptx.txt;; esac\n"
                    'case "$1" in --list-elf) cat $E;; --list-ptx) cat $P;; esac\n')
    fake.chmod(0o755)
    return fake


def test_collect_libraries_scans_what_cuobjdump_cannot_see(tmp_path: Path) -> None:
    # A stub listing (cuFFT's one sm_75 cubin) in a file that embeds a fatbin with sm_90 SASS.
    import struct

    from faulthunt.archcheck import Arch
    entry = struct.pack("<HHIQ", 2, 0x101, 64, 4) + b"\0" * 12 + struct.pack("<I", 90)
    fatbin = struct.pack("<IHHQ", 0xBA55ED50, 1, 16, 68) + entry.ljust(64, b"\0") + b"sass"
    lib = tmp_path / "libstub.so.1"
    lib.write_bytes(b"not an elf" + fatbin + b"tail")
    out = identity.collect_libraries([str(lib)], [Arch(9, 0), Arch(7, 0)], str(_replaying_cuobjdump(tmp_path)))
    by_device = {row["device"]: row for row in out}
    assert by_device["sm_90"]["verdict"] == "unseen" and not by_device["sm_90"]["problem"]
    assert by_device["sm_90"]["visibility"]["embedded_fatbins"]["sass"] == ["sm_90"]
    assert by_device["sm_70"]["verdict"] == "cannot_run"  # the scan found nothing for sm_70 either
    full = {"gpus": [{"index": 0}], "driver_module": "open", "nvml": True, "cuda_runtime": [{}],
            "libraries": out}
    notes = [p for p in identity.problems_of(full) if p["area"] == "libraries"]
    assert [(p["severity"], p["message"].split(":")[0]) for p in notes] == [
        ("info", "libstub"), ("problem", "libstub has SASS for sm_75 and no PTX (and the 1 fatbin(s) outside .nv_fatbin only sm_90)")]


def test_collect_libraries_compares_a_stub_listing_with_its_neighbours(tmp_path: Path) -> None:
    from faulthunt.archcheck import Arch
    stub, neighbour = tmp_path / "libstub.so.1", tmp_path / "libcurand.so.10"
    stub.write_bytes(b"not an elf, no fatbin inside")
    neighbour.write_bytes(b"not an elf either")
    fake = _replaying_cuobjdump(tmp_path)
    out = identity.collect_libraries([str(stub), str(neighbour)], [Arch(9, 0)], str(fake))
    row = next(r for r in out if r["library"] == "libstub")
    assert row["verdict"] == "unseen"
    assert "the other libraries beside it cover sm_75..sm_120" in row["message"]
    alone = identity.collect_libraries([str(stub)], [Arch(9, 0)], str(fake))
    assert alone[0]["verdict"] == "cannot_run"  # no neighbour, no scan hit, not a known name


@pytest.mark.parametrize("scope,cap,euid,severity", [
    (None, False, 1000, None), (0, False, 1000, None), (1, False, 1000, "problem"),
    (2, False, 1000, "problem"), (2, True, 0, None), (3, True, 0, "problem"),
    (None, False, 0, "warning"), (1, True, 1000, None),
])
def test_ptrace_verdicts(scope, cap, euid, severity) -> None:  # type: ignore[no-untyped-def]
    verdict = identity.ptrace_verdict(scope, cap, euid)
    assert (verdict[0] if verdict else None) == severity
    if verdict:
        assert verdict[3]  # every problem has its fix


def test_kernel_log_problem_has_fix() -> None:
    full = {"gpus": [{"cc": "9.0"}], "driver_module": "open", "nvml": True, "cuda_runtime": [{}],
            "tools": {}, "kernel_log": {"kmsg_readable": False, "kmsg_error": "Operation not permitted",
                                        "dmesg_restrict": 1, "cap_syslog": False},
            "ptrace": {"ptrace_scope": 0, "cap_sys_ptrace": False, "euid": 1000}, "libraries": []}
    problems = identity.problems_of(full)
    assert len(problems) == 1
    assert "dmesg_restrict=1" in problems[0]["message"] and "CAP_SYSLOG" in problems[0]["fix"]
    assert "--xid-source nvml" in problems[0]["fix"]


def test_missing_tools_are_problems_on_a_gpu_machine() -> None:
    full = {"gpus": [{"cc": "7.0"}], "driver_module": None, "nvml": True, "cuda_runtime": [{}],
            "tools": {"compute-sanitizer": {"path": None, "fix": "install it"},
                      "tmate": {"path": None, "fix": "apt-get install tmate"}},
            "kernel_log": {}, "ptrace": {}, "libraries": []}
    by_area = {(p["area"], p["severity"]) for p in identity.problems_of(full)}
    assert ("tools", "problem") in by_area and ("tools", "info") in by_area
    assert ("driver", "warning") in by_area


@pytest.mark.parametrize("tool,text,version", [
    ("compute-sanitizer", (Path(__file__).parent / "data/h200/identity.txt").read_text().split(
        "NVIDIA (R) Compute Sanitizer")[1][:200], "2025.3.1.0"),
    ("cuobjdump", (LOCAL / "version.txt").read_text(), "13.5.37"),
    ("py-spy", "py-spy 0.4.3\n", "0.4.3"),
    ("tmux", "tmux 3.3a\n", "3.3a"),
    ("tmate", "tmate 2.4.0\n", "2.4.0"),
    ("cuda-gdb", "NVIDIA (R) cuda-gdb 13.0\nPortions Copyright (C) 2007-2025 NVIDIA Corporation\n", "13.0"),
    ("tmux", "", None),
])
def test_tool_versions(tool: str, text: str, version: str | None) -> None:
    assert identity.parse_tool_version(tool, text) == version


def test_maps_parsing() -> None:
    text = ("7f00-7f01 r-xp 00000000 08:01 1 /usr/lib/libcuda.so.580.1\n"
            "7f01-7f02 r--p 00000000 08:01 1 /usr/lib/libcuda.so.580.1\n"
            "7f02-7f03 rw-p 00000000 00:00 0 \n"
            "7f03-7f04 r-xp 00000000 08:01 2 /opt/x/libcudnn_cnn.so.9 (deleted)\n"
            "7f04-7f05 r-xp 00000000 08:01 3 /usr/bin/python3.12\n"
            "7f05-7f06 r-xp 00000000 08:01 4 /opt/my lib/libx.so\n")
    assert identity.parse_maps_libraries(text) == ["/usr/lib/libcuda.so.580.1", "/opt/my lib/libx.so"]


def test_doctor_pid_of_this_process(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--json", "--no-wheels", "--pid", str(os.getpid()), "--cc", "9.0"]) == 0
    full = json.loads(capsys.readouterr().out)
    assert full["libraries_checked"] > 0  # this python's own .so files were examined
    assert main(["doctor", "--no-wheels", "--pid", "999999999"]) == 0
    assert "cannot read /proc/999999999/maps" in capsys.readouterr().out


@pytest.mark.parametrize("severities, strict_rc", [
    (["warning"], 1), (["problem", "info"], 1), (["info"], 0), ([], 0)])
def test_strict_fails_on_what_the_report_lists(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str],
                                               severities: list[str], strict_rc: int) -> None:
    """--strict exits 1 exactly when the report prints "N problem(s)" (issue 13: a machine
    without compute-sanitizer printed "2 problem(s)" and exited 0 under --strict)."""
    full = identity.collect_full(scan_wheels=False)
    full["problems"] = [{"severity": s, "area": "tools", "message": f"a {s}", "fix": "do x"}
                        for s in severities]
    monkeypatch.setattr(identity, "collect_full", lambda **kw: full)
    assert main(["doctor", "--strict"]) == strict_rc
    assert ("problem(s)" in capsys.readouterr().out) == bool(strict_rc)
    assert main(["doctor"]) == 0


def test_doctor_names_the_extras_that_provide_missing_tools(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    assert "pip install 'faulthunt[sanitizer]'" in identity.TOOLS["compute-sanitizer"][1]
    assert "nvidia-cuda-sanitizer-api" in identity.TOOLS["compute-sanitizer"][1]
    assert "faulthunt[cuobjdump]" in identity.TOOLS["cuobjdump"][1]
    assert "faulthunt[spy]" in identity.TOOLS["py-spy"][1]
    # the variable the fix names is honoured by doctor as by `faulthunt sanitize`
    tool = tmp_path / "compute-sanitizer"
    tool.write_text("#!/bin/sh\necho 'Version 2025.3.1.0'\n")
    tool.chmod(0o755)
    monkeypatch.setenv("FAULTHUNT_COMPUTE_SANITIZER", str(tool))
    assert identity.find_tool("compute-sanitizer") == str(tool)


def test_sanitize_parse_errors_name_the_subcommand(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from faulthunt.cli import main

    assert main(["sanitize", "parse", str(tmp_path / "missing.log")]) == 3
    assert capsys.readouterr().err.startswith("faulthunt sanitize parse: cannot read ")


def test_a_lib_that_does_not_exist_is_named(tmp_path, capsys):
    """`--lib PATH` with a typo read "1 CUDA libraries not checked for SASS/PTX: cuobjdump not
    found" (or an empty verdict with cuobjdump), never that the file is not there."""
    from faulthunt.cli import main

    assert main(["doctor", "--lib", str(tmp_path / "libcudnn.so.9"), "--no-wheels"]) == 3
    err = capsys.readouterr().err
    assert f"--lib {tmp_path / 'libcudnn.so.9'}: no such file" in err and "fix:" in err
