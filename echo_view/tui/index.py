"""Numpy indexes behind the timeline: one :class:`Track` per lane (and one per rank for its GPU
activity), each with start-sorted columns and merged coverage per display class.

A terminal cell covers ``ns_per_cell`` nanoseconds. Drawing a row asks, for every cell, how much
of it each class of event covers; :class:`Coverage` answers that for all cells with one
``searchsorted`` over merged intervals and a prefix sum, so the cost of a row depends on its width,
not on how many events it holds. Enumerating the events behind a row (for labels, Tab, clicks)
uses the sorted ``starts`` and the ``short_max_dur`` bound, with the few longest events of a lane
kept aside so that one step-long annotation cannot force a scan of the whole lane.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from echo_view.model import EventKind, Job, LaneKind, Trace, is_nccl_kernel

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

#: Display class of an event: its :class:`EventKind` value, except NCCL kernels, which get
#: :data:`COMM` so that communication stands apart from compute on the GPU rows.
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
# How many of a lane's longest events are kept aside from the start-sorted scan.
_LONG_KEEP = 256


def class_label(cls: int) -> str:
    """Lower-case name of display class ``cls`` (``kernel``, ``comm``...)."""
    return "comm" if cls == COMM else EventKind(cls).label


@dataclass(frozen=True, eq=False)
class Coverage:
    """Disjoint, sorted intervals (the union of some events) with the prefix sum of their
    lengths: ``busy(bounds)`` gives the covered time between consecutive bounds."""

    starts: I64
    ends: I64
    cum: I64

    @classmethod
    def of(cls, starts: I64, ends: I64) -> Coverage:
        """Union of intervals ``[starts[i], ends[i])``; ``starts`` must be sorted."""
        n = len(starts)
        if n == 0:
            z = np.zeros(0, dtype=np.int64)
            return cls(z, z, np.zeros(1, dtype=np.int64))
        run_end = np.maximum.accumulate(ends)
        new = np.empty(n, dtype=bool)
        new[0] = True
        np.greater(starts[1:], run_end[:-1], out=new[1:])
        first = np.flatnonzero(new)
        last = np.empty_like(first)
        last[:-1] = first[1:] - 1
        last[-1] = n - 1
        gs = starts[first]
        ge = run_end[last]
        cum = np.zeros(len(gs) + 1, dtype=np.int64)
        np.cumsum(ge - gs, out=cum[1:])
        return cls(gs, ge, cum)

    def integral(self, t: I64) -> I64:
        """Covered time in ``(-inf, t)`` for each ``t``."""
        if not len(self.starts):
            return np.zeros(len(t), dtype=np.int64)
        k = np.searchsorted(self.starts, t, side="right") - 1
        kc = np.maximum(k, 0)
        inside = np.clip(t - self.starts[kc], 0, self.ends[kc] - self.starts[kc])
        return np.where(k >= 0, self.cum[kc] + inside, 0)

    def busy(self, bounds: I64) -> I64:
        """Covered time in each ``[bounds[i], bounds[i + 1])``."""
        return np.diff(self.integral(bounds))

    @property
    def total(self) -> int:
        return int(self.cum[-1])


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
    sorted_ends: I64 = field(init=False)
    short_max_dur: int = field(init=False)
    long_pos: I64 = field(init=False)
    instants: I64 = field(init=False)
    """Sorted start times of the zero-length events (markers)."""
    coverage: dict[int, Coverage] = field(init=False)
    shown: npt.NDArray[np.bool_] | None = field(init=False)
    work: Coverage = field(init=False)
    annotation: Coverage = field(init=False)

    def __post_init__(self) -> None:
        self.sorted_ends = np.sort(self.ends)
        durs = self.ends - self.starts
        n = len(durs)
        if n > _LONG_KEEP:
            cut = int(np.partition(durs, n - _LONG_KEEP - 1)[n - _LONG_KEEP - 1])
            self.long_pos = np.flatnonzero(durs > cut)
            self.short_max_dur = cut
        else:
            self.long_pos = np.arange(n, dtype=np.int64)
            self.short_max_dur = 0
        self.set_filter(None)

    def set_filter(self, classes: frozenset[int] | None) -> None:
        """(Re)build the coverages for the events whose class is in ``classes`` (all if None)."""
        self.coverage = {}
        self.shown = (
            None
            if classes is None
            else np.isin(self.classes, np.array(sorted(classes), dtype=np.uint8))
        )
        present = np.unique(self.classes)
        work_mask = np.zeros(len(self.classes), dtype=bool)
        ann_mask = np.zeros(len(self.classes), dtype=bool)
        for c in present.tolist():
            if classes is not None and c not in classes:
                continue
            m = self.classes == c
            self.coverage[c] = Coverage.of(self.starts[m], self.ends[m])
            if c in WORK_CLASSES:
                work_mask |= m
            elif c in ANNOTATION_CLASSES:
                ann_mask |= m
        self.work = Coverage.of(self.starts[work_mask], self.ends[work_mask])
        shown = self.shown if self.shown is not None else slice(None)
        self.instants = self.starts[shown][(self.ends - self.starts)[shown] == 0]
        self.annotation = Coverage.of(self.starts[ann_mask], self.ends[ann_mask])

    def __len__(self) -> int:
        return len(self.starts)

    def count_visible(self, t0: int, t1: int) -> int:
        """How many events overlap ``[t0, t1)`` (two binary searches)."""
        hi = int(np.searchsorted(self.starts, t1, side="left"))
        gone = int(np.searchsorted(self.sorted_ends, t0, side="right"))
        return max(0, hi - gone)

    def visible(self, t0: int, t1: int, min_dur: int = 0) -> I64:
        """Positions (ascending, i.e. in start order) of the events overlapping ``[t0, t1)``
        that last at least ``min_dur`` ns."""
        hi = int(np.searchsorted(self.starts, t1, side="left"))
        longs = self.long_pos
        if min_dur > self.short_max_dur:
            lo = hi  # no short event is long enough: only the kept-aside ones can qualify
        else:
            lo = int(np.searchsorted(self.starts, t0 - self.short_max_dur, side="left"))
        before = longs[(longs < lo)]
        before = before[(self.ends[before] > t0) & (self.starts[before] < t1)]
        span = np.arange(lo, hi, dtype=np.int64)
        span = span[self.ends[lo:hi] > t0]
        out = np.concatenate([before, span]) if len(before) else span
        if min_dur > 0 and len(out):
            out = out[(self.ends[out] - self.starts[out]) >= min_dur]
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

    def position_of(self, row: int) -> int | None:
        """Position of trace event ``row`` on this track, if it is here."""
        hit = np.flatnonzero(self.rows == row)
        return int(hit[0]) if len(hit) else None


@dataclass(frozen=True, eq=False)
class Source:
    """One loaded job and where its clock sits on the view: view time = job time - ``shift_ns``."""

    job: Job
    label: str
    shift_ns: int = 0


def display_classes(trace: Trace) -> npt.NDArray[np.uint8]:
    """Per-event display class: the event kind, or :data:`COMM` for communication kernels."""
    ev = trace.events
    cls = ev.kind.astype(np.uint8, copy=True)
    kernel = ev.kind == int(EventKind.KERNEL)
    nccl_names = np.array(
        [i for i, s in enumerate(trace.strings.strings) if is_nccl_kernel(s)], dtype=np.int32
    )
    comm = kernel & np.isin(ev.name, nccl_names)
    if len(trace.collectives):
        coll_rows = trace.collectives.event
        comm[coll_rows[ev.kind[coll_rows] == int(EventKind.KERNEL)]] = True
    cls[comm] = COMM
    return cls


def _lane_label(trace: Trace, lane_id: int) -> str:
    lane = trace.lanes[lane_id]
    if lane.kind == LaneKind.GPU_STREAM:
        dev = lane.device if lane.device >= 0 else lane.pid
        stream = lane.stream if lane.stream >= 0 else lane.tid
        return f"gpu{dev} s{stream}"
    if lane.kind == LaneKind.CPU_THREAD:
        return f"cpu {lane.tid}" if not lane.name or lane.name.startswith("thread ") else lane.name
    return lane.name or f"{lane.pid}/{lane.tid}"


def _lane_order(trace: Trace, lane_id: int) -> tuple[int, str]:
    lane = trace.lanes[lane_id]
    return (int(lane.kind), f"{lane.device:09d}{lane.stream:09d}{lane.tid!s:>20}")


def tracks_of_trace(source: int, tidx: int, job: Job) -> tuple[Track | None, list[Track]]:
    """The rank's GPU-activity track (``None`` when it has no GPU work) and its lane tracks."""
    trace = job.traces[tidx]
    ev = trace.events
    origin = job.start_ns()
    off = int(job.alignment.offsets_ns[tidx]) - origin
    starts_all = ev.start_ns.astype(np.int64) + off
    durs = ev.dur_ns.astype(np.int64, copy=False)
    keep = ev.kind != int(EventKind.COUNTER)
    rows_all = np.flatnonzero(keep).astype(np.int64)
    classes_all = display_classes(trace)
    lanes_k = ev.lane[rows_all]
    order = np.lexsort((-durs[rows_all], starts_all[rows_all], lanes_k))
    rows_sorted = rows_all[order]
    lanes_sorted = lanes_k[order]
    bounds = np.searchsorted(lanes_sorted, np.arange(len(trace.lanes) + 1))
    lanes: list[Track] = []
    for lid in sorted(range(len(trace.lanes)), key=lambda i: _lane_order(trace, i)):
        a, b = int(bounds[lid]), int(bounds[lid + 1])
        if a == b:
            continue
        rows = rows_sorted[a:b]
        st = starts_all[rows]
        lanes.append(
            Track(
                source,
                tidx,
                lid,
                _lane_label(trace, lid),
                trace.lanes[lid].kind,
                rows,
                st,
                st + durs[rows],
                classes_all[rows],
            )
        )
    gpu_kinds = np.array(
        [int(EventKind.KERNEL), int(EventKind.MEMCPY), int(EventKind.MEMSET)], dtype=np.uint8
    )
    gpu_rows = np.flatnonzero(np.isin(ev.kind, gpu_kinds))
    agg: Track | None = None
    if len(gpu_rows):
        gorder = np.lexsort((-durs[gpu_rows], starts_all[gpu_rows]))
        rows = gpu_rows[gorder].astype(np.int64)
        st = starts_all[rows]
        agg = Track(
            source, tidx, -1, "gpu", LaneKind.GPU_STREAM, rows, st, st + durs[rows],
            classes_all[rows],
        )  # fmt: skip
    return agg, lanes


@dataclass(eq=False)
class Group:
    """The rows of one rank of one source: a header (its GPU activity) and its lanes."""

    source: int
    trace: int
    rank: int
    header: Track | None
    lanes: list[Track]
    lane_pos: I64 = field(init=False)
    header_pos: I64 = field(init=False)

    def __post_init__(self) -> None:
        # Inverse maps, event row -> position on its lane track / on the header track, so that a
        # selection is found on a row without a scan.
        n = max([0, *(int(t.rows.max()) + 1 for t in self.lanes if len(t))])
        if self.header is not None and len(self.header):
            n = max(n, int(self.header.rows.max()) + 1)
        self.lane_pos = np.full(n, -1, dtype=np.int64)
        for t in self.lanes:
            self.lane_pos[t.rows] = np.arange(len(t), dtype=np.int64)
        self.header_pos = np.full(n, -1, dtype=np.int64)
        if self.header is not None:
            self.header_pos[self.header.rows] = np.arange(len(self.header), dtype=np.int64)

    def lane_track(self, lane: int) -> Track | None:
        """The track of lane id ``lane``."""
        return next((t for t in self.lanes if t.lane == lane), None)


@dataclass(eq=False)
class TimelineIndex:
    """Everything the timeline draws, for one or two sources (A/B in the diff screen)."""

    sources: list[Source]
    groups: list[Group]
    span: tuple[int, int]
    collapsed: set[int] = field(default_factory=set)
    """Positions in :attr:`groups` of the ranks shown as their header row only."""

    @classmethod
    def build(cls, sources: Sequence[Source], interleave: bool = True) -> TimelineIndex:
        """Index ``sources``; with two sources and ``interleave`` the groups go rank by rank
        (A r0, B r0, A r1, ...) so that the two runs of one rank sit together."""
        per_source: list[list[Group]] = []
        for si, src in enumerate(sources):
            gs: list[Group] = []
            for ti, trace in enumerate(src.job.traces):
                header, lanes = tracks_of_trace(si, ti, src.job)
                if header is None and not lanes:
                    continue
                gs.append(Group(si, ti, trace.rank, header, lanes))
            per_source.append(gs)
        if interleave and len(per_source) > 1:
            groups = sorted((g for gs in per_source for g in gs), key=lambda g: (g.rank, g.source))
        else:
            groups = [g for gs in per_source for g in gs]
        index = cls(list(sources), groups, (0, 1))
        index.span = index.compute_span()
        return index

    def compute_span(self) -> tuple[int, int]:
        """``(first start, last end)`` on the view clock over all tracks."""
        lo, hi = None, None
        for g in self.groups:
            shift = self.sources[g.source].shift_ns
            for t in [*g.lanes, *([g.header] if g.header else [])]:
                if not len(t):
                    continue
                a, b = int(t.starts[0]) - shift, int(t.sorted_ends[-1]) - shift
                lo = a if lo is None else min(lo, a)
                hi = b if hi is None else max(hi, b)
        if lo is None or hi is None:
            return (0, 1)
        return (lo, max(hi, lo + 1))

    def view(
        self, sources: Sequence[Source] | None = None, only_source: int | None = None
    ) -> TimelineIndex:
        """Another index over the same tracks (no copy): other clock shifts for the sources,
        and/or only the groups of one source."""
        groups = [g for g in self.groups if only_source is None or g.source == only_source]
        index = TimelineIndex(list(sources or self.sources), groups, (0, 1))
        index.span = index.compute_span()
        return index

    def set_filter(self, classes: frozenset[int] | None) -> None:
        """Show only events of ``classes`` (``None``: all)."""
        for g in self.groups:
            for t in [*g.lanes, *([g.header] if g.header else [])]:
                t.set_filter(classes)

    def event_count(self) -> int:
        return sum(len(t) for g in self.groups for t in g.lanes)

    def group_of(self, source: int, trace: int) -> Group | None:
        """The group of trace ``trace`` of source ``source``."""
        return next((g for g in self.groups if g.source == source and g.trace == trace), None)

    def trace(self, source: int, tidx: int) -> Trace:
        return self.sources[source].job.traces[tidx]
