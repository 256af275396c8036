"""All-to-all / all-to-allv in the NCCL-like model: expectations computed by hand from the
mechanism (per-peer shares, NVLink vs NIC, p2p channels, 8 peers per kernel batch)."""

from __future__ import annotations

import numpy as np
import pytest

from echo_view.model import CollectiveKind
from echo_view.sim.cluster import make_cluster
from echo_view.sim.comm import CommParams, NcclModel
from echo_view.sim.comm.alltoall import (
    expected_distinct,
    expert_loads,
    p2p_rounds,
    routed_matrix,
    token_fanout,
    uniform_matrix,
)
from echo_view.sim.comm.defaults import default_comm_model

A2A = CollectiveKind.ALL_TO_ALL
# Round numbers: SIMPLE 10 µs + 2 µs per NVLink step, 3 µs per network step; NVLink delivers
# 0.8 of 450 GB/s = 360 GB/s; a SIMPLE channel 20 GB/s (32 channels: 640 GB/s), an LL channel
# 1 GB/s at half payload; the NIC delivers half of its 50 GB/s.
PARAMS = CommParams(
    base_us=(5.0, 5.0, 10.0),
    nvlink_hop_us=(1.0, 1.0, 2.0),
    net_hop_us=(3.0, 3.0, 3.0),
    nvlink_eff=0.8,
    net_eff=0.5,
    protocol_eff=(0.5, 0.9375, 1.0),
    channel_gbs=(1.0, 10.0, 20.0),
)
H100 = make_cluster("H100-SXM5-80GB")  # 8 GPUs on NVSwitch, 18 NVLinks, 400 Gb/s NIC per GPU


def test_single_node_is_nvlink_bound() -> None:
    # 8 x 1e8 B per rank: 7e8 B leave each GPU over NVLink at 360 GB/s = 1944.444 µs, plus
    # 10 µs kernel and one 2 µs NVLink step (7 peers fit one batch of 8).
    est = NcclModel(PARAMS).estimate(A2A, 800_000_000, range(8), H100)
    assert est.time_ns == 1_956_444
    assert (est.algorithm, est.protocol, est.channels) == ("p2p", "SIMPLE", 32)


def test_small_shares_use_ll_and_its_channels_cap_bandwidth() -> None:
    # 16 KiB per peer -> LL; 32 channels x 1 GB/s = 32 GB/s < 0.5 x 360 GB/s. 7 x 16384 B
    # take 3.584 µs, plus 5 µs kernel and a 1 µs step.
    est = NcclModel(PARAMS).estimate(A2A, 8 * 16384, range(8), H100)
    assert est.protocol == "LL"
    assert est.time_ns == 9_584


def test_two_nodes_go_through_each_gpus_own_nic() -> None:
    # 16 ranks: 8e8 of 16e8 B go to the other node over one 25 GB/s NIC (32,000 µs); 15 peers
    # need 2 kernel batches of one network step each.
    cluster = make_cluster("H100-SXM5-80GB", nodes=2)
    est = NcclModel(PARAMS).estimate(A2A, 1_600_000_000, range(16), cluster)
    assert est.time_ns == round((10 + 2 * 3 + 32_000) * 1e3)
    assert p2p_rounds(16) == 2 and p2p_rounds(9) == 1 and p2p_rounds(64) == 8


@pytest.mark.parametrize("nodes", [2, 4, 8])
def test_multi_node_busbw_tends_to_n_over_n_minus_1_nics(nodes: int) -> None:
    # nccl-tests issues 267 / 130 (S. Jeaugey): all-to-all cannot aggregate several NICs; its
    # busbw tends to N/(N-1) x one GPU's NIC bandwidth, exactly (n-1)/(n-8) for n = 8N ranks.
    model = default_comm_model()
    cluster = make_cluster("H100-SXM5-80GB", nodes=nodes)
    n = 8 * nodes
    est = model.estimate(A2A, 1 << 33, range(n), cluster)
    assert isinstance(model, NcclModel)
    nic = cluster.nic_bytes_per_s_per_gpu * model.params_on(cluster).net_eff
    assert est.busbw_bytes_per_s / nic == pytest.approx((n - 1) / (n - 8), rel=0.01)


def test_uniform_all_to_allv_is_the_all_to_all() -> None:
    model = default_comm_model()
    assert isinstance(model, NcclModel)
    for nodes, nbytes in ((1, 4096), (1, 1 << 26), (2, 1 << 20), (4, 1 << 30)):
        cluster = make_cluster("H100-SXM5-80GB", nodes=nodes)
        ranks = list(range(8 * nodes))
        want = model.estimate(A2A, nbytes, ranks, cluster)
        got = model.all_to_allv(uniform_matrix(nbytes, len(ranks)), ranks, cluster)
        assert abs(got.time_ns - want.time_ns) <= 1
        assert got.protocol == want.protocol


def test_expert_loads_and_routed_matrix_by_hand() -> None:
    # 8 experts, busiest at 2x the mean: 2/8 = 0.25, the other 7 share 0.75: 6/56 each.
    loads = expert_loads(8, 2.0)
    assert loads[0] == pytest.approx(0.25)
    assert loads[1:] == pytest.approx([6 / 56] * 7)
    # 4 ranks x 2 experts: rank 0 holds experts 0 and 1 -> 0.25 + 6/56 = 0.357142...
    m = routed_matrix(1000, 4, 8, 2.0)
    assert m.shape == (4, 4)
    assert m[2] == pytest.approx([357.142857, 214.285714, 214.285714, 214.285714])
    assert routed_matrix(1000, 4, 8, 1.0) == pytest.approx(uniform_matrix(1000, 4))


def test_imbalance_is_simulated_through_the_slowest_rank() -> None:
    # 4 GPUs, 4e8 B per rank, busiest expert 2x: rank 0 receives 3 x 0.357142 x 4e8 =
    # 428,571,428 B over NVLink (it sends only 0.642857 x 4e8), 1190.476 µs at 360 GB/s,
    # + 12 µs. Balanced, every rank moves 3e8 B: 833.333 + 12 µs. The ratio (1.43) is
    # that of rank 0's received bytes, not of any factor in the model.
    model = NcclModel(PARAMS)
    ranks = [0, 1, 2, 3]
    hot = model.all_to_allv(routed_matrix(400_000_000, 4, 8, 2.0), ranks, H100)
    even = model.all_to_allv(routed_matrix(400_000_000, 4, 8, 1.0), ranks, H100)
    assert hot.time_ns == 1_202_476
    assert even.time_ns == 845_333


def test_imbalance_across_nodes_loads_the_hot_ranks_nic() -> None:
    # 2 nodes x 8 GPUs, 16 experts, expert 0 at 4x: rank 0 gets 4/16 of every rank's bytes;
    # it receives 8 x 0.25 x 1.6e9 = 3.2e9 B from the other node over a 25 GB/s NIC: 128 ms.
    cluster = make_cluster("H100-SXM5-80GB", nodes=2)
    est = NcclModel(PARAMS).all_to_allv(
        routed_matrix(1_600_000_000, 16, 16, 4.0), list(range(16)), cluster
    )
    assert est.time_ns == round((10 + 2 * 3 + 128_000) * 1e3)


def test_token_fanout_by_hand() -> None:
    # 8 experts, 2 a rank on 4 ranks, 2 ranks a node; top-2. Of the C(8, 2) = 28 expert pairs,
    # 4 share a rank and 12 a node: 1 x 4/28 + 2 x 24/28 = 13/7 ranks, 1 x 12/28 + 2 x 16/28
    # = 11/7 nodes.
    f = token_fanout(8, [2, 2], 2)
    assert (f.top_k, f.ranks, f.nodes) == (2, pytest.approx(13 / 7), pytest.approx(11 / 7))
    assert expected_distinct([2, 2, 2, 2], 2) == pytest.approx(13 / 7)
    # Node limit 1: one node, its 4 experts on 2 ranks: 2 of the 6 pairs share a rank, so
    # 1 x 2/6 + 2 x 4/6 = 5/3 ranks.
    f = token_fanout(8, [2, 2], 2, node_limit=1)
    assert (f.ranks, f.nodes) == (pytest.approx(5 / 3), 1.0)
    # A limit at or above the nodes changes nothing; top-1 goes to one rank and one node.
    assert token_fanout(8, [2, 2], 2, node_limit=2) == token_fanout(8, [2, 2], 2)
    f = token_fanout(8, [2, 2], 1)
    assert (f.ranks, f.nodes) == (pytest.approx(1.0), pytest.approx(1.0))
    # Every expert picked: every rank and node is hit.
    f = token_fanout(8, [1, 3], 8)
    assert (f.ranks, f.nodes) == (pytest.approx(4.0), pytest.approx(2.0))
    # Nodes of 1 and 3 ranks (2 and 6 experts), top-2: node 0 missed with C(6, 2)/28 = 15/28,
    # node 1 with C(2, 2)/28 = 1/28, so 13/28 + 27/28 = 10/7 nodes.
    assert token_fanout(8, [1, 3], 2).nodes == pytest.approx(10 / 7)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: token_fanout(8, [3], 2), "do not divide"),
        (lambda: token_fanout(8, [2, 2], 2, node_limit=0), "node limit"),
        (lambda: expected_distinct([2, 2], 5), "cannot draw"),
        (lambda: expert_loads(8, 9.0), "imbalance"),
        (lambda: expert_loads(8, 0.5), "imbalance"),
        (lambda: routed_matrix(100, 3, 8, 1.0), "do not divide"),
        (lambda: NcclModel().all_to_allv(np.ones((2, 3)), [0, 1], H100), "expected 2 x 2"),
        (lambda: NcclModel().all_to_allv(-np.ones((2, 2)), [0, 1], H100), "non-negative"),
        (lambda: NcclModel().all_to_allv(np.ones((2, 2)), [0, 0], H100), "distinct"),
    ],
)
def test_bad_input_is_refused(call: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()  # type: ignore[operator]
