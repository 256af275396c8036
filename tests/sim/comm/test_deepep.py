"""DeepEP dispatch / combine model: DeepEP's published H800 bandwidths reproduced, scaled to
other links, capped by the SM budget, a token counted once per destination rank (NVLink) and
node (RDMA), and imbalance through the slowest rank's bytes."""

from __future__ import annotations

import pytest

from echo_view.model import CollectiveKind
from echo_view.sim.cluster import make_cluster
from echo_view.sim.comm import NcclModel, model_for_library
from echo_view.sim.comm.alltoall import Fanout, routed_matrix
from echo_view.sim.comm.deepep import DeepEPModel, DeepEPParams

A2A = CollectiveKind.ALL_TO_ALL
# DeepSeek-V3 pre-training dispatch per rank: 4096 tokens x 8 copies x 7168 B (FP8).
S = 4096 * 8 * 7168
H800 = "H800-SXM5-80GB"


@pytest.mark.parametrize(
    ("nodes", "gbs"), [(1, 153.0), (2, 43.0), (4, 58.0), (8, 51.0)]
)  # DeepEP docs/legacy.md: intranode EP8, internode EP16 / EP32 / EP64 dispatch
def test_published_dispatch_bandwidths_are_reproduced(nodes: int, gbs: float) -> None:
    n = 8 * nodes
    est = DeepEPModel().estimate(A2A, S, range(n), make_cluster(H800, nodes=nodes))
    assert est.time_ns == round(S / (gbs * 1e9) * 1e9)
    assert est.algorithm == ("intranode" if nodes == 1 else "internode")


def test_combine_uses_its_own_row() -> None:
    model = DeepEPModel()
    cluster = make_cluster(H800, nodes=4)
    even = routed_matrix(S, 32, 256, 1.0)
    assert model.all_to_allv(even, range(32), cluster, "combine").time_ns == round(S / 57)
    with pytest.raises(ValueError, match="phase"):
        model.all_to_allv(even, range(32), cluster, "gather")


def test_other_links_scale_and_the_sm_budget_caps() -> None:
    h100 = make_cluster("H100-SXM5-80GB")
    # 450 GB/s NVLink against H800's 200: 153 x 2.25 = 344.25 GB/s, under 24 SMs x 26.79.
    assert DeepEPModel().collective_time_ns(A2A, S, range(8), h100) == round(S / 344.25)
    # 6 SMs move 6 x 643 / 24 = 160.75 GB/s: the cap on H100, not on H800 (153 < 160.75).
    few = DeepEPModel(DeepEPParams(sms=6))
    assert few.collective_time_ns(A2A, S, range(8), h100) == round(S / 160.75)
    assert few.collective_time_ns(A2A, S, range(8), make_cluster(H800)) == round(S / 153)


def test_imbalance_loads_the_hot_node_over_rdma_and_the_hot_rank_over_nvlink() -> None:
    # 64 ranks on 8 nodes, 256 experts (4 a rank, 32 a node), expert 0 at 2x the mean, bytes
    # already one per destination. Rank 0 receives 64 x (2 + 3 x 254/255) / 256 x S over
    # NVLink (153 GB/s); node 0 receives 64 x (2 + 31 x 254/255) / 256 x S over its 8 NICs
    # (51 GB/s each): the RDMA tier is the slower one, 1.027x the balanced time, not 1.247x.
    cluster = make_cluster(H800, nodes=8)
    est = DeepEPModel().all_to_allv(routed_matrix(S, 64, 256, 2.0), range(64), cluster)
    rank = 64 * (2 + 3 * 254 / 255) / 256 * S / 153
    node = 64 * (2 + 31 * 254 / 255) / 256 * S / 8 / 51
    assert node > rank
    assert est.time_ns == round(node)
    # Within one node the hot rank's NVLink ends the dispatch: 8 ranks, 4 experts each.
    one = make_cluster(H800)
    est = DeepEPModel().all_to_allv(routed_matrix(S, 8, 32, 2.0), range(8), one)
    assert est.time_ns == round(8 * (2 + 3 * 30 / 31) / 32 * S / 153)
    # The combine sends the same bytes back: the hot rank is the busiest sender.
    est = DeepEPModel().all_to_allv(routed_matrix(S, 8, 32, 2.0).T, range(8), one, "combine")
    assert est.time_ns == round(8 * (2 + 3 * 30 / 31) / 32 * S / 158)


def test_fanout_counts_a_token_once_per_rank_and_node() -> None:
    # 16 ranks on 2 nodes, balanced: a fanout of 6 ranks and 1.5 nodes of top-8 sends
    # 6/8 of the copies over NVLink (153 GB/s) and 1.5/8 over RDMA (43 GB/s).
    cluster = make_cluster(H800, nodes=2)
    m = routed_matrix(S, 16, 32, 1.0)
    est = DeepEPModel().all_to_allv(m, range(16), cluster, fanout=Fanout(8, 6.0, 1.5))
    assert est.time_ns == round(max(6 / 8 * S / 153, 1.5 / 8 * S / 43))
    est = DeepEPModel().all_to_allv(m, range(16), cluster, fanout=Fanout(8, 7.5, 0.5))
    assert est.time_ns == round(7.5 / 8 * S / 153)  # NVLink binds


def test_latency_adds_and_library_selects_the_model() -> None:
    cluster = make_cluster(H800)
    slow = DeepEPModel(DeepEPParams(latency_us=20.0))
    assert slow.collective_time_ns(A2A, S, range(8), cluster) == round(S / 153) + 20_000
    base = NcclModel()
    deepep = model_for_library("deepep", base)
    assert isinstance(deepep, DeepEPModel)
    assert model_for_library("nccl", base) is base
    # DeepEP runs only the all-to-all: everything else is NCCL's.
    ar = CollectiveKind.ALL_REDUCE
    assert deepep.collective_time_ns(ar, S, range(8), cluster) == base.collective_time_ns(
        ar, S, range(8), cluster
    )


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(ValueError, match="SM"):
        DeepEPParams(sms=0)
    with pytest.raises(ValueError, match="per EP size"):
        DeepEPParams(internode_ep=(16,), internode_gbs=())
