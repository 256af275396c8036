"""Compose a traced graph, a parallel layout and a pipeline schedule into a :class:`Workload`.

Per simulated rank there are three GPU lanes: the compute stream (forward and backward passes,
tensor-parallel collectives, which Megatron-LM runs on the compute stream, and the optimizer),
a pipeline stream (activation / gradient transfers from the neighbouring stage) and a
data-parallel stream (gradient buckets, when their reduction overlaps the backward pass).

Symmetry rule (``ranks="stages"``): ranks that differ only in their tensor-, context- or
data-parallel index run identical programs on identically sized data and, with a topology
where every such group is placed alike, reach each collective at the same instant. So one rank
per pipeline stage is simulated, a collective's time comes straight from the communication
model, and a pass is one op (exact: its ops run back to back on one stream with nothing outside
waiting in between). ``ranks="all"`` builds every rank with every op and real collectives that
wait for their last participant; tests check both give the same step time without
interference (with it, passes and kernels are slowed at their own granularity).

Data-parallel gradients: with ``overlap_grad_reduce`` the gradients of each model chunk are
reduced in buckets (``ddp_bucket_size`` parameters, by default Megatron's ``max(40e6, 1e6 *
dp)``) as soon as the chunk's last backward pass has produced them, on the data-parallel
stream; otherwise all of them after the last backward, on the compute stream. The reduction
is an all-reduce, or a reduce-scatter with the distributed optimizer (whose updated parameters
are then all-gathered: after the optimizer on the compute stream, or with
``overlap_param_gather`` bucket by bucket on the data-parallel stream, each bucket before the
first forward pass that uses it).
Gradients are reduced in the main-gradient dtype (:func:`grad_reduce_bytes`). With
``[parallel] fsdp`` PyTorch FSDP's gathers and reduce-scatters replace these
(:mod:`echo_view.sim.fsdp`): with pp = 1 as a program of its own, with pipeline parallelism
around each chunk's passes in the schedule.
With tied embeddings and pp > 1 the word-embedding gradient is all-reduced between the first
and the last stage after the data-parallel reduction, before the optimizer (Megatron-LM's
``_allreduce_word_embedding_grads``). A graph traced from a script that runs on several
streams (FSDP2, DDP) keeps its own streams and waits (:mod:`echo_view.sim.streams`). With the
interleaved schedule and ``overlap_p2p_comm``
off, a stage's send blocks it: the transfer starts when the receiver has finished its previous
pass and the sender's next pass waits for the transfer's end.

Host path (:mod:`echo_view.sim.host`): each simulated rank has a host thread that issues its
kernels, ``host.kernel_us`` apiece, in program order; a kernel starts no earlier than its
issue. The host waits for its GPU to drain after each batched pipeline transfer
(``batch_p2p_sync``) and before the optimizer update when the optimizer reads a gradient
statistic on the host (``[training]``). With ``kernel_us`` 0 there is no host path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from echo_view.errors import ConfigError
from echo_view.model.aten_ops import HOST_WAIT
from echo_view.model.collectives import collective
from echo_view.model.config import WorkloadConfig, ddp_bucket_params, grad_reduce_bytes
from echo_view.model.dtypes import dtype_bytes
from echo_view.model.graph import AXES, OpClass, TracedGraph
from echo_view.model.kinds import CollectiveKind, EventKind, LaneKind
from echo_view.model.strings import StringTable
from echo_view.model.trace import NONE, Lane, ProcessGroup
from echo_view.model.workload import (
    CollectiveSpecs,
    DepKind,
    DepMode,
    DepTable,
    OpTable,
    StepMarks,
    Workload,
)
from echo_view.sim.compose_costs import CollectiveCache, TableCost, table_cost, time_cuts
from echo_view.sim.engine import check_durations
from echo_view.sim.fsdp import FsdpRank
from echo_view.sim.host import HostParams, PipeSyncs, crosses_stage, issue_span_ns
from echo_view.sim.host_loops import HostLoops
from echo_view.sim.layout import Layout
from echo_view.sim.moe import deepep_kernels
from echo_view.sim.schedule import blocking_p2p_calls, schedule
from echo_view.sim.streams import StreamRank, uses_streams

COMPUTE_STREAM, PIPE_STREAM, DP_STREAM = 7, 20, 24
#: Name of a simulated rank's host thread and of its synchronising call.
HOST_THREAD, HOST_SYNC = "host (dispatch)", "cudaDeviceSynchronize"
#: A zero-length op after a coarse op whose last kernel the host issues late (see
#: ``_Composer.issue``).
HOST_TAIL = "host-bound tail"
#: Largest workload ``ranks="all"`` builds (op-per-kernel on every rank grows fast): about
#: 10 µs and 0.7 KB an op, so at most about 100 s and 7 GB. The Megatron-LM CI tp1-pp1 sample
#: on 8,192 GPUs (9.1 M ops, 93-101 s and 6.4 GB: docs/performance.md) fits; at 20 M, a
#: 4-layer model on 30,000 GPUs passed the bound and ran past 90 s and 5 GB.
MAX_ALL_RANK_OPS = 10_000_000
#: Largest step (traced ops per micro-batch over the stages, times the micro-batches) that
#: ``ranks="stages"`` builds: 13x the largest shipped config (GPT-175B on 96 GPUs with 1,536
#: micro-batches, 7.3 M, which simulates in 2.4 s and 355 MB), so a few GB and about a minute;
#: 10,000 layers with 8,192 micro-batches (5 G) exhausted a 24 GB machine before this bound.
MAX_STEP_OPS = 100_000_000
#: Kernel names for the collectives a composed workload runs (NCCL >= 2.19 naming); the
#: point-to-point kind first, so that a SendRecv kernel reads back as send/recv.
NCCL_KERNEL = {
    k: f"ncclDevKernel_{collective(k).kernel}"
    for k in (
        CollectiveKind.ALL_REDUCE,
        CollectiveKind.ALL_GATHER,
        CollectiveKind.REDUCE_SCATTER,
        CollectiveKind.SEND_RECV,
        CollectiveKind.ALL_TO_ALL,
        CollectiveKind.BROADCAST,
    )
}


@dataclass
class _Cols:
    rank: list[int] = field(default_factory=list)
    lane: list[int] = field(default_factory=list)
    kind: list[int] = field(default_factory=list)
    op_class: list[int] = field(default_factory=list)
    name: list[int] = field(default_factory=list)
    dur: list[int] = field(default_factory=list)
    coll: list[int] = field(default_factory=list)
    # Fine expansion of coarse ops: (table key, first fine op, end fine op), else (-1, 0, 0).
    src_table: list[int] = field(default_factory=list)
    src_lo: list[int] = field(default_factory=list)
    src_hi: list[int] = field(default_factory=list)
    # Payload of a coarse collective (a bucket reduction, a transfer), else NONE.
    nbytes: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class _DpPlan:
    """How one rank reduces its gradients over the data- and context-parallel ranks; an MoE
    model's expert gradients (``expert_share`` of each bucket, with ``expert_group`` the
    expert data-parallel ranks) go over the expert data-parallel group instead."""

    group: tuple[int, ...]
    red_kind: CollectiveKind
    red_bytes: int
    overlap: bool
    bucket_params: int
    expert_group: tuple[int, ...] = ()
    expert_share: float = 0.0

    def reductions(
        self, params: int, what: str = "grads"
    ) -> list[tuple[int, tuple[int, ...], str]]:
        """``(parameters, group, label)`` of the collectives over ``params`` parameters'
        ``what`` (gradients, or the distributed optimizer's gathered parameters): the dense
        part over the data-parallel group, the expert part over the expert data-parallel group
        (none over a group of one rank)."""
        expert = round(params * self.expert_share)
        out = [(params - expert, self.group, what), (expert, self.expert_group, f"expert {what}")]
        return [(n, g, label) for n, g, label in out if n > 0 and len(g) > 1]


@dataclass(frozen=True, eq=False)
class Composed:
    """A composed workload, the durations to run it with, and how to expand coarse ops."""

    workload: Workload
    dur_ns: npt.NDArray[np.int64]
    coll_dur_ns: npt.NDArray[np.int64]
    tables: tuple[TableCost, ...]
    src_table: npt.NDArray[np.int64]
    src_lo: npt.NDArray[np.int64]
    src_hi: npt.NDArray[np.int64]
    microbatches: int
    simulated_ranks: tuple[int, ...]
    #: Per table: whether it is a forward or backward pass (not the optimizer's).
    pass_tables: npt.NDArray[np.bool_]
    #: Per op: a coarse collective's payload (bucket reductions, transfers), else NONE.
    op_bytes: npt.NDArray[np.int64]
    #: Per op: the host op that issued a coarse op's kernels, kernel ``j`` once the host op's
    #: first ``j + 1`` issue costs have passed (:meth:`_Composer.issue`), else NONE.
    dispatch: npt.NDArray[np.int64]


class _Composer:
    def __init__(
        self,
        graph: TracedGraph,
        cfg: WorkloadConfig,
        costs: dict[tuple[int, str, int], TableCost],
        colls: CollectiveCache,
        layout: Layout,
        fine: bool,
        host: HostParams,
    ) -> None:
        self.graph, self.cfg, self.costs, self.colls = graph, cfg, costs, colls
        self.layout, self.fine = layout, fine
        self.host, self.host_ns = host, host.kernel_ns
        self._issue_costs: dict[int, npt.NDArray[np.int64]] = {}
        self._one_kernel = np.array([self.host_ns], dtype=np.int64)
        # Per rank: its host thread's lane; per GPU lane: its last op (what a sync waits for).
        self.host_lane: dict[int, int] = {}
        self.lane_last: dict[int, int] = {}
        self.gpu_lanes: dict[int, list[int]] = {}
        self.spans: dict[tuple[int, int, int], int] = {}
        # Host-path edges: (src, dst, mode, lag).
        self.host_edges: list[tuple[int, int, int, int]] = []
        # Coarse op -> the host op that issues its kernels.
        self.dispatch: dict[int, int] = {}
        self.strings = StringTable(graph.strings.strings)
        self.c = _Cols()
        self.lanes: list[Lane] = []
        self.lane_rank: list[int] = []
        self.edges: list[tuple[int, int]] = []
        self.pending: list[tuple[tuple[int, bool, int, int], int]] = []
        self.pass_end: dict[tuple[int, bool, int, int], int] = {}
        self.groups: list[ProcessGroup] = []
        self.group_ids: dict[tuple[int, ...], int] = {}
        self.coll_rows: list[tuple[int, int, int, int]] = []  # kind, bytes, group, seq
        self.coll_dur: list[int] = []
        self.coll_ids: dict[tuple[int, int], int] = {}  # (group, seq) -> row
        self.seq: dict[tuple[int, int], int] = {}  # (rank, group) -> next seq
        self.tables: list[TableCost] = []
        self.table_ids: dict[int, int] = {}
        self.step_markers: list[tuple[int, int]] = []
        # Blocking p2p (no overlap_p2p_comm): a pass key -> the end of the pass after which its
        # output is sent (its p2p call) and the sender's first op after that call.
        self.send_end: dict[tuple[int, bool, int, int], int] = {}
        self.next_op: dict[tuple[int, bool, int, int], int] = {}
        self.blocking = cfg.parallel.virtual_stages > 1 and not cfg.parallel.overlap_p2p_comm
        self.dp = _DpPlan((), CollectiveKind.ALL_REDUCE, 2, False, 1)  # set per rank
        self.dp_pending: list[int] = []
        self.deepep = deepep_kernels(cfg, colls.cluster)

    # -- helpers ---------------------------------------------------------------------------
    def lane(self, rank: int, stream: int, name: str) -> int:
        device = rank % self.colls.cluster.gpus_per_node
        self.lanes.append(Lane(LaneKind.GPU_STREAM, device, stream, name, device, stream))
        self.lane_rank.append(rank)
        self.gpu_lanes.setdefault(rank, []).append(len(self.lanes) - 1)
        return len(self.lanes) - 1

    def host_thread(self, rank: int) -> None:
        """Give ``rank`` a host thread (when there is a host path)."""
        if not self.host_ns:
            return
        device = rank % self.colls.cluster.gpus_per_node
        self.lanes.append(Lane(LaneKind.CPU_THREAD, device, 0, HOST_THREAD, device))
        self.lane_rank.append(rank)
        self.host_lane[rank] = len(self.lanes) - 1

    def issue_costs(self, tc: TableCost) -> npt.NDArray[np.int64]:
        """The host time of issuing each row of ``tc`` (:meth:`HostParams.issue_ns`; memoised
        per table)."""
        key = id(tc)
        costs = self._issue_costs.get(key)
        if costs is None:
            costs = self._issue_costs[key] = self.host.issue_ns(tc.fills, tc.waits)
        return costs

    def tail_lag(self, tid: int, tc: TableCost, lo: int, hi: int) -> int:
        """For ops ``lo:hi`` of table ``tid`` as one coarse op: how long after the host has
        issued them all their last kernel ends at the earliest (their
        :func:`~echo_view.sim.host.issue_span_ns` less the issue time), or -1 when the host
        path cannot end them later than their first issue and GPU time do (memoised: a step
        runs the same passes many times)."""
        key = (tid, lo, hi)
        lag = self.spans.get(key)
        if lag is None:
            dur, costs = tc.dur_ns[lo:hi], self.issue_costs(tc)[lo:hi]
            span = issue_span_ns(dur, costs)
            first = int(costs[0]) if len(costs) else 0
            lag = span - int(costs.sum()) if span > first + int(dur.sum()) else -1
            self.spans[key] = lag
        return lag

    def issue(
        self,
        rank: int,
        first: int,
        last: int,
        costs: npt.NDArray[np.int64] | None = None,
        tail_lag: int = -1,
    ) -> int:
        """The host issuing GPU ops ``first..last`` (ids, one stream), which run kernels in
        order costing the host ``costs`` each (one kernel at ``kernel_us`` when ``None``): one
        host op of their launches; each fine op starts after its kernel's issue. A coarse op
        (``first == last``) starts after its first kernel's issue; when the host path ends
        its kernels later than that and their GPU time (``tail_lag`` >= 0, from
        :meth:`tail_lag`), it is followed on its stream by a zero-length :data:`HOST_TAIL` op
        that ends there (a hold on the op's own end would keep interference from rating it).
        Returns the op that ends the run."""
        lane = self.host_lane.get(rank)
        if costs is None:
            costs = self._one_kernel
        if lane is None or not len(costs):
            return last
        issued = np.cumsum(costs)
        h = self.op(rank, lane, "dispatch", int(issued[-1]), kind=EventKind.CPU_OP, issue=False)
        start = int(DepMode.START_TO_START)
        if first != last:
            for j, op in enumerate(range(first, last + 1)):
                self.host_edges.append((h, op, start, int(issued[j])))
            return last
        self.host_edges.append((h, first, start, int(issued[0])))
        self.dispatch[first] = h
        if tail_lag < 0:
            return last
        gpu_lane = self.c.lane[first]
        tail = self.op(rank, gpu_lane, HOST_TAIL, 0, kind=EventKind.GPU_ANNOTATION, issue=False)
        self.host_edges.append((h, tail, int(DepMode.END_TO_START), tail_lag))
        return tail

    def host_sync(self, rank: int, stream: int | None = None) -> None:
        """The host waits until every GPU stream of ``rank`` has drained (only ``stream``, a
        GPU lane, when given)."""
        lane = self.host_lane.get(rank)
        if lane is None:
            return
        name = HOST_SYNC if stream is None else HOST_WAIT
        sync = self.op(rank, lane, name, 0, kind=EventKind.RUNTIME, issue=False)
        for gpu_lane in self.gpu_lanes[rank] if stream is None else (stream,):
            last = self.lane_last.get(gpu_lane)
            if last is not None:
                self.edges.append((last, sync))

    def op(
        self,
        rank: int,
        lane: int,
        name: str,
        dur: int,
        *,
        cls: int = OpClass.OTHER,
        kind: EventKind = EventKind.KERNEL,
        coll: int = NONE,
        src: tuple[int, int, int] = (-1, 0, 0),
        issue: bool = True,
        nbytes: int = NONE,
    ) -> int:
        """Append one op (``nbytes``: a collective's payload); a kernel the host issues
        (``issue``) gets its host op after it."""
        c = self.c
        c.rank.append(rank)
        c.lane.append(lane)
        c.kind.append(int(kind))
        c.op_class.append(cls)
        c.name.append(self.strings.intern(name))
        c.dur.append(dur)
        c.coll.append(coll)
        c.src_table.append(src[0])
        c.src_lo.append(src[1])
        c.src_hi.append(src[2])
        c.nbytes.append(nbytes)
        i = len(c.rank) - 1
        if self.lanes[lane].kind == LaneKind.GPU_STREAM:
            self.lane_last[lane] = i
            if issue and kind == EventKind.KERNEL:
                self.issue(rank, i, i)
        return i

    def table_id(self, tc: TableCost) -> int:
        key = id(tc)
        if key not in self.table_ids:
            self.table_ids[key] = len(self.tables)
            self.tables.append(tc)
        return self.table_ids[key]

    def collective(
        self, rank: int, kind: CollectiveKind, nbytes: int, ranks: tuple[int, ...], dur: int
    ) -> int:
        gid = self.group_ids.get(ranks)
        if gid is None:
            gid = len(self.groups)
            self.groups.append(ProcessGroup(f"g{gid}", ranks))
            self.group_ids[ranks] = gid
        seq = self.seq.get((rank, gid), 0)
        self.seq[(rank, gid)] = seq + 1
        row = self.coll_ids.get((gid, seq))
        if row is None:
            row = len(self.coll_rows)
            self.coll_rows.append((int(kind), nbytes, gid, seq))
            self.coll_dur.append(dur)
            self.coll_ids[(gid, seq)] = row
        return row

    def comm_op(
        self,
        rank: int,
        lane: int,
        kind: CollectiveKind,
        nbytes: int,
        group: tuple[int, ...],
        what: str,
    ) -> int:
        """A data-parallel collective of ``nbytes`` over ``group`` on ``lane``, timed by the
        communication model (a lane op: ranks of the group run it alike)."""
        dur = self.colls.time_ns(kind, nbytes, group)
        name = f"{NCCL_KERNEL[kind]} ({what})"
        return self.op(rank, lane, name, dur, cls=OpClass.COLLECTIVE, nbytes=nbytes)

    # -- passes ----------------------------------------------------------------------------
    def emit_table(self, rank: int, lane: int, tc: TableCost, label: str, lo: int, hi: int) -> int:
        """Ops ``lo:hi`` of ``tc`` on ``lane``; returns the id of the op that ends them (the
        last, or its host-bound tail: :meth:`issue`). Where a row is a host wait
        (:attr:`TableCost.waits`) the host waits for ``lane`` to drain before it issues the
        rest."""
        waits = [w for w in tc.wait_rows if lo <= w < hi] if rank in self.host_lane else []
        if not waits:
            return self.emit_run(rank, lane, tc, label, lo, hi)
        end, start = -1, lo
        for w in [*waits, hi]:
            if w > start:
                end = self.emit_run(rank, lane, tc, label, start, w)
            if w < hi:
                self.host_sync(rank, lane)
            start = w + 1
        return end if end >= 0 else self.emit_run(rank, lane, tc, label, lo, hi)

    def emit_run(self, rank: int, lane: int, tc: TableCost, label: str, lo: int, hi: int) -> int:
        """:meth:`emit_table` of rows ``lo:hi`` that hold no host wait."""
        tid = self.table_id(tc)
        if not self.fine:
            total = tc.total_ns if lo == 0 and hi == len(tc.table) else int(tc.dur_ns[lo:hi].sum())
            op = self.op(rank, lane, label, total, src=(tid, lo, hi), issue=False)
            costs = self.issue_costs(tc)[lo:hi]
            return self.issue(rank, op, op, costs, self.tail_lag(tid, tc, lo, hi))
        t = tc.table
        first, last = len(self.c.rank), -1
        for i in range(lo, hi):
            if tc.coll[i]:
                last = self.collective_row(rank, lane, tc, tid, i, issue=False)
                continue
            last = self.op(
                rank,
                lane,
                self.graph.strings[int(t.name[i])],
                int(tc.dur_ns[i]),
                cls=int(t.op_class[i]),
                src=(tid, i, i + 1),
                issue=False,
            )
        return self.issue(rank, first, last, self.issue_costs(tc)[lo:hi])

    def collective_row(
        self, rank: int, lane: int, tc: TableCost, tid: int, i: int, *, issue: bool = True
    ) -> int:
        """Row ``i`` of ``tc``, a collective, as one op named as its kernel (NCCL's, or
        DeepEP's), matched across ranks when every rank is simulated; returns its id."""
        t = tc.table
        name = self.graph.strings[int(t.name[i])]
        coll = NONE
        if self.fine:
            ranks = self.layout.group(AXES[int(t.axis[i])], rank)
            coll = self.collective(rank, t.coll(i), int(t.coll_bytes[i]), ranks, int(tc.dur_ns[i]))
        return self.op(
            rank,
            lane,
            self.deepep.get(name) or NCCL_KERNEL.get(t.coll(i), name),
            int(tc.dur_ns[i]),
            cls=OpClass.COLLECTIVE,
            coll=coll,
            src=(tid, i, i + 1),
            issue=issue,
        )

    def bucket_cuts(self, tc: TableCost, bucket_bytes: int) -> list[int]:
        """Op indices after which a gradient bucket is complete (ascending, last = len)."""
        grad = np.cumsum(tc.table.grad_bytes)
        total = int(grad[-1]) if len(grad) else 0
        cuts: list[int] = []
        target = bucket_bytes
        while target < total:
            cuts.append(int(np.searchsorted(grad, target)) + 1)
            target += bucket_bytes
        cuts.append(len(tc.table))
        return sorted(set(cuts))

    def param_gather_forward(
        self,
        rank: int,
        lanes: tuple[int, int],
        tc: TableCost,
        label: str,
        params: int,
        bucket_params: int,
        ag: tuple[int, tuple[int, ...]],
        dispatched: list[int] | None = None,
    ) -> tuple[int, int]:
        """The first forward pass of a chunk with ``overlap_param_gather``: its parameters
        arrive in buckets all-gathered on the data-parallel lane; the pass is cut into as many
        pieces (equal shares of its time: parameters are spread evenly over its layers), piece
        ``i`` waits for bucket ``i``, and bucket ``i`` is dispatched when piece ``i - 1``
        starts (Megatron's forward pre-hook prefetches the next bucket), or, given
        ``dispatched`` (``align_param_gather``: one gather a bucket, in order), was dispatched
        by the schedule before. Returns the first and the last op of the pass."""
        comp, dpl = lanes
        cuts, dur, nbytes = self.bucket_plan(tc, params, bucket_params, ag)
        lo, first = 0, -1
        ends: list[int] = []
        for k, hi in enumerate(cuts):
            if dispatched is None:
                gather = self.bucket_gather(rank, dpl, label, k, dur, nbytes)
                if k >= 2:
                    self.edges.append((ends[k - 2], gather))
            else:
                gather = dispatched[k]
            piece_first = len(self.c.rank)
            ends.append(self.emit_table(rank, comp, tc, f"{label} part {k}", lo, hi))
            self.edges.append((gather, piece_first))
            first = piece_first if first < 0 else first
            lo = hi
        return first, ends[-1]

    def bucket_plan(
        self, tc: TableCost, params: int, bucket_params: int, ag: tuple[int, tuple[int, ...]]
    ) -> tuple[list[int], int, int]:
        """A chunk's forward pass ``tc`` cut into one piece per parameter bucket, and one
        bucket's all-gather time and bytes (``ag``: element bytes and the data-parallel
        group)."""
        elem_bytes, group = ag
        cuts = time_cuts(tc, max(1, -(-params // bucket_params)))
        nbytes = params // len(cuts) * elem_bytes
        return cuts, self.colls.time_ns(CollectiveKind.ALL_GATHER, nbytes, group), nbytes

    def bucket_gather(self, rank: int, dpl: int, label: str, k: int, dur: int, nbytes: int) -> int:
        """The all-gather of parameter bucket ``k`` of the chunk pass ``label``."""
        name = f"{NCCL_KERNEL[CollectiveKind.ALL_GATHER]} (params {label} bucket {k})"
        return self.op(rank, dpl, name, dur, cls=OpClass.COLLECTIVE, nbytes=nbytes)

    def last_backward(
        self, rank: int, lanes: tuple[int, int], tc: TableCost, label: str, g: int, grad_b: int
    ) -> int:
        """The last backward pass of global chunk ``g``: its gradients complete bucket by
        bucket, each reduced on the data-parallel lane with ``overlap_grad_reduce`` (the
        reductions are left in ``dp_pending``). Returns the pass's last op."""
        comp, dpl = lanes
        dp = self.dp
        self.dp_pending = []
        bucket_bytes = dp.bucket_params * grad_b if dp.overlap else 1 << 62
        lo, end = 0, -1
        for k, hi in enumerate(self.bucket_cuts(tc, bucket_bytes)):
            end = self.emit_table(rank, comp, tc, f"{label} part {k}", lo, hi)
            grads = int(tc.table.grad_bytes[lo:hi].sum()) // grad_b
            lo = hi
            if not dp.overlap or grads == 0:
                continue
            for n, group, what in dp.reductions(grads):
                dur = self.colls.time_ns(dp.red_kind, n * dp.red_bytes, group)
                name = f"{NCCL_KERNEL[dp.red_kind]} ({what} chunk {g})"
                op = self.op(rank, dpl, name, dur, cls=OpClass.COLLECTIVE, nbytes=n * dp.red_bytes)
                self.edges.append((end, op))
                self.dp_pending.append(op)
        return end

    def rank_program(self, rank: int, m: int) -> None:
        cfg, p, lay = self.cfg, self.cfg.parallel, self.layout
        stage = lay.coords(rank)[0]
        role_idx = next(i for i, r in enumerate(self.graph.roles) if stage in r.stages)
        role = self.graph.roles[role_idx]
        comp = self.lane(rank, COMPUTE_STREAM, f"stream {COMPUTE_STREAM} (compute)")
        pipe = self.lane(rank, PIPE_STREAM, f"stream {PIPE_STREAM} (pipeline)")
        dpl = self.lane(rank, DP_STREAM, f"stream {DP_STREAM} (data parallel)")
        self.host_thread(rank)
        marker = self.op(rank, comp, "ProfilerStep#0", 0, kind=EventKind.GPU_ANNOTATION)
        self.step_markers.append((rank, marker))
        fsdp = FsdpRank(self, rank, role_idx, (comp, dpl)) if p.fsdp != "none" else None
        if fsdp is not None and p.pp == 1:  # its own program: per-unit gathers, reductions
            fsdp.run(m)
            return
        if uses_streams((*role.forward, *role.backward, role.optimizer)):
            # A traced script's streams and waits (its collectives are all in the graph).
            StreamRank(self, rank, role_idx, comp).run(m)
            return
        # Gradients (and the distributed optimizer's shards) span the data- and
        # context-parallel ranks: context-parallel ranks hold the same weights.
        dp_group = lay.group("dp_cp", rank)
        # MoE experts: their gradients and optimizer shards span the expert data-parallel
        # ranks (Megatron-Core's expert_data_parallel_group).
        experts = int(self.graph.meta.get("expert_params", {}).get(str(role.stages[0]), 0))
        edp_group = lay.group("edp", rank) if experts else ()
        # A graph traced from a script holds every collective its step runs (DDP, FSDP):
        # none is added here.
        grad_ranks = (
            1 if self.graph.meta.get("explicit_comm") else max(len(dp_group), len(edp_group))
        )
        red_bytes = grad_reduce_bytes(cfg)
        overlap = p.overlap_grad_reduce and grad_ranks > 1
        gather_early = p.distributed_optimizer and p.overlap_param_gather and grad_ranks > 1
        gathered: set[int] = set()
        bucket_params = ddp_bucket_params(p, grad_ranks)
        red_kind = (
            CollectiveKind.REDUCE_SCATTER if p.distributed_optimizer else CollectiveKind.ALL_REDUCE
        )
        share = experts / role.params if role.params else 0.0
        self.dp = _DpPlan(dp_group, red_kind, red_bytes, overlap, bucket_params, edp_group, share)
        # Activations and parameters travel in 16 bits when GEMMs run in fp8.
        elem_bytes = dtype_bytes("bf16" if cfg.dtype == "fp8" else cfg.dtype) or 2
        act_bytes = (
            (cfg.model.seq_len // p.cp) * cfg.batch.micro * cfg.model.hidden * elem_bytes // p.tp
        )
        dp_ops: list[int] = []
        last_bwd_mb = m - 1
        others = lay.coords(rank)[1:]
        syncs = PipeSyncs(p, stage)
        # The gradient tensors this rank's optimizer steps: a shard of them when it is sharded.
        loops = HostLoops(self, rank, role_idx, dp_group if p.distributed_optimizer else ())
        passes = schedule(stage, p.pp, m, p.virtual_stages, p.microbatch_group)
        ag = (elem_bytes, dp_group)

        def chunk_params(chunk: int) -> int:
            bwd = self.costs[(role_idx, "backward", chunk)].table
            return int(bwd.grad_bytes.sum()) // role.grad_dtype_bytes

        def dispatch(chunk: int) -> None:
            tc = self.costs[(role_idx, "forward", chunk)]
            label = f"forward chunk {chunk * p.pp + stage}"
            cuts, dur, nbytes = self.bucket_plan(tc, chunk_params(chunk), bucket_params, ag)
            dispatched[chunk] = [
                self.bucket_gather(rank, dpl, label, k, dur, nbytes) for k in range(len(cuts))
            ]

        # align_param_gather: Megatron-Core's interleaved schedule dispatches whole chunks'
        # parameter gathers itself: chunks 0 and 1 before the first forward, chunk k + 1 before
        # the forward of the virtual micro-batch that is ``stage`` ahead of chunk k's first
        # (``forward_step_helper_preprocess``), so that every stage dispatches it at once.
        dispatched: dict[int, list[int]] = {}
        dispatch_at: dict[int, int] = {}
        if gather_early and p.virtual_stages > 1 and p.align_param_gather:
            firsts: dict[int, int] = {}
            for i, fwd in enumerate(x for x in passes if x.forward):
                firsts.setdefault(fwd.chunk, i)
            dispatch_at = {
                f - stage: k + 1 for k, f in firsts.items() if 1 < k + 1 < p.virtual_stages
            }
            for chunk in (0, 1):
                dispatch(chunk)
        forwards = 0
        # Blocking p2p: after which passes the batched send/receive call comes, each pass's
        # first and last op, and the last pass followed by a call.
        calls = (
            blocking_p2p_calls(stage, p.pp, m, p.virtual_stages, p.microbatch_group)
            if self.blocking
            else []
        )
        starts: list[int] = []
        ends: list[int] = []
        keys: list[tuple[int, bool, int, int]] = []
        last_call = -1
        for i, ps in enumerate(passes):
            g = ps.chunk * p.pp + stage
            tc = self.costs[(role_idx, "forward" if ps.forward else "backward", ps.chunk)]
            label = f"{'forward' if ps.forward else 'backward'} chunk {g} mb {ps.microbatch}"
            # The activation (forward) or its gradient (backward) from the neighbouring stage.
            peer_g = g - 1 if ps.forward else g + 1
            xfer = None
            if crosses_stage(g, peer_g - g, stage, p):
                peer_rank = lay.rank(peer_g % p.pp, *others)
                t = self.colls.time_ns(CollectiveKind.SEND_RECV, act_bytes, (peer_rank, rank))
                xfer = self.op(
                    rank,
                    pipe,
                    f"ncclDevKernel_SendRecv ({'act' if ps.forward else 'grad'} {ps.microbatch})",
                    t,
                    cls=OpClass.COLLECTIVE,
                    nbytes=act_bytes,
                )
                self.pending.append(((peer_rank, ps.forward, peer_g, ps.microbatch), xfer))
            if not ps.forward:
                loops.backward_starts()
            if syncs.before(ps):
                self.host_sync(rank)
            if ps.forward:
                if forwards in dispatch_at:
                    dispatch(dispatch_at[forwards])
                forwards += 1
            first_op = len(self.c.rank)
            if self.blocking and xfer is not None and last_call >= 0:
                # Rendezvous: the receiver posts its receive in its call after pass
                # ``last_call``, which then blocks it until the transfer is done.
                self.edges.append((ends[last_call], xfer))
                if last_call + 1 < i:
                    self.edges.append((xfer, starts[last_call + 1]))
            if fsdp is not None:  # the chunk's gathers and reduce-scatters, unit by unit
                last = not ps.forward and ps.microbatch == last_bwd_mb
                first_op, end = fsdp.chunk_pass(tc, label, ps.forward, ps.chunk, last)
            elif gather_early and ps.forward and g not in gathered:
                gathered.add(g)
                first_op, end = self.param_gather_forward(
                    rank,
                    (comp, dpl),
                    tc,
                    label,
                    chunk_params(ps.chunk),
                    bucket_params,
                    ag,
                    dispatched.get(ps.chunk),
                )
            elif ps.forward or ps.microbatch != last_bwd_mb or grad_ranks == 1:
                end = self.emit_table(rank, comp, tc, label, 0, len(tc.table))
            else:
                end = self.last_backward(rank, (comp, dpl), tc, label, g, role.grad_dtype_bytes)
                dp_ops += self.dp_pending
            if xfer is not None:
                self.edges.append((xfer, first_op))
            key = (rank, ps.forward, g, ps.microbatch)
            self.pass_end[key] = end
            starts.append(first_op)
            ends.append(end)
            keys.append(key)
            if calls and calls[i]:
                last_call = i
        after = len(self.c.rank)
        for i, key in enumerate(keys if calls else ()):
            # The call that sends this pass's output; the sender goes on when it is done.
            at = i if calls[i] else i + 1
            self.send_end[key] = ends[at]
            self.next_op[key] = starts[at + 1] if at + 1 < len(starts) else after
        if syncs.at_end:
            self.host_sync(rank)
        if fsdp is not None:
            if fsdp.last_comm >= 0:
                dp_ops.append(fsdp.last_comm)
        elif grad_ranks > 1 and not overlap:
            for n, group, what in self.dp.reductions(role.params):
                dp_ops.append(self.comm_op(rank, comp, red_kind, n * red_bytes, group, what))
        tied = self.tied_embedding_reduce(rank, comp, stage, red_bytes)
        opt_tc = self.costs[(role_idx, "optimizer", 0)]
        loops.before_optimizer()
        first_opt = len(self.c.rank)
        self.emit_table(rank, comp, opt_tc, "optimizer", 0, len(opt_tc.table))
        loops.after_optimizer()
        for op in dp_ops:
            if int(self.c.lane[op]) != comp:
                self.edges.append((op, tied if tied >= 0 else first_opt))
        if p.distributed_optimizer and grad_ranks > 1 and not gather_early and fsdp is None:
            for n, group, what in self.dp.reductions(role.params, "params"):
                self.comm_op(rank, comp, CollectiveKind.ALL_GATHER, n * elem_bytes, group, what)
        loops.step_ends()

    def tied_embedding_reduce(self, rank: int, comp: int, stage: int, red_bytes: int) -> int:
        """The all-reduce of the tied word-embedding gradient between the first and the last
        pipeline stage (same tensor/context/data-parallel index), on the compute stream; its
        op id, or -1 when the model has no such pair."""
        cfg, lay = self.cfg, self.layout
        p, mod = cfg.parallel, cfg.model
        if not mod.tie_embeddings or p.pp == 1 or stage not in (0, p.pp - 1):
            return -1
        _, dp_i, cp_i, tp_i = lay.coords(rank)
        ranks = (lay.rank(0, dp_i, cp_i, tp_i), lay.rank(p.pp - 1, dp_i, cp_i, tp_i))
        nbytes = -(-mod.vocab // p.tp) * mod.hidden * red_bytes
        kind = CollectiveKind.ALL_REDUCE
        dur = self.colls.time_ns(kind, nbytes, ranks)
        coll = self.collective(rank, kind, nbytes, ranks, dur)
        return self.op(
            rank,
            comp,
            f"{NCCL_KERNEL[kind]} (embedding grads)",
            dur,
            cls=OpClass.COLLECTIVE,
            coll=coll,
            nbytes=nbytes,
        )

    def resolve(self) -> None:
        for key, dst in self.pending:
            src = (self.send_end if self.blocking else self.pass_end).get(key)
            if src is None:
                continue
            self.edges.append((src, dst))
            if self.blocking and key in self.next_op:
                self.edges.append((dst, self.next_op[key]))


def micro_batch_ops(graph: TracedGraph) -> int:
    """The ops one micro-batch's forward and backward passes run over every pipeline stage
    of ``graph`` (times the micro-batches: the ops of a simulated step, less the optimizer)."""
    return sum(
        (len(r.forward[c]) + len(r.backward[c])) * len(r.stages)
        for r in graph.roles
        for c in range(len(r.forward))
    )


def too_large_to_simulate(graph: TracedGraph, cfg: WorkloadConfig) -> bool:
    """Whether a step of ``cfg`` would run more than :data:`MAX_STEP_OPS` ops, which
    :func:`compose` refuses."""
    return micro_batch_ops(graph) * cfg.micro_batches > MAX_STEP_OPS


def role_costs(
    graph: TracedGraph,
    cfg: WorkloadConfig,
    colls: CollectiveCache,
    compute_params: Any,
    scales: Mapping[int, float] | None = None,
    gemm_slowdown: Callable[[float], float] | None = None,
) -> dict[tuple[int, str, int], TableCost]:
    """Durations of every op table of ``graph`` on ``cfg``'s layout, keyed ``(role, phase,
    chunk)`` (phase ``forward``, ``backward`` or ``optimizer``, chunk 0), each timed for the
    role's first stage's rank; ``gemm_slowdown`` as :func:`table_cost` takes it."""
    layout = Layout.of(cfg.parallel)
    cluster = colls.cluster
    costs: dict[tuple[int, str, int], TableCost] = {}
    for ri, role in enumerate(graph.roles):
        rep = layout.rank(role.stages[0])
        for phase, tables in (("forward", role.forward), ("backward", role.backward)):
            for chunk, t in enumerate(tables):
                costs[(ri, phase, chunk)] = table_cost(
                    graph,
                    t,
                    cfg,
                    cluster,
                    compute_params,
                    colls,
                    layout,
                    rep,
                    scales,
                    backward=phase == "backward",
                    gemm_slowdown=gemm_slowdown,
                )
        costs[(ri, "optimizer", 0)] = table_cost(
            graph, role.optimizer, cfg, cluster, compute_params, colls, layout, rep, scales
        )
    return costs


def compose(
    graph: TracedGraph,
    cfg: WorkloadConfig,
    colls: CollectiveCache,
    compute_params: Any,
    *,
    ranks: str = "stages",
    scales: Mapping[int, float] | None = None,
    host: HostParams | None = None,
    gemm_slowdown: Callable[[float], float] | None = None,
) -> Composed:
    """Build the workload of one training step of ``cfg`` (see the module docstring);
    ``host`` (default: :class:`HostParams` ()) times the host path; ``gemm_slowdown(g)`` is how
    much slower a GEMM of ``g`` ns runs beside a collective (:func:`role_costs`)."""
    p = cfg.parallel
    if ranks not in ("stages", "all"):
        raise ConfigError(f"--ranks must be 'stages' or 'all', got {ranks!r}")
    layout = Layout.of(p)
    sim_ranks = (
        tuple(range(layout.world)) if ranks == "all" else tuple(layout.rank(s) for s in range(p.pp))
    )
    per_step = micro_batch_ops(graph)
    if per_step * cfg.micro_batches > MAX_STEP_OPS:  # checked before any cost is computed
        raise ConfigError(
            f"one step would simulate about {per_step * cfg.micro_batches:,} ops "
            f"({per_step:,} a micro-batch over the stages, {cfg.micro_batches:,} micro-batches)",
            path=cfg.source or None,
            hint=f"echo-view simulates up to {MAX_STEP_OPS:,}: fewer layers per stage or "
            "micro-batches (a larger micro-batch, more data parallelism)",
        )
    costs = role_costs(graph, cfg, colls, compute_params, scales, gemm_slowdown)
    if ranks == "all":
        estimate = per_step * cfg.micro_batches * layout.world // max(p.pp, 1)
        if estimate > MAX_ALL_RANK_OPS:
            raise ConfigError(
                f"--ranks all would simulate about {estimate:,} ops",
                hint=f"use --ranks stages (exact for this layout), or a config under "
                f"{MAX_ALL_RANK_OPS:,} ops",
            )
    comp = _Composer(graph, cfg, costs, colls, layout, ranks == "all", host or HostParams())
    m = cfg.micro_batches
    for r in sim_ranks:
        comp.rank_program(r, m)
    comp.resolve()
    passes = {id(tc) for (_, phase, _), tc in costs.items() if phase in ("forward", "backward")}
    c = comp.c
    n = len(c.rank)
    check_durations(
        np.array(c.dur, dtype=np.int64),
        np.array(comp.coll_dur, dtype=np.int64),
        hint="a config whose step lasts that long (model.seq_len, batch.micro, layers) is no "
        "training job: check its sizes, or lower --set compute.scale.* / comm.scale",
        path=cfg.source or None,
    )
    edges = [(a, b, int(DepMode.END_TO_START), 0) for a, b in comp.edges] + comp.host_edges
    cols = np.array(edges, dtype=np.int64).reshape(-1, 4)
    deps = DepTable.from_edges(
        n, cols[:, 0], cols[:, 1], cols[:, 2], cols[:, 3], np.full(len(cols), int(DepKind.DATA))
    )
    none = np.full(n, NONE, dtype=np.int64)
    ops = OpTable(
        rank=np.array(c.rank),
        lane=np.array(c.lane),
        kind=np.array(c.kind),
        op_class=np.array(c.op_class),
        name=np.array(c.name),
        dur_ns=np.array(c.dur),
        gap_ns=np.zeros(n, dtype=np.int64),
        release_ns=none,
        step=np.zeros(n, dtype=np.int64),
        coll=np.array(c.coll),
        source=none,
    )
    dispatch = np.full(n, NONE, dtype=np.int64)
    if comp.dispatch:
        dispatch[np.fromiter(comp.dispatch, np.int64)] = np.fromiter(
            comp.dispatch.values(), np.int64
        )
    rows = comp.coll_rows
    colls_spec = (
        CollectiveSpecs(
            kind=np.array([r[0] for r in rows], dtype=np.int64),
            bytes=np.array([r[1] for r in rows], dtype=np.int64),
            group=np.array([r[2] for r in rows], dtype=np.int64),
            seq=np.array([r[3] for r in rows], dtype=np.int64),
            measured_ns=np.full(len(rows), NONE, dtype=np.int64),
        )
        if rows
        else CollectiveSpecs.empty()
    )
    steps = StepMarks(
        rank=np.array([r for r, _ in comp.step_markers]),
        number=np.zeros(len(comp.step_markers), dtype=np.int64),
        marker=np.array([mk for _, mk in comp.step_markers]),
    )
    wl = Workload(
        strings=comp.strings,
        lanes=tuple(comp.lanes),
        lane_rank=np.array(comp.lane_rank),
        ops=ops,
        deps=deps,
        collectives=colls_spec,
        groups=tuple(comp.groups),
        steps=steps,
        ranks=sim_ranks,
        world_size=layout.world,
        meta={"source": "traced-graph"},
    )
    return Composed(
        workload=wl,
        dur_ns=np.array(c.dur, dtype=np.int64),
        coll_dur_ns=np.array(comp.coll_dur, dtype=np.int64),
        tables=tuple(comp.tables),
        src_table=np.array(c.src_table, dtype=np.int64),
        src_lo=np.array(c.src_lo, dtype=np.int64),
        src_hi=np.array(c.src_hi, dtype=np.int64),
        microbatches=m,
        simulated_ranks=sim_ranks,
        pass_tables=np.array([id(t) in passes for t in comp.tables], dtype=bool),
        op_bytes=np.array(c.nbytes, dtype=np.int64),
        dispatch=dispatch,
    )
