"""A traced step on several streams, composed and simulated: collectives on their own lane,
compute waiting only where the graph says, against a hand-computed step time."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import numpy as np
import pytest

from echo_view.model.config_parse import parse_workload_config
from echo_view.model.graph import AXES, OpClass, OpTable, Role, TracedGraph
from echo_view.model.kinds import CollectiveKind
from echo_view.model.strings import StringTable
from echo_view.sim.cluster import cluster_from_config
from echo_view.sim.comm.defaults import default_comm_model
from echo_view.sim.compose_costs import CollectiveCache
from echo_view.sim.config_sim import simulate_config
from echo_view.sim.host import HostParams
from echo_view.sim.kernel_cost import ComputeParams, op_times_ns
from tests.sim.test_compose import _table as compose_table

AG, RS = CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER
#: (name, class, flops, bytes, collective kind or None, stream, wait) per row.
Row = tuple[str, int, float, int, CollectiveKind | None, int, int]
COLL_BYTES = 64 << 20


#: The GPU path alone (these expectations are computed without the host path, which
#: tests/sim/test_host.py checks).
simulate_gpu = partial(simulate_config, host=HostParams(kernel_us=0))


def _table(strings: StringTable, rows: list[Row]) -> OpTable:
    coll = [r[4] is not None for r in rows]
    return replace(
        compose_table(strings, [r[:4] for r in rows]),
        shapes=np.full(len(rows), -1),
        coll_kind=np.array([-1 if r[4] is None else int(r[4]) for r in rows]),
        coll_bytes=np.where(coll, COLL_BYTES, 0),
        axis=np.where(coll, AXES.index("dp"), -1),
        stream=np.array([r[5] for r in rows]),
        wait=np.array([r[6] for r in rows]),
    )


W, C = OpClass.OTHER, OpClass.COLLECTIVE
#: An FSDP2-like step of one unit: copy-in on a side stream (1), all-gather on the group's
#: stream (2), compute waiting for it; backward reduce-scatters the first gradients while the
#: second are computed, and the compute stream waits for it at the end of backward.
FORWARD: list[Row] = [
    ("copy_in", OpClass.COPY, 0.0, 200 << 20, None, 1, -1),  # row 0
    ("wait", W, 0.0, 0, None, 2, 0),  # 1: the group's stream waits for the copy-in
    ("all_gather", C, 0.0, 0, AG, 2, -1),  # 2
    ("wait", W, 0.0, 0, None, 0, 2),  # 3: compute waits for the all-gather
    ("fwd_gemm", OpClass.GEMM, 4e12, 0, None, 0, -1),  # 4
]
BACKWARD: list[Row] = [
    ("bwd_gemm_a", OpClass.GEMM, 4e12, 0, None, 0, -1),  # step-wide row 5
    ("wait", W, 0.0, 0, None, 2, 5),  # 6: the group's stream waits for those gradients
    ("reduce_scatter", C, 0.0, 0, RS, 2, -1),  # 7
    ("bwd_gemm_b", OpClass.GEMM, 1e11, 0, None, 0, -1),  # 8: overlaps the reduce-scatter
    ("wait", W, 0.0, 0, None, 0, 7),  # 9: end of backward waits for it
]
OPTIMIZER: list[Row] = [("adam", OpClass.OPTIMIZER, 0.0, 1 << 30, None, 0, -1)]


def _cfg() -> object:
    return parse_workload_config(
        {
            "model": {
                "kind": "gpt",
                "layers": 2,
                "hidden": 64,
                "heads": 4,
                "seq_len": 16,
                "vocab": 100,
            },
            "parallel": {"tp": 1, "pp": 1, "dp": 2},
            "batch": {"global": 2, "micro": 1},
            "cluster": {"gpu": "H100", "gpus_per_node": 2, "nodes": 1},
            "precision": {"dtype": "bf16"},
        }
    )


def _graph(streams: bool) -> TracedGraph:
    strings = StringTable()
    phases = [FORWARD, BACKWARD, OPTIMIZER]
    if not streams:  # the same ops in program order on the compute stream
        phases = [[(*r[:5], 0, -1) for r in p if r[6] < 0] for p in phases]
    fwd, bwd, opt = (_table(strings, p) for p in phases)
    role = Role((0,), (fwd,), (bwd,), opt, params=1000)
    return TracedGraph(strings, (role,), meta={"explicit_comm": True})


def _time(table_rows: list[Row], cluster: object) -> dict[str, int]:
    strings = StringTable()
    t = _table(strings, [r for r in table_rows if r[1] != C and r[6] < 0])
    peak = np.full(len(t), cluster.gpu.peak_flops["bf16"])  # type: ignore[attr-defined]
    d = op_times_ns(t.op_class, t.flops, t.bytes, peak, cluster.gpu, ComputeParams())  # type: ignore[attr-defined]
    return {strings[int(n)]: int(x) for n, x in zip(t.name, d, strict=True)}


@pytest.mark.parametrize("ranks", ["stages", "all"])
def test_collectives_overlap_compute_as_the_waits_allow(ranks: str) -> None:
    cfg = _cfg()
    cluster = cluster_from_config(cfg.cluster)  # type: ignore[attr-defined]
    comm = default_comm_model()
    sim = simulate_gpu(_graph(True), cfg, cluster, comm, ComputeParams(), ranks=ranks)  # type: ignore[arg-type]
    t = _time(FORWARD + BACKWARD + OPTIMIZER, cluster)
    colls = CollectiveCache(comm, cluster)
    ag = colls.time_ns(AG, COLL_BYTES, (0, 1))
    rs = colls.time_ns(RS, COLL_BYTES, (0, 1))
    assert ag > 0 and rs > t["bwd_gemm_b"] > 0
    # copy-in, then the all-gather, then the forward GEMM and the first backward GEMM; the
    # reduce-scatter runs beside the second backward GEMM; then the optimizer.
    expected = (
        t["copy_in"] + ag + t["fwd_gemm"] + t["bwd_gemm_a"] + max(rs, t["bwd_gemm_b"]) + t["adam"]
    )
    assert sim.step_ns == expected
    # The same ops on one stream: every collective exposed.
    serial = simulate_gpu(_graph(False), cfg, cluster, comm, ComputeParams(), ranks=ranks)  # type: ignore[arg-type]
    assert serial.step_ns == sum(t.values()) + ag + rs
    # Lanes: compute, the composer's pipeline and data-parallel lanes, then the traced side
    # stream and the group's communication stream; collectives only on the latter.
    wl = sim.composed.workload
    names = [wl.lanes[int(i)].name for i in wl.ops.lane]
    coll_lanes = {names[i] for i in np.flatnonzero(wl.ops.op_class == OpClass.COLLECTIVE)}
    assert coll_lanes == {"stream 34 (communication, dp)"}
    assert "stream 33 (side stream)" in names
