"""Copies of run files with known secret shapes scrubbed (the kit's ``run/``, merge's ``runners/``).

A run directory written by an older faulthunt, or by a test that printed a token, may hold
secrets; its copies travel further (a kit is zipped into an issue, a merged run uploaded), so
every text file is copied through :mod:`faulthunt.redact`: JSON documents decoded and redacted
string by string (:func:`redact_json`), JSONL line by line, other text in bounded blocks (memory
stays flat on a 1 GB log). Binary files (a NUL in the first 8 KiB) and ``ledger/`` (allocation
records and stacks, possibly gigabytes) are copied as they are; docs/secrets.md says so.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from faulthunt.redact import redact_json, redact_stack_dump, redact_text

#: copied byte for byte: allocation ledgers (large, no captured output)
RAW_DIRS = frozenset({"ledger"})
_BLOCK = 1 << 20            # text is redacted in blocks of about this many characters
_LONGEST_LINE = 4 << 20     # a line longer than this is cut at whitespace (or hard) to bound memory
_WHOLE_JSON = 64 << 20      # a JSON document up to this size is decoded whole
_SNIFF = 8192


def is_binary(path: Path) -> bool:
    """A NUL byte in the first 8 KiB: not text, copied as is."""
    with open(path, "rb") as f:
        return b"\0" in f.read(_SNIFF)


def _blocks(src: IO[str]) -> Iterator[str]:
    """Text in blocks that end at a line break (or whitespace, for a very long line)."""
    carry = ""
    while True:
        data = src.read(_BLOCK)
        if not data:
            break
        data = carry + data
        cut = data.rfind("\n") + 1
        if not cut and len(data) > _LONGEST_LINE:
            cut = max(data.rfind(" "), data.rfind("\t")) + 1 or len(data)
        carry = data[cut:]
        if cut:
            yield data[:cut]
    if carry:
        yield carry


def _open_text(path: Path, mode: str) -> IO[str]:
    # surrogateescape: invalid UTF-8 bytes survive the round trip untouched
    return open(path, mode, encoding="utf-8", errors="surrogateescape", newline="")


def _redact_json_line(line: str) -> str:
    body = line.rstrip("\r\n")
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):  # a torn last line, plain text, nested too deep: as text
        return redact_text(line)
    clean = redact_json(data)
    if clean == data:
        return line
    return json.dumps(clean, ensure_ascii=False) + line[len(body):]


def scrub_file(src: Path, dest: Path) -> None:
    """Copy ``src`` to ``dest``, redacted when it is text; permissions and times kept."""
    if is_binary(src):
        shutil.copy2(src, dest, follow_symlinks=False)
        return
    if src.suffix == ".json" and src.stat().st_size <= _WHOLE_JSON:
        with _open_text(src, "r") as f:
            text = f.read()
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):  # damaged or nested too deep: scrubbed as text
            out = redact_text(text)
        else:
            clean = redact_json(data)
            out = text if clean == data else json.dumps(clean, indent=2, ensure_ascii=False) + "\n"
        with _open_text(dest, "w") as f:
            f.write(out)
    else:
        per_line = src.suffix == ".jsonl"
        # hang dumps list locals as `name: value`: a secret name hides its value
        redact = redact_stack_dump if src.name.endswith(".py-spy.txt") else redact_text
        with _open_text(src, "r") as fin, _open_text(dest, "w") as fout:
            for block in _blocks(fin):
                if per_line:
                    fout.write("".join(_redact_json_line(line)
                                       for line in block.splitlines(keepends=True)))
                else:
                    fout.write(redact(block))
    shutil.copystat(src, dest)


def copy_scrubbed(src_dir: Path, dest_dir: Path, *, skip: frozenset[str] = frozenset()) -> list[str]:
    """Copy the tree ``src_dir`` into ``dest_dir`` (created), text scrubbed; symlinks copied as
    links, ``skip`` (top-level names) left out. Returns what could not be copied (never raises
    for one file)."""
    problems: list[str] = []
    dest_dir.mkdir(parents=True, exist_ok=True)
    for root, dirs, files in os.walk(src_dir):
        here = Path(root)
        rel = here.relative_to(src_dir)
        if rel == Path("."):
            dirs[:] = [d for d in dirs if d not in skip]
            files = [f for f in files if f not in skip]
        raw = bool(rel.parts) and rel.parts[0] in RAW_DIRS
        for name in sorted(dirs):
            src = here / name
            if src.is_symlink():  # os.walk does not descend into links to directories
                files.append(name)
                continue
            (dest_dir / rel / name).mkdir(exist_ok=True)
        for name in sorted(files):
            src, dest = here / name, dest_dir / rel / name
            try:
                if src.is_symlink():
                    os.symlink(os.readlink(src), dest)
                elif raw or (rel == Path(".") and name in RAW_DIRS):
                    shutil.copy2(src, dest)
                else:
                    scrub_file(src, dest)
            except (OSError, UnicodeError) as exc:
                where = (rel / name).as_posix()
                problems.append(f"{where}: {getattr(exc, 'strerror', None) or exc}")
    return problems
