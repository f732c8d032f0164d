"""Kernel-log row: parse a 1,000,000-line kernel log against ``grep -c 'NVRM: Xid'`` on the same file.

The log is generated: mostly ordinary kernel lines (USB, network, filesystem, audit, the NVRM
lines that are not Xid reports), with XID_SHARE of the lines Xid reports of several driver eras
(418 no-pid, 515-560 ``pid='<unknown>'``, 580 ``channel 0x``, Xid 13 warp/ESR bursts, 43, 45
``caused by``, undecodable 31), in the raw ``dmesg`` container, pids varying so that repeated
bodies are as rare as in a real log.

Ours: memory-map the file (as ``faulthunt xid parse`` does for files over 1 MiB) and
:func:`faulthunt.kernlog.parse.scan_bytes` it -- every Xid line is
fully parsed (container, pid/name, Xid 31 decode, Xid 13 decode, category) into XidEvents; the
parser's body cache is cleared before each repeat so no repeat profits from the one before.
Baseline: ``grep -c 'NVRM: Xid' FILE`` (counts the lines, parses nothing), same file, interleaved.
"""

from __future__ import annotations

import mmap
import random
import subprocess
import tempfile
from pathlib import Path

from benchrows import Row, paired

XID_SHARE = 0.02

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

_XID = [
    "NVRM: Xid (PCI:0000:3b:00): 31, pid={pid}, name=pt_main_thread, channel 0x0000000a, intr 00000000. MMU Fault: "
    "ENGINE GRAPHICS GPC{g} GPCCLIENT_T1_{c} faulted @ 0x7f{h:02x}_{lo:08x}. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE",
    "NVRM: Xid (PCI:0000:3b:00): 31, pid={pid}, name=python, Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS "
    "GPCCLIENT_T1_{c} faulted @ 0x7f{h:02x}_{lo:08x}. Fault is of type FAULT_PTE ACCESS_TYPE_VIRT_READ",
    "NVRM: Xid (PCI:0000:3b:00): 31, Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_{c} "
    "faulted @ 0x7f{h:02x}_{lo:08x}. Fault is of type FAULT_PDE ACCESS_TYPE_READ",
    "NVRM: Xid (PCI:0000:3b:00): 13, Graphics SM Warp Exception on (GPC {g}, TPC {c}, SM 0): Out Of Range Address",
    "NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception: ESR 0x5{lo:05x}=0x10000e 0x504650=0x0 0x504644=0xd3eff2 0x50464c=0x17f",
    "NVRM: Xid (PCI:0000:3b:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception on (GPC {g}, TPC {c}, SM 1): Misaligned Address",
    "NVRM: Xid (PCI:0000:3b:00): 43, pid={pid}, name=VLLM::EngineCor, channel 0x0000000a",
    "NVRM: Xid (PCI:0000:3b:00): 45, pid={pid}, name=python3, Ch 00000001 caused by previous Xid 31",
    "NVRM: Xid (PCI:0000:3b:00): 31, pid={pid}, name=bench, channel 0x00000002, intr 00000000. MMU Fault: ENGINE "
    "GRAPHICS GPC0 UNRECOGNIZED_CLIENT faulted @ 0x182400_0030198d. Fault is of type UNRECOGNIZED_FAULT UNRECOGNIZED_ACCESS_TYPE",
    "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.",
]


def make_log(path: Path, n_lines: int, seed: int = 2) -> int:
    """Write the generated log; returns how many lines are Xid reports."""
    rng = random.Random(seed)
    n_xid = 0
    t = 5.0
    with open(path, "w") as fh:
        for _ in range(n_lines):
            t += rng.random() * 0.01
            if rng.random() < XID_SHARE:
                n_xid += 1
                body = rng.choice(_XID).format(pid=rng.randrange(100, 4_000_000), g=rng.randrange(8),
                                               c=rng.randrange(18), h=rng.randrange(256),
                                               lo=rng.randrange(1 << 20) << 12)
            else:
                body = rng.choice(_PLAIN).format(n=rng.randrange(1 << 24))
            fh.write(f"[{t:12.6f}] {body}\n")
    return n_xid


def parse_1m_lines(quick: bool) -> Row:
    from faulthunt.kernlog import parse as P

    n = 100_000 if quick else 1_000_000
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "kern.log"
        expected = make_log(log, n)
        got: list[int] = []

        def ours() -> None:
            P._parse_body.cache_clear()
            P._decode_message.cache_clear()
            with open(log, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
                scan = P.scan_bytes(m)
            got.append(len(scan.events))

        def baseline() -> None:
            out = subprocess.run(["grep", "-c", "NVRM: Xid", str(log)], check=True, stdout=subprocess.PIPE)
            got.append(-int(out.stdout))

        ours_t, base_t = paired(ours, baseline, repeat=3 if quick else 5)
        size_mb = log.stat().st_size / 1e6
    parsed = {g for g in got if g >= 0}
    counted = {-g for g in got if g < 0}
    ok = parsed == counted == {expected}
    note = (f"{n:,} lines ({size_mb:.0f} MB), {expected:,} Xid lines ({XID_SHARE:.0%}) fully parsed"
            + ("" if ok else f"; MISMATCH parsed={parsed} grep={counted} expected={expected}"))
    return Row(capability="kernlog: parse a kernel log", ours="mmap + scan_bytes -> XidEvents",
               baseline="grep -c 'NVRM: Xid'", ours_t=ours_t, base_t=base_t, goal="<= 3x",
               goal_ratio=3.0, note=note)


ROWS = [parse_1m_lines]
