"""The findings renderers, kept at their old import path (``faulthunt sanitize parse`` uses it).

They live in :mod:`faulthunt.report.sanitize` with every other renderer.
"""

from faulthunt.report.sanitize import (HEADERS, print_table, render_headline, render_summary,
                                       render_table, table_rows)

__all__ = ["HEADERS", "print_table", "render_headline", "render_summary", "render_table", "table_rows"]
