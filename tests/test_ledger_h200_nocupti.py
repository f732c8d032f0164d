"""The ledger on the H200 with cupti-python NOT installed, read with today's code.

The capture is what ``scripts/gpu/ledger_nocupti.sh`` wrote (tests/data/ledger/h200_nocupti/,
PROVENANCE.md beside it): the planted faults of ``scripts/gpu/ledger_probe.py`` under
``--ledger auto`` with every wheel but cupti-python. Checked: every case got its expected verdict
from the framework refinements alone; cuda.core, which has no refinement, left no ledger; no
process recorded a CUPTI line, and each says in its first notes why CUPTI is off and how to get it;
the planted addresses map to the recorded verdicts with today's mapper.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from faulthunt.ledger.reader import load_ledger
from faulthunt.mapper import map_address

D = Path(__file__).parent / "data" / "ledger" / "h200_nocupti"
pytestmark = pytest.mark.skipif(not (D / "results.jsonl").is_file(), reason="no H200 capture without cupti-python")


def _results() -> list[dict]:
    return [json.loads(x) for x in (D / "results.jsonl").read_text().splitlines() if x.strip()]


def _ledgers(tmp_path: Path) -> Path:
    with tarfile.open(D / "ledgers.tgz") as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path / "ledgers"


def _lines(case_dir: Path) -> list[dict]:
    return [json.loads(x) for f in sorted(case_dir.glob("*.jsonl"))
            for x in f.read_bytes().rstrip(b"\0").decode().splitlines() if x.strip()]


def test_the_capture_ran_without_cupti_python() -> None:
    identity = (D / "identity.txt").read_text()
    assert "No module named 'cupti'" in identity
    assert "cupti problem: cupti-python is not installed" in identity


def test_every_case_got_its_verdict_and_cuda_core_left_no_ledger() -> None:
    rows = _results()
    assert len(rows) == 16 and all(r["ok"] for r in rows)
    for r in rows:
        if r["case"].startswith("cuda_core_"):
            assert r["verdict"] == r["expect"] == "no ledger"
            assert "does not exist" in r["mapping"]["reason"]
        else:
            assert r["verdict"] == r["expect"] != "no ledger"


def test_the_refinements_recorded_and_cupti_did_not(tmp_path: Path) -> None:
    ledgers = _ledgers(tmp_path)
    cases = sorted(p.name for p in ledgers.iterdir())
    assert len(cases) == 13 and not any(c.startswith("cuda_core") for c in cases)
    for case in cases:
        lines = _lines(ledgers / case)
        allocs = [r for r in lines if r["event"] == "alloc"]
        assert allocs and {r["source"] for r in allocs} <= {"numba", "cupy", "torch"}, case
        assert not any(r.get("source") == "cupti" for r in lines), case
        notes = " ".join(r.get("message", "") for r in lines if r["event"] == "note")
        assert "CUPTI unavailable" in notes and "pip install 'cupti-python" in notes, case


def test_the_planted_addresses_map_to_the_recorded_verdicts(tmp_path: Path) -> None:
    ledgers = _ledgers(tmp_path)
    checked = 0
    for r in _results():
        if r["case"].startswith("cuda_core_") or not r.get("planted"):
            continue
        v = map_address(load_ledger(ledgers / r["case"]), int(r["planted"], 16), pid=r["pid"],
                        at=r["planted_t"])
        assert v.verdict == r["expect"], r["case"]
        checked += 1
    assert checked == 13
