"""White-box NCCL-like collective model.

NCCL's tuner (:mod:`.tuner`) decides which algorithm (ring, tree, NVLS), protocol (LL, LL128,
Simple) and how many channels a call uses; this module times that choice:

    time = latency + bytes_on_the_busiest_link / bus_bandwidth

- latency = base[protocol] + channels * channel_us
            + intra-node hops * hop[intra tier]
            + inter-node hops * (hop[net] + channels * proxy_us)
  (a tree's hops cost ``tree_hop_factor`` ring hops);
- bus bandwidth = min(channels * per-channel throughput,
                      protocol payload fraction * slowest tier), where the tiers are the GPU's
  NVLink (or PCIe) and, across nodes, the NICs of the node with the fewest ranks of the group;
- bytes on the busiest link: 2(n-1)/n * S (ring all-reduce), (n-1)/n * S (all-gather,
  reduce-scatter), 2 * S (tree all-reduce), S (broadcast, reduce, NVLS).

Point-to-point collectives (send/recv, all-to-all, gather, scatter) move each peer's share over
NVLink or the GPU's NIC concurrently; all-to-all and all-to-allv also pay NCCL's per-batch
latency and point-to-point channel limits (:mod:`.alltoall`). A one-rank group copies its
buffer in HBM.
Equations and sources: docs/comm-model.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from echo_view.model import CollectiveKind
from echo_view.model.collectives import collective
from echo_view.sim.cluster import Cluster
from echo_view.sim.comm.alltoall import (
    F64,
    RankTraffic,
    all_to_allv_us,
    check_matrix,
    p2p_channels,
    rank_time_us,
)
from echo_view.sim.comm.estimate import CollectiveEstimate, bus_factor
from echo_view.sim.comm.hardware import params_for
from echo_view.sim.comm.params import CommParams
from echo_view.sim.comm.placement import PROTOCOLS, Placement, place
from echo_view.sim.comm.tuner import (
    NVLS,
    P2P_LL_THRESHOLD,
    TREE,
    Topology,
    TunerChoice,
    candidates,
    choose,
    table,
    topology,
)


def tier_bandwidths(placement: Placement, cluster: Cluster, params: CommParams) -> float:
    """Delivered GB/s of the slowest tier a ring or tree of this group crosses."""
    bw = math.inf
    if placement.ppn_max > 1:
        if placement.intra == "nvlink":
            bw = cluster.nvlink_bw / 1e9 * params.nvlink_eff
        else:
            bw = cluster.pcie_bw / 1e9 * params.pcie_eff
    if placement.multi_node:
        nics = placement.ppn_min * cluster.nic_bytes_per_s_per_gpu / 1e9
        bw = min(bw, nics * params.net_eff)
    return bw


def time_choice_us(
    kind: CollectiveKind,
    nbytes: int,
    placement: Placement,
    cluster: Cluster,
    params: CommParams,
    choice: TunerChoice,
) -> float:
    """Time of the tuner's ``choice`` on this hardware, µs."""
    n, nodes = placement.nranks, placement.nodes
    if choice.algorithm == NVLS:
        return params.nvls_us + nbytes / (cluster.nvlink_bw * params.nvls_eff) * 1e6
    p = PROTOCOLS.index(choice.protocol)
    intra_hop = (params.nvlink_hop_us if placement.intra == "nvlink" else params.pcie_hop_us)[p]
    nc = choice.share  # continuous: tuner.channel_share
    # Every network step, the proxy thread posts one send and one receive per channel.
    net_hop = params.net_hop_us[p] + cluster.net_latency_s * 1e6 + nc * params.proxy_us[p]
    bus = min(
        nc * params.channel_gbs[p],
        params.protocol_eff[p] * tier_bandwidths(placement, cluster, params),
    )
    fixed = params.base_us[p] + nc * params.channel_us
    if choice.algorithm == TREE:
        depth = math.ceil(math.log2(nodes)) if nodes > 1 else 0
        hops = (placement.ppn_max - 1) * intra_hop + depth * net_hop
        return fixed + params.tree_hop_factor * 2 * hops + 2 * nbytes / (bus * 1e3)
    # Ring: a chunk's path around the ring crosses n - nodes intra-node and nodes - 1
    # inter-node links per pass; all-reduce makes two passes. A chain (broadcast, reduce)
    # moves the data across each link once.
    info = collective(kind)
    latency = fixed + info.passes * ((n - nodes) * intra_hop + (nodes - 1) * net_hop)
    return latency + nbytes * info.bus_factor(n) / (bus * 1e3)


class NcclModel:
    """NCCL-like collective model: :meth:`estimate` and :meth:`collective_time_ns`."""

    name = "nccl"

    def __init__(self, params: CommParams | None = None) -> None:
        self.params = params if params is not None else CommParams()
        self._tables: dict[
            tuple[CollectiveKind, Placement, Cluster],
            tuple[Topology, dict[tuple[str, str], tuple[float, float]]],
        ] = {}
        self._on: dict[Cluster, CommParams] = {}

    def params_on(self, cluster: Cluster) -> CommParams:
        """The constants as they hold on ``cluster`` (:func:`.hardware.params_for`, cached)."""
        hit = self._on.get(cluster)
        if hit is None:
            hit = self._on[cluster] = params_for(self.params, cluster)
        return hit

    def tuner(
        self, kind: CollectiveKind, placement: Placement, cluster: Cluster
    ) -> tuple[Topology, dict[tuple[str, str], tuple[float, float]]]:
        """NCCL's topology and cost table for this group (cached)."""
        key = (kind, placement, cluster)
        hit = self._tables.get(key)
        if hit is None:
            topo = topology(placement, cluster)
            hit = (topo, table(kind, placement, cluster, topo))
            self._tables[key] = hit
        return hit

    def options(
        self, kind: CollectiveKind, nbytes: int, placement: Placement, cluster: Cluster
    ) -> list[TunerChoice]:
        """NCCL's enabled (algorithm, protocol) pairs with their channels and NCCL's own
        times (tuned collectives of two or more ranks only)."""
        topo, costs = self.tuner(kind, placement, cluster)
        return candidates(kind, nbytes, placement, topo, costs)

    def estimate(
        self, kind: CollectiveKind, nbytes: int, ranks: Sequence[int], cluster: Cluster
    ) -> CollectiveEstimate:
        """Time and shape of one collective with per-rank payload ``nbytes`` over ``ranks``."""
        if nbytes < 0:
            raise ValueError(f"negative payload {nbytes} for {kind.label}")
        if kind == CollectiveKind.BARRIER:
            nbytes = max(nbytes, 4)  # PyTorch's barrier all-reduces one element
        kind, assumed = _normalise(kind)
        placement = place(ranks, cluster)
        n = placement.nranks
        if nbytes == 0:
            return CollectiveEstimate(0, "none", "none", 0, 0.0, 0.0, assumed=assumed)
        options = None
        if n > 1 and collective(kind).tuned:
            options = self.options(kind, nbytes, placement, cluster)
        us, algorithm, protocol, channels = predict_us(
            self.params_on(cluster), kind, nbytes, placement, cluster, options
        )
        nccl_us = choose(options).time_us if options is not None else None
        return _finish(kind, nbytes, n, us, algorithm, protocol, channels, nccl_us, assumed)

    def collective_time_ns(
        self, kind: CollectiveKind, nbytes: int, ranks: Sequence[int], cluster: Cluster
    ) -> int:
        return self.estimate(kind, nbytes, ranks, cluster).time_ns

    def all_to_allv(
        self, send: Sequence[Sequence[float]] | F64, ranks: Sequence[int], cluster: Cluster
    ) -> CollectiveEstimate:
        """An all-to-allv: ``send[i][j]`` bytes from ``ranks[i]`` to ``ranks[j]``. It ends when
        its slowest rank ends; algbw / busbw are those of the mean per-rank payload."""
        if len(set(ranks)) != len(ranks):
            raise ValueError("all-to-allv ranks must be distinct")
        matrix = check_matrix(send, len(ranks))
        placement = place(ranks, cluster)
        n = placement.nranks
        mean = round(float(matrix.sum()) / n)
        kind = CollectiveKind.ALL_TO_ALL
        if mean == 0:
            return CollectiveEstimate(0, "none", "none", 0, 0.0, 0.0)
        if n == 1:
            us, algorithm, protocol, channels = predict_us(
                self.params_on(cluster), kind, mean, placement, cluster, None
            )
            return _finish(kind, mean, n, us, algorithm, protocol, channels, None, None)
        channels = p2p_channels(topology(placement, cluster))
        nodes = [cluster.node_of(r) for r in ranks]
        params = self.params_on(cluster)
        us, protocol, _ = all_to_allv_us(matrix, nodes, placement, cluster, params, channels)
        return _finish(kind, mean, n, us, "p2p", protocol, channels, None, None)


def predict_us(
    params: CommParams,
    kind: CollectiveKind,
    nbytes: int,
    placement: Placement,
    cluster: Cluster,
    options: Sequence[TunerChoice] | None,
) -> tuple[float, str, str, int]:
    """(µs, algorithm, protocol, channels) of one collective. ``options`` are NCCL's
    candidates for tuned collectives of two or more ranks (else None); the one run is NCCL's
    pick or the fastest on this hardware, as ``params.selection`` says."""
    if placement.nranks == 1:
        bw = cluster.gpu.hbm_bytes_per_s * params.hbm_eff
        return params.local_copy_us + 2 * nbytes / bw * 1e6, "local_copy", "none", 0
    if options:
        if params.selection == "nccl":
            choice = choose(list(options))
            us = time_choice_us(kind, nbytes, placement, cluster, params, choice)
        else:
            timed = [
                (time_choice_us(kind, nbytes, placement, cluster, params, o), o) for o in options
            ]
            us, choice = min(timed, key=lambda t: t[0])
        return us, choice.algorithm, choice.protocol, choice.channels
    if kind == CollectiveKind.ALL_TO_ALL:
        # Even shares: the busiest node's NVLink traffic and the emptiest node's NIC traffic
        # bound every rank (the time grows with each), so one rank's formula is exact.
        intra, inter, _ = p2p_split(kind, nbytes, placement)
        traffic = RankTraffic(intra, intra, inter, inter, float(nbytes // placement.nranks))
        channels = p2p_channels(topology(placement, cluster))
        us, p = rank_time_us(traffic, placement.nranks, placement, cluster, params, channels)
        return us, "p2p", PROTOCOLS[p], channels
    us, proto = p2p_time_us(kind, nbytes, placement, cluster, params)
    return us, "p2p", proto, 1


def p2p_time_us(
    kind: CollectiveKind,
    nbytes: int,
    placement: Placement,
    cluster: Cluster,
    params: CommParams,
) -> tuple[float, str]:
    """Send/recv, all-to-all, gather, scatter: each peer's share moves concurrently over NVLink
    (same node) or the GPU's own NIC (other nodes)."""
    intra_bytes, inter_bytes, p = p2p_split(kind, nbytes, placement)
    eff = params.protocol_eff[p]
    if placement.intra == "nvlink":
        intra_bw, intra_hop = cluster.nvlink_bw * params.nvlink_eff, params.nvlink_hop_us[p]
    else:
        intra_bw, intra_hop = cluster.pcie_bw * params.pcie_eff, params.pcie_hop_us[p]
    net_bw = cluster.nic_bytes_per_s_per_gpu * params.net_eff
    seconds = max(intra_bytes / (intra_bw * eff), inter_bytes / (net_bw * eff))
    hop = params.net_hop_us[p] + cluster.net_latency_s * 1e6 if inter_bytes else intra_hop
    return params.base_us[p] + hop + seconds * 1e6, PROTOCOLS[p]


def p2p_split(kind: CollectiveKind, nbytes: int, placement: Placement) -> tuple[float, float, int]:
    """What a point-to-point style collective moves within the node and across nodes, and the
    protocol (index into ``PROTOCOLS``): LL for small per-peer shares, else SIMPLE."""
    n = placement.nranks
    if collective(kind).pattern == "pairwise":
        intra, inter = (0.0, float(nbytes)) if placement.multi_node else (float(nbytes), 0.0)
        per_peer = nbytes
    else:
        intra = nbytes * (placement.ppn_max - 1) / n
        inter = nbytes * (n - placement.ppn_min) / n
        per_peer = nbytes // n
    return intra, inter, 0 if per_peer <= P2P_LL_THRESHOLD else 2


def _normalise(kind: CollectiveKind) -> tuple[CollectiveKind, str | None]:
    """Kinds timed as another (catalogue ``timed_as``): a barrier is a one-element all-reduce;
    an unknown collective is timed as an all-reduce and says so."""
    info = collective(kind)
    if info.timed_as is None:
        return kind, None
    return info.timed_as, info.timed_as.label if info.assumed else None


def _finish(
    kind: CollectiveKind,
    nbytes: int,
    n: int,
    us: float,
    algorithm: str,
    protocol: str,
    channels: int,
    nccl_us: float | None,
    assumed: str | None,
) -> CollectiveEstimate:
    time_ns = max(1, round(us * 1e3))
    algbw = nbytes / (time_ns * 1e-9)
    return CollectiveEstimate(
        time_ns=time_ns,
        algorithm=algorithm,
        protocol=protocol,
        channels=channels,
        algbw_bytes_per_s=algbw,
        busbw_bytes_per_s=algbw * bus_factor(kind, n),
        nccl_time_ns=None if nccl_us is None else round(nccl_us * 1e3),
        assumed=assumed,
    )
