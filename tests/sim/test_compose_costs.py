"""Op durations of traced tables: the dtype a GEMM was traced in sets its peak."""

from __future__ import annotations

import numpy as np

from echo_view.model.graph import OpClass, OpTable, TracedGraph
from echo_view.model.strings import StringTable
from echo_view.sim.cluster import cluster_from_config
from echo_view.sim.comm.defaults import default_comm_model
from echo_view.sim.compose_costs import CollectiveCache, table_cost
from echo_view.sim.kernel_cost import ComputeParams
from echo_view.sim.layout import Layout
from tests.sim.test_compose import _cfg


def test_an_fp8_gemm_takes_half_the_bf16_time_on_hopper() -> None:
    strings = StringTable()
    # Two identical large GEMMs (4096 x 8192 x 8192, ~5.5e11 FLOPs), traced as bf16 and fp8.
    flops = 2.0 * 4096 * 8192 * 8192
    table = OpTable(
        name=np.array([strings.intern("mm")] * 2),
        op_class=np.array([OpClass.GEMM] * 2),
        flops=np.array([flops, flops]),
        bytes=np.array([10**8, 10**8]),
        dtype=np.array([strings.intern("bf16"), strings.intern("fp8")]),
        shapes=np.array([strings.intern("")] * 2),
        coll_kind=np.array([-1, -1]),
        coll_bytes=np.zeros(2, dtype=np.int64),
        axis=np.array([-1, -1]),
        grad_bytes=np.zeros(2, dtype=np.int64),
    )
    graph = TracedGraph(strings, ())
    cfg = _cfg(pp=1, dp=1, micro_batches=1)
    cluster = cluster_from_config(cfg.cluster)  # H100 SXM: 989 bf16, 1,979 fp8 TFLOP/s dense
    params = ComputeParams()
    colls = CollectiveCache(default_comm_model(), cluster)
    dur = table_cost(graph, table, cfg, cluster, params, colls, Layout.of(cfg.parallel), 0).dur_ns
    bf16, fp8 = (int(d) - params.kernel_gap_ns for d in dur)
    # Same FLOPs and efficiency at the fp8 peak (1,978.9 against 989.4 TFLOP/s, the H100
    # datasheet's dense figures): half the time, to the datasheet's rounding and 1 ns.
    peaks = cluster.gpu.peak_flops
    assert abs(fp8 - bf16 * peaks["bf16"] / peaks["fp8"]) <= 1
    assert abs(fp8 / bf16 - 0.5) < 1e-4
