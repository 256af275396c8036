"""Carrying calibrated collective constants to other hardware (:mod:`echo_view.sim.comm.hardware`):
expectations from NCCL 2.22.3's per-architecture tables and the stated delivered link rates."""

from __future__ import annotations

import itertools

import pytest

from echo_view.errors import ConfigError
from echo_view.model import CollectiveKind
from echo_view.sim.calibrate.comm import Measurement, measured_hardware
from echo_view.sim.cluster import make_cluster
from echo_view.sim.comm import CommParams, NcclModel, comm_model_from_toml, comm_model_to_toml
from echo_view.sim.comm.hardware import params_for

# Measured on A100 with 200 Gb/s (25 GB/s) NICs, as the shipped calibration is.
AMPERE = CommParams(
    nvlink_eff=0.74, net_eff=0.64, channel_gbs=(3.0, 7.0, 15.0), arch="ampere",
    nic_gbytes_per_s=25.0,
)  # fmt: skip


def test_the_measured_hardware_keeps_the_constants() -> None:
    assert params_for(AMPERE, make_cluster("A100-SXM4-80GB", nodes=4)) is AMPERE


def test_unstated_hardware_applies_everywhere() -> None:
    plain = CommParams(net_eff=0.64)
    assert params_for(plain, make_cluster("H100-SXM5-80GB", nodes=4)) is plain


def test_hopper_scales_channels_by_nccls_per_architecture_maxima() -> None:
    # tuning.cc: llMaxBws one node 141.0 / 87.7, perChMaxRingLL128Bws 36.7 / 20.0,
    # perChMaxTreeBws one node 38.7 / 24.0; NVLink 370 of 450 GB/s (nccl-tests issue 212);
    # a 400 Gb/s NIC (50 GB/s, another line rate than the measured 25) at 96%.
    on = params_for(AMPERE, make_cluster("H100-SXM5-80GB", nodes=2))
    assert on.channel_gbs == pytest.approx((3.0 * 141 / 87.7, 7.0 * 1.835, 15.0 * 38.7 / 24))
    assert on.nvlink_eff == pytest.approx(0.8222, abs=1e-4)
    assert on.net_eff == 0.96
    # Same architecture, other NIC: only the NIC changes; same NIC, other GPU: only the GPU.
    a100_ndr = params_for(AMPERE, make_cluster("A100-SXM4-80GB", nic_gbytes_per_s=50))
    assert (a100_ndr.channel_gbs, a100_ndr.nvlink_eff, a100_ndr.net_eff) == (
        AMPERE.channel_gbs, 0.74, 0.96,
    )  # fmt: skip
    h100_hdr = params_for(AMPERE, make_cluster("H100-SXM5-80GB", nic_gbytes_per_s=25))
    assert h100_hdr.net_eff == 0.64


def test_delivered_nic_bandwidth_is_interpolated_between_stated_line_rates() -> None:
    """Stated: 96% at 12.5, 25 and 50 GB/s; measured (the calibration): 64% at 25. Between two
    of these the delivered GB/s are interpolated, outside them the nearest fraction holds: a
    rate nobody states kept the calibration's 64%, so 49 and 51 GB/s delivered less than 50."""

    def eff(rate: float) -> float:
        return params_for(AMPERE, make_cluster("A100-SXM4-80GB", nic_gbytes_per_s=rate)).net_eff

    assert eff(6.25) == 0.96 and eff(12.5) == 0.96 and eff(50) == 0.96 and eff(100) == 0.96
    # Halfway from 25 (0.64 x 25 = 16 GB/s) to 50 (48 GB/s): 32 GB/s of 37.5.
    assert eff(37.5) * 37.5 == pytest.approx(32.0)
    # Halfway from 12.5 (12 GB/s) to 25 (16): 14 of 18.75.
    assert eff(18.75) * 18.75 == pytest.approx(14.0)
    rates = [r / 4 for r in range(4, 400)]
    delivered = [eff(r) * r for r in rates]
    assert all(b >= a for a, b in itertools.pairwise(delivered))


def test_a_cross_node_ring_is_bound_by_the_delivered_nic() -> None:
    # One GPU per node on 16 nodes, 400 Gb/s each: two Simple channels carry 2 x 15 x 1.6125 =
    # 48.4 GB/s, the NIC 0.96 x 50 = 48 GB/s; an 8 GiB reduce-scatter approaches 48 GB/s busbw.
    cluster = make_cluster("H100-SXM5-80GB", nodes=16)
    est = NcclModel(AMPERE).estimate(
        CollectiveKind.REDUCE_SCATTER, 1 << 33, [8 * i for i in range(16)], cluster
    )
    assert est.busbw_bytes_per_s / 1e9 == pytest.approx(48.0, rel=0.01)
    # On the measured NIC rate the same ring is bound by 0.64 x 25 GB/s.
    hdr = make_cluster("H100-SXM5-80GB", nodes=16, nic_gbytes_per_s=25)
    slow = NcclModel(AMPERE).estimate(
        CollectiveKind.REDUCE_SCATTER, 1 << 33, [8 * i for i in range(16)], hdr
    )
    assert slow.busbw_bytes_per_s / 1e9 == pytest.approx(16.0, rel=0.01)


def test_calibration_records_the_hardware_it_saw() -> None:
    a100 = make_cluster("A100-SXM4-40GB", nodes=2)
    one = Measurement(CollectiveKind.ALL_REDUCE, 1 << 20, 1000, tuple(range(16)), a100)
    assert measured_hardware([one]) == {"arch": "ampere", "nic_gbytes_per_s": 25.0}
    h100 = make_cluster("H100-SXM5-80GB", nodes=2)
    other = Measurement(CollectiveKind.ALL_REDUCE, 1 << 20, 1000, tuple(range(16)), h100)
    assert measured_hardware([one, other]) == {"arch": "", "nic_gbytes_per_s": 0.0}


def test_the_hardware_round_trips_through_toml() -> None:
    model = comm_model_from_toml(comm_model_to_toml(NcclModel(AMPERE)))
    assert isinstance(model, NcclModel)
    assert (model.params.arch, model.params.nic_gbytes_per_s) == ("ampere", 25.0)
    for bad in ('"fast"', "-1", "nan", "true"):
        with pytest.raises(ConfigError, match="nic_gbytes_per_s"):
            comm_model_from_toml(f'[model]\nkind = "nccl"\nnic_gbytes_per_s = {bad}\n', "c.toml")


def test_the_shipped_calibration_names_its_hardware() -> None:
    from echo_view.sim.comm.defaults import default_comm_model

    model = default_comm_model()
    assert isinstance(model, NcclModel)
    assert (model.params.arch, model.params.nic_gbytes_per_s) == ("ampere", 25.0)
