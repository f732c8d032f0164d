"""The bench's cachegrind reader (scripts/benchrows/_cachegrind.py), on real cachegrind output.

``data/bench/cachegrind_true.out`` is what ``valgrind --tool=cachegrind --cache-sim=no`` wrote for
``/bin/true`` (valgrind 3.19): its ``summary:`` line says 129911 instructions.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from benchrows import _cachegrind

DATA = Path(__file__).resolve().parent / "data" / "bench"
needs_valgrind = pytest.mark.skipif(shutil.which("valgrind") is None,
                                    reason="valgrind is not installed here")


def test_instructions_of_a_captured_file() -> None:
    text = (DATA / "cachegrind_true.out").read_text()
    assert _cachegrind.instructions(text) == 129911


@pytest.mark.parametrize("text", [
    "",
    "events: Ir\n",                                  # cut before its summary
    "summary: 12\n",                                 # no events line
    "events: I1mr Dr\nsummary: 1 2\n",               # no Ir counted
    "events: Ir Dr\nsummary: 5\n",                   # fewer totals than counters
    "==1== I   refs:      129,911\n",                # valgrind's stderr, not its file
])
def test_not_a_cachegrind_file_says_so(text: str) -> None:
    with pytest.raises(ValueError, match="not a cachegrind output file"):
        _cachegrind.instructions(text)


@needs_valgrind
def test_count_runs_a_command_and_cleans_up(tmp_path: Path) -> None:
    got = _cachegrind.count(["/bin/true"], out=tmp_path / "cg", cwd=tmp_path, env={},
                            stdout=tmp_path / "stdout")
    assert 10_000 < got < 10_000_000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stdout"]


@needs_valgrind
def test_count_with_the_cache_simulation_reads_ir(tmp_path: Path) -> None:
    """With several counters per line, Ir is the one read (the first, by the events line)."""
    import subprocess

    out = tmp_path / "sim.out"
    subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=yes",
                    f"--cachegrind-out-file={out}", "/bin/true"], check=True,
                   capture_output=True)
    text = out.read_text()
    names = next(ln for ln in text.splitlines() if ln.startswith("events:")).split()[1:]
    totals = next(ln for ln in text.splitlines() if ln.startswith("summary:")).split()[1:]
    assert len(names) > 1
    assert _cachegrind.instructions(text) == int(totals[names.index("Ir")])


@needs_valgrind
def test_count_of_a_failing_command_raises(tmp_path: Path) -> None:
    import subprocess

    with pytest.raises(subprocess.CalledProcessError):
        _cachegrind.count(["/bin/false"], out=tmp_path / "cg", cwd=tmp_path, env={},
                          stdout=tmp_path / "stdout")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stdout"]


@needs_valgrind
def test_count_tree_sums_every_process_started_under_the_command(tmp_path: Path) -> None:
    """A shell that runs /bin/true twice: three processes, each counted once, the sum returned
    and every output file removed."""
    alone = _cachegrind.count(["/bin/true"], out=tmp_path / "one", cwd=tmp_path, env={},
                              stdout=tmp_path / "stdout")
    got, status = _cachegrind.count_tree(
        ["/bin/sh", "-c", "/bin/true; /bin/true; exit 3"], out=tmp_path / "cg", cwd=tmp_path,
        env={"PATH": "/bin:/usr/bin"}, stdout=tmp_path / "stdout")
    assert status == 3 and len(got) == 3
    assert sorted(cmd for cmd, _ in got) == ["/bin/sh -c /bin/true; /bin/true; exit 3",
                                             "/bin/true", "/bin/true"]
    assert sum(n for _, n in got) > 2 * alone
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stdout"]
