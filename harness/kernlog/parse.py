"""Pure parsers for NVIDIA Xid reports in kernel-log text, in every driver era and line container.

A report is one kernel-log line carrying ``NVRM: Xid (<dev>): <n>, [pid=<p>, [name=<comm>, ]]<message>``
(grammar by driver era: docs/kernlog.md "Parsing").
Whatever comes before ``NVRM:`` is the *container* a tool wrapped the line in, and is stripped and
read for its timestamp / sequence number / wall time:

    [   33.034470] NVRM: Xid ...                                   dmesg (uptime)
    [Wed Dec  2 14:42:29 2026] NVRM: Xid ...                       dmesg -T
    2026-12-02T14:42:29,250180+00:00 NVRM: Xid ...                 dmesg --time-format iso
    kern  :warn  : [   33.034470] NVRM: Xid ...                    dmesg --decode
    <4>[   33.034470] NVRM: Xid ...                                dmesg -r, console
    4,361,33034470,c;NVRM: Xid ...                                 /dev/kmsg record
    Dec  2 11:38:47 worker4 kernel: [  219.470994] NVRM: Xid ...   syslog (any month name)
    192.168.11.119: kern: warning: [2026-04-22T21:30:51.870495804Z]: NVRM: Xid ...   talosctl dmesg

Nothing here opens a file or raises on bad text: :func:`parse_line` returns ``None`` for a line
that is not an Xid report, and :func:`scan_text` also returns the lines that mention ``NVRM: Xid``
but could not be read (truncated before the Xid number), so a caller can say so instead of
silently dropping them.
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from faulthunt.kernlog.catalog import classify
from faulthunt.records.xid import GrException, MmuFault, XidEvent

if TYPE_CHECKING:
    import mmap


class _Lazy:
    """A regular expression compiled when first used.

    The general grammar's expressions (containers, body, device, pid, MMU address) serve the
    lines the one-match fast path does not take: on most logs none, so a process that never
    meets such a line does not pay their compiling (about 1 ms of a 150 ms ``xid parse``).
    """

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self.pattern = pattern
        self.flags = flags

    def __getattr__(self, name: str) -> Any:
        # only reached while the attribute is missing: compile, keep the compiled pattern's methods
        compiled = re.compile(self.pattern, self.flags)
        for method in ("match", "search", "fullmatch", "findall", "finditer", "sub"):
            setattr(self, method, getattr(compiled, method))
        return getattr(compiled, name)


MARKER = "NVRM: Xid"
MARKER_B = MARKER.encode()

#: Widest GPU virtual address of any NVIDIA MMU (Hopper and later: 57 bits). A decoded Xid 31
#: address at or above this cannot be a user VA.
GPU_VA_BITS = 57
_VA_LIMIT = 1 << GPU_VA_BITS

# --- the Xid report itself ------------------------------------------------------------------------
# Real line (H200, driver 580.159.04):
#   NVRM: Xid (PCI:0000:00:06): 31, pid=617, name=faults, channel 0x0000000a, intr 00000000. MMU Fault: ...
# Very old drivers print the device without "PCI:" (`NVRM: Xid (0000:01:00): 3, C 00000005 ...`);
# MIG adds ` GPU-I:05 GPU-CI:01` after the PCI address. The device text is read leniently
# (anything up to ")") and picked apart by _parse_dev, so a format we have not seen still yields
# the Xid number. Numbers are bounded in width so int() never sees a runaway digit string.
_HEAD_RE = _Lazy(r"NVRM: Xid \((?P<dev>[^()\n]{0,80})\):? ?(?P<xid>\d{1,6})(?!\d)")
_DEV_PCI_RE = _Lazy(r"(?:PCI:)?([0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)")
_DEV_GI_RE = _Lazy(r"GPU-I:\s*(\d{1,5})")
_DEV_CI_RE = _Lazy(r"GPU-CI:\s*(\d{1,5})")
_PID_RE = _Lazy(r"pid=(?:'<unknown>'|<unknown>|'?(?P<pid>\d{1,10})'?)")
_CAUSED_RE = re.compile(r"caused by previous Xid (\d{1,6})")
# `Ch 00000008` (<= 575), `channel 0x0000000a` (580+), `ChID 0052` / `ChId 003b` (Xid 13/69),
# `Channel ID 00000052` (Xid 32)
_CHANNEL_RE = re.compile(r"\b(?:Ch |channel 0x|ChI[Dd] |Channel ID )([0-9A-Fa-f]{1,8})\b")

# --- Xid 31: MMU fault ------------------------------------------------------------------------------
#   MMU Fault: ENGINE GRAPHICS GPC1 GPCCLIENT_T1_6 faulted @ 0x7f7d_dbe00000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE
#   MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_14 faulted @ 0x7f2f_cca58000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ
#   MMU Fault: ENGINE GRAPHICS GPC0 UNRECOGNIZED_CLIENT faulted @ 0x182400_0030198d. Fault is of type UNRECOGNIZED_FAULT UNRECOGNIZED_ACCESS_TYPE
# --- Xid 13: SM / graphics exceptions ---------------------------------------------------------------
#   Graphics SM Warp Exception on (GPC 1, TPC 4, SM 0): Misaligned Address
#   Graphics SM Global Exception on (GPC 0, TPC 1): Physical Multiple Warp Errors     (Maxwell/Pascal)
#   Graphics Exception: ESR 0x519730=0x500000f 0x519734=0x0 0x519728=0x1f81fb60 0x51972c=0x1174
#   Graphics Exception: channel 0x0000000a, Class 0000cbc0, Offset 00000510, Data 0017e2ac
_GR_ON_RE = re.compile(
    r"Graphics (?P<unit>SM Warp|SM Global|[A-Za-z]{1,16}) Exception on "
    r"\(GPC (?P<gpc>\d{1,4}), TPC (?P<tpc>\d{1,4})(?:, SM (?P<sm>\d{1,4}))?\):? ?(?P<err>.*)$"
)
_ESR_RE = re.compile(r"Graphics Exception: ESR (?P<pairs>(?:0x[0-9A-Fa-f]{1,16}=0x[0-9A-Fa-f]{1,16} ?)+)")
_ESR_PAIR_RE = re.compile(r"0x([0-9A-Fa-f]{1,16})=0x([0-9A-Fa-f]{1,16})")

# --- containers (everything before "NVRM:") -------------------------------------------------------
_LEVELS = {"emerg": 0, "alert": 1, "crit": 2, "err": 3, "warn": 4, "warning": 4, "notice": 5, "info": 6,
           "debug": 7}
_CONSOLE_RE = _Lazy(r"<(\d{1,4})>")
# /dev/kmsg: PRI,SEQ,TS_USEC,FLAGS[,more fields];MSG
_KMSG_RE = _Lazy(r"(\d{1,5}),(\d{1,20}),(\d{1,20}),[^;,]{0,4}(?:,[^;]{0,200})?;")
_UPTIME_RE = _Lazy(r"\[\s{0,20}(\d{1,12}\.\d{1,9})\]:? ?")
# dmesg -T / --ctime: [Wed Dec  2 14:42:29 2026] (day and month names may be localized)
_CTIME_RE = _Lazy(r"\[([^\[\]\n]{0,40}\d{1,2}:\d\d:\d\d[^\[\]\n]{0,20})\]:? ?")
# dmesg --decode: "kern  :warn  : "
_DECODE_RE = _Lazy(r"([a-z][a-z0-9]{1,9}) *: *(emerg|alert|crit|err|warn|notice|info|debug) *: ")
_ISO_TIME = r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?"
_ISO_RE = _Lazy(f"({_ISO_TIME}) ")
# syslog / journalctl: "Nov 29 11:28:11 zeus kernel: ", "kwi 15 07:56:59 testowy kernel: ",
# "Dec  2 11:38:47 worker4 kernel: " (two spaces); journalctl -o short-precise adds microseconds.
_SYSLOG_RE = _Lazy(r"(\S{1,12}) {1,2}(\d{1,2}) (\d\d:\d\d:\d\d(?:\.\d{1,9})?) (\S{1,255}) kernel: ")
_HOST_KERNEL_RE = _Lazy(r"(\S{1,255}) kernel: ")
# talosctl dmesg: "192.168.11.119: kern: warning: [2026-04-22T21:30:51.870495804Z]: "
_TALOS_RE = _Lazy(r"(\S{1,255}): ([a-z][a-z0-9]{1,9}): ([a-z]{1,8}): \[([^\]\n]{1,40})\]: ")


class Container(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """What the wrapping of one line said: kernel time, kmsg sequence number, wall time, log level, host."""

    ts: float | None = None
    seq: int | None = None
    wall: str | None = None
    level: int | None = None
    host: str | None = None
    #: the container kinds recognised, outermost first (e.g. ``("syslog", "uptime")``)
    kinds: tuple[str, ...] = ()


def parse_container(prefix: str) -> Container:
    """Read the container text in front of ``NVRM:``; unrecognised leftovers are ignored, never an error."""
    # Fast path for the commonest container, plain dmesg "[  365.969681] ": no regex, no loop.
    if prefix[:1] == "[" and prefix[-2:] == "] " and prefix.count("[") == 1:
        try:
            return Container(ts=float(prefix[1:-2]), kinds=("uptime",))
        except ValueError:
            pass
    ts = seq = level = None
    wall = host = None
    kinds: list[str] = []
    pos = 0
    n = len(prefix)
    # Each container can wrap another (syslog around uptime, talos around iso): peel them off
    # outermost first; at most a handful of layers exist, the bound only guards against loops.
    for _ in range(8):
        while pos < n and prefix[pos] in " \t":
            pos += 1
        if pos >= n:
            break
        c = prefix[pos]
        m = None
        if c == "[":
            m = _UPTIME_RE.match(prefix, pos)
            if m:
                ts = float(m.group(1))
                kinds.append("uptime")
            else:
                m = _CTIME_RE.match(prefix, pos)
                if m:
                    wall = m.group(1).strip()
                    kinds.append("ctime")
        elif c == "<":
            m = _CONSOLE_RE.match(prefix, pos)
            if m:
                level = int(m.group(1)) & 7
                kinds.append("console")
        elif c.isdigit():
            m = _KMSG_RE.match(prefix, pos)
            if m:
                level = int(m.group(1)) & 7
                seq = int(m.group(2))
                ts = int(m.group(3)) / 1e6
                kinds.append("kmsg")
            else:
                m = _ISO_RE.match(prefix, pos)
                if m:
                    wall = m.group(1)
                    kinds.append("iso")
                    hm = _HOST_KERNEL_RE.match(prefix, m.end())
                    if hm:
                        host = hm.group(1)
                        m = hm
                        kinds.append("syslog")
        if m is None:
            m = _DECODE_RE.match(prefix, pos)
            if m:
                level = _LEVELS.get(m.group(2), level)
                kinds.append("decode")
        if m is None:
            m = _SYSLOG_RE.match(prefix, pos)
            if m:
                wall = f"{m.group(1)} {m.group(2)} {m.group(3)}"
                host = m.group(4)
                kinds.append("syslog")
        if m is None:
            m = _TALOS_RE.match(prefix, pos)
            if m:
                host = m.group(1)
                level = _LEVELS.get(m.group(3), level)
                wall = m.group(4)
                kinds.append("talos")
        if m is None:
            m = _HOST_KERNEL_RE.match(prefix, pos)  # journalctl -o short-monotonic: "[ts] host kernel: "
            if m:
                host = m.group(1)
                kinds.append("syslog")
        if m is None or m.end() <= pos:
            break
        pos = m.end()
    return Container(ts=ts, seq=seq, wall=wall, level=level, host=host, kinds=tuple(kinds))


def decode_mmu(message: str) -> MmuFault | None:
    """Decode the ``MMU Fault: ...`` text of an Xid 31 message; None when the message has none.

    ``address = (hi << 32) | lo``. Not decodable (``address`` None, ``decodable`` False, ``reason``
    set): an ``UNRECOGNIZED_*`` engine/client/fault/access name, a high half wider than 32 bits, a
    low half that is not 8 hex digits (a truncated line), an address beyond the 57-bit GPU VA, or
    one that is not 4 KiB aligned (the fault buffer stores bits 63:12, so a real page base is).
    """
    i = message.find("MMU Fault: ENGINE ")
    if i < 0:
        return None
    # Token walk rather than one big regex: this runs for every Xid 31 of a log and the regex's
    # backtracking over \S+ tokens was most of the parse time (scripts/benchrows/kernlog.py).
    toks = message[i + 18:].split(" ", 12)
    try:
        at = toks.index("faulted")
    except ValueError:
        return None
    names = toks[:at]
    if not names or len(names) > 3 or at + 2 >= len(toks) or toks[at + 1] != "@":
        return None
    engine = names[0]
    gpc: int | None = None
    client: str | None = None
    rest_names = names[1:]
    if rest_names and rest_names[0].startswith("GPC") and rest_names[0][3:].isdigit() and len(rest_names[0]) <= 7:
        gpc = int(rest_names[0][3:])
        rest_names = rest_names[1:]
    if len(rest_names) > 1:
        return None
    if rest_names:
        client = rest_names[0]
    m = _ADDR_RE.match(toks[at + 2])
    if m is None:
        return None
    hi_s, lo_s = m.group(1), m.group(2)
    ftype = atype = None
    tail = toks[at + 3:]
    # "Fault is of type <FAULT_TYPE> <ACCESS_TYPE>"
    if len(tail) >= 5 and tail[:4] == ["Fault", "is", "of", "type"]:
        ftype = tail[4] if _is_name(tail[4]) else None
        if len(tail) >= 6 and _is_name(tail[5]):
            atype = tail[5]
    return _mmu(engine, gpc, client, hi_s, lo_s, ftype, atype)


def _mmu(engine: str, gpc: int | None, client: str | None, hi_s: str, lo_s: str, ftype: str | None,
         atype: str | None) -> MmuFault:
    """The MmuFault for the tokens of one ``MMU Fault:`` text (shared by :func:`decode_mmu` and the fast path)."""
    hi, lo = int(hi_s, 16), int(lo_s, 16)
    address = (hi << 32) | lo
    reason = _unrecognized(engine, client, ftype, atype)
    if reason is None:
        if len(lo_s) != 8:
            reason = f"low half 0x{lo_s} is not 8 hex digits (truncated line?)"
        elif hi >= 1 << 32:
            reason = f"high half 0x{hi_s} is wider than 32 bits"
        elif address >= 1 << GPU_VA_BITS:
            reason = f"address 0x{address:x} is beyond the {GPU_VA_BITS}-bit GPU virtual address space"
        elif address % 4096:
            reason = f"address 0x{address:x} is not 4 KiB aligned"
        elif client is None:
            reason = "no client named"
    # by position, in MmuFault's declared order (MMU_FIELDS; tested like EVENT_FIELDS)
    return MmuFault(None if reason else address, engine, gpc, client, ftype, atype, reason is None, f"0x{hi_s}_{lo_s}",
                    reason)


@functools.lru_cache(maxsize=256)
def _unrecognized(*names: str | None) -> str | None:
    """Why a fault naming an ``UNRECOGNIZED_*`` engine, client or type is not decodable (None: it names none).

    Cached: a GPU that prints garbage prints the same garbage fault after fault.
    """
    unrecognized = [x for x in names if x and x.startswith("UNRECOGNIZED")]
    return "unrecognized " + ", ".join(unrecognized) if unrecognized else None


MMU_FIELDS = ("address", "engine", "gpc", "client", "fault_type", "access_type", "decodable", "address_text", "reason")


_ADDR_RE = _Lazy(r"0x([0-9A-Fa-f]{1,16})_([0-9A-Fa-f]{1,16})(?![0-9A-Za-z_])")


def _is_name(tok: str) -> bool:
    """An upper-case driver name such as ``FAULT_PDE`` / ``ACCESS_TYPE_VIRT_WRITE``."""
    return 0 < len(tok) <= 64 and tok.replace("_", "A").isalnum() and tok.isascii() and tok == tok.upper()


def decode_gr(message: str) -> GrException | None:
    """Decode the SM/graphics exception of an Xid 13 message; None when it is not one."""
    m = _GR_ON_RE.search(message)
    if m is not None:
        unit = m.group("unit")
        kind = {"SM Warp": "warp", "SM Global": "global"}.get(unit, unit.lower())
        return GrException(
            kind=kind,
            gpc=int(m.group("gpc")),
            tpc=int(m.group("tpc")),
            sm=int(m.group("sm")) if m.group("sm") is not None else None,
            error=m.group("err").strip() or None,
        )
    m = _ESR_RE.search(message)
    if m is not None:
        pairs = tuple((int(r, 16), int(v, 16)) for r, v in _ESR_PAIR_RE.findall(m.group("pairs")))
        return GrException(kind="esr", esr=pairs)
    i = message.find("Graphics Exception: ")
    if i >= 0:
        return GrException(kind="other", error=message[i + len("Graphics Exception: "):].strip() or None)
    return None


def _parse_dev(dev: str) -> tuple[str | None, int | None, int | None]:
    if dev.startswith("PCI:") and len(dev) == 14 and dev[8] == ":" and dev[11] == ":":
        return dev[4:], None, None  # "PCI:0000:00:06": the common case, no MIG
    m = _DEV_PCI_RE.search(dev)
    pci = m.group(1) if m else (dev.strip() or None)
    gi = _DEV_GI_RE.search(dev)
    ci = _DEV_CI_RE.search(dev)
    return pci, int(gi.group(1)) if gi else None, int(ci.group(1)) if ci else None


#: The container-independent part of an Xid line, cached (real logs repeat bodies verbatim):
#: (xid, pci, gpu_instance, compute_instance, pid, process, message, category, mmu, caused_by, channel, gr),
#: what :func:`_event` takes. A plain tuple: it is built once per Xid line.
_Body = tuple[Any, ...]


@functools.lru_cache(maxsize=4096)
def _parse_body(report: str, general: bool = False) -> _Body | None:
    """Parse ``NVRM: Xid (...): N[, ...]`` (the text from the marker to the end of the line)."""
    m = _HEAD_RE.match(report)
    if m is None:
        return None
    xid = int(m.group("xid"))
    pci, gi, ci = _parse_dev(m.group("dev"))
    rest = report[m.end():]
    if rest.startswith(","):
        rest = rest[1:]
    body = rest.strip()
    pid: int | None = None
    process: str | None = None
    # 440+: "pid=<n>, " (515-560 print pid='<unknown>'); 515+: "name=<comm>, ". The comm can hold
    # spaces, ':' and '[]' (`VLLM::EngineCor`, `nvc:[driver]`) but the driver always follows it
    # with ", ", so the name is everything up to the next ", ".
    if body.startswith("pid="):
        pm = _PID_RE.match(body)
        if pm is not None:
            if pm.group("pid") is not None:
                pid = int(pm.group("pid"))
            body = body[pm.end():]
        else:
            cut = body.find(", ")
            body = "" if cut < 0 else body[cut:]
        body = body[2:] if body.startswith(", ") else body.lstrip(",").lstrip()
    if body.startswith("name="):
        cut = body.find(", ")
        name = body[5:] if cut < 0 else body[5:cut]
        body = "" if cut < 0 else body[cut + 2:]
        name = name.strip()
        process = None if name in ("", "<unknown>", "'<unknown>'") else name
    message = body
    mmu, gr, caused_by, channel = _decode_message_general(message) if general else _decode_message(message)
    if process is not None:
        process = _intern(process)
    if pci is not None:
        pci = _intern(pci)
    return (xid, pci, gi, ci, pid, process, message, classify(xid).category, mmu, caused_by, channel, gr)


# Fast path for the commonest Xid 31 message, the whole of it in one match:
#   channel 0x0000000a, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC0 GPCCLIENT_T1_8 faulted @ 0x7f69_f2000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE
#   Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_6 faulted @ 0x7f7d_dbe00000. Fault is of type ...
# It only accepts text on which decode_mmu/decode_gr/_CHANNEL_RE/_CAUSED_RE give exactly what it
# gives (upper-case tokens cannot spell "Graphics" or "caused by"; a client that is itself
# GPC<n> is refused, decode_mmu reads that as a GPC with no client); anything else takes the
# general path. tests/test_kernlog_fastpath.py checks the two agree.
_MMU_FAST_RE = _Lazy(
    r"(?:channel 0x|Ch )(?P<ch>[0-9A-Fa-f]{8}), intr [0-9A-Fa-f]{8}\. MMU Fault: ENGINE (?P<engine>[A-Z0-9_]{1,64}) "
    r"(?:GPC(?P<gpc>[0-9]{1,4}) )?(?!GPC[0-9]{1,4} )(?P<client>[A-Z0-9_]{1,64}) "
    r"faulted @ (?P<addr>0x(?P<hi>[0-9A-Fa-f]{1,16})_(?P<lo>[0-9A-Fa-f]{1,16}))\. "
    r"Fault is of type (?P<ft>[A-Z0-9_]{1,64}) (?P<at>[A-Z0-9_]{1,64})"
)
_mmu_fast = _MMU_FAST_RE.fullmatch


# An ESR line's message is its register pairs and nothing else (the general decoders read exactly
# these from it: no MMU, warp or channel text can be in it); its values differ on every line.
_ESR_ONLY_RE = re.compile(_ESR_RE.pattern)
_esr_only = _ESR_ONLY_RE.fullmatch


@functools.lru_cache(maxsize=4096)
def _decode_message(message: str) -> tuple[MmuFault | None, GrException | None, int | None, int | None]:
    """The decodable parts of a message (cached apart from the pid/name: those vary, messages repeat)."""
    m = _mmu_fast(message)
    if m is not None:
        ch, engine, gpc, client, _, hi, lo, ft, at = m.groups()
        return _mmu(engine, None if gpc is None else int(gpc), client, hi, lo, ft, at), None, None, int(ch, 16)
    m = _esr_only(message)
    if m is not None:
        pairs = tuple((int(r, 16), int(v, 16)) for r, v in _ESR_PAIR_RE.findall(m.group("pairs")))
        return None, GrException("esr", None, None, None, None, pairs), None, None
    return _decode_message_general(message)


def _decode_message_general(message: str) -> tuple[MmuFault | None, GrException | None, int | None, int | None]:
    """:func:`_decode_message` without the fast path (the reference the fast path is tested against)."""
    mmu = decode_mmu(message) if "faulted @" in message else None
    gr = decode_gr(message) if "Graphics" in message else None
    cm = _CAUSED_RE.search(message) if "caused by" in message else None
    chm = _CHANNEL_RE.search(message) if "h" in message else None
    return mmu, gr, int(cm.group(1)) if cm else None, int(chm.group(1), 16) if chm else None


# --- fast path for the common line shapes ------------------------------------------------------------
# One compiled match for a whole line in the common containers and driver eras:
#   [   35.371957] NVRM: Xid (PCI:0000:00:06): 31, pid=508, name=python3, channel 0x0000000a, ...    dmesg
#   4,362,35371957,c;NVRM: Xid (PCI:0000:00:06): 13, pid='<unknown>', name=<unknown>, Graphics ...    /dev/kmsg
#   [Wed Dec  2 14:42:29 2026] NVRM: Xid (PCI:0000:3b:00 GPU-I:05 GPU-CI:01): 31, ...                 dmesg -T, MIG
#   Dec  2 11:38:47 worker4 kernel: [  219.470994] NVRM: Xid (0000:01:00): 13, 0003 00000000 ...       syslog, <= 418
#   2026-12-02T14:42:29,250180+00:00 NVRM: Xid ...  <4>[ 33.0] NVRM: Xid ...  kern  :warn  : [ 33.0] NVRM: Xid ...
# It is a strict sub-case of the general path (_parse_general): whatever it matches, the general path
# reads to the same event (tests/test_kernlog_fastpath.py checks this on every fixture, the H200
# captures and hypothesis-generated lines); whatever it does not match (talos, journalctl
# short-monotonic, localized or odd dates, a PCI function, pid without "pid=" digits, a name holding
# ", ", odd spacing) goes the general way. Each container alternative is the general grammar's own
# pattern for that layer (or a narrower one) followed by exactly what the general peeling would read
# next, and no two alternatives can match the same text. The (?!pid=|name=) guard stops the regex
# from skipping a pid/name it cannot read and calling it the message. DOTALL: the general path
# keeps a line's inner "\n" in the message, so must this.
_FAST_RE = _Lazy(
    r"(?:(?P<pri>\d{1,5}),(?P<seq>\d{1,20}),(?P<us>\d{1,20}),[^;,]{0,4};|"           # /dev/kmsg record
    r"\[(?P<wall>[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})\] |"   # dmesg -T
    r"(?P<iso>" + _ISO_TIME + ") |"                                                 # dmesg --time-format iso
    # an outer layer or none: syslog / journalctl (optionally short-precise), console / dmesg -r,
    # dmesg --decode; then dmesg's uptime or none
    r"(?:(?P<mon>[A-Za-z]{3}) {1,2}(?P<day>\d{1,2}) (?P<hms>\d\d:\d\d:\d\d(?:\.\d{1,9})?) [^\s\[\]]{1,64} kernel: |"
    r"<(?P<con>\d{1,4})>|"
    r"[a-z][a-z0-9]{1,9} *: *(?P<dlvl>emerg|alert|crit|err|warn|notice|info|debug) *: )?"
    r"(?:\[ {0,20}(?P<ts>\d{1,12}\.\d{1,9})\] )?)"
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})"
    r"(?: GPU-I:(?P<gi>\d{1,5})(?: GPU-CI:(?P<ci>\d{1,5}))?)?\): (?P<xid>\d{1,6}), "
    r"(?:pid=(?:'<unknown>'|(?P<pid>\d{1,10})), )?(?:name=(?P<name>[^,]*), )?(?!pid=|name=)"
    # the message: the Xid 31 MMU shape of _MMU_FAST_RE read in the same match when it is all
    # there is (up to trailing whitespace, which the general path strips), else any text
    r"(?:(?P<mmu>" + _MMU_FAST_RE.pattern.replace("?P<", "?P<m_") + r")(?=\s*\Z)|(?P<msg>\S.*))",
    re.DOTALL,
)
# (compiled when first used: where the compiled reader of kernlog/_scan.c takes every line of a log,
# as on raw dmesg and /dev/kmsg, the process never needs it)
_UNKNOWN_NAMES = frozenset(("", "<unknown>", "'<unknown>'"))
#: Xid number -> catalog category, filled as numbers are met (a dict lookup is cheaper than a call
#: of the cached classify() on every line)
_CATEGORY: dict[int, str] = {}
#: Process names and PCI addresses repeat on every line of a GPU's log: keep one copy of each.
_intern = sys.intern


def _category(xid: int) -> str:
    category = _CATEGORY.get(xid)
    if category is None:
        category = _CATEGORY.setdefault(xid, classify(xid).category)
    return category


# --- how an XidEvent is made -------------------------------------------------------------------------

#: XidEvent's fields in their declared order: the parser passes them by position, which costs a
#: fifth of passing them by name on every line (tests/test_kernlog_parse.py fails if the record's
#: order changes without this).
EVENT_FIELDS = ("xid", "pci", "gpu_instance", "compute_instance", "pid", "process", "message", "category", "mmu",
                "caused_by", "channel", "gr", "seq", "ts", "wall", "level", "raw")


def _event(body: _Body, raw: str, seq: int | None, ts: float | None, wall: str | None,
           level: int | None) -> XidEvent:
    """The :class:`XidEvent` of one line read by the general grammar: what its body and its container said.

    The fast path (:func:`parse_line`) builds the same record inline, by the same positions.
    """
    xid, pci, gi, ci, pid, process, message, category, mmu, caused_by, channel, gr = body
    return XidEvent(xid, pci, gi, ci, pid, process, message, category, mmu, caused_by, channel, gr, seq, ts, wall,
                    level, raw)


def parse_line(line: str) -> XidEvent | None:
    """Parse one kernel-log line; an :class:`XidEvent` if it carries an ``NVRM: Xid`` report, else None.

    Never raises on any ``str``: containers it does not know are ignored (the event then has no
    ``ts``/``wall``), and a line cut before its Xid number gives None.
    """
    m = _FAST_RE.match(line)
    if m is None:
        return _parse_general(line, cached=True)
    # The fast pre-filter read the whole line in one match; these are the fields the general
    # grammar would read from it (tests/test_kernlog_fastpath.py holds the two equal).
    groups: tuple[Any, ...] = m.groups()  # each a str or None, converted below
    (pri, seq, us, wall, iso, mon, day, hms, con, dlvl, ts, pci, gi, ci, xid_s, pid, name, mmu_text,
     ch, engine, gpc, client, addr, hi, lo, ft, at, other) = groups
    level = None
    mmu: MmuFault | None
    if ts is not None:
        ts = float(ts)
    if pri is not None:
        ts, seq, level = int(us) / 1e6, int(seq), int(pri) & 7
    elif iso is not None:
        wall = iso
    elif mon is not None:
        wall = f"{mon} {day} {hms}"
    elif con is not None:
        level = int(con) & 7
    elif dlvl is not None:
        level = _LEVELS[dlvl]
    if name is not None:
        name = name.strip()
        name = None if name in _UNKNOWN_NAMES else _intern(name)
    xid = int(xid_s)
    if mmu_text is not None:
        gpc = None if gpc is None else int(gpc)
        address = int(hi, 16) << 32 | int(lo, 16)
        # the decodable fault (every test of _mmu passed: 8 low digits, within the GPU VA, page
        # aligned, no UNRECOGNIZED_* name, a client) built at once; any other through _mmu
        if len(lo) == 8 and address < _VA_LIMIT and not address & 0xFFF and "UNRECOGNIZED" not in mmu_text:
            mmu = MmuFault(address, engine, gpc, client, ft, at, True, addr, None)
        else:
            mmu = _mmu(engine, gpc, client, hi, lo, ft, at)
        return XidEvent(xid, _intern(pci), None if gi is None else int(gi), None if ci is None else int(ci),
                        None if pid is None else int(pid), name, mmu_text, _CATEGORY.get(xid) or _category(xid),
                        mmu, None, int(ch, 16), None, seq, ts, wall, level, line.rstrip("\r\n"))
    message = other.rstrip()
    mmu, gr, caused_by, channel = _decode_message(message)
    return XidEvent(xid, _intern(pci), None if gi is None else int(gi), None if ci is None else int(ci),
                    None if pid is None else int(pid), name, message, _CATEGORY.get(xid) or _category(xid), mmu,
                    caused_by, channel, gr, seq, ts, wall, level, line.rstrip("\r\n"))


def _parse_general(line: str, cached: bool) -> XidEvent | None:
    """:func:`parse_line` by the general grammar (container peeling, body grammar, message decoders)."""
    i = line.find(MARKER)
    if i < 0:
        return None
    line = line.rstrip("\r\n")
    report = line[i:].rstrip()
    body = _parse_body(report) if cached else _parse_body.__wrapped__(report, general=True)
    if body is None:
        return None
    cont = parse_container(line[:i]) if i else _EMPTY
    return _event(body, line, cont.seq, cont.ts, cont.wall, cont.level)


def _parse_line_general(line: str) -> XidEvent | None:
    """:func:`parse_line` without the fast pre-filter, the fast MMU match or caches: the reference
    tests/test_kernlog_fastpath.py compares the fast path with."""
    return _parse_general(line, cached=False)


_EMPTY = Container()


# --- finding the lines -----------------------------------------------------------------------------------
# A report line is at most about 1 KiB (printk) or 8 KiB (a /dev/kmsg record with its dictionary).
# A candidate line is cut to MAX_SIDE characters either side of its marker, so a file with no
# newline (a sparse file, a binary dump) never becomes one giant line in memory, and a streamed
# scan (kernlog.stream) holds at most a chunk and one such line whatever the input.
MAX_SIDE = 16384
#: where the marker's rarest character is: "NVRM: " begins every NVRM line and "id" is common
#: text, while an "X" comes about once in 800 bytes of a kernel log (EXT4, XFS, Xeon, XSAVE)
_RARE_AT = MARKER.index("X")


def find_lines(buf: Any, pos: int, end: int, final: bool, marker: Any, nl: Any) -> tuple[list[Any], int, bool]:
    """The candidate lines of ``buf[pos:end]`` (each line holding ``marker``, cut to MAX_SIDE each side).

    Works on ``str`` and on ``bytes``/``bytearray``/``mmap`` alike (``marker``/``nl`` of the same
    kind). ``buf[:pos]`` is the text before (for the line start of a first marker); with ``final``
    False more text may follow ``end``, and a line not yet ended there is left for the next call.
    Returns the lines, the offset from which the caller must keep the text for the next call, and
    whether that next call starts inside an over-long line (skip to its newline first).
    """
    out: list[Any] = []
    append = out.append
    find, rfind = buf.find, buf.rfind
    mlen = len(marker)
    rare = marker[_RARE_AT:_RARE_AT + 1]
    before = marker[_RARE_AT - 1]  # the character before it: one index, no slice, rules out most hits
    # a marker's rare character lies before `last` (never negative: find reads a negative end from
    # the end of the buffer)
    last = max(0, end - mlen + _RARE_AT + 1)
    misses = (end - pos) >> 9
    while True:
        # The marker's rare character first, by a one-character find (memchr, several times the
        # speed of find(marker)), the whole marker compared around each hit. Text dense in that
        # character (more than 1 in 512) would make this slower than find(marker): past that many
        # misses, find(marker) takes over for the rest of the call. Both find the same markers.
        i = -1
        if misses > 0:
            j = find(rare, pos + _RARE_AT, last)
            while j >= 0 and misses > 0 and (buf[j - 1] != before
                                             or buf[j - _RARE_AT:j - _RARE_AT + mlen] != marker):
                misses -= 1
                j = find(rare, j + 1, last)
            if j >= 0:
                i = j - _RARE_AT
        if misses <= 0:
            i = find(marker, pos, end)
        if i < 0:
            # keep what a marker straddling `end` needs: its own start and MAX_SIDE before it
            keep = max(pos, end - mlen + 1 - MAX_SIDE)
            return out, max(keep, rfind(nl, keep, end) + 1), False
        low = i - MAX_SIDE if i > MAX_SIDE else 0
        start = rfind(nl, low, i) + 1 or low
        cap = i + MAX_SIDE
        stop = find(nl, i, cap if cap < end else end)
        if stop >= 0:
            append(buf[start:stop])
        elif cap <= end:  # over-long: cut here, then skip to the line's real end
            append(buf[start:cap])
            stop = find(nl, cap, end)
            if stop < 0:
                return out, end, not final
        elif final:
            append(buf[start:end])
            return out, end, False
        else:
            return out, start, False
        pos = stop + 1


class ScanResult(msgspec.Struct, frozen=True, gc=False):
    """What :func:`scan_text` found: the events, and the lines that mention Xid but could not be read."""

    events: tuple[XidEvent, ...]
    #: lines containing ``NVRM: Xid`` that do not parse (cut before the Xid number, mangled)
    unparsed: tuple[str, ...]


def _result(lines: list[str]) -> ScanResult:
    events: list[XidEvent] = []
    unparsed: list[str] = []
    for line, ev in zip(lines, parse_lines(lines), strict=True):
        if ev is None:
            unparsed.append(line.rstrip("\r"))
        else:
            events.append(ev)
    return ScanResult(tuple(events), tuple(unparsed))


def scan_text(text: str) -> ScanResult:
    """Parse every Xid line of ``text`` (any mix of containers), in input order.

    The search runs over the whole text with ``str.find`` (C speed); only the lines holding the
    marker are sliced out, so the cost is one pass plus the Xid lines themselves.
    """
    return _result(find_lines(text, 0, len(text), True, MARKER, "\n")[0])


def parse_text(text: str) -> list[XidEvent]:
    """Every Xid event of ``text``, in input order (lines that do not parse are left out; see :func:`scan_text`)."""
    return list(scan_text(text).events)


def decode_lines(raw: list[bytes]) -> list[str]:
    """The candidate lines :func:`find_lines` cut from bytes, as text (UTF-8, undecodable bytes replaced)."""
    return [b.decode("utf-8", "replace") for b in raw]


def _find_text_lines(buf: Any, pos: int, end: int, final: bool) -> tuple[list[str], int, bool]:
    """:func:`find_lines` on bytes with the lines decoded: the pure-Python route of :func:`find_text_lines`."""
    raw, keep, skipping = find_lines(buf, pos, end, final, MARKER_B, b"\n")
    return decode_lines(raw), keep, skipping


def _native() -> Any:
    """The compiled module (``_scan.c``, built by pip install when a C compiler is there), or None."""
    import importlib

    try:  # by name: the module exists only where it was built (for mypy too)
        return importlib.import_module("faulthunt.kernlog._scan")
    except ImportError:
        return None


def _native_lines() -> Callable[[Any, int, int, bool], tuple[list[str], int, bool]] | None:
    """The compiled line finder, or None."""
    native_module = _native()
    if native_module is None:
        return None
    lines = native_module.lines

    def native(buf: Any, pos: int, end: int, final: bool) -> tuple[list[str], int, bool]:
        return lines(buf, pos, end, final, MARKER_B, MAX_SIDE)  # type: ignore[no-any-return]

    return native


#: ``find_text_lines(buf, pos, end, final)``: :func:`find_lines` on bytes (bytes, bytearray, mmap), the
#: candidate lines decoded (UTF-8, undecodable bytes replaced). The compiled finder when it is built
#: (the search, the cut and the decoding in C: a third of a 1M-line log's scan time), else the
#: pure-Python :func:`find_lines` + :func:`decode_lines`; both give the same lines
#: (tests/test_kernlog_native.py).
find_text_lines = _native_lines() or _find_text_lines


def _parse_lines(lines: list[str]) -> list[XidEvent | None]:
    """:func:`parse_line` of each line: the pure-Python route of :func:`parse_lines`."""
    return list(map(parse_line, lines))


def _native_parse() -> Callable[[list[str]], list[XidEvent | None]] | None:
    """The compiled reader of the commonest line shapes, every other line given to :func:`parse_line`; or None."""
    native_module = _native()
    if native_module is None:
        return None
    native_module.configure(XidEvent, MmuFault, _CATEGORY, _category, _decode_message, GPU_VA_BITS)
    parse = native_module.parse_lines

    def native(lines: list[str]) -> list[XidEvent | None]:
        return parse(lines, parse_line)  # type: ignore[no-any-return]

    return native


#: ``parse_lines(lines)``: :func:`parse_line` of each line, in order. Compiled when built: raw dmesg
#: and /dev/kmsg lines of the usual shape are read in C (a strict subset of the fast pre-filter,
#: the Xid 31 page fault built there too, other messages decoded by :func:`_decode_message`), every
#: other line by :func:`parse_line`; the records are the same (tests/test_kernlog_native.py).
parse_lines = _native_parse() or _parse_lines

#: ``native_table(events, titles, detail, width) -> str | None``: the Xid table's rows laid out in C
#: (cli/xid.py ``_write_rows`` says what they are), or None where the compiled module is not built.
native_table: Callable[[list[XidEvent], dict[int, str], Callable[[XidEvent], str], int], str | None] | None = \
    getattr(_native(), "table", None)


#: the characters a terminal acts on rather than shows (U+0000-U+0008, U+000B-U+001F, U+007F; tab and
#: newline are text): cli/xid.py's rule, as UTF-8 bytes (every other character encodes to bytes >= 0x80)
_CONTROL_BYTES = bytes([*range(0x09), *range(0x0B, 0x20), 0x7F])


def _has_control(text: str) -> bool:
    """Whether ``text`` holds one of those characters: the pure-Python route of :func:`has_control`
    (a byte deletion in C; a regular expression over a megabyte table took 4x as long)."""
    raw = text.encode("utf-8", "surrogatepass")
    return len(raw.translate(None, _CONTROL_BYTES)) != len(raw)


#: ``has_control(text) -> bool``: whether a text for the terminal holds a control character (above).
#: Compiled when built (8 bytes a step); the same answers (tests/test_kernlog_native.py).
has_control: Callable[[str], bool] = getattr(_native(), "has_control", None) or _has_control


def scan_bytes(data: bytes | bytearray | mmap.mmap) -> ScanResult:
    """:func:`scan_text` for raw bytes (a file, ``dmesg`` output) without decoding the whole buffer.

    Candidate lines are found on the bytes and only those are decoded (UTF-8, undecodable bytes
    replaced), so binary junk elsewhere in the log costs nothing and never raises.
    """
    return _result(find_text_lines(data, 0, len(data), True)[0])


# --- the driver's GPU UUID lines and PCI spellings: one implementation, in kernlog.pci ------------------


def __getattr__(name: str) -> object:
    # normalize_pci / parse_gpu_uuids are importable from here too (kernlog.pci is the one
    # implementation), imported when first asked for: the parser itself does not need them
    if name in ("normalize_pci", "parse_gpu_uuids"):
        from faulthunt.kernlog import pci

        return getattr(pci, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
