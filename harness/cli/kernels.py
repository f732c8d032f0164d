"""``faulthunt kernels``: the planted-fault catalog, and one planted kernel run in a fresh process.

    faulthunt kernels list [--json]
    faulthunt kernels run NAME [--twin] [--flavour cuda|numba] [--backend gpu|sim]
    faulthunt kernels suite          # prints the bundled suite's directory
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import IO

HELP = "list the planted-fault kernels (bug, twin, expected evidence) or run one"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="kernels_command", metavar="ACTION")
    lst = sub.add_parser("list", help="the catalog: each planted bug, its twin, its evidence")
    lst.add_argument("--json", action="store_true", help="a JSON list of catalog objects")
    run = sub.add_parser("run", help="run one planted kernel (or its twin) in a fresh process")
    run.add_argument("name")
    run.add_argument("--twin", action="store_true", help="run the correct twin instead")
    run.add_argument("--flavour", choices=("cuda", "numba"), default=None,
                     help="default: cuda where the fault has it, else numba")
    run.add_argument("--backend", choices=("gpu", "sim", "auto"), default="auto",
                     help="sim: numba's CPU simulator and SIMULATED stand-ins")
    run.add_argument("--timeout", type=float, default=120.0, help="backstop, seconds")
    sub.add_parser("suite", help="print the directory of the bundled pytest suite")


def _render_list(out: IO[str] | None = None) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from faulthunt.kernels.catalog import CATALOG

    console = Console(file=out or sys.stdout, width=160)
    table = Table(title="faulthunt planted faults", show_lines=True)
    for col in ("#", "name", "bug / twin", "plain run", "sanitizer", "Xid", "flavours"):
        table.add_column(col, overflow="fold")
    for f in CATALOG:
        ev = f.evidence
        # escape: the bugs are written in code, and rich would take `out[n]` for markup
        table.add_row(*(escape(c) for c in (str(f.number), f.name, f"bug: {f.bug}\ntwin: {f.twin}",
                                            ev.plain, ev.sanitizer, ev.xid, ", ".join(f.flavours))))
    console.print(table)


def run(args: argparse.Namespace) -> int:
    from faulthunt.cli import ExitCode
    from faulthunt.errors import UsageError

    action = getattr(args, "kernels_command", None)
    if action in (None, "list"):
        if getattr(args, "json", False):
            from faulthunt.kernels.catalog import catalog_json

            json.dump(catalog_json(), sys.stdout, indent=2)
            sys.stdout.write("\n")
        else:
            _render_list()
        return ExitCode.OK
    if action == "suite":
        from faulthunt.kernels import SUITE_DIR

        print(SUITE_DIR)
        return ExitCode.OK

    from faulthunt.kernels import catalog
    from faulthunt.kernels.runner import EXIT_UNAVAILABLE, run_isolated

    try:
        fault = catalog.get(args.name)
    except KeyError as exc:
        raise UsageError(str(exc.args[0]), fix="`faulthunt kernels list` names them") from None
    flavour = args.flavour or fault.flavours[0]
    if flavour not in fault.flavours:
        raise UsageError(f"{fault.name} has no {flavour} flavour (it has: "
                         f"{', '.join(fault.flavours)})", fix="drop --flavour")
    variant = "twin" if args.twin else "bug"
    outcome = run_isolated(fault.name, variant, flavour,
                           backend=None if args.backend == "auto" else args.backend,
                           timeout=args.timeout)
    sys.stdout.write(outcome.stdout)
    sys.stderr.write(outcome.stderr)
    res = outcome.result or {}
    if outcome.returncode is None:
        print(f"faulthunt kernels run: {fault.name} ran past {args.timeout:g} s and was killed")
        return ExitCode.FOUND
    if outcome.signal:
        print(f"faulthunt kernels run: {fault.name} ({variant}) died of signal {outcome.signal}")
        return ExitCode.FOUND
    if outcome.returncode == EXIT_UNAVAILABLE:
        print(f"faulthunt kernels run: {fault.name} cannot run here: {res.get('detail')}")
        return ExitCode.TOOL_MISSING
    status = res.get("status", "no result line")
    print(f"faulthunt kernels run: {fault.name} ({variant}, {flavour}, backend "
          f"{res.get('backend', '?')}): {status}: {res.get('detail') or res.get('error') or ''}")
    return ExitCode.OK if outcome.returncode == 0 else ExitCode.FOUND
