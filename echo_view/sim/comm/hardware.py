"""Carrying calibrated collective constants to other hardware.

A calibration (``calibrated.toml``) describes the system its nccl-tests logs were measured on:
a GPU architecture and a NIC line rate (``CommParams.arch``, ``nic_gbytes_per_s``). Two of its
constants are properties of that hardware, not of NCCL, and change with it:

- one channel's throughput (``channel_gbs``): a channel is one thread block copying data, so
  it runs as fast as the architecture's SMs and copy engines let it. Another architecture
  scales the calibrated rates by NCCL's own per-architecture per-channel maxima
  (:func:`~echo_view.sim.comm.tuner.channel_rate_ratio`; Hopper over Ampere: LL 1.61, LL128
  1.84, Simple 1.61).
- the fraction of a link's line rate delivered (``nvlink_eff``, ``net_eff``): for a link
  generation other than the measured one, the fraction NCCL's maintainers state for it
  (:data:`NVLINK_DELIVERED`, :data:`NIC_DELIVERED`), when they state one.

Everything else (latencies per protocol and hop, protocol payload fractions, the per-channel
fixed cost) is NCCL's software and carries over unchanged. A calibration that does not name
its hardware applies everywhere as it is.
"""

from __future__ import annotations

import math
from dataclasses import replace

from echo_view.sim.cluster import Cluster
from echo_view.sim.comm.params import CommParams
from echo_view.sim.comm.tuner import channel_rate_ratio

#: Delivered / nominal NVLink bandwidth by architecture, for rings and the other non-all-reduce
#: collectives: H100 reaches ~370 of its 450 GB/s per direction, ~20% protocol overhead
#: (NCCL maintainer, NVIDIA/nccl-tests issue 212, 2024-05-06).
NVLINK_DELIVERED: dict[str, float] = {"hopper": 370.0 / 450.0}

#: Delivered / nominal NIC bandwidth, by line rate per GPU in GB/s. NCCL's maintainers take
#: 24 GB/s as the peak of a 200 Gb/s NIC and 12 GB/s of a 100 Gb/s one (NVIDIA/nccl-tests
#: issue 119, 2022-11-17), i.e. 96% of the line rate; for 400 Gb/s NDR they state 46-49 GB/s
#: in practice (NVIDIA/nccl-tests issues 267 and 290), 92-98%, taken as the same 96%.
NIC_DELIVERED: dict[float, float] = {12.5: 0.96, 25.0: 0.96, 50.0: 0.96}


def params_for(params: CommParams, cluster: Cluster) -> CommParams:
    """``params`` as they hold on ``cluster``: unchanged on the hardware they were measured
    on (or when they do not say), else with the hardware-bound constants replaced."""
    changes: dict[str, object] = {}
    arch = cluster.gpu.arch
    if params.arch and arch != params.arch:
        ratio = channel_rate_ratio(arch, params.arch)
        if ratio is not None:
            scaled = zip(params.channel_gbs, ratio, strict=True)
            changes["channel_gbs"] = tuple(c * r for c, r in scaled)
        if arch in NVLINK_DELIVERED:
            changes["nvlink_eff"] = NVLINK_DELIVERED[arch]
    nic = cluster.nic_bytes_per_s_per_gpu / 1e9
    if params.nic_gbytes_per_s and not math.isclose(nic, params.nic_gbytes_per_s, rel_tol=1e-6):
        changes["net_eff"] = nic_delivered(nic, params.nic_gbytes_per_s, params.net_eff) / nic
    return replace(params, **changes) if changes else params  # type: ignore[arg-type]


def nic_delivered(rate: float, measured_rate: float, measured_eff: float) -> float:
    """GB/s a NIC of line ``rate`` GB/s per GPU delivers: between the line rates with a figure
    (:data:`NIC_DELIVERED`, and the calibration's own, ``measured_eff`` at ``measured_rate``,
    which replaces a stated one there), the delivered rate interpolated linearly; outside them,
    the nearest one's fraction. So more line rate never delivers less (a rate between two
    stated ones kept the calibration's fraction: 49, 50 and 51 GB/s delivered 31.4, 48.0 and
    32.7 GB/s with the shipped one)."""
    points = {r: e for r, e in NIC_DELIVERED.items() if not math.isclose(r, measured_rate)}
    points[measured_rate] = measured_eff
    rates = sorted(points)
    if rate <= rates[0]:
        return rate * points[rates[0]]
    if rate >= rates[-1]:
        return rate * points[rates[-1]]
    hi = next(i for i, r in enumerate(rates) if r >= rate)
    r0, r1 = rates[hi - 1], rates[hi]
    d0, d1 = r0 * points[r0], r1 * points[r1]
    return d0 + (d1 - d0) * (rate - r0) / (r1 - r0)
