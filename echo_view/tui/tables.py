"""A DataTable whose columns sort by the numbers behind the formatted cells: ``o`` cycles the
sort column, ``r`` reverses it, and a click on a header sorts by that column; the sorted
column's header carries ``▼`` (descending) or ``▲``."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

from rich.cells import cell_len, set_cell_size
from rich.text import Text
from textual.binding import Binding, BindingType
from textual.widgets import DataTable
from textual.widgets.data_table import RowKey

from echo_view.text import printable
from echo_view.units import format_duration

_UNITS = ((1e9, "s"), (1e6, "ms"), (1e3, "µs"))


def short_duration(ns: float) -> str:
    """Three significant digits and a unit (``14.5 ms``, ``948 µs``, ``19.0 µs``, ``7 ns``):
    narrow enough for nine columns at 80 characters."""
    a = abs(ns)
    for scale, unit in _UNITS:
        if a >= scale:
            v = ns / scale
            digits = 2 if abs(v) < 10 else 1 if abs(v) < 100 else 0
            return f"{v:.{digits}f} {unit}"
    if 0 < a < 0.995:  # a zoom finer than a nanosecond a cell ("0 ns" said nothing)
        return f"{ns:.2f} ns"
    return f"{round(ns)} ns"  # (an int: never "-0 ns")


def signed_duration(ns: int) -> str:
    """A time from the view's origin with its sign: ``+1.500 µs``, ``-980.000 µs``."""
    return ("-" if ns < 0 else "+") + format_duration(abs(ns))


def interval_texts(start: float, end: float) -> tuple[str, str]:
    """:func:`short_duration` of ``start`` and ``end``; where the interval is under 1% of
    their size, both in the unit of the larger with the decimals that resolve a tenth of it:
    ``108.08 ms`` … ``108.25 ms``, not ``108 ms`` … ``108 ms``."""
    span, big = abs(end - start), max(abs(start), abs(end))
    if span == 0 or span * 100 >= big:
        return short_duration(start), short_duration(end)
    scale, unit = next(((s, u) for s, u in _UNITS if big >= s), (1.0, "ns"))
    digits = min(9, max(1, math.ceil(-math.log10(span / scale)) + 1))
    return f"{start / scale:.{digits}f} {unit}", f"{end / scale:.{digits}f} {unit}"


class Cell(Text):
    """Display text that sorts by ``value``."""

    def __init__(self, text: str, value: Any, *, justify: str = "right", style: str = "") -> None:
        super().__init__(text, justify=justify, style=style)  # type: ignore[arg-type]
        self.value = value


def cut_cells(text: str, width: int) -> str:
    """``text`` in at most ``width`` terminal cells (a wide character takes two), cut with
    ``…`` when longer."""
    return text if cell_len(text) <= width else set_cell_size(text, width - 1) + "…"


def name_cell(name: str, width: int = 60, value: Any = None) -> Cell:
    """A left-aligned text cell without a leading ``void``, shortened to ``width`` terminal
    cells (:func:`cut_cells`); it sorts by ``value``, else by the name."""
    name = printable(name).removeprefix("void ")
    return Cell(cut_cells(name, width), name.lower() if value is None else value, justify="left")


def ns_cell(ns: int | float | None) -> Cell:
    """A duration cell (``-`` when unknown)."""
    if ns is None:
        return Cell("-", float("-inf"))
    return Cell(short_duration(ns), float(ns))


def num_cell(value: float | int | None, fmt: str = "{:,}", style: str = "") -> Cell:
    """A number cell (``-`` when unknown)."""
    if value is None:
        return Cell("-", float("-inf"))
    return Cell(fmt.format(value), float(value), style=style)


def delta_cell(ns: int | float) -> Cell:
    """A signed duration, red when B is slower and green when faster."""
    style = "#e06c75" if ns > 0 else "#98c379" if ns < 0 else ""
    sign = "+" if ns > 0 else "-" if ns < 0 else "±"
    return Cell(sign + short_duration(abs(ns)), float(ns), style=style)


def pct_cell(pct: float | None) -> Cell:
    if pct is None:
        return Cell("-", float("-inf"))
    style = "" if abs(pct) < 0.05 else "#e06c75" if pct > 0 else "#98c379"
    return Cell(f"{pct:+.1f}%", pct, style=style)


def _sort_key(value: Any) -> Any:
    return value.value if isinstance(value, Cell) else str(value)


class SortableTable(DataTable[Any]):
    """DataTable with numeric sorting of :class:`Cell` columns."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("o", "next_sort", "Sort column"),
        Binding("r", "reverse_sort", "Reverse"),
    ]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, zebra_stripes=True, cursor_type="row")
        self.sort_column = -1
        self.sort_reverse = True

    def fill(self, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[RowKey]:
        """Replace the table's content; the keys of the new rows, in order."""
        self.clear(columns=True)
        self.sort_column = -1
        for c in columns:
            # Two cells kept for the sort mark, so that marking a column moves nothing.
            self.add_column(Text(f"{c}  "), key=c)
        return self.add_rows(rows)

    def sort_by(self, column: int, reverse: bool) -> None:
        """Sort by column number ``column``."""
        keys = list(self.columns)
        if not keys:
            return
        self.sort_column = column % len(keys)
        self.sort_reverse = reverse
        self.sort(keys[self.sort_column], key=_sort_key, reverse=reverse)
        for i, key in enumerate(keys):
            mark = (" ▼" if reverse else " ▲") if i == self.sort_column else "  "
            self.columns[key].label = Text(f"{key.value}{mark}")
        self._clear_caches()
        self.refresh()

    def action_next_sort(self) -> None:
        self.sort_by(self.sort_column + 1, True)

    def action_reverse_sort(self) -> None:
        self.sort_by(max(self.sort_column, 0), not self.sort_reverse)

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        event.stop()
        same = event.column_index == self.sort_column
        self.sort_by(event.column_index, not self.sort_reverse if same else True)
