"""CI-native output: GitHub step summary, ``::error`` annotations, JUnit XML (read back by junitparser).

Unit tests on the committed H200 demo run and on a run of hostile ids; end to end, a real
``faulthunt stress`` with ``--junitxml`` under a GitHub-like environment, and ``faulthunt sanitize``
with the stand-in compute-sanitizer of tests/test_sanitizer_run.py.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from faulthunt.report import build_model
from faulthunt.report import github, junit
from faulthunt.report.ci import check_output_path, write_ci_outputs
from faulthunt.errors import UsageError
from test_report_escape import HOSTILE_IDS, hostile_run

DATA = Path(__file__).parent / "data" / "report"
DEMO = DATA / "h200_demo_run"

_COMMAND = re.compile(r"^::(?P<name>[a-z]+)(?: (?P<props>[^:]*))?::(?P<msg>.*)$")


def _unescape(text: str) -> str:
    return (text.replace("%0D", "\r").replace("%0A", "\n").replace("%3A", ":").replace("%2C", ",")
            .replace("%25", "%"))


def parse_command(line: str) -> tuple[str, dict[str, str], str]:
    """A workflow command split the way the runner splits it (one line; ',' and '=' separate)."""
    assert "\n" not in line and "\r" not in line
    m = _COMMAND.match(line)
    assert m, line
    props = {}
    for pair in (m.group("props") or "").split(","):
        if pair:
            key, value = pair.split("=", 1)
            props[key] = _unescape(value)
    return m.group("name"), props, _unescape(m.group("msg"))


# --- workflow commands ----------------------------------------------------------------------------

@pytest.mark.parametrize("raw, data, prop", [
    ("50% done", "50%25 done", "50%25 done"),
    ("a\nb\r\nc", "a%0Ab%0D%0Ac", "a%0Ab%0D%0Ac"),
    ("t.py::test[a,b]", "t.py::test[a,b]", "t.py%3A%3Atest[a%2Cb]"),
    ("%0A", "%250A", "%250A"),
])
def test_escaping_rules(raw: str, data: str, prop: str) -> None:
    assert github.escape_data(raw) == data
    assert github.escape_property(raw) == prop


def test_annotations_of_hostile_ids_round_trip(tmp_path: Path) -> None:
    model = build_model(hostile_run(tmp_path))
    lines = github.stress_annotations(model, lambda nodeid: (nodeid.split("::")[0] + ",x:y", 7))
    assert len(lines) == github.MAX_ANNOTATIONS + 1  # 10 errors, then how many more
    seen = []
    for line in lines[:-1]:
        name, props, msg = parse_command(line)
        assert name == "error" and set(props) == {"file", "line", "title"}
        assert props["file"] == "tests/test_h.py,x:y" and props["line"] == "7"
        seen.append(msg.split(": 1 of 1 runs failed", 1)[0])
    assert seen == sorted(HOSTILE_IDS)[:10]  # exact ids, newline included
    name, props, msg = parse_command(lines[-1])
    assert name == "warning" and msg.startswith(f"{len(HOSTILE_IDS) - 10} more failing test(s)")


def test_annotations_of_the_h200_demo() -> None:
    model = build_model(DEMO)
    lines = github.stress_annotations(model, lambda nodeid: ("kernels/suite/test_planted.py", 33))
    msgs = [parse_command(line) for line in lines]
    assert len(msgs) == 5  # the five failing tests
    name, props, msg = msgs[0]
    assert props == {"file": "kernels/suite/test_planted.py", "line": "33", "title": "faulthunt: 4/4 runs failed"}
    assert msg.startswith("kernels/suite/test_planted.py::test_planted[wild_write-cuda]: 4 of 4 runs failed, "
                          "100.0% (51.0%-100.0%), 4 Xid(s)\nfirst: ")
    san = [parse_command(line) for line in github.sanitize_annotations(model)]
    assert san[0][1] == {"file": "planted.cu", "line": "35", "title": "compute-sanitizer memcheck"}
    assert "read_past_end" in san[0][2]


def test_function_line() -> None:
    src = textwrap.dedent('''
        import pytest

        @pytest.mark.parametrize("x", [1])
        def test_a(x):
            pass

        class TestB:
            async def test_c(self):
                pass
    ''')
    assert github.function_line(src, "t.py::test_a[1]") == 5
    assert github.function_line(src, "t.py::test_a[a::b]") == 5
    assert github.function_line(src, "t.py::TestB::test_c") == 9
    assert github.function_line(src, "t.py::test_missing") is None
    assert github.function_line(src, "t.py") is None
    assert github.function_line("def (:", "t.py::test_a") is None


# --- step summary ---------------------------------------------------------------------------------

def test_step_summary_has_headline_and_tables() -> None:
    from markdown_it import MarkdownIt

    model = build_model(DEMO)
    text = github.stress_summary(model)
    assert text.startswith(f"## faulthunt stress: run {model.run_id}\n\n**{model.headline}**")
    html = MarkdownIt("commonmark").enable("table").render(text)
    assert html.count("<table>") == 3  # tests, failures, Xid events
    san = github.sanitize_summary(model)
    assert "First offending kernel: `read_past_end` at `planted.cu:35`" in san
    assert MarkdownIt("commonmark").enable("table").render(san).count("<table>") == 1


# --- JUnit XML ------------------------------------------------------------------------------------

def test_junit_of_the_h200_demo_reads_back(tmp_path: Path) -> None:
    from junitparser import Error, Failure, JUnitXml

    model = build_model(DEMO)
    path = tmp_path / "junit.xml"
    path.write_text(junit.render(model), encoding="utf-8")
    xml = JUnitXml.fromfile(str(path))
    suites = list(xml)
    assert len(suites) == 1
    suite = suites[0]
    assert suite.tests == len(model.by_test) == 38
    cases = {f"{c.classname}::{c.name}": c for c in suite}
    assert len(cases) == 38
    wild = cases["kernels.suite.test_planted::test_planted[wild_write-cuda]"]
    assert isinstance(wild.result[0], Failure)
    assert wild.result[0].message.startswith("4 of 4 runs failed, rate 100.0% (51.0%-100.0%), 4 Xid(s)")
    assert "test_planted[wild_write-cuda-2-4]: failed (worker gw1, pid 8016, GPU 0 (from Xid))" in wild.result[0].text
    hang = cases["kernels.suite.test_planted::test_planted[bounded_hang-cuda]"]
    assert isinstance(hang.result[0], Error) and hang.result[0].type == "hung"
    passing = [c for c in cases.values() if not c.result]
    assert len(passing) == 33 and all(c.time >= 0 for c in passing)
    assert suite.failures == 4 and suite.errors == 1
    assert sum(c.time for c in cases.values()) > 0  # durations from the spans


def test_junit_shape_and_hostile_ids(tmp_path: Path) -> None:
    model = build_model(hostile_run(tmp_path))
    root = ET.fromstring(junit.render(model).encode())
    assert root.tag == "testsuites"
    (suite,) = list(root)
    assert suite.tag == "testsuite" and {"name", "tests", "failures", "errors", "time"} <= set(suite.attrib)
    assert suite[0].tag == "properties"
    cases = suite.findall("testcase")
    assert len(cases) == len(HOSTILE_IDS)
    for case, nodeid in zip(cases, HOSTILE_IDS):
        assert {"classname", "name", "time", "file"} <= set(case.attrib)
        assert case.get("classname") == "tests.test_h" and f"tests/test_h.py::{case.get('name')}" == nodeid
        (failure,) = case.findall("failure")
        assert failure.get("message").startswith("1 of 1 runs failed")
        assert nodeid in failure.text
    assert junit.split_nodeid("a/b.py::C::t[x::y]") == ("a.b.C", "t[x::y]", "a/b.py")
    assert junit.split_nodeid("a/b.py") == ("a.b", "a/b.py", "a/b.py")


def test_junit_replaces_characters_xml_cannot_hold(tmp_path: Path) -> None:
    model = build_model(hostile_run(tmp_path))
    failures = tuple(dict(f, message="bell\x07 nul\x00 esc\x1b") for f in model.failures)
    import dataclasses
    text = junit.render(dataclasses.replace(model, failures=failures))
    ET.fromstring(text.encode())  # parses
    assert "bell\ufffd nul\ufffd esc\ufffd" in text


# --- the I/O edge -----------------------------------------------------------------------------------

def test_write_ci_outputs_appends_and_annotates(tmp_path: Path) -> None:
    summary = tmp_path / "step_summary.md"
    summary.write_text("earlier step\n")
    out = io.StringIO()
    done = write_ci_outputs(DEMO, "stress", junitxml=tmp_path / "out" / "junit.xml", out=out,
                            env={"GITHUB_STEP_SUMMARY": str(summary), "GITHUB_ACTIONS": "true",
                                 "GITHUB_WORKSPACE": str(tmp_path)})
    assert summary.read_text().startswith("earlier step\n## faulthunt stress: run ")
    assert len([ln for ln in out.getvalue().splitlines() if ln.startswith("::error ")]) == 5
    assert (tmp_path / "out" / "junit.xml").exists()
    assert done[0].startswith("JUnit XML:") and done[-1] == "5 annotation(s)"


def test_nothing_asked_nothing_done(tmp_path: Path) -> None:
    out = io.StringIO()
    assert write_ci_outputs(DEMO, "stress", env={}, out=out) == [] and out.getvalue() == ""
    assert write_ci_outputs(DEMO, "stress", env={"GITHUB_ACTIONS": "false"}, out=out) == []


def test_unwritable_summary_is_said_not_raised(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    done = write_ci_outputs(DEMO, "stress", env={"GITHUB_STEP_SUMMARY": str(tmp_path)}, out=io.StringIO())
    assert done == [] and "cannot append to GITHUB_STEP_SUMMARY" in capsys.readouterr().err


def test_junitxml_path_checked_before_the_run(tmp_path: Path) -> None:
    with pytest.raises(UsageError):
        check_output_path(tmp_path, "--junitxml")
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError):
        check_output_path(tmp_path / "file" / "sub" / "j.xml", "--junitxml")
    check_output_path(tmp_path / "new" / "j.xml", "--junitxml")


# --- end to end -------------------------------------------------------------------------------------

@pytest.mark.slow
def test_stress_cli_writes_junit_summary_and_annotations(tmp_path: Path) -> None:
    from junitparser import Failure, JUnitXml

    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "test_ci.py").write_text(textwrap.dedent('''
        import pytest

        @pytest.mark.parametrize("v", ["a b", "x/y"])
        def test_p(v):
            assert v != "a b", "planted failure"
    '''))
    summary = tmp_path / "summary.md"
    env = dict(os.environ, GITHUB_STEP_SUMMARY=str(summary), GITHUB_ACTIONS="true", GITHUB_WORKSPACE=str(proj))
    env.pop("FAULTHUNT_RUN_DIR", None)
    p = subprocess.run([sys.executable, "-m", "faulthunt", "stress", "-n", "0", "--count", "2",
                        "--xid-source", "none", "--run-dir", str(tmp_path / "run"),
                        "--junitxml", str(tmp_path / "junit.xml"), "test_ci.py"],
                       cwd=proj, env=env, capture_output=True, text=True, timeout=240)
    assert p.returncode == 1, p.stdout + p.stderr
    errors = [parse_command(ln) for ln in p.stdout.splitlines() if ln.startswith("::error")]
    assert len(errors) == 1
    _, props, msg = errors[0]
    assert props["file"] == "test_ci.py" and props["line"] == "5"
    assert msg.startswith("test_ci.py::test_p[a b]: 2 of 2 runs failed")
    assert "| test_ci.py::test_p[a b] | 2 | 2 |" in summary.read_text()
    cases = {c.name: c for suite in JUnitXml.fromfile(str(tmp_path / "junit.xml")) for c in suite}
    assert set(cases) == {"test_p[a b]", "test_p[x/y]"}
    assert isinstance(cases["test_p[a b]"].result[0], Failure) and not cases["test_p[x/y]"].result


@pytest.mark.slow
def test_sanitize_cli_appends_its_summary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from test_sanitizer_run import SUITE, standin_env, stress_run

    from faulthunt.cli import main

    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "test_k.py").write_text(SUITE)
    run = stress_run(tmp_path, proj)
    for key, value in standin_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    assert main(["sanitize", "--run", str(run), "-q", "--timeout", "120"]) == 1
    text = summary.read_text()
    assert text.startswith("## faulthunt sanitize: run r1")
    assert "First offending kernel: `max_reduce_off_by_one` at `faults.cu:18`" in text
