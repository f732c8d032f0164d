"""The ``faulthunt`` command: one module per subcommand, one place where errors become exit codes.

Each subcommand module in this package defines::

    HELP: str                                   # one line for ``faulthunt --help``
    def add_arguments(parser: argparse.ArgumentParser) -> None
    def run(args: argparse.Namespace) -> int   # an ExitCode

and is listed in :data:`COMMANDS`. ``run`` calls into the engine modules and returns; it raises
:class:`faulthunt.errors.FaulthuntError` for anything the user can fix, which :func:`main` prints
with its fix and maps to the error's exit code.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from faulthunt import __version__
from faulthunt.errors import ExitCode, FaulthuntError

__all__ = ["COMMANDS", "ExitCode", "build_parser", "console_main", "main"]


#: subcommand name -> module (under faulthunt.cli)
COMMANDS: dict[str, str] = {
    "xid": "xid",
    "stress": "stress",
    "sanitize": "sanitize",
    "map": "map",
    "kernels": "kernels",
    "demo": "demo",
    "stage": "stage",
    "session": "session",
    "doctor": "doctor",
    "report": "report",
    "bisect": "bisect",
    "isolate": "isolate",
    "merge": "merge",
}


def _load(name: str):  # type: ignore[no-untyped-def]
    modname = f"faulthunt.cli.{COMMANDS[name]}"
    try:
        return importlib.import_module(modname)
    except ModuleNotFoundError as exc:
        if exc.name == modname:  # the command is not part of this build
            return None
        raise


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="faulthunt",
        description="Hunt CUDA memory faults in pytest suites: stress, sanitize, map, report.",
    )
    parser.add_argument("--version", action="version", version=f"faulthunt {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        module = _load(name)
        if module is None:
            continue
        cmd = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(cmd)
        cmd.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one faulthunt command; returns its exit status."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if getattr(args, "command", None) is None:
        parser.print_help(sys.stderr)
        return ExitCode.USAGE
    # Commands that pass arguments through (stress -> pytest) declare `passthrough = True`
    # on their namespace; everyone else rejects unknown arguments as argparse would.
    if extra and not getattr(args, "passthrough", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.extra = extra
    try:
        return int(args._run(args))
    except FaulthuntError as exc:
        print(f"faulthunt {args.command}: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"faulthunt {args.command}: interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except BrokenPipeError:
        # `faulthunt xid parse big.log | head`: the reader left; not an error of ours.
        try:
            sys.stdout.close()
        except OSError:
            pass
        return ExitCode.OK


def console_main() -> None:
    """Entry point of the ``faulthunt`` console script."""
    sys.exit(main())
