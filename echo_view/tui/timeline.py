"""The timeline: a line-API widget with one terminal row per lane, grouped and collapsible per
rank, with keyboard zoom, pan, event stepping and a row cache.

View state (``t0``, ``ns_per_cell``, ``cursor``, ``selection``) is reactive; the widget tells the
rest of the app what happened only through its nested messages (:class:`TimelineView.Selected`,
:class:`TimelineView.ViewChanged`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar

import numpy as np
import numpy.typing as npt
from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding, BindingType
from textual.cache import LRUCache
from textual.filter import ANSIToTruecolor, LineFilter
from textual.geometry import Region, Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.theme import Theme

from echo_view.tui.index import Group, TimelineIndex
from echo_view.tui.palette import Palette, palette_for
from echo_view.tui.raster import DEFAULT_PALETTE, NAME_MODES, Window, display_name, render_row
from echo_view.tui.tracks import Track

ZOOM_STEP = 1.5
MIN_NS_PER_CELL = 0.05
#: The view clock's bound (2**62 ns, 146 years): every window edge and click time stays within
#: it, so that their int64 arithmetic cannot overflow.
_VIEW_LIMIT_NS = float(1 << 62)
#: The lane-name column: at least this wide, and by default at most a fifth of the terminal.
MIN_LABEL_WIDTH = 10
_REVERSE = Style(reverse=True)
#: Rows drawn per step of the idle-time prefetch: a key that arrives meanwhile waits for at most
#: one step (about 1 ms).
PREFETCH_ROWS = 4
#: The moves whose views are drawn ahead while the app is idle: zoom in, zoom out, pan left,
#: pan right (as ``w``, ``s``, ``a``, ``d`` do), the last move made first.
Move = tuple[str, float]
LIKELY_MOVES: tuple[Move, ...] = (
    ("zoom", 1 / ZOOM_STEP),
    ("zoom", ZOOM_STEP),
    ("pan", -0.25),
    ("pan", 0.25),
)


def default_label_width(longest: int, width: int) -> int:
    """The lane-name column for labels of ``longest`` characters on a ``width``-cell terminal:
    the labels plus the separator, within ``MIN_LABEL_WIDTH`` and a fifth of the width."""
    return max(MIN_LABEL_WIDTH, min(longest + 1, max(12, width // 5)))


@lru_cache(maxsize=4096)
def fit_label(label: str, width: int) -> str:
    """``label`` cut (``…`` marking the cut) or padded to ``width - 1`` terminal cells, then the
    ``│`` separator: ``width`` cells in all, whatever wide (CJK, emoji) or zero-width characters
    it holds. Cached: every row's label is fitted on each redraw, from few distinct labels."""
    if cell_len(label) > width - 1:  # cut: say so (widen the column with >)
        return set_cell_size(label, width - 2) + "…│"
    return set_cell_size(label, width - 1) + "│"


@dataclass(frozen=True, slots=True)
class Selection:
    """One event: trace ``trace`` of source ``source``, event row ``row``."""

    source: int
    trace: int
    row: int


@dataclass(frozen=True, slots=True)
class RowRef:
    """What one timeline row shows: a rank's header (its GPU activity) or one lane."""

    group: int
    track: Track | None
    header: bool
    depth: int = -1
    """For one row of a stacked lane: its nesting depth (-1: the whole lane)."""


#: A lane of one trace of one source: ``(source, trace, lane id)``.
LaneKey = tuple[int, int, int]


def _lane_of(ref: RowRef) -> LaneKey | None:
    """The lane a row shows (None for a rank header)."""
    t = ref.track
    return None if t is None or ref.header else (t.source, t.trace, t.lane)


class TimelineView(ScrollView, can_focus=True):
    """Lanes of every rank on one time axis."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("w,plus,equals_sign", "zoom_in", "Zoom in", key_display="w"),
        Binding("s,minus", "zoom_out", "Zoom out", key_display="s"),
        Binding("a,left", "pan(-0.25)", "Pan ←", key_display="a"),
        Binding("d,right", "pan(0.25)", "Pan →", key_display="d"),
        Binding("shift+left", "pan(-1)", "Page left", show=False),
        Binding("shift+right", "pan(1)", "Page right", show=False),
        Binding("up", "cursor(-1)", "Lane up", show=False),
        Binding("down", "cursor(1)", "Lane down", show=False),
        Binding("home", "cursor(-1000000)", "First lane", show=False),
        Binding("end", "cursor(1000000)", "Last lane", show=False),
        Binding("pageup", "cursor(-10)", "Lanes up", show=False),
        Binding("pagedown", "cursor(10)", "Lanes down", show=False),
        Binding("tab", "step_event(1)", "Next event on the lane", show=False),
        Binding("shift+tab", "step_event(-1)", "Previous event on the lane", show=False),
        Binding("f", "fit_selection", "Fit the selection (or the current step)", show=False),
        Binding("0", "reset", "Reset: fit the whole job", show=False),
        Binding("enter,space", "toggle_group", "Collapse/expand the rank", show=False),
        Binding("x", "toggle_all", "Collapse/expand all ranks", show=False),
        Binding("e", "stack", "Stack the lane's nested calls (one row per depth)", show=False),
        Binding("E", "stack_all", "Stack every lane with nested calls", show=False),
        Binding("left_curly_bracket", "depth_limit(-1)", "Fewer stacked rows", show=False),
        Binding("right_curly_bracket", "depth_limit(1)", "More stacked rows", show=False),
        Binding("grave_accent", "jump_back", "Back to the view before the last jump", show=False),
        Binding("m", "name_mode", "Names: short / full (demangled)", show=False),
        Binding("less_than_sign", "label_width(-2)", "Narrower lane-name column", show=False),
        Binding("greater_than_sign", "label_width(2)", "Wider lane-name column", show=False),
        Binding("left_square_bracket", "goto_step(-1)", "Previous step", show=False),
        Binding("right_square_bracket", "goto_step(1)", "Next step", show=False),
    ]

    DEFAULT_CSS = """
    TimelineView { overflow-x: hidden; overflow-y: auto; }
    """

    prefetch: ClassVar[bool] = True
    """Draw the likely next views while idle (off: every zoom or pan draws its rows cold)."""

    t0: reactive[float] = reactive(0.0, init=False)
    """View time (ns) at the left edge of the first cell."""
    ns_per_cell: reactive[float] = reactive(1000.0, init=False)
    """Nanoseconds one terminal cell covers (the zoom)."""
    cursor: reactive[int] = reactive(0, init=False)
    """The row the keyboard acts on."""
    selection: reactive[Selection | None] = reactive(None, init=False)
    """The selected event."""
    name_mode: reactive[str] = reactive(NAME_MODES[0], init=False)
    """How events are named (one of :data:`~echo_view.tui.raster.NAME_MODES`)."""

    class Selected(Message):
        """Posted when the selection changes; handled as ``on_timeline_view_selected``."""

        def __init__(self, timeline: TimelineView, selection: Selection | None) -> None:
            super().__init__()
            self.timeline = timeline
            self.selection = selection

    class ViewChanged(Message):
        """Posted when the visible time window, cursor or step changes
        (``on_timeline_view_view_changed``)."""

        def __init__(self, timeline: TimelineView) -> None:
            super().__init__()
            self.timeline = timeline

    class Restyled(Message):
        """Posted when the palette or the lane-name column changes (the ruler follows)."""

    def __init__(self, index: TimelineIndex, *, name: str | None = None, id: str | None = None):
        super().__init__(name=name, id=id)
        self.index = index
        self.rows: list[RowRef] = []
        self.steps: list[tuple[int, int, int]] = []
        self.step_index = -1
        self.matches: dict[int, npt.NDArray[np.int64]] = {}
        self._cache: LRUCache[tuple[object, ...], Strip] = LRUCache(2048)
        self._fitted = False
        self._width = 0
        self.initial_span: tuple[float, float] | None = None
        """What the first layout shows (default: everything)."""
        self.palette: Palette = DEFAULT_PALETTE
        self.label_extra = 0
        """Cells the user added to (or took from) the lane-name column with ``<`` / ``>``."""
        self._longest_label = 0
        self.stacked: set[LaneKey] = set()
        """Lanes shown one row per nesting depth, by (source, trace, lane)."""
        self.previous: tuple[float, float, int, Selection | None] | None = None
        """The view (t0, ns per cell, cursor, selection) before the last jump or fit."""
        self.depth_limit = 8
        """At most this many rows per stacked lane (deeper calls are not drawn)."""
        self._last_move: Move | None = None
        self._prefetch_generation = 0
        self.prefetched = False
        """Whether the views of :data:`LIKELY_MOVES` from the current view are all drawn."""
        self.rebuild_rows()

    # -- layout ---------------------------------------------------------------------------------

    @property
    def label_width(self) -> int:
        """Width of the lane-name column (with its separator)."""
        base = default_label_width(self._longest_label, self._width)
        return max(4, min(base + self.label_extra, max(4, self._width - 10)))

    @property
    def cells(self) -> int:
        return max(1, self._width - self.label_width)

    @property
    def window(self) -> Window:
        return Window(self.t0, self.ns_per_cell, self.cells)

    def rebuild_rows(self) -> None:
        """Recompute the row list after a collapse or a new index."""
        rows: list[RowRef] = []
        for gi, g in enumerate(self.index.groups):
            rows.append(RowRef(gi, g.header, True))
            if gi in self.index.collapsed:
                continue
            for t in g.lanes:
                if (t.source, t.trace, t.lane) in self.stacked and t.max_depth > 0:
                    depths = range(min(t.max_depth + 1, self.depth_limit))
                    rows.extend(RowRef(gi, t.level(d), False, d) for d in depths)
                else:
                    rows.append(RowRef(gi, t, False))
        self.rows = rows
        self._longest_label = max((cell_len(self._label_text(r)) for r in rows), default=0)
        self.virtual_size = Size(self.size.width, len(rows))
        self.cursor = min(self.cursor, max(0, len(rows) - 1))
        self._forget_rows()
        self.refresh()

    def set_index(self, index: TimelineIndex) -> None:
        """Show another index (a new alignment in the diff screen)."""
        self.index = index
        self.selection = None
        self.rebuild_rows()

    def invalidate(self) -> None:
        """Forget every cached row (after a filter or search change) and redraw."""
        self._forget_rows()
        self.refresh()

    def on_mount(self) -> None:
        self._set_palette(palette_for(self.app.current_theme))
        self.app.theme_changed_signal.subscribe(self, self._theme_changed)

    def _theme_changed(self, theme: Theme) -> None:
        self._set_palette(palette_for(theme))

    def _set_palette(self, palette: Palette) -> None:
        self.palette = palette
        self._forget_rows()
        self.refresh()
        self.post_message(self.Restyled())

    def action_label_width(self, delta: int) -> None:
        before = self.label_width
        self.label_extra += delta
        if self.label_width == before:
            self.label_extra -= delta  # at a limit: keep the offset from drifting
            return
        self._forget_rows()
        self.refresh()
        self.post_message(self.Restyled())

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._forget_rows()

    def on_resize(self, event: events.Resize) -> None:
        # on_mount runs before layout, so the first real width is only known here.
        old_width, old_cells = self._width, self.cells
        self._width = self.size.width
        self.virtual_size = Size(self.size.width, len(self.rows))
        if not self._fitted and self.size.width > self.label_width:
            self.fit(*(self.initial_span or self.index.span))
            self._fitted = True
        elif self._fitted and old_width and self.cells != old_cells:
            # The same time span across the new width (as Perfetto keeps it): a view first
            # fitted in a 5-column terminal showed the whole trace in one cell after widening.
            self.ns_per_cell = max(self.ns_per_cell * old_cells / self.cells, MIN_NS_PER_CELL)
        self._forget_rows()
        if old_width and self._width != old_width:
            self.post_message(self.Restyled())  # the ruler and status line follow the width

    # -- drawing ---------------------------------------------------------------------------------

    def get_line_filters(self) -> Sequence[LineFilter]:
        filters = super().get_line_filters()
        if self.palette.truecolor:
            # Rows are drawn in RGB only, so Textual's ANSI-to-truecolor filter would copy every
            # segment unchanged, on every frame (a tenth of a zoom frame at 160x48).
            return [f for f in filters if not isinstance(f, ANSIToTruecolor)]
        return filters

    def render_line(self, y: int) -> Strip:
        row_no = int(self.scroll_offset.y) + y
        width = self._width
        if row_no >= len(self.rows):
            return Strip.blank(width)
        return self._row(row_no, self.t0, self.ns_per_cell)

    def _row(self, row_no: int, t0: float, ns_per_cell: float) -> Strip:
        """Row ``row_no`` of the view from ``t0`` at ``ns_per_cell``, from the cache if drawn."""
        ref = self.rows[row_no]
        sel = self._selected_position(ref.track)
        key = (
            row_no, id(ref.track), t0, ns_per_cell, self._width, sel,
            row_no == self.cursor and self.has_focus,
            ref.group in self.index.collapsed, self.name_mode, self.palette.name,
            self.label_width,
        )  # fmt: skip
        strip = self._cache.get(key)
        if strip is None:
            strip = self._render_row(ref, row_no, sel, Window(t0, ns_per_cell, self.cells))
            self._cache[key] = strip
        return strip

    def _prefetch(self, generation: int, views: list[tuple[float, float]], row: int) -> None:
        """Draw the next rows of ``views`` into the cache, a few per call, until the view
        changes (a new ``generation``): the next zoom or pan then only composes cached rows."""
        if generation != self._prefetch_generation or not self._width:
            return
        if not views:
            self.prefetched = True
            return
        top = int(self.scroll_offset.y)
        end = min(len(self.rows), top + self.size.height)
        stop = min(end, top + row + PREFETCH_ROWS)
        t0, ns_per_cell = views[0]
        for row_no in range(top + row, stop):
            self._row(row_no, t0, ns_per_cell)
        if stop >= end:
            views, stop = views[1:], top
        self.call_later(self._prefetch, generation, views, stop - top)

    def _likely_views(self) -> list[tuple[float, float]]:
        """``(t0, ns per cell)`` after each of :data:`LIKELY_MOVES`, the last move's first."""
        moves = sorted(LIKELY_MOVES, key=lambda m: m != self._last_move)
        views = [self._after(m) for m in moves]
        here = (self.t0, self.ns_per_cell)
        return [v for i, v in enumerate(views) if v != here and v not in views[:i]]

    def _after(self, move: Move) -> tuple[float, float]:
        """The view ``(t0, ns per cell)`` that ``move`` would show."""
        kind, amount = move
        if kind == "zoom":
            return self._zoomed(amount, self.focus_time())
        return self.t0 + amount * self.ns_per_cell * self.cells, self.ns_per_cell

    def _label_text(self, ref: RowRef) -> str:
        group = self.index.groups[ref.group]
        if ref.header:
            mark = "▸" if ref.group in self.index.collapsed else "▾"
            src = self.index.sources[group.source]
            prefix = f"{src.label} " if len(self.index.sources) > 1 else ""
            return f"{mark}{prefix}r{group.rank}"
        return f"  {ref.track.label}" if ref.track else ""

    def _render_row(self, ref: RowRef, row_no: int, sel: int | None, window: Window) -> Strip:
        group = self.index.groups[ref.group]
        src = self.index.sources[group.source]
        label = self._label_text(ref)
        label_style = self.palette.text if ref.header else self.palette.muted
        if row_no == self.cursor and self.has_focus:
            label_style += _REVERSE
        lw = self.label_width
        segs = [Segment(fit_label(label, lw), label_style)]
        track = ref.track
        if track is not None:
            trace = self.index.trace(track.source, track.trace)
            names, strings, mode = trace.events.name, trace.strings, self.name_mode

            def name_of(p: int) -> str:
                return display_name(strings[int(names[track.rows[p]])], mode)

            segs += render_row(
                track,
                window,
                src.shift_ns,
                name_of,
                selected=sel,
                match_starts=self._match_starts(track),
                palette=self.palette,
            )
        width = lw + window.width
        # One width query for the whole row instead of one per segment; rows are one cell per
        # character unless a name holds wide or zero-width characters, which the crop fixes.
        if cell_len("".join(text for text, _, _ in segs)) == width:
            return Strip(segs, width)
        return Strip(segs).crop_extend(0, width, None)

    def _match_starts(self, track: Track) -> npt.NDArray[np.int64] | None:
        if track.parent is None:
            return self.matches.get(id(track))
        parent = self.matches.get(id(track.parent))
        if parent is None:
            return None
        return parent[np.isin(parent, track.starts)]

    def _selected_position(self, track: Track | None) -> int | None:
        return self.position_of(self.selection, track)

    def position_of(self, sel: Selection | None, track: Track | None) -> int | None:
        """Position of event ``sel`` on ``track`` (None when the track does not hold it)."""
        if sel is None or track is None:
            return None
        if sel.source != track.source or sel.trace != track.trace:
            return None
        group = self.group_of(sel)
        if group is None:
            return None
        positions = group.header_pos if track.lane < 0 else group.lane_pos
        if sel.row >= len(positions):
            return None
        pos = int(positions[sel.row])
        if track.parent_pos is not None:  # one depth of a stacked lane
            pos = int(np.searchsorted(track.parent_pos, pos))
        if not 0 <= pos < len(track) or int(track.rows[pos]) != sel.row:
            return None
        return pos

    def group_of(self, sel: Selection) -> Group | None:
        return self.index.group_of(sel.source, sel.trace)

    # -- view changes ----------------------------------------------------------------------------

    def validate_ns_per_cell(self, value: float) -> float:
        # The window stays far inside int64 ns (raster bounds and clicks are int64).
        return min(value, _VIEW_LIMIT_NS / 2 / self.cells)

    def validate_t0(self, value: float) -> float:
        """``value`` kept where the window still shows the job's span, or touches it: panning
        had no end, and past 2**63 ns a click raised OverflowError."""
        width = self.cells * self.ns_per_cell
        index = getattr(self, "index", None)  # (not yet set while the widget is made)
        if index is None:
            return value
        lo, hi = (float(v) for v in index.span)
        low = max(lo - width, -_VIEW_LIMIT_NS)
        high = min(max(hi, low), _VIEW_LIMIT_NS - width)
        return float(min(max(value, low), high))

    def watch_t0(self) -> None:
        self._view_changed()

    def watch_ns_per_cell(self) -> None:
        self._view_changed()

    def watch_cursor(self) -> None:
        self.scroll_to_region(Region(0, self.cursor, 1, 1), animate=False, immediate=True)
        self._view_changed()

    def watch_name_mode(self) -> None:
        self._view_changed()

    def action_name_mode(self) -> None:
        modes = NAME_MODES
        self.name_mode = modes[(modes.index(self.name_mode) + 1) % len(modes)]
        self.notify(f"names: {self.name_mode}", timeout=2)

    def watch_selection(self, selection: Selection | None) -> None:
        self.refresh()
        self.post_message(self.Selected(self, selection))

    def _view_changed(self) -> None:
        self.refresh()
        self.post_message(self.ViewChanged(self))
        self._schedule_prefetch()

    def _forget_rows(self) -> None:
        """Drop every drawn row (the rows' look changed), and draw the likely views again."""
        self._cache.clear()
        self._schedule_prefetch()

    def _schedule_prefetch(self) -> None:
        """Draw the likely next views once this frame is out (dropped if the view moves again)."""
        self._prefetch_generation += 1
        self.prefetched = False
        if self._width and self.prefetch:
            self.call_after_refresh(self._start_prefetch, self._prefetch_generation)

    def _start_prefetch(self, generation: int) -> None:
        if generation == self._prefetch_generation:
            self._prefetch(generation, self._likely_views(), 0)

    def remember(self) -> None:
        """Keep the current view for :meth:`action_jump_back`."""
        self.previous = (self.t0, self.ns_per_cell, self.cursor, self.selection)

    def action_jump_back(self) -> None:
        if self.previous is None:
            self.notify("no earlier view to go back to", severity="warning")
            return
        t0, dt, cursor, sel = self.previous
        self.remember()  # so that ` again returns
        self.ns_per_cell, self.t0 = dt, t0
        self.cursor = min(cursor, max(0, len(self.rows) - 1))
        self.selection = sel

    def fit(self, start: float, end: float, margin: float = 0.02) -> None:
        """Show ``[start, end)`` across the full width (with a small margin); the view before
        is kept for ``` ` ```."""
        if self._fitted and self._width:
            self.remember()
        span = max(float(end - start), 1.0)
        pad = span * margin
        self.ns_per_cell = max((span + 2 * pad) / self.cells, MIN_NS_PER_CELL)
        self.t0 = start - pad

    def zoom(self, factor: float, focus: float | None = None) -> None:
        """Multiply the ns per cell by ``factor`` keeping ``focus`` (view time) in place."""
        self._last_move = ("zoom", factor)
        self.t0, self.ns_per_cell = self._zoomed(
            factor, self.focus_time() if focus is None else focus
        )

    def _zoomed(self, factor: float, focus: float) -> tuple[float, float]:
        """``(t0, ns per cell)`` after :meth:`zoom`."""
        lo, hi = self.index.span
        max_dt = max((hi - lo) * 4.0 / self.cells, MIN_NS_PER_CELL)
        new = min(max(self.ns_per_cell * factor, MIN_NS_PER_CELL), max_dt)
        return focus - (focus - self.t0) * (new / self.ns_per_cell), new

    def focus_time(self) -> float:
        """The selected event's middle when it is on screen, else the view's centre."""
        w = self.window
        span = self.selection_span()
        if span is not None:
            mid = (span[0] + span[1]) / 2
            if w.t0 <= mid <= w.t1:
                return mid
        return (w.t0 + w.t1) / 2

    def selection_span(self) -> tuple[int, int] | None:
        """The selected event's ``(start, end)`` on the view clock."""
        sel = self.selection
        if sel is None:
            return None
        job = self.index.sources[sel.source].job
        trace = job.traces[sel.trace]
        off = job.alignment.offsets_ns[sel.trace] - job.start_ns()
        off -= self.index.sources[sel.source].shift_ns
        start = int(trace.events.start_ns[sel.row]) + off
        return start, start + int(trace.events.dur_ns[sel.row])

    def action_zoom_in(self) -> None:
        self.zoom(1 / ZOOM_STEP)

    def action_zoom_out(self) -> None:
        self.zoom(ZOOM_STEP)

    def action_pan(self, pages: float) -> None:
        self._last_move = ("pan", pages)
        self.t0 = self._after(("pan", pages))[0]

    def action_reset(self) -> None:
        self.fit(*self.index.span)

    def action_fit_selection(self) -> None:
        span = self.selection_span()
        if span is not None:
            self.fit(span[0], span[1], margin=0.1)
            return
        if not 0 <= self.step_index < len(self.steps) and self.steps:
            self.step_index = self.step_at((self.window.t0 + self.window.t1) / 2)
        if 0 <= self.step_index < len(self.steps):
            self.fit(*self.steps[self.step_index][1:])
        else:
            self.action_reset()

    def step_at(self, t: float) -> int:
        """The step that holds view time ``t``, else the one whose middle is nearest."""
        for i, (_, start, end) in enumerate(self.steps):
            if start <= t < end:
                return i
        mids = [abs((s + e) / 2 - t) for _, s, e in self.steps]
        return mids.index(min(mids))

    def action_cursor(self, delta: int) -> None:
        self.cursor = min(max(self.cursor + delta, 0), max(0, len(self.rows) - 1))

    def action_toggle_group(self) -> None:
        if not self.rows:
            return
        gi = self.rows[self.cursor].group
        self.index.collapsed ^= {gi}
        self.rebuild_rows()
        self.cursor = next(i for i, r in enumerate(self.rows) if r.group == gi)

    def action_toggle_all(self) -> None:
        everything = set(range(len(self.index.groups)))
        gi = self.rows[self.cursor].group if self.rows else 0
        self.index.collapsed = set() if self.index.collapsed == everything else everything
        self.rebuild_rows()
        self.cursor = next((i for i, r in enumerate(self.rows) if r.group == gi), 0)

    def _lane_key(self) -> LaneKey | None:
        return _lane_of(self.rows[self.cursor]) if self.rows else None

    def _restack(self, key: LaneKey | None) -> None:
        """Rebuild the rows keeping the cursor on lane ``key`` (its first row)."""
        self.rebuild_rows()
        if key is not None:
            self.cursor = next((i for i, r in enumerate(self.rows) if _lane_of(r) == key), 0)

    def action_stack(self) -> None:
        key = self._lane_key()
        track = self.rows[self.cursor].track if key is not None else None
        if key is None or track is None:
            return
        if track.parent is None and track.max_depth == 0:
            self.notify("nothing nests on this lane", severity="warning")
            return
        self.stacked ^= {key}
        self._restack(key)

    def action_stack_all(self) -> None:
        nested = {
            (t.source, t.trace, t.lane)
            for g in self.index.groups for t in g.lanes if t.max_depth > 0
        }  # fmt: skip
        self.stacked = set() if self.stacked >= nested else nested
        self._restack(self._lane_key())

    def action_depth_limit(self, delta: int) -> None:
        self.depth_limit = min(max(self.depth_limit + delta, 1), 64)
        self.notify(f"stacked lanes show {self.depth_limit} levels", timeout=2)
        self._restack(self._lane_key())

    def action_goto_step(self, delta: int) -> None:
        if not self.steps:
            self.notify("no steps in this trace", severity="warning")
            return
        self.step_index = min(max(self.step_index + delta, 0), len(self.steps) - 1)
        _, start, end = self.steps[self.step_index]
        self.fit(start, end)

    def action_step_event(self, direction: int) -> None:
        if not self.rows:
            return
        track = self.rows[self.cursor].track
        if track is None or not len(track):
            return
        sel = self._selected_position(track)
        shift = self.index.sources[track.source].shift_ns
        if sel is not None:
            pos = sel + direction
        elif direction > 0:
            pos = int(np.searchsorted(track.starts, self.t0 + shift, side="left"))
        else:
            pos = int(np.searchsorted(track.starts, self.window.t1 + shift, side="left")) - 1
        found = track.next_shown(pos, direction)
        if found is None:
            self.app.bell()
            return
        self.select(Selection(track.source, track.trace, int(track.rows[found])), move_cursor=False)

    # -- selection -------------------------------------------------------------------------------

    def select(self, selection: Selection, *, move_cursor: bool = True) -> None:
        """Select an event, open its rank, put the cursor on its lane and bring it into view
        (the view before is kept for ``` ` ```)."""
        group = self.group_of(selection)
        if group is None:
            return
        self.remember()
        if move_cursor:
            trace = self.index.trace(selection.source, selection.trace)
            lane = int(trace.events.lane[selection.row])
            gi = self.index.groups.index(group)
            if gi in self.index.collapsed:
                self.index.collapsed.discard(gi)
                self.rebuild_rows()
            key = (group.source, group.trace, lane)
            for i, r in enumerate(self.rows):
                if _lane_of(r) == key and self.position_of(selection, r.track) is not None:
                    self.cursor = i
                    break
        self.selection = selection
        span = self.selection_span()
        if span is not None:
            w = self.window
            if span[1] < w.t0 or span[0] > w.t1:
                self.t0 = (span[0] + span[1]) / 2 - (w.t1 - w.t0) / 2

    # -- mouse -----------------------------------------------------------------------------------

    def on_click(self, event: events.Click) -> None:
        row_no = int(self.scroll_offset.y) + event.y
        if not 0 <= row_no < len(self.rows):
            return
        self.cursor = row_no
        ref = self.rows[row_no]
        if event.x < self.label_width:
            if ref.header:
                self.action_toggle_group()
            return
        if ref.track is None:
            return
        shift = self.index.sources[ref.track.source].shift_ns
        t = self.t0 + (event.x - self.label_width + 0.5) * self.ns_per_cell + shift
        t = min(max(t, -_VIEW_LIMIT_NS), _VIEW_LIMIT_NS)  # a source's shift may reach past
        pos = ref.track.at(int(t), slack=int(self.ns_per_cell))
        if pos is not None:
            tr = ref.track
            self.selection = Selection(tr.source, tr.trace, int(tr.rows[pos]))

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        if event.ctrl:
            event.prevent_default()
            self.zoom(1 / ZOOM_STEP, self._time_at(event.x))

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        if event.ctrl:
            event.prevent_default()
            self.zoom(ZOOM_STEP, self._time_at(event.x))

    def on_mouse_scroll_left(self, event: events.MouseScrollLeft) -> None:
        event.prevent_default()
        self.action_pan(-0.1)

    def on_mouse_scroll_right(self, event: events.MouseScrollRight) -> None:
        event.prevent_default()
        self.action_pan(0.1)

    def _time_at(self, x: int) -> float:
        return self.t0 + max(0, x - self.label_width) * self.ns_per_cell

    def on_focus(self) -> None:
        self._forget_rows()
        self.refresh()

    def on_blur(self) -> None:
        self._forget_rows()
        self.refresh()
