"""``faulthunt map``: fault address -> allocation, kernel and test (docs/mapper.md)."""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from faulthunt.errors import InputError, UsageError

HELP = "map fault addresses (Xid 31 pages, sanitizer addresses) to allocations, kernels and tests"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("addresses", nargs="*", metavar="ADDRESS",
                        help="0x7f7d_dbe00000 (as Xid prints it), 0x7f7ddbe00000 or decimal; "
                             "none with --run: map every Xid 31 and sanitizer address of the run")
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--run", help="run directory or id (default: the latest run)")
    src.add_argument("--ledger", action="append", type=Path, metavar="FILE",
                     help="ledger file or directory (repeatable) instead of a run's ledger/")
    parser.add_argument("--addresses", metavar="FILE", dest="addresses_from",
                        help="map every address in FILE ('-': standard input), one a line: ADDRESS "
                             "[PID [AT]] ('-' for none; '#' starts a comment); the ledger is loaded once")
    parser.add_argument("--pid", type=int, help="the faulting process (Xid's pid=); default: try all")
    parser.add_argument("--at", type=float, metavar="T",
                        help="wall-clock time of the fault (time.time() seconds); default: end of the ledger")
    parser.add_argument("--page", action="store_true",
                        help="each address names a 4 KiB page (Xid 31), not a byte: offset ranges")
    parser.add_argument("--json", action="store_true", help="one JSON object per address, one a line")


def run(args: argparse.Namespace) -> int:
    from faulthunt.ledger.reader import load_ledger
    from faulthunt.mapper import map_each, map_run_entries, parse_address
    from faulthunt.rundir import Layout, RunDir, resolve_run_dir

    queries: list[tuple[int, int | None, float | None]] = [
        (parse_address(a), args.pid, args.at) for a in args.addresses]
    if args.addresses_from is not None:
        queries += read_queries(args.addresses_from, args.pid, args.at)
    if args.ledger:
        ledger = load_ledger(args.ledger if len(args.ledger) > 1 else args.ledger[0])
    else:
        run_dir = resolve_run_dir(args.run)
        if not queries and args.addresses_from is None:
            entries = map_run_entries(RunDir(run_dir))
            _emit_run(entries, args.json, sys.stdout)
            _write_mapping(run_dir / Layout.MAPPING, entries, quiet=args.json)
            return 0
        ledger = load_ledger(RunDir(run_dir).ledger_dir())
    if not queries and args.addresses_from is None:
        raise UsageError("no address given", fix="faulthunt map 0x7f7d_dbe00000 --ledger FILE, or --run RUN alone")
    if ledger.skipped:
        why = "; ".join(f"{reason}: {n}" for reason, n in sorted(ledger.skipped_by.items(),
                                                                 key=lambda kv: -kv[1])[:3])
        print(f"faulthunt map: skipped {ledger.skipped} malformed ledger line(s)"
              + (f" (torn last line in {len(ledger.torn_files)} file(s): a writer was killed)"
                 if ledger.torn_files else "") + (f" ({why})" if why else ""), file=sys.stderr)
    if args.addresses_from is None:  # addresses on the command line: one error stops it, as before
        for v in map_each(ledger, queries, page=args.page):
            print(_json(v.to_json()) if args.json else render(v.to_json()), flush=True)
        return 0
    return _map_batch(ledger, queries, args.page, args.json, sys.stdout)


def _map_batch(ledger: Any, queries: list[tuple[int, int | None, float | None]], page: bool,
               as_json: bool, out: IO[str]) -> int:
    """Map many addresses; one that cannot be mapped (a pid not in the ledger) is reported in its
    place with the reason and the rest go on; the exit status says some could not be."""
    from faulthunt.cli import ExitCode
    from faulthunt.mapper import map_address

    failed = 0
    write = out.write
    for address, pid, at in queries:
        try:
            got = map_address(ledger, address, pid=pid, at=at, page=page).to_json()
        except InputError as exc:
            failed += 1
            got = {"address": hex(address), "pid": pid, "verdict": None, "reason": exc.message}
        write((_json(got) if as_json else render(got)) + "\n")
    out.flush()
    if failed:
        print(f"faulthunt map: {failed} of {len(queries)} address(es) could not be mapped (see their reason)",
              file=sys.stderr)
        return int(ExitCode.BAD_INPUT)
    return int(ExitCode.OK)


def read_queries(source: str, pid: int | None, at: float | None) -> list[tuple[int, int | None, float | None]]:
    """``ADDRESS [PID [AT]]`` lines of a file (``-``: standard input) -> queries; ``-`` leaves a
    column to ``--pid``/``--at``; blank lines and ``#`` comments are skipped."""
    name = "standard input" if source == "-" else source
    try:
        if source == "-":
            return list(parse_queries(sys.stdin, name, pid, at))
        with open(source, encoding="utf-8", errors="replace") as fh:
            return list(parse_queries(fh, name, pid, at))
    except OSError as exc:
        raise InputError(f"cannot read addresses from {name}: {exc.strerror}",
                         fix="pass --addresses FILE with one address a line, or - for standard input") from exc


def parse_queries(lines: Iterable[str], name: str, pid: int | None,
                  at: float | None) -> Iterator[tuple[int, int | None, float | None]]:
    """Pure: the queries of ``ADDRESS [PID [AT]]`` lines."""
    from faulthunt.mapper import parse_address

    for n, line in enumerate(lines, 1):
        cols = line.split("#", 1)[0].split()
        if not cols:
            continue
        try:
            if len(cols) > 3:
                raise ValueError("more than three columns")
            address = parse_address(cols[0])
            p = pid if len(cols) < 2 or cols[1] == "-" else int(cols[1])
            t = at if len(cols) < 3 or cols[2] == "-" else float(cols[2])
        except (ValueError, UsageError) as exc:
            why = exc.message if isinstance(exc, UsageError) else str(exc)
            # a one-column line is quoted by the address parser's own message already
            shown = f"{line.strip()[:80]!r}: " if len(cols) > 1 else ""
            raise UsageError(f"{name} line {n}: {shown}{why}",
                             fix="one address a line, optionally its pid and the fault time: "
                                 "0x7f7d_dbe00000 4242 1764683340.25 ('-' for none)") from None
        yield address, p, t


def _json(obj: dict[str, Any]) -> str:
    """One verdict as a JSON line (msgspec: several times faster than json for 10,000 verdicts)."""
    import msgspec

    try:
        return msgspec.json.encode(obj).decode()
    except (TypeError, msgspec.EncodeError):
        return json.dumps(obj, default=str)


def _emit_run(entries: list[dict[str, Any]], as_json: bool, out: IO[str]) -> None:
    if as_json:
        for e in entries:
            out.write(json.dumps(e) + "\n")
        return
    if not entries:
        out.write("no Xid 31 and no sanitizer finding with an address in this run\n")
    for e in entries:
        seq = f", seq {e['seq']}" if e.get("seq") is not None else ""
        head = (f"[xid 31{seq}]" if e.get("origin") == "xid"
                else f"[sanitizer {e.get('kind')} in {e.get('kernel')}]")
        out.write(f"{head} {render(e)}\n")
    out.flush()


def _write_mapping(path: Path, entries: list[dict[str, Any]], *, quiet: bool) -> None:
    """``mapping.json`` after the mapping is shown: a run directory that cannot be written
    (read-only, an unpacked artifact) still gets its mapping on stdout, with a warning."""
    from faulthunt.rundir import DiskFullError, RunDirError, write_json_atomic

    try:
        write_json_atomic(path, entries)
    except DiskFullError:
        raise
    except RunDirError as exc:
        print(f"faulthunt map: not written: {exc.message} (the mapping above is complete; "
              "--json prints it as JSON lines)", file=sys.stderr)
        return
    if not quiet:
        print(f"written: {path}")


def _t(t: float | None) -> str:
    if t is None:
        return "?"
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%H:%M:%S.%f")[:-3] + "Z"


def _alloc(a: dict[str, Any]) -> str:
    s = f"{a.get('kind', 'device')} {hex(a['address'])}+{a['size']} ({a.get('source') or '?'}"
    if a.get("nodeid"):
        s += f", allocated in {a['nodeid']}"
    return s + (f" at {_t(a.get('t'))})" if a.get("t") is not None else ")")


def _off(o: Any) -> str:
    return f"[{o[0]}, {o[1]}]" if isinstance(o, list) else str(o)


def render(e: dict[str, Any]) -> str:
    """Human-readable lines for one verdict object (as ``to_json`` makes it)."""
    v = e.get("verdict")
    where = e["address"] + (" (4 KiB page)" if e.get("page") else "")
    if v is None:
        return f"{where}: not mapped: {e.get('reason')}"
    basis = {"sanitizer": " (from compute-sanitizer's nearest-allocation line, not the ledger)",
             "guard": " (a guard slot: exact)"}.get(str(e.get("basis")), "")
    lines = [f"{where} pid {e.get('pid')}: {v.upper()}{basis}"]
    if e.get("basis") == "guard" and e.get("text"):
        lines.append(f"  {e['text']}")  # the guard's own words, "inside the slack, not guardable" too
    a = e.get("allocation")
    if a:
        lines.append(f"  allocation: {_alloc(a)}, offset {_off(e.get('offset'))}")
        freed = a.get("freed")
        if v == "freed" and freed:
            by = f" in {freed['nodeid']}" if freed.get("nodeid") else ""
            lines.append(f"  freed at {_t(freed.get('t'))}{by} ({freed.get('source') or a.get('source') or '?'})")
            if freed.get("stack"):
                lines.append(f"  freed from {freed['stack'][0]}")
        if a.get("stack"):
            lines.append(f"  allocated from {a['stack'][0]}")
    if v == "null_page":
        lines.append(f"  a null pointer plus {_off(e.get('offset'))} bytes")
    if e.get("container") and v in ("pool_slack", "freed", "inside"):
        lines.append(f"  in pool chunk {_alloc(e['container'])}")
    near = e.get("nearest") or {}
    if v in ("unmapped", "past_end", "before_start", "pool_slack"):
        for side in ("below", "above"):
            n = near.get(side)
            if n:
                lines.append(f"  nearest {side}: {_alloc(n['allocation'])}, distance {_off(n['distance'])}")
            elif v == "unmapped":
                lines.append(f"  nearest {side}: none")
    ks = e.get("launches") or []
    if ks:
        since = f"since sync at {_t(e['launches_since'])}" if e.get("launches_since") else "last recorded"
        lines.append(f"  kernels ({since}): " + ", ".join(k.get("kernel", "?") for k in ks[-5:]))
    if e.get("nodeid"):
        lines.append(f"  test running: {e['nodeid']}")
    if e.get("note"):
        lines.append(f"  note: {e['note']}")
    for p in e.get("pieces") or []:
        if len(e["pieces"]) > 1:
            lines.append(f"  piece {p['range'][0]}..{p['range'][1]}: {p['verdict']} offset {_off(p['offset'])}")
    return "\n".join(lines)
