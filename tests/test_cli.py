from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from faulthunt.cli import COMMANDS, ExitCode, build_parser, main


def test_no_command_prints_help(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main([]) == ExitCode.USAGE
    assert "faulthunt" in capsys.readouterr().err


def test_python_dash_m_version() -> None:
    out = subprocess.run([sys.executable, "-m", "faulthunt", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("faulthunt ")


def test_stress_drops_its_own_double_dash_before_pytest() -> None:
    """pytest reads what follows a ``--`` as paths: `-- -p no:cacheprovider` after a faulthunt
    option (`-k`) reached pytest behind a literal `--`, and the run collected nothing."""
    from faulthunt.cli import build_parser
    from faulthunt.cli.stress import _pytest_args

    parser = build_parser()
    for argv, want in [
        (["stress", "t.py", "-k", "a or b", "--", "-p", "no:x"], ("t.py", "-p", "no:x")),
        (["stress", "-n", "2", "--", "t.py", "-q"], ("t.py", "-q")),
    ]:
        args, extra = parser.parse_known_args(argv)
        args.extra = extra
        assert _pytest_args(args, None) == want, argv
# --- subcommand modules are imported only when their command runs --------------------------------------

@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_command_table_says_what_each_module_says(name: str) -> None:
    module = importlib.import_module(f"faulthunt.cli.{COMMANDS[name][0]}")
    assert COMMANDS[name][1] == module.HELP, f"update faulthunt.cli.COMMANDS[{name!r}] to the module's HELP"


def test_top_level_help_lists_every_command_with_its_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps the lines
    for name, (_, help_line) in COMMANDS.items():
        assert f"{name} {' '.join(help_line.split())}" in out


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_help_is_complete(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main([name, "--help"])
    assert done.value.code == 0
    lazy = capsys.readouterr().out
    full = build_parser()  # every command's arguments, as the parser was built before
    sub = next(a for a in full._actions if a.dest == "command")
    assert lazy == sub.choices[name].format_help()


def _modules_after(args: list[str]) -> set[str]:
    code = ("import sys\nfrom faulthunt.cli import main\n"
            f"try:\n    main({args!r})\nexcept SystemExit:\n    pass\n"
            "print(' '.join(m for m in sys.modules if m.startswith('faulthunt') or m in ('subprocess', 'threading')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return set(out.split()[-1000:])


def test_version_and_help_import_no_command_module() -> None:
    for args in (["--version"], ["--help"]):
        assert not {m for m in _modules_after(args) if m.startswith("faulthunt.cli.")}, args


def test_xid_parse_imports_only_what_it_uses(tmp_path) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "k.log"
    log.write_text("[1.0] NVRM: Xid (PCI:0000:00:06): 43, pid=5, name=a, channel 0x1\n")
    loaded = _modules_after(["xid", "parse", "--json", str(log)])
    assert "faulthunt.cli.xid" in loaded and "faulthunt.kernlog.parse" in loaded
    assert not loaded & {"faulthunt.cli.stress", "faulthunt.kernlog.sources", "faulthunt.kernlog.incident",
                         "subprocess", "threading"}


def test_unknown_command_names_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["xdi", "parse"])
    assert done.value.code == 2 and "invalid choice: 'xdi'" in capsys.readouterr().err
