"""The ``faulthunt`` command: one module per subcommand, one place where errors become exit codes.

Each subcommand module in this package defines::

    HELP: str                                   # one line for ``faulthunt --help``
    def add_arguments(parser: argparse.ArgumentParser) -> None
    def run(args: argparse.Namespace) -> int   # an ExitCode

and is listed in :data:`COMMANDS` with that line. Only the module of the command being run is
imported (as pip's command registry does): ``faulthunt --help`` lists every command from the
table, and ``faulthunt xid parse`` does not pay for importing the stress runner, the sanitizer
and the report engine first (tests/test_cli.py holds the table equal to each module's HELP).
``run`` calls into the engine modules and returns; it raises
:class:`faulthunt.errors.FaulthuntError` for anything the user can fix, which :func:`main` prints
with its fix and maps to the error's exit code. Output that cannot be written for lack of room
(``faulthunt xid parse > /dev/full``, a full disk, a quota, ``ulimit -f``) ends as "disk full
writing the output" with the exit status stress gives a full disk (3), never a traceback.
"""

from __future__ import annotations

import argparse
import errno
import gc
import importlib
import os
import sys
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING, Any

from faulthunt import __version__
from faulthunt.errors import ExitCode, FaulthuntError

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

__all__ = ["COMMANDS", "ExitCode", "build_parser", "console_main", "main"]

#: no room to write: a full disk, a quota, the file size limit (as faulthunt.rundir.FULL_ERRNOS,
#: which this module does not import: it is on the start-up path of every command)
_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
#: the exit status of a full disk, as stress gives it (faulthunt.stress.analyse.exit_status_for)
DISK_FULL_STATUS = ExitCode.BAD_INPUT


#: subcommand name -> (module under faulthunt.cli, its HELP line)
COMMANDS: dict[str, tuple[str, str]] = {
    "xid": ("xid", "parse, explain and follow NVIDIA Xid reports in the kernel log"),
    "stress": ("stress", "stress-run a pytest suite (xdist + repeat) and attribute crashes, hangs and Xids to tests"),
    "sanitize": ("sanitize", "rerun a run's failing tests under compute-sanitizer and reduce its output to the "
                 "offending kernels"),
    "map": ("map", "map fault addresses (Xid 31 pages, sanitizer addresses) to allocations, kernels and tests"),
    "kernels": ("kernels", "list the planted-fault kernels (bug, twin, expected evidence) or run one"),
    "demo": ("demo", "hunt faulthunt's own planted GPU faults end to end (simulated on a machine without a GPU)"),
    "stage": ("stage", "write a repro kit (reproducer, sanitizer, py-spy and kernel-log scripts, cheatsheet) for a "
              "run's failures"),
    "session": ("session", "open a repro kit in tmux (tmate with authorized keys when installed), print the attach "
                "command"),
    "doctor": ("doctor", "check GPUs, driver, CUDA, tools, kernel-log and ptrace access, and library SASS/PTX "
               "coverage"),
    "report": ("report", "write the issue-ready report of a run: Markdown, JSON, or HTML with a timeline"),
    "bisect": ("bisect", "find the first bad git ref or package version of a flaky failure (stress runs as the "
               "oracle, flaky-aware)"),
    "isolate": ("isolate", "run a test alone and after its predecessors; shrink the predecessors to the polluting set"),
    "merge": ("merge", "combine run directories from several runners into one, with provenance, and recompute the "
              "summary"),
}


def load_command(name: str) -> Any:
    """The module of subcommand ``name``."""
    return importlib.import_module(f"faulthunt.cli.{COMMANDS[name][0]}")


def _command_in(argv: Sequence[str]) -> str | None:
    """The subcommand named on the command line (the first word that is not an option), if any."""
    for arg in argv:
        if arg == "--":
            return None
        if not arg.startswith("-"):
            return arg if arg in COMMANDS else None
    return None


class _Formatter(argparse.HelpFormatter):
    """argparse's formatter, sized without importing shutil (argparse imports it for every parser
    with subcommands: a tenth of the start-up of a short command)."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None) -> None:
        if width is None:
            stdout = sys.__stdout__
            try:
                columns = int(os.environ.get("COLUMNS", "0")) or (os.get_terminal_size(stdout.fileno()).columns
                                                                  if stdout is not None else 80)
            except (ValueError, OSError):  # not a terminal, COLUMNS=junk
                columns = 80
            width = max(columns, 20) - 2
        super().__init__(prog, indent_increment, max_help_position, width)


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose help is laid out by :class:`_Formatter`; its subcommand parsers
    (and theirs) are of this class too (argparse makes them with the parent's class)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        """argparse's, but a full disk is not swallowed (``--help > /dev/full`` must not exit 0);
        argparse ignores any other error of the write (a closed or missing stream)."""
        if not message:
            return
        try:
            out = file or sys.stderr
            out.write(message)
            getattr(out, "flush", lambda: None)()
        except (AttributeError, OSError) as exc:
            if isinstance(exc, OSError) and exc.errno in _FULL_ERRNOS:
                raise


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser for ``argv``: every command listed, the arguments of the one ``argv`` names.

    ``argv`` None builds every command's arguments (for documentation and tests).
    """
    parser = _Parser(
        prog="faulthunt",
        description="Hunt CUDA memory faults in pytest suites: stress, sanitize, map, report.",
    )
    parser.add_argument("--version", action="version", version=f"faulthunt {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = _command_in(argv) if argv is not None else None
    for name, (_, help_line) in COMMANDS.items():
        if argv is not None and name != chosen:
            sub.add_parser(name, help=help_line, description=help_line)
            continue
        module = load_command(name)
        cmd = sub.add_parser(name, help=help_line, description=module.HELP)
        module.add_arguments(cmd)
        cmd.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None, *, exiting: bool = False) -> int:
    """Run one faulthunt command; returns its exit status. ``exiting``: the process ends after
    it (the console script), so a command may leave process-wide state (the collector's frozen
    objects) as it is; a caller in the same process (tests) gets it back as it was."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return _main(argv, exiting)
    except OSError as exc:
        if exc.errno not in _FULL_ERRNOS:
            raise
        command = _command_in(argv)
        return _output_full(f"faulthunt {command}" if command else "faulthunt", exc)


def _main(argv: list[str], exiting: bool = False) -> int:
    parser = build_parser(argv)
    args, extra = parser.parse_known_args(argv)
    if getattr(args, "command", None) is None:
        parser.print_help(sys.stderr)
        return ExitCode.USAGE
    # Commands that pass arguments through (stress -> pytest) declare `passthrough = True`
    # on their namespace; everyone else rejects unknown arguments as argparse would.
    if extra and not getattr(args, "passthrough", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.extra = extra
    args.exiting = exiting
    if not getattr(args, "enables_collector", False):
        gc.enable()  # off while faulthunt started (console_main)
    try:
        status = int(args._run(args))
        sys.stdout.flush()  # output still buffered meets a full disk here, not at exit
        return status
    except FaulthuntError as exc:
        # a subcommand may name itself ("sanitize parse") so its errors read like its warnings
        _tell(f"faulthunt {getattr(args, 'command_label', None) or args.command}: {exc}")
        return exc.exit_code
    except KeyboardInterrupt:
        _tell(f"faulthunt {getattr(args, 'command_label', None) or args.command}: interrupted")
        return ExitCode.INTERRUPTED
    except BrokenPipeError:
        # `faulthunt xid parse big.log | head`: the reader left; not an error of ours.
        try:
            sys.stdout.close()
        except OSError:
            pass
        return ExitCode.OK


def _tell(text: str) -> None:
    """A line on stderr, if stderr can take it (it may be the full file)."""
    try:
        print(text, file=sys.stderr, flush=True)
    except OSError:
        pass


def _output_full(who: str, exc: OSError) -> int:
    """Say that the output could not be written for lack of room; the full disk's status."""
    where = f"at {exc.filename}" if exc.filename else "writing the output"
    why = exc.strerror or str(exc)
    if exc.errno == errno.EFBIG:
        why += " (the file size limit, ulimit -f)"
    _tell(f"{who}: disk full {where}: {why}\n  fix: free space where the output goes, "
          "or send it to another filesystem")
    return DISK_FULL_STATUS


def _drain(stream: IO[str] | None) -> bool:
    """Flush ``stream``; when that fails, point its descriptor at /dev/null so that Python's
    own flush at exit does not fail again (exit status 120 and an "Exception ignored" message).
    Returns whether everything was written; re-raises nothing."""
    if stream is None:
        return True
    try:
        stream.flush()
        return True
    except (OSError, ValueError):  # ValueError: closed after a broken pipe
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, stream.fileno())
            os.close(null)
        except (OSError, ValueError):
            pass
        return False


def console_main() -> None:
    """Entry point of the ``faulthunt`` console script."""
    # Start-up makes tens of thousands of objects that live as long as the process (modules,
    # classes, functions, the parser) and next to no garbage: the cyclic collector's passes
    # over them while the modules import are wasted (about 8 M instructions of a stress run's
    # parent). It is back on before a command runs (_main), or, for a command that says it
    # turns it on itself (`enables_collector`: stress, once pytest has started), then.
    gc.disable()
    if _command_in(sys.argv[1:]) is not None:  # --help and --version import no msgspec
        from faulthunt.leanimport import msgspec_without_typing_extensions

        msgspec_without_typing_extensions()  # this process is faulthunt's own: the module says why
    try:
        status: str | int | None = main(exiting=True)
    except SystemExit as exc:  # argparse after --help, --version or a usage error: flush its text
        status = exc.code
        try:
            sys.stdout.flush()
        except OSError as err:
            if err.errno in _FULL_ERRNOS:
                status = _output_full("faulthunt", err)
    _drain(sys.stdout)
    _drain(sys.stderr)
    _settle_heap()
    sys.exit(status)


def _settle_heap() -> None:
    """Spare the exit its cyclic-GC passes over every object still alive.

    Interpreter shutdown runs the cyclic collector over the whole heap, more than once: about 4 ms
    of CPU of a short command (``faulthunt --version``, ``xid parse`` of a small log; measured
    paired, docs/performance.md). One collection now still finalizes every cycle that is garbage
    (as the exit would have); freezing what is left moves it where the exit's passes do not look.
    atexit handlers and the module teardown still run; objects alive at exit are freed by it as
    before, only not scanned for cycles, which Python never promised to finalize at exit.
    """
    gc.collect()
    gc.freeze()
