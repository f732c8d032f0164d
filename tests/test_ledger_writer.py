"""The cheap paths of the ledger: the record encoder, cached stacks, the CUPTI flush policy.

The CUPTI module is a constructed stand-in (tests/test_ledger.py's ``_FakeCupti``) that counts
forced flushes: on the H200 each one costs about a millisecond, so their number is what the flush
policy is judged on here. Time itself is measured in scripts/benchrows/ledger.py, not asserted.
"""

from __future__ import annotations

import json

import pytest
import os
import sys
import time
from types import SimpleNamespace

from hypothesis import given, strategies as st

from faulthunt.ledger import cupti_source
from faulthunt.ledger.writer import LedgerWriter, RawJSON, encode_record, python_stack, stack_json

from test_ledger import BASE, _FakeCupti

scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(1 << 70), max_value=1 << 70),
                    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=40))
values = st.one_of(scalars, st.lists(st.text(max_size=20), max_size=5),
                   st.dictionaries(st.text(max_size=5), st.integers(), max_size=3))


@pytest.fixture(autouse=True)
def _python_route(monkeypatch):
    """These tests are of the ``python`` route (the default when the compiled library is built
    is ``native``; tests/test_ledger_native.py covers the compiled routes)."""
    monkeypatch.setenv("FAULTHUNT_LEDGER_ROUTE", "python")


@given(st.dictionaries(st.text(min_size=1, max_size=12), values, max_size=10))
def test_encode_record_round_trips_like_json(rec):
    line = encode_record(rec)
    assert "\n" not in line
    assert json.loads(line) == json.loads(json.dumps(rec))


def test_encode_record_writes_raw_json_as_is():
    assert json.loads(encode_record({"stack": RawJSON('["a:1 in f"]'), "n": 1})) == {"stack": ["a:1 in f"], "n": 1}


def test_non_finite_floats_become_null():
    assert json.loads(encode_record({"t": float("nan"), "u": float("inf")})) == {"t": None, "u": None}


def _here():
    return stack_json(), python_stack()


def test_stack_json_is_python_stack_and_cached():
    a = [_here() for _ in range(3)]
    assert json.loads(a[0][0]) == a[0][1]
    assert a[0][0] is a[1][0] is a[2][0]  # same call site: the cached encoding
    assert any("test_stack_json_is_python_stack_and_cached" in f for f in a[0][1])


def test_stack_policy_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("FAULTHUNT_LEDGER_STACKS", "off")
    w = LedgerWriter(tmp_path)
    assert not w.alloc_stacks and not w.all_stacks
    w.close()
    monkeypatch.setenv("FAULTHUNT_LEDGER_STACKS", "bogus")
    w = LedgerWriter(tmp_path)
    assert w.stacks == "alloc" and w.alloc_stacks and not w.all_stacks
    w.close()


def _loop(fake, n, cid0=100):
    for i in range(n):
        cid = cid0 + 2 * i
        fake.cb(None, 1, 34, SimpleNamespace(callback_site=0, correlation_id=cid, function_name="cuMemAlloc_v2",
                                             symbol_name=None))
        fake.cb(None, 1, 34, SimpleNamespace(callback_site=1, correlation_id=cid, function_name="cuMemAlloc_v2",
                                             symbol_name=None))
        fake.cb(None, 1, 307, SimpleNamespace(callback_site=0, correlation_id=cid + 1,
                                              function_name="cuLaunchKernel", symbol_name="_Z4fillPf"))
        fake.cb(None, 1, 307, SimpleNamespace(callback_site=1, correlation_id=cid + 1,
                                              function_name="cuLaunchKernel", symbol_name="_Z4fillPf"))


def _start(tmp_path, monkeypatch, policy=None):
    fake = _FakeCupti()
    monkeypatch.setattr(cupti_source, "_import", lambda: fake)
    if policy:
        monkeypatch.setenv(cupti_source.FLUSH_ENV, policy)
    else:
        monkeypatch.delenv(cupti_source.FLUSH_ENV, raising=False)
    w = LedgerWriter(tmp_path)
    src = cupti_source.start(w)
    src._stop.set()  # no background flushes: only the launch/sync paths are counted
    return fake, w, src


def test_default_policy_does_not_flush_before_every_launch(tmp_path, monkeypatch):
    fake, w, src = _start(tmp_path, monkeypatch)
    _loop(fake, 200)
    # the first launch after the allocation flushes; the next ones are within FLUSH_GAP of it
    assert 1 <= fake.flushes < 20
    launches = [json.loads(x) for x in w.path.read_text().splitlines() if '"launch"' in x]
    assert len(launches) == 200 and all("stack" not in r for r in launches)  # stacks: alloc only
    w.close()


def test_sync_flushes_pending_allocations(tmp_path, monkeypatch):
    fake, w, src = _start(tmp_path, monkeypatch)
    _loop(fake, 5)
    before = fake.flushes
    fake.cb(None, 1, 17, SimpleNamespace(callback_site=1, correlation_id=999, function_name="cuCtxSynchronize",
                                         symbol_name=None))
    assert fake.flushes == before + 1 and not src.dirty
    w.close()


def test_strict_policy_flushes_before_each_launch(tmp_path, monkeypatch):
    fake, w, src = _start(tmp_path, monkeypatch, "launch")
    _loop(fake, 50)
    assert fake.flushes == 50
    w.close()


def test_background_flusher_hands_over_pending_records(tmp_path, monkeypatch):
    fake = _FakeCupti()
    monkeypatch.setattr(cupti_source, "_import", lambda: fake)
    w = LedgerWriter(tmp_path)
    src = cupti_source.start(w)
    try:
        src.dirty = True
        src._last_flush = 0.0
        # poll (a loaded machine may delay the thread); no timing is asserted, only that it runs
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if fake.flushes >= 1 and not src.dirty:
                break
            src._stop.wait(0.05)
        assert fake.flushes >= 1 and not src.dirty
    finally:
        src.stop()
        w.close()
    assert any(f'"address":{BASE}' in x for x in (tmp_path / f"{os.getpid()}.jsonl").read_text().splitlines())


# --- the hot paths and the memory-mapped backend ----------------------------------------------

from faulthunt import context  # noqa: E402
from faulthunt.ledger import writer as writer_mod  # noqa: E402
from faulthunt.ledger.reader import load_ledger  # noqa: E402
from faulthunt.ledger.writer import seal, seal_dead  # noqa: E402
from faulthunt.mapper import map_address  # noqa: E402

names = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30)


def _records(path):
    data = path.read_bytes().rstrip(b"\0").decode()
    return [json.loads(x) for x in data.splitlines()][1:]  # the opening note left out


@given(nodeid=st.one_of(st.none(), names), kernel=names, address=st.integers(0, (1 << 64) - 1),
       size=st.integers(0, 1 << 48), cid=st.one_of(st.none(), st.integers(0, 1 << 40)))
def test_hot_paths_write_what_record_would(tmp_path_factory, nodeid, kernel, address, size, cid):
    d = tmp_path_factory.mktemp("hot")
    w = LedgerWriter(d, stacks="alloc")
    stack = stack_json()
    old = context.current_nodeid
    context.current_nodeid = nodeid
    try:
        w.alloc("cupy", address, size, "block", stack=stack, tail=',"device_id":0')
        w.free("numba", address, "device", phase="requested")
        w.launch("cupti", kernel, "cuLaunchKernel", cid)
    finally:
        context.current_nodeid = old
    w.close()
    got = _records(d / f"{os.getpid()}.jsonl")
    want = [
        {"event": "alloc", "pid": os.getpid(), "nodeid": nodeid, "source": "cupy", "address": address,
         "size": size, "kind": "block", "device_id": 0, "stack": json.loads(stack)},
        {"event": "free", "pid": os.getpid(), "nodeid": nodeid, "source": "numba", "address": address,
         "kind": "device", "phase": "requested"},
        {"event": "launch", "pid": os.getpid(), "nodeid": nodeid, "source": "cupti", "kernel": kernel,
         "api": "cuLaunchKernel", **({"correlation_id": cid} if cid is not None else {})},
    ]
    for g in got:
        assert isinstance(g.pop("t"), float)
    assert got == want


def test_nodeid_change_is_seen_by_the_hot_path(tmp_path):
    w = LedgerWriter(tmp_path)
    for n in ("a.py::t1", "a.py::t1", None, 'b.py::t["x"]'):
        context.current_nodeid = n
        w.alloc("cupy", 1, 2, "block")
    context.current_nodeid = None
    w.close()
    assert [r["nodeid"] for r in _records(w.path)] == ["a.py::t1", "a.py::t1", None, 'b.py::t["x"]']


@pytest.mark.parametrize("backend", ["mmap", "write"])
def test_backends_write_the_same_records_across_window_boundaries(tmp_path, monkeypatch, backend):
    monkeypatch.setattr(writer_mod, "CHUNK", 4096)  # many windows, lines crossing their edges
    w = LedgerWriter(tmp_path, backend=backend)
    assert w.backend == backend
    for i in range(500):
        w.alloc("synthetic", BASE + (i << 12), 4096, "device")
        if i % 97 == 0:
            w.record("note", "synthetic", message="x" * 9000)  # longer than a window
    w.close()
    recs = _records(w.path)
    assert len(recs) == 500 + 6
    assert [r["address"] for r in recs if r["event"] == "alloc"] == [BASE + (i << 12) for i in range(500)]
    assert w.path.read_bytes().endswith(b"}\n")  # closed: the reserve is cut


def test_fsync_means_the_write_backend(tmp_path):
    w = LedgerWriter(tmp_path, fsync=True)
    assert w.backend == "write"
    w.close()


KILLED = """
import os, sys, time
from faulthunt.ledger.writer import LedgerWriter
w = LedgerWriter(sys.argv[1])
w.alloc("synthetic", 0x7f0000000000, 4096, "device")
w.launch("synthetic", "k", "cuLaunchKernel", 1)
print("ready", flush=True)
time.sleep(60)
"""


@pytest.mark.slow
@pytest.mark.parametrize("how", ["SIGKILL", "abort"])
def test_killed_mmap_writer_loses_nothing(tmp_path, how):
    import subprocess
    import signal

    code = KILLED if how == "SIGKILL" else KILLED.replace("time.sleep(60)", "os.abort()")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
    if how == "SIGKILL":
        proc.send_signal(signal.SIGKILL)
    proc.wait(20)
    path = tmp_path / f"{proc.pid}.jsonl"
    assert path.read_bytes().endswith(b"\0")  # the reserve past the last record is still there
    ledger = load_ledger(tmp_path)
    assert ledger.skipped == 0
    v = map_address(ledger, 0x7F00_0000_0010, pid=proc.pid)
    assert v.verdict == "inside" and [k["kernel"] for k in v.launches] == ["k"]
    assert seal_dead(tmp_path) == [path]
    assert path.read_bytes().endswith(b'"correlation_id":1}\n')
    assert not seal(path)  # nothing more to cut


def test_a_new_writer_continues_a_torn_file(tmp_path):
    w = LedgerWriter(tmp_path)
    w.alloc("synthetic", BASE, 64, "device")
    w._put(b'{"event": "alloc", "addr')  # torn
    w._mm.close()  # die without closing: the reserve stays  # type: ignore[union-attr]
    w._mm = None
    os.close(w._fd)
    w._fd = -1
    w2 = LedgerWriter(tmp_path)  # same pid: continues the file
    w2.free("synthetic", BASE, "device")
    w2.close()
    ledger = load_ledger(tmp_path)
    assert ledger.skipped == 1  # the torn line alone
    assert map_address(ledger, BASE + 8).verdict == "freed"


def test_stack_caches_stay_bounded_and_right(monkeypatch):
    monkeypatch.setattr(writer_mod, "_CACHE_MAX", 40)
    fns = []
    for i in range(60):  # fresh code objects, each freed after use: ids get reused
        ns: dict = {}
        exec(compile(f"def f{i}(g):\n    return g()\n", f"gen{i}.py", "exec"), ns)
        fns.append(ns[f"f{i}"])
        got = json.loads(ns[f"f{i}"](lambda: stack_json()))
        assert got[1].startswith(f"gen{i}.py:2 in f{i}")
        assert len(writer_mod._codes) <= 40 + 2 * writer_mod.STACK_LIMIT
        del ns


def test_a_forked_child_that_records_nothing_leaves_no_file(tmp_path):
    w = LedgerWriter(tmp_path)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os._exit(0 if not (tmp_path / f"{os.getpid()}.jsonl").exists() else 3)
    _, status = os.waitpid(pid, 0)
    w.close()
    assert os.waitstatus_to_exitcode(status) == 0
    assert not (tmp_path / f"{pid}.jsonl").exists()
    with pytest.raises(ValueError, match="closed"):
        w.alloc("synthetic", 1, 2, "device")


def test_no_room_for_the_next_window_goes_on_with_write(tmp_path, monkeypatch):
    monkeypatch.setattr(writer_mod, "CHUNK", 4096)
    w = LedgerWriter(tmp_path)
    real = os.posix_fallocate

    def full(fd, offset, length):
        if offset >= 4096:
            raise OSError(28, "No space left on device")
        return real(fd, offset, length)

    monkeypatch.setattr(writer_mod.os, "posix_fallocate", full)
    for i in range(100):  # ~15 KB: crosses the first window's end
        w.alloc("synthetic", BASE + (i << 12), 4096, "device")
    assert w.backend == "write" and w.dropped == 0
    w.close()
    recs = _records(w.path)
    assert [r["address"] for r in recs if r["event"] == "alloc"] == [BASE + (i << 12) for i in range(100)]
    assert any("mmap reserve failed" in r.get("message", "") for r in recs)


def test_a_write_that_fails_is_counted_not_raised(tmp_path, monkeypatch):
    w = LedgerWriter(tmp_path, backend="write")

    def enospc(fd, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(writer_mod.os, "write", enospc)
    w.alloc("synthetic", BASE, 64, "device")  # must not raise into the allocation it records
    monkeypatch.undo()
    assert w.dropped == 1
    w.close()
