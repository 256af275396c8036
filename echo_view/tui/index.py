"""The timeline's index: one :class:`~echo_view.tui.tracks.Track` per lane of every rank (and
one per rank for its GPU work), grouped per rank, for one job or two (the diff screen)."""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from echo_view.model import GPU_WORK_KINDS, EventKind, Job, LaneKind, Trace, is_comm_kernel
from echo_view.text import printable
from echo_view.tui.tracks import COMM, I64, Track


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
    comm_names = np.array(
        [i for i, s in enumerate(trace.strings.strings) if is_comm_kernel(s)], dtype=np.int32
    )
    comm = kernel & np.isin(ev.name, comm_names)
    if len(trace.collectives):
        coll_rows = trace.collectives.event
        comm[coll_rows[ev.kind[coll_rows] == int(EventKind.KERNEL)]] = True
    cls[comm] = COMM
    return cls


def matching_names(trace: Trace, pattern: Any, deadline: float) -> npt.NDArray[np.int32]:
    """Ids of the trace's strings that ``pattern`` (a :mod:`regex` pattern) finds, each
    distinct name tried once; ``TimeoutError`` once ``time.monotonic()`` passes ``deadline``."""
    found = []
    for i, s in enumerate(trace.strings.strings):
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        if pattern.search(s, timeout=left):
            found.append(i)
    return np.array(found, dtype=np.int32)


def _lane_labels(trace: Trace) -> list[str]:
    """Each lane's label; a label that several processes' lanes share gets the process
    (10,000 processes with one thread 1 each were 10,000 lanes all named "cpu 1")."""
    raw = [_raw_lane_label(trace, i) for i in range(len(trace.lanes))]
    pids: dict[str, set[int | str]] = {}
    for label, lane in zip(raw, trace.lanes, strict=True):
        pids.setdefault(label, set()).add(lane.pid)
    return [
        printable(f"{label} (pid {lane.pid})" if len(pids[label]) > 1 else label)
        for label, lane in zip(raw, trace.lanes, strict=True)
    ]


def _raw_lane_label(trace: Trace, lane_id: int) -> str:
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
    labels = _lane_labels(trace)
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
                labels[lid],
                trace.lanes[lid].kind,
                rows,
                st,
                st + durs[rows],
                classes_all[rows],
            )
        )
    gpu_rows = np.flatnonzero(np.isin(ev.kind, [int(k) for k in GPU_WORK_KINDS]))
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
    lane_of: I64 = field(init=False)
    """Event row -> index of its lane in :attr:`lanes` (-1: on none)."""
    header_pos: I64 = field(init=False)

    def copy(self) -> Group:
        """The same rows with tracks that filter apart (the inverse maps are shared)."""
        out = copy.copy(self)
        out.lanes = [t.copy() for t in self.lanes]
        out.header = None if self.header is None else self.header.copy()
        return out

    def __post_init__(self) -> None:
        # Inverse maps, event row -> position on its lane track / on the header track, so that a
        # selection is found on a row without a scan.
        n = max([0, *(int(t.rows.max()) + 1 for t in self.lanes if len(t))])
        if self.header is not None and len(self.header):
            n = max(n, int(self.header.rows.max()) + 1)
        self.lane_pos = np.full(n, -1, dtype=np.int64)
        self.lane_of = np.full(n, -1, dtype=np.int64)
        for i, t in enumerate(self.lanes):
            self.lane_pos[t.rows] = np.arange(len(t), dtype=np.int64)
            self.lane_of[t.rows] = i
        self.header_pos = np.full(n, -1, dtype=np.int64)
        if self.header is not None:
            self.header_pos[self.header.rows] = np.arange(len(self.header), dtype=np.int64)


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
                a, b = int(t.starts[0]) - shift, t.last_end - shift
                lo = a if lo is None else min(lo, a)
                hi = b if hi is None else max(hi, b)
        if lo is None or hi is None:
            return (0, 1)
        return (lo, max(hi, lo + 1))

    def view(
        self, sources: Sequence[Source] | None = None, only_source: int | None = None
    ) -> TimelineIndex:
        """Another index over the same events: other clock shifts for the sources, and/or only
        the groups of one source. Its tracks share the events' arrays but filter apart
        (:meth:`Track.copy`)."""
        groups = [g.copy() for g in self.groups if only_source is None or g.source == only_source]
        index = TimelineIndex(list(sources or self.sources), groups, (0, 1))
        index.span = index.compute_span()
        return index

    def set_filter(
        self,
        classes: frozenset[int] | None,
        names: Mapping[tuple[int, int], npt.NDArray[np.int32]] | None = None,
        min_dur: int = 0,
    ) -> None:
        """Show only events of ``classes`` (``None``: all) whose name is among ``names``
        (string ids per ``(source, trace)``, a search's; ``None``: any) and that last at least
        ``min_dur`` ns."""
        for g in self.groups:
            hit = None
            if names is not None:
                trace = self.trace(g.source, g.trace)
                ids = names.get((g.source, g.trace), np.zeros(0, dtype=np.int32))
                hit = np.isin(trace.events.name, ids)
            for t in [*g.lanes, *([g.header] if g.header else [])]:
                t.set_filter(classes, None if hit is None else hit[t.rows], min_dur)

    def event_count(self) -> int:
        return sum(len(t) for g in self.groups for t in g.lanes)

    def shown(self, source: int, trace: int, row: int) -> bool:
        """Whether event ``row`` of that trace is on a lane and the filter shows it."""
        g = self.group_of(source, trace)
        if g is None or row >= len(g.lane_of) or g.lane_of[row] < 0:
            return False
        flags = g.lanes[int(g.lane_of[row])].shown
        return flags is None or bool(flags[int(g.lane_pos[row])])

    def group_of(self, source: int, trace: int) -> Group | None:
        """The group of trace ``trace`` of source ``source``."""
        return next((g for g in self.groups if g.source == source and g.trace == trace), None)

    def trace(self, source: int, tidx: int) -> Trace:
        return self.sources[source].job.traces[tidx]
