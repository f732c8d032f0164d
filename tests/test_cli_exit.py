"""console_main's exit: the heap is collected once and frozen (cli._settle_heap), and what the exit
did before still happens: garbage cycles finalized, atexit handlers run, the output flushed."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CODE = '''
import atexit, gc, sys
from pathlib import Path

out = Path(sys.argv[1])


class Cycle:
    def __init__(self):
        self.me = self

    def __del__(self):
        with open(out, "a") as fh:
            fh.write("finalized\\n")


Cycle()  # garbage at once, but only the cyclic collector can free it
gc.disable()  # so that nothing collects it before the exit does
atexit.register(lambda: open(out, "a").write(f"atexit frozen={gc.get_freeze_count() > 0}\\n"))
sys.argv = ["faulthunt", "--version"]
from faulthunt.cli import console_main
console_main()
'''


def test_exit_still_finalizes_garbage_and_runs_atexit(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    proc = subprocess.run([sys.executable, "-c", CODE, str(out)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("faulthunt ") and proc.stderr == ""
    assert out.read_text().splitlines() == ["finalized", "atexit frozen=True"]
