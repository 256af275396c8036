"""MoE token dispatch and combine over an expert-parallel group, with routing imbalance.

One call for whoever builds an MoE layer's communication: the dispatch (each rank sends its
routed token copies to the ranks of their experts) or the combine (the transpose), timed by the
NCCL-like model's all-to-allv or by DeepEP's, with the busiest expert at ``imbalance`` times the
mean load (:func:`~echo_view.sim.comm.alltoall.routed_matrix`). The result is the slowest
rank's time, so imbalance acts only through that rank's bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from echo_view.sim.cluster import Cluster
from echo_view.sim.comm.alltoall import routed_matrix
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
) -> int:
    """Time of an MoE ``phase`` ("dispatch" or "combine") moving ``nbytes`` of token copies per
    rank over ``ranks`` (the EP group, ``num_experts / len(ranks)`` experts each)."""
    if phase not in PHASES:
        raise ValueError(f"MoE phase must be one of {', '.join(PHASES)}, got {phase!r}")
    return _routed(model, nbytes, tuple(ranks), cluster, num_experts, float(imbalance), phase)


@lru_cache(maxsize=4096)
def _routed(
    model: NcclModel | DeepEPModel,
    nbytes: int,
    ranks: tuple[int, ...],
    cluster: Cluster,
    num_experts: int,
    imbalance: float,
    phase: str,
) -> int:
    send = routed_matrix(nbytes, len(ranks), num_experts, imbalance)
    if phase == "combine":
        send = send.T
    if isinstance(model, DeepEPModel):
        return model.all_to_allv(send, ranks, cluster, phase).time_ns
    return model.all_to_allv(send, ranks, cluster).time_ns
