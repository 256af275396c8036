"""Durations of a traced graph's ops on a cluster: compute ops from the kernel cost model,
collectives from the communication model (for the groups a representative rank belongs to)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import cached_property, lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt

from echo_view.model.aten_ops import (
    DETERMINISTIC_FILL,
    HOST_WAIT,
    attention_flops,
    gemm_dims,
    op_class,
)
from echo_view.model.attention_kernels import efficiency, resolve_kernel
from echo_view.model.config import WorkloadConfig
from echo_view.model.graph import AXES, OpClass, OpTable, TracedGraph, parse_shapes_text
from echo_view.model.kinds import CollectiveKind
from echo_view.model.moe_config import MoEConfig
from echo_view.sim.cluster import Cluster
from echo_view.sim.comm import CommModel, NcclModel, model_for_library
from echo_view.sim.comm.deepep import DeepEPModel
from echo_view.sim.comm.routing import routed_time_ns
from echo_view.sim.compute_presets import gemm_shape_params_for
from echo_view.sim.deterministic import dp_workspace_bytes
from echo_view.sim.gemm_shape import gemm_times_ns
from echo_view.sim.kernel_cost import ComputeParams, op_times_ns, peak_for
from echo_view.sim.layout import Layout
from echo_view.sim.moe import A2A_PHASES, busiest_rank_share
from echo_view.sim.tp_overlap import WGRAD_GATHER, overlap_linear_backward, overlap_tp_comm
from echo_view.units import float_ns

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class TableCost:
    """Per-op durations of one op table, with where collectives sit."""

    table: OpTable
    dur_ns: I64
    coll: npt.NDArray[np.bool_]
    #: Rows that fill a new buffer inside an allocation (deterministic algorithms): the host
    #: issues them without Python (:attr:`~echo_view.sim.host.HostParams.fill_us`).
    fills: npt.NDArray[np.bool_]
    #: Rows where the host waits for the GPU (:data:`~echo_view.model.aten_ops.HOST_WAIT`):
    #: no kernel, nothing issued.
    waits: npt.NDArray[np.bool_]
    #: Per row: for a collective that runs beside a GEMM (its :attr:`dur_ns` is what the GEMM
    #: does not hide), that GEMM's row; else -1.
    beside: I64
    #: Per row: a collective's own running time, which for a row :attr:`beside` a GEMM is
    #: longer than its :attr:`dur_ns` (timelines draw it so, beside the GEMM); else ``dur_ns``.
    alone_ns: I64
    #: Per row: a collective beside a GEMM through NCCL, which slows the GEMM while it lasts
    #: (:func:`~echo_view.sim.tp_overlap.nccl_beside_gemm_ns`); userbuffers' are not.
    slows_gemm: npt.NDArray[np.bool_]

    @cached_property
    def wait_rows(self) -> tuple[int, ...]:
        """The rows of :attr:`waits`, ascending (computed once)."""
        return tuple(np.flatnonzero(self.waits).tolist())

    @cached_property
    def total_ns(self) -> int:
        """The sum of the durations (computed once: a composer reads it for every pass)."""
        return int(self.dur_ns.sum())


def time_cuts(tc: TableCost, pieces: int) -> list[int]:
    """Op indices that end ``pieces`` consecutive parts of ``tc`` of about equal time
    (ascending, distinct, the last = ``len``): a pass split where its layers would split it
    when their parameters are spread evenly. Fewer parts when the table has fewer ops."""
    cum = np.cumsum(tc.dur_ns)
    total = int(cum[-1]) if len(cum) else 0
    n = len(tc.table)
    cuts = {min(int(np.searchsorted(cum, total * (k + 1) / pieces)) + 1, n) for k in range(pieces)}
    return sorted(cuts | {n})


#: Message size past which a collective's time grows at its bus bandwidth alone (NCCL runs
#: Simple on every channel from well below 1 GiB; docs/comm-model.md).
STREAM_REF_BYTES = 1 << 30


class CollectiveCache:
    """Collective times by (kind, bytes, ranks): a layout repeats the same few calls."""

    def __init__(self, comm: CommModel, cluster: Cluster, scale: float = 1.0) -> None:
        self.comm = comm
        self.cluster = cluster
        self.scale = scale
        self._memo: dict[tuple[int, int, tuple[int, ...]], int] = {}
        self._routed: dict[tuple[str, int, tuple[int, ...], MoEConfig], int] = {}

    def routed_ns(self, name: str, nbytes: int, ranks: tuple[int, ...], moe: MoEConfig) -> int:
        """An MoE dispatch or combine (graph op ``name``, :data:`~echo_view.sim.moe.A2A_PHASES`)
        of ``nbytes`` routed token copies per rank over the EP group ``ranks``: the all-to-allv
        of :func:`~echo_view.sim.comm.routing.routed_time_ns` with the busiest expert at the
        config's imbalance, so that it ends with the slowest rank; by DeepEP's model for the
        ``deepep`` dispatcher (a token once per destination rank and node, from ``top_k`` and
        the node limit). A model without an all-to-allv (alpha-beta) times an even all-to-all
        of what the slowest rank receives."""
        key = (name, int(nbytes), ranks, moe)
        t = self._routed.get(key)
        if t is None:
            library, phase = A2A_PHASES[name]
            model = model_for_library(library, self.comm)
            if isinstance(model, (NcclModel, DeepEPModel)):
                raw = routed_time_ns(
                    model,
                    nbytes,
                    ranks,
                    self.cluster,
                    moe.experts,
                    moe.imbalance,
                    phase,
                    top_k=moe.top_k,
                    node_limit=moe.moe_node_limit,
                )
            else:
                share = busiest_rank_share(moe.experts, len(ranks), moe.imbalance)
                received = round(nbytes * len(ranks) * share)
                raw = model.collective_time_ns(
                    CollectiveKind.ALL_TO_ALL, received, ranks, self.cluster
                )
            t = self._routed[key] = round(raw * self.scale)
        return t

    def streaming_ns(self, kind: CollectiveKind, nbytes: int, ranks: tuple[int, ...]) -> float:
        """``nbytes`` of a ``kind`` collective over ``ranks`` at the rate the model streams
        large messages, without its per-call latency: the slope of the model's time between
        :data:`STREAM_REF_BYTES` and twice that (the bus bandwidth term alone, for the NCCL and
        alpha-beta models). Transformer Engine's userbuffers move tensor-parallel chunks so:
        their buffers are registered once and no NCCL call is made per chunk."""
        lo = self.time_ns(kind, STREAM_REF_BYTES, ranks)
        hi = self.time_ns(kind, 2 * STREAM_REF_BYTES, ranks)
        return nbytes * max(hi - lo, 0) / STREAM_REF_BYTES

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


def _gemm_math_one(
    graph: TracedGraph, gpu: Any, key: tuple[int, int, int], rows: int, ceiling: bool
) -> float:
    """Shape-model math time (ns) of one GEMM ``(name, shapes, dtype)`` string ids, its rows
    (M) split ``rows`` ways; NaN when its shape or the GPU/dtype constants are unknown.
    ``ceiling``: no faster than the best measured rate (``compute.gemm_shape_ceiling``)."""
    names = graph.strings
    dtype = names[key[2]] if key[2] >= 0 else "fp32"
    shapes = names[key[1]] if key[1] >= 0 else None
    return _gemm_math_text(gpu, names[key[0]], shapes, dtype, rows, ceiling)


@lru_cache(maxsize=4096)
def _gemm_math_text(
    gpu: Any, name: str, shapes_text: str | None, dtype: str, rows: int, ceiling: bool
) -> float:
    """:func:`_gemm_math_one` by the GEMM's strings: the layouts of a search repeat the same
    few GEMMs, each worked out once per process."""
    params = gemm_shape_params_for(gpu, dtype)
    shapes = parse_shapes_text(shapes_text) if shapes_text is not None else None
    dims = gemm_dims(name, shapes) if shapes is not None else None
    if params is None or dims is None:
        return float("nan")
    if not ceiling:
        params = replace(params, best_frac=1.0)
    b, m, n, k = dims.batch, dims.m, dims.n, dims.k
    chunk = np.array([(b, -(-m // rows), n, k)])
    return float(gemm_times_ns(chunk, peak_for(gpu, dtype), gpu.sm_count, params)[0])


def _gemm_key(table: OpTable, i: int) -> tuple[int, int, int]:
    return int(table.name[i]), int(table.shapes[i]), int(table.dtype[i])


def _gemm_math_ns(
    graph: TracedGraph, table: OpTable, cluster: Cluster, ceiling: bool
) -> npt.NDArray[np.float64]:
    """Shape-model math time of each GEMM whose shape and GPU/dtype constants are known (NaN
    elsewhere), in the dtype it was traced in (the linear layers' GEMMs of fp8 training are
    traced as ``fp8``). Distinct (name, shapes, dtype) triples are few: each is computed once."""
    out = np.full(len(table), np.nan)
    memo: dict[tuple[int, int, int], float] = {}
    for i in np.flatnonzero(table.op_class == OpClass.GEMM).tolist():
        key = _gemm_key(table, i)
        if key not in memo:
            memo[key] = _gemm_math_one(graph, cluster.gpu, key, 1, ceiling)
        out[i] = memo[key]
    return out


#: Tensor dtypes the attention kernel tables were measured in (fp8 training keeps attention
#: in bf16; a recorded fp8 attention runs no faster in this model).
_ATTN_DTYPES = frozenset({"fp16", "bf16", "fp8"})


@lru_cache(maxsize=4096)
def _attn_math_text(
    gpu: Any, kernel: str, name: str, shapes_text: str | None, dtype: str, flops: float
) -> float:
    """Math time (ns) of one fused attention op from the measured speed of ``kernel`` on the
    GPU's architecture; NaN when its shapes or a measured series are missing. The op's
    arguments are ``[batch, heads, seq, head_dim]`` tensors, q and k first (after the output
    gradient in a backward); the mask is causal when the recorded FLOPs are half the full
    ``q x k`` product's; the series is read at the key length (the kernel's inner loop)."""
    shapes = parse_shapes_text(shapes_text) if shapes_text is not None else None
    backward = name.endswith(("_bwd", "_backward"))
    qk = (shapes[1:3] if backward else shapes[0:2]) if shapes is not None else []
    if dtype not in _ATTN_DTYPES or len(qk) < 2 or any(len(t) != 4 for t in qk):
        return float("nan")
    (b, h, s_q, d), s_k = qk[0], qk[1][2]
    full = attention_flops(b, h, s_q, s_k, d, causal=False, backward=backward)
    if full <= 0 or flops <= 0:
        return float("nan")
    causal = flops < 0.75 * full
    eff = efficiency(gpu.arch, kernel, backward=backward, causal=causal, head_dim=d, seq=s_k)
    if eff is None:
        return float("nan")
    return flops / (eff * peak_for(gpu, "bf16")) * 1e9


def _attn_math_ns(
    graph: TracedGraph, table: OpTable, cluster: Cluster, kernel: str
) -> npt.NDArray[np.float64]:
    """Measured-kernel math time of each fused attention op (NaN elsewhere and where the GPU's
    architecture has no measured series: those keep the FLOP form)."""
    out = np.full(len(table), np.nan)
    names = graph.strings
    for i in np.flatnonzero(table.op_class == OpClass.ATTENTION).tolist():
        sid, did = int(table.shapes[i]), int(table.dtype[i])
        out[i] = _attn_math_text(
            cluster.gpu,
            kernel,
            names[int(table.name[i])],
            names[sid] if sid >= 0 else None,
            names[did] if did >= 0 else "fp32",
            float(table.flops[i]),
        )
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
    *,
    backward: bool = False,
    gemm_slowdown: Callable[[float], float] | None = None,
) -> TableCost:
    """Durations of ``table``'s ops when run by ``rank`` (``backward``: a backward pass);
    ``scales`` multiplies the compute time of op classes (what-if: ``compute.scale.gemm=0.5``).
    With ``tp_comm_overlap`` a tensor-parallel collective lasts only what its GEMM cannot
    hide; a column-parallel linear's backward collectives run beside its GEMMs in any case,
    the GEMM slowed ``gemm_slowdown(g)``-fold while they last (none when ``None``;
    :mod:`echo_view.sim.tp_overlap`)."""
    peaks = _peaks(graph, table, cluster)
    shape_model = bool(params.gemm_shape_model)
    ceiling = bool(params.gemm_shape_ceiling)
    math = _gemm_math_ns(graph, table, cluster, ceiling) if shape_model else None
    if params.attn_kernel_model:
        kernel = resolve_kernel(cfg.model.attention_kernel, cluster.gpu.arch)
        attn = _attn_math_ns(graph, table, cluster, kernel)
        math = attn if math is None else np.where(np.isfinite(attn), attn, math)
    dur = op_times_ns(table.op_class, table.flops, table.bytes, peaks, cluster.gpu, params, math)
    workspace = dp_workspace_bytes(graph, table, cfg, cluster)
    if workspace.any():
        # Each of those backward calls first fills its workspace: a write of it, timed as the
        # traced fills are (``fill_``'s op class, no FLOPs).
        filled = workspace > 0
        fill_ns = op_times_ns(
            np.full(int(filled.sum()), op_class("fill_")),
            np.zeros(int(filled.sum())),
            workspace[filled],
            peaks[filled],
            cluster.gpu,
            params,
        )
        dur = dur.copy()
        dur[filled] += fill_ns
    if scales:
        factor = np.ones(len(dur))
        for cls, k in scales.items():
            factor[table.op_class == cls] = k
        dur = float_ns(dur * factor)
    waits = graph.rows_named(table, HOST_WAIT)
    dur[(table.wait >= 0) | waits] = 0  # a stream or host wait runs no kernel
    is_coll = table.op_class == OpClass.COLLECTIVE
    moe = cfg.model.moe
    for i in np.flatnonzero(is_coll).tolist():
        axis = AXES[int(table.axis[i])]
        ranks = layout.group(axis, rank) if axis != "none" else (rank,)
        name = graph.strings[int(table.name[i])]
        if moe is not None and name in A2A_PHASES:
            dur[i] = colls.routed_ns(name, int(table.coll_bytes[i]), ranks, moe)
        else:
            dur[i] = colls.time_ns(table.coll(i), int(table.coll_bytes[i]), ranks)
    p = cfg.parallel
    fills = graph.rows_named(table, DETERMINISTIC_FILL)
    regather = is_coll & graph.rows_named(table, WGRAD_GATHER)
    # In backward a tensor-parallel reduce-scatter or all-reduce is a column-parallel linear's
    # input gradient (a row-parallel linear's and the embedding's backward collectives are
    # all-gathers, or none).
    on_tp = is_coll & (table.axis == AXES.index("tp")) & backward
    dgrad_scatter = on_tp & (table.coll_kind == int(CollectiveKind.REDUCE_SCATTER))
    if p.async_tensor_model_parallel_allreduce:
        dgrad_scatter |= on_tp & (table.coll_kind == int(CollectiveKind.ALL_REDUCE))
    alone = dur.copy()
    beside = np.full(len(dur), -1, dtype=np.int64)
    if p.tp > 1 and (regather.any() or dgrad_scatter.any()):
        dur = overlap_linear_backward(
            table, dur, regather, dgrad_scatter, gemm_slowdown or (lambda g: 1.0), fills, beside
        )
    if p.tp_comm_overlap and p.tp > 1:
        tp_ranks = layout.group("tp", rank)
        streamed = {
            i: colls.streaming_ns(table.coll(i), int(table.coll_bytes[i]), tp_ranks)
            for i in np.flatnonzero(is_coll & (table.axis == AXES.index("tp"))).tolist()
        }
        m = cfg.model
        tokens = m.seq_len // p.cp * cfg.batch.micro

        def chunk_ns(j: int, n: int) -> float:
            """GEMM ``j`` on ``1/n`` of its rows (the tokens), as its chunks run."""
            sl = slice(j, j + 1)
            one = None
            if shape_model:
                key = _gemm_key(table, j)
                one = np.array([_gemm_math_one(graph, cluster.gpu, key, n, ceiling)])
            t = op_times_ns(
                table.op_class[sl],
                table.flops[sl] / n,
                table.bytes[sl] // n,
                peaks[sl],
                cluster.gpu,
                params,
                one,
            )
            return float(t[0])

        userbuffers = np.full(len(dur), -1, dtype=np.int64)
        dur = overlap_tp_comm(
            table,
            dur,
            chunk_ns,
            streamed,
            tp=p.tp,
            sm_count=cluster.gpu.sm_count,
            backward=backward,
            # The output layer's weight is vocab / tp rows (rounded up when tied to the
            # embedding's shard).
            output_gemm_flops=frozenset(
                2.0 * tokens * m.hidden * rows for rows in (m.vocab // p.tp, -(-m.vocab // p.tp))
            ),
            regather=regather,
            fills=fills,
            beside=userbuffers,
        )
        # Userbuffers' transfers take their streamed time, not NCCL's (module tp_overlap).
        for i, c in streamed.items():
            if userbuffers[i] >= 0:
                alone[i], beside[i] = round(c), userbuffers[i]
        slows = (beside >= 0) & (userbuffers < 0)
    else:
        slows = beside >= 0
    for a in (dur, alone, beside, slows):
        a.flags.writeable = False
    return TableCost(table, dur, is_coll, fills, waits, beside, alone, slows)
