"""What a stress run's processes no longer do (issue 16): work counted, never timed.

- the hang watchdog wakes its thread only for a deadline earlier than the one it sleeps to;
- a worker without guard mode never imports the guard package;
- a pytest process without a faulthunt run imports nothing of faulthunt but the plugin, and a
  worker imports the redaction and sticky-error patterns only for a failure;
- ``faulthunt stress -q`` imports neither rich nor the renderer, and no report model unless a CI
  output is asked for;
- worker records are the same bytes as before (one msgspec pass, the newline included);
- identity's package versions are importlib.metadata's, read without importing it.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from faulthunt.records import codec
from faulthunt.records.events import Collected, TestEnd, TestStart, WorkerHello
from faulthunt.rundir import JsonlWriter


def test_watchdog_wakes_its_thread_once_for_a_run_of_tests() -> None:
    from faulthunt.recorder import _Watcher

    watcher = _Watcher()
    watcher.disarm(watcher.arm(300.0, lambda: None))  # the first test starts the thread
    deadline = time.monotonic() + 10
    while watcher._wake == math.inf and time.monotonic() < deadline:
        time.sleep(0.001)  # a test lasts longer than the thread takes to look
    for _ in range(500):  # 500 more tests with one timeout: each deadline after the last
        watcher.disarm(watcher.arm(300.0, lambda: None))
    assert watcher.notified == 1


def test_watchdog_still_fires_an_earlier_deadline_and_not_a_disarmed_one() -> None:
    from faulthunt.recorder import _Watcher

    watcher = _Watcher()
    fired: list[str] = []
    watcher.disarm(watcher.arm(300.0, lambda: fired.append("long")))
    short = threading.Event()
    watcher.disarm(watcher.arm(0.05, lambda: fired.append("cancelled")))
    watcher.arm(0.05, lambda: (fired.append("short"), short.set()))
    assert short.wait(10)
    assert fired == ["short"]


def test_plugin_names_the_guard_variable_of_the_guard_package() -> None:
    from faulthunt import plugin
    from faulthunt.guard.config import GUARD_ENV

    assert plugin.GUARD_ENV == GUARD_ENV


SUITE = textwrap.dedent('''
    import sys

    def test_what_the_worker_imported():
        import json
        with open("modules.json", "w") as fh:
            json.dump(sorted(m for m in sys.modules if m.startswith("faulthunt")), fh)
''')


def _run_worker(tmp_path: Path, env_extra: dict[str, str]) -> list[str]:
    (tmp_path / "test_mods.py").write_text(SUITE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAULTHUNT_")}
    env.update({"FAULTHUNT_RUN_DIR": str(tmp_path / "run"), "FAULTHUNT_LEDGER": "off",
                **env_extra})
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    "-p", "no:randomly", "test_mods.py"], cwd=tmp_path, env=env, check=True,
                   capture_output=True, timeout=120)
    return json.loads((tmp_path / "modules.json").read_text())


def test_a_worker_without_guard_mode_never_imports_the_guard_package(tmp_path: Path) -> None:
    modules = _run_worker(tmp_path, {})
    assert "faulthunt.plugin" in modules
    assert not [m for m in modules if m.startswith("faulthunt.guard")]


def test_a_worker_with_guard_mode_still_installs_it(tmp_path: Path) -> None:
    modules = _run_worker(tmp_path, {"FAULTHUNT_GUARD": "1", "FAULTHUNT_GUARD_DRIVER": "fake"})
    assert "faulthunt.guard.install" in modules


def test_plugin_names_the_run_directory_variable_and_the_id_option_of_their_modules() -> None:
    from faulthunt import nodeids, plugin, rundir
    from faulthunt.records import lines

    assert plugin.RUN_DIR_ENV == rundir.RUN_DIR_ENV
    assert plugin.SELECT_OPTION == nodeids.SELECT_OPTION
    # a recording process names the run directory's files without importing its readers
    for name in ("EVENTS_DIR", "CONTROLLER", "LEDGER_DIR", "HANGS_DIR", "FAULTHANDLER_DIR"):
        assert getattr(lines, name) == getattr(rundir.Layout, name), name


#: what the plugin's processes import, written by a test (msgspec stands for the records), and
#: the loader of each faulthunt module
IMPORTED = textwrap.dedent('''
    import json, sys

    def test_what_this_process_imported():
        with open("modules.json", "w") as fh:
            json.dump(sorted(m for m in sys.modules
                             if m.startswith(("faulthunt", "msgspec", "doctest"))), fh)
        with open("loaders.json", "w") as fh:
            json.dump({m: type(getattr(sys.modules[m], "__loader__", None)).__name__
                       for m in sys.modules if m.startswith("faulthunt")}, fh)
''')


def _imported(tmp_path: Path, env_extra: dict[str, str], *args: str) -> set[str]:
    (tmp_path / "test_imported.py").write_text(IMPORTED)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAULTHUNT_")}
    env.update(env_extra)
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    "-p", "no:randomly", "-p", "faulthunt", *args, "test_imported.py"],
                   cwd=tmp_path, env=env, check=True, capture_output=True, timeout=120)
    return set(json.loads((tmp_path / "modules.json").read_text()))


def test_a_pytest_process_without_a_run_imports_nothing_but_the_plugin(tmp_path: Path) -> None:
    # every pytest session where faulthunt is installed loads the plugin (docs/plugin.md)
    assert _imported(tmp_path, {}) == {"faulthunt", "faulthunt.plugin"}


def test_a_worker_imports_redaction_and_sticky_patterns_only_for_a_failure(tmp_path: Path) -> None:
    run = tmp_path / "run"
    modules = _imported(tmp_path, {"FAULTHUNT_RUN_DIR": str(run), "FAULTHUNT_LEDGER": "off"},
                        "-p", "xdist", "-n", "1")
    assert {"faulthunt.recorder", "faulthunt.records.lines"} <= modules  # it records
    # ... through the light line writer: no msgspec, no record types, no run directory readers
    assert not {"faulthunt.redact", "faulthunt.cudaerrors", "faulthunt.identity", "doctest",
                "msgspec", "faulthunt.records.events", "faulthunt.rundir"} & modules
    from faulthunt.rundir import RunDir

    assert [s.outcome for s in RunDir(run).spans()] == ["passed"]
    # faulthunt's own modules, past the plugin, load from their .pyc, not through pytest's
    # assertion rewriter (plugin._PlainFinder); the plugin itself is pytest's to load
    loaders = json.loads((tmp_path / "loaders.json").read_text())
    assert loaders["faulthunt.recorder"] == loaders["faulthunt.records.lines"] == "SourceFileLoader"
    assert loaders["faulthunt.plugin"] == "AssertionRewritingHook"


def test_the_plain_finder_leaves_test_modules_and_the_kernels_suite_to_pytest() -> None:
    import faulthunt
    from faulthunt.plugin import _PlainFinder

    path = list(faulthunt.__path__)
    assert _PlainFinder.find_spec("faulthunt.recorder", path) is not None
    for name in ("faulthunt.kernels", "faulthunt.kernels.suite.test_planted", "faulthunt.conftest",
                 "faulthunt.test_x", "faulthunt", "pytest", "faulthunt.nosuchmodule"):
        assert _PlainFinder.find_spec(name, path) is None, name


QUIET = textwrap.dedent('''
    import json, sys
    from faulthunt.cli import main
    status = main(["stress", "-n", "0", "-q", "--xid-source", "none", "--ledger", "off",
                   "--run-dir", "run", "test_ok.py", "--", "-p", "no:cacheprovider",
                   "-p", "no:randomly"])
    print(json.dumps({"status": status, "modules": sorted(sys.modules)}))
''')


def test_quiet_stress_imports_no_renderer_and_no_report_model(tmp_path: Path) -> None:
    (tmp_path / "test_ok.py").write_text("def test_ok():\n    pass\n")
    (tmp_path / "quiet.py").write_text(QUIET)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("FAULTHUNT_", "GITHUB_"))}
    out = subprocess.run([sys.executable, "quiet.py"], cwd=tmp_path, env=env, check=True,
                         capture_output=True, text=True, timeout=300)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["status"] == 0
    modules = set(got["modules"])
    assert not {"rich", "rich.console", "faulthunt.report.terminal",
                "faulthunt.report.model", "importlib.metadata"} & modules
    assert (tmp_path / "run" / "summary.json").is_file()
    assert json.loads((tmp_path / "run" / "identity.json").read_text())["packages"]["pytest"]


def test_ci_outputs_asked_follows_what_write_ci_outputs_looks_at(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from faulthunt.cli.stress import _ci_outputs_asked

    for name in ("GITHUB_STEP_SUMMARY", "GITHUB_ACTIONS"):
        monkeypatch.delenv(name, raising=False)
    assert not _ci_outputs_asked(None)
    assert _ci_outputs_asked(Path("junit.xml"))
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    assert _ci_outputs_asked(None)
    monkeypatch.delenv("GITHUB_ACTIONS")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", "/tmp/summary.md")
    assert _ci_outputs_asked(None)


RECORDS = [
    WorkerHello(worker="gw0", pid=4242, ppid=1, cuda_visible_devices=None, recycle=True, t=1.5,
                t_mono=2.25),
    TestStart(nodeid="t.py::test_a[x/y-1-3]", base_nodeid="t.py::test_a[x/y]", worker="gw0",
              pid=4242, t=1.5, t_mono=2.25, device="0"),
    TestEnd(nodeid="t.py::t[ü \\u2028]", base_nodeid="t.py::t", worker="gw0", pid=4242, t=1.0,
            t_mono=2.0, outcome="failed", duration=0.25, longrepr="E  assert 1 == 2\n\"q\"",
            message="AssertionError"),
    Collected(worker="gw0", pid=4242, items=3, count=None, repeated={}, not_repeated=[],
              child_polling=None, t=1.0, t_mono=2.0),
]


def test_worker_records_are_the_bytes_they_were(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    with JsonlWriter(path) as writer:
        for record in RECORDS:
            writer.write(record)
    assert path.read_bytes() == b"".join(codec.encode_line(r) for r in RECORDS)
    assert codec.encode_lines(RECORDS) == path.read_bytes()


def test_worker_record_with_a_lone_surrogate_is_still_one_line(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    record = TestStart(nodeid="t.py::test[\udcff]", base_nodeid="t.py::test", worker="gw0",
                       pid=1, t=1.0, t_mono=1.0)
    with JsonlWriter(path) as writer:
        writer.write(record)
        writer.write(RECORDS[1])
    lines = path.read_bytes().splitlines()
    assert len(lines) == 2 and json.loads(lines[0])["nodeid"] == "t.py::test[\udcff]"


def test_package_versions_are_importlib_metadata_s() -> None:
    from importlib import metadata

    from faulthunt import identity

    names = tuple(sorted({d.metadata["Name"] for d in metadata.distributions()}
                         | set(identity.KEY_PACKAGES) | {"no-such-distribution"}))
    assert identity.package_versions(names) == identity._metadata_versions(names)


def test_package_versions_follow_sys_path_order_and_odd_metadata(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from faulthunt import identity

    first, second = tmp_path / "a", tmp_path / "b"
    for root, version in ((first, "2.0"), (second, "1.0")):
        info = root / f"Demo_Pkg-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: demo-pkg\nVersion: {version}\n\nbody\n")
    odd = second / "odd_pkg-3.0.dist-info"
    odd.mkdir()
    (odd / "METADATA").write_text("Name: odd-pkg\n\nVersion: 9\n")  # no Version in the headers
    egg = second / "eggy.egg-info"
    egg.write_text("Metadata-Version: 1.0\nName: eggy\nVersion: 0.5\n")  # egg-info as a file
    monkeypatch.setattr(sys, "path", [str(first), str(second)])
    names = ("demo.pkg", "odd-pkg", "eggy", "absent")
    assert identity.package_versions(names) == identity._metadata_versions(names)
    assert identity.package_versions(names)["demo.pkg"] == "2.0"


def test_task_children_reads_what_proc_children_reads(tmp_path: Path) -> None:
    from faulthunt.children import TaskChildren, children_file_available, proc_children

    if not children_file_available(os.getpid()):
        pytest.skip("this kernel has no /proc/<pid>/task/<tid>/children")
    tasks = TaskChildren(os.getpid())
    stop = threading.Event()
    helper = threading.Thread(target=stop.wait)
    helper.start()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        for _ in range(3):  # the same answer each time the kept files are read again
            assert sorted(tasks.children() or []) == sorted(proc_children(os.getpid()) or [])
            assert child.pid in (tasks.children() or [])
        tid = str(helper.native_id)
        assert tid in tasks._fds
        stop.set()
        helper.join()
        deadline = time.monotonic() + 10
        while os.path.exists(f"/proc/{os.getpid()}/task/{tid}") and time.monotonic() < deadline:
            time.sleep(0.01)  # join returns a moment before the kernel lets the thread go
        tasks.children()
        assert tid not in tasks._fds  # the ended thread's file is closed
    finally:
        child.kill()
        child.wait()
    assert child.pid not in (tasks.children() or [])
    tasks.close()
    assert tasks._fds == {}
    assert TaskChildren(2 ** 22 + 7).children() is None  # no such process
