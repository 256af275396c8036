"""NCCL's topology as the tuner rebuilds it: ring graph channels per NVSwitch node; the
algorithms ``NCCL_ALGO`` leaves it."""

from __future__ import annotations

import pytest

from echo_view.errors import ConfigError
from echo_view.model import CollectiveKind
from echo_view.sim.cluster import make_cluster
from echo_view.sim.comm.nccl import NcclModel
from echo_view.sim.comm.placement import place
from echo_view.sim.comm.tuner import LL128, NVLS, RING, SIMPLE, TREE, table, topology


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


def test_nccl_algo_ring_leaves_the_tuner_ring_only() -> None:
    cluster = make_cluster("H100-SXM5-80GB", nodes=1, nccl_algo="Ring")
    placement = place(range(8), cluster)
    topo = topology(placement, cluster)
    costs = table(CollectiveKind.ALL_REDUCE, placement, cluster, topo)
    assert {algo for algo, _ in costs} == {RING}
    free = make_cluster("H100-SXM5-80GB", nodes=1)
    assert {a for a, _ in table(CollectiveKind.ALL_REDUCE, placement, free, topo)} == {
        RING,
        TREE,
        NVLS,
    }


def test_nccl_algo_forces_a_ring_all_reduce_on_an_h100_node() -> None:
    """32 MiB all-reduced over 8 H100: NCCL's own pick is NVLS; with ``NCCL_ALGO=Ring`` the
    ring, timed from the constants by hand: two passes of 7 NVLink hops and 2 x 7/8 of the
    bytes at the Simple protocol's bus bandwidth (24 channels x 20 GB/s = 480, capped by
    1.0 x 450 GB/s x nvlink_eff 0.8 = 360): 8.4 + 14 x 3.4 + 58,720,256 B / 360 GB/s =
    219.1 µs with the shipped constants."""
    nbytes, ranks = 32 << 20, list(range(8))
    free = NcclModel().estimate(
        CollectiveKind.ALL_REDUCE, nbytes, ranks, make_cluster("H100-SXM5-80GB")
    )
    assert free.algorithm == NVLS
    cluster = make_cluster("H100-SXM5-80GB", nccl_algo="ring")
    model = NcclModel()
    est = model.estimate(CollectiveKind.ALL_REDUCE, nbytes, ranks, cluster)
    assert (est.algorithm, est.protocol) == (RING, SIMPLE)
    p = model.params_on(cluster)
    bus = min(est.channels * p.channel_gbs[2], p.protocol_eff[2] * 450.0 * p.nvlink_eff)
    hand_us = (
        p.base_us[2] + est.channels * p.channel_us + 2 * 7 * p.nvlink_hop_us[2]
        + nbytes * 2 * 7 / 8 / (bus * 1e3)
    )  # fmt: skip
    assert est.time_ns / 1e3 == pytest.approx(hand_us, rel=1e-6)
    assert hand_us == pytest.approx(219.1, abs=0.1)
    assert est.time_ns > free.time_ns


def test_nccl_algo_that_leaves_a_collective_no_algorithm_is_an_error() -> None:
    cluster = make_cluster("H100-SXM5-80GB", nccl_algo="tree")
    with pytest.raises(ConfigError, match="all_gather"):
        NcclModel().estimate(CollectiveKind.ALL_GATHER, 1 << 20, range(4), cluster)
