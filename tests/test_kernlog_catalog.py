"""The shipped Xid catalog and the category/culprit/action a user sees."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from faulthunt.kernlog.catalog import CATEGORIES, classify, load_catalog, parse_catalog

DATA = Path(__file__).resolve().parents[1] / "harness" / "data"


def test_shipped_copy_is_the_documented_one() -> None:
    digest = hashlib.sha256((DATA / "xid_catalog.csv").read_bytes()).hexdigest()
    assert digest in (DATA / "README.md").read_text()


def test_catalog_loads_every_row_and_every_class_has_words() -> None:
    cat = load_catalog()
    assert len(cat) == 172 and min(cat) == 1 and max(cat) == 172
    assert {e.category for e in cat.values()} <= set(CATEGORIES)


@pytest.mark.parametrize("xid,category,culprit,is_app", [
    (13, "app_memory_fault", "application", True),
    (31, "app_memory_fault", "application", True),
    (43, "channel_teardown_secondary", "consequence", True),
    (45, "channel_teardown_secondary", "consequence", True),
    (48, "ecc_memory", "machine", False),
    (79, "bus_link", "machine", False),
    (109, "timeout_hang", "unclear", True),
    (119, "firmware_gsp_microcontroller", "driver", False),
    (74, "nvlink", "machine", False),
    (154, "informational_or_recovery", "informational", False),
])
def test_classify(xid: int, category: str, culprit: str, is_app: bool) -> None:
    e = classify(xid)
    assert (e.category, e.culprit, e.is_application) == (category, culprit, is_app)
    assert e.in_catalog and e.mnemonic and e.action


def test_action_names_the_next_step_and_the_catalog_bucket() -> None:
    assert "compute-sanitizer" in classify(31).action and "RESTART_APP" in classify(31).action
    assert "not your code" in classify(48).action and "WORKFLOW_XID_48" in classify(48).action
    assert classify(31).mnemonic == "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT"


@pytest.mark.parametrize("xid", [0, 999, 173, 10**6])
def test_unknown_xids_never_raise(xid: int) -> None:
    e = classify(xid)
    assert e.category == "unknown" and not e.in_catalog and "catalog" in e.action


def test_parse_catalog_skips_bad_rows() -> None:
    text = "xid,mnemonic,catalog_description,immediate_action,investigatory_action,legacy_possible_causes,faulthunt_class\n" \
           "x,BAD,,,,,\n31,M,\"a, b\",RESTART_APP,,HW|APP,app_memory_fault\n"
    cat = parse_catalog(text)
    assert list(cat) == [31] and cat[31].description == "a, b" and cat[31].legacy_causes == ("HW", "APP")


#: remedies faulthunt's own words could prescribe, and the catalog bucket each needs
_REMEDIES = {"reset the gpu": "RESET_GPU", "reboot": "RESTART_BM", "restart the application": "RESTART_APP",
             "drain": None, "rma": None, "contact support": "CONTACT_SUPPORT",
             "update the driver": "UPDATE_SWFW"}


def test_advice_never_contradicts_the_catalog() -> None:
    """User defect 20: for every Xid, a remedy the advice names is one of the catalog's buckets
    (Xid 94, a contained error, restarts the application: no GPU reset, no drain)."""
    for xid, entry in load_catalog().items():
        ours = entry.info.action.lower()
        buckets = {entry.immediate_action, entry.investigatory_action}
        for phrase, bucket in _REMEDIES.items():
            if re.search(rf"\b{phrase}\b", ours):
                assert bucket in buckets, f"Xid {xid}: '{phrase}' is not the catalog's {buckets}"
    e94 = classify(94)
    assert "RESTART_APP (restart the application)" in e94.action
    assert "reset" not in e94.action.lower() and "drain" not in e94.action.lower()


def test_report_advice_for_a_machine_xid_is_the_catalogs() -> None:
    from faulthunt.report.model import next_steps

    steps = next_steps({}, [{"xid": 94, "category": "ecc_memory"}], None, [], "r")
    assert any(s.startswith("Xid 94 (Contained memory error) is the machine's, not your code")
               and "RESTART_APP" in s and "reset" not in s.lower() for s in steps)
