"""Data shown as text, escaped for each medium: Markdown, HTML, the terminal, GitHub commands.

Test ids, paths, kernel names and log text are data: ``test_p[x/y]``, ``[bold]``, ``a|b``,
``<script>`` or a backtick must come out as those exact characters, never as a link, a table
column, markup or a tag. One function per medium, all pure.
"""

from __future__ import annotations

import re
from typing import Any

# Markdown (CommonMark + GitHub's tables): characters that could start markup inside a line.
# `[`/`]` are left alone (no reference definition can come from a table cell, which never starts
# a line), except `](` and `][`, which would close a link. `_` is escaped only at a word
# boundary: intraword underscores (test_planted) never make emphasis.
_MD_PUNCT = re.compile(r"[\\`*~|]|\](?=[(\[])|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


_NAMED = {"\t": "\\t", "\r": "\\r", "\n": "\\n"}
_ANY_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def visible(value: Any) -> str:
    """``value`` with every control character shown as its escape (``\\t``, ``\\r``, ``\\n``,
    ``\\x1b``): an id with a carriage return or a tab must not garble a terminal or vanish into
    whitespace (pytest leaves them raw when id escaping is turned off)."""
    return _ANY_CONTROL.sub(lambda m: _NAMED.get(m.group(0), f"\\x{ord(m.group(0)):02x}"),
                            str(value))


_LINE_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def visible_lines(value: Any) -> str:
    """``value`` with its line breaks and tabs kept (a stack, a log) and every other control
    character shown as its escape, as :func:`visible` shows it (``\x1b``, ``\x07``, ``\r``)."""
    s = str(value).replace("\r\n", "\n")
    return _LINE_CONTROL.sub(lambda m: _NAMED.get(m.group(0), f"\\x{ord(m.group(0)):02x}"), s)


def md_text(value: Any, *, newlines: str = "escape") -> str:
    """``value`` as literal Markdown text on one line (a table cell, a heading, a list item).

    ``newlines="escape"`` shows a newline as ``\\n`` (ids: the exact characters stay visible);
    ``"space"`` joins lines (messages). ``<``, ``>`` and ``&`` become entities, so the text never
    carries a raw tag (``<script>`` from an id renders as the text ``<script>``).
    """
    s = str(value)
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    s = _MD_PUNCT.sub(lambda m: "\\" + m.group(0), s)
    if newlines == "space":
        s = s.replace("\r\n", " ").replace("\n", " ").replace("\r", " ")
    else:
        s = s.replace("\r", "\\\\r").replace("\n", "\\\\n").replace("\t", "\\\\t")
    return _CONTROL.sub(lambda m: f"\\\\x{ord(m.group(0)):02x}", s)


_CODE_SPAN = re.compile(r"(`+)(.+?)\1")


def md_note(value: Any) -> str:
    """A sentence faulthunt wrote, as Markdown: its `code` spans stay code spans (a command to
    copy), everything else is data-escaped as by :func:`md_text`. Unpaired backticks: all text."""
    s = str(value)
    out: list[str] = []
    at = 0
    for m in _CODE_SPAN.finditer(s):
        out.append(md_text(s[at:m.start()], newlines="space"))
        out.append(md_code(m.group(2)))
        at = m.end()
    rest = s[at:]
    if "`" in rest:  # an unpaired backtick: nothing of this sentence is trusted as markup
        return md_text(s, newlines="space")
    out.append(md_text(rest, newlines="space"))
    return "".join(out)


def md_cell(value: Any, *, newlines: str = "escape") -> str:
    """A table cell: ``-`` for nothing, else :func:`md_text`."""
    if value is None or value == "":
        return "-"
    return md_text(value, newlines=newlines)


def md_code(value: Any) -> str:
    """An inline code span holding ``value`` exactly (a fence longer than any backtick run in it).

    For kernel names and source locations (``void k<int>(float*)`` reads best as code). A ``|``
    is still escaped: GitHub splits table cells on it even inside code.
    """
    s = re.sub(r"[\r\n]+", " ", str(value)).replace("|", "\\|")
    longest = max((len(r) for r in re.findall(r"`+", s)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if s.startswith("`") or s.endswith("`") else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def md_fence(text: str, info: str = "") -> list[str]:
    """A fenced code block holding ``text`` exactly: the fence outlasts any backtick run in it."""
    longest = max((len(r) for r in re.findall(r"`{3,}", text)), default=2)
    fence = "`" * (longest + 1)
    return [fence + info, text, fence]


def rich_text(value: Any) -> str:
    """``value`` for a rich console that reads markup: ``[bold]`` stays the text ``[bold]``."""
    from rich.markup import escape

    return escape(str(value))
