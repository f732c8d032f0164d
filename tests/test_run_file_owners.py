"""Each run file has one owner of its format: harness/records/ and harness/rundir.py.

docs/architecture.md says no other module parses a run file. This test holds the code to it: every
JSON decode outside the owners is listed below with the reason it is not a run file, and no other
module names a run file by its literal name (they use ``rundir.Layout``).
"""

from __future__ import annotations

import ast
from pathlib import Path

from faulthunt.report.ci import repo_locator
from faulthunt.rundir import Layout

HARNESS = Path(__file__).resolve().parent.parent / "harness"
OWNERS = ("records/", "rundir.py")

#: module -> why its JSON decoding is not the parsing of a run file
DECODERS = {
    "ledger/reader.py": "the ledger reader owns the ledger's format (docs/ledger.md)",
    "sanitizer/plan.py": "pytest's own last-failed cache, not a faulthunt file",
    "sanitizer/rerun_plugin.py": "the rerun order file, written by the same module for its rerun",
    "hunt/pkgbisect.py": "the last line a bisect probe prints",
    "cli/xid.py": "a cursor the user passes on the command line",
    "scrub.py": "generic secret scrubbing of copied JSON files, keys kept as they are",
    "merge.py": "records copied as they are; only the keys every record shares are rewritten",
}

#: calls that decode JSON (by the name or attribute called)
DECODE_CALLS = {"loads", "load", "decode", "Decoder", "read_json", "read_jsonl", "read_jsonl_dir",
                "parse_jsonl"}
#: receivers whose `load`/`decode` are not JSON (pickle is never used; numpy is not a dependency)
JSON_MODULES = {"json", "msgspec"}

RUN_FILE_NAMES = {value for name, value in vars(Layout).items()
                  if name.isupper() and isinstance(value, str) and value.endswith((".json", ".jsonl"))}


def _modules() -> list[tuple[str, ast.Module]]:
    found = []
    for path in sorted(HARNESS.rglob("*.py")):
        rel = path.relative_to(HARNESS).as_posix()
        if not rel.startswith(OWNERS):
            found.append((rel, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))))
    return found


def _is_json_decode(call: ast.Call) -> bool:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id in {"read_json", "read_jsonl", "read_jsonl_dir", "parse_jsonl"}
    if not isinstance(func, ast.Attribute) or func.attr not in DECODE_CALLS:
        return False
    root = func.value
    while isinstance(root, ast.Attribute):
        root = root.value
    return isinstance(root, ast.Name) and root.id in JSON_MODULES | {"rundir"}


def test_only_the_listed_modules_decode_json_and_each_still_does() -> None:
    decoding = {rel for rel, tree in _modules()
                if any(isinstance(node, ast.Call) and _is_json_decode(node) for node in ast.walk(tree))}
    assert decoding - DECODERS.keys() == set(), "parse run files through RunDir (harness/rundir.py)"
    # a listed module that stopped decoding leaves a stale reason behind
    assert DECODERS.keys() - decoding == set()


def test_no_module_outside_the_owners_names_a_run_file_literally() -> None:
    assert RUN_FILE_NAMES >= {"run.json", "summary.json", "xid.jsonl", "controller.jsonl"}
    named = sorted((rel, node.value) for rel, tree in _modules() for node in ast.walk(tree)
                   if isinstance(node, ast.Constant) and node.value in RUN_FILE_NAMES)
    assert named == [], "use rundir.Layout and RunDir"


def test_ci_annotations_survive_a_damaged_run_json(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("def test_x():\n    assert 0\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / Layout.RUN).write_bytes(b"\x00\xff{not json")
    monkeypatch.chdir(tmp_path)
    locate = repo_locator(run, {"GITHUB_WORKSPACE": str(tmp_path)})
    # no cwd recorded: ids are taken relative to the current directory, never a traceback
    assert locate("tests/test_a.py::test_x") == ("tests/test_a.py", 1)
