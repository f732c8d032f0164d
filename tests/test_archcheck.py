from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from faulthunt.archcheck import (Arch, check_coverage, describe_archs, library_label,
                                 parse_arch, parse_listing)
from faulthunt.errors import InputError

H200 = Path(__file__).parent / "data" / "h200"
LOCAL = Path(__file__).parent / "data" / "cuobjdump"


def listing(path: Path, kind: str):  # type: ignore[no-untyped-def]
    return parse_listing(path.read_text(), kind)  # type: ignore[arg-type]


def test_cudnn_cnn_on_a_v100_is_one_line() -> None:
    # Real cuDNN 9 (CUDA 13 wheel) listing from the H200 image, judged for a Volta (cc 7.0).
    elf = listing(H200 / "cuobjdump_elf_libcudnn_cnn.so.9.txt", "elf")
    ptx = listing(H200 / "cuobjdump_ptx_libcudnn_cnn.so.9.txt", "ptx")
    cov = check_coverage("libcudnn_cnn", elf, ptx, parse_arch("7.0"))
    assert cov.verdict == "cannot_run" and cov.problem
    assert cov.message == ("libcudnn_cnn has SASS for sm_75..sm_121 and PTX only for sm_121: "
                           "this sm_70 device cannot run its kernels")
    assert "\n" not in cov.message
    assert cov.fix and "sm_70" in cov.fix


def test_cudnn_cnn_on_the_h200_runs_through_sm_90a() -> None:
    # cuDNN ships sm_90a (arch-specific) and no plain sm_90: it runs on exactly 9.0 (the H200)...
    elf = listing(H200 / "cuobjdump_elf_libcudnn_cnn.so.9.txt", "elf")
    ptx = listing(H200 / "cuobjdump_ptx_libcudnn_cnn.so.9.txt", "ptx")
    assert Arch(9, 0, "a") in elf.arch_set and Arch(9, 0) not in elf.arch_set
    cov = check_coverage("libcudnn_cnn", elf, ptx, parse_arch("9.0"))
    assert cov.verdict == "native" and cov.runs_with == (Arch(9, 0, "a"),)
    # ...but not on a hypothetical 9.x successor, and its sm_121 PTX cannot help there either.
    assert check_coverage("libcudnn_cnn", elf, ptx, Arch(9, 1)).verdict == "cannot_run"


def test_sm75_only_binary_on_sm90_matches_the_error_209_seen() -> None:
    # faults built with -gencode arch=compute_75,code=sm_75 failed on the H200 with error 209.
    elf = listing(H200 / "cuobjdump_sm75_elf.txt", "elf")
    ptx = listing(H200 / "cuobjdump_sm75_ptx.txt", "ptx")
    assert ptx.none_of_kind and not ptx.archs
    assert "209" in (H200 / "plain_archgap.txt").read_text()
    cov = check_coverage("faults", elf, ptx, Arch(9, 0))
    assert cov.verdict == "cannot_run"
    assert cov.message == "faults has SASS for sm_75 and no PTX: this sm_90 device cannot run its kernels"
    sm90 = check_coverage("faults", listing(H200 / "cuobjdump_sm90_elf.txt", "elf"),
                          listing(H200 / "cuobjdump_sm90_ptx.txt", "ptx"), Arch(9, 0))
    assert sm90.verdict == "native"


def test_ptx_only_path_is_jit() -> None:
    # libcublasLt (H200 image): PTX only for sm_120; on a cc 12.1 device SASS sm_120 runs natively,
    # on a hypothetical 13.0 device only the PTX could serve.
    elf = listing(H200 / "cuobjdump_elf_libcublasLt.so.13.txt", "elf")
    ptx = listing(H200 / "cuobjdump_ptx_libcublasLt.so.13.txt", "ptx")
    assert check_coverage("libcublasLt", elf, ptx, Arch(12, 1)).verdict == "native"
    jit = check_coverage("libcublasLt", elf, ptx, Arch(13, 0))
    assert jit.verdict == "jit" and jit.fix and "JIT" in jit.message


def test_libcurand_local_capture() -> None:
    elf = listing(LOCAL / "libcurand_elf.txt", "elf")
    ptx = listing(LOCAL / "libcurand_ptx.txt", "ptx")
    assert elf.members == 93 and not elf.unparsed_members
    assert [a.name for a in elf.arch_set] == ["sm_75", "sm_80", "sm_86", "sm_87", "sm_89", "sm_90",
                                             "sm_100", "sm_110", "sm_120"]
    cov = check_coverage("libcurand", elf, ptx, Arch(7, 0))
    assert cov.message == ("libcurand has SASS for sm_75..sm_120 and PTX for sm_75..sm_120: "
                           "this sm_70 device cannot run its kernels")
    assert check_coverage("libcurand", elf, ptx, Arch(8, 9)).runs_with == (
        Arch(8, 0), Arch(8, 6), Arch(8, 7), Arch(8, 9))


def test_host_only_and_unreadable_files() -> None:
    no_code = parse_listing((LOCAL / "no_device_code.txt").read_text(), "elf")
    assert no_code.no_device_code and no_code.members == 0
    assert check_coverage("ls", no_code, no_code, Arch(9, 0)).verdict == "no_device_code"
    for name in ("invalid_fatbin.txt", "missing_file.txt"):
        bad = parse_listing((LOCAL / name).read_text(), "elf")
        assert bad.fatal
        cov = check_coverage("junk", bad, bad, Arch(9, 0))
        assert cov.verdict == "unknown" and cov.problem and cov.fix


def test_cufft_no_ptx_message() -> None:
    ptx = listing(H200 / "cuobjdump_ptx_libcufft.so.12.txt", "ptx")
    assert ptx.none_of_kind and ptx.archs == ()


def test_no_device_to_check() -> None:
    elf = listing(LOCAL / "libcurand_elf.txt", "elf")
    cov = check_coverage("libcurand", elf, parse_listing("", "ptx"), None)
    assert cov.verdict == "unknown" and "no device" in cov.message


@pytest.mark.parametrize("sass,device,ok", [
    ("sm_80", "8.6", True), ("sm_86", "8.0", False), ("sm_80", "9.0", False),
    ("sm_90a", "9.0", True), ("sm_90a", "9.1", False), ("sm_100f", "10.3", True),
    ("sm_100f", "11.0", False), ("sm_75", "7.5", True), ("sm_70", "7.5", True),
])
def test_sass_rules(sass: str, device: str, ok: bool) -> None:
    assert parse_arch(sass).sass_runs_on(parse_arch(device)) is ok


@pytest.mark.parametrize("ptx,device,ok", [
    ("compute_70", "9.0", True), ("compute_90", "8.6", False), ("compute_90a", "9.0", True),
    ("compute_90a", "10.0", False), ("compute_100f", "10.3", True), ("compute_100f", "12.0", False),
])
def test_ptx_rules(ptx: str, device: str, ok: bool) -> None:
    assert parse_arch(ptx).ptx_runs_on(parse_arch(device)) is ok


@pytest.mark.parametrize("text,arch", [("sm_70", Arch(7, 0)), ("7.0", Arch(7, 0)), ("90a", Arch(9, 0, "a")),
                                       ("sm_100", Arch(10, 0)), ("compute_121", Arch(12, 1)),
                                       ("SM_86", Arch(8, 6)), ("12.1", Arch(12, 1))])
def test_parse_arch(text: str, arch: Arch) -> None:
    assert parse_arch(text) == arch


@pytest.mark.parametrize("text", ["", "sm_", "volta", "7", "sm_7000", "7.10", "sm_90z"])
def test_parse_arch_rejects(text: str) -> None:
    with pytest.raises(InputError) as info:
        parse_arch(text)
    assert info.value.fix


@pytest.mark.parametrize("text", [
    "ELF file    1: libx.so.1.sm_75.cub",          # truncated mid-line
    "ELF file    1: weird_name_without_arch",
    "\x00\x01\xff" * 40,
    "PTX file    1: libx.1.sm_80.ptx",            # PTX lines in an ELF listing are not ELF members
    "cuobjdump warning : something new",
])
def test_malformed_listings_do_not_raise(text: str) -> None:
    result = parse_listing(text, "elf")
    assert result.archs == ()


def test_describe_archs() -> None:
    assert describe_archs([]) == "none"
    assert describe_archs([Arch(9, 0)]) == "sm_90"
    assert describe_archs([Arch(9, 0), Arch(8, 0)]) == "sm_80, sm_90"
    assert describe_archs([Arch(12, 0), Arch(7, 5), Arch(9, 0, "a")]) == "sm_75..sm_120"


def test_library_label() -> None:
    assert library_label("/opt/x/libcudnn_cnn.so.9") == "libcudnn_cnn"
    assert library_label("libcublasLt.so.13.0.2") == "libcublasLt"
    assert library_label("faults") == "faults"


@given(st.text())
def test_parse_listing_never_raises(text: str) -> None:
    for kind in ("elf", "ptx"):
        result = parse_listing(text, kind)  # type: ignore[arg-type]
        assert result.members >= len(result.archs)


@given(st.lists(st.tuples(st.integers(5, 13), st.integers(0, 9), st.sampled_from(["", "a", "f"])),
                max_size=12),
       st.integers(5, 13), st.integers(0, 9))
def test_listing_roundtrip_and_verdict_consistency(members, major, minor) -> None:  # type: ignore[no-untyped-def]
    text = "\n".join(f"ELF file {i + 1:4d}: lib.so.{i + 1}.sm_{a}{b}{v}.cubin"
                     for i, (a, b, v) in enumerate(members))
    elf = parse_listing(text, "elf")
    assert elf.archs == tuple(Arch(a, b, v) for a, b, v in members)
    device = Arch(major, minor)
    cov = check_coverage("lib", elf, parse_listing("", "ptx"), device)
    native = any(Arch(a, b, v).sass_runs_on(device) for a, b, v in members)
    assert (cov.verdict == "native") is native
    if members and not native:
        assert cov.verdict == "cannot_run" and cov.message.endswith("cannot run its kernels")


# --- listings cuobjdump cannot see whole (cuFFT) -------------------------------------------------

import json as _json  # noqa: E402
import struct  # noqa: E402

from faulthunt.archcheck import EmbeddedFatbins, Visibility, listing_gaps, scan_fatbins  # noqa: E402

CUFFT_SCAN = _json.loads((LOCAL / "libcufft12_scan.json").read_text())


def _embedded(name: str) -> EmbeddedFatbins:
    e = CUFFT_SCAN[name]["embedded"]
    return EmbeddedFatbins(e["fatbins"], tuple(parse_arch(a) for a in e["sass"]),
                           tuple(parse_arch(a) for a in e["ptx"]))


def _readelf_section(name: str) -> tuple[int, int]:
    # "  [15] .nv_fatbin  PROGBITS  00000000004cbd50 4cbd50 0002a0 00 A 0 0 8"
    for line in (LOCAL / "libcufft12_readelf_S.txt").read_text().splitlines():
        parts = line.replace("[ ", "[").split()
        if len(parts) > 5 and parts[1] == name:
            return int(parts[4], 16), int(parts[5], 16)
    raise AssertionError(name)


def cufft_listings() -> tuple:  # type: ignore[type-arg]
    return (listing(H200 / "cuobjdump_elf_libcufft.so.12.txt", "elf"),
            listing(H200 / "cuobjdump_ptx_libcufft.so.12.txt", "ptx"))


def test_local_cufft_wheel_lists_what_the_h200_listed() -> None:
    # The wheel scanned here is the same cuFFT: cuobjdump 13.5 lists the same single stub cubin.
    assert listing(LOCAL / "libcufft12_elf.txt", "elf").arch_set == cufft_listings()[0].arch_set
    assert listing(LOCAL / "libcufft12_ptx.txt", "ptx").none_of_kind
    # and the scanner, run inside .nv_fatbin, finds exactly what cuobjdump lists
    assert CUFFT_SCAN["libcufft.so.12"]["nv_fatbin_scan"]["sass"] == ["sm_75"]
    assert CUFFT_SCAN["libcufft.so.12"]["nv_fatbin"] == list(_readelf_section(".nv_fatbin"))


def test_cufft_on_the_h200_is_unseen_not_a_problem() -> None:
    elf, ptx = cufft_listings()
    size = int((LOCAL / "libcufft12_sizes.txt").read_text().split()[0])
    vis = Visibility(_readelf_section(".nv_fatbin")[1], size, _embedded("libcufft.so.12"))
    cov = check_coverage("libcufft", elf, ptx, Arch(9, 0), vis)
    assert cov.verdict == "unseen" and not cov.problem
    assert "cannot see all of this library's kernels" in cov.message and "\n" not in cov.message
    assert ".nv_fatbin is 672 bytes" in cov.message and "sm_75..sm_120" in cov.message
    assert cov.fix and "check for real" in cov.fix and "--pid" in cov.fix
    assert cov.to_json()["visibility"]["embedded_fatbins"]["sass"][5] == "sm_90"


def test_cufft_on_a_v100_stays_a_problem_when_the_scan_shows_nothing_for_it() -> None:
    # cuFFT 12 (CUDA 13) dropped Volta: the embedded fatbins start at sm_75 too.
    elf, ptx = cufft_listings()
    vis = Visibility(672, 286542352, _embedded("libcufft.so.12"))
    cov = check_coverage("libcufft", elf, ptx, Arch(7, 0), vis)
    assert cov.verdict == "cannot_run" and cov.problem
    assert "outside .nv_fatbin only sm_75..sm_120" in cov.message


def test_cufft_without_a_scan_is_unseen_by_name() -> None:
    # --cc on another machine, or an unreadable file: the name list still prevents the false problem.
    elf, ptx = cufft_listings()
    for lib in ("libcufft", "libcufftw"):
        assert check_coverage(lib, elf, ptx, Arch(9, 0)).verdict == "unseen"
    assert check_coverage("libother", elf, ptx, Arch(9, 0)).verdict == "cannot_run"


def test_neighbours_reveal_a_stub_listing() -> None:
    elf, ptx = cufft_listings()
    release = tuple(parse_arch(a) for a in ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"))
    reasons = listing_gaps("libx", elf.arch_set, Arch(9, 0), Visibility(release_sass=release))
    assert reasons == ["the other libraries beside it cover sm_75..sm_120"]
    # a device the whole release does not cover keeps the plain verdict
    assert listing_gaps("libx", elf.arch_set, Arch(7, 0), Visibility(release_sass=release)) == []


def test_cudnn_on_a_v100_keeps_its_one_line_problem_even_with_visibility() -> None:
    elf = listing(H200 / "cuobjdump_elf_libcudnn_cnn.so.9.txt", "elf")
    ptx = listing(H200 / "cuobjdump_ptx_libcudnn_cnn.so.9.txt", "ptx")
    vis = Visibility(40 << 20, 600 << 20, EmbeddedFatbins(0, (), ()),
                     tuple(parse_arch(a) for a in ("sm_75", "sm_80", "sm_90a", "sm_120")))
    cov = check_coverage("libcudnn_cnn", elf, ptx, parse_arch("7.0"), vis)
    assert cov.verdict == "cannot_run" and cov.problem
    assert cov.message == ("libcudnn_cnn has SASS for sm_75..sm_121 and PTX only for sm_121: "
                           "this sm_70 device cannot run its kernels")


def _fatbin(entries: list[tuple[int, int, bytes]]) -> bytes:
    """A fatbin container: entries of (kind 1=PTX/2=ELF, arch number, payload)."""
    body = b""
    for kind, arch, payload in entries:
        head = struct.pack("<HHIQ", kind, 0x101, 64, len(payload)) + b"\0" * 12 + struct.pack("<I", arch)
        body += head.ljust(64, b"\0") + payload
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body


@pytest.mark.parametrize("blob,fatbins,sass,ptx", [
    (b"", 0, [], []),
    (_fatbin([(2, 90, b"x" * 10)]), 1, ["sm_90"], []),
    (b"junk" + _fatbin([(2, 75, b"a"), (1, 80, b"b")]) + b"more" + _fatbin([(2, 120, b"")]), 2,
     ["sm_75", "sm_120"], ["sm_80"]),
    (_fatbin([(2, 90, b"x" * 10)])[:-5], 0, [], []),                # truncated: size runs past the end
    (struct.pack("<IHHQ", 0xBA55ED50, 1, 99, 8) + b"\0" * 8, 0, [], []),  # wrong header size
    (_fatbin([(7, 90, b"x")]), 0, [], []),                           # unknown entry kind
    (_fatbin([(2, 5, b"x")]), 0, [], []),                            # arch number out of range
])
def test_scan_fatbins_table(blob: bytes, fatbins: int, sass: list[str], ptx: list[str]) -> None:
    found = scan_fatbins(blob)
    assert found.fatbins == fatbins
    assert [a.name for a in found.sass] == sass and [a.name for a in found.ptx] == ptx


def test_scan_fatbins_skips_the_registered_section() -> None:
    stub = _fatbin([(2, 75, b"s")])
    blob = b"\0" * 32 + stub + _fatbin([(2, 90, b"k")])
    assert scan_fatbins(blob, skip=(32, len(stub))).sass == (Arch(9, 0),)


@given(st.binary(max_size=4096))
def test_scan_fatbins_never_raises(data: bytes) -> None:
    found = scan_fatbins(b"\x50\xed\x55\xba" + data)
    assert found.fatbins >= 0
