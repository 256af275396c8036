"""MoE token dispatch and combine over an expert-parallel group, with routing imbalance.

One call for whoever builds an MoE layer's communication: the dispatch (each rank sends its
routed token copies to the ranks of their experts) or the combine (the transpose), timed by the
NCCL-like model's all-to-allv or by DeepEP's, with the busiest expert at ``imbalance`` times the
mean load (:func:`~echo_view.sim.comm.alltoall.routed_matrix`). The result is the slowest
rank's time, so imbalance acts only through that rank's bytes.

NCCL's all-to-allv (Megatron-Core's ``alltoall`` dispatcher) moves every routed copy. DeepEP
moves a token once per destination rank and node and fans it out there: its bytes are the
copies scaled by the token's expected distinct ranks and nodes
(:func:`~echo_view.sim.comm.alltoall.token_fanout`, from ``top_k`` and the router's node
limit), the same de-duplication ratio applied to every rank's copies.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from functools import lru_cache

from echo_view.sim.cluster import Cluster
from echo_view.sim.comm.alltoall import routed_matrix, token_fanout
from echo_view.sim.comm.deepep import PHASES, DeepEPModel
from echo_view.sim.comm.nccl import NcclModel


def routed_time_ns(
    model: NcclModel | DeepEPModel,
    nbytes: int,
    ranks: Sequence[int],
    cluster: Cluster,
    num_experts: int,
    imbalance: float = 1.0,
    phase: str = "dispatch",
    *,
    top_k: int = 1,
    node_limit: int | None = None,
) -> int:
    """Time of an MoE ``phase`` ("dispatch" or "combine") moving ``nbytes`` of token copies per
    rank over ``ranks`` (the EP group, ``num_experts / len(ranks)`` experts each), each token
    routed to ``top_k`` experts on at most ``node_limit`` nodes (``None``: any)."""
    if phase not in PHASES:
        raise ValueError(f"MoE phase must be one of {', '.join(PHASES)}, got {phase!r}")
    return _routed(
        model,
        nbytes,
        tuple(ranks),
        cluster,
        num_experts,
        float(imbalance),
        phase,
        top_k,
        node_limit,
    )


@lru_cache(maxsize=4096)
def _routed(
    model: NcclModel | DeepEPModel,
    nbytes: int,
    ranks: tuple[int, ...],
    cluster: Cluster,
    num_experts: int,
    imbalance: float,
    phase: str,
    top_k: int,
    node_limit: int | None,
) -> int:
    send = routed_matrix(nbytes, len(ranks), num_experts, imbalance)
    if phase == "combine":
        send = send.T
    if isinstance(model, DeepEPModel):
        node_ranks = list(Counter(cluster.node_of(r) for r in ranks).values())
        fanout = token_fanout(num_experts, node_ranks, top_k, node_limit)
        return model.all_to_allv(send, ranks, cluster, phase, fanout).time_ns
    return model.all_to_allv(send, ranks, cluster).time_ns
