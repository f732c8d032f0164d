"""Writing event lines without msgspec: what a pytest process of a run needs to record.

Every xdist worker and the controller write records (:mod:`faulthunt.records.events`) and read
none on their usual path. Importing msgspec, the Struct classes and the run directory's readers
costs each of those processes about 40 M instructions; this module writes the same lines with
the standard library alone, byte for byte what ``msgspec.json.encode`` writes for the Struct
(``tests/test_record_lines.py`` compares the two over every event kind and odd values):

- fields in the Struct's order, the tag (``"event"``) first, every field written (defaults too);
- strings as msgspec writes them (UTF-8, the same escapes as ``json.dumps(ensure_ascii=False)``);
- floats with the shortest repr's digits, in msgspec's notation (``0.00001``, ``1e16``, ``1e-7``);
  NaN and infinities as ``null``;
- a line with a lone surrogate (an undecodable file name) as :class:`faulthunt.rundir.JsonlWriter`
  writes it: through ``json.dumps`` with ASCII escapes.

:data:`EVENT_FIELDS` is the field table of each event kind (and of the records nested in them);
a test pins it to the Structs, so a field added there and not here fails the suite.
:class:`LineWriter` is the append-only file of :class:`faulthunt.rundir.JsonlWriter` (one
``write(2)`` a line on an ``O_APPEND`` descriptor, a full disk counted and said), which builds on it.
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable
from typing import Any

_NO = object()  # a required field (no default)

# What a recording process writes in the run directory (faulthunt.rundir.Layout's names, here
# so that it need not import the run directory's readers; a test pins them equal)
EVENTS_DIR = "events"
CONTROLLER = "controller.jsonl"
LEDGER_DIR = "ledger"
HANGS_DIR = "hangs"
FAULTHANDLER_DIR = "faulthandler"

#: fields every event carries, first
_EVENT = (("worker", None), ("pid", None), ("t", None), ("t_mono", None))

#: tag -> ((field, default), ...) in the Struct's order; a list or dict default is written as
#: such (a new one each time, as the Struct's default factory makes it)
EVENT_FIELDS: dict[str, tuple[tuple[str, Any], ...]] = {
    # worker side
    "worker": _EVENT + (("ppid", None), ("cuda_visible_devices", None), ("recycle", None)),
    "start": _EVENT + (("nodeid", _NO), ("base_nodeid", None), ("device", None)),
    "end": _EVENT + (("nodeid", _NO), ("base_nodeid", None), ("outcome", "incomplete"),
                     ("duration", None), ("longrepr", None), ("message", None),
                     ("sticky_cuda_error", None), ("collateral_of", None), ("reruns", 0),
                     ("subtests", None), ("subtests_failed", [])),
    "hang": _EVENT + (("nodeid", _NO), ("base_nodeid", None), ("timeout", None),
                      ("faulthandler", None), ("faulthandler_error", None), ("pyspy", None),
                      ("pyspy_error", None), ("process_tree", [])),
    "recycle": _EVENT + (("before", None), ("poisoned_by", None), ("error", None)),
    "child": _EVENT + (("child_pid", _NO), ("parent_pid", None), ("name", None), ("how", None),
                       ("nodeid", None), ("base_nodeid", None)),
    "collected": _EVENT + (("items", 0), ("count", 1), ("repeated", {}), ("not_repeated", []),
                           ("child_polling", None)),
    # controller side
    "session_start": _EVENT + (("argv", []), ("xdist", None), ("random_seed", None),
                               ("plugins", {}), ("rootdir", None)),
    "worker_up": _EVENT + (("slot", None), ("device", None)),
    "collect_error": _EVENT + (("nodeid", _NO), ("message", None), ("longrepr", None)),
    "worker_down": _EVENT + (("error", None), ("exit_status", None), ("signal", None),
                             ("signal_name", None), ("device", None)),
    "crash": _EVENT + (("kind", "crashed"), ("nodeid", _NO), ("base_nodeid", None),
                       ("signal", None), ("signal_name", None), ("exit_status", None),
                       ("device", None), ("faulthandler", None), ("started", None),
                       ("previous", None)),
    "recycled": _EVENT + (("nodeid", None), ("poisoned_by", None), ("exit_status", None)),
    "recycle_lost": _EVENT + (("nodeid", None), ("reason", None)),
    "restart_limit": _EVENT + (("limit", None), ("down", None)),
    "session_finish": _EVENT + (("exitstatus", None), ("shouldstop", None), ("shouldfail", None),
                                ("testsfailed", None)),
}

#: the records nested in events (no tag): name -> fields, as :data:`EVENT_FIELDS`
NESTED_FIELDS: dict[str, tuple[tuple[str, Any], ...]] = {
    "StickyError": (("code", None), ("name", None), ("driver_name", None), ("sticky", None),
                    ("text", None), ("by", None)),
    "ProcessInfo": (("pid", None), ("ppid", None), ("name", None), ("status", None),
                    ("cmdline", None)),
    "SubtestFailure": (("label", ""), ("message", None)),
    "NotRepeated": (("nodeid", _NO), ("why", "")),
}

_string = json.encoder.encode_basestring  # C, ensure_ascii=False
_float_repr = float.__repr__


def _float(x: float) -> str:
    """msgspec's notation of a float: repr's digits; fixed from 1e-5 to 1e16, else ``1e16``,
    ``1.5e-7`` (no ``+``, no leading zero in the exponent); not finite: ``null``."""
    text = _float_repr(x)
    if "e" not in text and "n" not in text:  # fixed notation as both write it (not inf, nan)
        return text
    if "n" in text:
        return "null"
    mantissa, _, exp = text.partition("e")
    power = int(exp)
    if power != -5:  # repr goes fixed from 1e-4, msgspec from 1e-5
        return f"{mantissa}e{power}"
    sign = "-" if mantissa.startswith("-") else ""
    digits = mantissa.lstrip("-").replace(".", "")
    return f"{sign}0.0000{digits}"


def _value(v: Any) -> str:
    """One JSON value as msgspec writes it (the types records hold)."""
    kind = type(v)
    if kind is str:
        return _string(v)
    if v is None:
        return "null"
    if kind is bool:
        return "true" if v else "false"
    if kind is int:
        return int.__repr__(v)
    if kind is float:
        return _float(v)
    if isinstance(v, dict):
        return "{" + ",".join(f"{_string(str(k))}:{_value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_value(x) for x in v) + "]"
    if isinstance(v, str):  # subclasses (bool has none: its exact type is handled above)
        return _string(v)
    if isinstance(v, int):
        return int.__repr__(v)
    if isinstance(v, float):
        return _float(v)
    raise TypeError(f"a record cannot hold {kind.__name__}")


def _fields(spec: tuple[tuple[str, Any], ...], values: dict[str, Any], what: str) -> dict[str, Any]:
    """``values`` in ``spec``'s order with the defaults filled in; an unknown or missing
    required field is a TypeError, as the Struct's constructor says it."""
    out: dict[str, Any] = {}
    for name, default in spec:
        value = values.get(name, _NO)
        if value is _NO:
            if default is _NO:
                raise TypeError(f"{what}: missing required field {name!r}")
            value = default.copy() if isinstance(default, (list, dict)) else default
        out[name] = value
    if len(out) < len({**out, **values}):
        raise TypeError(f"{what}: unexpected field(s) {', '.join(sorted(set(values) - set(out)))}")
    return out


def nested(kind: str, **values: Any) -> dict[str, Any]:
    """A nested record (``StickyError``, ``ProcessInfo``, ``SubtestFailure``, ``NotRepeated``) as
    the dict its event line holds: fields in order, defaults filled in."""
    return _fields(NESTED_FIELDS[kind], values, kind)


def nested_from(kind: str, values: dict[str, Any]) -> dict[str, Any]:
    """:func:`nested` from a mapping that may hold more keys than the record (left out, as
    ``msgspec.convert`` leaves them out)."""
    return nested(kind, **{name: values[name] for name, _ in NESTED_FIELDS[kind] if name in values})


#: how each plain type is written, by exact type: C functions all but floats (``"null".format``
#: ignores its argument; a bool indexes the pair)
_BY_TYPE: dict[type, Callable[[Any], str]] = {
    str: _string, int: int.__repr__, float: _float, type(None): "null".format,
    bool: ("false", "true").__getitem__}

#: tag -> (the line with a ``%s`` for each field's value, the fields' names): the hot path
_TEMPLATES = {tag: ('{"event":' + _string(tag).replace("%", "%%") + "".join(
    f",{_string(name)}:%s" for name, _ in spec) + "}\n", tuple(name for name, _ in spec))
    for tag, spec in EVENT_FIELDS.items()}


def event_line(tag: str, values: dict[str, Any]) -> bytes:
    """The JSON line (with its newline) of the event ``tag`` with ``values``: what
    ``msgspec.json.encode`` of its Struct writes, and :class:`faulthunt.rundir.JsonlWriter`."""
    template, names = _TEMPLATES[tag]
    if len(values) != len(names):  # some fields left at their defaults (or an unknown one)
        values = _fields(EVENT_FIELDS[tag], values, tag)
    by_type = _BY_TYPE
    try:  # every test writes two lines: one C call a plain value, no loop of ours around it
        text = template % tuple([(by_type.get(type(v)) or _value)(v)
                                 for v in map(values.__getitem__, names)])
    except KeyError:  # as many values as fields, but not these: an unknown one
        values = _fields(EVENT_FIELDS[tag], values, tag)
        text = template % tuple([_value(values[name]) for name in names])
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (an undecodable file name): escaped, as JsonlWriter
        return (json.dumps({"event": tag, **_fields(EVENT_FIELDS[tag], values, tag)})
                + "\n").encode("utf-8")


class TestLines:
    """The ``start`` and ``end`` lines of every test in one process, its constant fields (worker,
    pid, device) written once: :func:`event_line`'s bytes with less Python a test. ``end`` is for
    the usual end (no failure text, sticky error, reruns or subtests); anything else goes through
    :func:`event_line`, as does a line with a lone surrogate."""

    __test__ = False  # not a pytest test class

    def __init__(self, worker: str | None, pid: int | None, device: str | None) -> None:
        self._fields = {"worker": worker, "pid": pid}
        self._device = device
        head = f'"worker":{_value(worker)},"pid":{_value(pid)}'.replace("%", "%%")
        self._start = ('{"event":"start",' + head + ',"t":%s,"t_mono":%s,"nodeid":%s,'
                       '"base_nodeid":%s,"device":' + _value(device).replace("%", "%%") + "}\n")
        self._end = ('{"event":"end",' + head + ',"t":%s,"t_mono":%s,"nodeid":%s,'
                     '"base_nodeid":%s,"outcome":%s,"duration":%s,"longrepr":null,'
                     '"message":null,"sticky_cuda_error":null,"collateral_of":null,"reruns":0,'
                     '"subtests":null,"subtests_failed":[]}\n')

    def start(self, t: float, t_mono: float, nodeid: str, base_nodeid: str) -> bytes:
        try:
            return (self._start % (_float(t), _float(t_mono), _string(nodeid),
                                   _string(base_nodeid))).encode("utf-8")
        except (UnicodeEncodeError, TypeError):  # a lone surrogate, or not a str: the long way
            return event_line("start", {**self._fields, "t": t, "t_mono": t_mono,
                                        "nodeid": nodeid, "base_nodeid": base_nodeid,
                                        "device": self._device})

    def end(self, t: float, t_mono: float, nodeid: str, base_nodeid: str, outcome: str,
            duration: float) -> bytes:
        try:
            return (self._end % (_float(t), _float(t_mono), _string(nodeid), _string(base_nodeid),
                                 _string(outcome), _float(duration))).encode("utf-8")
        except (UnicodeEncodeError, TypeError):
            return event_line("end", {**self._fields, "t": t, "t_mono": t_mono, "nodeid": nodeid,
                                      "base_nodeid": base_nodeid, "outcome": outcome,
                                      "duration": duration})


# --- the file ----------------------------------------------------------------------------------

#: errno values that mean "no room to write": a full disk, a quota, the file size limit
FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def disk_full_text(path: Any, exc: OSError) -> str:
    """``disk full at <path>: <why>``: what every writer says when there is no room."""
    why = exc.strerror or str(exc)
    if exc.errno == errno.EFBIG:
        why += " (the file size limit, ulimit -f)"
    return f"disk full at {path}: {why}"


def is_full(exc: BaseException) -> bool:
    """Whether ``exc`` is an OSError that means the filesystem (or the size limit) is full."""
    return isinstance(exc, OSError) and exc.errno in FULL_ERRNOS


def _write_error(path: Any, exc: OSError, fix: str) -> Exception:
    from faulthunt.rundir import _write_error as make  # the run directory's errors, when one is raised

    return make(path, exc, fix)


class LineWriter:
    """Append-only lines, each one ``write(2)`` of a whole line on an ``O_APPEND`` descriptor:
    a process that aborts natively or is SIGKILLed loses nothing it had written. ``fsync=True``
    also survives a machine crash, at a cost per line.

    No room to write (a full disk, ``ulimit -f``) raises :class:`faulthunt.rundir.DiskFullError`,
    unless ``on_full`` is given: then the writer goes on without the line, counts it in
    :attr:`dropped`, calls ``on_full("disk full at <path>: ...")`` once and tries the next line
    again. A line cut short by the full disk is ended before the next one, so the lines on both
    sides of it stay readable.
    """

    def __init__(self, path: Any, fsync: bool = False,
                 on_full: Callable[[str], None] | None = None) -> None:
        self.path = path
        self._fsync = fsync
        self._on_full = on_full
        self._said = False
        self._torn = False
        #: lines that could not be written (only with ``on_full``)
        self.dropped = 0
        self._fd = -1
        try:
            os.makedirs(os.path.dirname(os.fspath(path)) or ".", exist_ok=True)
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            if on_full is None or not is_full(exc):
                raise _write_error(path, exc, "make the run directory writable") from exc
            self._full(exc)

    def event(self, tag: str, **values: Any) -> None:
        """Write the event ``tag`` (:func:`event_line`)."""
        self.write_line(event_line(tag, values))

    def write_line(self, data: bytes) -> None:
        """Append ``data``, one whole line with its newline."""
        # The hot path of every worker (two lines a test): one write(2) and no more Python than
        # that; the rare cases (a full disk, a short write, fsync) go aside.
        if self._fd < 0 or self._torn:
            self._write_aside(data)
            return
        try:
            written = os.write(self._fd, data)
        except OSError as exc:
            self._failed(exc)
            return
        if written < len(data):
            self._write_aside(data[written:], torn=True)
        elif self._fsync:
            os.fsync(self._fd)

    def _full(self, exc: OSError) -> None:
        self.dropped += 1
        if not self._said and self._on_full is not None:
            self._said = True
            self._on_full(disk_full_text(self.path, exc) + "; records that do not fit are "
                          "dropped (counted) and the run goes on")

    def _write_aside(self, data: bytes, torn: bool = False) -> None:
        """The cases off the hot path: no descriptor, a line torn by a short write (the rest of
        it, or the next line after a newline that ends the torn one), fsync."""
        if self._fd < 0:
            if self._on_full is None:
                from faulthunt.rundir import DiskFullError

                raise DiskFullError(f"{self.path} is not open for writing")
            self.dropped += 1
            return
        if self._torn and not torn:
            data = b"\n" + data
        self._torn = True
        try:
            written = 0
            while written < len(data):  # a short write: the disk is filling up
                written += os.write(self._fd, data[written:])
            self._torn = False
        except OSError as exc:
            self._failed(exc)
            return
        if self._fsync:
            os.fsync(self._fd)

    def _failed(self, exc: OSError) -> None:
        if self._on_full is None or not is_full(exc):
            raise _write_error(self.path, exc, "free the disk") from exc
        self._full(exc)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> LineWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
