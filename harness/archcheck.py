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

cuobjdump reads only the fatbins the CUDA runtime registers (the ``.nv_fatbin`` section). Some
libraries keep their real kernels elsewhere and load them themselves: the CUDA 13.0 cuFFT wheel's
``libcufft.so.12`` is 286 MB with a 672-byte ``.nv_fatbin`` (one sm_75 stub cubin, all cuobjdump
lists), while its 278 MB ``.ldata`` section holds ~24,000 more fatbins with SASS for sm_75..sm_120
(sm_90 included) and PTX; cuFFT runs on the H200. So "cuobjdump lists no SASS for this device" is
evidence of a problem only when the listing is plausibly complete: :class:`Visibility` carries
what else is known about the file, and :func:`check_coverage` turns an unprovable "cannot run"
into the verdict ``unseen`` (a note saying what was seen and how to check for real).
"""

from __future__ import annotations

import mmap
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


Verdict = Literal["native", "jit", "cannot_run", "unseen", "no_device_code", "unknown"]

# Libraries known to keep (most of) their kernels outside the fatbin cuobjdump lists, with why.
# Seen on the H200 (CUDA 13.0 wheels): libcufft.so.12 and libcufftw.so.12 list one sm_75 stub
# cubin each, yet cuFFT runs on sm_90. A name list, so the verdict is right even when the file
# itself cannot be scanned (unreadable, or judged with --cc for another machine).
OPAQUE_LIBRARIES: dict[str, str] = {
    "libcufft": "cuFFT loads its kernels from fatbins embedded outside .nv_fatbin",
    "libcufftw": "libcufftw is cuFFT's FFTW interface: its transforms run libcufft's kernels",
}

_FATBIN_MAGIC = b"\x50\xed\x55\xba"  # fatbin header magic 0xBA55ED50, little-endian


@dataclass(frozen=True)
class EmbeddedFatbins:
    """Fatbin headers found in a library's bytes OUTSIDE its ``.nv_fatbin`` section."""

    fatbins: int                      # headers that parsed (magic, 16-byte header, sane size)
    sass: tuple[Arch, ...]            # distinct SASS architectures of their entries
    ptx: tuple[Arch, ...]             # distinct PTX architectures


def _entry_arch(num: int) -> Arch | None:
    if not 10 <= num <= 1299:
        return None
    return Arch(num // 10, num % 10)


def scan_fatbins(blob: bytes | mmap.mmap, skip: tuple[int, int] | None = None,
                 limit: int = 100_000) -> EmbeddedFatbins:
    """Find fatbin containers in ``blob`` (outside the ``skip`` = (offset, size) range) and the
    architectures of their entries.

    The container layout is not documented by NVIDIA; this reads only the stable, widely
    described fields: header = magic u32, version u16, header size u16 (16), payload size u64;
    each entry = kind u16 (1 PTX, 2 ELF), u16, entry header size u32, payload size u64, ...,
    arch u32 at offset 28 (75 = sm_75). A header that does not parse is skipped, never raised on.
    """
    import struct

    raw = blob  # bytes or an mmap of the file: both have find() and work with unpack_from
    size = len(raw)
    sass: set[Arch] = set()
    ptx: set[Arch] = set()
    found = 0
    pos = raw.find(_FATBIN_MAGIC)
    while pos != -1 and found < limit:
        nxt = pos + 4
        if skip is not None and skip[0] <= pos < skip[0] + skip[1]:
            pos = raw.find(_FATBIN_MAGIC, skip[0] + skip[1])  # the registered fatbins: cuobjdump's part
            continue
        if pos + 16 <= size:
            _, hsize, fat = struct.unpack_from("<HHQ", raw, pos + 4)
            if hsize == 16 and 0 < fat <= size - pos - 16:
                q, end, entries = pos + 16, pos + 16 + fat, 0
                while q + 32 <= end:
                    kind, _, ehs, psize = struct.unpack_from("<HHIQ", raw, q)
                    if kind not in (1, 2) or not 32 <= ehs <= 4096 or q + ehs + psize > end:
                        break
                    arch = _entry_arch(struct.unpack_from("<I", raw, q + 28)[0])
                    if arch is not None:
                        (ptx if kind == 1 else sass).add(arch)
                        entries += 1
                    q += ehs + psize
                if entries:
                    found += 1
                    nxt = end  # entries' payloads are not scanned again for nested magic
        pos = raw.find(_FATBIN_MAGIC, nxt)
    return EmbeddedFatbins(found, tuple(sorted(sass)), tuple(sorted(ptx)))


@dataclass(frozen=True)
class Visibility:
    """What else is known about a library file, beyond its cuobjdump listing.

    ``fatbin_section_bytes`` / ``file_bytes``: size of ``.nv_fatbin`` and of the whole file;
    ``embedded``: fatbins found outside ``.nv_fatbin`` (None: not scanned); ``release_sass``:
    SASS architectures the other libraries of the same directory (the same toolkit release) list.
    """

    fatbin_section_bytes: int | None = None
    file_bytes: int | None = None
    embedded: EmbeddedFatbins | None = None
    release_sass: tuple[Arch, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """JSON object for ``doctor --json``."""
        return {
            "fatbin_section_bytes": self.fatbin_section_bytes,
            "file_bytes": self.file_bytes,
            "embedded_fatbins": None if self.embedded is None else {
                "fatbins": self.embedded.fatbins,
                "sass": [a.name for a in self.embedded.sass],
                "ptx": [a.name for a in self.embedded.ptx]},
            "release_sass": [a.name for a in self.release_sass],
        }


def _mb(n: int) -> str:
    return f"{n / 1e6:.0f} MB" if n >= 1e6 else f"{n / 1e3:.1f} kB" if n >= 1e3 else f"{n} bytes"


def listing_gaps(library: str, sass: tuple[Arch, ...], device: Arch,
                 vis: Visibility | None) -> list[str]:
    """Reasons to think cuobjdump did not see all of ``library``'s kernels (empty: none).

    Each reason is a short clause for the doctor line; the caller decides the verdict.
    """
    reasons: list[str] = []
    vis = vis or Visibility()
    emb = vis.embedded
    if emb is not None and emb.fatbins:
        serving = [a for a in emb.sass if a.sass_runs_on(device)]
        serving += [a for a in emb.ptx if a.ptx_runs_on(device)]
        reasons.append(f"{emb.fatbins} more fatbin(s) lie outside .nv_fatbin with SASS for "
                       f"{describe_archs(emb.sass)}" + (f" and PTX for {describe_archs(emb.ptx)}"
                                                        if emb.ptx else "")
                       + ("" if serving else f", none for {device.name} either"))
    if (vis.fatbin_section_bytes is not None and vis.fatbin_section_bytes < 64 * 1024
            and vis.file_bytes and vis.file_bytes > 32 * 1024 * 1024):
        reasons.append(f".nv_fatbin is {_mb(vis.fatbin_section_bytes)} of a "
                       f"{_mb(vis.file_bytes)} file")
    release = sorted(set(vis.release_sass))
    if release and len(set(sass)) <= 2 and len(release) >= len(set(sass)) + 3 \
            and any(a.sass_runs_on(device) for a in release):
        reasons.append(f"the other libraries beside it cover {describe_archs(release)}")
    if library in OPAQUE_LIBRARIES and not (emb is not None and emb.fatbins):
        reasons.append(OPAQUE_LIBRARIES[library])
    return reasons


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
    visibility: Visibility | None = None  # what else was known about the file (unseen/cannot_run)

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
            "visibility": self.visibility.to_json() if self.visibility else None,
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


def check_coverage(library: str, elf: Listing, ptx: Listing, device: Arch | None,
                   visibility: Visibility | None = None) -> Coverage:
    """The coverage verdict of one library (its two listings) for one device (or none).

    ``native`` when a cubin runs on the device, ``jit`` when only PTX can serve it (the driver
    compiles at first launch), ``cannot_run`` when neither does (``cudaErrorNoKernelImageForDevice``,
    error 209, as the H200's sm_75-only binary showed), ``no_device_code`` for host-only libraries,
    ``unknown`` when cuobjdump could not read it. ``unseen`` replaces ``cannot_run`` when there
    is evidence (:func:`listing_gaps`) that cuobjdump's listing is not the library's whole code,
    unless that evidence itself shows nothing for the device (the embedded fatbins were scanned
    and none serves it): then the verdict stays ``cannot_run``.
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
    reasons = listing_gaps(library, sass, device, visibility)
    emb = visibility.embedded if visibility else None
    emb_serves = emb is not None and emb.fatbins > 0 and (
        any(a.sass_runs_on(device) for a in emb.sass) or any(a.ptx_runs_on(device) for a in emb.ptx))
    scanned_none = emb is not None and emb.fatbins > 0 and not emb_serves
    if reasons and not scanned_none:
        return Coverage(
            library, device, sass, ptxs, "unseen",
            f"{library}: cuobjdump lists {carries}, but cannot see all of this library's kernels "
            f"({'; '.join(reasons)}): no evidence that this {device.name} device cannot run it",
            fix=f"check for real: run one small {library} call on this device (e.g. for cuFFT "
                f"`python -c 'import cupy; print(cupy.fft.fft(cupy.ones(8)))'`), or run "
                f"`faulthunt doctor --pid PID` on a test process that used it to see which copy "
                f"of {library} it loaded", visibility=visibility)
    lowest = min(sass + ptxs)
    fix = (f"install a build of {library} that includes {device.name} SASS or PTX for "
           f"compute_{device.major}{device.minor} or lower (older releases of the library "
           f"supported older GPUs: check its support matrix), or run on a GPU it covers "
           f"(compute capability {lowest.cc} or newer within its SASS list)")
    if scanned_none and emb is not None:
        carries += (f" (and the {emb.fatbins} fatbin(s) outside .nv_fatbin only "
                    f"{describe_archs(emb.sass + emb.ptx)})")
    return Coverage(library, device, sass, ptxs, "cannot_run",
                    f"{library} has {carries}: this {device.name} device cannot run its kernels",
                    fix=fix, visibility=visibility)


def library_label(path: str) -> str:
    """``/x/libcudnn_cnn.so.9.1.0`` -> ``libcudnn_cnn`` (the name people say)."""
    base = path.rsplit("/", 1)[-1]
    return re.sub(r"\.so(\.\d+)*$", "", base)
