"""Option detection from real compute-sanitizer --help texts, and the command built from them."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from faulthunt.errors import ToolMissingError
from faulthunt.sanitizer import command as cmd

DATA = Path(__file__).parent / "data"
HELP = DATA / "sanitizer" / "help"
H200_HELP = DATA / "h200" / "compute-sanitizer-help.txt"


def info_of(path: Path) -> cmd.ToolInfo:
    return cmd.tool_info_from_help("/opt/cs/compute-sanitizer", path.read_text())


@pytest.mark.parametrize("path,version,n_options,stream_default,api_default", [
    (HELP / "help-2025.2.1.txt", "2025.2.1.0", 70, "no", "explicit"),
    (H200_HELP, "2025.3.1.0", 70, "no", "explicit"),
    (HELP / "help-2026.1.0.txt", "2026.1.0.0", 73, "all", "extended"),
    (HELP / "help-2026.4.0.txt", "2026.4.0.0", 80, "all", "extended"),
])
def test_real_help_texts(path, version, n_options, stream_default, api_default):
    info = info_of(path)
    assert info.version == version and len(info.options) == n_options
    assert info.defaults["track-stream-ordered-races"] == stream_default
    assert info.defaults["report-api-errors"] == api_default
    assert info.defaults["prefix"] == "========="
    assert {"tool", "xml", "save", "log-file", "print-limit", "error-exitcode", "target-processes",
            "padding", "kernel-name", "launch-count"} <= info.options


def test_command_on_the_h200_version():
    plan = cmd.build_command(info_of(H200_HELP), tool="memcheck", log_file="L", xml_file="X", padding=64)
    assert plan.argv == ("/opt/cs/compute-sanitizer", "--tool", "memcheck", "--target-processes", "all",
                         "--error-exitcode", "86", "--print-limit", "1000", "--report-api-errors", "no",
                         "--track-stream-ordered-races", "all", "--padding", "64",
                         "--xml", "--save", "X", "--log-file", "L")
    assert plan.dropped == () and plan.log_file == "L" and plan.xml_file == "X"


def test_memcheck_options_are_not_given_to_other_tools():
    plan = cmd.build_command(info_of(H200_HELP), tool="racecheck", padding=64, leak_check=True)
    assert "--report-api-errors" not in plan.argv and "--padding" not in plan.argv
    assert "--track-stream-ordered-races" not in plan.argv and "--leak-check" not in plan.argv
    assert plan.argv[1:3] == ("--tool", "racecheck")


def test_2022_drops_stream_ordered_races_and_renames_the_kernel_filter():
    info = info_of(HELP / "help-2022.1.0-built-from-docs.txt")
    assert info.defaults["target-processes"] == "application-only"
    plan = cmd.build_command(info, kernel_filters=["kns=max_reduce", "regex=^max"])
    assert "--track-stream-ordered-races" not in plan.argv
    assert ("--kernel-regex", "kns=max_reduce") == plan.argv[plan.argv.index("--kernel-regex"):][:2]
    reasons = [d.render() for d in plan.dropped]
    assert reasons[0] == ("--track-stream-ordered-races: not supported by compute-sanitizer 2022.1.0 "
                          "(added in 2022.2)")
    assert "regex key needs compute-sanitizer 2023.3+" in reasons[1]


def test_2020_drops_padding_and_target_processes_and_uses_filter():
    info = info_of(HELP / "help-2020.1.0-built-from-docs.txt")
    plan = cmd.build_command(info, padding=32, kernel_filters=["kns=scale"])
    dropped = {d.option for d in plan.dropped}
    assert {"--target-processes", "--padding", "--track-stream-ordered-races"} <= dropped
    assert "--filter" in plan.argv and "--target-processes" not in plan.argv


def test_no_log_file_or_xml_options():
    info = cmd.ToolInfo("cs", "2019.1", frozenset({"tool", "print-limit"}), {})
    plan = cmd.build_command(info, log_file="L", xml_file="X")
    assert plan.log_file is None and plan.xml_file is None
    assert {d.option for d in plan.dropped} >= {"--xml --save", "--log-file", "--error-exitcode"}


def test_parse_help_of_junk():
    assert cmd.parse_help("") == (frozenset(), {})
    assert cmd.parse_version("no version here") is None


def _fake(tmp_path: Path, name: str = "compute-sanitizer") -> Path:
    exe = tmp_path / name
    exe.write_text("#!/bin/sh\ncat " + str(H200_HELP) + "\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return exe


def test_find_on_path_and_explicit(tmp_path):
    exe = _fake(tmp_path)
    env = {"PATH": str(tmp_path)}
    assert cmd.find_compute_sanitizer(env, search_wheels=False) == exe
    assert cmd.find_compute_sanitizer({cmd.ENV_EXECUTABLE: str(exe), "PATH": ""}, search_wheels=False) == exe
    home = tmp_path / "cuda"
    (home / "bin").mkdir(parents=True)
    in_home = _fake(home / "bin")
    assert cmd.find_compute_sanitizer({"PATH": "", "CUDA_HOME": str(home)}, search_wheels=False) == in_home


def test_missing_tool_says_how_to_get_it(tmp_path):
    env = {"PATH": str(tmp_path), "CUDA_HOME": str(tmp_path)}
    if cmd.find_compute_sanitizer(env) is not None:
        pytest.skip("a compute-sanitizer is installed in this environment (wheel or /usr/local/cuda)")
    with pytest.raises(ToolMissingError) as err:
        cmd.require_compute_sanitizer(env)
    assert "CUDA toolkit" in err.value.fix and "faulthunt[sanitizer]" in err.value.fix
    assert "nvidia/cu13/compute-sanitizer" in err.value.fix
    with pytest.raises(ToolMissingError, match="does not name a file"):
        cmd.find_compute_sanitizer({cmd.ENV_EXECUTABLE: str(tmp_path / "nope")})


def test_probe_runs_help(tmp_path):
    info = cmd.probe(_fake(tmp_path))
    assert info.version == "2025.3.1.0" and "padding" in info.options


def test_probe_rejects_something_else(tmp_path):
    exe = tmp_path / "compute-sanitizer"
    exe.write_text("#!/bin/sh\necho hello\n")
    exe.chmod(0o755)
    with pytest.raises(ToolMissingError, match="does not look like compute-sanitizer"):
        cmd.probe(exe)
    exe.chmod(0o644)
    if os.geteuid() != 0 or not os.access(exe, os.X_OK):
        with pytest.raises(ToolMissingError, match="not executable"):
            cmd.probe(exe)


def test_the_installed_compute_sanitizer_if_any():
    path = cmd.find_compute_sanitizer()
    if path is None:
        pytest.skip("no compute-sanitizer installed here (CUDA toolkit or `pip install 'faulthunt[sanitizer]'`)")
    info = cmd.probe(path)
    assert info.version and {"tool", "xml", "save", "print-limit"} <= info.options
    plan = cmd.build_command(info, log_file="L", xml_file="X")
    assert plan.xml_file == "X" and plan.log_file == "L"
