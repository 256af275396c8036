"""NCCL's topology as the tuner rebuilds it: ring graph channels per NVSwitch node."""

from __future__ import annotations

import pytest

from echo_view.model import CollectiveKind
from echo_view.sim.cluster import make_cluster
from echo_view.sim.comm.placement import place
from echo_view.sim.comm.tuner import LL128, RING, SIMPLE, table, topology


def test_an_h100_node_gets_nccls_12_ring_channels_at_30_gbytes_per_s() -> None:
    cluster = make_cluster("H100-SXM5-80GB", nodes=1)
    placement = place(range(4), cluster)
    topo = topology(placement, cluster)
    assert (topo.graph_channels, topo.channel_gbs, topo.comm_channels) == (12, 30.0, 24)
    # NCCL 2.29.2's own table on 4 H100 (algbw GB/s): AllGather Ring Simple 480.0 = 12 x 30
    # x 4/3, LL128 441.6 = 0.92 x 360 x 4/3.
    costs = table(CollectiveKind.ALL_GATHER, placement, cluster, topo)
    assert costs[(RING, SIMPLE)][1] == pytest.approx(480.0)
    assert costs[(RING, LL128)][1] == pytest.approx(441.6)


@pytest.mark.parametrize(
    ("gpu", "graph", "speed", "comm"),
    [
        ("A100-SXM4-80GB", 12, 20.0, 24),  # 12 NVLinks of NCCL's 20 GB/s
        ("H800-SXM5-80GB", 8, 20.6, 16),  # 8 NVLinks: one channel per link, as before
    ],
)
def test_other_nodes_keep_one_ring_channel_per_nvlink(
    gpu: str, graph: int, speed: float, comm: int
) -> None:
    cluster = make_cluster(gpu, nodes=1)
    topo = topology(place(range(8), cluster), cluster)
    assert (topo.graph_channels, topo.channel_gbs, topo.comm_channels) == (graph, speed, comm)
