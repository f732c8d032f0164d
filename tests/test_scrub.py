"""faulthunt.scrub: copies of run files with secrets of known shapes scrubbed, the rest intact."""
from __future__ import annotations

import json
import os
from pathlib import Path

from faulthunt.redact import REDACTED
from faulthunt.scrub import copy_scrubbed

GH = "ghp_" + "S" * 36


def test_copy_scrubs_text_json_and_jsonl_and_keeps_the_rest(tmp_path: Path) -> None:
    src, dest = tmp_path / "run", tmp_path / "copy"
    (src / "events").mkdir(parents=True)
    (src / "ledger").mkdir()
    (src / "run.json").write_text(json.dumps({"argv": ["x", f"--token={GH}"], "options": {"count": 2}}))
    (src / "summary.json").write_text('{"tests_run": 3}\n')
    clean_line = json.dumps({"event": "start", "nodeid": "t.py::test_a"}) + "\n"
    dirty_line = json.dumps({"event": "end", "longrepr": f"E  AssertionError: {GH}"}) + "\n"
    (src / "events" / "gw0-1.jsonl").write_text(clean_line + dirty_line + '{"event": "start", "nod ' + GH)
    (src / "reproducer.log").write_bytes(b"\xff\xfe not utf-8, then " + GH.encode() + b"\n")
    (src / "core.bin").write_bytes(b"\0\1binary " + GH.encode())
    (src / "ledger" / "1.jsonl").write_text(json.dumps({"stack": GH}) + "\n")
    os.symlink("summary.json", src / "latest")
    (src / "stage").mkdir()
    assert copy_scrubbed(src, dest, skip=frozenset({"stage"})) == []

    assert GH not in (dest / "run.json").read_text()
    assert json.loads((dest / "run.json").read_text())["argv"] == ["x", f"--token={REDACTED}"]
    assert (dest / "summary.json").read_text() == '{"tests_run": 3}\n'  # nothing to redact: as is
    lines = (dest / "events" / "gw0-1.jsonl").read_text().splitlines(keepends=True)
    assert lines[0] == clean_line and json.loads(lines[1])["longrepr"] == f"E  AssertionError: {REDACTED}"
    assert lines[2].endswith(REDACTED)  # a torn last line: redacted as text
    assert (dest / "reproducer.log").read_bytes() == b"\xff\xfe not utf-8, then " + REDACTED.encode() + b"\n"
    # documented as not scrubbed: binary files and the ledger
    assert (dest / "core.bin").read_bytes() == (src / "core.bin").read_bytes()
    assert GH in (dest / "ledger" / "1.jsonl").read_text()
    assert os.readlink(dest / "latest") == "summary.json" and not (dest / "stage").exists()


def test_large_text_is_scrubbed_in_blocks_without_splitting_tokens(tmp_path: Path,
                                                                    monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import faulthunt.scrub as scrub

    monkeypatch.setattr(scrub, "_BLOCK", 64 << 10)          # small blocks: the same code, less data
    monkeypatch.setattr(scrub, "_LONGEST_LINE", 256 << 10)
    src, dest = tmp_path / "run", tmp_path / "copy"
    src.mkdir()
    # 600 KiB of lines, and a 700 KiB line without a line break: tokens also at block ends
    lines = "".join(f"line {i} {GH if i % 97 == 0 else 'plain'}\n" for i in range(30_000))
    long_line = " ".join(GH if i % 100 == 0 else "wordwordword" for i in range(55_000))
    (src / "reproducer.log").write_text(lines + long_line)
    assert copy_scrubbed(src, dest) == []
    out = (dest / "reproducer.log").read_text()
    assert GH not in out
    assert out.count(REDACTED) == lines.count(GH) + long_line.count(GH)
