"""DeepEP's dispatch and combine (normal kernels): the expert-parallel all-to-all of MoE models.

DeepEP moves tokens with its own kernels instead of NCCL's send/recv. Within a node
(``intranode``) a rank writes each token once into every destination GPU's buffer over NVLink,
however many of the token's experts that GPU holds; across nodes (``internode``) a token crosses
the network once per destination node, over RDMA to the GPU of the same index, which forwards it
over NVLink to the experts' GPUs. The kernels run on a configurable number of SMs, which caps
their throughput.

Model (:meth:`DeepEPModel.all_to_allv`): a rank's dispatch (or combine) takes the larger of its
NVLink time and its RDMA time, each that tier's bytes over the tier's bandwidth, and the
collective ends with the slowest rank, where

- bytes are DeepEP's, as its benchmarks count them (deepseek-ai/DeepEP ``tests/test_intranode.py``,
  ``dispatch_bf16_nvl_recv_bytes = recv_x.numel() * 2``: one row per token and destination rank;
  ``tests/test_internode.py``, ``num_rdma_token_sent``: tokens de-duplicated per destination node,
  the rank's own node included): the routed copies scaled by the token's distinct destination
  ranks (NVLink) or nodes (RDMA) over its ``top_k``
  (:func:`~echo_view.sim.comm.alltoall.token_fanout`); NVLink bytes are a rank's, RDMA bytes its
  node's spread over the node's GPUs (the forwarding GPU is the one of the peer's index), each
  the larger of what is sent and received (full duplex), the rank's own share included;
- bandwidth per tier = DeepEP's published "bottleneck bandwidth" (NVLink: the intranode one;
  RDMA: the internode one), scaled by the cluster's link to the link DeepEP measured on, and
  capped by ``sms * per_sm_gbs``. On DeepEP's own internode settings the NVLink tier does not
  bind, as DeepEP's table says (RDMA is the bottleneck): per token, EP16 moves 6.52 rank rows
  at 153 GB/s against 1.99 node rows at 43 GB/s, EP64 7.36 against 4 at 51 GB/s.

Constants (DeepEP README, docs/legacy.md "Performance", V1 normal kernels on H800 with NVLink
~160 GB/s measured, 200 GB/s nominal per direction, and one CX7 400 Gb/s NIC per GPU;
DeepSeek-V3 pre-training shapes: 4096 tokens, hidden 7168, top-8 of 256 experts, top-4 groups
(nodes), FP8 dispatch, BF16 combine):

- intranode EP8: dispatch 153 GB/s, combine 158 GB/s (NVLink);
- internode EP16 / EP32 / EP64: dispatch 43 / 58 / 51 GB/s, combine 43 / 57 / 50 GB/s (RDMA).

The SM budget's throughput per SM is from DeepEP V2's README table (SM100, EP8 NVLink: 643 GB/s
dispatch on 24 SMs, "Min #SM", against 726 GB/s on 64): 643 / 24 = 26.8 GB/s per SM. The
default budget, 24 SMs, is V1's documented ``Buffer.set_num_sms(24)``. DeepEP publishes no
fixed latency for its normal kernels; ``latency_us`` defaults to 0 and is a place to put one
measured from a trace.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from echo_view.model import CollectiveKind
from echo_view.sim.cluster import Cluster
from echo_view.sim.comm.alltoall import F64, Fanout, check_matrix, uniform_matrix
from echo_view.sim.comm.estimate import CollectiveEstimate, bus_factor
from echo_view.sim.comm.nccl import NcclModel
from echo_view.sim.comm.placement import place

PHASES = ("dispatch", "combine")
#: H800 links of DeepEP's measurements, bytes/s per direction: NVLink (nominal, as the cluster
#: presets give it) and one 400 Gb/s NIC.
REF_NVLINK = 200e9
REF_NIC = 50e9


@dataclass(frozen=True)
class DeepEPParams:
    """DeepEP's published bandwidths (GB/s, per phase: dispatch, combine) and SM budget."""

    #: Intranode EP8 bottleneck bandwidth over NVLink on H800.
    intranode_gbs: tuple[float, float] = (153.0, 158.0)
    #: Internode bottleneck bandwidth over RDMA on H800, by EP size.
    internode_ep: tuple[int, ...] = (16, 32, 64)
    internode_gbs: tuple[tuple[float, float], ...] = ((43.0, 43.0), (58.0, 57.0), (51.0, 50.0))
    #: SMs the kernels run on, and what one SM moves.
    sms: int = 24
    per_sm_gbs: float = 643.0 / 24
    latency_us: float = 0.0

    def __post_init__(self) -> None:
        if self.sms < 1:
            raise ValueError(f"DeepEP needs at least one SM, got {self.sms}")
        if len(self.internode_ep) != len(self.internode_gbs) or not self.internode_ep:
            raise ValueError("one internode bandwidth pair per EP size")
        if min(self.intranode_gbs) <= 0 or self.per_sm_gbs <= 0 or self.latency_us < 0:
            raise ValueError("DeepEP bandwidths must be positive and its latency non-negative")

    def internode(self, ep: int, phase: int) -> float:
        """The published RDMA bandwidth of the EP size nearest ``ep`` (log scale), GB/s."""
        row = min(
            range(len(self.internode_ep)),
            key=lambda i: abs(math.log2(self.internode_ep[i]) - math.log2(max(ep, 1))),
        )
        return self.internode_gbs[row][phase]


class DeepEPModel:
    """DeepEP dispatch / combine; other collectives go to ``fallback`` (NCCL), as DeepEP runs
    only the all-to-all."""

    name = "deepep"

    def __init__(self, params: DeepEPParams | None = None, fallback: NcclModel | None = None):
        self.params = params if params is not None else DeepEPParams()
        self.fallback = fallback if fallback is not None else NcclModel()

    def bandwidths(self, ranks: Sequence[int], cluster: Cluster, phase: str) -> tuple[float, float]:
        """(NVLink, RDMA) bytes/s a rank of this group gets (RDMA inf within one node)."""
        if phase not in PHASES:
            raise ValueError(f"DeepEP phase must be one of {', '.join(PHASES)}, got {phase!r}")
        p, prm = PHASES.index(phase), self.params
        sm_cap = prm.sms * prm.per_sm_gbs * 1e9
        nvl = min(prm.intranode_gbs[p] * 1e9 * cluster.nvlink_bw / REF_NVLINK, sm_cap)
        pl = place(ranks, cluster)
        if not pl.multi_node:
            return nvl, math.inf
        nic = cluster.nic_bytes_per_s_per_gpu / REF_NIC
        return nvl, min(prm.internode(pl.nranks, p) * 1e9 * nic, sm_cap)

    def all_to_allv(
        self,
        send: Sequence[Sequence[float]] | F64,
        ranks: Sequence[int],
        cluster: Cluster,
        phase: str = "dispatch",
        fanout: Fanout | None = None,
    ) -> CollectiveEstimate:
        """Dispatch (or combine) with ``send[i][j]`` bytes of routed token copies from
        ``ranks[i]`` to ``ranks[j]`` (own share included). ``fanout``: where a token's copies go,
        so that a token moves once per destination rank and node; ``None``: the bytes are
        already counted so (one copy per destination)."""
        n = len(ranks)
        if len(set(ranks)) != n:
            raise ValueError("DeepEP ranks must be distinct")
        m = check_matrix(send, n)
        if float(m.sum()) == 0:
            return CollectiveEstimate(0, "none", "none", 0, 0.0, 0.0)
        nvl, rdma = self.bandwidths(ranks, cluster, phase)
        f = fanout if fanout is not None else Fanout(1, 1.0, 1.0)
        out, into = m.sum(axis=1), m.sum(axis=0)
        seconds = f.ranks / f.top_k * np.maximum(out, into) / nvl
        if not math.isinf(rdma):
            # A node's RDMA traffic goes through the GPU of the peer's index: spread over all
            # of the node's NICs, whichever of its ranks holds the experts.
            _, node, gpus = np.unique(
                [cluster.node_of(r) for r in ranks], return_inverse=True, return_counts=True
            )
            node_out = np.bincount(node, weights=out)
            node_in = np.bincount(node, weights=into)
            tier = f.nodes / f.top_k * np.maximum(node_out, node_in) / gpus
            seconds = np.maximum(seconds, tier[node] / rdma)
        us = self.params.latency_us + float(seconds.max()) * 1e6
        time_ns = max(1, round(us * 1e3))
        algbw = float(m.sum()) / n / (time_ns * 1e-9)
        path = "intranode" if math.isinf(rdma) else "internode"
        kind = CollectiveKind.ALL_TO_ALL
        return CollectiveEstimate(
            time_ns, path, phase, self.params.sms, algbw, algbw * bus_factor(kind, n)
        )

    def estimate(
        self, kind: CollectiveKind, nbytes: int, ranks: Sequence[int], cluster: Cluster
    ) -> CollectiveEstimate:
        """An even dispatch of ``nbytes`` per rank, counted once per destination (all-to-all);
        others by the fallback."""
        if kind != CollectiveKind.ALL_TO_ALL:
            return self.fallback.estimate(kind, nbytes, ranks, cluster)
        group = sorted(set(ranks))
        return self.all_to_allv(uniform_matrix(nbytes, len(group)), group, cluster)

    def collective_time_ns(
        self, kind: CollectiveKind, nbytes: int, ranks: Sequence[int], cluster: Cluster
    ) -> int:
        return self.estimate(kind, nbytes, ranks, cluster).time_ns
