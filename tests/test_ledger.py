"""The ledger writer, install()'s choices, and the pure parts of each source.

Source inputs here are constructed: SimpleNamespace stand-ins shaped like cupti-python 13.0's
``ActivityMemory4`` / ``CallbackData``, CuPy's documented hook keywords, torch's documented
trace entries, and a stand-in numba memory-manager base class. The real sources run on the H200
(scripts/gpu/ledger_probe.sh).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from types import SimpleNamespace

import pytest

from faulthunt import context
from faulthunt.ledger import PostImportHooks, plan
from faulthunt.ledger.cupti_source import (
    OP_ALLOCATION,
    OP_RELEASE,
    Clock,
    callback_record,
    memory_record,
)
from faulthunt.ledger.cupy_hook import hook_record, make_hook
from faulthunt.ledger.numba_emm import make_manager_class
from faulthunt.ledger.reader import load_ledger
from faulthunt.ledger.torch_trace import new_entries, trace_records
from faulthunt.ledger.writer import LedgerWriter, python_stack
from faulthunt.errors import UsageError
from faulthunt.mapper import map_address

BASE = 0x7F00_0000_0000


@pytest.fixture(autouse=True)
def _python_route(monkeypatch):
    """These tests are of the ``python`` route (the default when the compiled library is built
    is ``native``; tests/test_ledger_native.py covers the compiled routes)."""
    monkeypatch.setenv("FAULTHUNT_LEDGER_ROUTE", "python")


# --- writer -----------------------------------------------------------------------------------

def written(path):
    """The records a test wrote to a ledger file: every line but the writer's own opening note."""
    recs = [json.loads(x) for x in path.read_bytes().rstrip(b"\0").decode().splitlines()]
    assert recs[0]["event"] == "note" and recs[0]["message"].startswith("ledger opened")
    assert isinstance(recs[0]["t_mono"], float)
    # the CUPTI source's note on its route (direct or through cupti-python) is checked on its own
    return [r for r in recs[1:] if not str(r.get("message", "")).startswith("ledger: CUPTI calls")]


def test_writer_records_time_pid_test_source(tmp_path):
    w = LedgerWriter(tmp_path)
    context.set_current("t.py::test_x[1-3]", "t.py::test_x")
    try:
        rec = w.record("alloc", "synthetic", address=BASE, size=64, stack=python_stack())
    finally:
        context.set_current(None, None)
    w.close()
    line, = written(tmp_path / f"{os.getpid()}.jsonl")
    assert line == rec
    assert line["pid"] == os.getpid() and line["nodeid"] == "t.py::test_x[1-3]"
    assert line["source"] == "synthetic" and "t_mono" not in line  # the opening note has it
    assert any("test_writer_records_time_pid_test_source" in f for f in line["stack"])
    assert not any("harness/ledger" in f for f in line["stack"])


WRITER_CHILD = textwrap.dedent("""
    import sys, os
    from faulthunt.ledger.writer import LedgerWriter
    w = LedgerWriter(sys.argv[1])
    w.record("alloc", "synthetic", address=0x7f0000000000, size=4096)
    w.record("launch", "synthetic", kernel="k")
    # a torn last line, as a write cut by SIGKILL leaves it
    w._put(b'{"event": "alloc", "address": 1399')
    print("ready", flush=True)
    import time
    while True:
        w.record("note", "synthetic", message="x" * 100)
        time.sleep(0.001)
""")


@pytest.mark.slow
def test_sigkilled_writer_file_reads_back(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", WRITER_CHILD, str(tmp_path)], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
    time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    ledger = load_ledger(tmp_path)
    assert ledger.skipped >= 1  # the torn line (glued to the next record) is skipped, not fatal
    v = map_address(ledger, 0x7F00_0000_0010, pid=proc.pid)
    assert v.verdict == "inside" and [k["kernel"] for k in v.launches] == ["k"]


def test_writer_after_fork_writes_child_file(tmp_path):
    w = LedgerWriter(tmp_path)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            w.record("note", "synthetic", message="child")
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    w.record("note", "synthetic", message="parent")
    w.close()
    child, = written(tmp_path / f"{pid}.jsonl")
    assert child["pid"] == pid and child["message"] == "child"


# --- install(): what is chosen -----------------------------------------------------------------

NO_CUPTI = "cupti-python is not installed"


@pytest.mark.parametrize("mode, problem, cupti, refinements, says", [
    # auto leaves CuPy's and numba's per-array refinements to full (issue 16); without CUPTI
    # the refinements are all there is, so every one is armed
    ("auto", None, True, ("torch",), "--ledger full adds"),
    ("auto", NO_CUPTI, False, ("numba", "cupy", "torch"), "CUPTI unavailable"),
    ("full", None, True, ("numba", "cupy", "torch"), "cupti + refinements"),
    ("full", NO_CUPTI, False, ("numba", "cupy", "torch"), "CUPTI unavailable"),
    ("cupti", None, True, (), "cupti (MEMORY2"),
    ("cupti", NO_CUPTI, False, (), "requested but unavailable"),
    ("numba", NO_CUPTI, False, ("numba",), "numba only"),
    ("cupy", None, False, ("cupy",), "cupy only"),
    ("torch", None, False, ("torch",), "torch only"),
    ("off", None, False, (), "off"),
])
def test_plan(mode, problem, cupti, refinements, says):
    p = plan(mode, lambda: problem)
    assert (p.cupti, p.refinements) == (cupti, refinements)
    assert says in " ".join(p.messages)
    if problem and mode in ("auto", "cupti"):
        assert problem in " ".join(p.messages)  # the reason and its fix reach the user


def test_plan_rejects_unknown_mode():
    with pytest.raises(UsageError) as exc:
        plan("nvtx", lambda: None)
    assert "auto" in exc.value.fix


def test_plan_does_not_probe_cupti_for_framework_modes():
    def boom() -> str:
        raise AssertionError("probed")
    assert plan("cupy", boom).refinements == ("cupy",)


def test_cupti_probe_on_this_machine_says_why():
    from faulthunt.ledger.cupti_source import problem

    got = problem()
    try:
        import cupti  # noqa: F401
    except ImportError:
        assert got and "pip install" in got


INSTALL_CHILD = textwrap.dedent("""
    import sys, json
    from pathlib import Path
    from faulthunt.ledger import install
    h = install(Path(sys.argv[1]), sys.argv[2])
    print(json.dumps(None if h is None else {"plan": list(h.plan.refinements), "cupti": h.plan.cupti}))
    if h is not None and sys.argv[2] == "numba":
        import numba.cuda
        from numba.cuda.cudadrv import driver
        print(json.dumps({"sources": h.source_names, "manager": driver._memory_manager.__name__}))
""")


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["off", "cupti", "numba"])
def test_install_in_a_fresh_process(tmp_path, mode):
    pytest.importorskip("numba")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    out = subprocess.run([sys.executable, "-c", INSTALL_CHILD, str(tmp_path), mode],
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    lines = [json.loads(x) for x in out.stdout.splitlines()]
    try:
        import cupti  # noqa: F401
        have_cupti = True
    except ImportError:
        have_cupti = False
    if mode == "off" or (mode == "cupti" and not have_cupti):
        assert lines[0] is None
        assert "ledger" in out.stderr  # it said why
    if mode == "numba":
        assert lines[0]["plan"] == ["numba"]
        assert lines[1] == {"sources": ["numba"], "manager": "LedgerNumbaCUDAMemoryManager"}
        recs = [json.loads(x) for f in tmp_path.glob("*.jsonl") for x in f.read_text().splitlines()]
        assert any(r["event"] == "note" and "numba refinement installed" in r["message"] for r in recs)


def test_post_import_hook_runs_after_import(tmp_path, monkeypatch):
    (tmp_path / "fh_probe_mod.py").write_text("VALUE = 41\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    hooks = PostImportHooks()
    hooks.add("fh_probe_mod", lambda m: seen.append(m.VALUE + 1))
    try:
        import fh_probe_mod  # noqa: F401
        assert seen == [42]
        hooks.add("fh_probe_mod", lambda m: seen.append("again"))  # already imported: runs now
        assert seen == [42, "again"]
    finally:
        hooks.remove()
        sys.modules.pop("fh_probe_mod", None)


def test_post_import_hook_failure_does_not_break_the_import(tmp_path, monkeypatch, capsys):
    (tmp_path / "fh_probe_bad.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    hooks = PostImportHooks()
    hooks.add("fh_probe_bad", lambda m: 1 / 0)
    try:
        import fh_probe_bad
        assert fh_probe_bad.X == 1
        assert "refinement failed" in capsys.readouterr().err
    finally:
        hooks.remove()
        sys.modules.pop("fh_probe_bad", None)


# --- CUPTI: activity records and callbacks (constructed ActivityMemory4 / CallbackData) --------

CLOCK = Clock(cupti_ns=5_000_000_000, wall=1_764_683_340.0, mono=9000.0)


def act(op: int, addr: int, nbytes: int, ts: int, cid: int = 11, **kw):
    pool = SimpleNamespace(memory_pool_type=kw.pop("pool_type", 0), address=kw.pop("pool_addr", 0))
    return SimpleNamespace(memory_operation_type=op, address=addr, bytes=nbytes, timestamp=ts,
                           correlation_id=cid, memory_kind=kw.pop("memory_kind", 3), device_id=0,
                           stream_id=7, is_async=kw.pop("is_async", 0), memory_pool_config=pool,
                           process_id=4242, **kw)


def test_memory2_allocation_record_joins_stack_by_correlation_id():
    pending = {11: ("t.py::a", ["t.py:3 in test_a"])}
    rec = memory_record(act(OP_ALLOCATION, BASE, 4000, 6_500_000_000), CLOCK, pending, pid=4242)
    assert rec is not None and pending == {}
    assert rec["event"] == "alloc" and rec["size"] == 4000 and rec["kind"] == "device"
    assert rec["t"] == pytest.approx(CLOCK.wall + 1.5) and rec["t_mono"] == pytest.approx(9001.5)
    assert rec["nodeid"] == "t.py::a" and rec["stack"] == ["t.py:3 in test_a"]
    assert rec["memory_kind"] == "device" and rec["correlation_id"] == 11


def test_memory2_release_and_async_pool():
    rec = memory_record(act(OP_RELEASE, BASE, 4000, 6_000_000_000, is_async=1, pool_type=1,
                            pool_addr=0x1234), CLOCK)
    assert rec["event"] == "free" and rec["size_released"] == 4000 and "size" not in rec
    assert rec["async"] is True and rec["pool"] == {"type": "local", "address": 0x1234}
    assert memory_record(act(0, BASE, 1, 0), CLOCK) is None  # INVALID operation


def test_memory2_records_replay_into_a_mappable_ledger():
    from faulthunt.ledger.reader import build_ledger
    recs = [memory_record(act(OP_ALLOCATION, BASE, 4000, 5_100_000_000), CLOCK, pid=1),
            memory_record(act(OP_RELEASE, BASE, 4000, 5_200_000_000), CLOCK, pid=1)]
    v = map_address(build_ledger(recs), BASE + 4, pid=1)
    assert v.verdict == "freed" and v.allocation["source"] == "cupti"


@pytest.mark.parametrize("fn, sym, enter, want", [
    ("cuLaunchKernel", "_Z5scalePfif", True, ("launch", "_Z5scalePfif")),
    ("cuLaunchKernelEx_ptsz", "k", True, ("launch", "k")),
    ("cuGraphLaunch", None, True, ("launch", "<graph>")),
    ("cuLaunchKernel", "k", False, None),
    ("cuCtxSynchronize", None, False, ("sync", "context")),
    ("cuStreamSynchronize", None, False, ("sync", "stream")),
    ("cuCtxSynchronize", None, True, None),
    ("cuMemcpyHtoD_v2", None, True, None),
])
def test_callback_record(fn, sym, enter, want):
    got = callback_record(fn, sym, enter, 99)
    if want is None:
        assert got is None
    else:
        event, fields = got
        assert event == want[0]
        assert fields.get("kernel", fields.get("what")) == want[1]


# --- numba EMM (stand-in base class with numba's memalloc/free/deallocations shape) ---------

class _FakePending:
    def __init__(self):
        self.items = []

    def add_item(self, dtor, handle, size=0):
        self.items.append((dtor, handle, size))

    def clear(self):
        for dtor, handle, _ in self.items:
            dtor(handle)
        self.items = []


class _FakeMem:
    def __init__(self, mgr, ptr, size):
        self.device_pointer_value, self.size, self._mgr = ptr, size, mgr

    def free(self):
        self._mgr.deallocations.add_item(lambda h: None, self.device_pointer_value, self.size)


class _FakeManager:
    def __init__(self):
        self.deallocations = _FakePending()
        self.next = BASE

    def initialize(self):
        pass

    def memalloc(self, size):
        mem = _FakeMem(self, self.next, size)
        self.next += 1 << 21
        return mem


def test_numba_emm_records_python_free_then_deferred_driver_free(tmp_path):
    w = LedgerWriter(tmp_path)
    mgr = make_manager_class(_FakeManager, w)()
    mgr.initialize()
    mem = mgr.memalloc(4000)
    mem.free()          # the array went away: numba queues the driver free
    mgr.deallocations.clear()  # later: the driver free runs
    w.close()
    recs = written(tmp_path / f"{os.getpid()}.jsonl")
    assert [(r["event"], r.get("phase")) for r in recs] == [("alloc", None), ("free", "requested"), ("free", "completed")]
    assert all(r["address"] == BASE and r["source"] == "numba" for r in recs)
    ledger = load_ledger(tmp_path)
    v = map_address(ledger, BASE + 8)
    assert v.verdict == "freed" and v.allocation["free_completed_t"] == recs[2]["t"]


# --- CuPy hook (CuPy's documented keyword arguments) ---------------------------------------

def _fields(tail):
    return json.loads("{" + tail[1:] + "}")


def test_cupy_hook_records():
    ev, addr, size, kind, tail = hook_record("alloc", device_id=0, mem_size=2 << 20, mem_ptr=BASE)
    assert (ev, addr, size, kind, _fields(tail)) == ("alloc", BASE, 2 << 20, "segment", {"device_id": 0})
    ev, addr, size, kind, tail = hook_record("malloc", device_id=0, size=4000, mem_size=4096, mem_ptr=BASE)
    assert (ev, size, kind, _fields(tail)) == ("alloc", 4000, "block", {"rounded_size": 4096, "device_id": 0})
    assert hook_record("free", device_id=0, mem_size=4096, mem_ptr=BASE)[:4] == ("free", BASE, 0, "block")
    assert _fields(hook_record("free", device_id=None, mem_ptr=BASE)[4]) == {"device_id": None}
    assert hook_record("malloc", mem_ptr=0) is None


def test_cupy_hook_class_feeds_a_pool_ledger(tmp_path):
    class FakeMemoryHook:  # cupy.cuda.MemoryHook's shape: methods called with keywords
        pass

    w = LedgerWriter(tmp_path)
    h = make_hook(FakeMemoryHook, w)
    h.alloc_postprocess(device_id=0, mem_size=2 << 20, mem_ptr=BASE)
    h.malloc_postprocess(device_id=0, size=4000, mem_size=4096, mem_ptr=BASE, pmem_id="a")
    h.malloc_postprocess(device_id=0, size=512, mem_size=512, mem_ptr=BASE + 4096, pmem_id="b")
    h.free_postprocess(device_id=0, mem_size=512, mem_ptr=BASE + 4096, pmem_id="b")
    w.close()
    L = load_ledger(tmp_path)
    assert map_address(L, BASE + 4000).verdict == "pool_slack"  # rounding slack of the first array
    assert map_address(L, BASE + 4096 + 8).verdict == "freed"
    assert map_address(L, BASE + 12).verdict == "inside"


# --- torch trace (entries shaped as torch.cuda.memory._snapshot()['device_traces'] documents) -

T0 = 1_764_683_340_000_000  # µs since the epoch


def _e(action, addr, size, dt, frames=None):
    return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": T0 + dt,
            "frames": frames or []}


def test_torch_trace_records_and_verdicts():
    from faulthunt.ledger.reader import build_ledger
    trace = [
        _e("segment_alloc", BASE, 2 << 20, 0),
        _e("alloc", BASE, 4096, 1, [{"filename": "t.py", "line": 5, "name": "test_t"}]),
        _e("alloc", BASE + 4096, 4096, 2),
        _e("free_requested", BASE + 4096, 4096, 3),
        _e("free_completed", BASE + 4096, 4096, 4),
        _e("snapshot", 0, 0, 5),
    ]
    recs = trace_records(trace, 0, now=0.0, nodeid_at=lambda t: "t.py::test_t")
    assert [(r["event"], r["kind"], r.get("phase")) for r in recs] == [
        ("alloc", "segment", None), ("alloc", "block", None), ("alloc", "block", None),
        ("free", "block", "requested"), ("free", "block", "completed")]
    assert recs[1]["stack"] == ["t.py:5 in test_t"] and recs[1]["t"] == pytest.approx(T0 / 1e6 + 1e-6)
    for r in recs:
        r["pid"] = 1
    L = build_ledger(recs)
    v = map_address(L, BASE + 4096 + 10)
    assert v.verdict == "freed" and v.allocation["free_completed_t"] == pytest.approx((T0 + 4) / 1e6)
    assert map_address(L, BASE + 9000).verdict == "pool_slack"


def test_torch_new_entries_after_last_and_after_ring_wrap():
    from faulthunt.ledger.torch_trace import entry_key

    trace = [_e("alloc", BASE + i, 1, i) for i in range(5)]
    assert new_entries(trace, None) == trace
    assert new_entries(trace, entry_key(trace[2])) == trace[3:]
    assert new_entries(trace, entry_key(trace[-1])) == []
    gone = (T0 + 1, "alloc", 0, 1)  # overwritten by the ring buffer: everything newer is new
    assert new_entries(trace, gone) == trace[2:]


# --- CuptiSource against a constructed stand-in of the cupti module ----------------------------

class _FakeCupti:
    """Only the names cupti_source uses, with cupti-python 13.0's spellings (constructed)."""

    class ActivityKind:
        MEMORY2 = 49

    class ActivityMemoryOperationType:
        ALLOCATION = OP_ALLOCATION
        RELEASE = OP_RELEASE

    class ApiCallbackSite:
        API_ENTER = 0
        API_EXIT = 1

    class ActivityFlag:
        FLUSH_FORCED = 1

    class CallbackDomain:
        DRIVER_API = 1

    class Result:
        ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED = 39

    class driver_api_trace_cbid:
        cuLaunchKernel = 307
        cuMemAlloc_v2 = 34
        cuCtxSynchronize = 17

    class cuptiError(Exception):
        def __init__(self, status):
            super().__init__(f"CUPTI error {status}")
            self.status = status

    SUBSCRIBER_PARAMS_SIZE = 32

    class SubscriberParams:
        ptr = 0
        old_subscriber_name = None

    def __init__(self, busy: bool = False):
        self.busy = busy
        self.enabled: list[int] = []
        self.flushes = 0
        self.buffer_completed = None

    def get_timestamp(self):
        return 5_000_000_000

    def activity_register_callbacks(self, req, done):
        self.buffer_completed = done

    def activity_enable(self, kind):
        pass

    def activity_disable(self, kind):
        pass

    def activity_flush_period(self, ms):
        pass

    def activity_flush_all(self, flag):
        self.flushes += 1
        # CUPTI hands the pending MEMORY2 record over now
        self.buffer_completed([SimpleNamespace(kind=49, **vars(act(OP_ALLOCATION, BASE, 4000, 5_000_100_000, cid=5)))])

    def subscribe_v2(self, cb, userdata, ptr):
        if self.busy:
            raise self.cuptiError(self.Result.ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
        self.cb = cb
        return 1

    def enable_callback(self, enable, sub, domain, cbid):
        self.enabled.append(int(cbid))

    def unsubscribe(self, sub):
        pass


def test_cupti_source_flushes_before_launch_and_joins_stack(tmp_path, monkeypatch):
    from faulthunt.ledger import cupti_source

    fake = _FakeCupti()
    monkeypatch.setattr(cupti_source, "_import", lambda: fake)
    w = LedgerWriter(tmp_path)
    src = cupti_source.start(w)
    assert sorted(fake.enabled) == [17, 34, 307]
    context.set_current("t.py::test_k", "t.py::test_k")
    try:
        fake.cb(None, 1, 34, SimpleNamespace(callback_site=0, correlation_id=5, function_name="cuMemAlloc_v2",
                                             symbol_name=None))
        fake.cb(None, 1, 307, SimpleNamespace(callback_site=0, correlation_id=6, function_name="cuLaunchKernel",
                                              symbol_name="_Z4pokePfx"))
        fake.cb(None, 1, 17, SimpleNamespace(callback_site=1, correlation_id=7, function_name="cuCtxSynchronize",
                                             symbol_name=None))
    finally:
        context.set_current(None, None)
    src._stop.set()  # the background flusher: nothing pending, nothing to flush
    w.close()
    recs = written(tmp_path / f"{os.getpid()}.jsonl")
    assert [r["event"] for r in recs] == ["alloc", "launch", "sync"]  # the alloc is on disk first
    assert fake.flushes == 1
    assert recs[0]["nodeid"] == "t.py::test_k" and recs[0]["stack"]
    assert recs[1]["kernel"] == "_Z4pokePfx" and recs[1]["correlation_id"] == 6
    assert src.pending == {}


def test_cupti_second_subscriber_falls_back_with_a_clear_message(tmp_path, monkeypatch):
    from faulthunt.ledger import cupti_source

    monkeypatch.setattr(cupti_source, "_import", lambda: _FakeCupti(busy=True))
    said: list[str] = []
    w = LedgerWriter(tmp_path)
    src = cupti_source.start(w, say=said.append)
    src._stop.set()
    w.close()
    assert src.subscriber is None
    assert "already has a subscriber" in said[0] and "allocations from activity records only" in said[0]
    note = written(tmp_path / f"{os.getpid()}.jsonl")[0]
    assert note["event"] == "note" and "profiler" in note["message"]
