"""Guard mode switched on: install() in this process, the CLI switch, and whole `faulthunt stress
--guard` runs whose workers use the SIMULATED driver (FAULTHUNT_GUARD_DRIVER=fake) and a stand-in
``cupy`` module, so the plugin wiring, the per-test reseed and the records are real end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

from faulthunt.errors import UsageError
from faulthunt.guard import guard_verdict, parse_spec, summarize_guard
from faulthunt.guard.config import spec_from_args
from faulthunt.guard.fake import FakeVmmDriver
from faulthunt.guard.install import install, uninstall
from faulthunt.rundir import read_jsonl
from faulthunt.stress import StressOptions, build_env

FAKE_CUPY = '''
"""A stand-in for CuPy's allocator interface (the guard's CuPy hook wraps it)."""
import types
class UnownedMemory:
    def __init__(self, ptr, size, owner, device_id=-1):
        self.ptr, self.size, self.owner = ptr, size, owner
class MemoryPointer:
    def __init__(self, mem, offset):
        self.mem, self.ptr = mem, mem.ptr + offset
def _pool(size):
    return ("pool", size)
_current = [_pool]
cuda = types.SimpleNamespace(UnownedMemory=UnownedMemory, MemoryPointer=MemoryPointer,
                             get_allocator=lambda: _current[0],
                             set_allocator=lambda a: _current.__setitem__(0, a),
                             runtime=types.SimpleNamespace(getDevice=lambda: 0))
def alloc(n):
    return _current[0](n)
'''


def test_spec_from_args():
    assert spec_from_args(None, None) == (None, None)
    assert spec_from_args("", None) == ("100", None)
    assert spec_from_args("1", "left") == ("1,side=left", None)
    assert spec_from_args("tests/", None) == ("100", "tests/")   # argparse took a path for RATE
    assert spec_from_args("1,align=16", None) == ("1,align=16", None)
    with pytest.raises(UsageError, match="--guard-side needs --guard"):
        spec_from_args(None, "left")
    env = build_env(StressOptions(guard="1,side=left"), Path("/r"), base={})
    assert env["FAULTHUNT_GUARD"] == "1,side=left"
    assert "FAULTHUNT_GUARD" not in build_env(StressOptions(), Path("/r"), base={})


def test_install_arms_hooks_and_writes_through_its_own_writer(tmp_path, monkeypatch):
    cupy = types.ModuleType("cupy")
    exec(FAKE_CUPY, cupy.__dict__)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setattr("faulthunt.ledger._active", None)  # no ledger here: guard mode's own writer
    drv = FakeVmmDriver()
    try:
        h = install(tmp_path, parse_spec("1,only=cupy"), seed=5, driver=drv, quiet=True)
        assert install(tmp_path, parse_spec("7")) is h            # once per process
        assert "cupy" in h.sources
        h.begin_test("t::a")
        p = cupy.alloc(4096)
        drv.touch(p.ptr + 4095)
        addr = p.ptr
        del p
        h.end_test()
    finally:
        uninstall()
    recs = read_jsonl(tmp_path / f"{os.getpid()}.jsonl").records
    assert cupy.alloc(8) == ("pool", 8)                            # uninstall put CuPy's back
    notes = [r["message"] for r in recs if r["event"] == "note"]
    assert any("1 in 1 device allocations guarded" in n for n in notes)
    assert any(n == "guard: cupy hook installed" for n in notes)
    assert guard_verdict(recs, addr).verdict == "freed"
    s = summarize_guard(recs)
    assert s["config"]["seed"] == 5 and s["allocations_seen"] == 1 and s["allocations_guarded"] == 1


def test_a_bad_spec_in_a_worker_is_said_and_the_run_goes_on(tmp_path, monkeypatch):
    from faulthunt.guard.install import install_from_env

    said = []
    monkeypatch.setenv("FAULTHUNT_GUARD", "lots")
    assert install_from_env(None, tmp_path, warn=said.append) is None
    assert "guard mode not installed" in said[0] and "not an integer" in said[0]


def _write(path: Path, text: str) -> None:
    path.write_text(textwrap.dedent(text))


@pytest.mark.slow
def test_stress_guard_end_to_end_with_the_simulated_driver(tmp_path):
    (tmp_path / "cupy.py").write_text(FAKE_CUPY)
    _write(tmp_path / "test_g.py", """
        import cupy
        def test_alloc():
            keep = [cupy.alloc(4000) for _ in range(5)]
            assert all(isinstance(p, tuple) or p.ptr for p in keep)
    """)
    run = tmp_path / "run"
    env = {**os.environ, "FAULTHUNT_GUARD_DRIVER": "fake"}
    proc = subprocess.run([sys.executable, "-m", "faulthunt", "stress", "-n", "2", "--count", "4",
                           "--guard", "2", "--ledger", "off", "--xid-source", "none", "-q",
                           "--run-dir", str(run), "test_g.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    recs = [r for p in sorted((run / "ledger").glob("*.jsonl")) for r in read_jsonl(p).records]
    s = summarize_guard(recs)
    assert s["enabled"] and s["config"]["rate"] == 2 and s["config"]["driver"] == "simulated"
    assert s["allocations_seen"] == 20 and 0 < s["allocations_guarded"] < 20
    assert s["by_framework"] == {"cupy": s["allocations_guarded"]}
    # each repetition (its own node id) drew its own sample, reproducibly from the run's seed
    per_test = {r["nodeid"]: r["guard_stats"]["guarded"] for r in recs
                if r.get("guard_stats", {}).get("scope") == "test"}
    assert len(per_test) == 4 and sum(per_test.values()) == s["allocations_guarded"]
    allocs = [r for r in recs if r.get("source") == "guard" and r["event"] == "alloc"]
    assert all(r["nodeid"].startswith("test_g.py::test_alloc[") for r in allocs)
    assert json.loads((run / "run.json").read_text())["options"]["guard"] == "2"


SIM_FAULTS = '''
"""SIMULATED faults: the guard's fake driver plays the MMU; a fault appends a real-format Xid 31
line (the H200's text) with this pid and the page to the kernel log file, then fails the test
with the sticky CUDA error the GPU would raise."""
import gc
import os
import time

import cupy
from faulthunt.guard.fake import FakeFault
from faulthunt.guard.install import active

LOG = {log!r}


def _access(ptr, write=True):
    try:
        active().allocator.driver.touch(ptr, 4, write)
    except FakeFault as f:
        line = ("[%12.6f] NVRM: Xid (PCI:0000:00:06): 31, pid=%d, name=python, channel 0x0000000a, "
                "intr 00000000. MMU Fault: ENGINE GRAPHICS GPC1 GPCCLIENT_T1_8 faulted @ 0x%x_%08x. "
                "Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_%s"
                % (time.monotonic(), os.getpid(), f.page >> 32, f.page & 0xFFFFFFFF,
                   "WRITE" if write else "READ"))
        with open(LOG, "a") as fh:
            fh.write(line + "\\n")
        time.sleep(0.6)  # the follower sees it while the test runs
        raise RuntimeError("CUDA error: an illegal memory access was encountered")


def test_cupy_write_one_past():
    a = cupy.alloc(4096)
    _access(a.ptr + 4096)


def test_cupy_read_one_past():
    a = cupy.alloc(4096)
    _access(a.ptr + 4096, write=False)


def test_cupy_write_last():
    a = cupy.alloc(4096)
    _access(a.ptr + 4092)


def test_cupy_use_after_free():
    a = cupy.alloc(4096)
    ptr = a.ptr
    del a
    gc.collect()
    _access(ptr)


def test_cupy_use_before_free():
    a = cupy.alloc(4096)
    _access(a.ptr)


def test_slack():
    a = cupy.alloc(4000)
    _access(a.ptr + 4000)
'''


def _validator():  # type: ignore[no-untyped-def]
    from gpuscript import load_gpu_script

    return load_gpu_script("guard_validate")


@pytest.mark.slow
def test_stress_guard_names_simulated_faults_exactly(tmp_path):
    """The GPU validation's judge (scripts/gpu/guard_validate.py) over a whole stress run whose
    MMU is the fake driver: overruns and a use after free are named from their Xid 31 page, the
    twins and the slack access stay clean."""
    (tmp_path / "cupy.py").write_text(FAKE_CUPY)
    log = tmp_path / "kern.log"
    log.write_text("")
    (tmp_path / "test_sim.py").write_text(SIM_FAULTS.replace("{log!r}", repr(str(log))))
    run = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "FAULTHUNT_RUN_DIR"}
    env["FAULTHUNT_GUARD_DRIVER"] = "fake"
    proc = subprocess.run([sys.executable, "-m", "faulthunt", "stress", "-n", "2", "--guard", "1",
                           "--xid-source", f"file:{log}", "--run-dir", str(run), "test_sim.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    # the run says what guard mode did: summary.json, mapping.json and the table's lines
    summary = json.loads((run / "summary.json").read_text())["guard"]
    assert summary["caught"] == {"freed": 1, "past_end": 2} and summary["config"]["driver"] == "simulated"
    mapping = json.loads((run / "mapping.json").read_text())
    assert sorted(e["verdict"] for e in mapping) == ["freed", "past_end", "past_end"]
    assert all(e["basis"] == "guard" and e["caught"] for e in mapping)
    assert sorted(c["text"] for c in summary["catches"]) == sorted(e["text"] for e in mapping)
    assert "caught 1 freed, 2 past_end" in proc.stdout
    assert all(e["text"] in proc.stdout for e in mapping)
    v = _validator()
    faults = {"test_cupy_write_one_past": ("past_end", 0), "test_cupy_read_one_past": ("past_end", 0),
              "test_cupy_use_after_free": ("freed", 0)}
    rows = v.judge_run(run, faults, ("test_cupy_write_last", "test_cupy_use_before_free"), ("test_slack",))
    bad = [r for r in rows if not r["ok"]]
    assert not bad, json.dumps(rows, indent=1)
    by = {r["test"]: r for r in rows}
    assert by["test_cupy_write_one_past"]["text"].startswith(
        "past_end: 0-4095 bytes past the end of the 4096-byte cupy allocation")
    assert by["test_cupy_use_after_free"]["text"].startswith("freed: offset 0-4095 of the 4096-byte")
    # the mapper over the run's ledger names the slack access, never "inside"
    (slack,) = by["test_slack"]["planted_verdicts"]
    assert slack.startswith("inside the slack, not guardable: 0 bytes past the end of the "
                            "4000-byte cupy allocation at ")
    assert slack.endswith("allocated by test_sim.py::test_slack, in the 96 bytes its 256-byte "
                          "alignment leaves before the guard")


@pytest.mark.parametrize("rate, said", [("0", "RATE must be >= 1"), ("off", "neither a RATE"),
                                        ("abc", "neither a RATE nor a test path"),
                                        ("-3", "--guard -3: RATE must be >= 1")])
def test_spec_from_args_refuses_what_is_no_rate_and_no_path(rate, said, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match=said) as err:
        spec_from_args(rate, None)
    assert "--guard" in (err.value.fix or "")


def test_spec_from_args_takes_a_path_for_pytest(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "suite").mkdir()
    assert spec_from_args("suite", None) == ("100", "suite")
    assert spec_from_args("test_x.py::test_a", None) == ("100", "test_x.py::test_a")


def test_a_guard_hook_that_fails_on_import_says_guard_not_ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from faulthunt.guard.install import GuardHandle

    (tmp_path / "faulthunt_guard_probe_mod.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    handle = GuardHandle(allocator=None, config=None, writer=None, own_writer=False)  # type: ignore[arg-type]
    handle.hooks.add("faulthunt_guard_probe_mod", lambda module: 1 / 0)
    try:
        import faulthunt_guard_probe_mod  # noqa: F401 - the import itself goes on
    finally:
        handle.hooks.remove()
        sys.modules.pop("faulthunt_guard_probe_mod", None)
    err = capsys.readouterr().err
    assert "faulthunt guard: allocations made through faulthunt_guard_probe_mod are not guarded" in err
    assert "ledger" not in err
