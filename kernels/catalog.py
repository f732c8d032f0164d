"""The planted-fault catalog: each deliberate bug, its correct twin, and the evidence it must leave.

This is faulthunt's own proving ground, in the manner of memray's deliberately misbehaving test
extension: every entry names where the bug shows (a plain run, a compute-sanitizer tool and the
line it prints, an Xid in the kernel log) so that the harness can be checked against it, on the
H200 by ``scripts/validate_gpu.sh`` and on a CPU by the numba simulator and the stand-ins.

Where an expectation was *seen* on the H200 the entry cites the capture under ``tests/data/h200/``
(driver 580.159.04, CUDA 13.0, compute-sanitizer 2025.3.1); where it is the expectation for a
kernel that has not run there yet, ``seen_in`` is empty and validate_gpu.sh is what checks it.

Pure data and pure helpers: nothing here touches a GPU, numba or the file system.
"""

from __future__ import annotations

import dataclasses
import hashlib
import secrets
from typing import Any

#: flavours a planted fault can come in
CUDA = "cuda"     # CUDA C++ compiled at run time with NVRTC through cuda.core (kernels/planted.cu)
NUMBA = "numba"   # numba.cuda kernels (kernels/numba_faults.py); on a CPU: NUMBA_ENABLE_CUDASIM=1

#: what the CPU-only path of the bundled suite does for a fault
SIM_NUMBA = "numba-simulator"   # the numba kernel itself runs in the simulator and shows the bug
SIM_STANDIN = "standin"         # a SIMULATED stand-in (kernels/standins.py) imitates the evidence
SIM_NONE = "none"               # the simulator cannot show this bug; the CPU suite says so and skips


@dataclasses.dataclass(frozen=True)
class Evidence:
    """Where a planted fault shows, in words (``plain``, ``sanitizer``, ``xid``) and as checks.

    ``plain_error`` is the CUDA error name a plain run raises (``None``: the run completes and only
    the test's own assertion, if anything, sees it). ``tool``/``tool_options``/``sanitizer_line``
    say which compute-sanitizer run shows it and a substring of the line it prints (``tool`` None:
    no sanitizer tool sees it). ``xids`` are the Xid numbers a plain run leaves in the kernel log.
    """

    plain: str
    sanitizer: str
    xid: str
    plain_error: str | None
    tool: str | None
    tool_options: tuple[str, ...]
    sanitizer_line: str | None
    xids: tuple[int, ...]
    #: what the CPU-only suite shows instead (simulator or stand-in)
    cpu: str
    #: captures under tests/data/h200/ that show this evidence (empty: expectation, not yet seen)
    seen_in: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "plain": self.plain,
            "sanitizer": self.sanitizer,
            "xid": self.xid,
            "cpu": self.cpu,
            "expect": {
                "plain_error": self.plain_error,
                "tool": self.tool,
                "tool_options": list(self.tool_options),
                "sanitizer_line": self.sanitizer_line,
                "xids": list(self.xids),
            },
            "seen_in": list(self.seen_in),
        }


@dataclasses.dataclass(frozen=True)
class PlantedFault:
    """One planted bug and its correct twin."""

    number: int
    name: str
    title: str
    bug: str
    twin: str
    evidence: Evidence
    flavours: tuple[str, ...]
    #: CUDA C++ kernel symbols in planted.cu (bug, twin); None where the bug is host-side only
    cuda_kernels: tuple[str, str] | None
    #: how the CPU-only suite exercises it (SIM_NUMBA, SIM_STANDIN, SIM_NONE)
    cpu: str

    def to_json(self) -> dict[str, Any]:
        """The ``faulthunt kernels list --json`` object."""
        return {
            "number": self.number,
            "name": self.name,
            "title": self.title,
            "bug": self.bug,
            "twin": self.twin,
            "flavours": list(self.flavours),
            "cuda_kernels": list(self.cuda_kernels) if self.cuda_kernels else None,
            "cpu": self.cpu,
            "evidence": self.evidence.to_json(),
        }


_H = "tests/data/h200/"

CATALOG: tuple[PlantedFault, ...] = (
    PlantedFault(
        1, "oob_write", "Off-by-one write past the end of a reduction",
        bug="pairwise max reducer guards with `i <= n`: thread n writes out[n], one float past a "
            "4000-byte buffer",
        twin="the same reducer with `i < n`",
        evidence=Evidence(
            plain="silent: exit 0, correct result, no error (the 4000-byte buffer shares a 2 MiB "
                  "page, so the stray write lands in mapped memory)",
            sanitizer="memcheck: `Invalid __global__ write of size 4 bytes` ... `is 1 bytes after "
                      "the nearest allocation ... of size 4,000 bytes`",
            xid="none",
            plain_error=None, tool="memcheck", tool_options=(),
            sanitizer_line="Invalid __global__ write of size 4 bytes", xids=(),
            cpu="numba simulator: IndexError (index 1000 is out of bounds) in the kernel",
            seen_in=(_H + "plain_oob1.txt", _H + "san_memcheck_oob1.txt", _H + "san_numba.txt"),
        ),
        flavours=(CUDA, NUMBA), cuda_kernels=("max_reduce_off_by_one", "max_reduce"),
        cpu=SIM_NUMBA,
    ),
    PlantedFault(
        2, "wild_write", "Wild write far outside any allocation",
        bug="a stray index (2**36 elements, 256 GiB past the buffer) writes where nothing is mapped",
        twin="the same kernel with an index inside the buffer",
        evidence=Evidence(
            plain="CUDA_ERROR_ILLEGAL_ADDRESS (700) at the next synchronize; the context is "
                  "poisoned (sticky) for the rest of the process",
            sanitizer="memcheck: `Invalid __global__ write of size 4 bytes` ... `is out of bounds`",
            xid="Xid 31 (MMU fault, FAULT_PDE ACCESS_TYPE_VIRT_WRITE) naming the pid and the "
                "4 KiB page of the write",
            plain_error="CUDA_ERROR_ILLEGAL_ADDRESS", tool="memcheck", tool_options=(),
            sanitizer_line="Invalid __global__ write of size 4 bytes", xids=(31,),
            cpu="SIMULATED stand-in: appends a real-format Xid 31 line (this pid) to the simulated "
                "kernel log, then os.abort() kills the worker like a native crash",
            seen_in=(_H + "plain_wild.txt", _H + "san_memcheck_wild.txt", _H + "nvrm_lines.txt"),
        ),
        flavours=(CUDA, NUMBA), cuda_kernels=("wild_write", "wild_write_twin"), cpu=SIM_STANDIN,
    ),
    PlantedFault(
        3, "oob_read", "Read past the end",
        bug="a window shifted by 8 reads in[i + 8] for every i < n: the last 8 threads read past "
            "the end",
        twin="the shifted window reads in[i + 8] only while i + 8 < n",
        evidence=Evidence(
            plain="silent: exit 0, the last 8 outputs hold whatever followed the buffer",
            sanitizer="memcheck: `Invalid __global__ read of size 4 bytes` ... `bytes after the "
                      "nearest allocation`",
            xid="none",
            plain_error=None, tool="memcheck", tool_options=(),
            sanitizer_line="Invalid __global__ read of size 4 bytes", xids=(),
            cpu="numba simulator: IndexError in the kernel",
            seen_in=(_H + "plain_readpast.txt", _H + "san_memcheck_readpast.txt"),
        ),
        flavours=(CUDA, NUMBA), cuda_kernels=("read_past_end", "read_shifted"), cpu=SIM_NUMBA,
    ),
    PlantedFault(
        4, "use_after_free", "Use after free",
        bug="a 4000-byte buffer is freed (cuMemFree) and then handed to a kernel, while a "
            "neighbour allocation stays alive",
        twin="the kernel runs (and is synchronized) before the free",
        evidence=Evidence(
            plain="silent while another live allocation keeps the 2 MiB page mapped (this kernel "
                  "keeps a neighbour alive); when the free unmaps the page (a process's only "
                  "allocation) it is CUDA_ERROR_ILLEGAL_ADDRESS (700) + Xid 31 instead",
            sanitizer="memcheck: `Invalid __global__ read of size 4 bytes` ... `is out of bounds` "
                      "(memcheck names the nearest live allocation, not the freed one)",
            xid="none while the page stays mapped; Xid 31 (ACCESS_TYPE_VIRT_READ) when unmapped",
            plain_error=None, tool="memcheck", tool_options=(),
            sanitizer_line="Invalid __global__ read of size 4 bytes", xids=(),
            cpu="not visible in the numba simulator (host arrays are never freed): skipped on CPU",
            seen_in=(_H + "plain_uaf.txt", _H + "san_memcheck_uaf.txt"),
        ),
        flavours=(CUDA,), cuda_kernels=("scale", "scale"), cpu=SIM_NONE,
    ),
    PlantedFault(
        5, "stream_ordered", "Stream-ordered allocation used on another stream",
        bug="cuMemAllocAsync on stream A, a kernel on stream B with no event or synchronization, "
            "cuMemFreeAsync on A",
        twin="stream B waits on an event recorded on A after the allocation, and A waits for B "
             "before the free",
        evidence=Evidence(
            plain="silent: exit 0 (the pool usually has the memory ready in time)",
            sanitizer="memcheck --track-stream-ordered-races all: `is potentially accessed before "
                      "it is allocated` (plain memcheck: 0 errors)",
            xid="none",
            plain_error=None, tool="memcheck",
            tool_options=("--track-stream-ordered-races", "all"),
            sanitizer_line="potentially accessed before it is allocated", xids=(),
            cpu="not visible in the numba simulator (no stream-ordered allocator): skipped on CPU",
            seen_in=(_H + "plain_streamrace.txt", _H + "san_memcheck_streamrace.txt",
                     _H + "san_memcheck_streamrace_plain.txt"),
        ),
        flavours=(CUDA,), cuda_kernels=("scale", "scale"), cpu=SIM_NONE,
    ),
    PlantedFault(
        6, "uninit_read", "Uninitialized global read",
        bug="out[i] = in[i] + 1 over a freshly allocated `in` that nothing ever wrote",
        twin="`in` is zero-filled (cuMemsetD32) before the kernel",
        evidence=Evidence(
            plain="silent: usually even the result is right, because fresh device memory is "
                  "often zero",
            sanitizer="initcheck: `Uninitialized __global__ memory read of size 4 bytes`",
            xid="none",
            plain_error=None, tool="initcheck", tool_options=(),
            sanitizer_line="Uninitialized __global__ memory read of size 4 bytes", xids=(),
            cpu="numba simulator: the input is an uninitialised numpy array, so the result is "
                "whatever was in host memory (wrong in practice, not guaranteed)",
            seen_in=(_H + "plain_uninit.txt", _H + "san_initcheck_uninit.txt"),
        ),
        flavours=(CUDA, NUMBA), cuda_kernels=("add_one", "add_one"), cpu=SIM_NUMBA,
    ),
    PlantedFault(
        7, "shared_race", "Shared-memory race without a barrier",
        bug="each thread writes s[t] and reads its neighbour s[t+1] with no __syncthreads() between",
        twin="a __syncthreads() between the write and the read",
        evidence=Evidence(
            plain="usually silent; a wrong neighbour value now and then, depending on warp "
                  "scheduling",
            sanitizer="racecheck: `Race reported between Write access ... and Read access` "
                      "(with --racecheck-report all: `Potential RAW hazard detected at __shared__`)",
            xid="none",
            plain_error=None, tool="racecheck", tool_options=(),
            sanitizer_line="Race reported between Write access", xids=(),
            cpu="numba simulator: most neighbour values come out wrong (its threads run without "
                "the barrier's ordering); how many varies from run to run",
            seen_in=(_H + "plain_sharedrace.txt", _H + "san_racecheck_analysis.txt",
                     _H + "san_racecheck_shared.txt"),
        ),
        flavours=(CUDA, NUMBA), cuda_kernels=("shared_shift", "shared_shift_synced"),
        cpu=SIM_NUMBA,
    ),
    PlantedFault(
        8, "divergent_sync", "Divergent __syncthreads",
        bug="`if (threadIdx.x < 16) __syncthreads();` half a warp reaches the barrier",
        twin="every thread reaches the same barrier",
        evidence=Evidence(
            plain="silent on Volta and later (independent thread scheduling)",
            sanitizer="synccheck: `Barrier error detected. Divergent thread(s) in warp.`",
            xid="none",
            plain_error=None, tool="synccheck", tool_options=(),
            sanitizer_line="Barrier error detected. Divergent thread(s) in warp", xids=(),
            cpu="not visible in the numba simulator (it lets the divergent barrier pass): skipped",
            seen_in=(_H + "plain_syncdiv.txt", _H + "san_synccheck_div.txt"),
        ),
        flavours=(CUDA, NUMBA), cuda_kernels=("divergent_sync", "uniform_sync"), cpu=SIM_NONE,
    ),
    PlantedFault(
        9, "misaligned", "Misaligned access",
        bug="an int store through `(int *)(p + 1 + 4 * t)`: every address is 1 byte off",
        twin="the store through `(int *)(p + 4 * t)`",
        evidence=Evidence(
            plain="CUDA_ERROR_MISALIGNED_ADDRESS (716) at the next synchronize; sticky",
            sanitizer="memcheck: `Invalid __global__ write of size 4 bytes` ... `is misaligned`",
            xid="Xid 13 three times: `Graphics SM Warp Exception ... Misaligned Address`, an ESR "
                "line, `Graphics Exception: channel ...` with the pid (the H200 capture shows no "
                "Xid 31 for it)",
            plain_error="CUDA_ERROR_MISALIGNED_ADDRESS", tool="memcheck", tool_options=(),
            sanitizer_line="is misaligned", xids=(13,),
            cpu="SIMULATED stand-in: real-format Xid 13 lines (this pid) into the simulated kernel "
                "log and a sticky CUDA_ERROR_MISALIGNED_ADDRESS; later kernels in the same process "
                "fail with the same sticky error",
            seen_in=(_H + "plain_misaligned.txt", _H + "san_memcheck_misaligned.txt",
                     _H + "nvrm_lines.txt"),
        ),
        flavours=(CUDA,), cuda_kernels=("misaligned_write", "aligned_write"), cpu=SIM_STANDIN,
    ),
    PlantedFault(
        10, "stale_cache", "Stale pointer from a launch cache",
        bug="a launch-plan cache keyed by (shape, dtype) only: the second call, with the same shape "
            "but new buffers, runs with the first call's pointers",
        twin="the cache key includes the buffers' addresses",
        evidence=Evidence(
            plain="the test's own assertion: the second output is never written (it holds its "
                  "fill value) and the first output is overwritten; no CUDA error",
            sanitizer="none: the stale pointers still name live allocations, so memcheck is clean "
                      "(only the result check sees it)",
            xid="none",
            plain_error=None, tool=None, tool_options=(), sanitizer_line=None, xids=(),
            cpu="numba simulator: the same wrong result (AssertionError)",
        ),
        flavours=(CUDA, NUMBA), cuda_kernels=("scale_into", "scale_into"), cpu=SIM_NUMBA,
    ),
    PlantedFault(
        11, "arch_gap", "Architecture gap: no kernel image for the device",
        bug="the module is built as SASS for one architecture the device does not have "
            "(sm_75 on sm_90, sm_90 elsewhere) and carries no PTX to JIT",
        twin="the module is built for the device's own architecture",
        evidence=Evidence(
            plain="CUDA_ERROR_NO_BINARY_FOR_GPU (209) when the module is loaded; not sticky",
            sanitizer="memcheck --report-api-errors explicit reports the failing API call: `Program hit "
                      "CUDA_ERROR_NO_BINARY_FOR_GPU (error 209)`",
            xid="none",
            # faulthunt sanitize passes --report-api-errors no by default (API noise), which
            # hides exactly this evidence: the H200's first validation run showed 0 findings
            plain_error="CUDA_ERROR_NO_BINARY_FOR_GPU", tool="memcheck",
            tool_options=("--report-api-errors", "explicit"),
            sanitizer_line="CUDA_ERROR_NO_BINARY_FOR_GPU", xids=(),
            cpu="not visible without a GPU driver (no module loader): skipped on CPU; "
                "tests/test_kernels*.py checks with NVRTC that the module holds only sm_75 SASS",
            seen_in=(_H + "plain_archgap.txt", _H + "cuobjdump_sm75_elf.txt",
                     _H + "cuobjdump_sm75_ptx.txt"),
        ),
        flavours=(CUDA,), cuda_kernels=("scale", "scale"), cpu=SIM_NONE,
    ),
    PlantedFault(
        12, "bounded_hang", "Bounded hang: a spin on a flag the host never releases",
        bug="the kernel spins on a flag in mapped pinned memory; the host forgets to release it, "
            "so the kernel runs until its hard clock bound (globaltimer, 6 s; clock64 cap as a "
            "second guard) and reports that it timed out",
        twin="the host releases the flag before the launch (under faulthunt stress's "
             "CUDA_LAUNCH_BLOCKING=1 the launch itself blocks, so a later release would never "
             "come); the kernel ends at once",
        evidence=Evidence(
            plain="the test takes the whole clock bound (6 s) and fails `kernel hit its clock "
                  "bound`; with `faulthunt stress --timeout` below 6 s it is reported hung, with "
                  "stacks. It always ends by itself",
            sanitizer="none (no memory error)",
            xid="none",
            plain_error=None, tool=None, tool_options=(), sanitizer_line=None, xids=(),
            cpu="SIMULATED stand-in: a host-side wait on the same kind of flag, with the same "
                "clock bound",
        ),
        flavours=(CUDA,), cuda_kernels=("spin_on_flag", "spin_on_flag"), cpu=SIM_STANDIN,
    ),
)

_BY_NAME = {f.name: f for f in CATALOG}


def names() -> tuple[str, ...]:
    """Every planted fault's name, in catalog order."""
    return tuple(f.name for f in CATALOG)


def get(name: str) -> PlantedFault:
    """The planted fault called ``name``; ``KeyError`` names the known ones."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"no planted fault {name!r}; known: {', '.join(names())}") from None


def catalog_json() -> list[dict[str, Any]]:
    """The whole catalog as ``faulthunt kernels list --json`` prints it."""
    return [f.to_json() for f in CATALOG]


def fires(key: str, every: int, seed: int | None = 0) -> bool:
    """Whether the intermittent planted bug fires for ``key`` (1 run in ``every``, seeded).

    Deterministic for (seed, key): a test id under pytest-repeat (``test_x[3-50]``) gives each
    repeat its own draw, so about one repeat in ``every`` runs the bug and the rest run the twin,
    and the same seed reproduces the same failing repeats. ``every <= 1`` always fires. ``seed``
    None draws afresh each call: a fault that does not depend on the test's id, as most real
    intermittent faults do not (a rerun of the same id fires 1 time in ``every``).
    """
    if every <= 1:
        return True
    if seed is None:
        return secrets.randbelow(every) == 0
    digest = hashlib.sha256(f"{seed}:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % every == 0
