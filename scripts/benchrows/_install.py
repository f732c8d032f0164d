"""faulthunt laid out as a user's ``pip install`` lays it out, for the rows that time whole
commands: not through the development checkout's editable install, whose import hook (pathlib,
urllib, fnmatch and more, imported by every Python process of the dev venv) adds ~25 ms of
start-up to each process that no user's install has.
"""

from __future__ import annotations

import atexit
import functools
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

_CONSOLE_SCRIPT = """#!{python}
import sys
from faulthunt.cli import console_main
if __name__ == '__main__':
    sys.argv[0] = sys.argv[0].removesuffix('.exe')
    sys.exit(console_main())
"""


@functools.cache
def installed() -> str:
    """faulthunt as ``pip install`` lays it out, in a fresh venv; returns its console script (the
    venv's ``python`` is beside it).

    The package is copied from this checkout (``faulthunt`` from harness/, ``faulthunt.kernels`` from
    kernels/, as pyproject.toml's package-dir maps them, the compiled parts the checkout has built
    with them) into a site directory; the venv's .pth adds that directory and this environment's
    site-packages (faulthunt's dependencies, pytest and its plugins, and faulthunt's entry points,
    so plain pytest loads the plugin, inactive, as in a user's install) as plain paths, so no
    editable-install hook is imported. Removed when the bench ends.
    """
    root = Path(__file__).resolve().parents[2]
    tmp = Path(tempfile.mkdtemp(prefix="faulthunt-bench-install-"))
    atexit.register(shutil.rmtree, tmp, True)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    site = tmp / "site"
    shutil.copytree(root / "harness", site / "faulthunt", ignore=skip)
    shutil.copytree(root / "kernels", site / "faulthunt" / "kernels", ignore=skip)
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(purelib, "faulthunt-bench.pth").write_text("\n".join([str(site), *sorted(deps)]) + "\n")
    script = venv / "bin" / "faulthunt"
    script.write_text(_CONSOLE_SCRIPT.format(python=python))
    script.chmod(0o755)
    return str(script)


def installed_python() -> str:
    """The ``python`` of :func:`installed`'s venv."""
    return str(Path(installed()).parent / "python")


def compiled() -> bool:
    """Whether the install the rows run has kernlog's compiled part (built in the checkout by
    ``pip install -e .``, copied with it; without it faulthunt takes its pure-Python route)."""
    site = Path(installed()).parents[2] / "site" / "faulthunt" / "kernlog"
    return any(site.glob("_scan*.so"))
