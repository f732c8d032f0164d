"""``faulthunt session [--run RUN]``: the repro kit in a tmux/tmate session, with a time limit."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

HELP = "open a repro kit in tmux (tmate with authorized keys when installed), print the attach command"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``faulthunt session``."""
    from faulthunt.session import DEFAULT_TIMEOUT
    from faulthunt.stage import DEFAULT_KIT_DIR

    parser.add_argument("--run", default=None, help="stage this run first (default: the latest) "
                        "unless --kit names an existing kit")
    parser.add_argument("--kit", type=Path, default=None,
                        help=f"the kit directory (default {DEFAULT_KIT_DIR}; staged when missing)")
    parser.add_argument("--test", action="append", default=None, metavar="NODEID",
                        help="stage these tests instead of the run's failures (repeatable), as "
                             "`faulthunt stage --test`")
    parser.add_argument("--name", default="faulthunt", help="tmux session name")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--tmate", dest="tmate", action="store_true", default=None,
                       help="use tmate (default: when installed and --authorized-keys or --allow-open "
                            "is given); with no tmate server reachable, falls back to local tmux "
                            "and says so")
    group.add_argument("--no-tmate", dest="tmate", action="store_false", help="local tmux only")
    parser.add_argument("--authorized-keys", type=Path, default=None, metavar="FILE",
                        help="ssh public keys allowed to join a tmate session")
    parser.add_argument("--allow-open", action="store_true",
                        help="allow a tmate session without --authorized-keys (anyone with the link)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                        help=f"seconds before the session is killed (default {DEFAULT_TIMEOUT:g}); "
                             "touch KIT/continue ends it early")
    parser.add_argument("--start", action="store_true",
                        help="run the reproducer at once (default: typed, not run)")
    parser.add_argument("--count", type=int, default=None, help="count for run_reproducer.sh")
    parser.add_argument("--wait", action="store_true",
                        help="block until the session ends (CI: keeps the job alive while you debug)")


def run(args: argparse.Namespace) -> int:
    """Stage if needed, open the session, print how to attach; with --wait, block until it ends."""
    from faulthunt.rundir import resolve_run_dir
    from faulthunt.session import local_plan, open_session, plan_session, wait_session
    from faulthunt.stage import DEFAULT_KIT_DIR, stage

    kit = args.kit or DEFAULT_KIT_DIR
    if args.run is not None or args.test or not (kit / "run_reproducer.sh").exists():
        stage(resolve_run_dir(args.run), kit, tests=args.test)
    plan = plan_session(kit, name=args.name, use_tmate=args.tmate,
                        authorized_keys=args.authorized_keys, allow_open=args.allow_open,
                        timeout=args.timeout, start_reproducer=args.start, count=args.count)
    info = open_session(plan)
    if info["fallback"]:
        print(f"tmate: {info['fallback']}; opened the same kit in a local tmux session instead")
        plan = local_plan(plan)
    print(f"session {info['name']} ({plan.tool}) open in {plan.kit}; ends in {plan.timeout:g} s "
          f"or when you `touch {shlex.quote(str(plan.kit / 'continue'))}`")
    print(f"attach: {info['attach']}")
    if info["ssh"]:
        print(f"remote: {info['ssh']}" + ("  (keys in " + str(plan.authorized_keys) + " only)"
                                          if plan.authorized_keys else ""))
    if info["web"]:
        print(f"web:    {info['web']}  (OPEN: anyone with this link can type here)")
    if args.wait:
        why = wait_session(plan)
        print(f"session {info['name']} ended ({why})")
    return 0
