"""DeepEP dispatch / combine model: DeepEP's published H800 bandwidths reproduced, scaled to
other links, capped by the SM budget, and imbalance through the slowest rank's bytes."""

from __future__ import annotations

import pytest

from echo_view.model import CollectiveKind
from echo_view.sim.cluster import make_cluster
from echo_view.sim.comm import NcclModel, model_for_library
from echo_view.sim.comm.alltoall import routed_matrix
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


def test_imbalance_loads_the_hot_rank() -> None:
    # 64 ranks, 256 experts (4 each), expert 0 at 2x the mean: rank 0 receives
    # (2 + 3 x 254/255) / 256 of every rank's bytes, x 64 ranks, over 51 GB/s.
    cluster = make_cluster(H800, nodes=8)
    est = DeepEPModel().all_to_allv(routed_matrix(S, 64, 256, 2.0), range(64), cluster)
    share = (2 + 3 * 254 / 255) / 256
    assert est.time_ns == round(64 * share * S / 51)


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
