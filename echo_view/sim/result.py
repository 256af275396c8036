"""What a simulation returns (:class:`SimResult`) and the predicted :class:`~echo_view.model.Job`
built from it, which exports, validates and analyses like a measured one.

A replayed job keeps every event of its measured source: ops take their simulated times, and
every other event of a lane (CPU ops and annotations around the runtime calls, GPU annotations
around kernels) is carried by a monotone piecewise map from measured to predicted time anchored
on the lane's ops, so nesting and order survive. A workload without a measured source (a traced
graph) is written op by op through :class:`~echo_view.model.TraceBuilder`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from echo_view.model import (
    NONE,
    ClockAlignment,
    EventKind,
    Job,
    LaneKind,
    StepTable,
    Trace,
    TraceBuilder,
)
from echo_view.model.columns import groups
from echo_view.model.kinds import CollectiveKind
from echo_view.model.workload import DepKind, Workload

I64 = npt.NDArray[np.integer[Any]]


@dataclass(frozen=True, eq=False)
class SimResult:
    """Simulated times on the workload's clock (ns from its start).

    ``start_ns``/``end_ns`` per op; a collective's participants all end at the collective's
    end and each starts at its own ready time. ``coll_start_ns`` is when the last participant
    was ready (the transfer starts), ``coll_end_ns`` when all end. ``dur_ns`` and
    ``coll_dur_ns`` are the costs the models gave, ``gap_ns`` the lane gaps used.
    """

    start_ns: I64
    end_ns: I64
    coll_start_ns: I64
    coll_end_ns: I64
    dur_ns: I64
    coll_dur_ns: I64
    gap_ns: I64

    def __len__(self) -> int:
        return len(self.start_ns)

    def identical(self, other: SimResult) -> bool:
        """True when both results hold exactly the same times."""
        return all(
            np.array_equal(getattr(self, f), getattr(other, f))
            for f in ("start_ns", "end_ns", "coll_start_ns", "coll_end_ns")
        )


def step_spans(workload: Workload, start: I64, end: I64) -> dict[tuple[int, int], int]:
    """``{(rank, step number): ns}`` from each step's marker start to the latest end of the
    GPU work (or, with none, any work) that belongs to the step — on the times given, which
    may be simulated or measured."""
    out: dict[tuple[int, int], int] = {}
    steps = workload.steps
    if not len(steps):
        return out
    gpu = workload.gpu_mask()
    by_step = dict(groups(workload.ops.step))  # (one sort, not a pass over the ops per step)
    no_ops = np.empty(0, dtype=np.intp)
    for s in range(len(steps)):
        members = by_step.get(s, no_ops)
        sel = members[gpu[members]]
        if not len(sel):
            sel = members
        t0 = int(start[int(steps.marker[s])])
        t1 = int(end[sel].max()) if len(sel) else t0
        out[(int(steps.rank[s]), int(steps.number[s]))] = t1 - t0
    return out


def predicted_job(
    workload: Workload, result: SimResult, source: Job | None = None, origin_ns: int = 0
) -> Job:
    """The simulated timeline as a :class:`~echo_view.model.Job`.

    With ``source`` (the measured job the workload was reconstructed from), every measured
    event is kept and moved to its predicted time, each trace stays on its own clock and the
    source's clock alignment still applies; ``origin_ns`` is the aligned source time that the
    workload's 0 stands for. Without it the job is built from the ops alone, on one clock that
    starts at ``origin_ns``.
    """
    if source is not None:
        traces = tuple(
            _replayed_trace(workload, result, t, off - origin_ns)
            for t, off in zip(source.traces, source.alignment.offsets_ns, strict=True)
        )
        return Job(
            traces=traces,
            alignment=source.alignment,
            world_size=source.world_size,
            source=source.source,
            predicted=True,
            meta={**source.meta, "simulated": True},
        )
    built = tuple(_built_trace(workload, result, r) for r in workload.ranks)
    if origin_ns:
        built = tuple(_shifted(t, origin_ns) for t in built)
    return Job(
        traces=built,
        alignment=ClockAlignment("simulated", tuple(0 for _ in built), 0, "one simulated clock"),
        world_size=workload.world_size,
        source="workload",
        predicted=True,
        meta={"simulated": True},
    )


@dataclass(frozen=True)
class _Anchors:
    """Every lane's anchors, the replayed ops (measured and predicted start and end), sorted by
    lane, then by measured start (ties in op order). Times map through them in one pass for
    all lanes: a trace may have 10^5 lanes, and a loop over them, each scanning the whole
    trace, took minutes."""

    lane: I64  # dense lane index of each anchor
    ms: I64
    me: I64
    ps: I64
    pe: I64
    lanes: I64  # the distinct lanes, sorted
    first: I64  # each distinct lane's first anchor
    stop: I64  # one past its last

    @classmethod
    def of(cls, lane: I64, ms: I64, me: I64, ps: I64, pe: I64) -> _Anchors:
        order = np.lexsort((ms, lane))
        lanes, first, counts = np.unique(lane[order], return_index=True, return_counts=True)
        dense = np.repeat(np.arange(len(lanes), dtype=np.int64), counts)
        return cls(dense, ms[order], me[order], ps[order], pe[order], lanes, first, first + counts)

    def map(self, lane: I64, t: I64) -> tuple[I64, npt.NDArray[np.bool_]]:
        """Predicted times of measured times ``t`` on lanes ``lane`` (``t`` itself where the
        lane has no anchor, as the second array says): linear inside an op, gap-preserving
        (capped at the next op's start) between ops."""
        out = t.copy()
        li = np.searchsorted(self.lanes, lane)
        has = li < len(self.lanes)
        has[has] = self.lanes[li[has]] == lane[has]
        if not has.any():
            return out, has
        li, tq = li[has], t[has]
        # The last anchor of the same lane starting at or before each time: one search over
        # keys (lane, rank of the time among all anchor starts and query times).
        _, rank = np.unique(np.concatenate([self.ms, tq]), return_inverse=True)
        width = np.int64(rank.max() + 1)
        n = len(self.ms)
        k = np.searchsorted(self.lane * width + rank[:n], li * width + rank[n:], side="right")
        k -= 1
        lo, hi = self.first[li], self.stop[li]
        before = k < lo
        res = np.empty(len(tq), dtype=np.int64)
        res[before] = self.ps[lo[before]] - (self.ms[lo[before]] - tq[before])
        kk, tt, nxt_ok = k[~before], tq[~before], (k + 1 < hi)[~before]
        m_s, m_e, p_s, p_e = self.ms[kk], self.me[kk], self.ps[kk], self.pe[kk]
        inside = tt <= m_e
        ratio = (p_e - p_s) / np.maximum(m_e - m_s, 1)
        lin = p_s + np.round((tt - m_s) * ratio).astype(np.int64)
        gap = p_e + (tt - m_e)
        cap = np.where(nxt_ok, self.ps[np.where(nxt_ok, kk + 1, kk)], np.iinfo(np.int64).max)
        res[~before] = np.where(inside, np.minimum(lin, p_e), np.minimum(gap, cap))
        out[has] = res
        return out, has


def _replayed_trace(wl: Workload, res: SimResult, trace: Trace, shift: int) -> Trace:
    """``trace`` with every event moved to predicted time (trace time + ``shift`` is workload
    time; the caller moves the result back to the job's clock)."""
    ev = trace.events
    ops = np.flatnonzero((wl.ops.rank == trace.rank) & (wl.ops.source >= 0))
    src = wl.ops.source[ops].astype(np.int64)
    m_start = ev.start_ns + shift
    m_end = m_start + ev.dur_ns
    lanes = ev.lane.astype(np.int64)
    anchors = _Anchors.of(lanes[src], m_start[src], m_end[src], res.start_ns[ops], res.end_ns[ops])
    n = len(lanes)
    mapped, has2 = anchors.map(np.concatenate([lanes, lanes]), np.concatenate([m_start, m_end]))
    new_start, e_map, has = mapped[:n], mapped[n:], has2[:n]
    new_end = np.where(has, np.maximum(e_map, new_start), m_end)
    new_start[src] = res.start_ns[ops]
    new_end[src] = res.end_ns[ops]
    return replace(
        trace,
        events=replace(ev, start_ns=new_start - shift, dur_ns=new_end - new_start),
        steps=_replayed_steps(wl, res, trace, shift, anchors),
        metadata={**dict(trace.metadata), "simulated": True},
    )


def _replayed_steps(
    wl: Workload,
    res: SimResult,
    trace: Trace,
    shift: int,
    anchors: _Anchors,
) -> StepTable:
    """Steps of the replayed trace: each starts at its marker's simulated start and ends where
    the marker's lane map takes the measured step end. A marker on a lane that replays no op
    (the annotation's thread launches nothing) maps it through the rank's busiest replayed CPU
    lane, and a rank with none keeps the measured length. ``gpu_end_ns`` is left for the
    analysis to compute from the work launched in the step."""
    marks = np.flatnonzero(wl.steps.rank == trace.rank)
    if not len(marks):
        return StepTable.empty()
    number = wl.steps.number[marks].astype(np.int64)
    marker = wl.steps.marker[marks]
    start = res.start_ns[marker].astype(np.int64)
    spans = wl.meta.get("measured_step_ns", {})
    lane_base = int(np.flatnonzero(wl.lane_rank == trace.rank)[0])
    # The measured spans of the steps that have one, mapped in one pass (not one a step).
    known = [spans.get((trace.rank, n)) for n in number.tolist()]
    with_span = np.array([s is not None for s in known], dtype=bool)
    m_start = np.array([s[0] for s in known if s is not None], dtype=np.int64)
    m_end = np.array([s[1] for s in known if s is not None], dtype=np.int64)
    end = start.copy()
    end[with_span] = start[with_span] + (m_end - m_start)
    if with_span.any():
        lane = wl.ops.lane[marker[with_span]].astype(np.int64) - lane_base
        mapped, has = anchors.map(lane, m_end)
        cpu = [
            (int(anchors.stop[k] - anchors.first[k]), int(li))
            for k, li in enumerate(anchors.lanes.tolist())
            if trace.lanes[li].kind != LaneKind.GPU_STREAM
        ]
        if cpu and not has.all():
            busiest = max(cpu)[1]
            again, _ = anchors.map(np.full(int((~has).sum()), busiest, np.int64), m_end[~has])
            mapped[~has] = again
            has[:] = True
        end[with_span] = np.where(has, np.maximum(mapped, start[with_span]), end[with_span])
    return StepTable(
        number=number,
        start_ns=start - shift,
        end_ns=end - shift,
        gpu_end_ns=np.full(len(marks), NONE, dtype=np.int64),
    )


def _shifted(trace: Trace, by: int) -> Trace:
    steps = trace.steps
    return replace(
        trace,
        events=replace(trace.events, start_ns=trace.events.start_ns + by),
        steps=replace(
            steps,
            start_ns=steps.start_ns + by,
            end_ns=steps.end_ns + by,  # always known: the step's CPU-side end
            gpu_end_ns=np.where(steps.gpu_end_ns != NONE, steps.gpu_end_ns + by, NONE),
        ),
    )


def _built_trace(wl: Workload, res: SimResult, rank: int) -> Trace:
    """One rank's predicted trace written op by op."""
    b = TraceBuilder(rank, source="simulated")
    b.metadata["simulated"] = True
    ops = wl.ops
    mine = np.flatnonzero(ops.rank == rank)
    lane_ids: dict[int, int] = {}
    for lane_idx in np.unique(ops.lane[mine]):
        lane = wl.lanes[int(lane_idx)]
        lane_ids[int(lane_idx)] = b.lane(
            lane.kind, lane.pid, lane.tid, lane.name, device=lane.device, stream=lane.stream
        )
    group_ids = {g: b.group(pg.name, pg.ranks, pg.description) for g, pg in enumerate(wl.groups)}
    row_of: dict[int, int] = {}
    for i in mine.tolist():
        row_of[i] = b.event(
            EventKind(int(ops.kind[i])),
            wl.strings[int(ops.name[i])],
            int(res.start_ns[i]),
            int(res.end_ns[i] - res.start_ns[i]),
            lane_ids[int(ops.lane[i])],
            correlation=i,
        )
        c = int(ops.coll[i])
        if c >= 0:
            cs = wl.collectives
            b.collective(
                row_of[i],
                CollectiveKind(int(cs.kind[c])),
                nbytes=int(cs.bytes[c]),
                group=group_ids[int(cs.group[c])],
                seq=int(cs.seq[c]),
            )
    deps = wl.deps
    dst = deps.dst()
    launch = np.flatnonzero(deps.kind == int(DepKind.LAUNCH))
    for k in launch.tolist():
        a, z = int(deps.src[k]), int(dst[k])
        if a in row_of and z in row_of:
            b.flow(row_of[a], row_of[z], flow_id=z)
    gpu = wl.gpu_mask()
    for s in np.flatnonzero(wl.steps.rank == rank).tolist():
        members = ops.step == s
        t0 = int(res.start_ns[int(wl.steps.marker[s])])
        cpu_sel = members & ~gpu
        gpu_sel = members & gpu
        t_cpu = int(res.end_ns[cpu_sel].max()) if cpu_sel.any() else t0
        t_gpu = int(res.end_ns[gpu_sel].max()) if gpu_sel.any() else NONE
        b.step(int(wl.steps.number[s]), t0, t_cpu, t_gpu)
    return b.build()


__all__ = ["SimResult", "predicted_job", "step_spans"]
