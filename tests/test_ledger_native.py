"""The ledger's routes: the compiled library (``_native.c``) and launches from kernel activity
records, against a stand-in libcupti (tests/cupti_standin.py), and the same records read back
through harness/ledger/reader.py whichever route wrote them.

The compiled library is the one ``pip install`` built; without it the tests compile
``_native.c`` themselves with the system C compiler (and skip, saying why, without one). The
pure-Python fallback is tested by taking the library away (``native.load`` answering None).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from faulthunt import context
from faulthunt.ledger import cupti_direct, cupti_native, cupti_source, native, route
from faulthunt.ledger.reader import load_ledger
from faulthunt.ledger.writer import LedgerWriter
from faulthunt.mapper import map_address

from cupti_standin import (
    CB_ALLOC,
    CB_FREE,
    CB_LAUNCH,
    CB_SYNC,
    CONCURRENT_KERNEL,
    ILLEGAL_ADDRESS,
    KERNEL9,
    StandInCupti,
    StandInLibcupti,
)
from test_ledger_cupti_raw import CALLBACK_DATA, MEMORY4

BASE = 0x7F00_0000_0000
SOURCE = Path(native.__file__).with_name("_native.c")
ROUTES = ("python", "activity", "native", "native-activity")


@pytest.fixture(scope="session")
def native_lib(tmp_path_factory):
    lib, why = native.load()
    if lib is not None:
        return lib
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip(f"no compiled ledger library ({why}) and no C compiler to build one")
    out = tmp_path_factory.mktemp("native") / "_native_test.so"
    subprocess.run([cc, "-O1", "-shared", "-fPIC", "-pthread", "-o", str(out), str(SOURCE)], check=True)
    lib, why = native._load([str(out)])
    assert lib is not None, why
    return lib


@pytest.fixture
def compiled(native_lib, monkeypatch):
    """The compiled library, as route.choose and the writer will find it."""
    monkeypatch.setattr(native, "_loaded", (native_lib, None))
    return native_lib


@pytest.fixture
def standin(monkeypatch):
    """A stand-in cupti-python and libcupti behind every route; quiet background flushes."""
    module = StandInCupti()
    lib = StandInLibcupti(module)
    monkeypatch.setattr(cupti_source, "_import", lambda: module)
    monkeypatch.setattr(cupti_direct, "loaded_libcupti", lambda major=None: "/stand-in/libcupti.so.13")
    monkeypatch.setattr(cupti_direct, "_load", lambda path: lib)
    monkeypatch.setattr(cupti_native, "loaded_libcupti", lambda major=None: "/stand-in/libcupti.so.13")
    monkeypatch.setattr(cupti_native, "_load_libcupti", lambda path: lib)
    # the period of background flushes: longer than the machine has been up (a flush is due when
    # the last one, or boot, is that long ago), so that only the paths under test flush
    monkeypatch.setattr(cupti_source, "FLUSH_GAP", 1e9)
    monkeypatch.setattr(cupti_native, "FLUSH_GAP", 1e9)
    monkeypatch.delenv(cupti_direct.CALL_ENV, raising=False)
    monkeypatch.delenv(cupti_source.FLUSH_ENV, raising=False)
    return lib


def _start(tmp_path, name, monkeypatch):
    monkeypatch.setenv(route.ROUTE_ENV, name)
    w = LedgerWriter(tmp_path / name)
    assert w.route.name == name
    said: list[str] = []
    src = cupti_source.start(w, say=said.append)
    if isinstance(src, cupti_source.CuptiSource):
        src._stop.set()
    return w, src, said


def _records(w):
    """Every record in the writer's file so far (an open file's reserve reads as NUL bytes)."""
    return [json.loads(x) for x in w.path.read_bytes().rstrip(b"\0").decode().splitlines()]


# --- the library, its layouts ------------------------------------------------------------------

def test_declared_layouts_are_cupti_python_13s(compiled):
    for which, dtype in ((0, CALLBACK_DATA), (1, MEMORY4), (2, KERNEL9)):
        got, problem = native.layout_from_dtype(dtype, which)
        assert problem is None
        assert native.check_layout(compiled, which, got) == []


def test_a_layout_that_moved_is_said_and_the_dtype_wins(compiled):
    moved = np.dtype({"names": ["callback_site", "symbol_name", "function_return_value", "correlation_id"],
                      "formats": ["<i4", "<i8", "<i8", "<u4"], "offsets": [0, 40, 24, 72], "itemsize": 80})
    got, problem = native.layout_from_dtype(moved, 0)
    assert problem is None and got[1] == (40, 8)
    assert native.check_layout(compiled, 0, got) == ["symbol_name: dtype offset 40, declared 32",
                                                     "correlation_id: dtype offset 72, declared 64"]
    narrow = np.dtype({"names": ["callback_site", "symbol_name", "function_return_value", "correlation_id"],
                       "formats": ["<i4", "<i4", "<i8", "<u4"], "offsets": [0, 32, 24, 64], "itemsize": 72})
    assert "4 bytes, not 8" in native.layout_from_dtype(narrow, 0)[1]
    assert "no field" in native.layout_from_dtype(np.dtype([("kind", "<i4")]), 2)[1]


def test_a_stale_library_is_not_used(tmp_path):
    assert native._load([]) [0] is None and "pip install" in native._load([])[1]
    lib, why = native._load([str(tmp_path / "missing.so")])
    assert lib is None and "missing.so" in why


# --- the sink ------------------------------------------------------------------------------------

def test_native_sink_writes_across_windows_and_cuts_the_reserve(compiled, tmp_path, monkeypatch):
    from faulthunt.ledger import writer as writer_mod

    monkeypatch.setattr(writer_mod, "CHUNK", 4096)
    w = LedgerWriter(tmp_path, backend="native")
    assert w.backend == "native" and w._sink
    for i in range(300):
        w.alloc("synthetic", BASE + (i << 12), 4096, "device")
        if i % 97 == 0:
            w.record("note", "synthetic", message="x" * 9000)  # longer than a window
    info = native.sink_info(compiled, w._sink)
    assert info["records"] == 300 + 4 + 1 and info["mode"] == 0  # + the opening note
    w.close()
    recs = _records(w)[1:]
    assert [r["address"] for r in recs if r["event"] == "alloc"] == [BASE + (i << 12) for i in range(300)]
    assert w.path.read_bytes().endswith(b"}\n")
    with pytest.raises(ValueError, match="closed"):
        w.alloc("synthetic", 1, 2, "device")


RESERVE_CHILD = textwrap.dedent("""
    import resource, signal, sys
    from faulthunt.ledger import native, writer as writer_mod
    from faulthunt.ledger.writer import LedgerWriter
    native._loaded = native._load([sys.argv[2]])
    writer_mod.CHUNK = 4096
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (6000, 6000))  # the second window cannot be reserved
    w = LedgerWriter(sys.argv[1], backend="native")
    for i in range(40):
        w.alloc("synthetic", 0x7f0000000000 + (i << 12), 4096, "device")
    print(native.sink_info(native._loaded[0], w._sink))
    w.close()
""")


@pytest.mark.slow
def test_native_sink_goes_on_with_pwrite_when_no_window_can_be_reserved(native_lib, tmp_path):
    out = subprocess.run([sys.executable, "-c", RESERVE_CHILD, str(tmp_path), native_lib.path],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "'mode': 1" in out.stdout  # pwrite from the failed reserve on
    recs = [json.loads(x) for f in tmp_path.glob("*.jsonl") for x in f.read_text().splitlines()]
    allocs = [r["address"] for r in recs if r["event"] == "alloc"]
    assert allocs == [0x7F00_0000_0000 + (i << 12) for i in range(len(allocs))] and len(allocs) > 25
    assert any("mmap reserve failed" in r.get("message", "") for r in recs)


def test_native_writer_after_fork_writes_the_child_file(compiled, tmp_path):
    w = LedgerWriter(tmp_path, backend="native")
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            code = 0 if compiled.fl_put(w._sink or 0, b"x\n", 2) in (-1, 0) else 5
            w.record("note", "synthetic", message="child")
            os._exit(code)
        finally:
            os._exit(7)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    w.record("note", "synthetic", message="parent")
    w.close()
    data = (tmp_path / f"{pid}.jsonl").read_bytes().rstrip(b"\0")  # the child did not close: the reserve stays
    child = [json.loads(x) for x in data.decode().splitlines()]
    assert [r.get("message") for r in child][-1] == "child" and child[-1]["pid"] == pid
    parent = [json.loads(x) for x in w.path.read_text().splitlines()]
    assert [r.get("message") for r in parent][-1] == "parent"  # the child's put did not land here


# --- the routes, and what they write ------------------------------------------------------------

def _scenario(lib: StandInLibcupti) -> None:
    """Two tests: A allocates and launches; B frees, launches a kernel the fault swallows, and
    its synchronization fails (CUDA error 700)."""
    context.set_current("t.py::test_a", "t.py::test_a")
    try:
        lib.api(CB_ALLOC, 5)
        lib.memory(1, BASE, 4000, cid=5)
        lib.api(CB_LAUNCH, 6, "_Z4fillPf")
        lib.kernel("_Z4fillPf", 6)
        lib.api(CB_SYNC, 7)
        time.sleep(0.002)
        context.set_current("t.py::test_b", "t.py::test_b")
        lib.api(CB_FREE, 8)
        lib.memory(2, BASE, 4000, cid=8)
        lib.api(CB_LAUNCH, 9, "_Z4pokePfx")
        lib.kernel("_Z4pokePfx", 9, start=0, end=0)  # what CUPTI hands over for the faulting launch
        lib.api(CB_SYNC, 10, result=ILLEGAL_ADDRESS)
    finally:
        context.set_current(None, None)


def _run_route(name, tmp_path, monkeypatch):
    w, src, said = _start(tmp_path, name, monkeypatch)
    lib = cupti_direct._load("")
    try:
        _scenario(lib)
    finally:
        src.stop()
        w.close()
    return w, src, said


@pytest.mark.parametrize("name", ROUTES)
def test_each_route_records_the_scenario(compiled, standin, tmp_path, monkeypatch, name):
    w, src, said = _run_route(name, tmp_path, monkeypatch)
    assert not [m for m in said if "unavailable" in m], said
    compiled_route = name.startswith("native")
    assert isinstance(src, cupti_native.NativeCuptiSource) == compiled_route
    activity = name.endswith("activity")
    assert (CB_LAUNCH in standin.enabled) != activity  # no callback per launch on route (a)
    assert (CONCURRENT_KERNEL in standin.activities) is False  # disabled again at stop
    recs = [r for r in _records(w) if r["event"] != "note"]
    launches = [r for r in recs if r["event"] == "launch"]
    assert [(r["kernel"], r["correlation_id"], r["nodeid"]) for r in launches] == [
        ("_Z4fillPf", 6, "t.py::test_a"), ("_Z4pokePfx", 9, "t.py::test_b")]
    syncs = [r for r in recs if r["event"] == "sync"]
    assert len(syncs) == 2
    if activity:
        assert all(r["via"] == "activity" for r in launches)
        fault = launches[1]
        assert fault["t_estimated"] is True and "t_end" not in fault
        # estimated no later than the failed synchronization that reported it, and in test B
        assert launches[0]["t"] < fault["t"] < syncs[1]["t"]
        assert launches[0]["grid"] == [1, 1, 1] and launches[0]["block"] == [32, 1, 1]
        assert syncs[1].get("failed") is True


def _projection(ledger):
    (pl,) = ledger.pids.values()
    lives = [pl.containers.life(i).to_allocation() for i in range(len(pl.containers))]
    allocs = [(a.address, a.size, a.kind, a.source, a.nodeid, a.free_nodeid, bool(a.stack)) for a in lives]
    launches = [(r["kernel"], r["correlation_id"], r["nodeid"]) for r in pl.launches]
    return allocs, launches, len(pl.sync_times)


def test_every_route_reads_the_same(compiled, standin, tmp_path, monkeypatch):
    """The differential test: the same driver calls through each route, read by reader.py."""
    got = {}
    verdicts = {}
    for name in ROUTES:
        w, _src, _said = _run_route(name, tmp_path, monkeypatch)
        ledger = load_ledger(w.path)
        assert ledger.skipped == 0
        got[name] = _projection(ledger)
        v = map_address(ledger, BASE + 8)
        verdicts[name] = (v.verdict, v.nodeid, v.allocation["nodeid"], v.allocation["freed"]["nodeid"])
    want = got["python"]
    assert want[0] == [(BASE, 4000, "device", "cupti", "t.py::test_a", "t.py::test_b", True)]
    for name in ROUTES:
        assert got[name] == want, name
        assert verdicts[name] == ("freed", "t.py::test_b", "t.py::test_a", "t.py::test_b"), name


def test_native_records_match_the_python_routes_field_for_field(compiled, standin, tmp_path, monkeypatch):
    pairs = {}
    for name in ROUTES:
        w, _src, _said = _run_route(name, tmp_path, monkeypatch)
        recs = [r for r in _records(w) if r["event"] in ("alloc", "free", "launch", "sync")]
        # file order depends on when buffers were handed over; compare in a fixed order
        pairs[name] = sorted(recs, key=lambda r: (r["event"], r.get("correlation_id", 0), r.get("what", "")))
    for py, c in (("python", "native"), ("activity", "native-activity")):
        assert len(pairs[py]) == len(pairs[c])
        for a, b in zip(pairs[py], pairs[c]):
            assert a.keys() == b.keys(), (a, b)
            for k in a:
                if k in ("t", "t_mono", "t_end"):
                    continue  # each route read its own clock
                assert a[k] == b[k], (k, a, b)


# --- route (a): the flush policy -----------------------------------------------------------------

@pytest.mark.parametrize("name", ["activity", "native-activity"])
def test_a_failed_allocation_call_flushes(compiled, standin, tmp_path, monkeypatch, name):
    w, src, _ = _start(tmp_path, name, monkeypatch)
    try:
        standin.kernel("_Z1kv", 3)
        before = standin.flushes
        standin.api(CB_ALLOC, 4)  # succeeded: nothing
        assert standin.flushes == before
        standin.api(CB_ALLOC, 5, result=ILLEGAL_ADDRESS)  # the sticky error of a fault
        assert standin.flushes == before + 1
        assert any(r.get("kernel") == "_Z1kv" for r in _records(w))
    finally:
        src.stop()
        w.close()


@pytest.mark.parametrize("name", ["activity", "native-activity"])
def test_stop_flushes_the_last_launches(compiled, standin, tmp_path, monkeypatch, name):
    w, src, _ = _start(tmp_path, name, monkeypatch)
    standin.kernel("_Z4lastv", 11)
    src.stop()  # at exit (LedgerHandle.stop, atexit)
    w.close()
    assert [r["kernel"] for r in _records(w) if r["event"] == "launch"] == ["_Z4lastv"]


@pytest.mark.parametrize("name", ["activity", "native-activity"])
def test_the_background_flush_runs_on_the_period_without_launch_callbacks(compiled, standin, tmp_path,
                                                                          monkeypatch, name):
    monkeypatch.setattr(cupti_source, "FLUSH_GAP", 0.01)
    monkeypatch.setattr(cupti_native, "FLUSH_GAP", 0.01)
    monkeypatch.setenv(route.ROUTE_ENV, name)
    w = LedgerWriter(tmp_path)
    src = cupti_source.start(w)
    try:
        standin.kernel("_Z1kv", 3)
        deadline = time.monotonic() + 60  # poll: a loaded machine may delay the thread; no timing asserted
        while time.monotonic() < deadline:
            if any(r.get("kernel") == "_Z1kv" for r in _records(w)):
                break
            time.sleep(0.01)
        assert any(r.get("kernel") == "_Z1kv" for r in _records(w))
    finally:
        src.stop()
        w.close()


CRASH_CHILD = textwrap.dedent("""
    import os, signal, sys, time
    sys.path.insert(0, sys.argv[3])
    from faulthunt.ledger import cupti_direct, cupti_native, cupti_source, native
    from faulthunt.ledger.writer import LedgerWriter
    from cupti_standin import StandInCupti, StandInLibcupti
    native._loaded = native._load([sys.argv[2]])
    module = StandInCupti(); lib = StandInLibcupti(module)
    cupti_source._import = lambda: module
    cupti_native.loaded_libcupti = lambda major=None: "/stand-in/libcupti.so.13"
    cupti_native._load_libcupti = lambda path: lib
    cupti_direct.loaded_libcupti = lambda major=None: "/stand-in/libcupti.so.13"
    cupti_direct._load = lambda path: lib
    cupti_native.FLUSH_GAP = cupti_source.FLUSH_GAP = 1e9  # no flush but the dying one
    os.environ["FAULTHUNT_LEDGER_ROUTE"] = sys.argv[5]
    w = LedgerWriter(sys.argv[1])
    src = cupti_source.start(w)
    lib.kernel("_Z9lastwordv", 42)
    print("ready", flush=True)
    if sys.argv[4] == "abort":
        os.abort()
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)
""")


@pytest.mark.slow
@pytest.mark.parametrize("name, how", [("native-activity", "abort"), ("native-activity", "SIGTERM"),
                                       ("activity", "SIGTERM")])
def test_a_dying_worker_keeps_its_last_launches(native_lib, tmp_path, name, how):
    """The launches still in CUPTI's buffers reach the ledger when the worker dies: flushed by the
    compiled library's signal handler (abort, SIGTERM) or, in pure Python, by a SIGTERM handler."""
    proc = subprocess.run([sys.executable, "-c", CRASH_CHILD, str(tmp_path), native_lib.path,
                           str(Path(__file__).parent), how, name], capture_output=True, text=True, timeout=60)
    assert "ready" in proc.stdout, proc.stderr
    assert proc.returncode == -(signal.SIGABRT if how == "abort" else signal.SIGTERM)
    ledger = load_ledger(tmp_path)
    (pl,) = ledger.pids.values()
    assert [r["kernel"] for r in pl.launches] == ["_Z9lastwordv"]


def test_callbacks_of_another_domain_are_left_alone(compiled, standin, tmp_path, monkeypatch):
    w, src, _ = _start(tmp_path, "native", monkeypatch)
    try:
        rec = np.zeros(1, dtype=CALLBACK_DATA)  # a launch's cbid, but in the resource domain (2)
        standin.cb(None, 2, CB_LAUNCH, rec.ctypes.data)
        standin.api(CB_LAUNCH, 6, "_Z1kv")
        before = native.stats(compiled)["launches"]
    finally:
        src.stop()
        w.close()
    assert [r["kernel"] for r in _records(w) if r["event"] == "launch"] == ["_Z1kv"]
    assert before >= 1


# --- stacks, refinements, the fallback ------------------------------------------------------------

def _alloc_here(lib, cid):
    lib.api(CB_ALLOC, cid)
    lib.memory(1, BASE + cid * 4096, 64, cid=cid)


@pytest.mark.parametrize("name", ["native", "native-activity", "activity"])
def test_allocation_stacks_are_taken_unless_a_refinement_records_them(compiled, standin, tmp_path,
                                                                      monkeypatch, name):
    w, src, _ = _start(tmp_path, name, monkeypatch)
    enter, leave = w.refine_marks()
    try:
        _alloc_here(standin, 1)
        enter()
        _alloc_here(standin, 2)
        leave()
        standin.api(CB_SYNC, 3, result=ILLEGAL_ADDRESS)
    finally:
        src.stop()
        w.close()
    stacks = {r["correlation_id"]: r.get("stack") for r in _records(w) if r["event"] == "alloc"}
    assert any("_alloc_here" in f for f in stacks[1])
    assert stacks[2] is None


def test_the_numba_refinement_marks_its_allocations(compiled, tmp_path, monkeypatch):
    from faulthunt.ledger.numba_emm import make_manager_class

    from test_ledger import _FakeManager

    monkeypatch.setenv(route.ROUTE_ENV, "native")
    w = LedgerWriter(tmp_path)
    seen = []

    class Base(_FakeManager):
        def memalloc(self, size):
            seen.append(compiled.fl_refine(0))  # inside: marked
            return super().memalloc(size)

    mgr = make_manager_class(Base, w)()
    mgr.initialize()
    mgr.memalloc(64)
    w.close()
    assert seen == [1] and compiled.fl_refine(0) == 0


def test_without_the_library_the_python_route_is_taken_and_said(tmp_path, monkeypatch):
    monkeypatch.setattr(native, "_loaded", (None, "the compiled ledger library is not built (...)"))
    r = route.choose("auto")
    assert (r.name, r.compiled) == ("python", False) and "not built" in r.why
    r = route.choose("native-activity")
    assert r.name == "activity" and "native-activity asked for" in r.why
    assert route.choose("bogus", load=lambda: (None, "x")).why.startswith("unknown")
    monkeypatch.setenv(route.ROUTE_ENV, "native")
    w = LedgerWriter(tmp_path)
    assert w.backend == "mmap" and w.route.name == "python"
    w.close()


INSTALL_CHILD = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from faulthunt.ledger import install, native
    if sys.argv[2] == "none":
        native._loaded = (None, "the compiled ledger library is not built (test)")
    h = install(Path(sys.argv[1]), "cupy")
    print(json.dumps({"route": h.writer.route.name, "backend": h.writer.backend}))
    h.writer.alloc("cupy", 4096, 64, "block")
""")


@pytest.mark.slow
@pytest.mark.parametrize("lib", ["built", "none"])
def test_install_takes_the_compiled_route_when_built_and_says_the_fallback(native_lib, tmp_path, lib):
    env = {k: v for k, v in os.environ.items() if k != route.ROUTE_ENV}
    out = subprocess.run([sys.executable, "-c", INSTALL_CHILD, str(tmp_path), lib], capture_output=True,
                         text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.splitlines()[-1])
    if lib == "none":
        assert got == {"route": "python", "backend": "mmap"}
        assert "route python: the compiled ledger library is not built" in out.stderr
    elif native.load()[0] is not None:  # the installed build (the tests may have compiled their own)
        assert got == {"route": "native", "backend": "native"}
    recs = [json.loads(x) for f in tmp_path.glob("*.jsonl") for x in f.read_text().splitlines()]
    assert any(r.get("message", "").startswith("ledger route:") for r in recs)
    assert [r["address"] for r in recs if r["event"] == "alloc"] == [4096]


# --- the activity route's queued refinement records ------------------------------------------------

def test_activity_route_queues_refinement_records_and_drains_them(tmp_path, monkeypatch):
    from faulthunt.ledger import writer as writer_mod

    monkeypatch.setattr(writer_mod, "DRAIN_GAP", 3600.0)
    monkeypatch.setenv(route.ROUTE_ENV, "activity")
    w = LedgerWriter(tmp_path)
    context.set_current("t.py::q", "t.py::q")
    try:
        w.alloc("cupy", BASE, 4000, "block", tail=',"rounded_size":4096,"device_id":0')
        w.free("cupy", BASE, "block", phase="requested")
    finally:
        context.set_current(None, None)
    assert [r["event"] for r in _records(w)] == ["note"]  # queued, not written yet
    assert w.drain() == 2
    w.alloc("numba", BASE + 4096, 64, "device")
    w.close()  # close drains the rest
    recs = _records(w)[1:]
    assert [(r["event"], r["source"], r.get("phase"), r["nodeid"]) for r in recs] == [
        ("alloc", "cupy", None, "t.py::q"), ("free", "cupy", "requested", "t.py::q"), ("alloc", "numba", None, None)]
    assert recs[0]["rounded_size"] == 4096 and recs[0]["size"] == 4000
    assert map_address(load_ledger(tmp_path), BASE + 8).verdict == "freed"


def test_kernel_line_is_a_launch_the_reader_takes():
    from faulthunt.ledger.cupti_source import Clock, kernel_line
    from faulthunt.ledger.reader import parse_ledger_text

    clock = Clock(cupti_ns=5_000_000_000, wall=1_764_683_340.0, mono=9000.0)
    f = {"kind": CONCURRENT_KERNEL, "correlation_id": 7, "start": 5_000_001_000, "end": 5_000_002_000,
         "name": 'k"\u00e9', "grid_x": 2, "grid_y": 1, "grid_z": 1, "block_x": 64, "block_y": 1, "block_z": 1}
    line, t = kernel_line(f, clock, 4242, lambda t: "a.py::t", 0)
    assert t == 1_764_683_340_000_001_000
    rec = json.loads(line)
    assert rec["kernel"] == 'k"\u00e9' and rec["grid"] == [2, 1, 1] and rec["t_end"] == pytest.approx(rec["t"] + 1e-6)
    line0, t0 = kernel_line({**f, "start": 0, "end": 0}, clock, 4242, lambda t: None, 123)
    assert t0 == 123 and json.loads(line0)["t_estimated"] is True and json.loads(line0)["nodeid"] is None
    (pl,) = parse_ledger_text(line + "\n").pids.values()
    assert pl.launches[0]["kernel"] == 'k"\u00e9'


@pytest.mark.parametrize("name, completed", [("python", True), ("activity", False), ("native", False)])
def test_numba_leaves_the_driver_free_to_cupti(compiled, tmp_path, monkeypatch, name, completed):
    """With CUPTI recording driver frees, numba's refinement writes the Python-level free only off
    the python route; the replay takes the driver free from CUPTI's release record."""
    from faulthunt.ledger.numba_emm import make_manager_class
    from faulthunt.ledger.reader import build_ledger

    from test_ledger import _FakeManager

    w = LedgerWriter(tmp_path, route=route.choose(name))
    w.cupti = "cupti"
    mgr = make_manager_class(_FakeManager, w)()
    mgr.initialize()
    mem = mgr.memalloc(64)
    mem.free()
    mgr.deallocations.clear()
    w.close()
    recs = [r for r in _records(w) if r["event"] in ("alloc", "free")]
    assert [r.get("phase") for r in recs if r["event"] == "free"] == (
        ["requested", "completed"] if completed else ["requested"])
    if not completed:  # CUPTI's release record, as the replay sees it
        recs.append({"event": "free", "t": recs[-1]["t"] + 1e-3, "pid": recs[0]["pid"], "address": BASE,
                     "kind": "device", "source": "cupti"})
    v = map_address(build_ledger(recs), BASE + 8)
    assert v.verdict == "freed" and v.allocation["free_completed_t"] == recs[-1]["t"]


def test_without_a_kernel_dtype_the_declared_layout_reads_kernel_records(compiled, standin, tmp_path,
                                                                         monkeypatch):
    monkeypatch.delattr(StandInCupti, "activity_kernel9_dtype")
    w, src, said = _start(tmp_path, "native-activity", monkeypatch)
    try:
        assert src.launches == "activity"
        standin.kernel("_Z1kv", 3)
        standin.api(CB_SYNC, 4, result=ILLEGAL_ADDRESS)
    finally:
        src.stop()
        w.close()
    assert any("CUDA 13 declaration's offsets" in m for m in said)
    assert [r["kernel"] for r in _records(w) if r["event"] == "launch"] == ["_Z1kv"]
