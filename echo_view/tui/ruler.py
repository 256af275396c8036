"""The time ruler above the timeline: tick marks at 1-2-5 steps with labels in a unit that fits
the zoom."""

from __future__ import annotations

import math
from collections.abc import Sequence

from rich.text import Text
from textual.widget import Widget

from echo_view.tui.palette import MATCH_MARK, Palette
from echo_view.tui.raster import DEFAULT_PALETTE, Window

MARK_GLYPH = "◆"
_UNITS = ((1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "µs"), (1, "ns"))


def nice_step(ns_per_cell: float, min_cells: int = 12) -> float:
    """The smallest 1, 2 or 5 x 10^k ns step that is at least ``min_cells`` cells wide."""
    target = max(ns_per_cell * min_cells, 1e-3)
    exp = math.floor(math.log10(target))
    for base in (1, 2, 5, 10):
        step = base * 10.0**exp
        if step >= target:
            return step
    return 10.0 ** (exp + 1)


def format_tick(t_ns: float, step_ns: float) -> str:
    """``t_ns`` in the largest unit that needs at most one decimal for the step."""
    for scale, unit in _UNITS:
        if step_ns >= scale / 10 or scale == 1:
            decimals = max(0, math.ceil(-math.log10(step_ns / scale) - 1e-9))
            return f"{t_ns / scale:.{decimals}f}{unit}"
    return f"{t_ns:.0f}ns"  # pragma: no cover - the loop always returns


def ruler_text(
    window: Window,
    label_width: int,
    origin_label: str = "",
    palette: Palette = DEFAULT_PALETTE,
    marks: Sequence[float] = (),
) -> Text:
    """One line: the origin label in the label column, then ``╵label`` ticks across the cells.
    A label that would run past the right edge is written before its tick (``300ms╵``);
    bookmarks at times ``marks`` show as ``◆``."""
    step = nice_step(window.ns_per_cell)
    # Long labels (a trace clock in seconds since the epoch) need wider steps to stay apart.
    widest = max(len(format_tick(t, step)) for t in (window.t0, window.t1)) + 2
    if widest > 12:
        step = nice_step(window.ns_per_cell, widest)
    chars = [" "] * window.width
    ticks: list[tuple[int, int]] = []
    taken = 0  # cells up to here hold the previous label
    k = math.ceil(window.t0 / step)
    while True:
        cell = round((k * step - window.t0) / window.ns_per_cell)
        if cell >= window.width:
            break
        if cell >= 0:
            tick = format_tick(k * step, step)
            if cell + 1 + len(tick) <= window.width:
                chars[cell : cell + 1 + len(tick)] = "╵" + tick
                ticks.append((cell + 1, cell + 1 + len(tick)))
                taken = cell + 1 + len(tick)
            elif cell - len(tick) > taken:
                chars[cell - len(tick) : cell + 1] = tick + "╵"
                ticks.append((cell - len(tick), cell))
            else:
                chars[cell] = "╵"
        k += 1
    cells = [math.floor((t - window.t0) / window.ns_per_cell) for t in marks]
    cells = [c for c in cells if 0 <= c < window.width]
    # A mark on a tick's label clears the label ("0.0ms" read "0.0◆s"); the tick stays.
    hit = [(a, b) for a, b in ticks if any(a <= c < b for c in cells)]
    for a, b in hit:
        chars[a:b] = " " * (b - a)
    ticks = [t for t in ticks if t not in hit]
    for c in cells:
        chars[c] = MARK_GLYPH
    head = origin_label[: label_width - 1].ljust(label_width - 1) + "│"
    text = Text(head + "".join(chars), style=palette.muted)
    for a, b in ticks:
        text.stylize(palette.tick, len(head) + a, len(head) + b)
    for c in cells:
        text.stylize(palette.styles[MATCH_MARK], len(head) + c, len(head) + c + 1)
    return text


class TimeRuler(Widget):
    """A one-line ruler kept in step with a timeline's window."""

    DEFAULT_CSS = """
    TimeRuler { height: 1; background: $panel; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.window: Window | None = None
        self.label_width = 12
        self.origin_label = ""
        self.palette = DEFAULT_PALETTE
        self.marks: list[float] = []

    def show(
        self,
        window: Window,
        label_width: int,
        origin_label: str,
        palette: Palette,
        marks: Sequence[float] = (),
    ) -> None:
        """Draw ``window`` (called when the timeline's view changes)."""
        self.window, self.label_width, self.origin_label = window, label_width, origin_label
        self.palette, self.marks = palette, list(marks)
        self.refresh()

    def render(self) -> Text:
        if self.window is None:
            return Text("")
        return ruler_text(
            self.window, self.label_width, self.origin_label, self.palette, self.marks
        )
