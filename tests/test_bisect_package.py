"""bisect across package versions: real scratch venvs, real pip installs from a local wheel dir, no network.

The package ``fhtiny`` is generated here at five versions; from 1.2 on, its ``ok(step)`` is False on
every even pytest-repeat step, so the test that calls it fails about 1 run in 2 (a deterministic
flaky failure). The wheels are written per the wheel spec (PEP 427) with zipfile, because this
machine has no ``wheel`` package for ``pip wheel`` and the test must not reach an index.
"""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from faulthunt.errors import FaulthuntError
from faulthunt.hunt.pkgbisect import index_versions, parse_index_versions, select_range, sort_versions

VERSIONS = ["1.0", "1.1", "1.2", "1.3", "1.4"]
FIRST_BAD = "1.2"

TEST = '''
import fhtiny

def test_uses_fhtiny(request):
    step = getattr(request.node, "callspec", None)
    step = step.params.get("__pytest_repeat_step_number", 0) if step else 0
    assert fhtiny.ok(step), f"fhtiny {fhtiny.__version__} broke step {step}"
'''


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build_wheel(out: Path, version: str, buggy: bool) -> Path:
    """A pure-Python wheel of fhtiny at ``version``."""
    body = "False if step % 2 == 0 else True" if buggy else "True"
    files = {
        "fhtiny/__init__.py": f"__version__ = {version!r}\n\ndef ok(step):\n    return {body}\n".encode(),
        f"fhtiny-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: fhtiny\nVersion: {version}\n".encode(),
        f"fhtiny-{version}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"fhtiny-{version}.dist-info/top_level.txt": b"fhtiny\n",
    }
    record = f"fhtiny-{version}.dist-info/RECORD"
    lines = [_record_line(n, d) for n, d in files.items()] + [f"{record},,"]
    files[record] = ("\n".join(lines) + "\n").encode()
    path = out / f"fhtiny-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for n, d in files.items():
            z.writestr(n, d)
    return path


def test_parse_index_versions() -> None:
    text = "WARNING: pip index is experimental\nfhtiny (1.10)\nAvailable versions: 1.10, 1.9, 1.2, 1.0\n"
    assert parse_index_versions(text) == ["1.0", "1.2", "1.9", "1.10"]
    with pytest.raises(FaulthuntError, match="Available versions"):
        parse_index_versions("ERROR: No matching distribution found for fhtiny\n")


@pytest.mark.parametrize("good, bad, want", [
    (None, None, ["1.0", "1.1", "1.2"]),
    ("1.1", None, ["1.1", "1.2"]),
    (None, "1.1", ["1.0", "1.1"]),
])
def test_select_range(good, bad, want) -> None:
    assert select_range(["1.0", "1.1", "1.2"], good, bad) == want


@pytest.mark.parametrize("good, bad, match", [
    ("2.0", None, "not among"), ("1.2", "1.0", "good version before"), ("1.1", "1.1", "good version before"),
])
def test_select_range_refuses(good, bad, match) -> None:
    with pytest.raises(FaulthuntError, match=match):
        select_range(["1.0", "1.1", "1.2"], good, bad)


def test_sort_versions_refuses_junk() -> None:
    assert sort_versions(["2.0", "1.0rc1", "1.0"]) == ["1.0rc1", "1.0", "2.0"]
    with pytest.raises(FaulthuntError, match="PEP 440"):
        sort_versions(["1.0", "not a version!"])


@pytest.mark.slow
def test_package_bisect_end_to_end(tmp_path: Path) -> None:
    """`faulthunt bisect --package` over real venvs finds the version where the flaky bug starts."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for v in VERSIONS:
        build_wheel(wheels, v, buggy=sort_versions([v, FIRST_BAD])[0] == FIRST_BAD)
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_tiny.py").write_text(TEST)
    # without --versions the list is pip's own (`pip index versions`) view of the local wheel dir
    assert index_versions("fhtiny", ["--no-index", "--find-links", str(wheels)]) == VERSIONS
    p = subprocess.run([sys.executable, "-m", "faulthunt", "bisect", "--package", "fhtiny",
                        "--good-version", "1.0", "--bad-version", "1.4", "--no-index", "--find-links", str(wheels),
                        "--envs", str(tmp_path / "envs"), "--base", str(tmp_path / "runs"),
                        "--calibrate", "4", "--confidence", "0.9", "--repo", str(suite),
                        "--", "test_tiny.py::test_uses_fhtiny"],
                       cwd=suite, capture_output=True, text=True, timeout=300)
    out = p.stdout + p.stderr
    assert f"first bad version: fhtiny=={FIRST_BAD}" in out, out
    assert "bad version 1.4: 2 of 4 runs failed" in out, out
    assert "fhtiny==1.1: good" in out and "fhtiny==1.2: bad" in out, out
    # the scratch envs are removed unless --keep-envs
    assert not list((tmp_path / "envs").glob("env-*"))


from hypothesis import given, strategies as st  # noqa: E402

_version = st.lists(st.integers(0, 30), min_size=1, max_size=3).map(lambda p: ".".join(map(str, p)))


@given(st.lists(_version, min_size=1, max_size=12), st.text(max_size=80).filter(lambda t: "Available" not in t))
def test_parse_index_versions_property(versions, noise) -> None:
    """Any pip-style listing parses to the same versions, oldest first, whatever warnings precede it."""
    from packaging.version import Version
    got = parse_index_versions(f"{noise}\nfhtiny (x)\nAvailable versions: {', '.join(versions)}\n")
    assert got == sorted(dict.fromkeys(versions), key=Version)
