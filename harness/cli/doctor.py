"""``faulthunt doctor``: is this machine fit to hunt CUDA faults, and if not, what to do."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import IO, Any

from faulthunt.archcheck import parse_arch
from faulthunt.errors import InputError

HELP = "check GPUs, driver, CUDA, tools, kernel-log and ptrace access, and library SASS/PTX coverage"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``faulthunt doctor``."""
    parser.add_argument("--json", action="store_true", help="print everything as one JSON object")
    parser.add_argument("--lib", action="append", default=[], metavar="PATH",
                        help="also check this CUDA library's SASS/PTX (repeatable)")
    parser.add_argument("--pid", action="append", type=int, default=[], metavar="PID",
                        help="check the libraries mapped by this running process, e.g. a pytest worker")
    parser.add_argument("--cc", action="append", default=[], metavar="CC",
                        help="check libraries against this compute capability (7.0, sm_70) instead of "
                             "the visible GPUs; works without a GPU (repeatable)")
    parser.add_argument("--no-wheels", action="store_true",
                        help="do not scan the nvidia-*/torch wheels on sys.path for CUDA libraries")
    parser.add_argument("--all", action="store_true",
                        help="list every library checked, not only those with problems")
    parser.add_argument("--strict", action="store_true",
                        help="exit 1 when a problem or a warning is listed (default: exit 0, "
                             "report only); notes never fail")


def render(full: dict[str, Any], out: IO[str], show_all: bool = False) -> None:
    """The human-readable doctor report: facts first, then each problem with its fix."""
    w = out.write
    w(f"host        {full.get('host')}  ({full.get('os')}, kernel {full.get('kernel')})\n")
    w(f"python      {full.get('python')}  faulthunt {full.get('faulthunt')}\n")
    gpus = full.get("gpus") or []
    if not gpus:
        w(f"gpus        none: {full.get('gpu_note')}\n")
    for gpu in gpus:
        w(f"gpu {gpu.get('index')}       {gpu.get('name')}  cc {gpu.get('cc')}  pci {gpu.get('pci')}\n")
    w(f"driver      {full.get('driver') or '-'}  module {full.get('driver_module') or 'unknown'}  "
      f"CUDA driver {full.get('cuda_driver') or '-'}\n")
    runtimes = ", ".join(f"{r.get('version') or '?'} ({r['path']})" for r in full.get("cuda_runtime") or [])
    w(f"cuda rt     {runtimes or 'none found'}\n")
    hmm = full.get("hmm") or {}
    modes = ", ".join(f"gpu{g['index']}={g.get('addressing_mode')}" for g in hmm.get("gpus", []))
    w(f"hmm         {modes or 'no GPU'}; nvidia_uvm uvm_disable_hmm={hmm.get('uvm_disable_hmm') or '-'}\n")
    w(f"nvml        {'yes' if full.get('nvml') else 'no'}\n")
    for tool, info in (full.get("tools") or {}).items():
        where = f"{info.get('version') or '?'}  {info['path']}" if info.get("path") else "missing"
        w(f"{tool:<18}{where}\n")
    klog = full.get("kernel_log") or {}
    w(f"kernel log  /dev/kmsg {'readable' if klog.get('kmsg_readable') else 'NOT readable'}, "
      f"dmesg_restrict={klog.get('dmesg_restrict')}, CAP_SYSLOG={'yes' if klog.get('cap_syslog') else 'no'}\n")
    pt = full.get("ptrace") or {}
    w(f"ptrace      yama ptrace_scope={pt.get('ptrace_scope') if pt.get('ptrace_scope') is not None else 'none (no Yama)'}, "
      f"CAP_SYS_PTRACE={'yes' if pt.get('cap_sys_ptrace') else 'no'}\n")
    libs = full.get("libraries") or []
    archs = ", ".join(full.get("device_archs") or []) or "no device"
    carrying = len({lib["path"] for lib in libs})
    w(f"libraries   {full.get('libraries_checked', 0)} examined, {carrying} carry GPU code; "
      f"checked against {archs}\n")
    for lib in libs:
        if show_all or lib.get("problem") or lib.get("verdict") == "jit":  # unseen: a note below
            w(f"  {lib['message']}\n")
    problems = [p for p in full.get("problems") or [] if p["severity"] != "info"]
    notes = [p for p in full.get("problems") or [] if p["severity"] == "info"]
    for note in notes:
        w(f"note: {note['message']}\n")
        if note.get("area") == "libraries" and note.get("fix"):
            w(f"  {note['fix']}\n")
    if not problems:
        w("no problems found\n")
        return
    w(f"\n{len(problems)} problem(s):\n")
    for problem in problems:
        w(f"- [{problem['severity']}] {problem['message']}\n")
        if problem["fix"]:
            w(f"  fix: {problem['fix']}\n")


def run(args: argparse.Namespace) -> int:
    """Collect, print, and (with --strict) fail on problems."""
    from faulthunt.identity import collect_full

    ccs = [parse_arch(cc).cc for cc in args.cc]  # InputError with a fix for a bad --cc
    for lib in args.lib or ():
        if not Path(lib).is_file():  # it read "1 CUDA libraries not checked: cuobjdump not found"
            raise InputError(f"--lib {lib}: no such file",
                             fix="give the path of a CUDA library (.so), e.g. from `ldd`; --pid PID "
                                 "checks every library a running process has loaded")
    full = collect_full(libraries=args.lib, pids=args.pid, device_ccs=ccs or None,
                        scan_wheels=not args.no_wheels)
    if args.json:
        json.dump(full, sys.stdout, indent=2, sort_keys=True, default=str)
        sys.stdout.write("\n")
    else:
        render(full, sys.stdout, show_all=args.all)
    # what the report lists under "N problem(s)": every severity but the informational notes
    listed = any(p.get("severity") != "info" for p in full.get("problems") or [])
    return 1 if (args.strict and listed) else 0
