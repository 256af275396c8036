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
from echo_view.sim.compute_presets import gemm_shape_params_for
from echo_view.sim.gemm_shape import gemm_dims, gemm_times_ns
from echo_view.sim.kernel_cost import ComputeParams, op_times_ns, peak_for
from echo_view.sim.layout import Layout

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


def _peaks(graph: TracedGraph, table: OpTable, cfg: WorkloadConfig, cluster: Cluster) -> Any:
    names = graph.strings
    peaks = np.empty(len(table), dtype=np.float64)
    cache: dict[int, float] = {}
    for i, d in enumerate(table.dtype.tolist()):
        if d not in cache:
            cache[d] = peak_for(cluster.gpu, names[d] if d >= 0 else "fp32")
        peaks[i] = cache[d]
    if cfg.dtype == "fp8":
        # fp8 training runs its GEMMs at the fp8 rate; everything else stays in bf16.
        peaks[table.op_class == OpClass.GEMM] = peak_for(cluster.gpu, "fp8")
    return peaks


def _gemm_math_ns(
    graph: TracedGraph, table: OpTable, cfg: WorkloadConfig, cluster: Cluster
) -> npt.NDArray[np.float64]:
    """Shape-model math time of each GEMM whose shape and GPU/dtype constants are known (NaN
    elsewhere). Distinct (name, shapes, dtype) triples are few, so each is computed once."""
    out = np.full(len(table), np.nan)
    names = graph.strings
    gpu = cluster.gpu
    memo: dict[tuple[int, int, int], float] = {}
    for i in np.flatnonzero(table.op_class == OpClass.GEMM).tolist():
        key = (int(table.name[i]), int(table.shapes[i]), int(table.dtype[i]))
        t = memo.get(key)
        if t is None:
            t = np.nan
            # fp8 training runs its GEMMs in fp8 (see _peaks); other ops keep their dtype.
            dtype = "fp8" if cfg.dtype == "fp8" else (names[key[2]] if key[2] >= 0 else "fp32")
            params = gemm_shape_params_for(gpu, dtype)
            dims = gemm_dims(names[key[0]], names[key[1]]) if key[1] >= 0 else None
            if params is not None and dims is not None:
                peak = peak_for(gpu, dtype)
                t = float(gemm_times_ns(np.array([dims]), peak, gpu.sm_count, params)[0])
            memo[key] = t
        out[i] = t
    return out


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
) -> TableCost:
    """Durations of ``table``'s ops when run by ``rank``; ``scales`` multiplies the compute
    time of op classes (what-if: ``compute.scale.gemm=0.5``)."""
    dur = op_times_ns(
        table.op_class,
        table.flops,
        table.bytes,
        _peaks(graph, table, cfg, cluster),
        cluster.gpu,
        params,
        _gemm_math_ns(graph, table, cfg, cluster) if params.gemm_shape_model else None,
    )
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
    dur.flags.writeable = False
    return TableCost(table, dur, is_coll)
