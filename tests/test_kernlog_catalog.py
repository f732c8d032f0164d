"""The shipped Xid catalog and the category/culprit/action a user sees."""

from __future__ import annotations

import hashlib
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
