"""CI-native output of ``faulthunt stress`` and ``sanitize`` (the I/O edge of report/github, junit).

- ``GITHUB_STEP_SUMMARY`` set: the report's headline and tables are appended to that file
  (GitHub shows it on the job's page).
- ``GITHUB_ACTIONS=true``: failing tests (stress) or findings (sanitize) are printed as
  ``::error file=...,line=...::`` workflow commands, so they show on the run and the diff.
- ``--junitxml PATH`` (stress): a JUnit XML file of the run, one testcase per base test.

A CI output that cannot be written is said on stderr and never changes the exit status: the hunt's
result stands.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO

from faulthunt.report.model import ReportModel, build_model
from faulthunt.rundir import RunDir, write_text_atomic


def check_output_path(path: Path, option: str) -> None:
    """Refuse, before anything runs, an output path that cannot become a file."""
    from faulthunt.errors import UsageError

    if path.is_dir():
        raise UsageError(f"{option} {path} is a directory", fix=f"name a file, e.g. {path / 'faulthunt.xml'}")
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise UsageError(f"{option} {path}: {parent} is a file, not a directory",
                         fix="choose a path whose folders are folders")


def repo_locator(run_dir: Path, env: Mapping[str, str]) -> Callable[[str], tuple[str | None, int | None]]:
    """``nodeid -> (file relative to the workspace, line of its def)`` for annotations.

    A node id is relative to the directory pytest ran in (run.json ``cwd``); GitHub wants paths
    relative to the checkout (``GITHUB_WORKSPACE``). A file outside the workspace keeps its id path.
    """
    from faulthunt.report.github import function_line

    info = RunDir(run_dir).run_info()
    cwd = Path(info.cwd) if info is not None and info.cwd else Path.cwd()
    workspace = Path(env.get("GITHUB_WORKSPACE") or cwd)

    def locate(nodeid: str) -> tuple[str | None, int | None]:
        rel = nodeid.split("::", 1)[0]
        path = (cwd / rel).resolve()
        try:
            shown = str(path.relative_to(workspace.resolve()))
        except ValueError:
            shown = rel
        try:
            line = function_line(path.read_text(encoding="utf-8", errors="replace"), nodeid)
        except OSError:
            line = None
        return shown, line

    return locate


def write_ci_outputs(run_dir: Path, command: str, *, junitxml: Path | None = None,
                     env: Mapping[str, str] | None = None, out: IO[str] | None = None,
                     model: ReportModel | None = None) -> list[str]:
    """Write what the CI environment asks for; returns what was done, one line each."""
    from faulthunt.report import github, junit

    env = os.environ if env is None else env
    out = out or sys.stdout
    step_summary = env.get("GITHUB_STEP_SUMMARY")
    annotate = env.get("GITHUB_ACTIONS") == "true"
    if not (step_summary or annotate or junitxml):
        return []
    model = model or build_model(run_dir)
    done: list[str] = []
    if junitxml is not None:
        try:
            write_text_atomic(junitxml, junit.render(model))
            done.append(f"JUnit XML: {junitxml}")
        except OSError as exc:
            _warn(f"cannot write the JUnit XML to {junitxml}: {exc.strerror or exc}")
    if step_summary:
        text = github.stress_summary(model) if command == "stress" else github.sanitize_summary(model)
        try:
            with open(step_summary, "a", encoding="utf-8") as fh:
                fh.write(text)
            done.append(f"step summary: {step_summary}")
        except OSError as exc:
            _warn(f"cannot append to GITHUB_STEP_SUMMARY ({step_summary}): {exc.strerror or exc}")
    if annotate:
        lines = (github.stress_annotations(model, repo_locator(run_dir, env)) if command == "stress"
                 else github.sanitize_annotations(model))
        for line in lines:
            out.write(line + "\n")
        out.flush()
        done.append(f"{len(lines)} annotation(s)")
    return done


def _warn(message: str) -> None:
    print(f"faulthunt: {message}", file=sys.stderr, flush=True)
