"""Writes tests/data/report/sample_run/: a CONSTRUCTED run directory (not captured from a machine).

Built by hand from the schemas in docs/rundir.md and notes/contracts.md: 4 xdist workers x a
4-test suite run with --count 5; one test (test_scatter) faults with Xid 31 on a freed page and
kills its worker, one test hangs, one fails with a sticky CUDA error. The Xid line text is the
real H200 line from tests/data/h200/dmesg.txt with the pid changed. Run this again to rebuild it.
"""

import json
import shutil
from pathlib import Path

HERE = Path(__file__).parent / "sample_run"
T0, M0 = 1764686400.0, 9000.0
RAW31 = ("NVRM: Xid (PCI:0000:00:06): 31, pid={pid}, name=python, channel 0x0000000a, intr 00000000. "
         "MMU Fault: ENGINE GRAPHICS GPC1 GPCCLIENT_T1_8 faulted @ 0x7faf_e7e00000. "
         "Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE")
TESTS = ["tests/test_k.py::test_copy", "tests/test_k.py::test_scatter", "tests/test_k.py::test_reduce",
         "tests/test_k.py::test_sync"]


def w(path, obj):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def main():
    shutil.rmtree(HERE, ignore_errors=True)
    (HERE / "events").mkdir(parents=True)
    w(HERE / "run.json", {"id": "20261202-150000-ab12", "argv": ["/usr/bin/faulthunt", "stress", "-n", "4",
      "--count", "5", "tests/test_k.py"], "pytest_args": ["tests/test_k.py"], "cwd": "/src/lib",
      "started": T0, "ended": T0 + 9.0, "faulthunt_version": "0.1.0", "exit_status": 1,
      "pytest_exit_status": 1, "options": {"workers": 4, "count": 5}})
    # the keys of faulthunt.identity.collect_basic()
    w(HERE / "identity.json", {"host": "h200-node", "os": "Ubuntu 24.04.3 LTS", "kernel": "6.8.0-88-generic",
      "machine": "x86_64", "python": "3.11.14", "faulthunt": "0.1.0", "nvml": True, "gpu_note": None,
      "driver": "580.159.04", "driver_module": "open", "cuda_driver": "13.0",
      "gpus": [{"index": 0, "name": "NVIDIA H200", "uuid": "GPU-0c1d", "pci": "0000:00:06.0", "cc": "9.0",
                "driver": "580.159.04", "memory_total": 150754820096}],
      "packages": {"numba": "0.62.1", "numba-cuda": "0.20.0", "cupy-cuda13x": "13.6.0", "pytest": "8.4.2"}})
    failures, xids, controller = [], [], []
    controller.append({"event": "session_start", "pid": 4200, "argv": ["pytest"], "xdist": True, "t": T0, "t_mono": M0})
    pid = 4300
    tests_run = 0
    for wi in range(4):
        worker = f"gw{wi}"
        t = T0 + 0.5
        lines = [{"event": "worker", "worker": worker, "pid": pid, "ppid": 4200, "cuda_visible_devices": None,
                  "recycle": True, "t": t, "t_mono": M0 + 0.5}]
        queue = [(n, i) for i in range(5) for n in TESTS[wi % 4:] + TESTS[:wi % 4]][:5 + wi]
        for node, rep in queue:
            nid = f"{node}[{rep + 1}-5]"
            rec = {"nodeid": nid, "base_nodeid": node, "worker": worker, "pid": pid, "device": None}
            lines.append({"event": "start", **rec, "t": t, "t_mono": M0 + t - T0})
            tests_run += 1
            dur = 0.4
            if worker == "gw1" and node.endswith("test_scatter"):  # test_scatter faults: Xid 31 and SIGABRT, no end line
                xt = t + 0.2
                xids.append({"xid": 31, "pci": "0000:00:06", "pid": pid, "process": "python",
                             "message": RAW31.split("): 31, ")[1].format(pid=pid), "category": "app_memory_fault",
                             "mmu": {"address": 0x7fafe7e00000, "engine": "GRAPHICS", "gpc": 1,
                                     "client": "GPCCLIENT_T1_8", "fault_type": "FAULT_PDE",
                                     "access_type": "ACCESS_TYPE_VIRT_WRITE"},
                             "caused_by": None, "raw": "[ 9000.900000] " + RAW31.format(pid=pid), "seq": 812,
                             "ts": M0 + xt - T0, "wall": None, "t": xt, "worker": worker, "nodeid": nid,
                             "base_nodeid": node, "device": "0"})
                controller.append({"event": "crash", "kind": "crashed", "nodeid": nid, "base_nodeid": node,
                                   "worker": worker, "pid": pid, "signal": 6, "signal_name": "SIGABRT",
                                   "exit_status": None, "device": None, "faulthandler": "Fatal Python error: Aborted",
                                   "started": True, "t": t + 0.3, "t_mono": M0 + t + 0.3 - T0})
                failures.append({"nodeid": nid, "base_nodeid": node, "outcome": "crashed", "phase": None,
                                 "worker": worker, "pid": pid, "device": None, "message": "worker died: SIGABRT",
                                 "sticky_cuda_error": None, "signal": 6, "signal_name": "SIGABRT", "exit_status": None})
                break
            outcome, longrepr, sticky = "passed", None, None
            if worker == "gw2" and node.endswith("test_scatter"):
                outcome = "failed"
                sticky = {"code": 700, "name": "cudaErrorIllegalAddress", "driver_name": "CUDA_ERROR_ILLEGAL_ADDRESS",
                          "sticky": True, "text": "CUDA_ERROR_ILLEGAL_ADDRESS", "by": "name"}
                longrepr = "numba.cuda.cudadrv.driver.CudaAPIError: [700] Call to cuMemcpyDtoH results in CUDA_ERROR_ILLEGAL_ADDRESS"
            if worker == "gw3" and node.endswith("test_sync"):
                outcome, dur = "hung", 3.0
            lines.append({"event": "end", **rec, "t": t + dur, "t_mono": M0 + t + dur - T0, "outcome": outcome,
                          "duration": dur, "longrepr": longrepr, "sticky_cuda_error": sticky, "collateral_of": None})
            if outcome == "hung":
                lines.append({"event": "hang", "nodeid": nid, "base_nodeid": node, "worker": worker, "pid": pid,
                              "timeout": 3.0, "faulthandler": f"hangs/{worker}-{pid}-1.faulthandler.txt",
                              "faulthandler_error": None, "pyspy": f"hangs/{worker}-{pid}-1.py-spy.txt",
                              "pyspy_error": None, "process_tree": [], "t": t + dur, "t_mono": M0 + t + dur - T0})
                (HERE / "hangs").mkdir(exist_ok=True)
                (HERE / f"hangs/{worker}-{pid}-1.py-spy.txt").write_text(
                    f"Thread {pid} (idle): \"MainThread\"\n    cuStreamSynchronize (libcuda.so.1)\n"
                    "    synchronize (numba/cuda/cudadrv/driver.py:2185)\n    test_sync (tests/test_k.py:41)\n")
                (HERE / f"hangs/{worker}-{pid}-1.faulthandler.txt").write_text(
                    "Thread 0x00007f (most recent call first):\n  File \"tests/test_k.py\", line 41 in test_sync\n")
            if outcome != "passed":
                failures.append({"nodeid": nid, "base_nodeid": node, "outcome": outcome, "phase": None,
                                 "worker": worker, "pid": pid, "device": None,
                                 "message": longrepr or "Timeout (3.0 s)", "sticky_cuda_error": sticky,
                                 "signal": None, "signal_name": None, "exit_status": None})
            t += dur + 0.05
        with open(HERE / "events" / f"{worker}-{pid}.jsonl", "w") as fh:
            for line in lines:
                fh.write(json.dumps(line) + "\n")
        pid += 1
    controller.append({"event": "session_finish", "exitstatus": 1, "shouldstop": None, "shouldfail": None,
                       "testsfailed": 3, "t": T0 + 9.0, "t_mono": M0 + 9.0})
    (HERE / "controller.jsonl").write_text("".join(json.dumps(c) + "\n" for c in controller))
    (HERE / "xid.jsonl").write_text("".join(json.dumps(x) + "\n" for x in xids))
    w(HERE / "mapping.json", [{"address": "0x7fafe7e00000", "address_int": 0x7fafe7e00000, "page": True,
      "pid": 4301, "verdict": "freed", "offset": [0, 4095], "nodeid": "tests/test_k.py::test_scatter[1-5]",
      "allocation": {"address": "0x7fafe7e00000", "size": 4194304, "source": "numba",
                     "nodeid": "tests/test_k.py::test_scatter[1-5]", "freed": True}}])
    w(HERE / "sanitizer" / "sanitizer.json", {"findings": [{"tool": "memcheck", "kind": "Invalid __global__ write",
      "kernel": "scatter_kernel", "file": "tests/test_k.py", "line": 17, "access": "write", "size": 4,
      "address_range": [0x7fafe7e00000, 0x7fafe7e003fc], "count": 256, "threads": None, "blocks": None,
      "example": "========= Invalid __global__ write of size 4 bytes\n=========     at scatter_kernel+0x90 in tests/test_k.py:17",
      "host_stack": [], "nodeid": "tests/test_k.py::test_scatter"}], "records": 256,
      "tests": ["tests/test_k.py::test_scatter"], "exit_status": 1})
    from faulthunt.summary import summarize_run  # the real summary code derives summary.json
    w(HERE / "summary.json", summarize_run(HERE))


if __name__ == "__main__":
    main()
