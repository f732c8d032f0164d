"""Damaged run directories: every command that reads a run gives a clear message (a
FaulthuntError) or a degraded-but-correct result, never a traceback (issue 17).

Table-driven cases for each named damage, then a hypothesis fuzzer over the run files. The
commands run in-process: report (md, json, html), stage (and so session, which stages first),
sanitize's test selection, map, isolate's predecessors, merge, and the summary recomputation.
"""

from __future__ import annotations

import io
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from faulthunt import cli
from faulthunt.errors import FaulthuntError
from faulthunt.rundir import Layout, RunDir

DATA = Path(__file__).parent / "data"
BASE_RUN = DATA / "report" / "h200_stress_run"
SANITIZER_JSON = DATA / "report" / "sample_run" / "sanitizer" / "sanitizer.json"
FIRST_EVENTS = "events/gw0-1021.jsonl"


def make_run(tmp: Path) -> Path:
    """A real H200 run (events, controller, Xids, ledger, mapping) plus a sanitizer.json."""
    run = tmp / "run"
    shutil.copytree(BASE_RUN, run)
    (run / "sanitizer").mkdir()
    shutil.copy(SANITIZER_JSON, run / "sanitizer" / "sanitizer.json")
    return run


def _deep(levels: int = 200_000) -> bytes:
    return b'{"event": "start", "nodeid": "t::a", "x": ' + b"[" * levels + b"]" * levels + b"}\n"


def _cut_in_utf8(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] + "é".encode()[:1])


def _replace(rel: str, data: bytes) -> Callable[[Path], None]:
    def damage(run: Path) -> None:
        (run / rel).write_bytes(data)
    return damage


def _append(rel: str, data: bytes) -> Callable[[Path], None]:
    def damage(run: Path) -> None:
        with open(run / rel, "ab") as fh:
            fh.write(data)
    return damage


def _dir_instead(rel: str) -> Callable[[Path], None]:
    def damage(run: Path) -> None:
        path = run / rel
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
        path.mkdir(parents=True)
        (path / "x.jsonl").write_text("{}\n")
    return damage


def _file_instead(rel: str) -> Callable[[Path], None]:
    def damage(run: Path) -> None:
        shutil.rmtree(run / rel)
        (run / rel).write_text("not a directory\n")
    return damage


def _all(*damages: Callable[[Path], None]) -> Callable[[Path], None]:
    def damage(run: Path) -> None:
        for d in damages:
            d(run)
    return damage


JUNK = bytes(range(256)) * 4
JSON_FILES = (Layout.RUN, Layout.SUMMARY, Layout.IDENTITY, Layout.ENV, Layout.MAPPING,
              Layout.KMSG_CURSOR, Layout.SANITIZER_JSON)
JSONL_FILES = (FIRST_EVENTS, Layout.CONTROLLER, Layout.XID)

DAMAGES: dict[str, Callable[[Path], None]] = {
    "summary cut inside a UTF-8 character": lambda run: _cut_in_utf8(run / Layout.SUMMARY),
    "failures is a string": _replace(Layout.SUMMARY, b'{"tests_run": 3, "failures": "x"}'),
    "run.json is a list": _replace(Layout.RUN, b"[1, 2]"),
    "pid is a list": _append(FIRST_EVENTS, b'{"event": "start", "nodeid": "t::a", "pid": [1]}\n'),
    "events line nested 200k deep": _append(FIRST_EVENTS, _deep()),
    "controller line nested 200k deep": _append(Layout.CONTROLLER, _deep()),
    "xid line nested 200k deep": _append(Layout.XID, _deep()),
    "summary nested 200k deep": _replace(Layout.SUMMARY, _deep()),
    "identity of wrong types": _replace(
        Layout.IDENTITY, b'{"host": 5, "gpus": "H200", "packages": [1], "driver": {"a": 1}}'),
    "identity gpu of wrong types": _replace(
        Layout.IDENTITY, b'{"host": "h", "gpus": [{"index": "zero", "pci": 6}, 7]}'),
    "env of wrong types": _replace(Layout.ENV, b'{"CUDA_VISIBLE_DEVICES": 0, "A": null}'),
    "mapping of wrong types": _replace(Layout.MAPPING, b'[1, {"verdict": 5}, {"address_int": "x"}]'),
    "sanitizer of wrong types": _replace(Layout.SANITIZER_JSON, b'{"findings": "x", "tests": 3}'),
    "sanitizer findings of wrong types": _replace(
        Layout.SANITIZER_JSON, b'{"findings": [{"address_range": ["a", "b"]}, 4, {"address_range": [1]}]}'),
    "hang dump outside the run": _append(
        FIRST_EVENTS, b'{"event": "hang", "nodeid": "t::a", "pid": 1021, "pyspy": "/etc/passwd",'
                      b' "faulthandler": "../../../../etc/hostname"}\n'),
    "options of wrong types": _replace(
        Layout.RUN, b'{"id": "r", "options": {"count": "many", "workers": [2]}, "pytest_argv": 3}'),
    "binary junk everywhere": _all(*(_replace(f, JUNK) for f in JSON_FILES + JSONL_FILES)),
    "empty files everywhere": _all(*(_replace(f, b"") for f in JSON_FILES + JSONL_FILES)),
    "directories where files should be": _all(*(_dir_instead(f) for f in JSON_FILES + JSONL_FILES
                                                + (Layout.KMSG_ADDED, Layout.REPRODUCER_LOG))),
    "files where directories should be": _all(_file_instead(Layout.EVENTS_DIR),
                                              _file_instead(Layout.LEDGER_DIR)),
    "nothing but a torn line": _all(*(_replace(f, b'{"event": "st') for f in JSONL_FILES)),
}


def run_every_reader(run: Path, tmp: Path) -> None:
    """Every command that reads a run, in-process; only FaulthuntError may come out."""
    from rich.console import Console

    from faulthunt.hunt.isolate import predecessors
    from faulthunt.report import build_model, render
    from faulthunt.sanitizer.run import select_tests
    from faulthunt.stage import plan_kit
    from faulthunt.report.terminal import render_summary
    from faulthunt.summary import summarize_run

    def guarded(fn: Callable[[], object]) -> None:
        try:
            fn()
        except FaulthuntError as exc:
            assert str(exc)  # a clear message

    summary = summarize_run(run)
    render_summary(summary, run, Console(file=io.StringIO(), width=120))
    model = build_model(run)
    for fmt in ("md", "json", "html"):
        assert render(model, fmt)
    guarded(lambda: plan_kit(run, identity_text=""))
    guarded(lambda: select_tests(run))
    guarded(lambda: predecessors(run, "test_wild.py::test_wild_store"))
    for argv in (["report", "--run", str(run), "--format", "all"],
                 ["map", "--run", str(run)],
                 ["stage", "--run", str(run), str(tmp / "kit"), "--force"],
                 ["merge", str(run), "-o", str(tmp / "merged"), "--force"]):
        code = cli.main(argv)
        assert isinstance(code, int)
    RunDir(run).problems()


@pytest.mark.parametrize("name", DAMAGES)
def test_damaged_run_reads_without_traceback(name: str, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    run = make_run(tmp_path)
    DAMAGES[name](run)
    run_every_reader(run, tmp_path)
    err = capsys.readouterr().err
    assert "Traceback" not in err


@pytest.mark.parametrize("name", ["failures is a string", "summary cut inside a UTF-8 character",
                                  "summary nested 200k deep"])
def test_a_damaged_summary_is_recomputed_not_trusted(name: str, tmp_path: Path) -> None:
    from faulthunt.report import build_model

    run = make_run(tmp_path)
    DAMAGES[name](run)
    model = build_model(run)
    assert any("summary recomputed" in n for n in model.notes)
    assert any(n.startswith("summary.json unreadable") for n in model.notes)
    assert model.rate["failures"] == 4 and model.rate["runs"] == 40  # what the events say


def test_bad_events_line_is_named_and_the_rest_reads(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    DAMAGES["pid is a list"](run)
    DAMAGES["events line nested 200k deep"](run)
    reader = RunDir(run)
    assert len(reader.spans()) == 40
    named = {(p.file, p.why.split(":")[0]) for p in reader.problems()}
    assert (FIRST_EVENTS, "Expected `int | null`, got `array` - at `$.pid`") in {
        (p.file, p.why) for p in reader.problems()}
    assert (FIRST_EVENTS, "nested too deeply to read") in named
    assert reader.skipped_lines()["events"] == 2


def test_a_bad_identity_keeps_its_good_fields(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    (run / Layout.IDENTITY).write_text('{"host": "node-1", "gpus": "H200", "kernel": 6}')
    reader = RunDir(run)
    ident = reader.identity()
    assert ident is not None and (ident.host, ident.gpus, ident.kernel) == ("node-1", [], None)
    assert sorted(p.why.split(":")[0] for p in reader.problems()) == ["gpus", "kernel"]


def test_cli_says_what_is_damaged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = make_run(tmp_path)
    DAMAGES["failures is a string"](run)
    assert cli.main(["report", "--run", str(run)]) == 0
    out = capsys.readouterr().out
    assert "summary.json unreadable" in out and "$.failures" in out


def test_an_unknown_kind_is_kept_not_read_whatever_its_pid(tmp_path: Path) -> None:
    """Found by the fuzzer below: a line of an unknown kind whose pid is a list made the report's
    timeline raise (TypeError: unhashable type)."""
    run = make_run(tmp_path)
    with open(run / FIRST_EVENTS, "ab") as fh:
        fh.write(b'{"event":"","pid":[]}\n{"event":"later","pid":{"a":1},"worker":"gw9"}\n')
    run_every_reader(run, tmp_path)


# --- the fuzzer ----------------------------------------------------------------------------------

_JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                       st.text(max_size=8), st.sampled_from(["start", "end", "hang", "crash", "t::a"]))
_JSON = st.recursive(_JSON_LEAF, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.dictionaries(st.sampled_from(["event", "nodeid", "pid", "worker", "t", "t_mono", "outcome",
                                     "xid", "mmu", "address", "failures", "gpus", "findings",
                                     "address_range", "kind", "pyspy", "options", "count"]),
                    inner, max_size=6)), max_leaves=12)
_CONTENT = st.one_of(
    st.binary(max_size=64),
    _JSON.map(lambda v: __import__("json").dumps(v).encode()),
    st.lists(_JSON.map(lambda v: __import__("json").dumps(v)), max_size=5).map(
        lambda lines: "\n".join(lines).encode()),
)
_FILES = st.sampled_from(JSON_FILES + JSONL_FILES + ("events/gw1-7.jsonl", Layout.KMSG_ADDED))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(st.dictionaries(_FILES, _CONTENT, min_size=1, max_size=4))
def test_fuzzed_run_files_never_raise(tmp_path_factory: pytest.TempPathFactory,
                                      files: dict[str, bytes]) -> None:
    tmp = tmp_path_factory.mktemp("fuzz")
    run = tmp / "run"
    (run / "events").mkdir(parents=True)
    (run / "ledger").mkdir()
    (run / "sanitizer").mkdir()
    for rel, data in files.items():
        (run / rel).write_bytes(data)
    run_every_reader(run, tmp)
