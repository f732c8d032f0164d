"""``faulthunt sanitize parse``: JSON Lines schema, table, exit codes, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from faulthunt.cli import main

H200 = Path(__file__).parent / "data" / "h200"

#: the issue's required keys and their types
SCHEMA = {"tool": (str, type(None)), "kind": (str,), "kernel": (str, type(None)), "file": (str, type(None)),
          "line": (int, type(None)), "access": (str, type(None)), "size": (int, type(None)),
          "address": (int, type(None)), "thread": (list, type(None)), "block": (list, type(None)),
          "message": (str,)}


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(["sanitize", "parse", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize("name,n", [("san_memcheck_oob1.txt", 2), ("san_memcheck_streamrace.txt", 20),
                                    ("san_racecheck_shared.txt", 20), ("san_initcheck_uninit.txt", 20),
                                    ("san_synccheck_div.txt", 16), ("san_memcheck_leak.txt", 2),
                                    ("xml_memcheck_uaf.xml", 100), ("san_numba.txt", 2)])
def test_json_lines_schema(capsys, name, n):
    rc, out, _ = run_cli(capsys, str(H200 / name), "--json")
    lines = out.splitlines()
    assert rc == 0 and len(lines) == n
    for line in lines:
        obj = json.loads(line)
        for key, types in SCHEMA.items():
            assert isinstance(obj[key], types), (key, obj[key])
        for dim in ("thread", "block"):
            assert obj[dim] is None or len(obj[dim]) == 3


def test_json_values_of_the_first_record(capsys):
    _, out, _ = run_cli(capsys, str(H200 / "san_memcheck_oob1.txt"), "--json")
    first, api = (json.loads(line) for line in out.splitlines())
    assert {k: first[k] for k in SCHEMA} == {
        "tool": "memcheck", "kind": "memory_access", "kernel": "max_reduce_off_by_one(const float *, float *, int)",
        "file": "faults.cu", "line": 18, "access": "write", "size": 4, "address": 0x7F592A801FA0,
        "thread": [232, 0, 0], "block": [3, 0, 0], "message": "Invalid __global__ write of size 4 bytes"}
    assert api["kind"] == "api_error" and api["address"] is None
    _, out, _ = run_cli(capsys, str(H200 / "san_memcheck_leak.txt"), "--json")
    assert json.loads(out.splitlines()[0])["address"] == 0x7FB7FC800000  # the leaked address


def test_table_and_found_exit_status(capsys):
    rc, out, _ = run_cli(capsys, str(H200 / "san_memcheck_streamrace.txt"))
    assert rc == 1
    assert "offending kernel: Invalid __global__ read (potentially accessed before it is allocated) in kernel scale at faults.cu:26" in out


def test_clean_log(capsys):
    rc, out, _ = run_cli(capsys, str(H200 / "san_memcheck_ok.txt"))
    assert rc == 0 and "no sanitizer error records" in out


def test_unreadable_and_binary_and_truncated(capsys, tmp_path):
    rc, _, err = run_cli(capsys, str(tmp_path / "missing.log"))
    assert rc == 3 and "fix:" in err
    junk = tmp_path / "save.bin"
    junk.write_bytes(b"\x00\x01NVSAN\x00" * 50)
    rc, _, err = run_cli(capsys, str(junk), "--json")
    assert rc == 0 and "compute-sanitizer --read" in err
    cut = tmp_path / "cut.log"
    text = (H200 / "san_memcheck_oob1.txt").read_text()
    cut.write_text(text[: text.index("by thread") + 5])
    rc, out, err = run_cli(capsys, str(cut), "--json")
    assert rc == 0 and len(out.splitlines()) == 1 and "ends inside a record" in err
    xml = tmp_path / "cut.xml"
    xt = (H200 / "xml_memcheck_uaf.xml").read_text()
    xml.write_text(xt[: len(xt) // 3])
    rc, out, err = run_cli(capsys, str(xml), "--json")
    assert rc == 0 and 0 < len(out.splitlines()) < 100 and "XML ends early" in err


def test_custom_prefix_option(capsys, tmp_path):
    log = tmp_path / "p.log"
    # no banner: the prefix cannot be found from the log, so it is given
    log.write_text("".join(line + "\n" for line in (H200 / "san_memcheck_prefix.txt").read_text().splitlines()[1:]))
    _, out, _ = run_cli(capsys, str(log), "--json")
    assert out == ""
    _, out, _ = run_cli(capsys, str(log), "--json", "--prefix", "CSAN> ")
    assert len(out.splitlines()) == 2


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_parse_refuses_a_device_instead_of_reading_it_for_ever(capsys: pytest.CaptureFixture[str]) -> None:
    """`sanitize parse /dev/zero` read for ever (`xid parse` refuses devices): exit 3 with the fix."""
    assert main(["sanitize", "parse", "/dev/zero"]) == 3
    err = capsys.readouterr().err
    assert "/dev/zero is a device, not a log" in err and "fix:" in err
