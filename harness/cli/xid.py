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
import functools
import os
import re
import stat
import sys
import time
from typing import IO, TYPE_CHECKING, cast

from faulthunt.errors import FaulthuntError, InputError, UsageError
from faulthunt.kernlog import SPECS

if TYPE_CHECKING:
    from faulthunt.kernlog.incident import Incident
    from faulthunt.kernlog.sources import Cursor, ReadResult
    from faulthunt.kernlog.stream import Readable
    from faulthunt.records.xid import XidEvent

# The engine modules are imported inside the actions that use them: `faulthunt xid parse` starts
# in the time of a `grep`, and importing the sources (subprocess, threading) or the catalog for
# an action that does not need them is most of a short command's time (bench row "cli").

HELP = "parse, explain and follow NVIDIA Xid reports in the kernel log"

#: the most faulthunt reads from a pipe or device (a kernel log is megabytes; this ends `cat /dev/zero |`)
MAX_INPUT = 4 << 30
#: a cursor is a few hundred bytes of JSON; a bigger "cursor file" is some other file
MAX_CURSOR = 64 << 10


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="xid_command", metavar="ACTION")
    p = sub.add_parser("parse", help="print the Xid reports of kernel-log text (files, '-' for stdin; "
                       "none: --source if given, else stdin when it is a pipe or file, else the kernel log now)")
    p.add_argument("paths", nargs="*", metavar="PATH", help="log files (any container: dmesg, dmesg -T, "
                   "journalctl, syslog, /dev/kmsg records, console, talosctl); '-' reads stdin")
    p.add_argument("--json", action="store_true", help="JSON Lines: one object per Xid line, in input order")
    p.add_argument("--incidents", action="store_true", help="group the lines into incidents (with --json: "
                   "one object per incident)")
    p.add_argument("--source", default=None, help=f"read this kernel-log source instead of PATHs or stdin: "
                   f"{', '.join(SPECS)} (default: PATHs, else a piped stdin, else auto)")
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


#: what a terminal would act on rather than show (ESC, BEL, CR, ...), tab and newline kept: the
#: rule of faulthunt.report.escape.visible_lines, here so that `xid parse` need not import the report
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def _escape(text: str) -> str:
    """``text`` with each control character as its escape (``\\x1b``)."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group(0)):02x}", text)


class _Visible:
    """A text stream for people: a kernel log's text (a process name is any 15 bytes a program
    chose) reaches the terminal with its control characters shown as escapes (``\\x1b``), never
    acted on. One scan per write (a big table is one write), compiled where it is built."""

    def __init__(self, out: IO[str]) -> None:
        from faulthunt.kernlog.parse import has_control

        self._out = out
        self._has_control = has_control

    def write(self, text: str) -> int:
        if self._has_control(text):
            text = _escape(text)
        return self._out.write(text)

    def flush(self) -> None:
        self._out.flush()


def _warn(msg: str) -> None:
    print(f"faulthunt xid: {msg}", file=sys.stderr)


# --- output -------------------------------------------------------------------------------------------


def _detail(ev: XidEvent) -> str:
    m = ev.mmu
    if m is not None:
        where = f"0x{m.address:x}" if m.address is not None else f"{m.address_text} (undecodable: {m.reason})"
        try:
            what = _mmu_words(m.engine, m.gpc, m.client, m.fault_type, m.access_type)
        except TypeError:  # a value that is no key (a damaged record read back)
            what = _mmu_words.__wrapped__(m.engine, m.gpc, m.client, m.fault_type, m.access_type)
        return f"{where} {what}" if what else where
    if ev.gr is not None and ev.gr.kind in ("warp", "global"):
        loc = f"GPC {ev.gr.gpc}, TPC {ev.gr.tpc}" + (f", SM {ev.gr.sm}" if ev.gr.sm is not None else "")
        return f"{ev.gr.kind} exception ({loc}): {ev.gr.error or ''}".strip()
    if ev.caused_by is not None:
        return f"caused by previous Xid {ev.caused_by}: {ev.message}"
    return ev.message


@functools.lru_cache(maxsize=1024)
def _mmu_words(engine: str | None, gpc: int | None, client: str | None, fault_type: str | None,
               access_type: str | None) -> str:
    """The words of an MMU fault after its address (few kinds, repeated on every line of a fault storm)."""
    parts = [engine or "", f"GPC{gpc}" if gpc is not None else "", client or "", fault_type or "",
             (access_type or "").replace("ACCESS_TYPE_", "")]
    return " ".join(p for p in parts if p)


def _when(ev: XidEvent) -> str:
    if ev.ts is not None:
        return f"{ev.ts:.6f}"
    return ev.wall or "-"


def render_table(events: list[XidEvent], out: IO[str], width: int = 160,
                 incidents: list[Incident] | None = None) -> None:
    """A readable table of events, then one line per incident and the action for each culprit."""
    from faulthunt.kernlog.catalog import classify
    from faulthunt.kernlog.incident import group_incidents

    if not events:
        out.write("no Xid reports found\n")
        return
    _write_rows(events, out, width)
    if incidents is None:
        incidents = group_incidents(events)
    words = {culprit: f"  [{word}] " for culprit, word in _CULPRIT_WORDS.items()}
    lines = [f"\n{len(incidents)} incident(s):"]
    for inc in incidents:
        culprit = inc.culprit
        lines.append((words.get(culprit) or f"  [{culprit}] ") + inc.describe())
    lines.append("")
    out.write("\n".join(lines))
    seen: set[str] = set()
    out.write("\nwhat to do:\n")
    for xid in dict.fromkeys(inc.root.xid for inc in incidents):  # each Xid once, in first-seen order
        entry = classify(xid)
        if entry.category in seen:
            continue
        seen.add(entry.category)
        out.write(f"  Xid {entry.xid} ({entry.mnemonic or 'unknown'}): {entry.action}\n")


def _write_rows(events: list[XidEvent], out: IO[str], width: int) -> None:
    """The table's rows: cells padded to their column's width, each line cut to ``width`` with "...".

    A big log's table has tens of thousands of rows, so it is built column by column and laid out
    by one %-format applied in C; only the detail column is made per event in Python. Where the
    compiled module is built, it lays out the same text (tests/test_xid_table.py holds the two equal).
    """
    from faulthunt.kernlog.catalog import classify
    from faulthunt.kernlog.parse import has_control, native_table

    titles = {xid: classify(xid).title for xid in {ev.xid for ev in events}}
    # The same text laid out in C (kernlog/_scan.c), None when it declines: among others for a
    # control character in a cell (a process name is any bytes a program chose), which is shown
    # as an escape four characters wide: the layout below measures the cells as they are shown.
    if native_table is not None:
        text = native_table(list(events), titles, _detail, width)
        if text is not None:
            out.write(text)
            return

    def shown(cell: str) -> str:
        return _escape(cell) if has_control(cell) else cell

    columns = [
        ["time", *("%.6f" % ev.ts if ev.ts is not None else shown(ev.wall or "-") for ev in events)],
        ["xid", *(str(ev.xid) for ev in events)],
        ["gpu", *(shown(ev.pci or "-") for ev in events)],
        ["pid", *("-" if ev.pid is None else str(ev.pid) for ev in events)],
        ["process", *(shown(ev.process or "-") for ev in events)],
        ["category", *(titles[ev.xid] for ev in events)],
    ]
    widths = [max(map(len, col)) for col in columns]
    details = ["detail", *(shown(_detail(ev)) for ev in events)]
    room = width - sum(widths) - 2 * len(widths)  # what a line has left for its detail
    if room >= 3:
        # a line longer than `width` is its first width-3 characters and "...": that cut falls in the detail
        details = [d if len(d) <= room else d[:room - 3] + "..." for d in details]
        layout = "  ".join(f"%-{w}s" for w in widths) + "  %s\n"
        out.write("".join(map(layout.__mod__, zip(*columns, details, strict=True))))
        return
    layout = "  ".join(f"%-{w}s" for w in widths) + "  %s"
    for cells in zip(*columns, details, strict=True):
        line = layout % cells
        out.write((line if len(line) <= width else line[:width - 3] + "...") + "\n")


_CULPRIT_WORDS = {
    "application": "your code", "machine": "the machine", "driver": "driver/firmware",
    "consequence": "consequence", "informational": "info", "unclear": "your code or the machine",
    "unknown": "unknown",
}


# --- parse -----------------------------------------------------------------------------------------


def _stdin_has_input() -> bool:
    """Whether stdin is something to read: a pipe, a file or a socket -- not a terminal, /dev/null or closed.

    Under cron and CI, stdin is /dev/null or absent: reading it would find nothing and say "no Xid
    reports found" about a kernel log never looked at.
    """
    stdin = sys.stdin
    if stdin is None:
        return False
    try:
        if stdin.isatty():
            return False
        mode = os.fstat(stdin.fileno()).st_mode
    except (OSError, ValueError, AttributeError):  # a stand-in stdin with no descriptor: read what it holds
        return True
    return stat.S_ISFIFO(mode) or stat.S_ISREG(mode) or stat.S_ISSOCK(mode)


def _open_input(path: str) -> tuple[Readable, int | None, bool]:
    """The stream for PATH ('-' is stdin), the byte limit to read it to, and whether to close it."""
    if path == "-":
        return cast("Readable", sys.stdin.buffer), MAX_INPUT, False
    try:
        fh = open(path, "rb", buffering=0)  # noqa: SIM115 (closed by the caller)
        mode = os.fstat(fh.fileno()).st_mode
    except FileNotFoundError:
        raise InputError(f"{path}: no such file",
                         fix="check the path; `dmesg > kern.log` saves the kernel log") from None
    except IsADirectoryError:
        raise InputError(f"{path} is a directory", fix="pass a log file (e.g. a saved `dmesg` output)") from None
    except PermissionError:
        raise InputError(f"{path}: permission denied",
                         fix=f"run as a user who may read it (e.g. `sudo faulthunt xid parse {path}`)") from None
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: {getattr(exc, 'strerror', None) or exc}", fix="check the file") from None
    if stat.S_ISDIR(mode) or stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        fh.close()
        if stat.S_ISDIR(mode):
            raise InputError(f"{path} is a directory", fix="pass a log file (e.g. a saved `dmesg` output)")
        raise InputError(f"{path} is a device, not a log file (/dev/kmsg blocks at its end, /dev/zero never ends)",
                         fix="read the live kernel log with `faulthunt xid parse --source kmsg` (or dmesg, journalctl)")
    # a regular file ends; a pipe or socket might not
    return fh, None if stat.S_ISREG(mode) else MAX_INPUT, True


class _Sink:
    """Where parsed events go: JSON Lines written as they come, an incident grouper, or a list."""

    def __init__(self, args: argparse.Namespace, out: IO[str]) -> None:
        self.out = out
        self.events: list[XidEvent] = []
        self.unparsed = 0
        self.first_unparsed = ""
        self.grouper = None
        if args.incidents:
            from faulthunt.kernlog.incident import IncidentGrouper

            self.grouper = IncidentGrouper()
        self.stream_json = args.json and not args.incidents
        if self.stream_json:
            from faulthunt.kernlog.jsonl import events_jsonl

            self._jsonl = events_jsonl
            # JSON Lines are UTF-8 bytes: straight to the binary stream under stdout when there is one
            self._binary: IO[bytes] | None = getattr(out, "buffer", None)
            out.flush()

    def add_lines(self, lines: list[str]) -> None:
        """Parse a batch of candidate lines (one chunk of the input) and take their events."""
        from faulthunt.kernlog import parse

        events = parse.parse_lines(lines)
        if None in events:
            for ev, line in zip(events, lines, strict=True):
                if ev is None:
                    self.unparsed += 1
                    self.first_unparsed = self.first_unparsed or line.rstrip("\r")
            events = [ev for ev in events if ev is not None]
        self.add_events(cast("list[XidEvent]", events))  # no None left

    def add_events(self, events: list[XidEvent]) -> None:
        if self.stream_json:
            if events:
                data = self._jsonl(events)
                if self._binary is not None:
                    self._binary.write(data)
                else:
                    self.out.write(data.decode())
        elif self.grouper is not None:
            add = self.grouper.add
            for ev in events:
                add(ev)
        else:
            self.events.extend(events)

    def add_unparsed(self, line: str) -> None:
        self.unparsed += 1
        self.first_unparsed = self.first_unparsed or line.rstrip("\r")

    def flush(self) -> None:
        if self.stream_json and self._binary is not None:
            self._binary.flush()


def _scan_paths(paths: list[str], sink: _Sink) -> int:
    """Stream every PATH into ``sink``; returns how many could not be read (each named on stderr)."""
    from faulthunt.kernlog.stream import StreamScan

    failures = 0
    for path in paths:
        try:
            stream, limit, close = _open_input(path)
        except InputError as exc:
            _warn(str(exc))
            failures += 1
            continue
        try:
            scan = StreamScan(stream, limit=limit)
            found = 0
            for lines in scan.batches():
                sink.add_lines(lines)
                found += len(lines)
        finally:
            if close:
                stream.close()
        if not found and b"\0" in scan.head:
            _warn(f"{path}: looks binary and holds no Xid report")
        if scan.truncated:
            _warn(f"{path}: stopped after {MAX_INPUT >> 30} GiB (a kernel log is megabytes: is this a log?)")
    return failures


def _parse(args: argparse.Namespace) -> int:
    import gc

    paths: list[str] = list(args.paths)
    source = args.source
    if paths and source is not None:
        raise UsageError("give log files or --source, not both",
                         fix="`faulthunt xid parse kern.log` or `faulthunt xid parse --source kmsg`")
    if source is not None and source.startswith("file:") and source[5:]:
        paths, source = [source[5:]], None  # a file source is a file: streamed like one
    elif not paths and source is None and _stdin_has_input():
        paths = ["-"]
    sink = _Sink(args, sys.stdout)
    # Events and incidents hold no reference cycles: the cyclic collector would only walk every
    # record made so far, again and again (a third of the time on a big log), and free nothing.
    gc_was_on = gc.isenabled()
    gc.disable()
    try:
        if paths:
            failures = _scan_paths(paths, sink)
            if failures == len(paths):
                raise InputError(f"nothing could be read ({failures} input(s) failed, see above)",
                                 fix="pass a readable kernel-log file, or '-' and pipe `dmesg` into it")
        else:
            _scan_source(source or "auto", sink)
        sink.flush()
        _report(args, sink)
    finally:
        if gc_was_on:
            gc.enable()
    if sink.unparsed:
        _warn(f"{sink.unparsed} line(s) mention 'NVRM: Xid' but could not be parsed (truncated?); first: "
              f"{sink.first_unparsed[:200]!r}")
    return 0


def _scan_source(spec: str, sink: _Sink) -> None:
    from faulthunt.kernlog import sources
    from faulthunt.kernlog.parse import scan_text

    source = sources.open_source(spec, warn=_warn)
    if isinstance(source, sources.NullSource):
        raise sources.KernelLogUnreadable(
            f"nothing to parse: {source.reason}",
            fix="pass a saved log (`faulthunt xid parse kern.log`), pipe one in (`sudo dmesg | faulthunt xid parse`), "
            "or run as root")
    scan = scan_text(source.snapshot())
    sink.add_events(list(scan.events))
    for line in scan.unparsed:
        sink.add_unparsed(line)


def _report(args: argparse.Namespace, sink: _Sink) -> None:
    out = cast("IO[str]", _Visible(sink.out))
    if sink.stream_json:
        return
    if sink.grouper is not None:
        incidents = sink.grouper.incidents()
        if args.json:
            import json  # (here, not at the top: `xid parse --json` streams without it)

            for inc in incidents:
                out.write(json.dumps(inc.to_json()) + "\n")
            return
        from faulthunt.kernlog.incident import summarize_incidents

        for inc in incidents:
            out.write(f"[{_CULPRIT_WORDS.get(inc.culprit, inc.culprit)}] {inc.describe()}\n")
        summary = summarize_incidents(incidents)
        out.write(f"{summary['incidents']} incident(s): {summary['by_culprit']}\n")
        return
    render_table(sink.events, out)


# --- cursor / since / watch --------------------------------------------------------------------------


_CURSOR_FIX = "pass the JSON `faulthunt xid cursor` printed, a file holding it, or kmsg:SEQ"


def load_cursor(text: str) -> Cursor:
    """A cursor from JSON text, a file holding it, or ``kmsg:SEQ``.

    Raises :class:`UsageError` / :class:`InputError` with the fix for anything that is not a cursor:
    a file that is binary, not UTF-8, cut short, huge or of the wrong shape is a message, never a
    traceback.
    """
    import json

    from faulthunt.kernlog.sources import Cursor

    text = text.strip()
    if text.startswith("kmsg:") and text[5:].isascii() and text[5:].isdigit():
        return Cursor(source="kmsg", seq=int(text[5:]))
    if not text.startswith("{"):
        text = _read_cursor_file(text)
    try:
        d = json.loads(text)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, a 5000-digit number, nesting 100k deep
        raise UsageError(f"cursor is not valid JSON: {str(exc)[:200]}",
                         fix="pass what `faulthunt xid cursor` printed") from None
    if isinstance(d, dict) and isinstance(d.get("cursor"), dict):  # a `since --json` trailer, or a wrapper
        d = d["cursor"]
    try:
        return Cursor.from_json(d)
    except FaulthuntError as exc:
        raise UsageError(exc.message, fix=exc.fix) from None


def _read_cursor_file(name: str) -> str:
    """The text of a cursor file; UsageError/InputError saying what is wrong with it otherwise."""
    try:
        with open(name, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise UsageError(f"not a cursor: {name[:80]!r} is not a regular file", fix=_CURSOR_FIX)
            data = fh.read(MAX_CURSOR + 1)
    except FileNotFoundError:
        raise UsageError(f"not a cursor: {name[:80]!r} (no such file, and not JSON or kmsg:SEQ)",
                         fix=_CURSOR_FIX) from None
    except IsADirectoryError:
        raise UsageError(f"not a cursor: {name[:80]!r} is a directory", fix=_CURSOR_FIX) from None
    except (OSError, ValueError) as exc:  # permission, a name with a NUL byte, ...
        raise InputError(f"cannot read cursor file {name[:80]!r}: {getattr(exc, 'strerror', None) or exc}",
                         fix="check the path and its permissions") from None
    if len(data) > MAX_CURSOR:
        raise UsageError(f"cursor file {name} is over {MAX_CURSOR >> 10} KiB: not a cursor",
                         fix="take a new one with `faulthunt xid cursor > FILE`")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"cursor file {name} is not UTF-8 text (binary or damaged at byte {exc.start})",
                         fix="take a new one with `faulthunt xid cursor > FILE`") from None


def _source_for(cursor: Cursor) -> str:
    if cursor.source == "file":
        if not cursor.path:
            raise UsageError("a file cursor without a path",
                             fix="take a new one with `faulthunt xid cursor --source file:PATH`")
        return f"file:{cursor.path}"
    return cursor.source


def _cursor(args: argparse.Namespace) -> int:
    import json

    from faulthunt.kernlog import sources

    source = sources.open_source(args.source, warn=_warn)
    print(json.dumps(source.cursor().to_json()))
    return 0


def _print_result(res: ReadResult, as_json: bool, lines: bool) -> None:
    import json

    out = sys.stdout if as_json else cast("IO[str]", _Visible(sys.stdout))
    if as_json:
        from faulthunt.kernlog.jsonl import event_json

        for ev in res.events:
            out.write(event_json(ev) + "\n")
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
    from faulthunt.kernlog import sources

    cursor = load_cursor(args.cursor)
    if cursor.source == "none":
        raise UsageError("this cursor comes from the 'none' source: there is nothing to read after it",
                         fix="take a cursor from a readable source (`faulthunt xid cursor --source kmsg`)")
    if cursor.source == "nvml":
        raise UsageError("an NVML cursor only means something inside the process that took it",
                         fix="use a kernel-log cursor (kmsg, dmesg, journalctl or file) across commands")
    source = sources.open_source(_source_for(cursor), warn=_warn)
    _print_result(source.read_since(cursor, final=True), args.json, args.lines)
    return 0


def _watch(args: argparse.Namespace) -> int:
    from faulthunt.kernlog import sources
    from faulthunt.kernlog.catalog import classify
    from faulthunt.kernlog.jsonl import event_json

    source = sources.open_source(args.source, warn=_warn)
    out = sys.stdout if args.json else cast("IO[str]", _Visible(sys.stdout))

    def show(ev: XidEvent) -> None:
        if args.json:
            out.write(event_json(ev) + "\n")
        else:
            out.write(f"{_when(ev)}  Xid {ev.xid}  {ev.pci or '-'}  pid {ev.pid if ev.pid is not None else '-'}"
                      f" {ev.process or ''}  [{classify(ev.xid).title}]  {_detail(ev)}\n")
        out.flush()

    follower = sources.Follower(source, source.cursor(), show, interval=args.interval)
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
    import json

    from faulthunt.kernlog.catalog import classify

    for n in args.xid:
        entry = classify(n)
        if args.json:
            print(json.dumps(entry.to_json()))
            continue
        # an id the catalog lacks has no mnemonic: its description says so, once
        name = f"{entry.mnemonic} - {entry.description}" if entry.mnemonic else entry.description
        print(f"Xid {n}: {name}")
        print(f"  category: {entry.title} ({entry.category}); whose fault: "
              f"{_CULPRIT_WORDS.get(entry.culprit, entry.culprit)}")
        if entry.legacy_causes:
            print(f"  legacy possible causes: {' '.join(entry.legacy_causes)}")
        print(f"  what to do: {entry.action}")
    return 0


__all__ = ["HELP", "add_arguments", "run", "load_cursor", "render_table"]
