"""The fast path of the Xid parser agrees with the general path, line for line.

``parse_line`` / ``scan_bytes`` first try one compiled match for the commonest modern line shape
(plain dmesg, /dev/kmsg or bare container; ``PCI:`` device; optional ``pid=``/``name=``; the Xid 31
MMU message read in the same match) and fall back to the general container/body/message parsers.
``_parse_line_general`` is the general path alone (no fast line match, no fast MMU match, no caches).
Every line of every fixture and H200 capture, and hypothesis-generated lines built to sit on the
edges of the fast pattern, must give equal events both ways.
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec.structs import asdict, fields

from faulthunt.kernlog import parse as P
from faulthunt.records.xid import MmuFault, XidEvent

DATA = Path(__file__).parent / "data"


def _capture_lines() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    files = sorted((DATA / "kernlog").glob("*.log")) + sorted((DATA / "h200").glob("*.txt"))
    for p in files:
        lines = [ln for ln in p.read_text(errors="replace").splitlines() if P.MARKER in ln]
        if lines:
            out[f"{p.parent.name}/{p.name}"] = lines
    for p in sorted((DATA / "kernlog" / "h200_validate").glob("*.jsonl")):
        recs = [json.loads(ln) for ln in p.read_text().splitlines() if ln.startswith("{")]
        raws = [r["raw"] for r in recs if P.MARKER in (r.get("raw") or "")]
        raws += [e["raw"] for r in recs for e in r.get("events", []) + r.get("consequences", [])]
        if raws:
            out[f"h200_validate/{p.name}"] = raws
    return out


CAPTURES = _capture_lines()


#: the compiled reader of the commonest shapes (kernlog/_scan.c), where it is built
NATIVE = P._native()


def _same(line: str) -> XidEvent | None:
    """Assert both paths (and the compiled reader, where built) agree on ``line``; return the event."""
    fast, general = P.parse_line(line), P._parse_line_general(line)
    assert fast == general, line
    if NATIVE is not None:
        native = NATIVE.parse_lines([line], P.parse_line)[0]
        assert native == fast, line
        assert msgspec.json.encode(native) == msgspec.json.encode(fast), line
    if fast is not None:
        assert fast.to_json() == general.to_json()
        # the positional construction builds the very record the keyword one would
        assert fast == XidEvent(**asdict(fast))
        if fast.mmu is not None:
            assert fast.mmu == MmuFault(**asdict(fast.mmu))
            assert [f.name for f in fields(fast.mmu)] == list(asdict(fast.mmu))
    return fast


def test_captures_are_there() -> None:
    assert "h200/kmsg_raw.txt" in CAPTURES and "h200/dmesg.txt" in CAPTURES
    assert "h200_validate/since.jsonl" in CAPTURES and "kernlog/era_418_nopid_syslog.log" in CAPTURES


@pytest.mark.parametrize("name", sorted(CAPTURES))
def test_fast_and_general_paths_agree_on_every_capture_line(name: str) -> None:
    for line in CAPTURES[name]:
        _same(line)


def test_fast_path_is_taken_on_the_real_h200_shapes() -> None:
    """Not a timing check: which lines the fast pattern takes, so a regex edit cannot silently drop it."""
    for name in ("h200/dmesg.txt", "h200/kmsg_raw.txt", "h200_validate/since.jsonl", "h200/dmesg_T.txt",
                 "h200/dmesg_iso.txt", "h200/dmesg_decode.txt", "h200/dmesg_r.txt"):
        lines = CAPTURES[name]
        assert all(P._FAST_RE.match(ln) for ln in lines), name
        mmu = [ln for ln in lines if "): 31, " in ln]
        assert mmu and all(P._FAST_RE.match(ln).group("mmu") for ln in mmu), name
    # every era and container of the fixtures but talosctl's goes the fast way too
    for name, lines in CAPTURES.items():
        if name.startswith("kernlog/"):
            assert all(P._FAST_RE.match(ln) for ln in lines) == (name != "kernlog/names_talos.log"), name
    fast = ["", "[   35.371957] ", "4,362,35371957,c;", "<4>[   35.371957] ", "<4>", "[Wed Dec 12 14:42:29 2026] ",
            "2026-12-02T14:42:29,250180+00:00 ", "2026-12-02 14:42:29 ", "kern  :warn  : [   33.034470] ",
            "kern  :warn  : ", "Dec  2 11:38:47 worker4 kernel: [  219.470994] ", "kwi 15 07:56:59 testowy kernel: ",
            "Dec 02 11:38:47.123456 host kernel: [ 5.0] "]
    for cont in fast:
        for dev in ("PCI:0000:00:06", "0000:01:00", "PCI:0000:00:06 GPU-I:05 GPU-CI:01", "PCI:0000:00:06 GPU-I:05"):
            assert P._FAST_RE.match(f"{cont}NVRM: Xid ({dev}): 79, x"), (cont, dev)


def test_scan_bytes_and_scan_text_agree_with_the_general_path_on_whole_files() -> None:
    for p in sorted((DATA / "kernlog").glob("*.log")) + [DATA / "h200" / "dmesg.txt", DATA / "h200" / "kmsg_raw.txt"]:
        raw = p.read_bytes()
        general = [e for e in map(P._parse_line_general, raw.decode("utf-8", "replace").splitlines()) if e]
        assert list(P.scan_bytes(raw).events) == general, p.name
        assert list(P.scan_text(raw.decode("utf-8", "replace")).events) == general, p.name


# --- lines built on the edges of the fast pattern ------------------------------------------------

#: containers on and just off the edges of the fast pattern's alternatives (each must read as the
#: general peeling reads it, whichever way it goes)
CONTAINERS = [
    "", "[   35.371957] ", "[35.5] ", "[  1.0]  ", "4,362,35371957,c;", "4,362,35371957,-;", "6,1,2,c,more=1;",
    "4,1,2,-;[ 1.0] ", "<4>[   35.371957] ", "<4>", "<12345>[ 1.0] ", "<4>[ 1.0]  ", "[Wed Dec  2 14:42:29 2026] ",
    "[Wed Dec 12 14:42:29 2026] ", "[Wed Dec  2 14:42:29 2026]  ", "[Wed Dec  2 14:42:29 2026]: ",
    "[mer. d\u00e9c.  2 14:42:29 2026] ", "2026-12-02T14:42:29,250180+00:00 ", "2026-12-02 14:42:29 ",
    "2026-12-02T14:42:29.123Z ", "2026-12-02T14:42:29+0100 ", "2026-12-02T14:42:29,1234567890 ",
    "kern  :warn  : [   33.034470] ", "kern  :warn  : ", "kern:warning: [ 1.0] ", "daemon:err   : [ 1.0] ",
    "Dec  2 11:38:47 worker4 kernel: [  219.470994] ", "Dec  2 11:38:47 worker4 kernel: ",
    "kwi 15 07:56:59 testowy kernel: ", "Dec 02 11:38:47.123456 host kernel: [ 5.0] ",
    "Dec  2 11:38:47 host kernel:  [ 5.0] ", "Dec  2 11:38:47 host[1] kernel: ", "Dec   2 11:38:47 host kernel: ",
    "Dec  2 11:38:47 host kernel: [Wed Dec  2 14:42:29 2026] ", "Dec  2 11:38:47 host kernel: <4>",
    "192.168.11.119: kern: warning: [2026-04-22T21:30:51.870495804Z]: ", "[ 1.0] host kernel: ",
    "[ 1.5]", "x[ 1.5] ", "[\u0661.\u0662] ", "[1e5] ",
]
DEVS = ["PCI:0000:00:06", "PCI:00000000:3b:00", "PCI:0000:3B:00", "0000:01:00", "PCI:0000:00:06.0",
        "PCI:0000:00:06 GPU-I:05 GPU-CI:01", "PCI:0000:00:06 GPU-I:05", "0000:01:00 GPU-I:1 GPU-CI:2",
        "PCI:0000:00:06 GPU-I:123456 GPU-CI:01", "PCI:0000:00:06 GPU-CI:01", "PCI:0000:00:06  GPU-I:05",
        "123456789:01:00", "PCI:0000:0:06", "PCI:", ""]
_containers = st.sampled_from(CONTAINERS)
_devs = st.sampled_from(DEVS)
_pids = st.sampled_from(["", "pid=508, ", "pid='<unknown>', ", "pid=<unknown>, ", "pid='508', ", "pid=12345678901, ",
                         "pid=508,", "pid=abc, ", "pid=\u0665\u0660, "])
_names = st.sampled_from(["", "name=python3, ", "name=<unknown>, ", "name='<unknown>', ", "name=, ", "name= a b , ",
                          "name=VLLM::EngineCor, ", "name=nvc:[driver], ", "name=a,b, ", "name=x,  ", "pid=1, ",
                          "name=y, name=z, "])
_tok = st.sampled_from(["GRAPHICS", "GPC0", "GPC12", "GPC12345", "GPC", "GPCCLIENT_T1_8", "UNRECOGNIZED_CLIENT",
                        "HUB", "ce0", "FAULT_PDE", "ACCESS_TYPE_VIRT_WRITE", "UNRECOGNIZED_FAULT", "_", "Graphics"])
_addr = st.sampled_from(["0x7f69_f2000000", "0x0_00000000", "0x182400_0030198d", "0x7f69_f200000",
                         "0x1ffffffffffffffff_00000000", "0x7f69_f2000123", "0x2000000_00000000", "0x7f69f2000000"])


@st.composite
def _mmu_message(draw: st.DrawFn) -> str:
    ch = draw(st.sampled_from(["channel 0x0000000a", "Ch 00000008", "channel 0x000a", "ChID 0052"]))
    names = " ".join(draw(st.lists(_tok, min_size=0, max_size=4)))
    tail = " ".join(draw(st.lists(_tok, min_size=0, max_size=3)))
    dot = draw(st.sampled_from([". ", ".", " ", "", ".  "]))
    end = draw(st.sampled_from(["", " ", "\t", "\r", " x", "\n", "\u00a0", " caused by previous Xid 31"]))
    return f"{ch}, intr 00000000. MMU Fault: ENGINE {names} faulted @ {draw(_addr)}{dot}Fault is of type {tail}{end}"


_messages = st.one_of(
    _mmu_message(),
    st.sampled_from(["Graphics SM Warp Exception on (GPC 0, TPC 4, SM 0): Misaligned Address",
                     "Graphics Exception: ESR 0x509730=0x500000f 0x509734=0x0",
                     "Graphics Exception: ESR 0x1=0x2  0x3=0x4", "Graphics Exception: ESR 0x1=0x2 Ch 00000001",
                     "Graphics Exception: ESR 0x1=0x2x", "Graphics Exception: ESR 0x1=0x2 caused by previous Xid 31",
                     "Graphics Exception: ESR 0x12345678901234567=0x1", "Graphics Exception: ESR ",
                     "Graphics Exception: channel 0x0000000a, Class 0000cbc0, Offset 00000510, Data 0017e2ac",
                     "Ch 00000001 caused by previous Xid 31", "GPU has fallen off the bus.", "", " ", " lead",
                     "channel 0x0000000a"]),
    st.text(max_size=30),
)


@settings(max_examples=600, deadline=None)
@given(cont=_containers, dev=_devs, xid=st.sampled_from(["31", "13", "43", "79", "1234567", "\u0663\u0661"]),
       sep=st.sampled_from([", ", ",", " ", ",  ", ""]), pid=_pids, name=_names, msg=_messages,
       end=st.sampled_from(["", "\r", "\r\n", " ", "\n[ 2.0] more"]))
def test_fast_and_general_paths_agree_on_generated_lines(cont: str, dev: str, xid: str, sep: str, pid: str, name: str,
                                                         msg: str, end: str) -> None:
    line = f"{cont}NVRM: Xid ({dev}): {xid}{sep}{pid}{name}{msg}{end}"
    _same(line)
    P._decode_message.cache_clear()
    P._parse_body.cache_clear()
    _same(line)  # and again with cold caches: a cached body must not differ from a fresh one
    assert P.scan_bytes(line.encode("utf-8", "surrogatepass")).events == P.scan_text(line).events


_BODIES = ["31, pid=5, name=p, channel 0x0000000a, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC1 GPCCLIENT_T1_6 "
           "faulted @ 0x7f7d_dbe00000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE",
           "13, Graphics SM Warp Exception on (GPC 1, TPC 4, SM 0): Misaligned Address", "43, pid=7, channel 0x1",
           "79, x"]


@pytest.mark.parametrize("cont", CONTAINERS)
@pytest.mark.parametrize("dev", DEVS)
def test_every_container_and_device_edge_reads_as_the_general_grammar(cont: str, dev: str) -> None:
    for body in _BODIES:
        _same(f"{cont}NVRM: Xid ({dev}): {body}")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_fast_and_general_paths_agree_on_any_text_after_the_marker(tail: str) -> None:
    _same("[ 1.0] NVRM: Xid (PCI:0000:00:06): 31, " + tail)
    _same("NVRM: Xid " + tail)


_M31 = "[ 5.0] NVRM: Xid (PCI:0000:00:06): 31, pid=5, name=p, channel 0x0000000a, intr 00000000. MMU Fault: ENGINE "


@pytest.mark.parametrize(("tail", "fast_mmu"), [
    ("GRAPHICS GPC0 GPCCLIENT_T1_8 faulted @ 0x7f69_f2000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE", True),
    ("GRAPHICS GPC0 GPCCLIENT_T1_8 faulted @ 0x7f69_f2000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE \r", True),
    ("GRAPHICS GPCCLIENT_T1_8 faulted @ 0x7f69_f2000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ", True),
    ("GRAPHICS GPC5 faulted @ 0x7f69_f2000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ", False),  # GPC, no client
    ("GRAPHICS GPC12345 X faulted @ 0x7f69_f2000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ", False),
    ("GRAPHICS GPC12345 faulted @ 0x7f69_f2000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ", True),
    ("GRAPHICS GPC0 UNRECOGNIZED_CLIENT faulted @ 0x182400_0030198d. Fault is of type UNRECOGNIZED_FAULT "
     "UNRECOGNIZED_ACCESS_TYPE", True),
    ("GRAPHICS GPC0 GPCCLIENT_T1_8 faulted @ 0x7f69_f200000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE", True),
    ("GRAPHICS GPC0 GPCCLIENT_T1_8 faulted @ 0x7f69_f2000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE x", False),
    ("GRAPHICS GPC0 GPCCLIENT_T1_8 faulted @ 0x7f69_f2000000. Fault is of type FAULT_PDE\nACCESS_TYPE_VIRT_WRITE", False),
    ("GRAPHICS GPC0 GPCCLIENT_T1_8 faulted @ 0x7f69_f2000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE\n[ 6.0] x",
     False),
    ("GRAPHICS GPC0 GPCCLIENT_T1_8 faulted @ 0x7f69_f2000000. Fault is of type fault_pde ACCESS_TYPE_VIRT_WRITE", False),
])
def test_mmu_edges(tail: str, fast_mmu: bool) -> None:
    line = _M31 + tail
    m = P._FAST_RE.match(line)
    assert m is not None and (m.group("mmu") is not None) == fast_mmu
    ev = _same(line)
    assert ev is not None and ev.xid == 31 and ev.pid == 5
    if fast_mmu:
        assert ev.mmu is not None and ev.mmu.address_text is not None and ev.channel == 10
