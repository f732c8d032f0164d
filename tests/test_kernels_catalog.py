"""The planted-fault catalog: complete, self-consistent, and true to the real H200 captures."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from faulthunt.cli import main
from faulthunt.kernels import SUITE_DIR, catalog
from faulthunt.kernels.catalog import CATALOG, fires, get

REPO = Path(__file__).resolve().parents[1]
H200 = REPO / "tests" / "data" / "h200"
PLANTED_CU = REPO / "kernels" / "planted.cu"

#: driver error name -> number, for the plain-run captures (the CUDA C captures print runtime
#: names and numbers: "CUDA error 700 (cudaErrorIllegalAddress ...)")
ERROR_CODES = {"CUDA_ERROR_ILLEGAL_ADDRESS": 700, "CUDA_ERROR_MISALIGNED_ADDRESS": 716,
               "CUDA_ERROR_NO_BINARY_FOR_GPU": 209}
TOOLS = {"memcheck", "racecheck", "initcheck", "synccheck"}


def test_twelve_planted_faults_in_issue_order() -> None:
    assert [f.number for f in CATALOG] == list(range(1, 13))
    assert len({f.name for f in CATALOG}) == 12
    assert catalog.names()[0] == "oob_write" and catalog.names()[-1] == "bounded_hang"


@pytest.mark.parametrize("fault", CATALOG, ids=lambda f: f.name)
def test_entry_is_complete_and_consistent(fault: catalog.PlantedFault) -> None:
    ev = fault.evidence
    assert fault.bug and fault.twin and fault.title
    assert ev.plain and ev.sanitizer and ev.xid and ev.cpu
    assert set(fault.flavours) <= {catalog.CUDA, catalog.NUMBA} and fault.flavours
    assert fault.cpu in (catalog.SIM_NUMBA, catalog.SIM_STANDIN, catalog.SIM_NONE)
    assert (ev.tool is None) == (ev.sanitizer_line is None)
    assert ev.tool is None or ev.tool in TOOLS
    assert ev.plain_error is None or ev.plain_error in ERROR_CODES
    # words and checks agree: a plain error is named in the words, Xids likewise
    if ev.plain_error:
        assert ev.plain_error in ev.plain
    for xid in ev.xids:
        assert f"Xid {xid}" in ev.xid
    if not ev.xids:
        assert ev.xid.startswith("none")
    if ev.tool:
        assert ev.sanitizer.startswith(ev.tool)
    for path in ev.seen_in:
        assert (REPO / path).is_file(), path


# arch_gap's capture is a plain run only; validate_gpu.sh checks its sanitizer line
@pytest.mark.parametrize("fault", [f for f in CATALOG if f.evidence.tool and any(
    Path(p).name.startswith("san_") for p in f.evidence.seen_in)], ids=lambda f: f.name)
def test_sanitizer_line_is_in_the_real_capture(fault: catalog.PlantedFault) -> None:
    ev = fault.evidence
    texts = [(REPO / p).read_text(errors="replace") for p in ev.seen_in
             if Path(p).name.startswith(("san_", "xml_"))]
    assert texts, "a sanitizer capture must back the expected line"
    assert any(ev.sanitizer_line in t for t in texts), ev.sanitizer_line


@pytest.mark.parametrize("fault", [f for f in CATALOG if f.evidence.seen_in], ids=lambda f: f.name)
def test_plain_evidence_matches_the_real_capture(fault: catalog.PlantedFault) -> None:
    ev = fault.evidence
    plains = [(REPO / p).read_text() for p in ev.seen_in if Path(p).name.startswith("plain_")]
    assert plains
    text = plains[0]
    if fault.name == "use_after_free":
        # the capture freed the process's only allocation, so the page was unmapped: 700 + Xid 31
        # (the catalog says so); the planted kernel keeps a neighbour alive and is silent
        assert "CUDA error 700" in text
        return
    if ev.plain_error:
        assert f"CUDA error {ERROR_CODES[ev.plain_error]}" in text
    else:
        assert text.rstrip().endswith("rc=0") and "CUDA error" not in text


def test_xid_expectations_match_the_real_kernel_log() -> None:
    lines = (H200 / "nvrm_lines.txt").read_text().splitlines()
    wild_pid = re.search(r"pid=(\d+)", (H200 / "plain_wild.txt").read_text()).group(1)
    mis_pid = re.search(r"pid=(\d+)", (H200 / "plain_misaligned.txt").read_text()).group(1)
    wild = [ln for ln in lines if f"pid={wild_pid}," in ln]
    assert len(wild) == 1 and ": 31, " in wild[0] and "ACCESS_TYPE_VIRT_WRITE" in wild[0]
    # misaligned: three Xid 13 lines (only the last carries the pid), and no Xid 31 for it
    i = next(k for k, ln in enumerate(lines) if f"pid={mis_pid}," in ln)
    assert all(": 13, " in ln for ln in lines[i - 2:i + 1])
    assert not any(f"pid={mis_pid}," in ln and ": 31, " in ln for ln in lines)
    assert get("wild_write").evidence.xids == (31,) and get("misaligned").evidence.xids == (13,)


def test_cuda_kernels_exist_in_planted_cu() -> None:
    source = PLANTED_CU.read_text()
    for fault in CATALOG:
        assert fault.cuda_kernels and catalog.CUDA in fault.flavours
        for symbol in fault.cuda_kernels:
            assert re.search(rf'extern "C" __global__ void {symbol}\(', source), symbol


def test_bounded_hang_kernel_always_has_a_clock_bound() -> None:
    body = PLANTED_CU.read_text().split("void spin_on_flag", 1)[1].split("\n}\n", 1)[0]
    assert "%globaltimer" in body and "clock64()" in body and "cap_ns" in body and "cap_cycles" in body


def test_package_data_ships_what_the_kernels_need() -> None:
    text = (REPO / "pyproject.toml").read_text()
    assert '"faulthunt.kernels" = ["*.cu", "*.py", "suite/*.py", "data/*"]' in text
    assert (SUITE_DIR / "test_planted.py").is_file() and (SUITE_DIR / "conftest.py").is_file()


def test_get_unknown_names_the_known() -> None:
    with pytest.raises(KeyError, match="oob_write"):
        get("nope")


def test_kernels_list_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["kernels", "list", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [d["name"] for d in data] == list(catalog.names())
    for d in data:
        assert {"name", "bug", "twin", "evidence"} <= set(d)
        assert {"plain", "sanitizer", "xid"} <= set(d["evidence"])
        assert isinstance(d["evidence"]["expect"]["xids"], list)


def test_kernels_list_table_keeps_code_in_brackets(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["kernels", "list"]) == 0
    out = capsys.readouterr().out
    assert "out[n]" in out and "bounded_hang" in out


def test_kernels_run_unknown_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["kernels", "run", "nope"]) == 2
    assert "kernels list" in capsys.readouterr().err


def test_kernels_run_flavour_it_lacks(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["kernels", "run", "misaligned", "--flavour", "numba"]) == 2
    assert "no numba flavour" in capsys.readouterr().err


# --- intermittent mode ---------------------------------------------------------------------------

@given(st.text(max_size=40), st.integers(min_value=-5, max_value=1), st.integers())
def test_fires_always_when_every_is_one_or_less(key: str, every: int, seed: int) -> None:
    assert fires(key, every, seed)


@given(st.text(max_size=40), st.integers(min_value=2, max_value=50), st.integers())
def test_fires_is_deterministic(key: str, every: int, seed: int) -> None:
    assert fires(key, every, seed) == fires(key, every, seed)


@pytest.mark.parametrize("every", [2, 5, 10])
def test_fires_about_one_in_n(every: int) -> None:
    from faulthunt.stats import wilson_interval

    keys = [f"kernels/suite/test_planted.py::test_planted[oob_write-cuda-{i}-4000]" for i in range(4000)]
    hits = sum(fires(k, every, seed=7) for k in keys)
    lo, hi = wilson_interval(hits, len(keys), 0.999)
    assert lo <= 1 / every <= hi


def test_fires_depends_on_the_seed() -> None:
    keys = [f"t[{i}]" for i in range(200)]
    assert [fires(k, 4, 1) for k in keys] != [fires(k, 4, 2) for k in keys]


def test_docs_kernels_table_is_the_catalog() -> None:
    text = (REPO / "docs" / "kernels.md").read_text()
    for f in CATALOG:
        row = next(ln for ln in text.splitlines() if ln.startswith(f"| {f.number} | `{f.name}` |"))
        assert f.evidence.plain.replace("|", "/") in row and f.evidence.xid.replace("|", "/") in row
