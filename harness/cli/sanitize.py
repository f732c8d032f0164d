"""``faulthunt sanitize``: rerun recorded failures under compute-sanitizer; ``sanitize parse`` a saved log.

Thin: parses arguments, calls :func:`faulthunt.sanitizer.run_sanitize` or the parsers, prints the
result with :mod:`faulthunt.report.sanitize`, and decides the exit status (:func:`exit_status`).
"""

from __future__ import annotations

import argparse
import codecs
import itertools
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from faulthunt.errors import ExitCode, UsageError

if TYPE_CHECKING:
    from faulthunt.records.sanitizer import SanitizerRecord
    from faulthunt.sanitizer.run import SanitizeResult

HELP = "rerun a run's failing tests under compute-sanitizer and reduce its output to the offending kernels"

TOOL_CHOICES = ("memcheck", "racecheck", "initcheck", "synccheck", "all")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", default=None,
                        help="run directory or id under .faulthunt/runs (default: the latest)")
    parser.add_argument("--tool", choices=TOOL_CHOICES, default="memcheck",
                        help="sanitizer tool, or all four, each with its own runs (default memcheck)")
    parser.add_argument("--last-failed", action="store_true",
                        help="rerun pytest's last-failed tests (.pytest_cache) instead of a run's")
    parser.add_argument("--test", action="append", default=None, metavar="NODEID",
                        help="rerun this test instead of the recorded ones (repeatable)")
    parser.add_argument("--count", type=int, default=None, metavar="N",
                        help="runs per test, stopping at the first finding (default: enough runs to "
                             "see the stress run's failure rate with 95%% confidence, else 1)")
    parser.add_argument("--until-found", action="store_true",
                        help="no run limit: rerun each test until its fault shows or the budget ends "
                             "(with --count N: at most N)")
    parser.add_argument("--keep-going", action="store_true",
                        help="do every run of --count even after the fault showed (its rate under the "
                             "sanitizer; timing comparisons)")
    parser.add_argument("--budget", default="30m", metavar="TIME",
                        help="time for the whole sanitize, e.g. 90s, 10m, 2h; then no run starts and "
                             "the runs going are stopped (default 30m; 0 or none: no limit)")
    parser.add_argument("-n", "--parallel", type=int, default=1, metavar="N",
                        help="sanitizer processes at once (the GPU runs several; default 1)")
    parser.add_argument("--ids", choices=("auto", "exact", "base"), default="auto",
                        help="rerun the recorded ids with their repeat step and the stress run's --count "
                             "(exact), the base ids (base), or exact where recorded (auto, the default)")
    parser.add_argument("--with-predecessors", action="store_true",
                        help="rerun each test after the tests that ran before it in its stress worker, "
                             "in the recorded order (for a fault that needs its predecessors)")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="seconds per run under the sanitizer before it is killed (default 600)")
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
    p.set_defaults(command_label="sanitize parse")  # errors say which command: cli._main
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


def _is_device(stream: BinaryIO) -> bool:
    """A character or block device: read to its end, /dev/zero or /dev/urandom never ends."""
    import os
    import stat

    mode = os.fstat(stream.fileno()).st_mode
    return stat.S_ISCHR(mode) or stat.S_ISBLK(mode)


def _decoded(chunks: Iterable[bytes]) -> Iterator[str]:
    """UTF-8 text of a byte stream, invalid bytes replaced (as ``bytes.decode(errors="replace")``)."""
    decode = codecs.getincrementaldecoder("utf-8")("replace").decode
    for chunk in chunks:
        yield decode(chunk)
    yield decode(b"", True)


def _parse(args: argparse.Namespace) -> int:
    import gc

    # The parsers' records, frames and remembered lines hold no reference cycles: the cyclic
    # collector would only walk the young records again and again and free nothing (as in
    # `xid parse`). Back on afterwards, whatever happens.
    was_on = gc.isenabled()
    gc.disable()
    try:
        return _parse_log(args)
    finally:
        if was_on:
            gc.enable()


def _parse_log(args: argparse.Namespace) -> int:
    from faulthunt.errors import InputError
    from faulthunt.sanitizer.parse_text import TextLogParser, iter_line_batches
    from faulthunt.sanitizer.parse_xml import XmlParser, looks_like_xml

    try:
        stream = sys.stdin.buffer if str(args.path) == "-" else open(args.path, "rb")  # noqa: SIM115
    except OSError as exc:
        raise InputError(f"cannot read {args.path}: {exc.strerror}",
                         fix="check the path and its permissions") from exc
    if stream is not sys.stdin.buffer and _is_device(stream):
        stream.close()
        raise InputError(f"{args.path} is a device, not a log (/dev/zero never ends, a tty waits for "
                         "typing)", fix="pass a saved compute-sanitizer log or --xml file, or '-' "
                                        "and pipe the tool's output into it")
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
            status = _emit(_batched(records), args)
            if not xml.complete:
                print(f"faulthunt sanitize parse: {args.path}: the XML ends early; "
                      f"read {xml.count} complete record(s)", file=sys.stderr)
            return status
        text = TextLogParser(prefix=args.prefix, tool=args.as_tool)
        status = _emit(text.record_batches(iter_line_batches(data)), args)
    if not text.count and b"\x00" in head[:4096]:
        print(f"faulthunt sanitize parse: {args.path} looks binary (a --save file without --xml?); "
              f"turn it into text with `compute-sanitizer --read {args.path}`", file=sys.stderr)
    elif text.truncated:
        print(f"faulthunt sanitize parse: {args.path}: the log ends inside a record "
              "(kept as far as it goes)", file=sys.stderr)
    return status


def _batched(records: Iterable[SanitizerRecord], size: int = 512) -> Iterator[list[SanitizerRecord]]:
    it = iter(records)
    while chunk := list(itertools.islice(it, size)):
        yield chunk


def _emit(batches: Iterable[list[SanitizerRecord]], args: argparse.Namespace) -> int:
    """JSON Lines of every record, or the findings table; the exit status."""
    if args.json:
        from faulthunt.records.sanitizer import json_lines

        out = sys.stdout
        pending: list[str] = []
        size = 0
        for batch in batches:
            texts = json_lines(batch)
            pending += texts
            size += sum(map(len, texts))
            if size >= _CHUNK:  # written a megabyte at a time
                pending.append("")
                out.write("\n".join(pending))
                pending, size = [], 0
        if pending:
            pending.append("")
            out.write("\n".join(pending))
        return 0
    from faulthunt.sanitizer.reduce import Reducer
    from faulthunt.sanitizer.render import print_table, render_headline

    findings = Reducer().add_all(itertools.chain.from_iterable(batches)).findings()
    if not findings:
        print(f"{args.path}: no sanitizer error records")
        return 0
    print_table(findings, sys.stdout)
    print(f"offending kernel: {render_headline(findings[0])}")
    return 1


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*$")


def parse_duration(text: str) -> float | None:
    """Seconds of ``90``, ``90s``, ``10m``, ``2h``; None for ``0`` or ``none`` (no limit)."""
    if text.strip().lower() in ("none", "0", "off"):
        return None
    m = _DURATION.match(text)
    if not m:
        raise UsageError(f"--budget {text!r} is not a duration", fix="write it as 90s, 10m or 2h (or none)")
    seconds = float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]
    return seconds or None


def exit_status(result: SanitizeResult) -> int:
    """The exit status of a sanitize (docs/sanitize.md): 1 when a fault showed (a finding, a
    failure under the sanitizer, a run past its timeout), 4 when no test could be checked, 0
    when nothing came back (each test's line says in how many runs)."""
    kinds = {o.outcome for o in result.outcomes}
    if result.findings or kinds & {"found", "reproduced_silent", "timed_out"}:
        return ExitCode.FOUND
    if kinds == {"not_checked"}:
        return ExitCode.TOOL_MISSING  # as good as no tool: nothing was checked
    return ExitCode.OK


def show(result: SanitizeResult, out: object = None, err: object = None) -> None:
    """The outcome table, the findings table and the verdict on stdout; the notes on stderr."""
    from faulthunt.report.sanitize import print_outcomes, print_table, render_verdict

    out = out or sys.stdout
    err = err or sys.stderr
    if result.outcomes:
        print_outcomes(result.outcomes, out)  # type: ignore[arg-type]
    if result.findings:
        print_table(result.findings, out)  # type: ignore[arg-type]
    print(render_verdict(result.outcomes, result.findings), file=out)  # type: ignore[arg-type]
    for d in result.dropped:
        print(f"faulthunt sanitize: left out {d}", file=err)  # type: ignore[arg-type]
    for note in result.notes:
        print(f"faulthunt sanitize: {note}", file=err)  # type: ignore[arg-type]


def options(args: argparse.Namespace) -> object:
    """The :class:`~faulthunt.sanitizer.run.SanitizeOptions` of the command line."""
    from faulthunt.sanitizer.run import SanitizeOptions

    tests: Sequence[str] | None = args.test
    return SanitizeOptions(
        tool=args.tool, count=args.count, until_found=args.until_found, keep_going=args.keep_going,
        budget=parse_duration(args.budget), parallel=args.parallel, ids=args.ids,
        with_predecessors=args.with_predecessors, timeout=args.timeout, padding=args.padding,
        print_limit=args.print_limit, report_api_errors=args.report_api_errors,
        leak_check=args.leak_check, kernel_filters=tuple(args.kernel),
        ledger=args.ledger, tests=tuple(tests) if tests is not None else None,
        last_failed=args.last_failed, cwd=args.cwd)


def run(args: argparse.Namespace) -> int:
    if getattr(args, "sanitize_action", None) == "parse":
        return _parse(args)
    from faulthunt.report.ci import write_ci_outputs  # GitHub step summary and annotations
    from faulthunt.rundir import resolve_run_dir
    from faulthunt.sanitizer.run import run_sanitize

    run_dir = resolve_run_dir(args.run) if args.run is not None else None
    result = run_sanitize(run_dir, options(args), quiet=args.quiet)  # type: ignore[arg-type]
    if not args.quiet:
        show(result)
    for line in write_ci_outputs(result.out_dir.parent, "sanitize"):
        if not args.quiet:
            print(f"faulthunt sanitize: {line}", file=sys.stderr)
    return exit_status(result)
