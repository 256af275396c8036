"""Long rich tables, drawn fast.

``rich`` lays out every cell of a table as a wrapped, justified text: about half a millisecond a
row of nine cells, 9 s for the per-rank table of a 16,384-rank job (docs/performance.md). When
every row of a long table would come out on one line as its cells, left or right justified in
columns as wide as their widest cell, :func:`print_rows` lets ``rich`` draw the table's frame
(title, header, rule, bottom) and writes the rows itself. Whether that holds is not assumed: the
frame is drawn with the rows that set each column's width, and the direct formatting is used
only when it gives those rows exactly as ``rich`` drew them (styles and colours included);
otherwise, and for short tables, ``rich`` draws everything.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Sequence

from rich.cells import cell_len
from rich.console import Console
from rich.padding import Padding
from rich.table import Table

#: Tables up to this many rows are drawn by ``rich`` alone (the check costs two small tables).
FAST_ROWS = 64
#: What ``rich`` would read as markup (``[``), an escape (``\\``), an emoji code (``:``) or a
#: control character: a cell holding one is drawn by ``rich``.
_NOT_PLAIN = re.compile(r"[\[\]\\:\x00-\x1f\x7f-\x9f]")


def print_rows(console: Console, table: Table, rows: Sequence[Sequence[str]]) -> None:
    """Print ``table`` (columns set, no rows yet) with ``rows`` of plain cells added, exactly
    as ``console.print`` would after ``table.add_row(*row)`` for each row."""
    text = _direct(console, table, rows) if len(rows) > FAST_ROWS else None
    if text is not None:
        console.file.write(text)
        console.file.flush()
        return
    for row in rows:
        table.add_row(*row)
    console.print(table)


def _direct(console: Console, table: Table, rows: Sequence[Sequence[str]]) -> str | None:
    """The table's text with its rows formatted directly, or None where that could differ from
    what ``rich`` draws."""
    columns = table.columns
    if table.rows or any(len(r) != len(columns) for r in rows):
        return None
    top, right, bottom, left = Padding.unpack(table.padding)
    heads = [c.header for c in columns]
    box = table.box
    if top or bottom or box is None or table.row_styles or table.show_lines or table.leading:
        return None
    if not all(isinstance(h, str) for h in heads) or table.show_footer:
        return None
    if any(c.justify not in ("left", "right") for c in columns):
        return None
    cells = [cell for row in rows for cell in row]
    if _NOT_PLAIN.search("".join(cells)) or any(c != c.strip() for c in cells):
        return None
    widths = [cell_len(str(h)) for h in heads]
    widest = [0] * len(columns)  # the row holding each column's widest cell
    for i, row in enumerate(rows):
        for j, cell in enumerate(row):
            n = cell_len(cell)
            if n > widths[j]:
                widths[j], widest[j] = n, i
    last = len(columns) - 1
    pads = [
        (
            " " * (left if j or table.pad_edge else 0),
            " " * (right if j < last or table.pad_edge else 0),
        )
        for j in range(len(columns))
    ]
    ends = (box.mid_left, box.mid_right) if table.show_edge else ("", "")

    def line(row: Sequence[str]) -> str:
        parts = []
        for j, cell in enumerate(row):
            gap = " " * (widths[j] - cell_len(cell))
            body = gap + cell if columns[j].justify == "right" else cell + gap
            parts.append(pads[j][0] + body + pads[j][1])
        return ends[0] + box.mid_vertical.join(parts) + ends[1] + "\n"

    # The frame without rows ends with the bottom line; the rows go just before it.
    frame = _captured(console, _with_widths(table, widths), [])
    if not frame.endswith("\n"):
        return None
    start, _, end = frame[:-1].rpartition("\n")
    start, end = start + "\n", end + "\n"
    samples = sorted({0, *widest})
    drawn = _captured(console, _with_widths(table, widths), [rows[i] for i in samples])
    if drawn != start + "".join(line(rows[i]) for i in samples) + end:
        return None
    return start + "".join(map(line, rows)) + end


def _with_widths(table: Table, widths: list[int]) -> Table:
    """``table`` (every setting kept) without rows, each column at least ``widths[j]`` wide."""
    out = copy.copy(table)
    out.columns = [
        dataclasses.replace(c, min_width=w, _cells=[])
        for c, w in zip(table.columns, widths, strict=True)
    ]
    out.rows = []
    return out


def _captured(console: Console, table: Table, rows: list[Sequence[str]]) -> str:
    for row in rows:
        table.add_row(*row)
    with console.capture() as cap:
        console.print(table)
    return cap.get()
