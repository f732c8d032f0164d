"""``faulthunt merge``: combine run directories from several runners into one.

A hunt fanned out over a CI matrix or a Slurm job array leaves one run directory per runner.
Merged, they read as one run: worker ids become ``<runner>/<worker>`` (``gpu-node-3/gw2``), every
record gets ``runner``, and pids are made unique across hosts as ``runner_index * 10**7 + pid``
(Linux ``pid_max`` is at most 2**22 < 10**7) with the original kept as ``host_pid``, so that Xid
attribution by pid never pairs host A's Xid with host B's worker. Each input is also copied whole
under ``runners/<runner>/`` (provenance), and ``merge.json`` says where each came from. The
summary is recomputed from the merged records by :func:`faulthunt.summary.summarize_run`.

The same run given twice (the same ``run.json`` id, or the same directory) is merged once: the
repeats are listed in ``merge.json`` under ``duplicates``, so no run's tests are counted twice.
Everything copied is scrubbed of known secret shapes (:mod:`faulthunt.redact`,
:mod:`faulthunt.scrub`), ledger records excepted (docs/secrets.md).
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import Any

import msgspec

from faulthunt.errors import RunDirError, UsageError
from faulthunt.records.documents import Identity, RunInfo
from faulthunt.redact import redact_argv, redact_json
from faulthunt.rundir import (Layout, RunDir, append_jsonl, read_jsonl, require_run, write_json_atomic,
                              write_run_info, write_text_atomic)
from faulthunt.scrub import copy_scrubbed

PID_STRIDE = 10**7
#: record keys holding a path relative to the run directory (a hang's stack dumps): in the
#: merge they point into the input's copy under ``runners/<runner>/``
RUN_PATH_KEYS = ("pyspy", "faulthandler")


def runner_label(run_dir: Path, identity: Identity | None, taken: set[str]) -> str:
    """A short unique runner name: the host, else the run id; ``-2``, ``-3`` on repeats."""
    raw = str((identity.host if identity is not None else None) or run_dir.name)
    label = re.sub(r"[^A-Za-z0-9_.-]+", "_", raw).strip("_") or "runner"
    name, n = label, 1
    while name in taken:
        n += 1
        name = f"{label}-{n}"
    taken.add(name)
    return name


def rewrite_record(rec: dict[str, Any], label: str, index: int) -> dict[str, Any]:
    """One record with its worker prefixed, its pid made unique, and its runner named (pure)."""
    out = dict(rec)
    out["runner"] = label
    # a worker's slot (worker_up) is named like a worker: gw0 of two runners are two slots
    for key in ("worker", "slot"):
        name = out.get(key)
        if isinstance(name, str) and name and not name.startswith(f"{label}/"):
            out[key] = f"{label}/{name}"
    for key in RUN_PATH_KEYS:
        rel = out.get(key)
        if isinstance(rel, str) and rel and not rel.startswith("runners/"):
            out[key] = f"runners/{label}/{rel}"
    pid = out.get("pid")
    if isinstance(pid, int) and not isinstance(pid, bool):
        out["host_pid"] = pid
        out["pid"] = index * PID_STRIDE + pid
    return out


def _merge_jsonl(src: Path, dest: Path, label: str, index: int, *, scrub: bool = True) -> tuple[int, int]:
    # Records are copied as they are (any kind, including ledger lines): only the keys every
    # record shares (worker, pid) are rewritten, so no reader's schema is needed here. Their
    # strings are scrubbed of secrets (error texts, argv), except the ledger's (docs/secrets.md).
    if not src.is_file():
        return 0, 0
    got = read_jsonl(src)
    for rec in got.records:
        rec = redact_json(rec) if scrub else rec
        append_jsonl(dest, rewrite_record(rec, label, index) if isinstance(rec, dict) else rec)
    return len(got.records), got.skipped


def _check_out(out: Path, run_dirs: list[Path], force: bool) -> None:
    """Refuse an OUT that is a file, lies under a file, is non-empty, or is inside an input."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"-o {out} is a file; the merged run is a directory",
                         fix="pick a new -o OUT directory")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise UsageError(f"{out} exists and is not empty", fix="pick a new -o OUT, or pass --force")
    where = out.resolve()
    for run in run_dirs:
        if where == run.resolve() or run.resolve() in where.parents:
            raise UsageError(f"-o {out} is inside the run {run} being merged",
                             fix="pick an -o OUT outside every run directory given")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create {out}: {exc.strerror or exc}",
                         fix="pick an -o OUT whose parent is a writable directory (not a file)") from None


def _unique_runs(run_dirs: list[Path]) -> tuple[list[Path], list[dict[str, Any]]]:
    """The runs to merge, each once, and the repeats left out. A run is a repeat when its
    directory or its run.json id is one already kept, or, where either lacks an id (a copy whose
    run.json was lost), when its worker record files are the same bytes."""
    seen: dict[str, Path] = {}
    by_records: dict[str, tuple[Path, bool]] = {}
    keep: list[Path] = []
    duplicates: list[dict[str, Any]] = []
    for run in run_dirs:
        rundir = RunDir(run)
        info = rundir.run_info()
        has_id = info is not None and bool(info.id)
        keys = [f"path:{run.resolve()}"] + ([f"id:{info.id}"] if info is not None and has_id else [])
        match = next(((k.split(":", 1)[0], seen[k]) for k in keys if k in seen), None)
        digest = rundir.records_digest()
        if match is None and digest in by_records and not (has_id and by_records[digest][1]):
            match = ("records", by_records[digest][0])
        if match is not None:
            duplicates.append({"path": str(run.resolve()), "id": info.id if info else None,
                               "same_as": str(match[1].resolve()), "by": match[0]})
            continue
        seen.update(dict.fromkeys(keys, run))
        if digest is not None:
            by_records.setdefault(digest, (run, has_id))
        keep.append(run)
    return keep, duplicates


def _input_notes(run: Path) -> list[str]:
    """The notes of one input: its summary.json's, else recomputed from its records."""
    from faulthunt.summary import summarize_run

    summary = RunDir(run).summary()
    if summary is not None:
        return list(summary.notes)
    return [str(n) for n in summarize_run(run).get("notes") or []]


def merge_runs(run_dirs: list[Path], out: Path, *, force: bool = False) -> dict[str, Any]:
    """Merge ``run_dirs`` into the new run directory ``out``; returns ``merge.json``'s content."""
    if len(run_dirs) < 1:
        raise UsageError("nothing to merge", fix="give one or more run directories")
    for run in run_dirs:
        if not run.is_dir():
            raise RunDirError(f"run directory {run} not found",
                              fix="give the run directories each runner uploaded (unpack the artifacts first)")
        require_run(run)
    _check_out(out, run_dirs, force)
    run_dirs, duplicates = _unique_runs(run_dirs)
    for sub in (Layout.EVENTS_DIR, Layout.LEDGER_DIR, "runners"):
        (out / sub).mkdir(exist_ok=True)
    taken: set[str] = set()
    sources: list[dict[str, Any]] = []
    identities: dict[str, Any] = {}
    kmsg_added: list[str] = []
    started: list[float] = []
    ended: list[float] = []
    for index, run in enumerate(run_dirs, start=1):
        reader = RunDir(run)
        identity = reader.identity()
        run_info = reader.run_info() or RunInfo()
        label = runner_label(run, identity, taken)
        counts: dict[str, Any] = {"events": 0, "controller": 0, "xid": 0, "ledger": 0, "skipped": 0}
        for f in reader.worker_files():
            n, s = _merge_jsonl(f, out / Layout.EVENTS_DIR / f"{label}-{f.name}", label, index)
            counts["events"] += n
            counts["skipped"] += s
        for name, key in ((Layout.CONTROLLER, "controller"), (Layout.XID, "xid")):
            n, s = _merge_jsonl(run / name, out / name, label, index)
            counts[key] += n
            counts["skipped"] += s
        for f in sorted(reader.ledger_dir().glob("*.jsonl")) if reader.ledger_dir().is_dir() else ():
            n, s = _merge_jsonl(f, out / Layout.LEDGER_DIR / f"{label}-{f.name}", label, index,
                                scrub=False)
            counts["ledger"] += n
            counts["skipped"] += s
        added = reader.text(Layout.KMSG_ADDED)
        if added is not None:
            kmsg_added += [f"[{label}] {line}" for line in added.splitlines()]
        copy_problems = copy_scrubbed(run, out / "runners" / label)
        identities[label] = identity
        if run_info.started is not None:
            started.append(run_info.started)
        if run_info.ended is not None:
            ended.append(run_info.ended)
        sources.append({"runner": label, "index": index, "path": str(run.resolve()),
                        "id": run_info.id or run.name,
                        "host": identity.host if identity is not None else None,
                        "gpus": [g.to_json() for g in identity.gpus] if identity is not None else None,
                        "argv": redact_argv(run_info.argv), "exit_status": run_info.exit_status,
                        "records": counts, "pid_offset": index * PID_STRIDE,
                        "copy_problems": copy_problems})
    if kmsg_added:
        write_text_atomic(out / Layout.KMSG_ADDED, "\n".join(kmsg_added) + "\n")
    # GPUs of all runners, so summary's PCI -> device map sees every runner's devices
    all_gpus = [dict(g.to_json(), runner=label) for label, ident in identities.items()
                if ident is not None for g in ident.gpus]
    write_json_atomic(out / Layout.IDENTITY, {
        "merged": True, "gpus": all_gpus,
        "runners": {label: ident.to_json() if ident is not None else {}
                    for label, ident in identities.items()}})
    info = RunInfo.begin(out.name, kind="merged", cwd=str(Path.cwd()), merged_from=sources,
                         started=min(started) if started else None, argv=redact_argv(sys.argv))
    info = msgspec.structs.replace(info, started=min(started) if started else None,
                                   ended=max(ended) if ended else None)
    write_run_info(out, info)
    merge_info = {"merged": time.time(), "runners": sources, "duplicates": duplicates}
    from faulthunt.summary import summarize_run

    summary = summarize_run(out)
    # what a run says about itself (its pytest-randomly seed, items not repeated) is true of that
    # input only: each input's notes, named by its runner; no seed of one input for the whole merge
    summary["notes"] = [f"{src['runner']}: {note}" for src, run in zip(sources, run_dirs)
                        for note in _input_notes(run)]
    summary["random_seed"] = None
    write_json_atomic(out / Layout.SUMMARY, summary)
    write_run_info(out, info.finished(exit_status=summary.get("exit_status"), ended=info.ended))
    merge_info["summary"] = Layout.SUMMARY
    write_json_atomic(out / "merge.json", merge_info)
    return merge_info
