"""The parse commands print the same bytes as before on every committed capture.

``faulthunt xid parse`` (table, ``--json``, ``--incidents``, both) on every kernel-log capture and
``faulthunt sanitize parse`` (table, ``--json``) on every sanitizer capture, through the real
dispatcher; the sha256 of each command's exit status, stdout and stderr is held in
tests/data/parse_identity.json. The parsers' speed work (issue 16) must leave every one unchanged.
After a deliberate change of output, record the new digests with
``python tests/test_parse_identity.py`` and say why in the commit. The generated 1M-line and
100,000-record bench inputs are checked the same way, as whole processes, by
``python scripts/parse_identity.py check MANIFEST --bench`` (too big for the suite).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import sys
from pathlib import Path

import pytest

from faulthunt.cli import main

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
MANIFEST = DATA / "parse_identity.json"
XID_MODES = [[], ["--json"], ["--incidents"], ["--json", "--incidents"]]
SAN_MODES = [[], ["--json"]]


def _cases() -> list[tuple[str, list[str]]]:
    h200 = DATA / "h200"
    kern = sorted(p for p in (DATA / "kernlog").rglob("*") if p.is_file() and p.suffix in (".log", ".txt"))
    kern += sorted(h200.glob("dmesg*.txt"))
    san = (sorted((DATA / "sanitizer" / "text").glob("*")) + sorted(h200.glob("san_*.txt"))
           + sorted(h200.glob("xml_*.xml")) + sorted(h200.glob("xmlrun_*.txt")))
    out = [(" ".join(["xid", "parse", *mode, str(p.relative_to(ROOT))]), ["xid", "parse", *mode, str(p)])
           for p in kern for mode in XID_MODES]
    out += [(" ".join(["sanitize", "parse", *mode, str(p.relative_to(ROOT))]), ["sanitize", "parse", str(p), *mode])
            for p in san for mode in SAN_MODES]
    return out


def _digest(argv: list[str]) -> str:
    """sha256 of the exit status, stdout and stderr of ``faulthunt ARGV`` run in this process."""
    out, err = io.BytesIO(), io.BytesIO()
    stdout = io.TextIOWrapper(out, encoding="utf-8", errors="backslashreplace", write_through=True)
    stderr = io.TextIOWrapper(err, encoding="utf-8", errors="backslashreplace", write_through=True)
    stdin = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        saved, sys.stdin = sys.stdin, stdin
        try:
            status = main(argv)
        finally:
            sys.stdin = saved
        stdout.flush()
        stderr.flush()
    h = hashlib.sha256(str(int(status)).encode())
    # the capture's path appears in some lines: digests must not depend on where the checkout
    # lies (only the data folder is replaced: captures themselves name paths such as /work/main)
    h.update(out.getvalue().replace(str(DATA).encode(), b"DATA"))
    h.update(err.getvalue().replace(str(DATA).encode(), b"DATA"))
    return h.hexdigest()


CASES = _cases()


@pytest.mark.parametrize(("key", "argv"), CASES, ids=[k for k, _ in CASES])
def test_output_unchanged(key: str, argv: list[str]) -> None:
    want = json.loads(MANIFEST.read_text())
    assert key in want, f"no recorded output for {key}: run python tests/test_parse_identity.py"
    assert _digest(argv) == want[key]


def test_every_capture_is_covered() -> None:
    assert len(CASES) >= 150  # the captures are still where this looks for them


if __name__ == "__main__":
    MANIFEST.write_text(json.dumps({k: _digest(a) for k, a in CASES}, indent=1, sort_keys=True) + "\n")
    print(f"{len(CASES)} digests written to {MANIFEST}")
