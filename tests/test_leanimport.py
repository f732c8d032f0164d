"""The console script imports msgspec without typing_extensions (faulthunt.leanimport): what a
command imports is counted, never timed; a package that needs the hidden module still gets it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from faulthunt.leanimport import ImportHiding


@pytest.fixture
def packages(tmp_path: Path) -> Iterator[Path]:
    """A directory on sys.path for throwaway packages; whatever they import is forgotten after."""
    before = set(sys.modules)
    sys.path.insert(0, str(tmp_path))
    (tmp_path / "fh_hidden.py").write_text("VALUE = 42\n")
    yield tmp_path
    sys.path.remove(str(tmp_path))
    for name in set(sys.modules) - before:
        del sys.modules[name]


def _package(root: Path, name: str, init: str) -> None:
    (root / name).mkdir()
    (root / name / "__init__.py").write_text(textwrap.dedent(init))


def _hiding(name: str) -> ImportHiding:
    hiding = ImportHiding(name, "fh_hidden")
    sys.meta_path.insert(0, hiding)
    return hiding


def test_the_package_imports_without_the_hidden_module_which_comes_back_after(packages: Path) -> None:
    _package(packages, "fh_optional", """
        try:
            import fh_hidden
            FOUND = True
        except ImportError:
            FOUND = False
        from fh_optional import sub
    """)
    (packages / "fh_optional" / "sub.py").write_text("SUB = 1\n")
    hiding = _hiding("fh_optional")
    import fh_optional

    assert fh_optional.FOUND is False and fh_optional.sub.SUB == 1
    assert "fh_hidden" not in sys.modules  # out of sight during the import only
    import fh_hidden

    assert fh_hidden.VALUE == 42
    assert hiding not in sys.meta_path  # once: it left on the import it was there for


def test_a_package_that_needs_the_hidden_module_still_imports(packages: Path) -> None:
    _package(packages, "fh_needs", """
        from fh_needs import sub
        import fh_hidden
        VALUE = fh_hidden.VALUE
    """)
    (packages / "fh_needs" / "sub.py").write_text("RUNS = []\nRUNS.append(1)\n")
    _hiding("fh_needs")
    import fh_needs

    assert fh_needs.VALUE == 42
    assert sys.modules["fh_hidden"].VALUE == 42
    # the first attempt's submodule was forgotten: the one in use is the second attempt's
    assert fh_needs.sub is sys.modules["fh_needs.sub"] and fh_needs.sub.RUNS == [1]


def test_other_imports_pass_by_and_an_already_imported_module_is_left_alone(packages: Path) -> None:
    _package(packages, "fh_other", "import fh_hidden\n")
    _package(packages, "fh_later", """
        try:
            import fh_hidden
            FOUND = True
        except ImportError:
            FOUND = False
    """)
    hiding = _hiding("fh_later")
    import fh_other  # not the hiding's package: fh_hidden imports as usual

    assert fh_other.fh_hidden.VALUE == 42
    assert hiding in sys.meta_path
    import fh_later  # fh_hidden is imported already: hiding it now would spare nothing

    assert fh_later.FOUND is True
    assert hiding not in sys.meta_path


def test_the_console_script_imports_msgspec_without_typing_extensions(tmp_path: Path) -> None:
    pytest.importorskip("typing_extensions")  # installed with the test extras; users often have it
    log = tmp_path / "kern.log"
    log.write_text("NVRM: Xid (PCI:0000:3b:00): 31, pid=1, name=python, Ch 00000010\n")
    code = textwrap.dedent("""
        import atexit, sys
        seen = ("msgspec", "typing_extensions", "inspect")
        atexit.register(lambda: print(*[m for m in seen if m in sys.modules], file=sys.stderr))
        sys.argv = ["faulthunt", "xid", "parse", "--json", sys.argv[1]]
        from faulthunt.cli import console_main
        console_main()
    """)
    proc = subprocess.run([sys.executable, "-c", code, str(log)], capture_output=True, text=True,
                          check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert '"xid": 31' in proc.stdout or '"xid":31' in proc.stdout
    assert proc.stderr.split() == ["msgspec"]  # typing_extensions and inspect spared
