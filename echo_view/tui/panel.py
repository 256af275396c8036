"""The timeline panel: ruler, timeline, details, status line and the search box, with the keys
that act across them (search, n/N, kind filter, jump to partner or peer)."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import ClassVar

from textual.actions import SkipAction
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.content import Content
from textual.widget import Widget
from textual.widgets import Input

from echo_view.analysis.steps import steps_of
from echo_view.text import printable
from echo_view.tui.calltree import MIN_DURATIONS, CallTreeScreen
from echo_view.tui.details import DetailsPane
from echo_view.tui.index import TimelineIndex
from echo_view.tui.marks import Mark, MarkAction, MarksScreen
from echo_view.tui.raster import Window
from echo_view.tui.ruler import TimeRuler
from echo_view.tui.search import (
    SEARCH_LIMIT_S,
    KindFilterScreen,
    Matches,
    classes_present,
    search,
    shown_hits,
)
from echo_view.tui.tables import cut_cells, interval_texts, short_duration
from echo_view.tui.timeline import Selection, TimelineView
from echo_view.tui.tracks import class_label

Steps = list[tuple[int, int, int]]
#: Time axes ``t`` cycles through: from the job's first event, from the current step's start,
#: and the trace's own clock.
AXES = ("job", "step", "clock")
#: Cells the status line gives the lane's name.
STATUS_LABEL_CELLS = 32
AXIS_TEXT = {"job": "from the job start", "step": "from the step start", "clock": "trace clock"}


def view_steps(index: TimelineIndex, source: int = 0) -> Steps:
    """``(number, start, end)`` on the view clock of each step of ``source``, spanning all its
    ranks (CPU start to the later of CPU end and the end of the GPU work it launched)."""
    src = index.sources[source]
    job = src.job
    origin = job.start_ns() + src.shift_ns
    spans: dict[int, tuple[int, int]] = {}
    for tidx, trace in enumerate(job.traces):
        table = steps_of(trace)
        off = job.alignment.offsets_ns[tidx] - origin
        ends = table.last_end_ns()
        for n, s, e in zip(
            table.number.tolist(), table.start_ns.tolist(), ends.tolist(), strict=True
        ):
            lo, hi = spans.get(n, (s + off, e + off))
            spans[n] = (min(lo, s + off), max(hi, e + off))
    return sorted(((n, lo, hi) for n, (lo, hi) in spans.items()), key=lambda x: x[1])


class StatusLine(Widget):
    """One line of text; redrawn without a layout pass (it changes on every key).

    The text holds input strings (lane and kernel names, the typed query): it is shown as
    written, control characters escaped and never parsed as markup (``[/]`` would end the app,
    ``[@click=app.quit]`` would make a click quit it)."""

    DEFAULT_CSS = "StatusLine { height: 1; background: $panel; color: $text-muted; }"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.text = ""

    def show(self, text: str) -> None:
        text = printable(text)
        if text != self.text:
            self.text = text
            self.refresh()

    def render(self) -> Content:
        return Content(self.text)  # plain text: a str would be parsed as markup


class TimelinePanel(Vertical):
    """Everything around one :class:`TimelineView`."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("slash", "search", "Search"),
        Binding("n", "next_match(1)", "Next match", show=False),
        Binding("N", "next_match(-1)", "Previous match", show=False),
        Binding("k", "filter_kinds", "Filter by kind", show=False),
        Binding("i", "toggle_details", "Details pane", show=False),
        Binding("shift+down", "scroll_details(3)", "Scroll the details down", show=False),
        Binding("shift+up", "scroll_details(-3)", "Scroll the details up", show=False),
        Binding("p", "jump_partner", "Jump to launch/kernel partner", show=False),
        Binding("c", "jump_peer", "Jump to collective peer (next rank)", show=False),
        Binding("T", "call_tree", "Call tree of the lane in view", show=False),
        Binding("F", "hide_unmatched", "Hide events the search does not match", show=False),
        Binding("h", "min_duration(1)", "Hide events shorter than (cycles up)", show=False),
        Binding("H", "min_duration(-1)", "Hide events shorter than (cycles down)", show=False),
        Binding("M", "add_mark", "Bookmark the selection (or the view's centre)", show=False),
        Binding("apostrophe", "marks", "Bookmarks: jump, ranges, durations", show=False),
        Binding("t", "time_axis", "Time axis: from job start / step start / clock", show=False),
        Binding("escape", "clear", "Clear search/selection", show=False),
    ]
    DEFAULT_CSS = """
    TimelinePanel { height: 1fr; }
    TimelinePanel > TimelineView { height: 1fr; }
    TimelinePanel > Input { dock: bottom; display: none; }
    TimelinePanel > Input.-shown { display: block; }
    """

    def __init__(
        self,
        index: TimelineIndex,
        steps: Steps,
        *,
        initial_span: tuple[float, float] | None = None,
        autofocus: bool = True,
        id: str | None = None,
    ) -> None:
        super().__init__(id=id)
        self.autofocus = autofocus
        self.index = index
        self.steps = steps
        self.initial_span = initial_span
        self.matches: Matches | None = None
        self.match_label = ""
        """How the status line names the search (the query, or the kernel picked)."""
        self.match_at = -1
        self.shown_classes: frozenset[int] | None = None
        self.hide_unmatched = False
        """Show only the events the search matches."""
        self.min_dur = 0
        """Hide events shorter than this (ns)."""
        self.marks: list[Mark] = []
        """Bookmarks, in time order."""
        self._pending: Mark | None = None
        self.axis = AXES[0]
        """Where the ruler and status line count time from (one of :data:`AXES`)."""

    def compose(self) -> ComposeResult:
        yield TimeRuler()
        view = TimelineView(self.index)
        view.steps = self.steps
        view.initial_span = self.initial_span
        yield view
        yield DetailsPane()
        yield StatusLine(id="status")
        yield Input(placeholder="search names (regex; enter: find, esc: cancel)", id="search")
        yield Input(placeholder="bookmark name (enter: keep, esc: cancel)", id="mark-name")

    @property
    def timeline(self) -> TimelineView:
        return self.query_one(TimelineView)

    def on_mount(self) -> None:
        tl = self.timeline
        # Watchers run in the same cycle as the change, so the ruler and status line are
        # redrawn in the same frame as the rows (a message would arrive a frame later).
        for attr in ("t0", "ns_per_cell", "cursor"):
            self.watch(tl, attr, self._view_moved, init=False)
        if self.autofocus:
            tl.focus()

    def set_index(self, index: TimelineIndex, steps: Steps) -> None:
        """Show another index (a new alignment) keeping the zoom; bookmarks keep their place
        in their input (the event's, else A's), moved by its change of shift."""
        before = [src.shift_ns for src in self.index.sources]
        after = [src.shift_ns for src in index.sources]
        if len(before) == len(after) and before != after:
            moved = []
            for m in self.marks:
                s = m.selection.source if m.selection is not None else 0
                moved.append(replace(m, t=m.t + before[s] - after[s]))
            self.marks = sorted(moved, key=lambda m: m.t)
        self.index = index
        self.steps = steps
        tl = self.timeline
        tl.set_index(index)
        tl.steps = steps
        if self.matches is not None:
            self._run_search(self.matches.query, self.match_label)
        # The new index's tracks filter apart from the old one's: carry this panel's filter.
        self._apply_filter()

    # -- messages ---------------------------------------------------------------------------------

    def origin(self) -> tuple[float, str]:
        """The view time that the ruler and status line show as 0, and its name."""
        tl = self.timeline
        if self.axis == "step" and tl.steps:
            w = tl.window
            i = (
                tl.step_index
                if 0 <= tl.step_index < len(tl.steps)
                else tl.step_at((w.t0 + w.t1) / 2)
            )
            return float(tl.steps[i][1]), f"step {tl.steps[i][0]}"
        if self.axis == "clock":
            src = self.index.sources[0]
            return -float(src.job.start_ns() + src.shift_ns), "clock"
        return 0.0, "time"

    def _view_moved(self) -> None:
        tl = self.timeline
        origin, name = self.origin()
        w = tl.window
        shown = Window(w.t0 - origin, w.ns_per_cell, w.width)
        marks = [m.t - origin for m in self.marks]
        self.query_one(TimeRuler).show(shown, tl.label_width, name, tl.palette, marks)
        self._update_status()

    def action_time_axis(self) -> None:
        def usable(axis: str) -> bool:
            if axis == "step":
                return bool(self.timeline.steps)
            # Two inputs (the diff) are placed on one view clock, each trace clock its own:
            # one ruler cannot read both (B's rows were labelled with A's clock).
            return axis != "clock" or len(self.index.sources) == 1

        self.axis = AXES[(AXES.index(self.axis) + 1) % len(AXES)]
        while not usable(self.axis):
            self.axis = AXES[(AXES.index(self.axis) + 1) % len(AXES)]
        self.notify(f"time axis: {AXIS_TEXT[self.axis]}", timeout=2)
        self._view_moved()

    def on_timeline_view_restyled(self, message: TimelineView.Restyled) -> None:
        self._view_moved()

    def on_timeline_view_selected(self, message: TimelineView.Selected) -> None:
        sel = message.selection
        details = self.query_one(DetailsPane)
        if sel is None:
            details.show(None, 0, 0, 0)
        else:
            src = self.index.sources[sel.source]
            details.show(src.job, sel.trace, sel.row, src.job.start_ns() + src.shift_ns)
        self.match_at = self._match_of_selection()
        self._update_status()

    def _match_of_selection(self) -> int:
        """The search hit that is selected (Tab and clicks select too), else -1."""
        m, tl = self.matches, self.timeline
        span = tl.selection_span()
        if m is None or span is None:
            return -1
        if self._on_match_at():
            return self.match_at  # (n/N between hits at one instant keep their turn)
        same_time = m.at_time(span[0])
        return next((i for i in same_time if self._match_selection(i) == tl.selection), -1)

    def _update_status(self) -> None:
        tl = self.timeline
        origin, _ = self.origin()
        w = tl.window
        parts = []
        if tl.rows and 0 <= tl.cursor < len(tl.rows):
            ref = tl.rows[tl.cursor]
            g = self.index.groups[ref.group]
            if ref.track is not None and not ref.header:
                label = ref.track.label
            else:
                label = "gpu (all)" if g.header is not None else "(no GPU work)"
            src = f"{self.index.sources[g.source].label} " if len(self.index.sources) > 1 else ""
            # Cut: a long lane name pushed the view's bounds and the search off the line.
            parts.append(cut_cells(f"{src}r{g.rank} {label}", STATUS_LABEL_CELLS))
        start, end = interval_texts(w.t0 - origin, w.t1 - origin)
        parts.append(
            f"{start}…{end} ({short_duration(w.t1 - w.t0)}, {short_duration(w.ns_per_cell)}/cell)"
        )
        if 0 <= tl.step_index < len(self.steps):
            parts.append(f"step {self.steps[tl.step_index][0]}")
        if self.matches is not None:
            at = f"{self.match_at + 1}/" if self.match_at >= 0 else ""
            parts.append(f"/{self.match_label}: {at}{len(self.matches)}")
        if self.shown_classes is not None:
            shown = ",".join(class_label(c) for c in sorted(self.shown_classes))
            parts.append("kinds: " + (shown or "none"))
        if self.hide_unmatched:
            parts.append("only matches")
        if self.min_dur:
            parts.append(f"≥{short_duration(self.min_dur)}")
        self.query_one("#status", StatusLine).show(" │ ".join(parts))

    # -- search -----------------------------------------------------------------------------------

    def action_search(self) -> None:
        box = self.query_one("#search", Input)
        box.add_class("-shown")
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if event.input.id == "mark-name":
            self._keep_mark(event.value.strip())
            return
        box = self.query_one("#search", Input)
        box.remove_class("-shown")
        self.timeline.focus()
        if event.value.strip():
            self._run_search(event.value.strip())
            self.action_next_match(1)

    def find_exact(self, name: str) -> None:
        """Search for events named exactly ``name`` and select the first one."""
        self._run_search(f"^{re.escape(name)}$", label=printable(name)[:40])
        self.action_next_match(1)

    def _run_search(self, query: str, label: str | None = None) -> None:
        try:
            found = search(self.index, query)
        except TimeoutError:
            self.notify(
                f"the search for {query!r} took over {SEARCH_LIMIT_S:g} s and was stopped: "
                "a pattern such as (a|aa)+ tries every way to split a name; simplify it",
                severity="error",
                markup=False,
            )
            return
        self.matches = found
        self.match_label = label or query
        if self.hide_unmatched:
            self._apply_filter()
        self.match_at = -1
        tl = self.timeline
        tl.matches = self.matches.starts
        tl.invalidate()
        if not len(self.matches):
            # repr escapes control characters; markup=False keeps "[/]" from being parsed.
            self.notify(f"no event name matches {query!r}", severity="warning", markup=False)
        self._update_status()

    def action_next_match(self, direction: int) -> None:
        m = self.matches
        if m is not None and not len(m) and any(len(ids) for ids in m.names.values()):
            self.notify("the filter hides every match (k, h/H change it)", severity="warning")
            return
        if m is None or not len(m):
            self.notify("no search results: press / to search", severity="warning")
            return
        tl = self.timeline
        if self._on_match_at():
            # Step through the list: matches at one instant on several ranks all get a turn.
            i: int | None = (self.match_at + direction) % len(m)
        else:
            span = tl.selection_span()
            i = m.next_after(float(span[0]) if span is not None else tl.t0 - 1, direction)
        if i is None:
            return
        self.match_at = i
        tl.select(self._match_selection(i))
        self._update_status()

    def _on_match_at(self) -> bool:
        """Whether the selection is the search hit :attr:`match_at` points at."""
        m = self.matches
        return (
            m is not None
            and 0 <= self.match_at < len(m)
            and self.timeline.selection == self._match_selection(self.match_at)
        )

    def _match_selection(self, i: int) -> Selection:
        m = self.matches
        assert m is not None
        track = m.tracks[int(m.track_of[i])]
        return Selection(track.source, track.trace, int(track.rows[int(m.pos[i])]))

    def action_clear(self) -> None:
        for box in self.query(Input):
            if box.has_class("-shown"):
                box.remove_class("-shown")
                self._pending = None
                self.timeline.focus()
                return
        if self.matches is not None:
            self.matches = None
            self.timeline.matches = {}
            if self.hide_unmatched:
                self.hide_unmatched = False
                self._apply_filter()
            self.timeline.invalidate()
        elif self.timeline.selection is not None:
            self.timeline.selection = None
        else:
            # Nothing to clear: the key goes on to the screen (the diff screen's esc leaves it).
            raise SkipAction()
        self._update_status()

    # -- bookmarks --------------------------------------------------------------------------------

    def action_add_mark(self) -> None:
        tl = self.timeline
        span = tl.selection_span()
        w = tl.window
        t = float(span[0]) if span is not None else (w.t0 + w.t1) / 2
        self._pending = Mark(f"mark {len(self.marks) + 1}", t, tl.selection)
        box = self.query_one("#mark-name", Input)
        box.value = ""
        box.placeholder = f"bookmark name (enter: {self._pending.name!r}, esc: cancel)"
        box.add_class("-shown")
        box.focus()

    def _keep_mark(self, name: str) -> None:
        box = self.query_one("#mark-name", Input)
        box.remove_class("-shown")
        self.timeline.focus()
        if self._pending is None:
            return
        mark = Mark(name or self._pending.name, self._pending.t, self._pending.selection)
        self._pending = None
        self.marks = sorted([*self.marks, mark], key=lambda m: m.t)
        self._view_moved()

    def action_marks(self) -> None:
        if not self.marks:
            self.notify("no bookmarks: M sets one", severity="warning")
            return

        def done(action: MarkAction | None) -> None:
            self._view_moved()  # marks may have been deleted
            if action is None:
                return
            tl = self.timeline
            a = self.marks[action.a]
            if action.b is not None:
                b = self.marks[action.b]
                tl.fit(min(a.t, b.t), max(a.t, b.t))
            elif a.selection is not None:
                tl.select(a.selection)
            else:
                w = tl.window
                tl.t0 = a.t - (w.t1 - w.t0) / 2

        self.app.push_screen(MarksScreen(self.marks), done)

    # -- filter and jumps -------------------------------------------------------------------------

    def _apply_filter(self) -> None:
        m = self.matches
        names = m.names if self.hide_unmatched and m is not None else None
        self.index.set_filter(self.shown_classes, names, self.min_dur)
        tl = self.timeline
        sel = tl.selection
        if sel is not None and not self.index.shown(sel.source, sel.trace, sel.row):
            tl.selection = None  # (it stayed drawn and selected, hidden by the filter)
        if m is not None:  # the hits the filter now shows (no new match of the names)
            self.matches = shown_hits(self.index, m.query, m.names)
            tl.matches = self.matches.starts
            self.match_at = self._match_of_selection()
        tl.invalidate()
        self._update_status()

    def action_hide_unmatched(self) -> None:
        if self.matches is None and not self.hide_unmatched:
            self.notify("search first (/), then F hides what does not match", severity="warning")
            return
        self.hide_unmatched = not self.hide_unmatched
        self._apply_filter()

    def action_min_duration(self, direction: int) -> None:
        i = MIN_DURATIONS.index(self.min_dur) if self.min_dur in MIN_DURATIONS else 0
        self.min_dur = MIN_DURATIONS[(i + direction) % len(MIN_DURATIONS)]
        self._apply_filter()

    def action_filter_kinds(self) -> None:
        def apply(classes: frozenset[int] | None) -> None:
            if classes == self.shown_classes:  # esc, or the same kinds: nothing to redo
                return  # (a re-filter took 3.8 s on 100,000 threads)
            self.shown_classes = classes
            self._apply_filter()

        screen = KindFilterScreen(classes_present(self.index), self.shown_classes)
        self.app.push_screen(screen, apply)

    def action_toggle_details(self) -> None:
        self.query_one(DetailsPane).toggle_class("-hidden")

    def action_scroll_details(self, lines: int) -> None:
        self.query_one(DetailsPane).scroll_relative(y=lines, animate=False)

    def _jump(self, why: set[str] | None) -> None:
        tl = self.timeline
        sel = tl.selection
        links = self.query_one(DetailsPane).links
        cand = [lk for lk in links if (lk.why in why if why else lk.why.startswith("r"))]
        if sel is None or not cand:
            self.notify("nothing to jump to", severity="warning")
            return
        cand = [lk for lk in cand if self.index.shown(sel.source, lk.trace, lk.row)]
        if not cand:
            self.notify("the filter hides where it leads (k, h/H change it)", severity="warning")
            return
        if why is None:
            # Peers are in rank order: go to the next rank after the current one, wrapping.
            later = [lk for lk in cand if lk.trace > sel.trace]
            cand = later or cand
        target = cand[0]
        tl.select(Selection(sel.source, target.trace, target.row))

    def action_call_tree(self) -> None:
        tl = self.timeline
        if not tl.rows:
            return
        ref = tl.rows[tl.cursor]
        track = ref.track.parent or ref.track if ref.track is not None else None
        if track is None:
            return
        src = self.index.sources[track.source]
        trace = self.index.trace(track.source, track.trace)
        names, strings, rows = trace.events.name, trace.strings, track.rows

        def name_of(p: int) -> str:
            return strings[int(names[rows[p]])]

        w = tl.window
        t0, t1 = int(w.t0) + src.shift_ns, int(w.t1) + src.shift_ns
        g = self.index.groups[ref.group]
        title = f"r{g.rank} {track.label}" if track.lane >= 0 else f"r{g.rank} gpu (all)"

        def picked(pos: int | None) -> None:
            if pos is not None:
                tl.select(Selection(track.source, track.trace, int(track.rows[pos])))

        origin = round(self.origin()[0]) + src.shift_ns  # (the ruler's 0, on the track's clock)
        self.app.push_screen(CallTreeScreen(track, name_of, t0, t1, title, origin), picked)

    def action_jump_partner(self) -> None:
        self._jump({"launch", "gpu"})

    def action_jump_peer(self) -> None:
        self._jump(None)
