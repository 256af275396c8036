"""MoE dispatch / combine with routing imbalance, through either model."""

from __future__ import annotations

import pytest

from echo_view.sim.cluster import make_cluster
from echo_view.sim.comm import CommParams, NcclModel
from echo_view.sim.comm.deepep import DeepEPModel
from echo_view.sim.comm.routing import routed_time_ns

H800 = make_cluster("H800-SXM5-80GB", nodes=2)
S = 4096 * 8 * 7168


def test_deepep_dispatch_and_combine_by_hand() -> None:
    # EP16, 32 experts (2 per rank), expert 0 at 3x the mean: rank 0 holds 3/32 + 29/(32x31)
    # of every rank's bytes; dispatch: it receives 16 x that x S at 43 GB/s. Combine sends it
    # back: each rank receives S x (its sends), the most loaded receiver gets S (all ranks
    # send the same), so the combine is the balanced time, S / 43 GB/s.
    model = DeepEPModel()
    ranks = range(16)
    share = 3 / 32 + 29 / (32 * 31)
    got = routed_time_ns(model, S, ranks, H800, 32, 3.0)
    assert got == round(16 * share * S / 43)
    assert routed_time_ns(model, S, ranks, H800, 32, 3.0, "combine") == round(S / 43)


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
