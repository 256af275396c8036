"""All-to-all and all-to-allv as NCCL runs them: one send and one receive per peer.

NCCL has no all-to-all algorithm: PyTorch's ``all_to_all`` / ``all_to_all_single`` and
nccl-tests' ``alltoall_perf`` post a ``ncclSend`` and a ``ncclRecv`` to every peer in one group.
What decides the time is mechanism, not a bus factor:

- every peer's share moves at once, over NVLink (same node) or the GPU's own NIC (other
  nodes): the two tiers work concurrently, and each is full duplex, so a rank finishes when the
  larger of what it sends and what it receives on the slower tier has moved. A GPU's traffic to
  other nodes cannot spread over the other GPUs' NICs (nccl-tests issue 267, S. Jeaugey:
  "Alltoall cannot aggregate the bandwidth of multiple NICs"), so across N nodes of G GPUs the
  bus bandwidth tends to ``N/(N-1)`` times one NIC's (issue 130);
- the peers are served by the communicator's point-to-point channels (a power of two, at most
  32), each with a throughput cap: LL, whose channels are slow, can be channel-bound;
- NCCL packs at most 8 peers' sends and receives into one kernel batch
  (``NCCL_MAX_DEV_WORK_P2P_PER_BATCH``), so a group of n ranks pays ``ceil((n-1)/8)`` rounds of
  per-step latency;
- an all-to-allv (uneven splits, MoE token routing) ends when its most loaded rank ends: each
  rank's bytes are timed separately and the collective takes the slowest.

``routed_matrix`` builds the traffic of an MoE dispatch whose experts are unevenly loaded
(max / mean tokens per expert), so that imbalance is simulated through the slowest rank's bytes
rather than applied as a factor. ``token_fanout`` says on how many distinct ranks and nodes a
token's ``top_k`` experts land: a dispatcher that sends a token once per destination rank or
node (DeepEP) moves that many copies, not ``top_k``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from echo_view.sim.cluster import Cluster
from echo_view.sim.comm.params import CommParams
from echo_view.sim.comm.placement import PROTOCOLS, Placement
from echo_view.sim.comm.tuner import MAX_CHANNELS, P2P_LL_THRESHOLD, Topology

#: ``NCCL_MAX_DEV_WORK_P2P_PER_BATCH``: peers one kernel batch serves (NCCL >= 2.19).
P2P_PER_BATCH = 8

F64 = npt.NDArray[np.float64]


def p2p_channels(topo: Topology) -> int:
    """NCCL's ``p2pnChannels``: the communicator's channels rounded up to a power of two,
    at most 32 (``ncclTopoComputeP2pChannels``)."""
    return min(MAX_CHANNELS, 1 << max(0, math.ceil(math.log2(max(1, topo.comm_channels)))))


def p2p_rounds(nranks: int) -> int:
    """Kernel batches an all-to-all of ``nranks`` needs (8 peers per batch)."""
    return max(1, math.ceil((nranks - 1) / P2P_PER_BATCH))


@dataclass(frozen=True, slots=True)
class RankTraffic:
    """What one rank of an all-to-allv moves: bytes out and in over NVLink / PCIe (same node)
    and over its NIC (other nodes), and its largest single-peer share."""

    intra_out: float
    intra_in: float
    inter_out: float
    inter_in: float
    max_peer: float

    @property
    def intra(self) -> float:
        return max(self.intra_out, self.intra_in)

    @property
    def inter(self) -> float:
        return max(self.inter_out, self.inter_in)


def check_matrix(send: Sequence[Sequence[float]] | F64, nranks: int) -> F64:
    """``send[i][j]``: bytes group rank i sends to group rank j, as a square float array."""
    m = np.asarray(send, dtype=np.float64)
    if m.shape != (nranks, nranks):
        raise ValueError(f"all-to-allv matrix is {m.shape}, expected {nranks} x {nranks}")
    if not np.all(np.isfinite(m)) or (m < 0).any():
        raise ValueError("all-to-allv matrix needs finite, non-negative byte counts")
    return m


def rank_traffic(send: F64, nodes: Sequence[int]) -> list[RankTraffic]:
    """Per rank (group order), its traffic on each tier; ``nodes[i]`` is rank i's node.
    A rank's share to itself is a local copy and crosses no link."""
    node = np.asarray(nodes)
    same = node[:, None] == node[None, :]
    off = send * (1 - np.eye(len(node)))
    intra = np.where(same, off, 0.0)
    inter = np.where(same, 0.0, off)
    return [
        RankTraffic(
            intra_out=float(intra[i].sum()),
            intra_in=float(intra[:, i].sum()),
            inter_out=float(inter[i].sum()),
            inter_in=float(inter[:, i].sum()),
            max_peer=float(off[i].max(initial=0.0)),
        )
        for i in range(len(node))
    ]


def uniform_matrix(nbytes: int, nranks: int) -> F64:
    """An even all-to-all: each rank sends ``nbytes / n`` to every rank (itself included), as
    nccl-tests' ``alltoall_perf`` with per-rank payload ``nbytes``."""
    return np.full((nranks, nranks), nbytes / nranks)


def expert_loads(num_experts: int, imbalance: float) -> F64:
    """Fraction of the routed tokens each expert receives when the busiest expert gets
    ``imbalance`` times the mean (max / mean tokens per expert) and the others share the rest
    evenly: ``imbalance / E`` for expert 0, ``(E - imbalance) / (E (E - 1))`` for the others."""
    if num_experts < 1:
        raise ValueError(f"need at least one expert, got {num_experts}")
    if not 1.0 <= imbalance <= num_experts:
        raise ValueError(
            f"imbalance (max / mean tokens per expert) must be within 1 and the expert count "
            f"{num_experts}, got {imbalance}"
        )
    if num_experts == 1:
        return np.ones(1)
    rest = (num_experts - imbalance) / (num_experts * (num_experts - 1))
    loads = np.full(num_experts, rest)
    loads[0] = imbalance / num_experts
    return loads


def routed_matrix(nbytes: int, nranks: int, num_experts: int, imbalance: float) -> F64:
    """The dispatch all-to-allv of an MoE layer: every rank sends ``nbytes`` of routed token
    copies, split over the ranks by the load of the experts each holds (``num_experts / n``
    consecutive experts per rank), the busiest expert ``imbalance`` times the mean. Combine is
    the transpose."""
    if num_experts % nranks:
        raise ValueError(f"{num_experts} experts do not divide over {nranks} ranks")
    per_rank = expert_loads(num_experts, imbalance).reshape(nranks, -1).sum(axis=1)
    return np.tile(per_rank * nbytes, (nranks, 1))


def expected_distinct(sizes: Sequence[int], k: int) -> float:
    """Expected number of groups hit when ``k`` of ``sum(sizes)`` items (group ``g`` holding
    ``sizes[g]``) are drawn uniformly without replacement: the sum over groups of one minus the
    hypergeometric chance of drawing none of the group's items,
    ``prod_{i<k} (n - s_g - i) / (n - i)``."""
    n = sum(sizes)
    if not 1 <= k <= n or min(sizes, default=0) < 1:
        raise ValueError(f"cannot draw {k} of {n} items over groups of sizes {list(sizes)}")
    hit = 0.0
    for s, count in Counter(sizes).items():  # groups of one size share their chance
        i = np.arange(k, dtype=np.float64)
        miss = float(np.prod((n - s - i) / (n - i))) if k <= n - s else 0.0
        hit += count * (1.0 - miss)
    return hit


@dataclass(frozen=True, slots=True)
class Fanout:
    """Where one token's ``top_k`` expert copies go, on average: ``ranks`` distinct ranks of
    the expert-parallel group and ``nodes`` distinct nodes."""

    top_k: int
    ranks: float
    nodes: float


def token_fanout(
    num_experts: int, node_ranks: Sequence[int], top_k: int, node_limit: int | None = None
) -> Fanout:
    """The distinct ranks and nodes a token's ``top_k`` experts fall on under uniform routing
    over ``num_experts`` experts, ``num_experts / R`` per rank, ``node_ranks[i]`` of the R ranks
    on node i (:func:`expected_distinct`).

    With node-limited routing (``node_limit`` M: DeepSeek-V3's router sends a token to at most
    M nodes, chosen by their best experts' scores, arXiv 2412.19437 sections 2.1.2 and 3.2) the
    nodes are capped at M, and the token's experts are drawn from the ranks of M nodes only."""
    nranks = sum(node_ranks)
    if nranks < 1 or num_experts % nranks:
        raise ValueError(f"{num_experts} experts do not divide over {nranks} ranks")
    if node_limit is not None and node_limit < 1:
        raise ValueError(f"a node limit must be at least 1, got {node_limit}")
    per_rank = num_experts // nranks
    nodes = expected_distinct([per_rank * r for r in node_ranks], top_k)
    reach = nranks
    if node_limit is not None and node_limit < len(node_ranks):
        nodes = min(nodes, float(node_limit))
        # Ranks of M average nodes, enough to hold the top_k experts.
        reach = max(round(nranks * node_limit / len(node_ranks)), -(-top_k // per_rank))
    return Fanout(top_k, expected_distinct([per_rank] * reach, top_k), nodes)


def rank_time_us(
    t: RankTraffic,
    nranks: int,
    placement: Placement,
    cluster: Cluster,
    params: CommParams,
    channels: int,
) -> tuple[float, int]:
    """(µs, protocol index) of one rank's part of an all-to-all(v)."""
    p = 0 if t.max_peer <= P2P_LL_THRESHOLD else 2
    eff = params.protocol_eff[p]
    cap = channels * params.channel_gbs[p] * 1e9
    if placement.intra == "nvlink":
        intra_bw, intra_hop = cluster.nvlink_bw * params.nvlink_eff, params.nvlink_hop_us[p]
    else:
        intra_bw, intra_hop = cluster.pcie_bw * params.pcie_eff, params.pcie_hop_us[p]
    net_bw = cluster.nic_bytes_per_s_per_gpu * params.net_eff
    seconds = max(
        t.intra / min(intra_bw * eff, cap),
        t.inter / min(net_bw * eff, cap),
        (t.intra + t.inter) / cap,
    )
    hop = params.net_hop_us[p] + cluster.net_latency_s * 1e6 if t.inter > 0 else intra_hop
    return params.base_us[p] + p2p_rounds(nranks) * hop + seconds * 1e6, p


def all_to_allv_us(
    send: F64,
    nodes: Sequence[int],
    placement: Placement,
    cluster: Cluster,
    params: CommParams,
    channels: int,
) -> tuple[float, str, int]:
    """(µs, protocol, slowest rank's group index) of an all-to-allv: every rank's time, the
    collective ends with the slowest."""
    times = [
        rank_time_us(t, len(nodes), placement, cluster, params, channels)
        for t in rank_traffic(send, nodes)
    ]
    slowest = max(range(len(times)), key=lambda i: times[i][0])
    us, p = times[slowest]
    return us, PROTOCOLS[p], slowest
