"""Turn one :class:`~echo_view.tui.index.Track` and a view window into the segments of one
terminal row.

Every cell shows how busy the lane was in its time slice (``▁`` .. ``█``) coloured by the class
that covered most of it; events at least :data:`LABEL_MIN_CELLS` wide carry their name, drawn in
start order so that an inner call paints over its parent. Cells holding a search match or the
selected event are marked. Only the coverage queries touch all events, and they are
``searchsorted`` calls, so a row costs about the same at 1 k and at 1 M events.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import numpy.typing as npt
from rich.cells import get_character_cell_size
from rich.segment import Segment
from textual.theme import BUILTIN_THEMES

from echo_view.analysis.cxx_names import demangle, short_kernel_name
from echo_view.model import EventKind
from echo_view.text import printable
from echo_view.tui.palette import (
    EMPTY,
    GLYPH,
    LABEL,
    MATCH,
    MATCH_MARK,
    SELECTED,
    Palette,
    palette_for,
)
from echo_view.tui.tracks import _CLASS_WEIGHT, WORK_CLASSES, Track

GLYPHS = " ▁▂▃▄▅▆▇█"
ANNOTATION_GLYPH = "─"
INSTANT_GLYPH = "╵"
_GLYPH_ARRAY = np.array(list(GLYPHS))
LABEL_MIN_CELLS = 3
# More labels than this on one row are unreadable anyway; the longest win.
MAX_LABELS = 300

#: The palette rows are drawn with when none is given (the default Textual theme's).
DEFAULT_PALETTE = palette_for(BUILTIN_THEMES["textual-dark"])


#: How lanes name events: the readable short name, or the full (demangled) signature.
NAME_MODES = ("short", "full")


@lru_cache(maxsize=65536)
def short_name(name: str) -> str:
    """A name as a lane shows it: a C++ kernel signature as its identifier and the callable
    it is templated on (:func:`~echo_view.analysis.cxx_names.short_kernel_name`,
    ``void at::native::<unnamed>::vectorized_layer_norm_kernel<...>(...)`` ->
    ``vectorized_layer_norm_kernel``); other names unchanged."""
    return printable(short_kernel_name(name))


def display_name(name: str, mode: str) -> str:
    """``name`` in name mode ``mode`` (one of :data:`NAME_MODES`)."""
    return short_name(name) if mode == "short" else printable(demangle(name))


@dataclass(frozen=True, slots=True)
class Window:
    """The part of the view clock a row shows: ``width`` cells from ``t0`` of ``ns_per_cell``."""

    t0: float
    ns_per_cell: float
    width: int

    def bounds(self, shift: int = 0) -> npt.NDArray[np.int64]:
        """Cell boundaries on a source's clock (``width + 1`` values)."""
        edges = self.t0 + self.ns_per_cell * np.arange(self.width + 1, dtype=np.float64)
        # Within int64 whatever the view (a cast past it is undefined: numpy warned).
        edges = np.clip(np.floor(edges), -(2.0**62), 2.0**62)
        return edges.astype(np.int64) + shift

    @property
    def t1(self) -> float:
        return self.t0 + self.ns_per_cell * self.width


def cells(track: Track, window: Window, shift: int) -> tuple[list[str], npt.NDArray[np.int64]]:
    """Glyph and style id of every cell (the level-of-detail layer, no labels)."""
    bounds = window.bounds(shift)
    span = np.maximum(bounds[1:] - bounds[:-1], 1).astype(np.float64)
    work = track.work.busy(bounds)
    # GPU kinds never overlap on one stream, but CPU calls nest: the union is the honest height.
    frac = work / span
    if len(track.coverage) == 1:
        # One class (most GPU streams): no per-class query needed.
        (only,) = track.coverage
        covered = work if only in WORK_CLASSES else track.annotation.busy(bounds)
        best = covered.astype(np.float64)
        cls = np.full(window.width, only, dtype=np.int64)
    else:
        best = np.full(window.width, -1.0)
        cls = np.full(window.width, EMPTY // 4, dtype=np.int64)
        for c, cov in track.coverage.items():
            b = cov.busy(bounds) * _CLASS_WEIGHT[c]
            better = b > best
            best = np.where(better, b, best)
            cls = np.where(better & (b > 0), c, cls)
    level = np.where(work > 0, np.minimum(np.maximum(np.ceil(frac * 8), 1), 8), 0)
    glyphs: list[str] = _GLYPH_ARRAY[level.astype(np.int64)].tolist()
    ann = track.annotation.busy(bounds) if track.annotation.total else None
    sid = np.where(best > 0, cls * 4 + GLYPH, EMPTY)
    if ann is not None:
        only_ann = (work == 0) & (ann > 0)
        for i in np.flatnonzero(only_ann).tolist():
            glyphs[i] = ANNOTATION_GLYPH
    if len(track.instants):
        seen = track.instants.searchsorted(bounds, side="left")
        marks = (seen[1:] > seen[:-1]) & (work == 0)
        for i in np.flatnonzero(marks).tolist():
            glyphs[i] = INSTANT_GLYPH
            sid[i] = int(EventKind.INSTANT) * 4 + GLYPH
    return glyphs, sid


def _paint(
    glyphs: list[str], sid: npt.NDArray[np.int64], c0: int, c1: int, text: str, style: int
) -> None:
    width = len(glyphs)
    a, b = max(c0, 0), min(c1, width)
    if a >= b:
        return
    if text.isascii():  # one character a cell
        label = text[a - c0 : a - c0 + (b - a)] if c0 < 0 else text[: b - a]
        glyphs[a:b] = list(label.ljust(b - a))
    else:
        glyphs[a:b] = _cell_glyphs(text, a - c0, b - a)
    sid[a:b] = style


def _cell_glyphs(text: str, skip: int, count: int) -> list[str]:
    """The ``count`` cells of ``text`` after its first ``skip`` cells, one glyph a cell: a
    wide character fills its cell and leaves the next one empty (``""``), a combining mark
    joins the character before it, and cells past the text are blank. A wide or combining
    character counted as one cell moved every event after it on the row."""
    out: list[str] = []
    need = skip + count
    for ch in text:
        size = get_character_cell_size(ch)
        if size == 0:
            if out:
                out[-1] += ch
            continue
        if len(out) + size > need:
            break
        out.append(ch)
        if size == 2:
            out.append("")
    out = out[skip:need]
    if out and out[0] == "":  # the right half of a wide character the view's edge cut
        out[0] = " "
    out.extend([" "] * (count - len(out)))
    return out


def _label(
    track: Track,
    window: Window,
    shift: int,
    name_of: Callable[[int], str],
    glyphs: list[str],
    sid: npt.NDArray[np.int64],
) -> None:
    """Write the names of events at least LABEL_MIN_CELLS wide. Each cell belongs to the
    innermost such event (painted in start order); every run of cells with one owner shows that
    owner's name from its first cell, so a parent split by its children stays readable."""
    dt = window.ns_per_cell
    t0 = window.t0 + shift
    t1 = int(np.ceil(t0 + dt * window.width))
    vis = track.visible(int(t0), t1, int(LABEL_MIN_CELLS * dt))
    if not len(vis):
        return
    if len(vis) > MAX_LABELS:
        durs = track.ends[vis] - track.starts[vis]
        vis = np.sort(vis[np.argsort(-durs, kind="stable")[:MAX_LABELS]])
    width = window.width
    owner = np.full(width, -1, dtype=np.int64)
    c0s = np.clip(np.floor((track.starts[vis] - t0) / dt), 0, width).astype(np.int64)
    c1s = np.clip(np.ceil((track.ends[vis] - t0) / dt), 0, width).astype(np.int64)
    for p, c0, c1 in zip(vis.tolist(), c0s.tolist(), c1s.tolist(), strict=True):
        owner[c0:c1] = p
    cuts = np.flatnonzero(np.diff(owner)) + 1
    starts = [0, *cuts.tolist()]
    ends = [*cuts.tolist(), width]
    for a, b, p in zip(starts, ends, owner[starts].tolist(), strict=True):
        if p < 0:
            continue
        _paint(glyphs, sid, a, b, f" {name_of(p)}", int(track.classes[p]) * 4 + LABEL)


def render_row(
    track: Track,
    window: Window,
    shift: int,
    name_of: Callable[[int], str],
    *,
    selected: int | None = None,
    match_starts: npt.NDArray[np.int64] | None = None,
    palette: Palette = DEFAULT_PALETTE,
) -> list[Segment]:
    """Segments of one timeline row (without the gutter).

    ``name_of(p)`` is the name of the event at track position ``p``; ``selected`` is a track
    position; ``match_starts`` are the sorted start times of the search matches on this track.
    """
    glyphs, sid = cells(track, window, shift)
    dt = window.ns_per_cell
    t0 = window.t0 + shift
    if len(track):
        _label(track, window, shift, name_of, glyphs, sid)
    if match_starts is not None and len(match_starts):
        bounds = window.bounds(shift)
        hits = np.diff(np.searchsorted(match_starts, bounds, side="left")) > 0
        if hits.any():
            # A named cell turns black on yellow; a bar cell becomes a full yellow block, and an
            # empty one (the match is too short to register) a yellow marker.
            label = (sid != EMPTY) & (sid % 4 == LABEL)
            sid = np.where(hits & label, (sid // 4) * 4 + MATCH, sid)
            for i in np.flatnonzero(hits & ~label).tolist():
                glyphs[i] = "█" if sid[i] != EMPTY else "▼"
                sid[i] = MATCH_MARK
    if selected is not None and 0 <= selected < len(track):
        c0 = int(np.floor((track.starts[selected] - t0) / dt))
        c1 = max(int(np.ceil((track.ends[selected] - t0) / dt)), c0 + 1)
        text = f" {name_of(selected)}" if c1 - c0 >= LABEL_MIN_CELLS else "▮" * (c1 - c0)
        _paint(glyphs, sid, c0, c1, text, int(track.classes[selected]) * 4 + SELECTED)
    return _runs(glyphs, sid, palette)


def _runs(glyphs: list[str], sid: npt.NDArray[np.int64], palette: Palette) -> list[Segment]:
    """Merge equal-style neighbours into one segment each."""
    if not glyphs:
        return []
    cuts = np.flatnonzero(np.diff(sid)) + 1
    bounds = [0, *cuts.tolist(), len(glyphs)]
    sids = sid[bounds[:-1]].tolist()
    styles = palette.styles
    # One join, then slices: a join per run costs a list slice and a join each.
    text = "".join(glyphs)
    if len(text) != len(glyphs):  # a wide character's empty cell, combining marks
        ends = np.cumsum(np.fromiter(map(len, glyphs), dtype=np.int64, count=len(glyphs)))
        bounds = [0, *ends[np.asarray(bounds[1:]) - 1].tolist()]
    return [
        Segment(text[a:b], styles[s]) for a, b, s in zip(bounds[:-1], bounds[1:], sids, strict=True)
    ]
