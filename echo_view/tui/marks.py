"""Bookmarks: named points in time (at an event or at the view's centre), listed with the time
between them; a pair of marks is a range the view can fit."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Label

from echo_view.text import printable
from echo_view.tui.timeline import Selection
from echo_view.units import format_duration


@dataclass(frozen=True, slots=True)
class Mark:
    """A bookmark: ``t`` on the view clock, and the event it was set on (if any)."""

    name: str
    t: float
    selection: Selection | None = None


@dataclass(frozen=True, slots=True)
class MarkAction:
    """What the marks list asks for: jump to mark ``a``, or fit the range from ``a`` to ``b``."""

    a: int
    b: int | None = None


def mark_rows(marks: list[Mark], anchor: int | None) -> list[tuple[str, ...]]:
    """Per mark (in time order): number, name, time, time since the previous mark, and time
    from the anchor mark (the start of a range)."""
    rows: list[tuple[str, ...]] = []
    for i, m in enumerate(marks):
        prev = format_duration(m.t - marks[i - 1].t) if i else ""
        since = "" if anchor is None else format_duration(m.t - marks[anchor].t)
        star = "★" if i == anchor else ""
        rows.append((f"{star}{i + 1}", printable(m.name), format_duration(m.t), prev, since))
    return rows


class MarksScreen(ModalScreen[MarkAction | None]):
    """The bookmarks: Enter jumps to one; space makes one the start of a range (the last column
    then gives the time from it), ``f`` fits the view to the range; ``d`` deletes a mark."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Close the bookmarks"),
        Binding("enter", "jump", "Jump to the bookmark", priority=True),
        Binding("space", "anchor", "Start a range at the bookmark"),
        Binding("f", "fit", "Fit the range from the ★ bookmark to this one"),
        Binding("d", "delete", "Delete the bookmark"),
    ]
    DEFAULT_CSS = """
    MarksScreen { align: center middle; }
    MarksScreen > Vertical {
        width: 90%; max-width: 100; height: auto; max-height: 80%; border: round $primary;
        background: $surface;
    }
    MarksScreen Label { width: 100%; padding: 0 1; color: $text-muted; }
    MarksScreen DataTable { height: auto; max-height: 20; }
    """

    def __init__(self, marks: list[Mark]) -> None:
        super().__init__()
        self.marks = marks
        self.range_start: int | None = None

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(
                "Bookmarks · enter: jump · space: start a range · f: fit the range · d: delete"
            )
            yield DataTable[str](cursor_type="row", zebra_stripes=True)

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for col in ("#", "name", "time", "since previous", "from ★"):
            table.add_column(Text(col), key=col)
        self._fill()
        table.focus()

    def _fill(self) -> None:
        table = self.query_one(DataTable)
        row = table.cursor_row
        table.clear()
        for r in mark_rows(self.marks, self.range_start):
            table.add_row(*(Text(c) for c in r))
        if self.marks:
            table.move_cursor(row=min(max(row, 0), len(self.marks) - 1))

    def action_jump(self) -> None:
        if self.marks:
            self.dismiss(MarkAction(self.query_one(DataTable).cursor_row))

    def action_anchor(self) -> None:
        row = self.query_one(DataTable).cursor_row
        self.range_start = None if self.range_start == row else row
        self._fill()

    def action_fit(self) -> None:
        row = self.query_one(DataTable).cursor_row
        if self.range_start is None or self.range_start == row:
            self.notify("space on one bookmark, then f on another", severity="warning")
            return
        self.dismiss(MarkAction(self.range_start, row))

    def action_delete(self) -> None:
        if not self.marks:
            return
        row = self.query_one(DataTable).cursor_row
        del self.marks[row]
        start = self.range_start
        if start is not None:
            self.range_start = None if start == row else start - (start > row)
        self._fill()

    def action_close(self) -> None:
        self.dismiss(None)
