"""NCCL's own choice of algorithm, protocol and channel count for a collective.

NCCL picks, per call, the (algorithm, protocol) pair its cost model (``src/graph/tuning.cc``)
predicts fastest, then trims the channel count for small messages (``src/enqueue.cc``). The
measured time follows that choice even where the choice is not the fastest, so echo-view
reproduces the choice with NCCL's constants (v2.22.3, the version Echo used; Blackwell rows
from later releases) and then times it with its own calibrated model (:mod:`.nccl`).

The topology NCCL's model sees is rebuilt from the cluster: per-link NVLink bandwidths of
``src/graph/topo.h``, NIC speeds rounded down to NCCL's search steps, one ring channel per
NVLink (single node) or per NIC (several nodes), doubled into communicator channels.
Everything here is in NCCL's units: microseconds and GB/s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from echo_view.errors import ConfigError
from echo_view.model import CollectiveKind
from echo_view.model.collectives import collective
from echo_view.sim.cluster import Cluster
from echo_view.sim.comm.placement import PROTOCOLS, Placement

LL, LL128, SIMPLE = PROTOCOLS
RING, TREE, NVLS = "RING", "TREE", "NVLS"

# baseLat [algorithm][LL, LL128, Simple], µs.
_BASE_LAT = {RING: (6.6, 14.0, 8.4), TREE: (6.8, 14.0, 0.0), NVLS: (0.0, 0.0, 0.0)}
# hwLat [tier][algorithm][LL, LL128, Simple], µs.
_HW_LAT = {
    "nvlink": {RING: (0.6, 1.9, 3.4), TREE: (0.6, 1.25, 28.0), NVLS: (0.0, 0.0, 25.0)},
    "pcie": {RING: (1.0, 2.5, 5.7), TREE: (1.0, 1.9, 28.0), NVLS: (0.0, 0.0, 0.0)},
    "net": {RING: (2.7, 4.0, 14.0), TREE: (5.0, 8.5, 28.0), NVLS: (0.0, 0.0, 18.0)},
}
# llMaxBws: one node by architecture; several nodes by CPU vendor (row 0 Intel, row 1 AMD).
_LL_MAX = {
    "volta": (39.0, 39.0, 20.4),
    "ampere": (87.7, 22.5, 19.0),
    "hopper": (141.0, 45.0, 35.0),
    "blackwell": (282.0, 90.0, 70.0),
}
_PER_CH_RING_LL128 = {"volta": 20.0, "ampere": 20.0, "hopper": 36.7, "blackwell": 40.0}
_PER_CH_TREE_LL128 = {
    "volta": (20.0, 20.0, 20.0),
    "ampere": (20.0, 20.0, 20.0),
    "hopper": (36.7, 36.7, 29.0),
    "blackwell": (55.6, 31.67, 20.0),
}
_PER_CH_TREE = {
    "volta": (26.5, 18.5, 10.0),
    "ampere": (24.0, 23.6, 17.8),
    "hopper": (38.7, 41.4, 36.0),
    "blackwell": (70.0, 42.8, 24.0),
}
# Tree bandwidth correction per protocol, by log2(nBytes / 64) (64 B ... 256 MiB).
_TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0,
     1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9,
     1.0, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9,
     .9),
)  # fmt: skip
# topo.h: NCCL's bandwidth of one NVLink, GB/s, and NVIDIA's signalling rate per direction.
_NVLINK_LINK = {"volta": 20.0, "ampere": 20.0, "hopper": 20.6, "blackwell": 40.1}
_NVLINK_DATASHEET = {"volta": 25.0, "ampere": 25.0, "hopper": 25.0, "blackwell": 50.0}
# search.cc: per-channel inter-node speeds NCCL tries, GB/s.
_SPEED_INTER = (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0,
                3.0, 2.4, 1.2, 0.24, 0.12)  # fmt: skip
_SPEED_INTER_SM90 = (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0,
                     2.4, 1.2, 0.24, 0.12)  # fmt: skip
#: The ring graph NCCL's search builds on one NVSwitch node, where it is not one channel per
#: NVLink: (architecture, NVLinks per GPU) -> (graph channels, GB/s per channel). 18-link
#: Hopper (H100, H200): 12 channels at 30 GB/s (busBw 360), 24 communicator channels, in
#: NCCL 2.29.2's own tuning table on 4 and 6 H100 (AllGather Ring Simple algbw 480 / 432,
#: "24 coll channels", "channel{Lo..Hi}={0..23}": waynehacking8/nccl-collectives-bench @
#: ec97f062, results/scaling_attributed/g4_Ring.log, g6_Ring.log).
_NVSWITCH_RING = {("hopper", 18): (12, 30.0)}
_NET_OVERHEAD = {"intel": 1.0, "amd": 2.0, "arm": 1.0}
_NVLS_EFFICIENCY = {"hopper": 0.85, "blackwell": 0.74}
PCI_BW = 12.0
MAX_CHANNELS = 32
NVLS_CHANNELS = 16
_MAX_THREADS = {LL: 512, LL128: 640, SIMPLE: 512}
_THREAD_THRESHOLD = {LL: 8, LL128: 8, SIMPLE: 64}


def channel_rate_ratio(arch: str, measured_on: str) -> tuple[float, float, float] | None:
    """How much faster one channel runs on ``arch`` than on ``measured_on``, per protocol (LL,
    LL128, Simple), by NCCL's own per-architecture per-channel maxima: one-node LL
    (``llMaxBws``), ring LL128 (``perChMaxRingLL128Bws``) and one-node Simple tree
    (``perChMaxTreeBws``; NCCL has no ring Simple cap, its tree channel moves data the same
    way). None when NCCL's tables lack either architecture."""
    if arch not in _PER_CH_RING_LL128 or measured_on not in _PER_CH_RING_LL128:
        return None
    return (
        _LL_MAX[arch][0] / _LL_MAX[measured_on][0],
        _PER_CH_RING_LL128[arch] / _PER_CH_RING_LL128[measured_on],
        _PER_CH_TREE[arch][0] / _PER_CH_TREE[measured_on][0],
    )


#: ``NCCL_P2P_LL_THRESHOLD``: a peer's share up to this many bytes goes by LL, above by Simple.
#: NCCL applies it per channel part (<= 2.21), times ``p2pnChannelsPerPeer`` per peer
#: (2.22-2.28: 512 KiB on an 8-GPU NVSwitch node, 32 KiB or 16 KiB across nodes) or times the
#: channels the share is split over (>= 2.29: 16 KiB per peer in effect); the model keeps
#: 16 KiB per peer.
P2P_LL_THRESHOLD = 16384


@dataclass(frozen=True, slots=True)
class Topology:
    """What NCCL's tuner knows of a communicator: ring graph channels and per-channel GB/s."""

    graph_channels: int
    channel_gbs: float
    #: Ring bus bandwidth NCCL can reach inside a node (caps the network channels' sum).
    intra_gbs: float
    comm_channels: int
    arch: str
    ll128: bool
    nvls: bool


@dataclass(frozen=True, slots=True)
class TunerChoice:
    algorithm: str
    protocol: str
    channels: int
    #: NCCL's own predicted time, µs.
    time_us: float
    #: The channel count as a continuous quantity (:func:`channel_share`), what the time
    #: model runs on.
    share: float


def topology(placement: Placement, cluster: Cluster) -> Topology:
    """The ring graph NCCL would build for this placement."""
    arch = cluster.gpu.arch if cluster.gpu.arch in _NVLINK_LINK else "ampere"
    if placement.intra == "nvlink":
        # Channels follow the GPU's NVLinks (NCCL's topology search); a what-if bandwidth
        # (cluster.nvlink_gbytes_per_s) makes each link, and so each channel, faster. From the
        # bandwidth alone, 450 GB/s gave an A100 32 channels and its calibrated per-channel
        # cost made a 1 MiB all-reduce 13% slower than at its own 300.
        links = cluster.gpu.nvlink_links or max(
            1, round(cluster.gpu.nvlink_bytes_per_s / 1e9 / _NVLINK_DATASHEET[arch])
        )
        scale = cluster.nvlink_bw / (links * _NVLINK_DATASHEET[arch] * 1e9)
        per_link = _NVLINK_LINK[arch] * scale
        intra_total, intra_ch = links * per_link, per_link
    else:
        links = 0
        # NCCL rates a PCIe Gen3 x16 link at 12 GB/s out of ~15.75.
        intra_total = cluster.pcie_bw / 1e9 * 0.75
        intra_ch = intra_total / 2
    if not placement.multi_node:
        channels = max(1, round(intra_total / intra_ch))
        speed = intra_ch
        if placement.intra == "nvlink" and cluster.fabric == "nvswitch":
            ring = _NVSWITCH_RING.get((arch, links))
            if ring is not None:
                channels, speed = ring[0], ring[1] * scale
    else:
        nic = cluster.nic_bytes_per_s_per_gpu / 1e9
        steps = _SPEED_INTER_SM90 if arch == "hopper" else _SPEED_INTER
        speed = next((s for s in steps if s <= nic), steps[-1])
        # One channel per NIC of the node with the fewest ranks; NVLink caps their sum below.
        channels = placement.ppn_min
    nvls = (
        arch in _NVLS_EFFICIENCY
        and cluster.fabric == "nvswitch"
        and not placement.multi_node
        and placement.nranks > 2
    )
    return Topology(
        graph_channels=channels,
        channel_gbs=speed,
        intra_gbs=intra_total if placement.ppn_max > 1 else math.inf,
        comm_channels=min(2 * channels, MAX_CHANNELS),
        arch=arch,
        ll128=placement.intra == "nvlink",
        nvls=nvls,
    )


def _steps(kind: CollectiveKind, n: int, nodes: int) -> tuple[int, int]:
    """(nsteps, nInterSteps) as NCCL 2.22 counts them: a ring pass is n - 1 steps (all-reduce
    makes two, crossing the network twice per node); a chain is n."""
    info = collective(kind)
    if info.pattern != "ring":
        return n, nodes
    if info.passes == 2:
        return 2 * (n - 1), (2 * nodes if nodes > 1 else 0)
    return n - 1, nodes - 1


def _algorithms(
    kind: CollectiveKind, topo: Topology, allowed: frozenset[str] | None
) -> tuple[str, ...]:
    """The algorithms NCCL may run ``kind`` with, in its loop order, within ``allowed``
    (``NCCL_ALGO``; None: all). NCCL fails a collective that ``NCCL_ALGO`` leaves without
    one; so does this."""
    every = (TREE, RING, NVLS) if topo.nvls else (TREE, RING)
    possible = every if kind == CollectiveKind.ALL_REDUCE else (RING,)
    if allowed is None:
        return possible
    out = tuple(a for a in possible if a in allowed)
    if not out:
        raise ConfigError(
            f"NCCL_ALGO {','.join(sorted(allowed)).lower()!r} allows no algorithm NCCL has "
            f"for {kind.label} (it runs {', '.join(a.lower() for a in possible)})",
            where="cluster.nccl_algo",
            hint="allow ring",
        )
    return out


def table(
    kind: CollectiveKind, placement: Placement, cluster: Cluster, topo: Topology
) -> dict[tuple[str, str], tuple[float, float]]:
    """NCCL's (latency µs, algorithm bandwidth GB/s) per enabled (algorithm, protocol)."""
    n, nodes = placement.nranks, placement.nodes
    ppn = max(1, n // nodes)
    index2 = 0 if nodes == 1 else (1 if nodes == 2 else 2)
    if nodes == 1:
        ll_max = _LL_MAX[topo.arch][index2]
    else:
        row = "ampere" if cluster.cpu == "amd" else "volta"
        ll_max = _LL_MAX[row][index2]
    nsteps, ninter = _steps(kind, n, nodes)
    reduce_like = kind in (CollectiveKind.ALL_REDUCE, CollectiveKind.REDUCE)
    net_extra = cluster.net_latency_s * 1e6
    out: dict[tuple[str, str], tuple[float, float]] = {}
    for algo in _algorithms(kind, topo, cluster.allowed_algorithms):
        for p, proto in enumerate(PROTOCOLS):
            if algo == NVLS and proto != SIMPLE:
                continue
            if proto == LL128 and not topo.ll128:
                continue
            bus = min(topo.graph_channels * topo.channel_gbs, topo.intra_gbs)
            ch = topo.graph_channels
            if algo == RING and proto == LL:
                bus = min(ll_max, bus * (0.25 if nodes > 1 or reduce_like else 1 / 3))
            elif algo == RING and proto == LL128:
                bus = min(bus * (0.7 if ppn < 2 else 0.92), ch * _PER_CH_RING_LL128[topo.arch])
            elif algo == TREE:
                bus = min(bus * 0.92, ch * _PER_CH_TREE[topo.arch][index2])
                if proto == LL:
                    bus = min(bus / 3.8, ll_max)
                elif proto == LL128:
                    frac = 7 / 9 if nodes == 1 else 120 / 128
                    bus = min(bus * frac, ch * _PER_CH_TREE_LL128[topo.arch][index2])
            elif algo == NVLS:
                eff = _NVLS_EFFICIENCY[topo.arch]
                bus = bus * eff * (NVLS_CHANNELS - 1) / NVLS_CHANNELS * 2
            ratio = 0.5 if algo == TREE else n / nsteps
            algbw = bus * ratio

            lat = _BASE_LAT[algo][p]
            intra = _HW_LAT[placement.intra][algo][p]
            inter = _HW_LAT["net"][algo][p] + net_extra * (2 if proto == SIMPLE else 1)
            if nodes > 1 and proto == LL:
                intra *= 1.8
            if algo == RING:
                hw = "net" if nodes > 1 else placement.intra
                if collective(kind).pattern == "chain":
                    step = _HW_LAT[hw][TREE if proto == SIMPLE else RING][p]
                    lat += nsteps * step
                else:
                    if nodes > 1:
                        overhead = _NET_OVERHEAD[cluster.cpu] * (3 if proto == SIMPLE else 1)
                        intra = max(intra, overhead)
                    lat += (nsteps - ninter) * intra + ninter * inter
            elif algo == TREE:
                lat += 2 * ((ppn - 1) * intra + int(math.log2(nodes)) * inter)
            else:
                lat = intra + (inter if nodes > 1 else 0.0)
            out[(algo, proto)] = (lat, algbw)
    return out


def candidates(
    kind: CollectiveKind,
    nbytes: int,
    placement: Placement,
    topo: Topology,
    costs: dict[tuple[str, str], tuple[float, float]],
) -> list[TunerChoice]:
    """Every enabled (algorithm, protocol) with the channels NCCL would give it for ``nbytes``
    and NCCL's own predicted time (``ncclTopoGetAlgoTime``), in NCCL's loop order."""
    out = []
    log_size = int(math.log2(max(nbytes >> 6, 1)))
    for (algo, proto), (lat, bw) in costs.items():
        if bw <= 0:
            continue
        if algo == TREE and log_size < len(_TREE_CORRECTION[0]):
            bw *= _TREE_CORRECTION[PROTOCOLS.index(proto)][log_size]
        if (
            algo == RING
            and proto == SIMPLE
            and placement.multi_node
            and kind == CollectiveKind.ALL_REDUCE
            and nbytes / (topo.comm_channels * placement.nranks) >= 64
        ):
            lat *= 1.9 if topo.arch == "volta" else 1.4  # "plateau effect of ring"
        choice = TunerChoice(algo, proto, 0, lat + nbytes / (1000.0 * bw), 0.0)
        nc = channels(nbytes, choice, placement, topo)
        share = channel_share(nbytes, choice, placement, topo)
        out.append(TunerChoice(algo, proto, nc, choice.time_us, share))
    if not out:
        raise ValueError(f"no NCCL algorithm for {kind.label}")
    return out


def choose(options: list[TunerChoice]) -> TunerChoice:
    """NCCL's pick: the fastest by its own model (the first on ties, as NCCL's loop)."""
    best = options[0]
    for option in options[1:]:
        if option.time_us < best.time_us:
            best = option
    return best


def _channel_bytes(choice: TunerChoice, placement: Placement, topo: Topology) -> int:
    """Bytes NCCL wants per channel before it adds one: threads x per-thread threshold."""
    threads = _MAX_THREADS[choice.protocol]
    if choice.protocol == SIMPLE and topo.graph_channels * topo.channel_gbs <= PCI_BW:
        threads = 256
    threshold = _THREAD_THRESHOLD[choice.protocol]
    if choice.algorithm == RING and choice.protocol == LL:
        threshold *= placement.nranks
    return threads * threshold


def channels(nbytes: int, choice: TunerChoice, placement: Placement, topo: Topology) -> int:
    """Channels NCCL runs ``choice`` on: fewer for small messages, so that each thread of each
    channel gets at least a threshold of bytes (``src/enqueue.cc`` ``topoGetAlgoInfo``)."""
    if choice.algorithm == NVLS:
        return NVLS_CHANNELS
    per_channel = _channel_bytes(choice, placement, topo)
    nc = topo.comm_channels
    while nbytes < nc * per_channel and nc >= 2:
        nc -= 1
    return nc


def channel_share(nbytes: int, choice: TunerChoice, placement: Placement, topo: Topology) -> float:
    """NCCL's channel count without its rounding down: ``nbytes`` over the bytes NCCL gives a
    channel, between 1 and the communicator's channels (:func:`channels` is its floor). Each
    channel then carries the same bytes whatever the size, so one byte more never takes a
    whole channel's share away from the others and the time cannot fall as the size grows
    (with the floor, 64 KiB - 1 B all-reduced over 8 A100 ran ring LL on 1 channel and took
    42.6 µs, 64 KiB on 2 channels 30.6 µs). Equal to :func:`channels` where ``nbytes`` is a
    multiple of the per-channel bytes (every power of two the calibration logs hold for LL
    and Simple)."""
    if choice.algorithm == NVLS:
        return float(NVLS_CHANNELS)
    share = nbytes / _channel_bytes(choice, placement, topo)
    return min(float(topo.comm_channels), max(1.0, share))
