"""Search by name or regular expression, and the filter by kind.

A query is a case-insensitive regular expression (Python's syntax, run by the :mod:`regex`
module, which takes a time limit); text that is not a valid expression is searched literally.
Names are matched once per distinct string, then the events are found with one ``isin`` per
trace, so a search over 1 M events costs a few tens of milliseconds. A pattern that backtracks
without end on some name (``(a|aa)+$``) is stopped after :data:`SEARCH_LIMIT_S`.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import regex
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, SelectionList
from textual.widgets.selection_list import Selection as Choice

from echo_view.tui.index import TimelineIndex, matching_names
from echo_view.tui.tracks import N_CLASSES, Track, class_label

I64 = npt.NDArray[np.int64]


#: Seconds a search may spend matching names before it gives up (a search of a real trace's
#: names takes milliseconds).
SEARCH_LIMIT_S = 2.0


def compile_query(text: str) -> Any:
    """``text`` as a case-insensitive :mod:`regex` pattern (``re``'s syntax), or as literal
    text when it does not compile."""
    try:
        return regex.compile(text, regex.IGNORECASE | regex.VERSION0)
    except (regex.error, ValueError, OverflowError, RecursionError):
        return regex.compile(re.escape(text), regex.IGNORECASE | regex.VERSION0)


@dataclass(eq=False)
class Matches:
    """Search hits: sorted start times per track (for marking rows) and every hit in view-time
    order (for n/N)."""

    query: str
    #: The matching names' string ids per ``(source, trace)`` (what the "hide the rest"
    #: filter keeps).
    names: dict[tuple[int, int], npt.NDArray[np.int32]] = field(default_factory=dict)
    starts: dict[int, I64] = field(default_factory=dict)
    tracks: list[Track] = field(default_factory=list)
    times: I64 = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    track_of: I64 = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    pos: I64 = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def __len__(self) -> int:
        return len(self.times)

    def at_time(self, t: int) -> range:
        """Indices of the hits that start at view time ``t``."""
        lo, hi = np.searchsorted(self.times, [t, t + 1])
        return range(int(lo), int(hi))

    def next_after(self, t: float, direction: int) -> int | None:
        """Index of the first hit strictly after (``direction`` > 0) or before view time ``t``,
        wrapping around."""
        if not len(self.times):
            return None
        if direction > 0:
            i = int(np.searchsorted(self.times, t, side="right"))
            return i if i < len(self.times) else 0
        i = int(np.searchsorted(self.times, t, side="left")) - 1
        return i if i >= 0 else len(self.times) - 1


def search(index: TimelineIndex, query: str, limit_s: float = SEARCH_LIMIT_S) -> Matches:
    """Every event of ``index`` whose name matches ``query``; ``TimeoutError`` when matching
    the names takes more than ``limit_s``."""
    pattern = compile_query(query)
    deadline = time.monotonic() + limit_s
    names = {
        (g.source, g.trace): matching_names(index.trace(g.source, g.trace), pattern, deadline)
        for g in index.groups
    }
    return shown_hits(index, query, names)


def shown_hits(
    index: TimelineIndex, query: str, names: dict[tuple[int, int], npt.NDArray[np.int32]]
) -> Matches:
    """The events named by ``names`` (string ids per ``(source, trace)``, as a search found
    them) that the index's filter shows: n/N never selects an event the view hides. Called
    again when the filter changes."""
    out = Matches(query, names=names)
    times, track_ids, positions = [], [], []
    for g in index.groups:
        trace = index.trace(g.source, g.trace)
        ids = names.get((g.source, g.trace), np.zeros(0, dtype=np.int32))
        if not len(ids):
            continue
        rows = np.flatnonzero(np.isin(trace.events.name, ids))
        rows = rows[rows < len(g.lane_of)]  # (events on no row of the timeline)
        shift = index.sources[g.source].shift_ns
        # The hits by lane, in position order, with one pass over the matching rows: a loop
        # over every lane took 10 µs a lane (1.1 s for 100,000 threads).
        lane, pos = g.lane_of[rows], g.lane_pos[rows]
        on = lane >= 0
        lane, pos = lane[on], pos[on]
        order = np.lexsort((pos, lane))
        lane, pos = lane[order], pos[order]
        firsts, cuts = np.unique(lane, return_index=True)
        bounds = [*cuts.tolist(), len(lane)]
        for k, li in enumerate(firsts.tolist()):
            t = g.lanes[li]
            p = pos[bounds[k] : bounds[k + 1]]
            shown = t.shown
            if shown is not None:
                p = p[shown[p]]
                if not len(p):
                    continue
            out.starts[id(t)] = t.starts[p]  # (a lane is in start order)
            out.tracks.append(t)
            times.append(t.starts[p] - shift)
            track_ids.append(np.full(len(p), len(out.tracks) - 1, dtype=np.int64))
            positions.append(p)
        if g.header is not None and len(rows):
            # The header repeats its lanes' GPU events (marked there too; n/N walks the lanes).
            hp = g.header_pos[rows]
            hp = hp[hp >= 0]
            shown = g.header.shown
            if shown is not None:
                hp = hp[shown[hp]]
            if len(hp):
                out.starts[id(g.header)] = np.sort(g.header.starts[hp])
    if times:
        all_t = np.concatenate(times)
        order = np.argsort(all_t, kind="stable")
        out.times = all_t[order]
        out.track_of = np.concatenate(track_ids)[order]
        out.pos = np.concatenate(positions)[order]
    return out


def classes_present(index: TimelineIndex) -> list[int]:
    """Display classes that occur in ``index``, ascending."""
    seen = np.zeros(N_CLASSES, dtype=bool)
    for g in index.groups:
        for t in g.lanes:
            seen[np.unique(t.classes)] = True
    return np.flatnonzero(seen).tolist()


class KindFilterScreen(ModalScreen[frozenset[int] | None]):
    """Pick the kinds of events to show; dismisses with the chosen classes (None: cancelled)."""

    BINDINGS = [  # noqa: RUF012 - Textual reads this class attribute
        Binding("escape", "cancel", "Close the kind filter unchanged"),
        Binding("enter", "apply", "Apply the kind filter", priority=True),
        Binding("a", "all", "Tick every kind"),
    ]
    DEFAULT_CSS = """
    KindFilterScreen { align: center middle; }
    KindFilterScreen > Vertical {
        width: 56; max-width: 100%; height: auto; max-height: 22; border: round $primary;
        background: $surface;
    }
    KindFilterScreen Label { width: 100%; padding: 0 1; }
    KindFilterScreen SelectionList { height: auto; max-height: 16; }
    """

    def __init__(self, present: list[int], shown: frozenset[int] | None) -> None:
        super().__init__()
        self.present = present
        self.shown = shown

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("Show kinds (space toggles, enter applies, a: all)")
            yield SelectionList[int](
                *[
                    Choice(class_label(c), c, self.shown is None or c in self.shown)
                    for c in self.present
                ]
            )

    def action_apply(self) -> None:
        chosen = frozenset(self.query_one(SelectionList).selected)
        self.dismiss(None if chosen >= frozenset(self.present) else chosen)

    def action_all(self) -> None:
        self.query_one(SelectionList).select_all()

    def action_cancel(self) -> None:
        self.dismiss(None if self.shown is None else self.shown)
