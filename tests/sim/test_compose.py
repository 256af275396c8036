"""Composition of a traced graph into a workload, checked against a hand-computed pipeline."""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
import pytest

from echo_view.model.config_parse import parse_workload_config
from echo_view.model.graph import OpClass, OpTable, Role, TracedGraph
from echo_view.model.kinds import CollectiveKind
from echo_view.model.strings import StringTable
from echo_view.sim.cluster import Cluster, cluster_from_config
from echo_view.sim.comm.defaults import default_comm_model
from echo_view.sim.compose_costs import CollectiveCache
from echo_view.sim.config_sim import ConfigSimulation, simulate_config
from echo_view.sim.host import HostParams
from echo_view.sim.kernel_cost import ComputeParams, op_times_ns
from tests.sim.op_tables import op_table

#: The GPU path alone (these expectations are computed without the host path, which
#: tests/sim/test_host.py checks).
simulate_gpu = partial(simulate_config, host=HostParams(kernel_us=0))


_table = op_table


def _cfg(
    pp: int,
    dp: int,
    micro_batches: int,
    model: dict[str, Any] | None = None,
    parallel: dict[str, Any] | None = None,
) -> Any:
    return parse_workload_config(
        {
            "model": {
                "kind": "gpt",
                "layers": pp * 2,
                "hidden": 64,
                "heads": 4,
                "seq_len": 16,
                "vocab": 100,
                # Untied: no embedding-gradient all-reduce between the first and last stage.
                "tie_embeddings": False,
                **(model or {}),
            },
            "parallel": {"tp": 1, "pp": pp, "dp": dp, **(parallel or {})},
            "batch": {"global": micro_batches * dp, "micro": 1},
            "cluster": {"gpu": "H100", "gpus_per_node": pp * dp, "nodes": 1},
            "precision": {"dtype": "bf16"},
        }
    )


def _bf16_time_ns(table: OpTable, cluster: Cluster, params: ComputeParams) -> int:
    """The kernel time of ``table``'s ops at the GPU's bf16 peak, summed (free transfers)."""
    peak = np.full(len(table), cluster.gpu.peak_flops["bf16"])
    return int(
        op_times_ns(table.op_class, table.flops, table.bytes, peak, cluster.gpu, params).sum()
    )


def test_two_stage_1f1b_step_equals_the_hand_computed_makespan() -> None:
    strings = StringTable()
    fwd = _table(strings, [("fwd_gemm", OpClass.GEMM, 4e11, 0)])
    bwd = _table(strings, [("bwd_gemm", OpClass.GEMM, 8e11, 0)])
    opt = _table(strings, [("adam", OpClass.OPTIMIZER, 0.0, 10**9)])
    graph = TracedGraph(strings, (Role((0, 1), (fwd,), (bwd,), opt, params=1000),))
    cfg = _cfg(pp=2, dp=1, micro_batches=4)
    cluster = cluster_from_config(cfg.cluster)
    params = ComputeParams()
    sim = simulate_gpu(graph, cfg, cluster, default_comm_model(), params, comm_scale=0.0)

    def t(table: OpTable) -> int:
        return _bf16_time_ns(table, cluster, params)

    tf, tb, topt = t(fwd), t(bwd), t(opt)
    # 1F1B with p=2 equal stages and free transfers: the last backward of stage 0 ends after
    # (m + p - 1) forward+backward pairs; then stage 0 runs the optimizer.
    makespan = (4 + 2 - 1) * (tf + tb)
    assert sim.step_ns == makespan + topt
    # stage 1 runs its last backward just before stage 0's, then its optimizer
    assert sim.stage_ns() == {0: makespan + topt, 1: makespan - tb + topt}
    # The ideal bubble on the same basis as the simulated one, a share of the span: stage 0
    # idles (p - 1) of its m + p - 1 pass pairs ((p - 1) / m = 1/4 of its compute time was
    # reported beside the simulated share of the span).
    assert sim.bubble()["ideal"] == pytest.approx(1 / 5)
    assert makespan - 4 * (tf + tb) == pytest.approx(makespan / 5)


def test_data_parallel_gradients_are_reduced_before_the_optimizer() -> None:
    strings = StringTable()
    fwd = _table(strings, [("fwd", OpClass.GEMM, 1e11, 0)])
    bwd_ops = _table(strings, [("bwd_a", OpClass.GEMM, 1e11, 0), ("bwd_b", OpClass.GEMM, 1e11, 0)])
    bwd = OpTable(
        **{
            **{
                c: getattr(bwd_ops, c)
                for c in (
                    "name",
                    "op_class",
                    "flops",
                    "bytes",
                    "dtype",
                    "shapes",
                    "coll_kind",
                    "coll_bytes",
                    "axis",
                )
            },
            "grad_bytes": np.array([4 * 10**8, 4 * 10**8]),
        }
    )
    opt = _table(strings, [("adam", OpClass.OPTIMIZER, 0.0, 10**6)])
    graph = TracedGraph(strings, (Role((0,), (fwd,), (bwd,), opt, params=2 * 10**8),))
    cfg = _cfg(pp=1, dp=2, micro_batches=2)
    cluster = cluster_from_config(cfg.cluster)
    base = simulate_gpu(graph, cfg, cluster, default_comm_model(), ComputeParams())
    free = simulate_gpu(graph, cfg, cluster, default_comm_model(), ComputeParams(), comm_scale=0.0)
    wl = base.composed.workload
    names = [wl.strings[int(n)] for n in wl.ops.name]
    reduce_ops = [i for i, n in enumerate(names) if n.startswith("ncclDevKernel_AllReduce")]
    assert len(reduce_ops) == 1  # one bucket: all 2e8 gradients, not overlapped
    reduce_ns = int(base.result.end_ns[reduce_ops[0]] - base.result.start_ns[reduce_ops[0]])
    assert reduce_ns > 0
    assert base.step_ns - free.step_ns == reduce_ns


def _with_grads(table: OpTable, grad_bytes: list[int]) -> OpTable:
    cols = {c: getattr(table, c) for c in ("name", "op_class", "flops", "bytes", "dtype")}
    cols.update({c: getattr(table, c) for c in ("shapes", "coll_kind", "coll_bytes", "axis")})
    return OpTable(**cols, grad_bytes=np.array(grad_bytes, dtype=np.int64))


def test_ddp_bucket_size_sets_the_gradient_buckets() -> None:
    """Eight backward GEMMs of 10 M fp32 gradients each: Megatron's default bucket (40 M
    parameters for dp = 2) reduces them in two buckets, ``ddp_bucket_size = 10e6`` in eight,
    each dispatched when its GEMM ends; the step's parts still add up to it."""
    strings = StringTable()
    fwd = _table(strings, [("fwd", OpClass.GEMM, 1e12, 0)])
    bwd = _table(strings, [(f"bwd{k}", OpClass.GEMM, 1e12, 0) for k in range(8)])
    bwd = _with_grads(bwd, [4 * 10**7] * 8)
    opt = _table(strings, [("adam", OpClass.OPTIMIZER, 0.0, 10**6)])
    graph = TracedGraph(strings, (Role((0,), (fwd,), (bwd,), opt, params=8 * 10**7),))
    buckets = {}
    for size in (None, 10**7):
        par = {"overlap_grad_reduce": True} | ({"ddp_bucket_size": size} if size else {})
        cfg = _cfg(pp=1, dp=2, micro_batches=1, parallel=par)
        sim = simulate_config(
            graph, cfg, cluster_from_config(cfg.cluster), default_comm_model(), ComputeParams()
        )
        wl = sim.composed.workload
        names = [wl.strings[int(n)] for n in wl.ops.name]
        buckets[size] = sum(n.startswith("ncclDevKernel_AllReduce") for n in names)
        parts = sim.class_ns(0)
        # ``other``: the host path's CPU time, on the host's lane beside the streams.
        compute = sum(v for k, v in parts.items() if k not in ("collective", "other"))
        assert compute == sim.step_ns
        assert parts["gemm"] == sum(
            int(tc.dur_ns.sum()) for tc in sim.composed.tables if tc.table is not opt
        )
    assert buckets == {None: 2, 10**7: 8}


def _two_stage_graph() -> tuple[TracedGraph, OpTable, OpTable, OpTable]:
    strings = StringTable()
    fwd = _table(strings, [("fwd_gemm", OpClass.GEMM, 4e11, 0)])
    bwd = _table(strings, [("bwd_gemm", OpClass.GEMM, 8e11, 0)])
    opt = _table(strings, [("adam", OpClass.OPTIMIZER, 0.0, 10**9)])
    return TracedGraph(strings, (Role((0, 1), (fwd,), (bwd,), opt, params=1000),)), fwd, bwd, opt


def test_tied_embedding_gradient_all_reduce_between_first_and_last_stage() -> None:
    graph, *_ = _two_stage_graph()
    comm = default_comm_model()
    untied = _cfg(pp=2, dp=1, micro_batches=4)
    tied = _cfg(pp=2, dp=1, micro_batches=4, model={"tie_embeddings": True})
    cluster = cluster_from_config(tied.cluster)
    a = simulate_gpu(graph, untied, cluster, comm, ComputeParams())
    b = simulate_gpu(graph, tied, cluster, comm, ComputeParams())
    # vocab / tp * hidden = 100 * 64 gradient elements, in fp32 (bf16 trains with fp32 main
    # gradients), one all-reduce over the 2-rank group of stage 0 (rank 0) and stage 1 (rank 1).
    nbytes = 100 * 64 * 4
    assert len(a.composed.workload.collectives.bytes) == 0
    specs = b.composed.workload.collectives
    assert specs.bytes.tolist() == [nbytes]
    assert specs.kind.tolist() == [int(CollectiveKind.ALL_REDUCE)]
    assert b.composed.workload.groups[int(specs.group[0])].ranks == (0, 1)
    t_ar = CollectiveCache(comm, cluster).time_ns(CollectiveKind.ALL_REDUCE, nbytes, (0, 1))
    # Stage 0 ends its last backward last; the all-reduce (stage 1 waits in it) then delays
    # both stages' optimizer by exactly its time.
    assert b.step_ns == a.step_ns + t_ar
    assert b.stage_ns()[1] == b.stage_ns()[0]


def test_gradients_are_reduced_in_fp32_for_bf16_unless_told_otherwise() -> None:
    strings = StringTable()
    fwd = _table(strings, [("fwd", OpClass.GEMM, 1e11, 0)])
    bwd = _with_grads(_table(strings, [("bwd", OpClass.GEMM, 2e11, 0)]), [4 * 2 * 10**8])
    opt = _table(strings, [("adam", OpClass.OPTIMIZER, 0.0, 10**6)])
    graph = TracedGraph(strings, (Role((0,), (fwd,), (bwd,), opt, params=2 * 10**8),))
    comm = default_comm_model()
    fp32 = _cfg(pp=1, dp=2, micro_batches=2)
    half = _cfg(pp=1, dp=2, micro_batches=2, parallel={"grad_reduce_in_fp32": False})
    cluster = cluster_from_config(fp32.cluster)
    a = simulate_gpu(graph, fp32, cluster, comm, ComputeParams())
    b = simulate_gpu(graph, half, cluster, comm, ComputeParams())
    colls = CollectiveCache(comm, cluster)
    ar = CollectiveKind.ALL_REDUCE
    # One all-reduce of all 2e8 gradients after the last backward: 4 bytes against 2 each.
    diff = colls.time_ns(ar, 8 * 10**8, (0, 1)) - colls.time_ns(ar, 4 * 10**8, (0, 1))
    assert diff > 0
    assert a.step_ns - b.step_ns == diff


def test_overlapped_param_gather_exposes_only_the_first_bucket() -> None:
    strings = StringTable()
    # Three forward GEMMs and 3 x 40 M parameters: three buckets, one per forward third.
    fwd = _table(strings, [(f"fwd{k}", OpClass.GEMM, 1e13, 0) for k in range(3)])
    bucket = 40_000_000
    bwd = _with_grads(
        _table(strings, [(f"bwd{k}", OpClass.GEMM, 2e13, 0) for k in range(3)]), [4 * bucket] * 3
    )
    opt = _table(strings, [("adam", OpClass.OPTIMIZER, 0.0, 10**6)])
    graph = TracedGraph(strings, (Role((0,), (fwd,), (bwd,), opt, params=3 * bucket),))
    dist = {"distributed_optimizer": True, "overlap_grad_reduce": True}
    off = _cfg(pp=1, dp=2, micro_batches=1, parallel=dist)
    on = _cfg(pp=1, dp=2, micro_batches=1, parallel={**dist, "overlap_param_gather": True})
    comm = default_comm_model()
    cluster = cluster_from_config(off.cluster)
    a = simulate_gpu(graph, off, cluster, comm, ComputeParams())
    b = simulate_gpu(graph, on, cluster, comm, ComputeParams())
    colls = CollectiveCache(comm, cluster)
    ag = CollectiveKind.ALL_GATHER
    t_all = colls.time_ns(ag, 3 * bucket * 2, (0, 1))  # bf16 parameters, after the optimizer
    t_bucket = colls.time_ns(ag, bucket * 2, (0, 1))
    forward_third = int(b.composed.tables[0].dur_ns[0])
    assert forward_third > t_bucket  # each gather hides behind the previous third
    # Off: the whole gather after the optimizer. On: the first bucket before the forward.
    assert b.step_ns == a.step_ns - t_all + t_bucket
    # With one bucket there is nothing to overlap: the gather only moves.
    one = TracedGraph(strings, (Role((0,), (fwd,), (bwd,), opt, params=bucket),))
    bwd_one = _with_grads(bwd, [4 * bucket // 3] * 3)
    one = TracedGraph(strings, (Role((0,), (fwd,), (bwd_one,), opt, params=bucket),))
    c = simulate_gpu(one, off, cluster, comm, ComputeParams())
    d = simulate_gpu(one, on, cluster, comm, ComputeParams())
    assert c.step_ns == d.step_ns


def _interleaved_with_and_without_overlap(
    micro_batches: int,
) -> tuple[ConfigSimulation, ConfigSimulation]:
    """pp 4, v 2 (three roles: the middle stages alike), one GEMM a pass, every rank
    simulated: with ``overlap_p2p_comm`` and without."""
    strings = StringTable()
    fwd = _table(strings, [("fwd_gemm", OpClass.GEMM, 4e11, 0)])
    bwd = _table(strings, [("bwd_gemm", OpClass.GEMM, 8e11, 0)])
    opt = _table(strings, [("adam", OpClass.OPTIMIZER, 0.0, 10**6)])
    stages = ((0,), (1, 2), (3,))
    roles = tuple(Role(st, (fwd, fwd), (bwd, bwd), opt, params=1000) for st in stages)
    graph = TracedGraph(strings, roles)
    inter = {"virtual_stages": 2}
    over = _cfg(pp=4, dp=1, micro_batches=micro_batches, parallel=inter)
    block = _cfg(
        pp=4, dp=1, micro_batches=micro_batches, parallel={**inter, "overlap_p2p_comm": False}
    )
    cluster = cluster_from_config(over.cluster)
    comm = default_comm_model()
    return (
        simulate_gpu(graph, over, cluster, comm, ComputeParams(), ranks="all"),
        simulate_gpu(graph, block, cluster, comm, ComputeParams(), ranks="all"),
    )


def test_blocking_p2p_only_slows_the_interleaved_schedule() -> None:
    graph_1f1b, *_ = _two_stage_graph()
    comm = default_comm_model()
    plain = _cfg(pp=2, dp=1, micro_batches=4)
    cluster = cluster_from_config(plain.cluster)
    blocking = _cfg(pp=2, dp=1, micro_batches=4, parallel={"overlap_p2p_comm": False})
    a = simulate_gpu(graph_1f1b, plain, cluster, comm, ComputeParams())
    b = simulate_gpu(graph_1f1b, blocking, cluster, comm, ComputeParams())
    assert a.step_ns == b.step_ns  # Megatron-LM has no overlapped non-interleaved form
    c, d = _interleaved_with_and_without_overlap(4)
    # Each transfer gains two or three edges: the receiver's pass before its call -> transfer
    # (rendezvous), transfer -> the sender's pass after its call, and where the receiver's
    # call is not right before the pass that needs the data, transfer -> the receiver's pass
    # after its call; 7 chunk boundaries x 4 micro-batches x 2 directions.
    transfers = 7 * 4 * 2
    extra = len(d.composed.workload.deps.src) - len(c.composed.workload.deps.src)
    assert transfers < extra <= 3 * transfers
    assert d.step_ns > c.step_ns


def test_blocking_p2p_with_more_micro_batches_than_stages_completes() -> None:
    """pp 4, v 2, m 8 (two groups of N = 4): a steady-state forward's output leaves in the call
    after its paired backward, and each pass's input arrives in the call before it, as in
    Megatron-Core. Pairing every transfer with the passes right before it instead made the
    stages wait on each other in a cycle (no op of the step could finish). The blocking step
    is at least as long as the overlapped one."""
    c, d = _interleaved_with_and_without_overlap(8)
    assert d.step_ns >= c.step_ns > 0


def test_interleaved_uneven_chunks_step_equals_the_hand_computed_makespan() -> None:
    """6 layers on pp 2, vp 2 with the embedding and the loss counted as layers (8 slots, 2
    per chunk): global chunks g0..g3 hold 1, 2, 2, 1 layers (stage 0: g0, g2; stage 1: g1,
    g3). With m = p = 2 Megatron-Core's interleaved schedule warms up (p - s - 1) * 2 + (v - 1) *
    p passes: all four forwards on stage 0, two on stage 1, which then runs one forward, one
    backward; f and b (b >= f) are one layer's forward and backward, transfers are free."""
    strings = StringTable()
    one_f = [("fwd_gemm", OpClass.GEMM, 4e11, 0)]
    one_b = [("bwd_gemm", OpClass.GEMM, 8e11, 0)]
    fwd1, fwd2 = _table(strings, one_f), _table(strings, one_f * 2)
    bwd1, bwd2 = _table(strings, one_b), _table(strings, one_b * 2)
    opt = _table(strings, [("adam", OpClass.OPTIMIZER, 0.0, 10**6)])
    roles = (
        Role((0,), (fwd1, fwd2), (bwd1, bwd2), opt, params=1000),
        Role((1,), (fwd2, fwd1), (bwd2, bwd1), opt, params=1000),
    )
    graph = TracedGraph(strings, roles)
    counted = {
        "virtual_stages": 2,
        "account_for_embedding_in_pipeline_split": True,
        "account_for_loss_in_pipeline_split": True,
    }
    cfg = _cfg(pp=2, dp=1, micro_batches=2, model={"layers": 6}, parallel=counted)
    cluster = cluster_from_config(cfg.cluster)
    params = ComputeParams()
    sim = simulate_gpu(graph, cfg, cluster, default_comm_model(), params, comm_scale=0.0)

    def t(table: OpTable) -> int:
        return _bf16_time_ns(table, cluster, params)

    f, b, topt = t(fwd1), t(bwd1), t(opt)
    assert t(fwd2) == 2 * f and t(bwd2) == 2 * b
    # Stage 0: F g0 mb0 [0, f], mb1 [f, 2f]. Stage 1: F g1 mb0 [f, 3f], mb1 [3f, 5f].
    # Stage 0: F g2 mb0 [3f, 5f], mb1 [5f, 7f]. Stage 1: F g3 mb0 [5f, 6f], B g3 mb0
    # [6f, 6f+b], F g3 mb1 [6f+b, 7f+b], B g3 mb1 [7f+b, 7f+2b]. Stage 0: B g2 mb0
    # [6f+b, 6f+3b], mb1 [6f+3b, 6f+5b]. Stage 1: B g1 mb0 [6f+3b, 6f+5b], mb1 [6f+5b, 6f+7b].
    # Stage 0: B g0 mb0 [6f+5b, 6f+6b], mb1 [6f+7b, 6f+8b]; then each stage's optimizer.
    # (Every forward first on both stages, as Megatron-LM ran m = p before its tunable
    # schedule, would end at 8f+8b and 8f+7b.)
    assert b >= f
    assert sim.stage_ns() == {0: 6 * f + 8 * b + topt, 1: 6 * f + 7 * b + topt}
    assert sim.step_ns == 6 * f + 8 * b + topt
    # The same layers without interleaving (3 per stage, 1F1B): (m + p - 1) (3f + 3b).
    plain = _cfg(
        pp=2, dp=1, micro_batches=2, model={"layers": 6}, parallel={**counted, "virtual_stages": 1}
    )
    fwd3, bwd3 = _table(strings, one_f * 3), _table(strings, one_b * 3)
    roles1 = (
        Role((0,), (fwd3,), (bwd3,), opt, params=1000),
        Role((1,), (fwd3,), (bwd3,), opt, params=1000),
    )
    sim1 = simulate_gpu(
        TracedGraph(strings, roles1), plain, cluster, default_comm_model(), params, comm_scale=0.0
    )
    assert sim1.step_ns == 3 * (3 * f + 3 * b) + topt
