"""Bisect across versions of a package: one scratch virtual environment per version.

Each version gets ``python -m venv --system-site-packages --without-pip`` (so faulthunt, pytest and
the suite's other dependencies stay visible, and pip is the parent's), then ``pip install
--no-deps NAME==VERSION`` into it. The stress oracle then runs *inside* that environment as a
subprocess (``ENV/bin/python -m faulthunt bisect --oracle --json ...``), because pytest must import
the installed version, not the one in this process. Planning is the same flaky-aware plan as the
git bisect (``faulthunt.hunt.bisect.plan_runs``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import site
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from faulthunt.errors import FaulthuntError
from faulthunt.hunt.bisect import Plan, RefVerdict

_AVAILABLE = re.compile(r"^Available versions:\s*(.+)$", re.M)


def parse_index_versions(text: str) -> list[str]:
    """Versions from ``pip index versions NAME`` output, oldest first."""
    m = _AVAILABLE.search(text)
    if not m:
        raise FaulthuntError("pip index versions printed no 'Available versions:' line:\n" + text[-1000:],
                             fix="pass the versions yourself with --versions v1,v2,...")
    return sort_versions([v.strip() for v in m.group(1).split(",") if v.strip()])


def sort_versions(versions: Sequence[str]) -> list[str]:
    """Oldest first by PEP 440 ordering; a version that is not PEP 440 is an error."""
    from packaging.version import InvalidVersion, Version
    try:
        return sorted(dict.fromkeys(versions), key=Version)
    except InvalidVersion as exc:
        raise FaulthuntError(f"not a PEP 440 version: {exc}", fix="list the versions oldest first with --versions") from exc


def select_range(versions: Sequence[str], good: str | None, bad: str | None) -> list[str]:
    """The slice of ``versions`` (oldest first) from ``good`` to ``bad`` inclusive."""
    vs = list(versions)
    for label, v in (("--good-version", good), ("--bad-version", bad)):
        if v is not None and v not in vs:
            raise FaulthuntError(f"{label} {v} is not among the versions: {', '.join(vs)}",
                                 fix="pick one of the listed versions, or pass --versions")
    lo = vs.index(good) if good is not None else 0
    hi = vs.index(bad) if bad is not None else len(vs) - 1
    if hi - lo < 1:
        raise FaulthuntError(f"need the good version before the bad one (got {vs[lo]} .. {vs[hi]})",
                             fix="versions are oldest first; the good one must be older")
    return vs[lo:hi + 1]


def index_versions(name: str, pip_args: Sequence[str] = ()) -> list[str]:
    """``pip index versions NAME`` (pip's own resolver and indexes, including --find-links)."""
    p = subprocess.run([sys.executable, "-m", "pip", "index", "versions", name, *pip_args],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise FaulthuntError(f"pip index versions {name} failed: {(p.stderr or p.stdout).strip()[-1000:]}",
                             fix="check the name and index, or pass --versions v1,v2,...")
    return parse_index_versions(p.stdout)


def _venv_python(env: Path) -> Path:
    return env / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def make_env(env: Path, name: str, version: str, pip_args: Sequence[str] = ()) -> Path:
    """A scratch venv at ``env`` with ``name==version`` installed; returns its python."""
    if env.exists():
        shutil.rmtree(env)
    p = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(env)],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise FaulthuntError(f"python -m venv failed: {p.stderr.strip()}",
                             fix="install the venv module (Debian: apt-get install python3-venv)")
    py = _venv_python(env)
    if sys.prefix != sys.base_prefix:
        # This process is itself in a venv: --system-site-packages would expose the *base*
        # interpreter's packages, not ours. addsitedir (not a bare path line) so our .pth files,
        # editable installs included, are processed too; it appends, so the scratch install wins.
        purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                 capture_output=True, text=True, check=True).stdout.strip()
        lines = [f"import site; site.addsitedir({d!r})" for d in site.getsitepackages()]
        Path(purelib, "_faulthunt_parent.pth").write_text("\n".join(lines) + "\n")
    p = subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
                        f"{name}=={version}", *pip_args], capture_output=True, text=True)
    if p.returncode != 0:
        raise FaulthuntError(f"pip install {name}=={version} into {env} failed:\n{(p.stderr or p.stdout).strip()[-1500:]}",
                             fix="check the version exists on the index (or --find-links), or drop it from --versions")
    return py


def env_oracle_argv(py: Path, tests: Sequence[str], runs: int, *, measure: bool, base: Path, cwd: Path) -> list[str]:
    """The command that runs one oracle step inside a scratch environment."""
    return [str(py), "-m", "faulthunt", "bisect", "--oracle", "--json", "--repo", str(cwd),
            "--base", str(base), "--runs", str(runs), *(["--measure"] if measure else []), "--", *tests]


def run_env_oracle(argv: Sequence[str], cwd: Path) -> dict:
    """Run ``argv`` and read the JSON verdict from its last stdout line."""
    p = subprocess.run(list(argv), cwd=cwd, capture_output=True, text=True)
    last = (p.stdout.strip().splitlines() or [""])[-1]
    try:
        doc = json.loads(last)
    except json.JSONDecodeError:
        doc = None
    if not isinstance(doc, dict) or "runs" not in doc:
        raise FaulthuntError(f"the oracle in the scratch environment gave no verdict (exit {p.returncode}):\n"
                             f"{(p.stdout + p.stderr)[-1500:]}",
                             fix="check faulthunt and pytest import in that environment (it uses --system-site-packages)")
    if doc.get("error"):
        raise FaulthuntError(f"the oracle could not run: {doc['error']}", fix="check the test ids collect")
    return doc


@dataclasses.dataclass
class PackageBisect:
    """State of one package bisect; ``root`` holds the scratch environments and stress run dirs."""

    name: str
    tests: tuple[str, ...]
    root: Path
    cwd: Path
    pip_args: tuple[str, ...] = ()
    keep_envs: bool = False

    def env_for(self, version: str) -> Path:
        return make_env(self.root / f"env-{version}", self.name, version, self.pip_args)

    def _done(self, version: str) -> None:
        if not self.keep_envs:
            shutil.rmtree(self.root / f"env-{version}", ignore_errors=True)

    def measure(self, version: str, runs: int) -> tuple[int, int]:
        """(failing runs, runs) of ``runs`` stress runs with ``version`` installed."""
        py = self.env_for(version)
        try:
            doc = run_env_oracle(env_oracle_argv(py, self.tests, runs, measure=True, base=self.root / "runs",
                                                 cwd=self.cwd), self.cwd)
        finally:
            self._done(version)
        return int(doc["failures"]), int(doc["runs"])

    def judge(self, version: str, plan: Plan) -> RefVerdict:
        """Good after ``plan.runs_per_ref`` passes, bad on the first failure (inside the env)."""
        py = self.env_for(version)
        try:
            doc = run_env_oracle(env_oracle_argv(py, self.tests, plan.runs_per_ref, measure=False,
                                                 base=self.root / "runs", cwd=self.cwd), self.cwd)
        finally:
            self._done(version)
        runs = int(doc["runs"])
        good = doc["verdict"] == "good"
        return RefVerdict(doc["verdict"], int(doc["failures"]), runs, (1 - plan.rate_low) ** runs if good else 0.0)
