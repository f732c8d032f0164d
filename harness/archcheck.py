"""Which GPU architectures a CUDA library carries, and whether a given device can run it.

Pure parsing of ``cuobjdump --list-elf`` / ``--list-ptx`` output plus the compatibility rules of
the CUDA binary model, so that "this V100 cannot run cuDNN's kernels" is one line of ``doctor``
output instead of an afternoon. Real output (``tests/data/h200/``, CUDA 13.0 cuobjdump)::

    ELF file    1: libcudnn_cnn.so.1.sm_75.cubin
    ELF file    4: libcudnn_cnn.so.4.sm_90a.cubin
    PTX file    1: libcudnn_cnn.so.1.sm_121.ptx
    cuobjdump info    : No PTX file found to extract from '/.../libcufft.so.12'. You may try with -all option.
    cuobjdump info    : File '/bin/ls' does not contain device code
    cuobjdump fatal   : Invalid fatbin header in '/tmp/junk.so'

Rules (CUDA C++ Programming Guide, "Binary Compatibility" / "PTX Compatibility", and the
arch-/family-specific feature sets of CUDA 12.0/12.9):

- SASS ``sm_XY`` runs on a device of compute capability ``X.Z`` with ``Z >= Y`` (same major).
- ``sm_XYa`` (arch-specific) runs only on exactly ``X.Y``; ``sm_XYf`` (family) on ``X.Z``, ``Z >= Y``.
- PTX ``compute_XY`` is JIT-compiled by the driver for any device with capability ``>= X.Y``;
  arch-specific PTX only for exactly ``X.Y``, family PTX for the same major with ``Z >= Y``.

A library is judged as a whole (the union of its cubins/PTX): cuobjdump's listing does not say
which kernels each fatbin holds, so a library whose fatbins cover different architectures can
still fail for one kernel; the verdict says "can run some kernels", never more than it knows.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from faulthunt.errors import InputError

# "ELF file    1: libcudnn_cnn.so.4.sm_90a.cubin", "PTX file    1: faults.sm_90.ptx"
_ENTRY = re.compile(r"^(?P<kind>ELF|PTX) file\s+(?P<index>\d+):\s+(?P<name>\S.*?)\s*$")
# the architecture part of a listed member name: "...sm_90a.cubin", "...compute_90.ptx"
_MEMBER_ARCH = re.compile(r"(?:^|\.)(?:sm|compute)_(?P<num>\d{2,3})(?P<variant>[af]?)\.(?:cubin|ptx)$")
_ARCH = re.compile(r"^\s*(?:sm_|compute_|sm)?(?P<num>\d{2,3})(?P<variant>[af]?)\s*$", re.IGNORECASE)
_CC = re.compile(r"^\s*(?P<major>\d{1,2})\.(?P<minor>\d)\s*$")
_INFO = re.compile(r"^cuobjdump (?P<level>info|warning|fatal|error)\s*:\s*(?P<text>.*)$")


@dataclass(frozen=True, order=True)
class Arch:
    """A GPU architecture as cuobjdump names it: ``sm_90a`` is ``Arch(9, 0, "a")``."""

    major: int
    minor: int
    variant: str = ""  # "" | "a" (arch-specific) | "f" (family-specific)

    @property
    def name(self) -> str:
        """``sm_90a``."""
        return f"sm_{self.major}{self.minor}{self.variant}"

    @property
    def cc(self) -> str:
        """``9.0``."""
        return f"{self.major}.{self.minor}"

    def sass_runs_on(self, device: Arch) -> bool:
        """Whether a cubin for this architecture executes natively on ``device``."""
        if self.major != device.major:
            return False
        if self.variant == "a":
            return self.minor == device.minor
        return device.minor >= self.minor

    def ptx_runs_on(self, device: Arch) -> bool:
        """Whether PTX for this architecture can be JIT-compiled for ``device``."""
        if self.variant == "a":
            return (self.major, self.minor) == (device.major, device.minor)
        if self.variant == "f":
            return self.major == device.major and device.minor >= self.minor
        return (device.major, device.minor) >= (self.major, self.minor)


def parse_arch(text: str) -> Arch:
    """``"sm_90a"``, ``"compute_80"``, ``"90"``, ``"9.0"`` -> :class:`Arch`; InputError otherwise.

    Two-digit numbers split as major/minor digit (``75`` -> 7.5); three digits as ``100`` -> 10.0.
    """
    cc = _CC.match(text)
    if cc:
        return Arch(int(cc["major"]), int(cc["minor"]))
    match = _ARCH.match(text)
    if not match:
        raise InputError(f"not a GPU architecture: {text!r}",
                         fix="give a compute capability like 7.0 or an arch like sm_70")
    num = match["num"]
    return Arch(int(num[:-1]), int(num[-1]), match["variant"].lower())


@dataclass(frozen=True)
class Listing:
    """One ``cuobjdump --list-elf`` or ``--list-ptx`` output, parsed."""

    kind: Literal["elf", "ptx"]
    archs: tuple[Arch, ...]              # one per listed member, in order (repeats kept)
    members: int                         # listed members (ELF/PTX file lines)
    unparsed_members: tuple[str, ...]    # member names whose architecture was not recognized
    no_device_code: bool                 # "does not contain device code"
    none_of_kind: bool                   # "No PTX file found" / "No ELF file found"
    fatal: str | None                    # "cuobjdump fatal : ..." text (unreadable input)
    notes: tuple[str, ...] = ()          # other cuobjdump info/warning lines

    @property
    def arch_set(self) -> tuple[Arch, ...]:
        """Distinct architectures, sorted."""
        return tuple(sorted(set(self.archs)))


def parse_listing(text: str, kind: Literal["elf", "ptx"]) -> Listing:
    """Parse the output (stdout and stderr together) of ``cuobjdump --list-elf``/``--list-ptx``.

    Lines that are neither members nor cuobjdump messages (a truncated capture, binary junk) are
    ignored; nothing here raises on bad input, the result says what was (not) found.
    """
    want = "ELF" if kind == "elf" else "PTX"
    archs: list[Arch] = []
    unparsed: list[str] = []
    members = 0
    no_device_code = none_of_kind = False
    fatal: str | None = None
    notes: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        entry = _ENTRY.match(line)
        if entry:
            if entry["kind"] != want:
                continue
            members += 1
            arch = _MEMBER_ARCH.search(entry["name"])
            if arch:
                num = arch["num"]
                archs.append(Arch(int(num[:-1]), int(num[-1]), arch["variant"]))
            else:
                unparsed.append(entry["name"])
            continue
        info = _INFO.match(line)
        if not info:
            continue
        message = info["text"].strip()
        if info["level"] == "fatal" or info["level"] == "error":
            fatal = message
        elif "does not contain device code" in message:
            no_device_code = True
        elif re.search(r"No (PTX|ELF) file found", message):
            none_of_kind = True
        else:
            notes.append(message)
    return Listing(kind, tuple(archs), members, tuple(unparsed), no_device_code, none_of_kind,
                   fatal, tuple(notes))


Verdict = Literal["native", "jit", "cannot_run", "no_device_code", "unknown"]


@dataclass(frozen=True)
class Coverage:
    """What one library carries and what that means for one device."""

    library: str
    device: Arch | None
    sass: tuple[Arch, ...]
    ptx: tuple[Arch, ...]
    verdict: Verdict
    message: str                      # ONE line, the thing doctor prints
    fix: str | None = None
    runs_with: tuple[Arch, ...] = field(default=())  # the members that serve the device

    @property
    def problem(self) -> bool:
        """True when the device cannot run (or could not be checked against) the library."""
        return self.verdict in ("cannot_run", "unknown")

    def to_json(self) -> dict[str, Any]:
        """JSON object for ``doctor --json``."""
        return {
            "library": self.library,
            "device": self.device.name if self.device else None,
            "sass": [a.name for a in self.sass],
            "ptx": [a.name for a in self.ptx],
            "verdict": self.verdict,
            "runs_with": [a.name for a in self.runs_with],
            "message": self.message,
            "fix": self.fix,
        }


def describe_archs(archs: Iterable[Arch]) -> str:
    """``sm_75..sm_120`` for three or more, ``sm_80, sm_90`` for two, ``sm_90`` for one."""
    items = sorted(set(archs))
    if not items:
        return "none"
    if len(items) <= 2:
        return ", ".join(a.name for a in items)
    return f"{items[0].name}..{items[-1].name}"


def _carries(sass: tuple[Arch, ...], ptx: tuple[Arch, ...]) -> str:
    sass_part = f"SASS for {describe_archs(sass)}" if sass else "no SASS"
    if not ptx:
        ptx_part = "no PTX"
    elif len(ptx) == 1:
        ptx_part = f"PTX only for {ptx[0].name}"
    else:
        ptx_part = f"PTX for {describe_archs(ptx)}"
    return f"{sass_part} and {ptx_part}"


def check_coverage(library: str, elf: Listing, ptx: Listing, device: Arch | None) -> Coverage:
    """The coverage verdict of one library (its two listings) for one device (or none).

    ``native`` when a cubin runs on the device, ``jit`` when only PTX can serve it (the driver
    compiles at first launch), ``cannot_run`` when neither does (``cudaErrorNoKernelImageForDevice``,
    error 209, as the H200's sm_75-only binary showed), ``no_device_code`` for host-only libraries,
    ``unknown`` when cuobjdump could not read it.
    """
    sass = elf.arch_set
    ptxs = ptx.arch_set
    if elf.fatal or ptx.fatal:
        why = elf.fatal or ptx.fatal
        return Coverage(library, device, sass, ptxs, "unknown",
                        f"{library}: cuobjdump could not read it ({why})",
                        fix="check that the file is a complete ELF shared library (a truncated "
                            "download or a Git LFS pointer is not); reinstall the package")
    if not sass and not ptxs:
        return Coverage(library, device, sass, ptxs, "no_device_code",
                        f"{library} carries no GPU code")
    carries = _carries(sass, ptxs)
    if device is None:
        return Coverage(library, None, sass, ptxs, "unknown",
                        f"{library} has {carries} (no device to check against)")
    native = tuple(a for a in sass if a.sass_runs_on(device))
    if native:
        return Coverage(library, device, sass, ptxs, "native",
                        f"{library} has {carries}: {describe_archs(native)} SASS runs on this "
                        f"{device.name} device", runs_with=native)
    jit = tuple(a for a in ptxs if a.ptx_runs_on(device))
    if jit:
        return Coverage(
            library, device, sass, ptxs, "jit",
            f"{library} has {carries}: this {device.name} device has no SASS and runs it only "
            f"through JIT of {describe_archs(jit)} PTX (slow first launch; needs a driver as new "
            f"as the toolkit that built it)",
            fix=f"install a build of {library} with {device.name} SASS, or keep the JIT cache "
                f"warm (CUDA_CACHE_MAXSIZE=4294967296, CUDA_CACHE_PATH on persistent disk)",
            runs_with=jit)
    lowest = min(sass + ptxs)
    fix = (f"install a build of {library} that includes {device.name} SASS or PTX for "
           f"compute_{device.major}{device.minor} or lower (older releases of the library "
           f"supported older GPUs: check its support matrix), or run on a GPU it covers "
           f"(compute capability {lowest.cc} or newer within its SASS list)")
    return Coverage(library, device, sass, ptxs, "cannot_run",
                    f"{library} has {carries}: this {device.name} device cannot run its kernels",
                    fix=fix)


def library_label(path: str) -> str:
    """``/x/libcudnn_cnn.so.9.1.0`` -> ``libcudnn_cnn`` (the name people say)."""
    base = path.rsplit("/", 1)[-1]
    return re.sub(r"\.so(\.\d+)*$", "", base)
