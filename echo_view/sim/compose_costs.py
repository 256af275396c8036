"""Durations of a traced graph's ops on a cluster: compute ops from the kernel cost model,
collectives from the communication model (for the groups a representative rank belongs to)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from echo_view.model.config import WorkloadConfig
from echo_view.model.graph import AXES, OpClass, OpTable, TracedGraph
from echo_view.model.kinds import CollectiveKind
from echo_view.sim.cluster import Cluster
from echo_view.sim.comm import CommModel
from echo_view.sim.kernel_cost import ComputeParams, op_times_ns, peak_for
from echo_view.sim.layout import Layout
from echo_view.sim.tp_overlap import PIPELINE_SPLITS, overlap_tp_comm

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class TableCost:
    """Per-op durations of one op table, with where collectives sit."""

    table: OpTable
    dur_ns: I64
    coll: npt.NDArray[np.bool_]

    @property
    def total_ns(self) -> int:
        return int(self.dur_ns.sum())


class CollectiveCache:
    """Collective times by (kind, bytes, ranks): a layout repeats the same few calls."""

    def __init__(self, comm: CommModel, cluster: Cluster, scale: float = 1.0) -> None:
        self.comm = comm
        self.cluster = cluster
        self.scale = scale
        self._memo: dict[tuple[int, int, tuple[int, ...]], int] = {}

    def time_ns(self, kind: CollectiveKind, nbytes: int, ranks: tuple[int, ...]) -> int:
        key = (int(kind), int(nbytes), ranks)
        t = self._memo.get(key)
        if t is None:
            raw = self.comm.collective_time_ns(kind, int(nbytes), ranks, self.cluster)
            t = round(raw * self.scale)
            self._memo[key] = t
        return t


def _peaks(graph: TracedGraph, table: OpTable, cluster: Cluster) -> Any:
    """Each op's peak FLOP/s from its recorded dtype (the tracer records the GEMMs of FP8
    linear layers as ``fp8``; everything else keeps its tensor dtype)."""
    names = graph.strings
    peaks = np.empty(len(table), dtype=np.float64)
    cache: dict[int, float] = {}
    for i, d in enumerate(table.dtype.tolist()):
        if d not in cache:
            cache[d] = peak_for(cluster.gpu, names[d] if d >= 0 else "fp32")
        peaks[i] = cache[d]
    return peaks


def table_cost(
    graph: TracedGraph,
    table: OpTable,
    cfg: WorkloadConfig,
    cluster: Cluster,
    params: ComputeParams,
    colls: CollectiveCache,
    layout: Layout,
    rank: int,
    scales: Mapping[int, float] | None = None,
    *,
    backward: bool = False,
) -> TableCost:
    """Durations of ``table``'s ops when run by ``rank`` (``backward``: a backward pass);
    ``scales`` multiplies the compute time of op classes (what-if: ``compute.scale.gemm=0.5``).
    With ``tp_comm_overlap`` a tensor-parallel collective lasts only what its GEMM cannot
    hide (:mod:`echo_view.sim.tp_overlap`)."""
    peaks = _peaks(graph, table, cluster)
    dur = op_times_ns(table.op_class, table.flops, table.bytes, peaks, cluster.gpu, params)
    if scales:
        factor = np.ones(len(dur))
        for cls, k in scales.items():
            factor[table.op_class == cls] = k
        dur = np.rint(dur * factor).astype(np.int64)
    is_coll = table.op_class == OpClass.COLLECTIVE
    for i in np.flatnonzero(is_coll).tolist():
        axis = AXES[int(table.axis[i])]
        ranks = layout.group(axis, rank) if axis != "none" else (rank,)
        dur[i] = colls.time_ns(table.coll(i), int(table.coll_bytes[i]), ranks)
    p = cfg.parallel
    if p.tp_comm_overlap and p.tp > 1:
        tp_ranks = layout.group("tp", rank)
        chunks = {
            i: colls.time_ns(
                CollectiveKind.REDUCE_SCATTER, int(table.coll_bytes[i]) // PIPELINE_SPLITS, tp_ranks
            )
            for i in np.flatnonzero(
                is_coll & (table.coll_kind == CollectiveKind.REDUCE_SCATTER)
            ).tolist()
        }
        m = cfg.model
        tokens = m.seq_len // p.cp * cfg.batch.micro
        dur = overlap_tp_comm(
            table,
            dur,
            peaks,
            cluster.gpu,
            params,
            chunks,
            tp=p.tp,
            sm_count=cluster.gpu.sm_count,
            backward=backward,
            # The output layer's weight is vocab / tp rows (rounded up when tied to the
            # embedding's shard).
            output_gemm_flops=frozenset(
                2.0 * tokens * m.hidden * rows for rows in (m.vocab // p.tp, -(-m.vocab // p.tp))
            ),
        )
    dur.flags.writeable = False
    return TableCost(table, dur, is_coll)
