"""``faulthunt xid``: parse, explain and follow NVIDIA Xid reports in the kernel log.

    faulthunt xid parse [PATH ...|-] [--json] [--incidents]   Xid lines of files / stdin / the kernel log
    faulthunt xid watch [--source SPEC] [--json]              follow the kernel log live (Ctrl-C ends)
    faulthunt xid cursor [--source SPEC]                      print a cursor ("now") as JSON
    faulthunt xid since CURSOR [--json]                       what the log added after CURSOR
    faulthunt xid explain N                                   what Xid N means and what to do

Exit status: 0 when the input could be read (whether or not it held Xids), 3 when nothing could
be read (each unreadable input is named on stderr with the fix).
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import stat
import sys
import time
from pathlib import Path
from typing import IO

from faulthunt.errors import FaulthuntError, InputError, UsageError
from faulthunt.kernlog.catalog import classify
from faulthunt.kernlog.incident import group_incidents, summarize_incidents
from faulthunt.kernlog.parse import ScanResult, scan_bytes
from faulthunt.kernlog.sources import SPECS, Cursor, Follower, KernelLogUnreadable, NullSource, ReadResult, open_source
from faulthunt.records.xid import XidEvent

HELP = "parse, explain and follow NVIDIA Xid reports in the kernel log"

#: the widest file faulthunt reads whole (a kernel log is megabytes; this guards against /dev/zero)
MAX_INPUT = 4 << 30
#: files at least this big are memory-mapped instead of read
MMAP_FROM = 1 << 20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="xid_command", metavar="ACTION")
    p = sub.add_parser("parse", help="print the Xid reports of kernel-log text (files, '-' for stdin; "
                       "none: stdin when piped, else the kernel log now)")
    p.add_argument("paths", nargs="*", metavar="PATH", help="log files (any container: dmesg, dmesg -T, "
                   "journalctl, syslog, /dev/kmsg records, console, talosctl); '-' reads stdin")
    p.add_argument("--json", action="store_true", help="JSON Lines: one object per Xid line, in input order")
    p.add_argument("--incidents", action="store_true", help="group the lines into incidents (with --json: "
                   "one object per incident)")
    p.add_argument("--source", default="auto", help=f"where to read when no PATH is given and stdin is a "
                   f"terminal: {', '.join(SPECS)} (default auto)")
    w = sub.add_parser("watch", help="follow the kernel log live and print each Xid as it appears")
    w.add_argument("--source", default="auto", help=f"{', '.join(SPECS)} (default auto)")
    w.add_argument("--json", action="store_true", help="JSON Lines")
    w.add_argument("--interval", type=float, default=0.25, help="poll interval in seconds (default 0.25)")
    w.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    c = sub.add_parser("cursor", help="print a cursor for the kernel log now (JSON), for `xid since`")
    c.add_argument("--source", default="auto", help=f"{', '.join(SPECS)} (default auto)")
    s = sub.add_parser("since", help="print what the kernel log added after CURSOR")
    s.add_argument("cursor", metavar="CURSOR", help="the JSON `xid cursor` printed, a file holding it "
                   "(e.g. a run's kmsg_cursor.json), or kmsg:SEQ")
    s.add_argument("--json", action="store_true", help="JSON Lines, then a last {\"cursor\": ...} object")
    s.add_argument("--lines", action="store_true", help="print every added log line, not only Xids")
    e = sub.add_parser("explain", help="what an Xid number means, whose fault it is, what to do")
    e.add_argument("xid", type=int, nargs="+", metavar="N")
    e.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    action = getattr(args, "xid_command", None)
    if action is None:
        raise UsageError("faulthunt xid needs an action", fix="faulthunt xid parse|watch|cursor|since|explain --help")
    return {"parse": _parse, "watch": _watch, "cursor": _cursor, "since": _since, "explain": _explain}[action](args)


def _warn(msg: str) -> None:
    print(f"faulthunt xid: {msg}", file=sys.stderr)


# --- output -------------------------------------------------------------------------------------------


def _detail(ev: XidEvent) -> str:
    if ev.mmu is not None:
        m = ev.mmu
        where = f"0x{m.address:x}" if m.address is not None else f"{m.address_text} (undecodable: {m.reason})"
        parts = [where, m.engine or "", f"GPC{m.gpc}" if m.gpc is not None else "", m.client or "",
                 m.fault_type or "", (m.access_type or "").replace("ACCESS_TYPE_", "")]
        return " ".join(p for p in parts if p)
    if ev.gr is not None and ev.gr.kind in ("warp", "global"):
        loc = f"GPC {ev.gr.gpc}, TPC {ev.gr.tpc}" + (f", SM {ev.gr.sm}" if ev.gr.sm is not None else "")
        return f"{ev.gr.kind} exception ({loc}): {ev.gr.error or ''}".strip()
    if ev.caused_by is not None:
        return f"caused by previous Xid {ev.caused_by}: {ev.message}"
    return ev.message


def _when(ev: XidEvent) -> str:
    if ev.ts is not None:
        return f"{ev.ts:.6f}"
    return ev.wall or "-"


def render_table(events: list[XidEvent], out: IO[str], width: int = 160) -> None:
    """A readable table of events, then one line per incident and the action for each culprit."""
    if not events:
        out.write("no Xid reports found\n")
        return
    rows = [("time", "xid", "gpu", "pid", "process", "category", "detail")]
    for ev in events:
        rows.append((_when(ev), str(ev.xid), ev.pci or "-", str(ev.pid) if ev.pid is not None else "-",
                     ev.process or "-", classify(ev.xid).title, _detail(ev)))
    widths = [max(len(r[i]) for r in rows) for i in range(6)]
    for r in rows:
        head = "  ".join(c.ljust(w) for c, w in zip(r[:6], widths))
        line = f"{head}  {r[6]}"
        out.write((line if len(line) <= width else line[: width - 3] + "...") + "\n")
    incidents = group_incidents(events)
    out.write(f"\n{len(incidents)} incident(s):\n")
    for inc in incidents:
        out.write(f"  [{_CULPRIT_WORDS.get(inc.culprit, inc.culprit)}] {inc.describe()}\n")
    seen: set[str] = set()
    out.write("\nwhat to do:\n")
    for inc in incidents:
        entry = classify(inc.root.xid)
        if entry.category in seen:
            continue
        seen.add(entry.category)
        out.write(f"  Xid {entry.xid} ({entry.mnemonic or 'unknown'}): {entry.action}\n")


_CULPRIT_WORDS = {
    "application": "your code", "machine": "the machine", "driver": "driver/firmware",
    "consequence": "consequence", "informational": "info", "unclear": "your code or the machine",
    "unknown": "unknown",
}


def _emit_json(events: list[XidEvent], out: IO[str], incidents: bool) -> None:
    if incidents:
        for inc in group_incidents(events):
            out.write(json.dumps(inc.to_json()) + "\n")
    else:
        for ev in events:
            out.write(json.dumps(ev.to_json()) + "\n")


# --- parse -----------------------------------------------------------------------------------------


def _read_path(path: str) -> bytes | mmap.mmap:
    if path == "-":
        return sys.stdin.buffer.read()
    p = Path(path)
    try:
        if p.is_dir():
            raise InputError(f"{path} is a directory", fix="pass a log file (e.g. a saved `dmesg` output)")
        with open(p, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size >= MMAP_FROM and stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                # a big log is scanned in place: the parser only copies out the Xid lines
                return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            return fh.read(MAX_INPUT)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file", fix="check the path; `dmesg > kern.log` saves the kernel log") from None
    except PermissionError:
        raise InputError(f"{path}: permission denied", fix=f"run as a user who may read it (e.g. `sudo faulthunt xid parse {path}`)") from None
    except OSError as exc:
        raise InputError(f"{path}: {exc.strerror or exc}", fix="check the file") from None


def _parse(args: argparse.Namespace) -> int:
    paths: list[str] = list(args.paths)
    scans: list[ScanResult] = []
    failures = 0
    if not paths and not sys.stdin.isatty():
        paths = ["-"]
    if paths:
        for path in paths:
            try:
                data = _read_path(path)
            except InputError as exc:
                _warn(str(exc))
                failures += 1
                continue
            if b"\0" in data[:4096] and b"NVRM: Xid" not in data:
                _warn(f"{path}: looks binary and holds no Xid report")
            scans.append(scan_bytes(data))
        if not scans:
            raise InputError(f"nothing could be read ({failures} input(s) failed, see above)",
                             fix="pass a readable kernel-log file, or '-' and pipe `dmesg` into it")
    else:
        source = open_source(args.source, warn=_warn)
        if isinstance(source, NullSource):
            raise KernelLogUnreadable(f"nothing to parse: {source.reason}",
                                      fix="pass a saved log (`faulthunt xid parse kern.log`), pipe one in "
                                      "(`sudo dmesg | faulthunt xid parse`), or run as root")
        scans.append(scan_bytes(source.snapshot().encode("utf-8", "replace")))
    events = [e for s in scans for e in s.events]
    unparsed = [u for s in scans for u in s.unparsed]
    out = sys.stdout
    if args.json:
        _emit_json(events, out, args.incidents)
    elif args.incidents:
        for inc in group_incidents(events):
            out.write(f"[{_CULPRIT_WORDS.get(inc.culprit, inc.culprit)}] {inc.describe()}\n")
        summary = summarize_incidents(group_incidents(events))
        out.write(f"{summary['incidents']} incident(s): {summary['by_culprit']}\n")
    else:
        render_table(events, out)
    if unparsed:
        _warn(f"{len(unparsed)} line(s) mention 'NVRM: Xid' but could not be parsed (truncated?); first: "
              f"{unparsed[0][:200]!r}")
    return 0


# --- cursor / since / watch --------------------------------------------------------------------------


def load_cursor(text: str) -> Cursor:
    """A cursor from JSON text, a file holding it, or ``kmsg:SEQ`` / ``file:PATH:OFFSET``."""
    text = text.strip()
    if text.startswith("kmsg:") and text[5:].isdigit():
        return Cursor(source="kmsg", seq=int(text[5:]))
    if not text.startswith("{"):
        p = Path(text)
        if p.is_file():
            try:
                text = p.read_text()
            except OSError as exc:
                raise InputError(f"cannot read cursor file {p}: {exc.strerror}", fix="check the path") from None
        else:
            raise UsageError(f"not a cursor: {text[:80]!r}",
                             fix="pass the JSON `faulthunt xid cursor` printed, a file holding it, or kmsg:SEQ")
    try:
        d = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"cursor is not valid JSON: {exc}", fix="pass what `faulthunt xid cursor` printed") from None
    if isinstance(d, dict) and isinstance(d.get("cursor"), dict):  # a `since --json` trailer, or a wrapper
        d = d["cursor"]
    return Cursor.from_json(d)


def _source_for(cursor: Cursor) -> str:
    if cursor.source == "file":
        if not cursor.path:
            raise UsageError("a file cursor without a path", fix="take a new one with `faulthunt xid cursor --source file:PATH`")
        return f"file:{cursor.path}"
    return cursor.source


def _cursor(args: argparse.Namespace) -> int:
    source = open_source(args.source, warn=_warn)
    print(json.dumps(source.cursor().to_json()))
    return 0


def _print_result(res: ReadResult, as_json: bool, lines: bool) -> None:
    out = sys.stdout
    if as_json:
        for ev in res.events:
            out.write(json.dumps(ev.to_json()) + "\n")
        out.write(json.dumps({"cursor": res.cursor.to_json(), "lost": res.lost, "lost_unknown": res.lost_unknown,
                              "lines": len(res.lines), "source": res.source}) + "\n")
    elif lines:
        for line in res.lines:
            out.write(line + "\n")
    else:
        render_table(list(res.events), out)
        out.write(f"\n{len(res.lines)} new log line(s) from {res.source}; next cursor: "
                  f"{json.dumps(res.cursor.to_json())}\n")
    for w in res.warnings:
        _warn(w)
    if res.lost:
        _warn(f"{res.lost} record(s) were lost to ring-buffer overrun before they could be read")


def _since(args: argparse.Namespace) -> int:
    cursor = load_cursor(args.cursor)
    if cursor.source == "none":
        raise UsageError("this cursor comes from the 'none' source: there is nothing to read after it",
                         fix="take a cursor from a readable source (`faulthunt xid cursor --source kmsg`)")
    if cursor.source == "nvml":
        raise UsageError("an NVML cursor only means something inside the process that took it",
                         fix="use a kernel-log cursor (kmsg, dmesg, journalctl or file) across commands")
    source = open_source(_source_for(cursor), warn=_warn)
    _print_result(source.read_since(cursor, final=True), args.json, args.lines)
    return 0


def _watch(args: argparse.Namespace) -> int:
    source = open_source(args.source, warn=_warn)
    out = sys.stdout

    def show(ev: XidEvent) -> None:
        if args.json:
            out.write(json.dumps(ev.to_json()) + "\n")
        else:
            out.write(f"{_when(ev)}  Xid {ev.xid}  {ev.pci or '-'}  pid {ev.pid if ev.pid is not None else '-'}"
                      f" {ev.process or ''}  [{classify(ev.xid).title}]  {_detail(ev)}\n")
        out.flush()

    follower = Follower(source, source.cursor(), show, interval=args.interval)
    _warn(f"following {source.name}; Ctrl-C to stop")
    follower.start()
    deadline = None if args.duration is None else time.monotonic() + args.duration
    try:
        while deadline is None or time.monotonic() < deadline:
            time.sleep(min(0.2, args.interval))
    except KeyboardInterrupt:
        pass
    res = follower.stop()
    for w in res.warnings:
        _warn(w)
    _warn(f"{len(res.events)} Xid report(s), {res.lost} record(s) lost")
    return 0


def _explain(args: argparse.Namespace) -> int:
    for n in args.xid:
        entry = classify(n)
        if args.json:
            print(json.dumps(entry.to_json()))
            continue
        print(f"Xid {n}: {entry.mnemonic or '(not in the catalog)'} - {entry.description}")
        print(f"  category: {entry.title} ({entry.category}); whose fault: "
              f"{_CULPRIT_WORDS.get(entry.culprit, entry.culprit)}")
        if entry.legacy_causes:
            print(f"  legacy possible causes: {' '.join(entry.legacy_causes)}")
        print(f"  what to do: {entry.action}")
    return 0


__all__ = ["HELP", "add_arguments", "run", "load_cursor", "render_table", "FaulthuntError", "KernelLogUnreadable"]
