"""``faulthunt sanitize``: rerun recorded failures under compute-sanitizer; ``sanitize parse`` a saved log.

Thin: parses arguments, calls :func:`faulthunt.sanitizer.run_sanitize` or the parsers.
"""

from __future__ import annotations

import argparse
import codecs
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

if TYPE_CHECKING:
    from faulthunt.records.sanitizer import SanitizerRecord

HELP = "rerun a run's failing tests under compute-sanitizer and reduce its output to the offending kernels"

TOOL_CHOICES = ("memcheck", "racecheck", "initcheck", "synccheck", "all")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", default=None,
                        help="run directory or id under .faulthunt/runs (default: the latest)")
    parser.add_argument("--tool", choices=TOOL_CHOICES, default="memcheck",
                        help="sanitizer tool, or all four one after another (default memcheck)")
    parser.add_argument("--last-failed", action="store_true",
                        help="rerun pytest's last-failed tests (.pytest_cache) instead of a run's")
    parser.add_argument("--test", action="append", default=None, metavar="NODEID",
                        help="rerun this test instead of the recorded ones (repeatable)")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="seconds per test under the sanitizer before it is killed (default 600)")
    parser.add_argument("--padding", type=int, default=None, metavar="N",
                        help="memcheck: N bytes of padding after each allocation (catches "
                             "overflows into a neighbouring buffer)")
    parser.add_argument("--print-limit", type=int, default=1000, metavar="K",
                        help="records the sanitizer prints per test (default 1000; the summary still "
                             "counts all)")
    parser.add_argument("--report-api-errors", default="no", choices=("no", "explicit", "extended", "all"),
                        help="memcheck API error reports (default no: frameworks such as CuPy flood them)")
    parser.add_argument("--leak-check", action="store_true", help="memcheck: report leaked allocations")
    parser.add_argument("--kernel", action="append", default=[], metavar="FILTER",
                        help="only check kernels matching FILTER (kns=substring, kne=name, regex=...)")
    parser.add_argument("--ledger", default="auto",
                        help="allocation ledger of the rerun: auto, cupti, numba, cupy, torch, off (default auto)")
    parser.add_argument("--cwd", type=Path, default=None,
                        help="directory to run the tests in (default: the run's own)")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress and no table")
    sub = parser.add_subparsers(dest="sanitize_action", metavar="parse")
    p = sub.add_parser("parse", help="parse a saved compute-sanitizer log or XML file",
                       description="parse a saved compute-sanitizer text log or --xml file")
    p.add_argument("path", type=Path, help="log or XML file ('-' reads stdin)")
    p.add_argument("--json", action="store_true",
                   help="JSON Lines: one object per error record, in file order")
    p.add_argument("--prefix", default=None, help="the --prefix the log was made with (default: from its banner)")
    p.add_argument("--as-tool", dest="as_tool", default=None, choices=TOOL_CHOICES[:-1],
                   help="the tool that made the log, when it cannot be told from the records")


#: bytes read at a time: ``sanitize parse`` streams, so its memory does not grow with the file
_CHUNK = 1 << 20


def _chunks(stream: BinaryIO) -> Iterator[bytes]:
    while True:
        chunk = stream.read(_CHUNK)
        if not chunk:
            return
        yield chunk


def _head(chunks: Iterator[bytes]) -> bytes:
    """The first bytes: enough to tell XML from text (512 characters past leading blanks) and binary."""
    head = b""
    for chunk in chunks:
        head += chunk
        if len(head.lstrip(b"\xef\xbb\xbf \t\r\n")) >= 2048 or len(head) >= 4 * _CHUNK:
            break
    return head


def _decoded(chunks: Iterable[bytes]) -> Iterator[str]:
    """UTF-8 text of a byte stream, invalid bytes replaced (as ``bytes.decode(errors="replace")``)."""
    decode = codecs.getincrementaldecoder("utf-8")("replace").decode
    for chunk in chunks:
        yield decode(chunk)
    yield decode(b"", True)


def _parse(args: argparse.Namespace) -> int:
    import itertools

    from faulthunt.errors import InputError
    from faulthunt.sanitizer.parse_text import TextLogParser, iter_lines
    from faulthunt.sanitizer.parse_xml import XmlParser, looks_like_xml

    try:
        stream = sys.stdin.buffer if str(args.path) == "-" else open(args.path, "rb")  # noqa: SIM115
    except OSError as exc:
        raise InputError(f"cannot read {args.path}: {exc.strerror}",
                         fix="check the path and its permissions") from exc
    with stream:
        chunks = _chunks(stream)
        try:
            head = _head(chunks)
        except OSError as exc:
            raise InputError(f"cannot read {args.path}: {exc.strerror}",
                             fix="check the path and its permissions") from exc
        data = itertools.chain([head], chunks)
        if looks_like_xml(head.decode("utf-8", "replace")):
            xml = XmlParser()
            records = xml.records(_decoded(data))
            if args.as_tool:
                import dataclasses
                records = (dataclasses.replace(r, tool=args.as_tool) for r in records)
            status = _emit(records, args)
            if not xml.complete:
                print(f"faulthunt sanitize parse: {args.path}: the XML ends early; "
                      f"read {xml.count} complete record(s)", file=sys.stderr)
            return status
        text = TextLogParser(prefix=args.prefix, tool=args.as_tool)
        status = _emit(text.records(iter_lines(data)), args)
    if not text.count and b"\x00" in head[:4096]:
        print(f"faulthunt sanitize parse: {args.path} looks binary (a --save file without --xml?); "
              f"turn it into text with `compute-sanitizer --read {args.path}`", file=sys.stderr)
    elif text.truncated:
        print(f"faulthunt sanitize parse: {args.path}: the log ends inside a record "
              "(kept as far as it goes)", file=sys.stderr)
    return status


def _emit(records: Iterable[SanitizerRecord], args: argparse.Namespace) -> int:
    """JSON Lines of every record, or the findings table; the exit status."""
    if args.json:
        out = sys.stdout
        batch: list[str] = []
        size = 0
        for r in records:
            text = r.json_text()
            batch.append(text)
            size += len(text)
            if size >= _CHUNK:  # written a megabyte at a time
                batch.append("")
                out.write("\n".join(batch))
                batch, size = [], 0
        if batch:
            batch.append("")
            out.write("\n".join(batch))
        return 0
    from faulthunt.sanitizer.reduce import Reducer
    from faulthunt.sanitizer.render import print_table, render_headline

    findings = Reducer().add_all(records).findings()
    if not findings:
        print(f"{args.path}: no sanitizer error records")
        return 0
    print_table(findings, sys.stdout)
    print(f"offending kernel: {render_headline(findings[0])}")
    return 1


def run(args: argparse.Namespace) -> int:
    if getattr(args, "sanitize_action", None) == "parse":
        return _parse(args)
    from faulthunt.rundir import resolve_run_dir
    from faulthunt.sanitizer.run import run_sanitize

    run_dir = resolve_run_dir(args.run) if args.run is not None else None
    result = run_sanitize(run_dir, tool=args.tool, timeout=args.timeout, last_failed=args.last_failed,
                          padding=args.padding, cwd=args.cwd, quiet=args.quiet,
                          print_limit=args.print_limit, report_api_errors=args.report_api_errors,
                          leak_check=args.leak_check, kernel_filters=args.kernel, tests=args.test,
                          ledger=args.ledger)
    return result.exit_status
