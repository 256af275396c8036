"""Replay: reconstruct a :class:`~echo_view.model.workload.Workload` from a measured Job.

What becomes an op, per rank:

- **CPU threads**: the outermost runtime/driver calls (launches, copies, syncs, event calls) in
  program order; the time between two of them is CPU work and is kept as the op's ``gap_ns``.
  Each step gets a zero-length marker op at its start. Other CPU events (framework ops,
  annotations) are not ops; the predicted timeline carries them along (see
  :mod:`echo_view.sim.result`).
- **GPU streams**: kernels, copies and sets in FIFO order. Ops a measurement shows
  overlapping on one stream (a CUDA graph runs its kernels on streams of its own) are split
  onto extra lanes, ``stream 7 (overlap 1)``, so that every lane stays sequential.

Dependencies (:mod:`echo_view.sim.replay.deps`): launch -> GPU op (correlation), blocking
calls, host syncs, cross-stream event waits, cross-thread wake-ups. Collectives
(:mod:`echo_view.sim.replay.collectives`) are matched across ranks by (group, sequence
number), else by order within the group.

Lags are measured, so that a replay with measured durations reproduces the measured timeline:
of all the constraints on an op's start, the one that was binding in the measurement (the latest
to release it) keeps its measured lag; the others get the rank's typical lag for their kind
(capped so they do not bind earlier than measured). The workload's clock is the job's aligned
clock minus its start.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from echo_view.analysis.steps import find_steps
from echo_view.errors import InputError
from echo_view.model import (
    GPU_WORK_KINDS,
    NONE,
    SEPARATE_RUNS,
    EventKind,
    Job,
    Lane,
    LaneKind,
    StringTable,
    Trace,
)
from echo_view.model.workload import (
    CLASS_COLLECTIVE,
    CLASS_COPY,
    CLASS_OTHER,
    DepKind,
    DepTable,
    OpTable,
    StepMarks,
    Workload,
)
from echo_view.sim.compute import classify_kernel
from echo_view.sim.replay.collectives import match_collectives
from echo_view.sim.replay.deps import RankView, infer_dependencies

I64 = npt.NDArray[np.integer[Any]]
_CPU_CALL_KINDS = (int(EventKind.RUNTIME), int(EventKind.DRIVER))
_GPU_WORK = tuple(int(k) for k in GPU_WORK_KINDS)


@dataclass
class _Ops:
    """Op columns being collected (Python lists; frozen into numpy at the end)."""

    rank: list[int] = field(default_factory=list)
    lane: list[int] = field(default_factory=list)
    kind: list[int] = field(default_factory=list)
    op_class: list[int] = field(default_factory=list)
    name: list[int] = field(default_factory=list)
    dur: list[int] = field(default_factory=list)
    step: list[int] = field(default_factory=list)
    source: list[int] = field(default_factory=list)
    mstart: list[int] = field(default_factory=list)
    mend: list[int] = field(default_factory=list)

    def add(
        self, rank: int, lane: int, kind: int, cls: int, name: int, dur: int, src: int,
        t0: int, t1: int,
    ) -> int:  # fmt: skip
        i = len(self.rank)
        self.rank.append(rank)
        self.lane.append(lane)
        self.kind.append(kind)
        self.op_class.append(cls)
        self.name.append(name)
        self.dur.append(dur)
        self.step.append(NONE)
        self.source.append(src)
        self.mstart.append(t0)
        self.mend.append(t1)
        return i


@dataclass(frozen=True, slots=True)
class ReplayInfo:
    """What the reconstruction found: dependency counts per kind, collectives and how they
    were matched, ranks of the groups that the job does not hold."""

    ops: int
    deps: dict[str, int]
    collectives: int
    matched_by: str
    absent_ranks: int


@dataclass
class _Steps:
    rank: list[int] = field(default_factory=list)
    number: list[int] = field(default_factory=list)
    marker: list[int] = field(default_factory=list)
    span: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)  # measured


def workload_from_job(job: Job) -> Workload:
    """The workload of ``job`` (see the module docstring). Raises
    :class:`~echo_view.errors.InputError` when the job holds nothing to replay."""
    if not len(job) or job.event_count() == 0:
        raise InputError("the job holds no events to replay", path=job.source or None)
    if job.alignment.method == SEPARATE_RUNS:
        # Their collectives would be matched across runs and wait for each other forever.
        raise InputError(
            f"a replay needs the ranks of one run, and these files are {job.alignment.note}",
            path=job.source or None,
            hint="replay one run's files at a time",
        )
    origin = job.start_ns()
    strings = StringTable()
    lanes: list[Lane] = []
    lane_rank: list[int] = []
    ops = _Ops()
    steps = _Steps()
    views = [
        _rank_ops(trace, off - origin, strings, lanes, lane_rank, ops, steps)
        for trace, off in zip(job.traces, job.alignment.offsets_ns, strict=True)
    ]
    n = len(ops.rank)
    mstart = np.array(ops.mstart, dtype=np.int64)
    mend = np.array(ops.mend, dtype=np.int64)
    dur = np.array(ops.dur, dtype=np.int64)
    release = np.full(n, NONE, dtype=np.int64)
    gap = np.zeros(n, dtype=np.int64)
    step = np.array(ops.step, dtype=np.int64)
    parts: list[tuple[I64, ...]] = []
    counts: dict[str, int] = {}
    for view in views:
        src, dst, mode, lag, kind, lane_gap = infer_dependencies(view, mstart, mend, dur, release)
        parts.append((src, dst, mode, lag, kind))
        gap[view.op_ids] = lane_gap
        # GPU work belongs to the step that launched it.
        launched = view.launch_of >= 0
        step[view.op_ids[launched]] = step[view.launch_of[launched]]
        for k in np.unique(kind).tolist():
            counts[DepKind(k).label] = counts.get(DepKind(k).label, 0) + int((kind == k).sum())
    src, dst, mode, lag, kind = (
        np.concatenate([p[i] for p in parts]) if parts else np.empty(0, dtype=np.int64)
        for i in range(5)
    )
    world = job.world_size or max((t.world_size or 0) for t in job.traces) or None
    colls = match_collectives(job, views, mstart, mend, world)
    coll = np.full(n, NONE, dtype=np.int64)
    coll[colls.op_ids] = colls.op_coll
    op_class = np.array(ops.op_class, dtype=np.int64)
    op_class[colls.op_ids] = CLASS_COLLECTIVE
    table = OpTable(
        rank=_arr(ops.rank),
        lane=_arr(ops.lane),
        kind=_arr(ops.kind),
        op_class=op_class,
        name=_arr(ops.name),
        dur_ns=dur,
        gap_ns=gap,
        release_ns=release,
        step=step,
        coll=coll,
        source=_arr(ops.source),
    )
    info = ReplayInfo(n, counts, len(colls.specs), colls.matched_by, colls.absent_ranks)
    return Workload(
        strings=strings,
        lanes=tuple(lanes),
        lane_rank=np.array(lane_rank, dtype=np.int64),
        ops=table,
        deps=DepTable.from_edges(n, src, dst, mode, lag, kind),
        collectives=colls.specs,
        groups=colls.groups,
        steps=StepMarks(
            rank=_arr(steps.rank), number=_arr(steps.number), marker=_arr(steps.marker)
        ),
        ranks=job.ranks,
        world_size=world,
        measured_start_ns=mstart,
        measured_end_ns=mend,
        meta={"origin_ns": origin, "measured_step_ns": steps.span, "replay": info},
    )


def _rank_ops(
    trace: Trace,
    shift: int,
    strings: StringTable,
    lanes: list[Lane],
    lane_rank: list[int],
    ops: _Ops,
    steps: _Steps,
) -> RankView:
    """Append one rank's ops, lane by lane in lane order, and describe them for the
    dependency and collective passes. ``shift`` takes trace time to workload time."""
    ev = trace.events
    start = ev.start_ns + shift
    end = start + ev.dur_ns
    lane_kind = np.array([int(lane.kind) for lane in trace.lanes], dtype=np.int64)
    ek_lane = lane_kind[ev.lane] if len(ev) else np.empty(0, dtype=np.int64)
    cpu_call = np.isin(ev.kind, _CPU_CALL_KINDS) & (ek_lane == int(LaneKind.CPU_THREAD))
    gpu_work = np.isin(ev.kind, _GPU_WORK) & (ek_lane == int(LaneKind.GPU_STREAM))

    # Outermost CPU calls per thread; a nested call is represented by its container.
    container = np.full(len(ev), NONE, dtype=np.int64)
    entries: dict[int, list[tuple[int, int, int]]] = {}  # lane -> [(start, order, row)]
    rows = np.flatnonzero(cpu_call)
    rows = rows[np.lexsort((-ev.dur_ns[rows], start[rows], ev.lane[rows]))]
    cur_lane, cur_end, cur_row = -1, 0, -1
    for r in rows.tolist():
        lane = int(ev.lane[r])
        if lane != cur_lane or start[r] >= cur_end:
            cur_lane, cur_end, cur_row = lane, int(end[r]), r
            entries.setdefault(lane, []).append((int(start[r]), 1, r))
        container[r] = cur_row
    # Step markers (a row of -1 - k stands for step k of this rank).
    marks: list[tuple[int, int, int]] = []  # (number, start, end) on the workload clock
    if len(ev):
        table = find_steps(trace).table
        busiest = max(entries, key=lambda k: len(entries[k])) if entries else None
        opener = _annotation_lanes(trace)
        for num, s0, s1 in zip(table.number.tolist(), table.start_ns.tolist(),
                               table.end_ns.tolist(), strict=True):  # fmt: skip
            lane_s = opener.get(s0, busiest)
            if lane_s is not None:
                entries.setdefault(lane_s, []).append((s0 + shift, 0, -1 - len(marks)))
                marks.append((num, s0 + shift, s1 + shift))
    gpu_rows = np.flatnonzero(gpu_work)
    gpu_rows = gpu_rows[np.lexsort((gpu_rows, start[gpu_rows], ev.lane[gpu_rows]))]
    plan: list[tuple[Lane, list[tuple[int, int, int]]]] = [
        (lane, entries.get(li, [])) for li, lane in enumerate(trace.lanes)
    ]
    for li, rows_of_lane in _split_overlaps(gpu_rows, ev.lane, start, end).items():
        base_lane = trace.lanes[li]
        for k, sub in enumerate(rows_of_lane):
            items = [(int(start[r]), 1, r) for r in sub]
            if k == 0:
                plan[li] = (base_lane, items)
            else:
                label = f"{base_lane.name} (overlap {k})"
                plan.append((replace(base_lane, name=label), items))

    view = RankView(trace=trace, shift=shift)
    first = len(ops.rank)
    step_base = len(steps.rank)
    op_of_row = np.full(len(ev), NONE, dtype=np.int64)
    src_rows: list[int] = []
    lane_base = len(lanes)
    for li, (lane_obj, planned) in enumerate(plan):
        lanes.append(lane_obj)
        lane_rank.append(trace.rank)
        items = sorted(planned)
        if not items:
            continue
        ids: list[int] = []
        gpu = lane_obj.kind == LaneKind.GPU_STREAM
        for t0, _, r in items:
            if r < 0:
                num = marks[-1 - r][0]
                name = strings.intern(f"ProfilerStep#{num}")
                i = ops.add(trace.rank, lane_base + li, int(EventKind.USER_ANNOTATION),
                            CLASS_OTHER, name, 0, NONE, t0, t0)  # fmt: skip
                steps.rank.append(trace.rank)
                steps.number.append(num)
                steps.marker.append(i)
                steps.span[(trace.rank, num)] = marks[-1 - r][1:]
            else:
                text = trace.strings[int(ev.name[r])]
                k = int(ev.kind[r])
                cls = CLASS_OTHER
                if gpu:
                    cls = classify_kernel(text) if k == int(EventKind.KERNEL) else CLASS_COPY
                i = ops.add(trace.rank, lane_base + li, k, cls, strings.intern(text),
                            int(ev.dur_ns[r]), r, t0, int(end[r]))  # fmt: skip
                op_of_row[r] = i
            ids.append(i)
            src_rows.append(r if r >= 0 else NONE)
        view.lane_ops[li] = np.array(ids, dtype=np.int64)
        (view.gpu_lanes if gpu else view.cpu_lanes).append(li)
    view.op_ids = np.arange(first, len(ops.rank), dtype=np.int64)
    view.op_of_row = op_of_row
    view.container = container
    view.src_row = np.array(src_rows, dtype=np.int64)
    # Ops belong to the step whose span holds their start (the caller moves GPU ops to the
    # step of their launch); steps do not overlap.
    if marks and len(view.op_ids):
        order = sorted(range(len(marks)), key=lambda k: (marks[k][1], k))
        begin = np.array([marks[k][1] for k in order], dtype=np.int64)
        finish = np.array([marks[k][2] for k in order], dtype=np.int64)
        t = np.array(ops.mstart[first:], dtype=np.int64)
        pos = np.searchsorted(begin, t, side="right") - 1
        inside = (pos >= 0) & (t < finish[np.maximum(pos, 0)])
        idx = np.array(order, dtype=np.int64)[np.maximum(pos, 0)] + step_base
        ops.step[first:] = np.where(inside, idx, NONE).tolist()
    return view


def _split_overlaps(rows: I64, lane: I64, start: I64, end: I64) -> dict[int, list[list[int]]]:
    """GPU ops per stream in start order, split into sub-lanes that do not overlap. Ops of one
    stream overlap in a measurement when a CUDA graph runs them on streams of its own; each
    extra sub-lane becomes a lane of its own so lanes stay sequential.

    An op goes to the lowest-numbered sub-lane free at its start (first fit). ``rows`` come in
    start order per stream, so a sub-lane once free stays free until it is given an op: heaps of
    the busy sub-lanes (by end) and of the free ones (by number) give the first fit in
    O(log k) instead of a scan of all k sub-lanes, which made n ops that all overlap O(n^2)."""
    out: dict[int, list[list[int]]] = {}
    heaps: dict[int, tuple[list[tuple[int, int]], list[int]]] = {}
    for r, li, t0, t1 in zip(
        rows.tolist(), lane[rows].tolist(), start[rows].tolist(), end[rows].tolist(), strict=True
    ):
        subs = out.setdefault(li, [])
        busy, free = heaps.setdefault(li, ([], []))
        while busy and busy[0][0] <= t0:
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            k = heapq.heappop(free)
            subs[k].append(r)
        else:
            k = len(subs)
            subs.append([r])
        heapq.heappush(busy, (t1, k))
    return out


def _annotation_lanes(trace: Trace) -> dict[int, int]:
    """The CPU lane of the first annotation (in row order) starting at each start time: the
    lane of the annotation that opens a step. One pass for all steps (a trace may hold 10^5)."""
    ev = trace.events
    rows = np.flatnonzero(ev.kind == int(EventKind.USER_ANNOTATION))
    cpu = np.array([lane.kind == LaneKind.CPU_THREAD for lane in trace.lanes], dtype=bool)
    rows = rows[cpu[ev.lane[rows]]] if len(cpu) else rows[:0]
    out: dict[int, int] = {}
    for start, lane in zip(ev.start_ns[rows].tolist(), ev.lane[rows].tolist(), strict=True):
        out.setdefault(start, lane)
    return out


def _arr(values: list[int]) -> I64:
    return np.array(values, dtype=np.int64)
