"""bisect's oracle selects tests as data: node ids by --faulthunt-id, paths behind '--' (issue 18)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from faulthunt.errors import UsageError
from faulthunt.hunt.oracle import oracle_selection, stress_oracle


def test_selection_of_ids_and_of_paths() -> None:
    assert oracle_selection(["t.py::test_p[a b]"]) == ["--faulthunt-id=t.py::test_p[a b]", "--", "t.py::test_p"]
    assert oracle_selection(["tests/", "t.py"]) == ["--", "tests/", "t.py"]


@pytest.mark.parametrize("tests", [["-k", "foo"], ["--basetemp=/tmp/x"], ["t.py::test_a", "tests/"],
                                   ["t.py::a\n--junitxml=x"]])
def test_selection_refuses_options_and_mixes(tests: list[str]) -> None:
    with pytest.raises(UsageError) as err:
        oracle_selection(tests)
    assert err.value.fix


@pytest.mark.slow
def test_oracle_runs_a_parametrized_id_under_its_count(tmp_path: Path) -> None:
    (tmp_path / "test_o.py").write_text(
        "import pytest\n\n@pytest.mark.parametrize('p', ['a b', 'x/y'])\n"
        "def test_p(p):\n    assert p != 'a b'\n")
    oracle = stress_oracle(oracle_selection(["test_o.py::test_p[a b]"]), cwd=tmp_path, base=tmp_path / ".fh")
    assert oracle(3) == (3, 3)


@pytest.mark.slow
def test_oracle_step_refuses_an_option_as_a_test(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep")
    (tmp_path / "test_o.py").write_text("def test_a(tmp_path):\n    pass\n")  # uses --basetemp
    p = subprocess.run([sys.executable, "-m", "faulthunt", "bisect", "--oracle", "--runs", "1",
                        "--repo", str(tmp_path), "--base", str(tmp_path / ".fh"), "--",
                        f"--basetemp={victim}", "test_o.py::test_a"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "is not a test node id" in p.stderr, p.stdout + p.stderr
    assert (victim / "precious.txt").read_text() == "keep"
