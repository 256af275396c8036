"""The arithmetic of an MoE layer that the tracer, the composer and the reports share.

- **Tokens**: a rank routes its ``T`` local tokens (its sequence shard of the micro-batch) to
  ``top_k`` experts each. The expert-parallel rank that receives the most token copies sets the
  layer's time (the collective ends with its slowest rank, and so does the step); with the
  busiest expert at ``imbalance`` times the mean load and the others sharing the rest evenly
  (:func:`~echo_view.sim.comm.alltoall.expert_loads`, the same load model that times the
  dispatch all-to-allv), that rank holds expert 0 and receives ``T * top_k * ep * share``
  copies, ``share`` its experts' fraction of all routed tokens (``1 / ep`` when balanced).
- **Communication names**: the tracer records the dispatch and combine all-to-alls under the
  names in :data:`A2A_PHASES`; the composer times them by the routed model of
  :func:`~echo_view.sim.comm.routing.routed_time_ns` (NCCL's all-to-allv or DeepEP's).
- **Parameters**: all experts count for memory, only the ``top_k`` routed (plus the shared)
  experts a token passes through count for model FLOPs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from echo_view.model.config import ModelConfig, WorkloadConfig
from echo_view.model.moe_config import MoEConfig
from echo_view.sim.cluster import Cluster
from echo_view.sim.comm.alltoall import routed_matrix
from echo_view.sim.comm.placement import place
from echo_view.sim.layout import Layout

#: Graph op name -> (library, phase) of an expert-parallel all-to-all. The backward pass of a
#: dispatch moves data the way a combine does, and is recorded as one.
A2A_PHASES: dict[str, tuple[str, str]] = {
    "moe_dispatch": ("nccl", "dispatch"),
    "moe_combine": ("nccl", "combine"),
    "deepep_dispatch": ("deepep", "dispatch"),
    "deepep_combine": ("deepep", "combine"),
}


def a2a_op(library: str, phase: str) -> str:
    """The graph op name of ``phase`` ("dispatch" or "combine") run by ``library`` ("nccl" or
    "deepep"), as :data:`A2A_PHASES` names it."""
    return next(name for name, lp in A2A_PHASES.items() if lp == (library, phase))


def a2a_name(moe: MoEConfig, phase: str) -> str:
    """The graph op name of ``phase`` ("dispatch" or "combine") for ``moe``'s dispatcher."""
    return a2a_op("deepep" if moe.dispatcher == "deepep" else "nccl", phase)


def deepep_kernels(cfg: WorkloadConfig, cluster: Cluster) -> dict[str, str]:
    """Graph op name -> DeepEP's kernel name (``deep_ep::internode::dispatch`` when the EP
    group spans nodes, ``intranode`` within one) for a config with the deepep dispatcher, so
    that a predicted trace names its kernels as a measured one does; empty otherwise."""
    moe = cfg.model.moe
    if moe is None or moe.dispatcher != "deepep":
        return {}
    ranks = Layout.of(cfg.parallel).group("ep", 0)
    path = "internode" if place(ranks, cluster).multi_node else "intranode"
    return {
        name: f"deep_ep::{path}::{phase}"
        for name, (library, phase) in A2A_PHASES.items()
        if library == "deepep"
    }


def busiest_rank_share(experts: int, ep: int, imbalance: float) -> float:
    """The fraction of all routed token copies the busiest of ``ep`` ranks receives."""
    return float(routed_matrix(1, ep, experts, imbalance)[0].max())


def local_tokens(cfg: WorkloadConfig) -> int:
    """Tokens one rank routes per micro-batch: its sequence shard (``seq_len / cp``, split
    over ``tp`` with sequence parallelism) times the micro-batch."""
    m, p = cfg.model, cfg.parallel
    s = m.seq_len // p.cp
    return (s // p.tp if p.sequence_parallel else s) * cfg.batch.micro


@dataclass(frozen=True, slots=True)
class ExpertTokens:
    """Token counts of one MoE layer on the busiest expert-parallel rank, per micro-batch."""

    routed: int  # token copies this rank sends (T * top_k)
    received: int  # token copies its experts receive over expert parallelism
    per_expert: int  # rows of each local expert's GEMM (after the etp all-gather)
    local_experts: int


def expert_tokens(cfg: WorkloadConfig) -> ExpertTokens:
    """The busiest rank's tokens (see the module docstring); received copies are rounded up
    to a whole number per local expert (the grouped GEMM's rows)."""
    moe, p = cfg.model.moe, cfg.parallel
    if moe is None:
        raise ValueError("expert_tokens needs an MoE model")
    routed = local_tokens(cfg) * moe.top_k
    local = moe.experts // p.ep
    share = busiest_rank_share(moe.experts, p.ep, moe.imbalance)
    per_expert = math.ceil(routed * p.ep * share / local - 1e-9)
    return ExpertTokens(routed, per_expert * local, per_expert * p.expert_tp, local)


def routed_expert_params(model: ModelConfig) -> int:
    """Weights of one routed expert (no biases: Megatron-Core's grouped experts)."""
    assert model.moe is not None
    return (model.up_projections + 1) * model.hidden * model.moe.moe_ffn_hidden


def moe_mlp_params(model: ModelConfig, active: bool) -> int:
    """Matmul weights of one MoE layer's MLP part: router, routed experts (all of them, or the
    ``top_k`` a token passes through when ``active``) and the shared experts."""
    moe = model.moe
    assert moe is not None
    h = model.hidden
    routed = (moe.top_k if active else moe.experts) * routed_expert_params(model)
    return moe.experts * h + routed + (model.up_projections + 1) * h * moe.shared_ffn_hidden


def moe_layers(model: ModelConfig) -> int:
    """How many of the model's layers are MoE layers."""
    return 0 if model.moe is None else model.layers - model.moe.first_dense_layers


def moe_report(cfg: WorkloadConfig) -> dict[str, object]:
    """What ``simulate`` reports about an MoE model: its parameters (all experts, and the
    active ones a token passes through; embeddings and norms left out, as in
    :func:`~echo_view.sim.throughput.matmul_params`), and the busiest rank's tokens per
    micro-batch and MoE layer."""
    # Imported here: throughput's parameter count reads this module's MoE arithmetic.
    from echo_view.sim.throughput import matmul_params

    moe, p = cfg.model.moe, cfg.parallel
    assert moe is not None
    t = expert_tokens(cfg)
    return {
        "experts": moe.experts,
        "top_k": moe.top_k,
        "moe_layers": moe_layers(cfg.model),
        "matmul_params_total": matmul_params(cfg.model, active=False),
        "matmul_params_active": matmul_params(cfg.model),
        "ep": p.ep,
        "etp": p.expert_tp,
        "expert_dp": p.expert_dp,
        "dispatcher": moe.dispatcher,
        "routing_imbalance": moe.imbalance,
        "tokens_routed_per_rank": t.routed,
        "tokens_received_busiest_rank": t.received,
        "tokens_per_local_expert": t.per_expert,
    }
