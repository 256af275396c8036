"""Tracks: the events of one timeline row as start-sorted columns, with merged coverage per
display class (:class:`Coverage`) and duration tiers for enumerating what a window shows.

A terminal cell covers ``ns_per_cell`` nanoseconds. Drawing a row asks, for every cell, how much
of it each class of event covers; :class:`Coverage` answers that for all cells with one
``searchsorted`` over merged intervals and a prefix sum, so the cost of a row depends on its width,
not on how many events it holds. Enumerating the events behind a row (for labels, Tab, clicks)
goes through duration tiers (durations within a factor of 8 of each other, each tier sorted by
start): in a tier whose longest event lasts ``d``, only events starting in ``[t0 - d, t1)`` can
overlap the window, so one step-long annotation never forces a scan of the whole lane.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from echo_view.model import EventKind, LaneKind

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

#: Display class of an event: its :class:`EventKind` value, except communication kernels (NCCL,
#: DeepEP), which get :data:`COMM` so that communication stands apart from compute on the GPU
#: rows.
COMM = len(EventKind)
N_CLASSES = COMM + 1
ANNOTATION_CLASSES = frozenset({int(EventKind.USER_ANNOTATION), int(EventKind.GPU_ANNOTATION)})
#: Classes that count as "work" (glyph height); annotations only show where nothing else runs.
WORK_CLASSES = frozenset(range(N_CLASSES)) - ANNOTATION_CLASSES - {int(EventKind.COUNTER)}
# Colouring prefers what ran over what merely encloses it.
_CLASS_WEIGHT = np.ones(N_CLASSES)
_CLASS_WEIGHT[int(EventKind.PYTHON_FUNCTION)] = 0.5
for _c in ANNOTATION_CLASSES:
    _CLASS_WEIGHT[_c] = 0.01
# Durations in one tier differ by less than this factor (a power of two).
_TIER_LOG2 = 3


def class_label(cls: int) -> str:
    """Lower-case name of display class ``cls`` (``kernel``, ``comm``...)."""
    return "comm" if cls == COMM else EventKind(cls).label


_NEG = np.iinfo(np.int64).min // 4


@dataclass(frozen=True, eq=False)
class Coverage:
    """Disjoint, sorted intervals (the union of some events) with the prefix sum of their
    lengths: ``busy(bounds)`` gives the covered time between consecutive bounds.

    Row 0 is an empty sentinel interval far in the past, so that every query time has an
    interval at or before it and the lookup needs no branch (it runs for every row drawn).
    """

    starts: I64
    lengths: I64
    cum: I64

    @classmethod
    def of(cls, starts: I64, ends: I64) -> Coverage:
        """Union of intervals ``[starts[i], ends[i])``; ``starts`` must be sorted."""
        n = len(starts)
        if n == 0:
            return cls(np.array([_NEG]), np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64))
        run_end = np.maximum.accumulate(ends)
        new = np.empty(n, dtype=bool)
        new[0] = True
        np.greater(starts[1:], run_end[:-1], out=new[1:])
        first = np.flatnonzero(new)
        last = np.empty_like(first)
        last[:-1] = first[1:] - 1
        last[-1] = n - 1
        gs = np.concatenate([[_NEG], starts[first]])
        lengths = np.concatenate([[0], run_end[last] - starts[first]])
        return cls(gs, lengths, np.cumsum(lengths) - lengths)

    def integral(self, t: I64) -> I64:
        """Covered time in ``(-inf, t)`` for each ``t``."""
        k = self.starts.searchsorted(t, side="right") - 1
        inside: I64 = np.minimum(np.maximum(t - self.starts[k], 0), self.lengths[k])
        return self.cum[k] + inside

    def busy(self, bounds: I64) -> I64:
        """Covered time in each ``[bounds[i], bounds[i + 1])``."""
        v = self.integral(bounds)
        return v[1:] - v[:-1]

    @property
    def total(self) -> int:
        return int(self.cum[-1] + self.lengths[-1])


_Filter = tuple[frozenset[int] | None, npt.NDArray[np.bool_] | None, int]


def _shown_flags(
    track: Track,
    classes: frozenset[int] | None,
    keep: npt.NDArray[np.bool_] | None,
    min_dur: int,
) -> npt.NDArray[np.bool_] | None:
    """One flag per position of ``track``: shown under the filter (None: all are)."""
    shown: npt.NDArray[np.bool_] | None = None
    if classes is not None:
        shown = np.isin(track.classes, np.array(sorted(classes), dtype=np.uint8))
    if keep is not None:
        shown = keep if shown is None else shown & keep
    if min_dur > 0:
        long_enough = (track.ends - track.starts) >= min_dur
        shown = long_enough if shown is None else shown & long_enough
    return shown


@dataclass(frozen=True, eq=False)
class _Shown:
    """What a track shows under one filter: the flags and the merged coverages."""

    shown: npt.NDArray[np.bool_] | None
    coverage: dict[int, Coverage]
    work: Coverage
    annotation: Coverage
    instants: I64

    @classmethod
    def of(
        cls,
        track: Track,
        classes: frozenset[int] | None,
        keep: npt.NDArray[np.bool_] | None,
        min_dur: int,
    ) -> _Shown:
        starts, ends, track_classes = track.starts, track.ends, track.classes
        shown = _shown_flags(track, classes, keep, min_dur)
        coverage = {}
        present = np.unique(track_classes if shown is None else track_classes[shown])
        work_mask = np.zeros(len(track_classes), dtype=bool)
        ann_mask = np.zeros(len(track_classes), dtype=bool)
        for c in present.tolist():
            m = track_classes == c
            if shown is not None:
                m &= shown
            coverage[c] = Coverage.of(starts[m], ends[m])
            if c in WORK_CLASSES:
                work_mask |= m
            elif c in ANNOTATION_CLASSES:
                ann_mask |= m
        sel = shown if shown is not None else slice(None)
        return cls(
            shown,
            coverage,
            Coverage.of(starts[work_mask], ends[work_mask]),
            Coverage.of(starts[ann_mask], ends[ann_mask]),
            starts[sel][(ends - starts)[sel] == 0],
        )


@dataclass(eq=False)
class Track:
    """One timeline row's events: a lane of one rank, or (``lane == -1``) the rank's GPU work.

    Times are on the source job's clock relative to the job start. Arrays are parallel and sorted
    by start (longer first on ties, so a parent precedes its children).
    """

    source: int
    trace: int
    lane: int
    label: str
    lane_kind: LaneKind
    rows: npt.NDArray[np.int64]
    starts: I64
    ends: I64
    classes: npt.NDArray[np.uint8]

    parent_pos: I64 | None = None
    """For one depth of a stacked lane: the positions of its events on the whole lane."""

    def __post_init__(self) -> None:
        self._sorted_ends: I64 | None = None
        self._depth: I64 | None = None
        self._levels: dict[int, Track] = {}
        self._tiers: list[tuple[int, I64, I64]] | None = None
        self._filter: _Filter = (None, None, 0)
        self._shown_view: _Shown | None = None
        self.parent: Track | None = None
        """The whole lane, for one depth of a stacked lane."""
        self.last_end = int(self.ends.max()) if len(self.ends) else 0

    def copy(self) -> Track:
        """The same events with a filter of their own (for another view of the job: a filter
        set in one view must not change what another shows). Arrays and the caches that do not
        depend on the filter are shared."""
        out = copy.copy(self)
        out._filter = (None, None, 0)
        out._shown_view = None
        out._levels = {}
        return out

    # Tiers and the filtered coverages are built on first use: a job with a thread per event has
    # 100,000 lanes, and building them all up front took 20 s, every filter change 3-9 s more,
    # although only the lanes on the screen are ever drawn.

    @property
    def tiers(self) -> list[tuple[int, I64, I64]]:
        """``(longest duration, positions, their starts)`` per duration tier, positions
        ascending."""
        if self._tiers is None:
            durs = self.ends - self.starts
            tier = np.zeros(len(durs), dtype=np.int64)
            pos = durs > 0
            tier[pos] = 1 + np.log2(durs[pos]).astype(np.int64) // _TIER_LOG2
            order = np.argsort(tier, kind="stable")  # stable: positions stay in start order
            cuts = np.flatnonzero(np.diff(tier[order])) + 1
            self._tiers = [
                (int(durs[part].max()), part, self.starts[part])
                for part in (np.split(order, cuts) if len(order) else [])
            ]
        return self._tiers

    def set_filter(
        self,
        classes: frozenset[int] | None,
        keep: npt.NDArray[np.bool_] | None = None,
        min_dur: int = 0,
    ) -> None:
        """Show only the events whose class is in ``classes`` (all if None), that ``keep`` marks
        (one flag per position; all if None) and that last at least ``min_dur`` ns. The
        coverages are rebuilt when next drawn."""
        self._filter = (classes, keep, min_dur)
        self._shown_view = None
        for sub in self._levels.values():
            assert sub.parent_pos is not None
            sub.set_filter(classes, None if keep is None else keep[sub.parent_pos], min_dur)

    @property
    def shown(self) -> npt.NDArray[np.bool_] | None:
        """One flag per position: shown under the filter (None: all are). The flags alone,
        without the coverages a drawn lane builds: a search asks every lane that holds a hit
        (100,000 lanes: 3 s when each built its coverages, for lanes never drawn)."""
        if self._shown_view is not None:
            return self._shown_view.shown
        return _shown_flags(self, *self._filter)

    @property
    def coverage(self) -> dict[int, Coverage]:
        """Merged coverage of the shown events, per display class present."""
        return self._view().coverage

    @property
    def work(self) -> Coverage:
        """Merged coverage of the shown events of the work classes."""
        return self._view().work

    @property
    def annotation(self) -> Coverage:
        """Merged coverage of the shown annotations."""
        return self._view().annotation

    @property
    def instants(self) -> I64:
        """Sorted start times of the shown zero-length events (markers)."""
        return self._view().instants

    def _view(self) -> _Shown:
        if self._shown_view is None:
            self._shown_view = _Shown.of(self, *self._filter)
        return self._shown_view

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def depth(self) -> I64:
        """Nesting depth of each event: how many events of the track enclose it (0 outermost).

        Events are sorted by start, longer first on ties, so for nested calls the ones still
        open at an event's start are exactly those before it that have not ended: its position
        minus the number of ends at or before its start (one binary search per event)."""
        if self._depth is None:
            ends = np.sort(self.ends)
            closed = np.searchsorted(ends, self.starts, side="right")
            self._depth = np.maximum(np.arange(len(self), dtype=np.int64) - closed, 0)
        return self._depth

    @property
    def max_depth(self) -> int:
        return int(self.depth.max()) if len(self) else 0

    def level(self, d: int) -> Track:
        """The events at depth ``d`` as a track of their own (one row of a stacked lane)."""
        if d not in self._levels:
            pos = np.flatnonzero(self.depth == d).astype(np.int64)
            sub = Track(
                self.source, self.trace, self.lane, f"{self.label} ·{d}", self.lane_kind,
                self.rows[pos], self.starts[pos], self.ends[pos], self.classes[pos], pos,
            )  # fmt: skip
            sub.parent = self
            classes, keep, min_dur = self._filter
            sub.set_filter(classes, None if keep is None else keep[pos], min_dur)
            self._levels[d] = sub
        return self._levels[d]

    def count_visible(self, t0: int, t1: int) -> int:
        """How many events overlap ``[t0, t1)`` (two binary searches)."""
        hi = int(np.searchsorted(self.starts, t1, side="left"))
        if self._sorted_ends is None:
            self._sorted_ends = np.sort(self.ends)  # only this query needs it: built lazily
        gone = int(np.searchsorted(self._sorted_ends, t0, side="right"))
        return max(0, hi - gone)

    def visible(self, t0: int, t1: int, min_dur: int = 0) -> I64:
        """Positions (ascending, i.e. in start order) of the events overlapping ``[t0, t1)``
        that last at least ``min_dur`` ns."""
        parts = []
        for longest, pos, starts in self.tiers:
            if longest < min_dur:
                continue
            lo = int(starts.searchsorted(t0 - longest, side="left"))
            hi = int(starts.searchsorted(t1, side="left"))
            if lo == hi:
                continue
            p = pos[lo:hi]
            keep = self.ends[p] > t0
            if min_dur > 0:
                keep &= (self.ends[p] - self.starts[p]) >= min_dur
            parts.append(p[keep])
        if not parts:
            return np.zeros(0, dtype=np.int64)
        out = np.sort(np.concatenate(parts)) if len(parts) > 1 else parts[0]
        if self.shown is not None and len(out):
            out = out[self.shown[out]]
        return out

    def next_shown(self, pos: int, direction: int) -> int | None:
        """``pos`` if it is a shown event, else the nearest shown one in ``direction``."""
        n = len(self.starts)
        if not 0 <= pos < n:
            return None
        if self.shown is None or self.shown[pos]:
            return pos
        if direction > 0:
            hits = np.flatnonzero(self.shown[pos:])
            return pos + int(hits[0]) if len(hits) else None
        hits = np.flatnonzero(self.shown[: pos + 1])
        return int(hits[-1]) if len(hits) else None

    def at(self, t: int, slack: int = 0) -> int | None:
        """Position of the innermost event covering ``t`` (or the nearest one within ``slack``)."""
        cand = self.visible(t - slack, t + slack + 1)
        if not len(cand):
            return None
        covering = cand[(self.starts[cand] <= t) & (self.ends[cand] > t)]
        if len(covering):
            return int(covering[-1])
        dist = np.minimum(np.abs(self.starts[cand] - t), np.abs(self.ends[cand] - t))
        return int(cand[int(np.argmin(dist))])
