"""The NVIDIA Xid catalog: what an Xid number means, whose fault it is, and what to do about it.

The data is ``faulthunt/data/xid_catalog.csv`` (provenance in ``harness/data/README.md``): NVIDIA's
catalog mnemonic, description and resolution buckets per Xid, the legacy "possible causes" flags,
and a grouping (``faulthunt_class``) that is faulthunt's own, not NVIDIA's. This module turns a
class into a category a user reads at a glance -- *your code* or *the machine* -- plus the action.
Pure: the CSV is read once from the installed package, never from the current directory.
"""

from __future__ import annotations

import csv
import functools
import io
import os

import msgspec

#: Xids the NVIDIA k8s device plugin and DRA driver treat as application errors, non-fatal to the
#: GPU (formats.md section 1.2); used to mark ``is_application``.
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})


class CategoryInfo(msgspec.Struct, frozen=True):
    """What a ``faulthunt_class`` means to a user."""

    title: str
    #: ``application`` (your code), ``machine`` (hardware: GPU, memory, bus, power),
    #: ``driver`` (driver/firmware), ``consequence`` (follows an earlier fault), ``informational``,
    #: ``unclear`` (either, decide by repetition), ``unknown``
    culprit: str
    action: str


CATEGORIES: dict[str, CategoryInfo] = {
    "app_memory_fault": CategoryInfo(
        "application memory fault", "application",
        "Your code (or a library it calls) touched GPU memory it must not: rerun the failing test "
        "under compute-sanitizer (`faulthunt sanitize`) and map the address (`faulthunt map`). "
        "Only if faults repeat on one GPU across unrelated programs suspect the GPU (run DCGM diagnostics).",
    ),
    "channel_teardown_secondary": CategoryInfo(
        "channel teardown after a fault", "consequence",
        "A consequence, not a cause: the driver tore down a channel after an earlier error "
        "(a fault, a killed process). Look at the Xid before it for the same process or GPU.",
    ),
    "pushbuffer_or_class_error": CategoryInfo(
        "push buffer / class error", "unclear",
        "A corrupt command stream: usually an application or library bug (check the CUDA code, "
        "driver/toolkit mismatch); if it repeats with known-good code, suspect memory or the bus.",
    ),
    "timeout_hang": CategoryInfo(
        "hang / timeout", "unclear",
        "The GPU stopped making progress: a kernel that never finishes (your code) or a hung GPU. "
        "Find the test running at that time.",
    ),
    "ecc_memory": CategoryInfo(
        "ECC / GPU memory hardware", "machine",
        "GPU memory hardware error: not your code. Check the GPU's ECC and row-remapping state "
        "(`nvidia-smi -q -d ECC,ROW_REMAPPER`).",
    ),
    "bus_link": CategoryInfo(
        "PCIe / bus link", "machine",
        "An error on the GPU's bus link (PCIe): not your code. Check cabling, power and the host's "
        "PCIe logs.",
    ),
    "nvlink": CategoryInfo(
        "NVLink", "machine",
        "An NVLink error: the machine, not your code.",
    ),
    "firmware_gsp_microcontroller": CategoryInfo(
        "driver firmware / GSP / micro-controller", "driver",
        "The driver's firmware (GSP or another micro-controller) reported an error: not your code.",
    ),
    "copy_engine_exception": CategoryInfo(
        "copy engine exception", "unclear",
        "A copy engine (cudaMemcpy*) failed: check the copy's addresses and sizes in your code first; "
        "if it repeats with correct copies, suspect the GPU.",
    ),
    "video_or_aux_engine_exception": CategoryInfo(
        "video / auxiliary engine exception", "unclear",
        "A video or auxiliary engine (NVDEC, NVJPG, OFA...) reported an error: not a memory bug "
        "of your CUDA kernels.",
    ),
    "power_thermal": CategoryInfo(
        "power / thermal", "machine",
        "A power or thermal condition of the board: the machine, not your code.",
    ),
    "informational_or_recovery": CategoryInfo(
        "informational / recovery", "informational",
        "Informational: read it together with the Xid it refers to.",
    ),
    "driver_or_other": CategoryInfo(
        "driver / other", "driver",
        "A driver-side error: not a memory bug of yours.",
    ),
    "unused": CategoryInfo(
        "unused by current drivers", "unknown",
        "The current catalog lists this Xid as unused: report it with the full kernel log.",
    ),
    "unknown": CategoryInfo(
        "not in the catalog", "unknown",
        "Not in faulthunt's copy of the NVIDIA catalog (a newer driver?): look it up in the current "
        "catalog, https://docs.nvidia.com/deploy/xid-errors/.",
    ),
}

#: NVIDIA resolution buckets, in words
ACTION_WORDS: dict[str, str] = {
    "RESTART_APP": "restart the application",
    "IGNORE": "no action needed by itself",
    "RESET_GPU": "reset the GPU",
    "RESTART_BM": "reboot the machine",
    "RESTART_VM": "restart the VM",
    "CONTACT_SUPPORT": "contact NVIDIA support",
    "CHECK_MECHANICALS": "check the board's power connectors",
    "CHECK_UVM": "check UVM (unified memory) usage",
    "UPDATE_SWFW": "update the driver/firmware",
    "CHECK_APP/CUDA": "check the application and its CUDA code",
    "INVESTIGATE_SW": "investigate the software stack",
}


class CatalogEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One Xid of the catalog, with faulthunt's reading of it."""

    xid: int
    mnemonic: str
    description: str
    immediate_action: str
    investigatory_action: str
    #: legacy "possible cause" flags: HW DRV APP SYSMEM BUS THERMAL FB
    legacy_causes: tuple[str, ...]
    #: faulthunt's class (``app_memory_fault``, ``ecc_memory``...): the ``category`` of an XidEvent
    category: str
    in_catalog: bool = True

    @property
    def info(self) -> CategoryInfo:
        return CATEGORIES.get(self.category, CATEGORIES["unknown"])

    @property
    def title(self) -> str:
        return self.info.title

    @property
    def culprit(self) -> str:
        return self.info.culprit

    @property
    def is_application(self) -> bool:
        """Whether this Xid comes from (or follows) something an application did."""
        return self.xid in APPLICATION_XIDS or self.info.culprit == "application"

    @property
    def action(self) -> str:
        """What to do: faulthunt's reading (whose fault, what to look at) and then the remedy,
        which is the catalog's own buckets alone, so the advice never contradicts NVIDIA's
        (a contained Xid 94 restarts the application; it does not reset the GPU)."""
        buckets = []
        for code in (self.immediate_action, self.investigatory_action):
            if code and code not in buckets:
                buckets.append(code)
        said = "; ".join(f"{c} ({ACTION_WORDS[c]})" if c in ACTION_WORDS else c for c in buckets)
        if said:
            return f"{self.info.action} Catalog: {said}."
        if self.in_catalog:
            return (f"{self.info.action} The catalog gives no action for it yet: see "
                    "https://docs.nvidia.com/deploy/xid-errors/.")
        return self.info.action

    def to_json(self) -> dict[str, object]:
        return {
            "xid": self.xid,
            "mnemonic": self.mnemonic,
            "description": self.description,
            "category": self.category,
            "title": self.title,
            "culprit": self.culprit,
            "is_application": self.is_application,
            "immediate_action": self.immediate_action,
            "investigatory_action": self.investigatory_action,
            "legacy_causes": list(self.legacy_causes),
            "action": self.action,
            "in_catalog": self.in_catalog,
        }


def parse_catalog(text: str) -> dict[int, CatalogEntry]:
    """Parse the catalog CSV (columns as in ``xid_catalog.csv``); rows without a numeric xid are skipped."""
    out: dict[int, CatalogEntry] = {}
    for row in csv.DictReader(io.StringIO(text)):
        try:
            xid = int((row.get("xid") or "").strip())
        except ValueError:
            continue
        causes = tuple(c for c in (row.get("legacy_possible_causes") or "").split("|") if c)
        out[xid] = CatalogEntry(
            xid=xid,
            mnemonic=(row.get("mnemonic") or "").strip(),
            description=(row.get("catalog_description") or "").strip(),
            immediate_action=(row.get("immediate_action") or "").strip(),
            investigatory_action=(row.get("investigatory_action") or "").strip(),
            legacy_causes=causes,
            category=(row.get("faulthunt_class") or "unknown").strip() or "unknown",
        )
    return out


@functools.lru_cache(maxsize=1)
def load_catalog() -> dict[int, CatalogEntry]:
    """The shipped catalog, read once."""
    # The package's own file; importlib.resources only for a package that is not on a file system
    # (a zip): importing it takes longer than `faulthunt xid parse` takes to read a small log.
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "xid_catalog.csv")
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError:
        from importlib import resources

        text = (resources.files("faulthunt") / "data" / "xid_catalog.csv").read_text(encoding="utf-8")
    return parse_catalog(text)


@functools.lru_cache(maxsize=512)
def classify(xid: int) -> CatalogEntry:
    """The catalog entry for ``xid``; an ``unknown`` entry (never an error) for numbers not in it."""
    entry = load_catalog().get(xid)
    if entry is not None:
        return entry
    return CatalogEntry(
        xid=xid, mnemonic="", description="not in the catalog" if xid != 999 else "unknown Xid (NVML 999)",
        immediate_action="", investigatory_action="", legacy_causes=(), category="unknown", in_catalog=False,
    )
