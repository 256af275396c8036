"""Composition of a traced graph into a workload, checked against a hand-computed pipeline."""

from __future__ import annotations

from typing import Any

import numpy as np

from echo_view.model.config import parse_workload_config
from echo_view.model.graph import OpClass, OpTable, Role, TracedGraph
from echo_view.model.strings import StringTable
from echo_view.sim.cluster import cluster_from_config
from echo_view.sim.comm.defaults import default_comm_model
from echo_view.sim.config_sim import simulate_config
from echo_view.sim.kernel_cost import ComputeParams, op_times_ns


def _table(strings: StringTable, ops: list[tuple[str, int, float, int]]) -> OpTable:
    n = len(ops)
    return OpTable(
        name=np.array([strings.intern(o[0]) for o in ops]),
        op_class=np.array([o[1] for o in ops]),
        flops=np.array([o[2] for o in ops]),
        bytes=np.array([o[3] for o in ops]),
        dtype=np.full(n, strings.intern("bf16")),
        shapes=np.full(n, strings.intern("")),
        coll_kind=np.full(n, -1),
        coll_bytes=np.zeros(n, dtype=np.int64),
        axis=np.full(n, -1),
        grad_bytes=np.zeros(n, dtype=np.int64),
    )


def _cfg(pp: int, dp: int, micro_batches: int) -> Any:
    return parse_workload_config(
        {
            "model": {
                "kind": "gpt",
                "layers": pp,
                "hidden": 64,
                "heads": 4,
                "seq_len": 16,
                "vocab": 100,
                # Untied: no embedding-gradient all-reduce between the first and last stage.
                "tie_embeddings": False,
            },
            "parallel": {"tp": 1, "pp": pp, "dp": dp},
            "batch": {"global": micro_batches * dp, "micro": 1},
            "cluster": {"gpu": "H100", "gpus_per_node": pp * dp, "nodes": 1},
            "precision": {"dtype": "bf16"},
        }
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
    sim = simulate_config(graph, cfg, cluster, default_comm_model(), params, comm_scale=0.0)

    def t(table: OpTable) -> int:
        peak = np.full(len(table), cluster.gpu.peak_flops["bf16"])
        return int(
            op_times_ns(table.op_class, table.flops, table.bytes, peak, cluster.gpu, params).sum()
        )

    tf, tb, topt = t(fwd), t(bwd), t(opt)
    # 1F1B with p=2 equal stages and free transfers: the last backward of stage 0 ends after
    # (m + p - 1) forward+backward pairs; then stage 0 runs the optimizer.
    makespan = (4 + 2 - 1) * (tf + tb)
    assert sim.step_ns == makespan + topt
    # stage 1 runs its last backward just before stage 0's, then its optimizer
    assert sim.stage_ns() == {0: makespan + topt, 1: makespan - tb + topt}
    assert sim.bubble()["ideal"] == 1 / 4


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
    base = simulate_config(graph, cfg, cluster, default_comm_model(), ComputeParams())
    free = simulate_config(
        graph, cfg, cluster, default_comm_model(), ComputeParams(), comm_scale=0.0
    )
    wl = base.composed.workload
    names = [wl.strings[int(n)] for n in wl.ops.name]
    reduce_ops = [i for i, n in enumerate(names) if n.startswith("ncclDevKernel_AllReduce")]
    assert len(reduce_ops) == 1  # one bucket: all 2e8 gradients, not overlapped
    reduce_ns = int(base.result.end_ns[reduce_ops[0]] - base.result.start_ns[reduce_ops[0]])
    assert reduce_ns > 0
    assert base.step_ns - free.step_ns == reduce_ns
