"""The run directory: the spine that every faulthunt command reads and adds to.

Layout (documented in ``docs/rundir.md``)::

    .faulthunt/runs/<id>/          one hunt; ``.faulthunt/runs/latest`` points at the newest
        run.json                   id, argv, cwd, start/end times, faulthunt version
        identity.json              system identity basics (GPU, driver, host)
        env.json                   the environment, secrets redacted
        reproducer.log             pytest's own output
        events/<worker>-<pid>.jsonl  worker-side test spans, one record a line
        controller.jsonl           controller-side events: crashes, hangs, restarts
        ledger/<pid>.jsonl         allocation / free / launch records
        xid.jsonl                  Xid events, attributed to worker and test
        kmsg_before.txt kmsg_after.txt kmsg_added.txt kmsg_cursor.json
        summary.json               the result of the run
        mapping.json               fault address -> verdict
        sanitizer/                 compute-sanitizer rerun
        report.md report.html      rendered reports
        stage/                     repro kit

Everything here is written so that a process killed at any moment leaves what it had recorded
readable: JSON documents are replaced atomically, JSONL is appended one flushed line at a time, and
readers skip (and count) a torn last line instead of failing.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from faulthunt.errors import RunDirError

#: Environment variable through which the controller tells workers where the run directory is.
RUN_DIR_ENV = "FAULTHUNT_RUN_DIR"
#: Where runs go when no ``--run-dir`` is given (relative to the current directory).
DEFAULT_BASE = Path(".faulthunt") / "runs"
LATEST = "latest"


class Layout:
    """File names inside one run directory (one place, so readers and writers agree)."""

    RUN = "run.json"
    IDENTITY = "identity.json"
    ENV = "env.json"
    REPRODUCER_LOG = "reproducer.log"
    EVENTS_DIR = "events"
    CONTROLLER = "controller.jsonl"
    LEDGER_DIR = "ledger"
    XID = "xid.jsonl"
    KMSG_BEFORE = "kmsg_before.txt"
    KMSG_AFTER = "kmsg_after.txt"
    KMSG_ADDED = "kmsg_added.txt"
    KMSG_CURSOR = "kmsg_cursor.json"
    SUMMARY = "summary.json"
    MAPPING = "mapping.json"
    SANITIZER_DIR = "sanitizer"
    REPORT_MD = "report.md"
    REPORT_HTML = "report.html"
    REPORT_JSON = "report.json"
    STAGE_DIR = "stage"


def new_run_id(now: float | None = None) -> str:
    """A sortable, collision-resistant run id: ``20261202-142900-1a2b``."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(time.time() if now is None else now))
    return f"{stamp}-{secrets.token_hex(2)}"


def create_run_dir(run_dir: Path | str | None = None, base: Path | str | None = None) -> Path:
    """Make a new run directory and point ``latest`` at it.

    With ``run_dir`` that exact directory is used (created if needed, ``latest`` untouched);
    otherwise a fresh ``<base>/<id>`` is made and ``<base>/latest`` is updated.
    """
    if run_dir is not None:
        path = Path(run_dir)
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RunDirError(f"cannot create run directory {path}: {exc.strerror}",
                              fix="choose a writable --run-dir") from exc
        _make_subdirs(path)
        return path
    base_path = Path(base) if base is not None else DEFAULT_BASE
    for _ in range(10):
        path = base_path / new_run_id()
        try:
            path.mkdir(parents=True, exist_ok=False)
            break
        except FileExistsError:
            continue
        except OSError as exc:
            raise RunDirError(f"cannot create run directory under {base_path}: {exc.strerror}",
                              fix="run from a writable directory or pass --run-dir") from exc
    else:  # pragma: no cover - ten collisions of a 16-bit suffix in one second
        raise RunDirError(f"could not pick a fresh run id under {base_path}")
    _make_subdirs(path)
    set_latest(base_path, path)
    return path


def _make_subdirs(path: Path) -> None:
    for sub in (Layout.EVENTS_DIR, Layout.LEDGER_DIR):
        (path / sub).mkdir(exist_ok=True)


def set_latest(base: Path, run: Path) -> None:
    """Point ``base/latest`` at ``run`` (a relative symlink, replaced atomically)."""
    link = base / LATEST
    tmp = base / f".{LATEST}.{os.getpid()}"
    try:
        if tmp.is_symlink() or tmp.exists():
            tmp.unlink()
        os.symlink(run.name, tmp)
        os.replace(tmp, link)
    except OSError:
        # Filesystems without symlinks: a one-line file naming the run instead.
        write_text_atomic(link, run.name + "\n")


def resolve_run_dir(run: str | Path | None = None, base: Path | str | None = None) -> Path:
    """Find a run directory: ``None`` is the latest, else a path, else an id under ``base``."""
    base_path = Path(base) if base is not None else DEFAULT_BASE
    if run is None:
        latest = base_path / LATEST
        if latest.is_symlink() or latest.is_dir():
            target = latest.resolve()
        elif latest.is_file():
            target = base_path / latest.read_text().strip()
        else:
            raise RunDirError(f"no run found: {latest} does not exist",
                              fix="run `faulthunt stress ...` first, or pass --run DIR")
        if not target.is_dir():
            raise RunDirError(f"{latest} points at {target}, which is gone",
                              fix="pass --run DIR naming an existing run directory")
        return target
    candidate = Path(run)
    if candidate.is_dir():
        return candidate
    if (base_path / str(run)).is_dir():
        return base_path / str(run)
    raise RunDirError(f"run directory {run} not found (also looked in {base_path})",
                      fix="pass --run with a run directory path or an id under .faulthunt/runs")


# --- writing -----------------------------------------------------------------------------------

def _default(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    if isinstance(obj, bytes):
        return obj.decode("utf-8", "replace")
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")


def dumps(obj: Any, indent: int | None = None) -> str:
    """JSON text for records: dataclasses, paths and tuples are handled."""
    return json.dumps(obj, default=_default, indent=indent, sort_keys=indent is not None)


def write_text_atomic(path: Path | str, text: str) -> None:
    """Replace ``path`` with ``text`` so that a reader never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_json_atomic(path: Path | str, obj: Any) -> None:
    """Replace ``path`` with ``obj`` as indented JSON, atomically."""
    write_text_atomic(path, dumps(obj, indent=2) + "\n")


class JsonlWriter:
    """Append-only JSON Lines, one record a line, flushed per record.

    A process that aborts natively (SIGABRT, SIGSEGV) or is SIGKILLed loses nothing it had written:
    each ``write`` is one ``write(2)`` of a whole line on an ``O_APPEND`` descriptor. ``fsync=True``
    also survives a machine crash, at a cost per record.
    """

    def __init__(self, path: Path | str, fsync: bool = False) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._fsync = fsync

    def write(self, record: Any) -> None:
        data = (dumps(record) + "\n").encode("utf-8")
        os.write(self._fd, data)
        if self._fsync:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def append_jsonl(path: Path | str, record: Any) -> None:
    """Append one record to a JSONL file (open, write one line, close)."""
    with JsonlWriter(path) as writer:
        writer.write(record)


# --- reading -----------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class JsonlRead:
    """What a JSONL file held: the records that parsed, and how many lines did not."""

    records: tuple[dict[str, Any], ...]
    skipped: int = 0
    #: the last line had no newline (a writer killed mid-write)
    torn_tail: bool = False


def parse_jsonl(text: str) -> JsonlRead:
    """Parse JSON Lines text; malformed lines (a torn last line, junk) are skipped and counted."""
    records: list[dict[str, Any]] = []
    skipped = 0
    torn = bool(text) and not text.endswith("\n")
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            skipped += 1
            continue
        if isinstance(obj, dict):
            records.append(obj)
        else:
            skipped += 1
    return JsonlRead(tuple(records), skipped, torn)


def read_jsonl(path: Path | str) -> JsonlRead:
    """Read a JSONL file tolerantly; a missing file reads as empty."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return JsonlRead(())
    except OSError as exc:
        raise RunDirError(f"cannot read {path}: {exc.strerror}") from exc
    if data.endswith(b"\0"):  # the unwritten reserve of a memory-mapped writer that died
        data = data.rstrip(b"\0")
    return parse_jsonl(data.decode("utf-8", "replace"))


def read_jsonl_dir(directory: Path | str, pattern: str = "*.jsonl") -> JsonlRead:
    """All records of every JSONL file in ``directory`` (sorted by file name), skips summed."""
    directory = Path(directory)
    records: list[dict[str, Any]] = []
    skipped = 0
    torn = False
    if directory.is_dir():
        for path in sorted(directory.glob(pattern)):
            got = read_jsonl(path)
            records.extend(got.records)
            skipped += got.skipped
            torn = torn or got.torn_tail
    return JsonlRead(tuple(records), skipped, torn)


def read_json(path: Path | str, default: Any = ..., ) -> Any:
    """Read a JSON document; ``default`` is returned for a missing file if given."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if default is not ...:
            return default
        raise RunDirError(f"{path} does not exist",
                          fix="is this a faulthunt run directory? `faulthunt stress` makes one") from None
    except OSError as exc:
        raise RunDirError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        return json.loads(text)
    except ValueError as exc:
        raise RunDirError(f"{path} is not valid JSON ({exc})",
                          fix="the file was damaged; rerun the command that writes it") from exc


def iter_lines(fh: IO[str]) -> Iterator[str]:
    """Lines of a text stream without their newline."""
    for line in fh:
        yield line.rstrip("\n")


def ensure_dir(path: Path | str) -> Path:
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    return path


def merge_jsonl(results: Iterable[JsonlRead]) -> JsonlRead:
    records: list[dict[str, Any]] = []
    skipped = 0
    torn = False
    for got in results:
        records.extend(got.records)
        skipped += got.skipped
        torn = torn or got.torn_tail
    return JsonlRead(tuple(records), skipped, torn)
