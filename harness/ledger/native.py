"""The ledger's compiled part (``_native.c``), loaded with ctypes; None and why when it cannot be.

``pip install`` builds ``faulthunt/ledger/_native*.so`` with the system C compiler when one is
there (setup.py, ``optional=True``). The library includes neither Python.h nor CUDA headers, so
neither is needed to build it; it is not a Python module and is never imported, only loaded here.
Without it the ledger records through its pure-Python route and says so (:func:`load` gives the
reason and the fix).

CUPTI record layouts are not compiled in: :func:`layout_from_dtype` takes each field's offset and
size from cupti-python's own dtypes (the same source :mod:`.cupti_direct` reads), and
:func:`check_layout` compares them with the CUDA 13 declarations in ``_native.c``
(``fl_default_layout``), so a mismatch is said instead of read wrongly.
"""

from __future__ import annotations

import ctypes
import glob
import importlib.machinery
import importlib.util
import os
from pathlib import Path
from typing import Any

#: must equal FL_ABI in _native.c: a library built from other sources is not used
ABI = 4
#: the fields _native.c reads, in its enum order, per structure: (cupti-python dtype field, bytes)
CALLBACK_FIELDS = (("callback_site", 4), ("symbol_name", 8), ("function_return_value", 8),
                   ("correlation_id", 4), ("function_params", 8))
MEMORY_FIELDS = (("kind", 4), ("memory_operation_type", 4), ("memory_kind", 4), ("correlation_id", 4),
                 ("address", 8), ("bytes", 8), ("timestamp", 8), ("device_id", 4), ("stream_id", 4),
                 ("is_async", 4), ("memory_pool_config.memory_pool_type", 4),
                 ("memory_pool_config.address", 8))
KERNEL_FIELDS = (("kind", 4), ("start", 8), ("end", 8), ("device_id", 4), ("stream_id", 4),
                 ("correlation_id", 4), ("name", 8), ("grid_x", 4), ("grid_y", 4), ("grid_z", 4),
                 ("block_x", 4), ("block_y", 4), ("block_z", 4))
#: fields a structure cannot do without (the rest are left out of records when absent)
REQUIRED = {0: {"callback_site", "symbol_name", "function_return_value", "correlation_id"},
            1: {"kind", "memory_operation_type", "memory_kind", "correlation_id", "address", "bytes",
                "timestamp"},
            2: {"kind", "start", "end", "correlation_id", "name"}}
FIELDS = {0: CALLBACK_FIELDS, 1: MEMORY_FIELDS, 2: KERNEL_FIELDS}
#: fl_stats order
STATS = ("launches", "syncs", "memory_records", "kernel_records", "flushes", "buffer_errors",
         "estimated_kernel_times", "lost", "alloc_stacks", "alloc_stacks_sampled_out")

_V, _I, _I32, _I64, _U32, _U64, _SZ, _CP = (ctypes.c_void_p, ctypes.c_int, ctypes.c_int32,
                                            ctypes.c_int64, ctypes.c_uint32, ctypes.c_uint64,
                                            ctypes.c_size_t, ctypes.c_char_p)
_PROTOS: dict[str, tuple[list[Any], Any]] = {
    "fl_abi": ([], _I),
    "fl_sink_open": ([_I, _U64, _U64, _I], _V),
    "fl_put": ([_V, _CP, _SZ], _I),
    "fl_sink_close": ([_V], _I),
    "fl_sink_info": ([_V, ctypes.POINTER(_U64)], None),
    "fl_use_sink": ([_V], None),
    "fl_prefault": ([_V], None),
    "fl_set_test": ([_CP, _SZ], None),
    "fl_default_layout": ([_I, ctypes.POINTER(_I32), _I], None),
    "fl_layout": ([_I, ctypes.POINTER(_I32), _I], _I),
    "fl_consts": ([_I32] * 8, None),
    "fl_clock": ([_I64, _I64, _I64], None),
    "fl_cbid": ([_U32, _I, _CP], _I),
    "fl_functions": ([_V, _V, _U32], None),
    "fl_policy": ([_I, _I, _I64, _I, _I, _I, _U64], None),
    "fl_stack_provider": ([_V], None),
    "fl_stack_sampling": ([_I64, _I64], None),
    "fl_cbparams": ([_U32, _I, _I, _I, _I, _I, _I], _I),
    "fl_alloc_source": ([_I], _I),
    "fl_stats": ([ctypes.POINTER(_U64), _I], None),
    "fl_pending_put": ([_U32, _CP, _SZ], None),
    "fl_refine": ([_I], _I),
    "fl_note": ([_CP], None),
    "fl_flush": ([], _I),
    "fl_start_flusher": ([], _I),
    "fl_stop_flusher": ([], None),
    "fl_install_crash_flush": ([_I], _I),
    "fl_remove_crash_flush": ([], None),
}
#: C functions whose addresses go to CUPTI (never called from Python)
ENTRY_POINTS = ("fl_cupti_callback", "fl_buffer_requested", "fl_buffer_completed")
#: the stack provider's C type: void (uint32_t correlation_id, int kind)
STACK_PROVIDER = ctypes.CFUNCTYPE(None, ctypes.c_uint32, ctypes.c_int)

_loaded: tuple[Any, str | None] | None = None


def candidates() -> list[str]:
    """The built libraries next to this module: this interpreter's build first, then any other
    (a copy built elsewhere: the library has no Python ABI, so any build for this platform works)."""
    here = Path(__file__).resolve().parent
    spec = importlib.util.find_spec("faulthunt.ledger._native")
    first = [spec.origin] if spec is not None and spec.origin else []
    rest = sorted(glob.glob(str(here / "_native*.so")))
    return [p for p in dict.fromkeys(first + rest) if p and os.path.exists(p)]


def load(force: bool = False) -> tuple[Any, str | None]:
    """(the library with its prototypes set, None) or (None, why not with the fix). Cached."""
    global _loaded
    if _loaded is not None and not force:
        return _loaded
    _loaded = _load(candidates())
    return _loaded


def _load(paths: list[str]) -> tuple[Any, str | None]:
    if not paths:
        suffixes = ", ".join(importlib.machinery.EXTENSION_SUFFIXES[:1])
        return None, ("the compiled ledger library is not built (faulthunt/ledger/_native" + suffixes
                      + "); reinstall with a C compiler present: pip install -e . (or pip install faulthunt)")
    problems = []
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
            lib.fl_abi.restype = ctypes.c_int
            if lib.fl_abi() != ABI:
                problems.append(f"{path}: built from other sources (ABI {lib.fl_abi()}, want {ABI}); "
                                "rebuild: pip install -e .")
                continue
            for name, (args, res) in _PROTOS.items():
                fn = getattr(lib, name)
                fn.argtypes = args
                fn.restype = res
            for name in ENTRY_POINTS:
                getattr(lib, name)
            lib.path = path  # type: ignore[attr-defined]  # the file, for the ledger's note
            return lib, None
        except (OSError, AttributeError) as exc:
            problems.append(f"{path}: {exc}")
    return None, "; ".join(problems)


def address(lib: Any, name: str) -> int:
    """The address of one of the library's C functions (to hand to CUPTI)."""
    return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value or 0


def default_layout(lib: Any, which: int) -> list[tuple[int, int]]:
    """The (offset, size) of each field as _native.c declares the CUDA 13 structure."""
    n = len(FIELDS[which])
    buf = (ctypes.c_int32 * (2 * n))()
    lib.fl_default_layout(which, buf, n)
    return [(buf[2 * i], buf[2 * i + 1]) for i in range(n)]


def layout_from_dtype(dtype: Any, which: int) -> tuple[list[tuple[int, int]], str | None]:
    """(offset, size) per field of ``FIELDS[which]`` from a cupti-python dtype, and a problem.

    A missing optional field gets size 0 (left out of records); a missing required one, or a
    field of another size than _native.c reads, is a problem (the route is then not used).
    """
    out: list[tuple[int, int]] = []
    for name, size in FIELDS[which]:
        dt, off = dtype, 0
        try:
            for part in name.split("."):
                sub, o = dt.fields[part][:2]
                dt, off = sub, off + o
        except (KeyError, TypeError):
            if name in REQUIRED[which]:
                return [], f"the dtype has no field {name}"
            out.append((0, 0))
            continue
        if dt.itemsize != size:
            return [], f"field {name} is {dt.itemsize} bytes, not {size}"
        out.append((off, size))
    return out, None


def check_layout(lib: Any, which: int, got: list[tuple[int, int]]) -> list[str]:
    """Fields whose dtype offset differs from _native.c's declaration (said in a note; the dtype's
    offsets are the ones used)."""
    want = default_layout(lib, which)
    return [f"{FIELDS[which][i][0]}: dtype offset {g[0]}, declared {w[0]}"
            for i, (g, w) in enumerate(zip(got, want)) if g[1] and g != w]


def set_layout(lib: Any, which: int, fields: list[tuple[int, int]]) -> None:
    flat = (ctypes.c_int32 * (2 * len(fields)))(*[v for pair in fields for v in pair])
    rc = lib.fl_layout(which, flat, len(fields))
    if rc:
        raise ValueError(f"layout {which} rejected at field {rc}")


def stats(lib: Any) -> dict[str, int]:
    buf = (ctypes.c_uint64 * len(STATS))()
    lib.fl_stats(buf, len(STATS))
    return dict(zip(STATS, buf))


def sink_info(lib: Any, sink: int) -> dict[str, int]:
    buf = (ctypes.c_uint64 * 4)()
    lib.fl_sink_info(sink, buf)
    return {"pos": buf[0], "records": buf[1], "dropped": buf[2], "mode": ctypes.c_int64(buf[3]).value}
