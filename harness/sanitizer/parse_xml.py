"""Parse compute-sanitizer ``--xml --save`` files into records. Pure: text in, records out.

The schema is pinned on real files from the H200 (compute-sanitizer 2025.3.1,
``tests/data/h200/xml_*.xml``)::

    <ComputeSanitizerOutput>
      <record>
        <kind>Precise</kind> <level>Error</level>
        <who><threadIdx><x>232</x><y>0</y><z>0</z></threadIdx><blockIdx>...</blockIdx></who>
        <what><text>Invalid __global__ write of size 4 bytes is out of bounds</text><space>__global__</space>
              <size>4</size><direction>write</direction><error>out of bounds</error>
              <address>0x7ff930801fa0</address></what>
        <where><func>max_reduce_off_by_one</func><path>/.../faults.cu</path><line>18</line><pc>0x120</pc></where>
        <hostStack><saveLocation>kernel launch time</saveLocation>
          <frame><func>cuLaunchKernel</func><pc>0x39fb94</pc><module>/.../libcuda.so.1</module></frame>
          ... innermost first; Python frames carry <path>/<line> instead of <pc>/<module> ...
        </hostStack>
      </record>

Kinds seen there: ``Precise`` (memcheck, stream-ordered races too), ``Api``, ``Leak``,
``Initcheck``, ``Synccheck``, ``Analysis`` (racecheck: ``<source>``/``<destination>`` with
``<direction>``, ``<where>`` and a ``<count>`` of hazards). Other kind names come from the
binary's strings (``Hazard``, ``UnusedMemory``, ``InitcheckApiError``, ...) and are read with the
same generic rules. Records are streamed out of the document (:class:`XmlParser` takes it in pieces
and forgets each record once it is handed on), so a file cut off by a killed run still gives every
record that was complete; junk gives none; nothing here raises, lone surrogates and absurd
numbers included.

The merged ``sanitizer/sanitizer.xml`` that ``faulthunt sanitize`` writes wraps each test's
document in ``<test nodeid=... tool=...>``; records found inside one take that tool.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator
from typing import Any, cast

from faulthunt.records.sanitizer import (
    API_ERROR, GUARDRAIL, HARDWARE_EXCEPTION, HOST_API_ACCESS, LEAK, MALLOC_FREE, MEMORY_ACCESS,
    RACE, SYNC_ERROR, UNINITIALIZED_READ, UNUSED_MEMORY, Frame, SanitizerRecord,
)
from faulthunt.sanitizer.frames import MAX_DIGITS, MAX_HEX_DIGITS

#: deeper nesting than any sanitizer file has (about 6) ends the parse: memory stays bounded
MAX_DEPTH = 1000

#: <kind> -> (record kind, tool); None skips informational records (launch dumps, sync traces)
_KINDS: dict[str, tuple[str, str | None] | None] = {
    "precise": (MEMORY_ACCESS, "memcheck"),
    "stream-ordered race": (MEMORY_ACCESS, "memcheck"),
    "api": (API_ERROR, "memcheck"),
    "leak": (LEAK, "memcheck"),
    "optix leak": (LEAK, "memcheck"),
    "deviceheap": (MALLOC_FREE, "memcheck"),
    "initcheck": (UNINITIALIZED_READ, "initcheck"),
    "initcheckapierror": (HOST_API_ACCESS, "initcheck"),
    "unusedmemory": (UNUSED_MEMORY, "initcheck"),
    "synccheck": (SYNC_ERROR, "synccheck"),
    "barrier": (SYNC_ERROR, "synccheck"),
    "analysis": (RACE, "racecheck"),
    "hazard": (RACE, "racecheck"),
    "global hazard": (RACE, "racecheck"),
    "deadlock": (SYNC_ERROR, "racecheck"),
    "clusterentryexit": (MEMORY_ACCESS, "racecheck"),
    "tcgen05guardrail": (GUARDRAIL, "memcheck"),
    "fabricguardrail": (GUARDRAIL, "memcheck"),
    "stackoverflow": (HARDWARE_EXCEPTION, None),
    "imprecise": (HARDWARE_EXCEPTION, None),
    "hardware": (HARDWARE_EXCEPTION, None),
    "launchinfo": None,
    "synclog": None,
}


_SPACE = re.compile(r"__(?:global|shared|local|generic)__")


def _text(el: ET.Element | None, path: str) -> str | None:
    if el is None:
        return None
    found = el.find(path)
    if found is None or found.text is None:
        return None
    return found.text.strip() or None


def _int(text: str | None) -> int | None:
    """A decimal or ``0x`` hex number; None for anything else, or a number no sanitizer prints."""
    if text is None:
        return None
    text = text.replace(",", "").strip()
    hexa = text[:2].lower() == "0x"
    if len(text) > (MAX_HEX_DIGITS + 2 if hexa else MAX_DIGITS):
        return None
    try:
        return int(text, 16) if hexa else int(text)
    except ValueError:
        return None


def _dim(el: ET.Element | None) -> tuple[int, int, int] | None:
    if el is None:
        return None
    vals = [_int(_text(el, axis)) for axis in ("x", "y", "z")]
    if any(v is None for v in vals):
        return None
    return (vals[0], vals[1], vals[2])  # type: ignore[return-value]


def _frame(el: ET.Element) -> Frame:
    return Frame(func=_text(el, "func"), file=_text(el, "path") or _text(el, "file"),
                 line=_int(_text(el, "line")), module=_text(el, "module"), pc=_int(_text(el, "pc")))


def _where_str(el: ET.Element | None) -> str | None:
    if el is None:
        return None
    func, path, line = _text(el, "func"), _text(el, "path"), _text(el, "line")
    out = func or "?"
    if path:
        out += f" in {path}" + (f":{line}" if line else "")
    return out


def record_from_element(rec: ET.Element, index: int, tool: str | None = None) -> SanitizerRecord | None:
    """One ``<record>`` element as a record; None for informational records."""
    kind_text = (_text(rec, "kind") or "").strip()
    mapped = _KINDS.get(kind_text.lower(), (kind_text.lower() or "unknown", None))
    if mapped is None:
        return None
    kind, kind_tool = mapped
    what = rec.find("what")
    message = _text(what, "text") or kind_text or "record"
    if kind == UNINITIALIZED_READ and message.startswith("Unused"):
        kind = UNUSED_MEMORY
    who = rec.find("who")
    where = rec.find("where")
    fields: dict[str, Any] = {
        "kind": kind, "message": message, "index": index, "tool": tool or kind_tool,
        "severity": _text(rec, "level"),
        "thread": _dim(who.find("threadIdx")) if who is not None else None,
        "block": _dim(who.find("blockIdx")) if who is not None else None,
    }
    if what is not None:
        fields["space"] = _text(what, "space")
        fields["size"] = _int(_text(what, "size") or _text(what, "accessSize"))
        direction = _text(what, "direction")
        fields["access"] = direction.lower() if direction else None
        fields["address"] = _int(_text(what, "address") or _text(what, "accessAddress")
                                 or _text(what, "errorAddress"))
        fields["problem"] = _text(what, "error") if kind != API_ERROR else None
        if kind in (SYNC_ERROR, LEAK, UNUSED_MEMORY, MALLOC_FREE):
            fields["problem"] = _text(what, "type") or fields["problem"]
        if kind == API_ERROR:
            fields["api"] = _text(what, "api")
            fields["error"] = _text(what, "error")
            fields["error_code"] = _int(_text(what, "result"))
        if kind == RACE:
            src, dst = what.find("source"), what.find("destination")
            if src is not None:
                sdir = _text(src, "direction")
                fields["access"] = sdir.lower() if sdir else fields["access"]
                where = src.find("where") if src.find("where") is not None else where
            if dst is not None:
                ddir = _text(dst, "direction") or "?"
                fields["race_other"] = f"{ddir} access at {_where_str(dst.find('where'))}"
                fields["hazards"] = _int(_text(dst, "count"))
            fields["hazard"] = _text(what, "type") if kind_text.lower() != "analysis" else None
    if not fields.get("space"):
        m = _SPACE.search(message)
        fields["space"] = m.group(0) if m else None
    if where is not None:
        fields["function"] = _text(where, "func")
        fields["file"] = _text(where, "path") or _text(where, "file")
        fields["line"] = _int(_text(where, "line"))
        fields["pc"] = _int(_text(where, "pc"))
    device = tuple(_frame(f) for f in rec.findall("deviceStack/frame"))
    host_el = rec.find("hostStack")
    host = tuple(_frame(f) for f in host_el.findall("frame")) if host_el is not None else ()
    kernel = fields.get("function")
    for frame in reversed(device):
        if frame.func:
            kernel = frame.func
            break
    return SanitizerRecord(kernel=kernel, device_frames=device, host_frames=host,
                           host_stack_at=_text(host_el, "saveLocation"), **fields)


class XmlParser:
    """An XML document read in pieces; :meth:`records` yields each record once it is complete.

    After the records are exhausted, ``complete`` says whether the whole document parsed (False:
    cut off, junk, or nested deeper than MAX_DEPTH). Memory: the open elements and one record.
    """

    def __init__(self) -> None:
        self.complete = False
        self.count = 0

    def records(self, pieces: Iterable[str]) -> Iterator[SanitizerRecord]:
        parser: ET.XMLPullParser[ET.Element] = ET.XMLPullParser(events=("start", "end"))
        open_els: list[ET.Element] = []
        tools: list[str | None] = []
        depth_in_record = 0
        seen = False
        complete = True
        try:
            for piece in pieces:
                if not piece:
                    continue
                seen = seen or bool(piece.strip())
                if not piece.isascii():
                    # a lone surrogate (text decoded with errors="surrogateescape", or made up)
                    # cannot be handed to expat as UTF-8: it reads as "?"
                    piece = piece.encode("utf-8", "replace").decode("utf-8")
                parser.feed(piece)
                # only start and end events were asked for: each carries an Element
                for event, el in cast("Iterator[tuple[str, ET.Element]]", parser.read_events()):
                    if event == "start":
                        open_els.append(el)
                        if len(open_els) > MAX_DEPTH:
                            raise ET.ParseError("nested too deep")
                        if el.tag == "record":
                            depth_in_record += 1
                        elif el.tag == "test" and depth_in_record == 0:
                            tools.append(el.get("tool"))
                        continue
                    open_els.pop()
                    if el.tag == "record":
                        depth_in_record -= 1
                        if depth_in_record == 0:
                            rec = record_from_element(el, self.count, tools[-1] if tools else None)
                            self.count += 1
                            el.clear()
                            if open_els:
                                open_els[-1].remove(el)  # the document keeps no finished record
                            if rec is not None:
                                yield rec
                    elif el.tag == "test" and depth_in_record == 0 and tools:
                        tools.pop()
            parser.close()
        except ET.ParseError:
            complete = False
        self.complete = complete and seen


def _pieces(text: str, step: int = 1 << 16) -> Iterator[str]:
    for pos in range(0, len(text), step):
        yield text[pos:pos + step]


def iter_xml_records(pieces: Iterable[str]) -> Iterator[SanitizerRecord]:
    """The records of an XML document given in pieces, streamed (see :class:`XmlParser`)."""
    return XmlParser().records(pieces)


def parse_xml_stream(text: str) -> tuple[list[SanitizerRecord], bool]:
    """Records of an XML document and whether the whole document parsed (False: cut off or junk)."""
    parser = XmlParser()
    # fed in pieces so a cut-off file still yields the records before the cut
    records = list(parser.records(_pieces(text)))
    return records, parser.complete


def parse_xml(text: str) -> list[SanitizerRecord]:
    """The error records of a compute-sanitizer XML file, in file order. Never raises on any ``str``."""
    return parse_xml_stream(text)[0]


def looks_like_xml(text: str) -> bool:
    head = text.lstrip("\ufeff \t\r\n")[:512]
    return head.startswith(("<?xml", "<FaulthuntSanitizer")) or "<ComputeSanitizerOutput" in head
