"""Simulate one training step of a workload config from its traced graph, and turn the result
into a predicted :class:`~echo_view.model.Job` and a report."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import numpy as np
import numpy.typing as npt

from echo_view.model.columns import groups
from echo_view.model.config import WorkloadConfig
from echo_view.model.graph import OpClass, TracedGraph
from echo_view.model.job import ClockAlignment, Job
from echo_view.model.kinds import CollectiveKind, EventKind, LaneKind
from echo_view.model.strings import StringTable
from echo_view.model.trace import (
    NONE,
    CollectiveTable,
    EventTable,
    Lane,
    ProcessGroup,
    StepTable,
    Trace,
)
from echo_view.model.workload import Workload
from echo_view.sim import engine
from echo_view.sim.cluster import Cluster
from echo_view.sim.comm import CommModel
from echo_view.sim.compose import COMPUTE_STREAM, HOST_TAIL, NCCL_KERNEL, Composed, compose
from echo_view.sim.compose_costs import CollectiveCache
from echo_view.sim.host import HostParams
from echo_view.sim.interference import InterferenceModel, gemm_slowdown_of
from echo_view.sim.interference.simulate import config_rate_hook
from echo_view.sim.kernel_cost import ComputeParams
from echo_view.sim.layout import Layout
from echo_view.sim.moe import deepep_kernels
from echo_view.sim.result import SimResult
from echo_view.sim.schedule import bubble_fraction

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class ConfigSimulation:
    """The outcome of simulating a config: times per simulated rank and the raw result."""

    cfg: WorkloadConfig
    graph: TracedGraph
    cluster: Cluster
    params: ComputeParams
    composed: Composed
    result: SimResult
    #: The host path's parameters the step was simulated with.
    host: HostParams = field(default_factory=HostParams)

    @property
    def step_ns(self) -> int:
        """Step time: the slowest simulated rank's last op end (the step starts at 0)."""
        return int(self.result.end_ns.max()) if len(self.result.end_ns) else 0

    def rank_end_ns(self) -> dict[int, int]:
        """Each simulated rank's last op end."""
        ends = self.result.end_ns
        out = dict.fromkeys(self.composed.simulated_ranks, 0)
        for r, sel in groups(self.composed.workload.ops.rank):
            if r in out:
                out[r] = int(ends[sel].max())
        return out

    def stage_ns(self) -> dict[int, int]:
        """Step time seen by each pipeline stage (the slowest of its simulated ranks)."""
        lay = Layout.of(self.cfg.parallel)
        out: dict[int, int] = {}
        for r, t in self.rank_end_ns().items():
            s = lay.coords(r)[0]
            out[s] = max(out.get(s, 0), t)
        return out

    def class_ns(self, rank: int) -> dict[str, int]:
        """Where ``rank``'s step goes: the cost models' time of its kernels by op class (solo
        durations, kernel gaps included; ``collective`` on every stream, hidden or not),
        ``interference`` (how much longer the compute stream's kernels ran beside
        communication than alone) and ``exposed`` (the step's time with the compute stream
        idle: communication and waits that compute does not hide). The compute stream's kernels
        plus those two add up to the step (kernels of other streams, FSDP2's copy-in, count in
        their class too; the host path's CPU time counts in ``other``, beside the step)."""
        comp, res, wl = self.composed, self.result, self.composed.workload
        on_compute = np.array([lane.stream == COMPUTE_STREAM for lane in wl.lanes], dtype=bool)
        mine = wl.ops.rank == rank
        compute = mine & on_compute[wl.ops.lane] & (wl.ops.op_class != OpClass.COLLECTIVE)
        span = res.end_ns - res.start_ns
        out = dict.fromkeys(OpClass.NAMES, 0)
        solo = 0
        for op in np.flatnonzero(mine).tolist():
            t = int(comp.src_table[op])
            if t < 0:  # a coarse op of the composer's own (a bucket reduction, a transfer)
                out[OpClass.NAMES[int(wl.ops.op_class[op])]] += int(span[op])
                solo += int(span[op]) if compute[op] else 0
                continue
            tc, lo, hi = comp.tables[t], int(comp.src_lo[op]), int(comp.src_hi[op])
            cls, dur = tc.table.op_class[lo:hi], tc.dur_ns[lo:hi]
            for c in np.unique(cls).tolist():
                ns = int(dur[cls == c].sum())
                out[OpClass.NAMES[c]] += ns
                solo += ns if compute[op] and c != OpClass.COLLECTIVE else 0
        busy = int(span[compute].sum())
        step = int(res.end_ns[mine].max()) if mine.any() else 0
        return {**out, "interference": busy - solo, "exposed": step - busy}

    def fills(self, rank: int) -> int:
        """How many fills of new buffers ``rank``'s GPU runs in the step (deterministic
        algorithms, :attr:`~echo_view.sim.compose_costs.TableCost.fills`)."""
        comp = self.composed
        src = np.asarray(comp.src_table)
        mine = np.flatnonzero((comp.workload.ops.rank == rank) & (src >= 0))
        tables, lo, hi = src[mine], np.asarray(comp.src_lo)[mine], np.asarray(comp.src_hi)[mine]
        n = 0
        # Per table a running count of its fills, so that each op's range is one subtraction.
        for t in np.unique(tables).tolist():
            counted = np.concatenate(([0], np.cumsum(comp.tables[t].fills)))
            sel = tables == t
            n += int((counted[hi[sel]] - counted[lo[sel]]).sum())
        return n

    def host_ns(self, rank: int) -> int:
        """Time ``rank``'s host thread spends issuing work (its kernels' launches and its
        per-tensor loops; 0 without a host path): against the step, how host-bound it is."""
        wl = self.composed.workload
        host = np.array([lane.kind == LaneKind.CPU_THREAD for lane in wl.lanes], dtype=bool)
        mine = (wl.ops.rank == rank) & host[wl.ops.lane]
        return int(wl.ops.dur_ns[mine].sum())

    def bubble(self) -> dict[str, float]:
        """Pipeline bubble as a share of the span from the step's start to the last pass's
        end: the ideal ``(p-1)/(v*m+p-1)`` (``(p-1)/(v*m)`` of the compute time, on the span)
        and the simulated idle share of the compute stream, averaged over stages."""
        p = self.cfg.parallel
        wl, res = self.composed.workload, self.result
        on_compute = np.array([lane.stream == COMPUTE_STREAM for lane in wl.lanes], dtype=bool)
        # A pass's ops: one coarse op, or (every rank simulated) one op a kernel.
        src = self.composed.src_table
        of_pass = np.zeros(len(src), dtype=bool)
        known = src >= 0
        of_pass[known] = self.composed.pass_tables[src[known]]
        passes = np.flatnonzero(on_compute[wl.ops.lane] & of_pass)
        share_of = {}
        for r, sel in groups(wl.ops.rank[passes]):
            rows = passes[sel]
            busy = int((res.end_ns[rows] - res.start_ns[rows]).sum())
            span = int(res.end_ns[rows].max())
            share_of[r] = 1.0 - busy / span if span else 0.0
        shares = [share_of[r] for r in self.composed.simulated_ranks if r in share_of]
        ideal = bubble_fraction(p.pp, self.composed.microbatches, p.virtual_stages)
        return {
            "ideal": ideal / (1.0 + ideal),
            "simulated": float(np.mean(shares)) if shares else 0.0,
        }


def simulate_config(
    graph: TracedGraph,
    cfg: WorkloadConfig,
    cluster: Cluster,
    comm: CommModel,
    params: ComputeParams,
    *,
    comm_scale: float = 1.0,
    ranks: str = "stages",
    scales: Mapping[int, float] | None = None,
    interference: InterferenceModel | None = None,
    host: HostParams | None = None,
) -> ConfigSimulation:
    """Compose and run one step of ``cfg``; ``interference`` slows compute beside
    communication (:mod:`echo_view.sim.interference`), ``host`` times the host path
    (:mod:`echo_view.sim.host`; default :class:`HostParams` ())."""
    colls = CollectiveCache(comm, cluster, comm_scale)
    composed = compose(
        graph,
        cfg,
        colls,
        params,
        ranks=ranks,
        scales=scales,
        host=host,
        gemm_slowdown=gemm_slowdown_of(interference, cluster.gpu.name),
    )
    hook = config_rate_hook(composed, interference, cluster.gpu.name)
    result = engine.run(composed.workload, composed.dur_ns, composed.coll_dur_ns, rates=hook)
    return ConfigSimulation(cfg, graph, cluster, params, composed, result, host or HostParams())


def _coll_kind_of(name: str) -> int:
    for kind, kernel in NCCL_KERNEL.items():
        if name.startswith(kernel):
            return int(kind)
    return int(CollectiveKind.UNKNOWN)


def expanded_times(
    start: npt.ArrayLike,
    end: npt.ArrayLike,
    lengths: npt.ArrayLike,
    solo_dur: npt.ArrayLike,
    fixed: npt.ArrayLike | None = None,
) -> tuple[I64, I64]:
    """Start and duration of the kernels of passes that ran from ``start`` to ``end``: pass
    ``i`` holds the next ``lengths[i]`` kernels of ``solo_dur``, back to back from its start.
    A pass slowed by interference lasts longer than its kernels' solo sum: the extra time is
    spread over its kernels in proportion to their time (the per-kernel split is not
    simulated), so the slowdown shows as longer kernels, not as idle time at the pass end;
    ``fixed`` kernels (collectives: interference slows the compute beside them, not them)
    keep their own time unless the pass holds nothing else. Passes are never compressed."""
    start, end = np.asarray(start, dtype=np.int64), np.asarray(end, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    solo_dur = np.asarray(solo_dur, dtype=np.int64)
    total = int(lengths.sum())
    if not total:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    keep = np.zeros(total, dtype=bool) if fixed is None else np.asarray(fixed, dtype=bool)
    heads = np.cumsum(lengths) - lengths
    nonempty = lengths > 0

    def per_pass(values: npt.NDArray[Any]) -> npt.NDArray[np.float64]:
        out = np.zeros(len(lengths), dtype=np.float64)
        out[nonempty] = np.add.reduceat(values.astype(np.float64), heads[nonempty])
        return out

    solo = per_pass(solo_dur)
    free = per_pass(np.where(keep, 0, solo_dur))
    extra = np.maximum((end - start) - solo, 0.0)
    # The extra time goes to the kernels that are not fixed; to all where there are none.
    stretch_free = np.where(free > 0, 1.0 + extra / np.maximum(free, 1.0), 1.0)
    stretch_all = 1.0 + extra / np.maximum(solo, 1.0)
    per = np.where(
        keep,
        np.repeat(np.where(free > 0, 1.0, stretch_all), lengths),
        np.repeat(np.where(free > 0, stretch_free, stretch_all), lengths),
    )
    scaled = solo_dur * per
    before = np.cumsum(scaled) - scaled  # exclusive prefix sum over all passes
    offset = before - np.repeat(before[np.minimum(heads, total - 1)], lengths)
    first = np.repeat(start, lengths)
    fstart = first + np.rint(offset).astype(np.int64)
    fend = first + np.rint(offset + scaled).astype(np.int64)
    return fstart, fend - fstart


def issued_starts(fstart: I64, lengths: I64, issued: I64) -> I64:
    """Starts of the kernels of passes drawn back to back (``fstart``, ``lengths`` per pass)
    once each also waits for the host to have issued it (``issued``, absolute; -1 where no
    host issues it): a kernel starts at ``max(the kernel before it ends, its issue)``, so a
    pass the host issued more slowly than the GPU ran it shows its kernels spread out, each
    after its launch (:mod:`echo_view.sim.host`), not back to back with the stream idle at
    its end. The delay of a kernel carries over to every later kernel of its pass."""
    if not len(fstart):
        return fstart
    late = np.maximum(np.where(issued >= 0, issued - fstart, 0), 0)
    # A running maximum within each pass: each pass's ranks of the values (not the values,
    # which could overflow) offset above every earlier pass's.
    values, rank = np.unique(late, return_inverse=True)
    base = np.repeat(np.arange(len(lengths), dtype=np.int64) * len(values), lengths)
    delay = values[np.maximum.accumulate(rank.reshape(-1) + base) - base]
    return np.asarray(fstart + delay, dtype=np.int64)


def _issue_times(
    comp: Composed, res: SimResult, ex: I64, lengths: I64, idx: I64, costs: I64
) -> I64:
    """When the host issued each fine op of the coarse ops ``ex`` (``idx``: their rows in
    the tables' flat arrays): its coarse op's host op's start plus the issue costs up to and
    including it; -1 for coarse ops no host op issued."""
    h = comp.dispatch[ex]
    c = costs[idx]
    run = np.cumsum(c)  # inclusive, over every pass; each pass's own from its head on
    heads = np.cumsum(lengths) - lengths  # every pass holds at least one op
    within = run - np.repeat(run[heads] - c[heads], lengths)
    host = np.where(h >= 0, res.start_ns[np.maximum(h, 0)], NONE)
    issued = np.repeat(host, lengths) + within
    return np.where(np.repeat(h, lengths) >= 0, issued, NONE).astype(np.int64)


#: Name of the lane that shows a rank's collectives that ran beside a GEMM of its compute
#: stream (NCCL runs them on a stream of its own).
BESIDE_LANE = "collectives beside GEMMs"


def draw_beside(
    beside: I64,
    alone: I64,
    solo: I64,
    row: I64,
    table: I64,
    lane: I64,
    start: I64,
    dur: I64,
    slows: npt.NDArray[np.bool_] | None = None,
) -> npt.NDArray[np.bool_]:
    """Draw each collective that ran beside a GEMM as it ran. The pass holds such a collective
    (``beside``: its GEMM's row, else -1) as the share of its time the GEMM did not hide
    (``solo``: the kernels' times before the pass was stretched), after the GEMM or before it;
    here it starts where the pair starts and lasts its own time (``alone``). The ops between the
    two keep their place beside the GEMM; when the GEMM, not the collective, ends the pair
    and the collective slows it (``slows``, default all: NCCL's,
    :func:`~echo_view.sim.tp_overlap.nccl_beside_gemm_ns`), the GEMM lasts that share longer;
    else the share stays idle (userbuffers' pipelines: their fill and drain). ``start`` and
    ``dur`` (kernels in program order: each row's table, row and lane) are changed in place;
    returns which kernels are such collectives (drawn on a lane of their own)."""
    moved = np.zeros(len(start), dtype=bool)
    p = np.flatnonzero(beside >= 0)
    q = p + (beside[p] - row[p])
    ok = (q >= 0) & (q < len(start))
    p, q = p[ok], q[ok]
    ok = (row[q] == beside[p]) & (table[q] == table[p]) & (lane[q] == lane[p])
    p, q = p[ok], q[ok]
    if not len(p):
        return moved
    gemm_first = q < p
    a = np.where(gemm_first, start[q], start[p])
    end = np.maximum(start[p] + dur[p], start[q] + dur[q])
    share = dur[p].copy()
    gemm_bound = alone[p] < solo[p] + solo[q]
    if slows is not None:
        gemm_bound &= slows[p]
    # GEMM first: the ops between it and the collective's share move behind the slowed GEMM.
    # Collective first: they and the GEMM move up to the pair's start.
    shift = np.where(gemm_first, np.where(gemm_bound, share, 0), -share)
    apart, lo = np.abs(q - p), np.minimum(p, q)
    for k in range(1, int(apart.max())):
        sel = k < apart
        start[lo[sel] + k] += shift[sel]
    start[q[~gemm_first]] -= share[~gemm_first]
    dur[q[gemm_bound]] += share[gemm_bound]
    start[p], dur[p] = a, np.minimum(alone[p], end - a)
    moved[p] = True
    return moved


def _beside_lanes(local: I64, rows: I64, lanes: tuple[Lane, ...]) -> tuple[I64, tuple[Lane, ...]]:
    """``local`` (each event's lane) with ``rows`` moved to a :data:`BESIDE_LANE` of their
    device next to ``lanes`` (one per lane they were on), and the lanes with those added."""
    local = local.copy()
    streams = [ln.stream for ln in lanes if ln.kind == LaneKind.GPU_STREAM]
    stream = max(streams, default=0) + 1
    extra: list[Lane] = []
    for src in np.unique(local[rows]).tolist():
        at = rows[local[rows] == src]
        g = lanes[src]
        local[at] = len(lanes) + len(extra)
        s = stream + len(extra)
        extra.append(
            Lane(LaneKind.GPU_STREAM, g.pid, s, f"stream {s} ({BESIDE_LANE})", g.device, s)
        )
    return local, lanes + tuple(extra)


def _instances(
    wl: Workload, mine: list[int], src_op: I64, is_coll: npt.NDArray[np.bool_]
) -> tuple[tuple[ProcessGroup, ...], I64, I64]:
    """A rank's process groups (``mine``: their ids, ascending) and (group, seq) of each
    collective row, so that exports link one instance across its ranks: a row is the instance
    of its source op when that op is a workload collective and the row is its (first)
    collective kernel; else both are -1."""
    local = np.full(len(wl.groups) + 1, NONE, dtype=np.int64)
    local[mine] = np.arange(len(mine))
    c = np.where(is_coll, wl.ops.coll[src_op], NONE).astype(np.int64)
    first = np.zeros(len(c), dtype=bool)
    _, at = np.unique(src_op, return_index=True)
    first[at] = True
    c[~first] = NONE
    ok = c >= 0
    group = np.full(len(c), NONE, dtype=np.int64)
    seq = np.full(len(c), NONE, dtype=np.int64)
    group[ok] = local[wl.collectives.group[c[ok]]]
    seq[ok] = np.where(group[ok] >= 0, wl.collectives.seq[c[ok]], NONE)
    return tuple(wl.groups[g] for g in mine), group, seq


def predicted_config_job(sim: ConfigSimulation, ranks: Sequence[int] | None = None) -> Job:
    """The simulated step as a Job: each coarse pass is expanded back into its kernels (they
    ran back to back on the compute stream, so their times follow exactly from the pass's
    start; a pass slowed by interference stretches them evenly to its simulated end), the
    kernel-to-kernel gap shown as idle time. A kernel also waits for the host to have issued
    it (:func:`issued_starts`), so a pass the host issued more slowly than the GPU ran it
    shows its kernels spread out over its host-bound time (the zero-length tail ops that hold
    the stream to that end are left out)."""
    comp, res, wl = sim.composed, sim.result, sim.composed.workload
    tables = comp.tables
    gap = sim.params.kernel_gap_ns
    # One flat array of every table's fine ops.
    sizes = np.array([len(t.table) for t in tables], dtype=np.int64)
    toff = np.concatenate([[0], np.cumsum(sizes)]) if len(tables) else np.zeros(1, np.int64)
    all_dur = np.concatenate([t.dur_ns for t in tables]) if tables else np.zeros(0, np.int64)
    all_cls = np.concatenate([t.table.op_class for t in tables]) if tables else all_dur
    all_bytes = np.concatenate([t.table.coll_bytes for t in tables]) if tables else all_dur
    all_kind = np.concatenate([t.table.coll_kind for t in tables]) if tables else all_dur
    all_tid = np.repeat(np.arange(len(tables)), sizes)
    all_beside = np.concatenate([t.beside for t in tables]) if tables else all_dur
    all_slows = (
        np.concatenate([t.slows_gemm for t in tables]) if tables else np.zeros(0, dtype=bool)
    )
    all_alone = np.concatenate([t.alone_ns for t in tables]) if tables else all_dur
    # Host time of issuing each fine op (its kernel's launch), as the composer charged it.
    costs = (
        np.concatenate([sim.host.issue_ns(t.fills, t.waits) for t in tables]) if tables else all_dur
    )
    strings = StringTable(wl.strings.strings)
    # Fine names: graph names, collectives renamed to NCCL kernels (DeepEP's, for its ops).
    coll_name = {int(k): strings.intern(v) for k, v in NCCL_KERNEL.items()}
    deepep = {
        strings.intern(op): strings.intern(kernel)
        for op, kernel in deepep_kernels(sim.cfg, sim.cluster).items()
    }
    all_name = (
        np.concatenate([t.table.name for t in tables]).astype(np.int64) if tables else all_dur
    )
    is_coll_fine = all_cls == OpClass.COLLECTIVE
    if is_coll_fine.any():
        all_name = all_name.copy()
        all_name[is_coll_fine] = [
            deepep.get(int(n)) or coll_name.get(int(k), int(n))
            for k, n in zip(all_kind[is_coll_fine], all_name[is_coll_fine], strict=True)
        ]
    expanded = comp.src_table >= 0
    tail = strings.intern(HOST_TAIL)
    traces = []
    lanes_of: dict[int, list[int]] = {}
    for li, r in enumerate(wl.lane_rank.tolist()):
        lanes_of.setdefault(int(r), []).append(li)
    strings.intern("kernel")
    name_kind = np.full(len(strings), int(CollectiveKind.UNKNOWN), dtype=np.int64)
    for sid, text in enumerate(strings.strings):
        name_kind[sid] = _coll_kind_of(text)
    wanted = list(comp.simulated_ranks if ranks is None else ranks)
    # Each rank's ops, and the process groups it is in, from one sort each (a pass over every
    # op, or every group, per rank was quadratic in the ranks).
    ops_of = dict(groups(wl.ops.rank))
    members = np.fromiter(chain.from_iterable(pg.ranks for pg in wl.groups), dtype=np.int64)
    owner = np.repeat(np.arange(len(wl.groups)), [len(pg.ranks) for pg in wl.groups])
    keep = np.isin(members, wanted)
    owner = owner[keep]
    groups_of = {r: owner[sel].tolist() for r, sel in groups(members[keep])}
    no_ops = np.empty(0, dtype=np.intp)
    kind_cat = np.array([strings.intern(k.label) for k in EventKind], dtype=np.int64)
    for r in wanted:
        mine = ops_of.get(r, no_ops)
        # Coarse ops kept as they are (transfers, bucket reductions, markers, the host).
        keep = mine[~expanded[mine] & (wl.ops.name[mine] != tail)]
        # Coarse ops expanded into fine kernels.
        ex = mine[expanded[mine] & (comp.src_hi[mine] > comp.src_lo[mine])]
        lo, hi = comp.src_lo[ex], comp.src_hi[ex]
        lengths = hi - lo
        total = int(lengths.sum())
        heads = np.cumsum(lengths) - lengths  # index of each group's first fine op
        idx = np.repeat(toff[comp.src_table[ex]] + lo - heads, lengths) + np.arange(total)
        fcls = all_cls[idx]
        fstart, fdur = expanded_times(
            res.start_ns[ex], res.end_ns[ex], lengths, all_dur[idx], fcls == OpClass.COLLECTIVE
        )
        fstart = issued_starts(fstart, lengths, _issue_times(comp, res, ex, lengths, idx, costs))
        flane = np.repeat(wl.ops.lane[ex], lengths).astype(np.int64)
        moved = draw_beside(
            all_beside[idx],
            all_alone[idx],
            all_dur[idx],
            idx - toff[all_tid[idx]],
            all_tid[idx],
            flane,
            fstart,
            fdur,
            all_slows[idx],
        )
        shown = np.where(fcls == OpClass.COLLECTIVE, fdur, np.maximum(fdur - gap, 0))
        start = np.concatenate([res.start_ns[keep], fstart])
        dur = np.concatenate([res.end_ns[keep] - res.start_ns[keep], shown])
        name = np.concatenate([wl.ops.name[keep].astype(np.int64), all_name[idx]])
        kind = np.concatenate(
            [
                wl.ops.kind[keep].astype(np.int64),
                np.full(total, int(EventKind.KERNEL), dtype=np.int64),
            ]
        )
        lane_global = np.concatenate([wl.ops.lane[keep], flane])
        my_lanes = lanes_of[int(r)]  # ascending: a lane's place in it is its local id
        local_lane = np.searchsorted(my_lanes, lane_global)
        lanes = tuple(wl.lanes[li] for li in my_lanes)
        if moved.any():
            local_lane, lanes = _beside_lanes(local_lane, len(keep) + np.flatnonzero(moved), lanes)
        order = np.lexsort((start, local_lane))
        n = len(order)
        events = EventTable(
            kind=kind[order],
            start_ns=start[order],
            dur_ns=dur[order],
            name=name[order],
            # Each kind under its own category, as TraceBuilder writes it: the host's dispatch
            # and syncs written as "kernel" were read back from an export as a GPU's kernels.
            cat=kind_cat[kind[order]],
            lane=local_lane[order],
            correlation=np.full(n, NONE, dtype=np.int64),
            external_id=np.full(n, NONE, dtype=np.int64),
        )
        # Collectives: the fine collective kernels and the coarse transfer/bucket ops.
        ev_name = events.name
        coll_rows = np.flatnonzero(name_kind[ev_name] != int(CollectiveKind.UNKNOWN))
        fine_bytes = np.concatenate([comp.op_bytes[keep], all_bytes[idx]])[order][coll_rows]
        src_op = np.concatenate([keep, np.repeat(ex, lengths)])[order][coll_rows]
        fine_coll = np.concatenate([np.ones(len(keep), bool), fcls == OpClass.COLLECTIVE])
        pgs, group, seq = _instances(
            wl, groups_of.get(int(r), []), src_op, fine_coll[order][coll_rows]
        )
        colls = CollectiveTable(
            event=coll_rows,
            kind=name_kind[ev_name[coll_rows]],
            bytes=fine_bytes,
            dtype=np.full(len(coll_rows), NONE),
            group=group,
            seq=seq,
            algorithm=np.full(len(coll_rows), NONE),
            protocol=np.full(len(coll_rows), NONE),
        )
        end = int((events.start_ns + events.dur_ns).max()) if n else 0
        # The step ends with the rank's last op, a host-bound tail's end included (not drawn:
        # a zero-length op ending where the host's last issue lets its pass end).
        host_end = max(end, int(res.end_ns[mine].max()) if len(mine) else 0)
        one = np.ones(1, dtype=np.int64)
        steps = StepTable(
            number=one * 0, start_ns=one * 0, end_ns=one * host_end, gpu_end_ns=one * end
        )
        meta: dict[str, Any] = {
            "simulated": True,
            "world_size": wl.world_size,
            "source_format": "echo-view simulation",
        }
        traces.append(
            Trace(
                rank=r,
                source="simulated",
                strings=strings,
                events=events,
                lanes=lanes,
                collectives=colls,
                groups=pgs,
                steps=steps,
                metadata=meta,
            )
        )
    return Job(
        traces=tuple(traces),
        alignment=ClockAlignment("simulated", tuple(0 for _ in traces), 0, "one simulated clock"),
        world_size=wl.world_size,
        source="simulated",
        predicted=True,
        meta={"simulated": True, "ranks_simulated": len(traces)},
    )
