"""Kernel-log rows: ``faulthunt xid parse`` as a user runs it, against ``grep 'NVRM: Xid' FILE > out``.

Every row runs the whole command as a process (start-up, imports, parsing, output written to a
file) on a generated 1,000,000-line kernel log, paired and interleaved with the baseline on the
same file (benchrows.paired). The baseline prints every ``NVRM: Xid`` line to a file: the least
any Xid reader must do (``grep -c`` stops at nothing and prints nothing: not a baseline). Goal: at
most 3x the baseline on every input shape, so that no quadratic path can hide:

- ``plain 1%``: ordinary kernel lines (USB, network, filesystem, audit, NVRM lines that are not Xid
  reports) and 1% Xid reports of the 580 driver in the raw dmesg container, pids varying so that
  repeated bodies are as rare as in a real log; ``--json``.
- ``multi-era 2%``: 2% Xid reports of every driver era (418 no pid, 515-560 ``pid='<unknown>'``,
  575+ ``caused by``, undecodable Xid 31s, Xid 13 warp/ESR bursts) in every container (dmesg,
  dmesg -T, /dev/kmsg records, syslog, iso), most of them off the parser's fast path; ``--json``.
- ``31+43 unrelated``: 2% Xid 31 and Xid 43 lines of unrelated processes (every 43 a pid no fault
  has, so each is an incident of its own), a millisecond apart: the mix whose incident grouping
  was quadratic (40k such lines took 44 s). The default output, which groups the incidents.
- ``sparse 1 GB``: a 1 GiB file of zeros with no newline (a sparse file): the goal is the peak
  resident memory of ours, which must not grow with the file (it was 1.0 GB); both sides skip the
  file's holes, so the times say little.

Ours runs as a user's install runs it: faulthunt laid out as ``pip install`` lays it out (the
package in a site directory of a fresh virtual environment, a console script, compiled modules
cached, kernlog's optional compiled part when the checkout has it built -- the note says which), not through the development checkout's editable install, whose import hook (pathlib,
urllib and more, imported by every process of the venv) adds ~15 ms of start-up that no user's
install has; the note gives that editable command's median too. Each row also records the CPU time
(user + system) of every run of both sides: the per-pair CPU ratio is less disturbed than wall time
by a busy machine.
"""

from __future__ import annotations

import os
import random
import resource
import shutil
import statistics
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from benchrows._install import compiled as _compiled
from benchrows._install import installed as _installed
from benchrows import Row, command, paired

#: as a user's install has them: Python's compiled modules cached (this machine's environment sets
#: PYTHONDONTWRITEBYTECODE, which would make every run compile faulthunt's sources anew)
ENV = {"PYTHONDONTWRITEBYTECODE": ""}

_PLAIN = [
    "usb 1-1: new high-speed USB device number {n} using xhci_hcd",
    "e1000e 0000:00:19.0 eth0: NIC Link is Up 1000 Mbps Full Duplex, Flow Control: Rx/Tx",
    "EXT4-fs (nvme0n1p2): re-mounted {n:x}. Quota mode: none.",
    "audit: type=1400 audit({n}.123:42): apparmor=\"STATUS\" operation=\"profile_replace\" name=\"snap.lxd\"",
    "IPv6: ADDRCONF(NETDEV_CHANGE): veth{n:x}: link becomes ready",
    "docker0: port 1(veth{n:x}) entered forwarding state",
    "nvidia-uvm: Loaded the UVM driver, major device number 510.",
    "NVRM: GPU at PCI:0000:3b:00: GPU-f443d679-49ad-ee2e-df61-53505888c8f0",
    "python3[{n}]: segfault at 0 ip 00007f00 sp 00007ffd error 4 in libc.so.6",
    "TCP: request_sock_TCP: Possible SYN flooding on port 8080. Sending cookies.",
]

_PCI = "NVRM: Xid (PCI:0000:3b:00): "
# 580-era lines (the H200's driver), the plain mix
_XID_580 = [
    _PCI + "31, pid={pid}, name=pt_main_thread, channel 0x0000000a, intr 00000000. MMU Fault: ENGINE GRAPHICS "
    "GPC{g} GPCCLIENT_T1_{c} faulted @ 0x7f{h:02x}_{lo:08x}. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE",
    _PCI + "13, Graphics SM Warp Exception on (GPC {g}, TPC {c}, SM 0): Out Of Range Address",
    _PCI + "13, Graphics Exception: ESR 0x5{lo:05x}=0x10000e 0x504650=0x0 0x504644=0xd3eff2 0x50464c=0x17f",
    _PCI + "13, pid={pid}, name=python3, Graphics Exception: channel 0x0000000a, Class 0000cbc0, Offset 00000510, "
    "Data 0017e2ac",
    _PCI + "43, pid={pid}, name=VLLM::EngineCor, channel 0x0000000a",
    _PCI + "45, pid={pid}, name=python3, Ch 00000001 caused by previous Xid 31",
    _PCI + "79, GPU has fallen off the bus.",
]
# every era
_XID_ERAS = _XID_580 + [
    _PCI + "31, pid={pid}, name=python, Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_{c} "
    "faulted @ 0x7f{h:02x}_{lo:08x}. Fault is of type FAULT_PTE ACCESS_TYPE_VIRT_READ",
    _PCI + "31, Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_{c} "
    "faulted @ 0x7f{h:02x}_{lo:08x}. Fault is of type FAULT_PDE ACCESS_TYPE_READ",
    _PCI + "13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception on (GPC {g}, TPC {c}, SM 1): "
    "Misaligned Address",
    _PCI + "31, pid={pid}, name=bench, channel 0x00000002, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC0 "
    "UNRECOGNIZED_CLIENT faulted @ 0x182400_0030198d. Fault is of type UNRECOGNIZED_FAULT UNRECOGNIZED_ACCESS_TYPE",
    "NVRM: Xid (0000:01:00): 13, 0003 00000000 0000a1c0 000002bc 00000000 00000000",
    "NVRM: Xid (PCI:0000:3b:00 GPU-I:05 GPU-CI:01): 31, pid={pid}, name=mig, Ch 00000010, intr 00000000. "
    "MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_{c} faulted @ 0x7f{h:02x}_{lo:08x}. Fault is of type FAULT_PDE "
    "ACCESS_TYPE_VIRT_WRITE",
]
_CONTAINERS = [
    lambda t, n: f"[{t:12.6f}] ",                                            # dmesg
    lambda t, n: f"[Wed Dec  2 14:{int(t) // 60 % 60:02d}:{int(t) % 60:02d} 2026] ",  # dmesg -T
    lambda t, n: f"4,{n},{int(t * 1e6)},-;",                                   # /dev/kmsg record
    lambda t, n: f"Dec  2 11:38:47 worker4 kernel: [{t:12.6f}] ",              # syslog
    lambda t, n: "2026-12-02T14:42:29,250180+00:00 ",                           # dmesg --time-format iso
]


def _write(path: Path, n_lines: int, share: float, xids: list[str], *, containers: bool = False,
           seed: int = 2) -> int:
    """Write a generated log; returns how many lines are Xid reports."""
    rng = random.Random(seed)
    n_xid = 0
    t = 5.0
    with open(path, "w") as fh:
        for i in range(n_lines):
            t += rng.random() * 0.01
            if rng.random() < share:
                n_xid += 1
                body = rng.choice(xids).format(pid=rng.randrange(100, 4_000_000), g=rng.randrange(8),
                                               c=rng.randrange(18), h=rng.randrange(256),
                                               lo=rng.randrange(1 << 20) << 12)
                prefix = rng.choice(_CONTAINERS)(t, i) if containers else f"[{t:12.6f}] "
            else:
                body = rng.choice(_PLAIN).format(n=rng.randrange(1 << 24))
                prefix = f"[{t:12.6f}] "
            fh.write(prefix + body + "\n")
    return n_xid


def _write_unrelated(path: Path, n_lines: int, share: float, seed: int = 3) -> int:
    """Xid 31s of one training process and Xid 43s of processes that never faulted, 1 ms apart."""
    rng = random.Random(seed)
    n_xid = 0
    t = 5.0
    with open(path, "w") as fh:
        for k in range(n_lines):
            t += 0.001
            if rng.random() < share:
                n_xid += 1
                if n_xid % 2:
                    body = (_PCI + f"31, pid=4242, name=train, channel 0x0000000a, intr 00000000. MMU Fault: ENGINE "
                            f"GRAPHICS GPC0 GPCCLIENT_T1_3 faulted @ 0x7f00_{rng.randrange(1 << 20) << 12:08x}. "
                            "Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE")
                else:
                    body = _PCI + f"43, pid={1_000_000 + k}, name=other, channel 0x0000000b"
            else:
                body = rng.choice(_PLAIN).format(n=rng.randrange(1 << 24))
            fh.write(f"[{t:12.6f}] {body}\n")
    return n_xid


def _faulthunt() -> str:
    """The development checkout's console script (the editable install)."""
    exe = shutil.which("faulthunt")
    if exe is None:
        raise SystemExit("faulthunt is not on PATH: pip install -e . in this environment")
    return exe


def _cpu_timed(run: Callable[[], object], into: list[float]) -> Callable[[], object]:
    """``run``, recording the CPU time (user + system) of the process it waits for in ``into``."""

    def timed() -> object:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        result = run()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        into.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        return result

    return timed


def _cpu_note(ours: list[float], base: list[float]) -> str:
    """Median CPU of each side and the median per-pair ratio (the first pair is the untimed warm-up)."""
    pairs = [o / b for o, b in zip(ours[1:], base[1:], strict=True) if b > 0]
    return (f"CPU ours {statistics.median(ours[1:]) * 1e3:.0f} ms, grep {statistics.median(base[1:]) * 1e3:.0f} ms, "
            f"ratio {statistics.median(pairs):.2f}x ({min(pairs):.2f}-{max(pairs):.2f})")


def _lines(path: Path) -> int:
    with open(path, "rb") as fh:
        return sum(1 for _ in fh)


def _row(name: str, writer: Callable[[Path, int], int], args: list[str], quick: bool, *, count_json: bool) -> Row:
    n = 100_000 if quick else 1_000_000
    with tempfile.TemporaryDirectory(prefix="faulthunt-bench-kernlog-") as tmp:
        log, ours_out, base_out = Path(tmp) / "kern.log", Path(tmp) / "ours.out", Path(tmp) / "grep.out"
        expected = writer(log, n)
        ours_cpu: list[float] = []
        base_cpu: list[float] = []
        ours = _cpu_timed(command([_installed(), "xid", "parse", *args, str(log)], out=ours_out, env=ENV), ours_cpu)
        base = _cpu_timed(command(["grep", "NVRM: Xid", str(log)], out=base_out), base_cpu)
        ours_t, base_t = paired(ours, base, repeat=3 if quick else 9)
        editable = command([_faulthunt(), "xid", "parse", *args, str(log)], out=ours_out, env=ENV)
        editable_t, _ = paired(editable, lambda: None, repeat=3)
        size_mb = log.stat().st_size / 1e6
        grepped = _lines(base_out)
        produced = _lines(ours_out) if count_json else None
    ok = grepped == expected and (produced is None or produced == expected)
    note = (f"{n:,} lines ({size_mb:.0f} MB), {expected:,} Xid lines; {_cpu_note(ours_cpu, base_cpu)}; "
            f"editable install {editable_t.median:.3g}s; compiled part (kernlog/_scan.c) "
            + ("built" if _compiled() else "NOT built: the pure-Python route")
            + ("" if ok else f"; MISMATCH grep={grepped} ours={produced} expected={expected}"))
    return Row(capability=f"kernlog: xid parse, {name}", ours=f"faulthunt xid parse {' '.join(args)}".strip(),
               baseline="grep 'NVRM: Xid' > out", ours_t=ours_t, base_t=base_t, goal="<= 3x", goal_ratio=3.0,
               note=note)


def parse_plain_1pct(quick: bool) -> Row:
    return _row("plain 1% mix", lambda p, n: _write(p, n, 0.01, _XID_580), ["--json"], quick, count_json=True)


def parse_multi_era_2pct(quick: bool) -> Row:
    return _row("multi-era 2% mix", lambda p, n: _write(p, n, 0.02, _XID_ERAS, containers=True), ["--json"], quick,
                count_json=True)


def parse_unrelated_31_43(quick: bool) -> Row:
    return _row("31+43 unrelated 2% (was quadratic)", lambda p, n: _write_unrelated(p, n, 0.02), [], quick,
                count_json=False)


def _peak_rss_mib(argv: list[str]) -> float:
    """Peak resident memory of one run of ``argv`` (its own, from wait4)."""
    with open(os.devnull, "wb") as devnull:
        proc = subprocess.Popen(argv, stdout=devnull, stderr=devnull)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_maxrss / 1024


#: the sparse row's bound on the peak resident memory of ours (interpreter and modules included)
SPARSE_RSS_MIB = 64


def parse_sparse_1gb(quick: bool) -> Row:
    """Memory, not time: grep and ours both skip a sparse file's holes (SEEK_DATA), so the times only
    show that nothing reads the gigabyte; the goal is the peak resident memory of ours."""
    size = (64 << 20) if quick else (1 << 30)
    with tempfile.TemporaryDirectory(prefix="faulthunt-bench-kernlog-") as tmp:
        sparse, out = Path(tmp) / "sparse.log", Path(tmp) / "out"
        with open(sparse, "wb") as fh:
            fh.truncate(size)  # no data blocks: costs no disk
        argv = [_installed(), "xid", "parse", "--json", str(sparse)]
        grep = command(["grep", "NVRM: Xid", str(sparse)], out=out, ok=(1,))  # 1: no line matched
        ours_t, base_t = paired(command(argv, out=out, env=ENV), grep, repeat=3)
        rss = max(_peak_rss_mib(argv) for _ in range(3))
    met = "met" if rss <= SPARSE_RSS_MIB else "NOT met"
    return Row(capability="kernlog: xid parse, sparse file, no newline", ours="faulthunt xid parse --json",
               baseline="grep 'NVRM: Xid' > out", ours_t=ours_t, base_t=base_t,
               goal=f"peak RSS <= {SPARSE_RSS_MIB} MiB",
               note=f"{size >> 20} MiB of zeros; peak RSS of ours {rss:.0f} MiB: {met} (was 1.0 GB for 1 GiB)")


ROWS = [parse_plain_1pct, parse_multi_era_2pct, parse_unrelated_31_43, parse_sparse_1gb]
