"""MoE dispatch / combine with routing imbalance, through either model."""

from __future__ import annotations

import math

import pytest

from echo_view.sim.cluster import make_cluster
from echo_view.sim.comm import CommParams, NcclModel
from echo_view.sim.comm.deepep import DeepEPModel
from echo_view.sim.comm.routing import routed_time_ns

H800 = make_cluster("H800-SXM5-80GB", nodes=2)
S = 4096 * 8 * 7168


def test_deepep_dispatch_and_combine_by_hand() -> None:
    # EP16 on 2 nodes, 32 experts (2 a rank, 16 a node), top-2, expert 0 at 3x the mean.
    # A token's 2 experts: on one rank with chance 16 / C(32, 2) = 1/31, so 2 - 1/31 = 61/31
    # ranks; on one node with chance 2 C(16, 2) / C(32, 2) = 15/31, so 47/31 nodes.
    # Node 0 holds experts 0-15: 3/32 + 15 x 29/(32 x 31) of every rank's copies; its 8 NICs
    # receive 16 x that x S x (47/31)/2 at 43 GB/s, more than any rank sends (S x 47/62) and,
    # per NIC, slower than rank 0's NVLink (16 x (3/32 + 29/(32 x 31)) x S x 61/62 at 153).
    # Combine moves the same bytes the other way: the same time at combine's 43 GB/s.
    model = DeepEPModel()
    ranks = range(16)
    node = 16 * (3 / 32 + 15 * 29 / (32 * 31)) * S * 47 / 62 / 8 / 43
    rank = 16 * (3 / 32 + 29 / (32 * 31)) * S * 61 / 62 / 153
    assert node > rank
    for phase in ("dispatch", "combine"):
        got = routed_time_ns(model, S, ranks, H800, 32, 3.0, phase, top_k=2)
        assert got == round(node)


@pytest.mark.parametrize(
    ("nodes", "gbs"), [(1, 153.0), (2, 43.0), (4, 58.0), (8, 51.0)]
)  # DeepEP docs/legacy.md: intranode EP8, internode EP16 / EP32 / EP64 dispatch
def test_deepeps_setting_gives_back_its_bandwidth_counted_its_way(nodes: int, gbs: float) -> None:
    """DeepSeek-V3 pre-training (4096 tokens, 7168 B a token in FP8, top-8 of 256 experts,
    top-4 groups: at most 4 nodes a token), bytes counted as DeepEP's tests count them: rows
    per token and destination rank (intranode) or node (internode)."""
    cluster = make_cluster("H800-SXM5-80GB", nodes=nodes)
    n = 8 * nodes
    got = routed_time_ns(DeepEPModel(), S, range(n), cluster, 256, top_k=8, node_limit=4)
    per_rank = 256 // n
    if nodes == 1:  # distinct ranks: 8 x (1 - C(224, 8) / C(256, 8))
        rows = 8 * (1 - math.comb(256 - per_rank, 8) / math.comb(256, 8))
    elif nodes < 8:  # distinct nodes, the limit of 4 not binding
        rows = nodes * (1 - math.comb(256 - 256 // nodes, 8) / math.comb(256, 8))
    else:  # 5.29 nodes expected without the limit: capped at 4
        rows = 4
    deepep_bytes = 4096 * rows * 7168
    assert deepep_bytes / got == pytest.approx(gbs, rel=1e-6)
    # The 8 routed copies of each token over the same time: DeepEP moves fewer.
    assert S / got > 1.5 * gbs


def test_nccl_dispatch_grows_with_imbalance_through_the_hot_rank() -> None:
    # 16 ranks over 2 nodes, 16 experts; the NIC carries what rank 0 receives from the other
    # node: 8 x (imbalance / 16) x 1.6e9 B at 25 GB/s; two 3 µs network steps and 10 µs kernel.
    params = CommParams(base_us=(5.0, 5.0, 10.0), net_hop_us=(3.0, 3.0, 3.0), net_eff=0.5)
    model = NcclModel(params)
    cluster = make_cluster("H100-SXM5-80GB", nodes=2)
    for ratio in (2.0, 4.0, 8.0):
        want = (10 + 2 * 3) * 1e3 + 8 * ratio / 16 * 1.6e9 / 25e9 * 1e9
        assert routed_time_ns(model, 1_600_000_000, range(16), cluster, 16, ratio) == round(want)


def test_bad_phase_is_refused() -> None:
    with pytest.raises(ValueError, match="phase"):
        routed_time_ns(DeepEPModel(), S, range(16), H800, 32, 1.0, "reduce")
