"""MoE arithmetic, expert-parallel groups and the composed MoE step, against hand computations."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from math import comb
from typing import Any

import pytest

from echo_view.model import is_comm_kernel
from echo_view.model.config import WorkloadConfig
from echo_view.model.config_parse import parse_workload_config
from echo_view.model.kinds import CollectiveKind
from echo_view.model.moe_config import MoEConfig
from echo_view.sim.cluster import cluster_from_config, make_cluster
from echo_view.sim.comm.defaults import default_comm_model
from echo_view.sim.comm.placement import place
from echo_view.sim.compose_costs import CollectiveCache
from echo_view.sim.compute_presets import compute_params_for
from echo_view.sim.config_sim import predicted_config_job, simulate_config
from echo_view.sim.host import HostParams
from echo_view.sim.layout import Layout
from echo_view.sim.memory import stage_expert_params, stage_memory, stage_params
from echo_view.sim.moe import busiest_rank_share, expert_tokens, moe_report
from echo_view.sim.throughput import matmul_params
from tests.conftest import TORCH_MISSING
from tests.moe_data import moe_data

#: The GPU path alone (these expectations are computed without the host path, which
#: tests/sim/test_host.py checks).
simulate_gpu = partial(simulate_config, host=HostParams(kernel_us=0))


def _cfg(model: dict[str, Any] | None = None, **par: Any) -> WorkloadConfig:
    tiny = {"hidden": 8, "heads": 2, "seq_len": 16, "vocab": 32, "ffn_hidden": 16, "experts": 4}
    extra = {"moe_ffn_hidden": 4, "shared_experts": 1, "first_dense_layers": 1}
    return parse_workload_config(moe_data({**tiny, **extra, **(model or {})}, par))


def test_parameters_count_all_experts_for_memory_and_active_ones_for_flops() -> None:
    """Hand count, hidden 8, two heads of 4: attention 2*8*8 + 2*8*8 = 256 per layer; the dense
    layer's SwiGLU MLP 3*8*16 = 384; the MoE layer's router 4*8 = 32, experts 3*8*4 = 96 each
    (4 in all, 2 active), shared expert 3*8*4 = 96; output layer 8*32 = 256."""
    cfg = _cfg()
    assert matmul_params(cfg.model, active=False) == 2 * 256 + 384 + 32 + 4 * 96 + 96 + 256
    assert matmul_params(cfg.model) == 2 * 256 + 384 + 32 + 2 * 96 + 96 + 256
    # One rank holds 4 / ep = 1 expert of each MoE layer: 96 of its parameters.
    assert stage_expert_params(cfg, 0) == 96
    report = moe_report(cfg)
    assert (report["matmul_params_total"], report["matmul_params_active"]) == (1664, 1472)


def test_expert_optimizer_states_shard_over_expert_data_parallel_ranks() -> None:
    """dp = 8, ep = 4: dense states over 8 ranks, the expert's over the 2 expert-DP ranks."""
    cfg = _cfg(distributed_optimizer=True)
    n, experts = stage_params(cfg, 0), stage_expert_params(cfg, 0)
    assert stage_memory(cfg, 0).optimizer == -(-(n - experts) * 12 // 8) + experts * 12 // 2


def test_tokens_per_local_expert_balanced_and_imbalanced() -> None:
    """16 tokens x top-2 = 32 copies per rank; 4 ranks x 32 over 4 experts = 32 per expert.
    With the busiest expert at 2x the mean (EP 4, one expert per rank), its rank gets 2/4 of
    all copies: 4 * 32 / 2 = 64 rows."""
    balanced = expert_tokens(_cfg())
    assert (balanced.routed, balanced.received, balanced.per_expert) == (32, 32, 32)
    skewed = expert_tokens(_cfg({"routing_imbalance": 2.0}))
    assert (skewed.routed, skewed.received, skewed.per_expert) == (32, 64, 64)
    # a capacity factor of 1.5 drops the busiest expert's excess: 1.5 x 32 = 48 rows
    capped = expert_tokens(_cfg({"routing_imbalance": 2.0, "capacity_factor": 1.5}))
    assert capped.received == 48


def test_busiest_rank_share() -> None:
    """8 experts, EP 4, busiest expert 3x the mean: expert 0 gets 3/8, the other seven
    (8 - 3) / (8 * 7) each; rank 0 holds experts 0 and 1: 3/8 + 5/56 = 26/56."""
    assert busiest_rank_share(8, 4, 3.0) == pytest.approx(26 / 56)
    assert busiest_rank_share(8, 4, 1.0) == pytest.approx(1 / 4)


def test_expert_groups_fold_the_stage_ranks() -> None:
    """tp 2, dp 4 (8 ranks a stage), etp 1, ep 4: stage-local rank (edp * 4 + ep) * 1 + etp."""
    lay = Layout(tp=2, pp=2, dp=4, ep=4, etp=1)
    assert lay.group("ep", 0) == (0, 1, 2, 3)
    assert lay.group("ep", 13) == (12, 13, 14, 15)
    assert lay.group("edp", 1) == (1, 5)
    # etp = tp = 2, ep = 2: the EP ranks are consecutive data-parallel ranks (stride tp)
    classic = Layout(tp=2, pp=1, dp=4, ep=2, etp=2)
    assert classic.group("ep", 0) == (0, 2)
    assert classic.group("etp", 2) == (2, 3)
    assert classic.group("edp", 0) == (0, 4)
    assert classic.group("ep", 0) == classic.group("dp", 0)[:2]
    # Megatron-Core's tensor-and-expert group: etp fastest, then ep (the split sizes' gather).
    assert classic.group("etp_ep", 3) == (0, 1, 2, 3)
    assert classic.group("etp_ep", 5) == (4, 5, 6, 7)
    assert lay.group("etp_ep", 9) == (8, 9, 10, 11)


def test_ep8_stays_in_a_node_and_ep64_spans_eight() -> None:
    cluster = make_cluster("H800-SXM5-80GB", gpus_per_node=8, nodes=256)
    ep8 = Layout(tp=1, pp=4, dp=64, ep=8).group("ep", 9)
    ep64 = Layout(tp=1, pp=16, dp=128, ep=64).group("ep", 0)
    assert place(ep8, cluster).nodes == 1
    assert place(ep64, cluster).nodes == 8
    # the same 8-rank dispatch is slower over the NICs than over NVLink
    colls = CollectiveCache(default_comm_model(), cluster)
    spread = tuple(range(0, 64, 8))  # one GPU in each of 8 nodes
    moe = MoEConfig(64)
    assert colls.routed_ns("moe_dispatch", 1 << 26, ep8, moe) < colls.routed_ns(
        "moe_dispatch", 1 << 26, spread, moe
    )


def test_imbalance_slows_the_dispatch_through_the_busiest_rank() -> None:
    """EP 8 in one node, one expert per rank, busiest expert r times the mean: rank 0 receives
    r/8 of each of the 7 other ranks' copies (7r/8 of the payload over NVLink, more than the
    (8 - r)/8 it sends) against 7/8 balanced, so for a large payload the dispatch takes r times
    as long (its fixed latency aside)."""
    cluster = make_cluster("H100-SXM5-80GB", gpus_per_node=8, nodes=1)
    colls = CollectiveCache(default_comm_model(), cluster)
    ranks = tuple(range(8))
    nbytes = 1 << 28
    time = {
        r: colls.routed_ns("moe_dispatch", nbytes, ranks, MoEConfig(8, routing_imbalance=r))
        for r in (1.0, 1.5, 2.0)
    }
    for r in (1.5, 2.0):
        assert r - 0.05 < time[r] / time[1.0] <= r


def test_deepeps_dispatch_counts_a_token_once_per_node_and_rank() -> None:
    """EP64 over 8 H800 nodes, 256 experts, top-8, DeepEP: 4 node copies a token under a node
    limit of 4, 5.29 without (8 x (1 - C(224, 8) / C(256, 8))), against the 8 expert copies the
    NCCL path moves: the RDMA-bound dispatch scales with the node copies."""
    cluster = make_cluster("H800-SXM5-80GB", gpus_per_node=8, nodes=8)
    colls = CollectiveCache(default_comm_model(), cluster)
    ranks = tuple(range(64))
    nbytes = 4096 * 8 * 7168
    moe = MoEConfig(256, top_k=8, dispatcher="deepep")
    free = colls.routed_ns("deepep_dispatch", nbytes, ranks, moe)
    limited = colls.routed_ns("deepep_dispatch", nbytes, ranks, replace(moe, moe_node_limit=4))
    assert limited == round(4096 * 4 * 7168 / 51)
    assert free == round(4096 * 8 * (1 - comb(224, 8) / comb(256, 8)) * 7168 / 51)
    # The same config's NCCL all-to-allv moves every copy and does not see the limit.
    nccl = colls.routed_ns("moe_dispatch", nbytes, ranks, moe)
    assert nccl == colls.routed_ns("moe_dispatch", nbytes, ranks, replace(moe, moe_node_limit=4))
    assert nccl > free > limited


def _simulate(cfg: WorkloadConfig, ranks: str = "stages") -> Any:
    pytest.importorskip("torch", reason=TORCH_MISSING)
    from echo_view.tracing.roles import trace_workload

    cluster = cluster_from_config(cfg.cluster)
    graph = trace_workload(cfg)
    params = compute_params_for(cluster.gpu)
    return simulate_gpu(graph, cfg, cluster, default_comm_model(), params, ranks=ranks)


BIG = {"hidden": 512, "heads": 8, "seq_len": 1024, "ffn_hidden": 1024, "moe_ffn_hidden": 512}


@pytest.mark.parametrize(
    "par",
    [
        {"pp": 2, "dp": 4, "distributed_optimizer": True},
        {"tp": 2, "dp": 4, "sequence_parallel": True, "overlap_grad_reduce": True},
    ],
)
def test_one_rank_per_stage_equals_all_ranks(par: dict[str, Any]) -> None:
    cfg = _cfg({**BIG, "routing_imbalance": 1.5, "layers": 4}, **par)
    assert _simulate(cfg).step_ns == _simulate(cfg, "all").step_ns


def test_expert_gradients_reduce_over_the_expert_data_parallel_group() -> None:
    cfg = _cfg(BIG, distributed_optimizer=True)
    sim = _simulate(cfg)
    ops = sim.composed.workload.ops
    names = [sim.composed.workload.strings[int(n)] for n in ops.name]
    experts = stage_expert_params(cfg, 0)
    dense = stage_params(cfg, 0) - experts
    red = CollectiveKind.REDUCE_SCATTER
    durations = {n: int(d) for n, d in zip(names, sim.composed.dur_ns, strict=True)}
    colls = CollectiveCache(default_comm_model(), sim.cluster)
    assert durations["ncclDevKernel_ReduceScatter (grads)"] == colls.time_ns(
        red, dense * 4, tuple(range(8))
    )
    assert durations["ncclDevKernel_ReduceScatter (expert grads)"] == colls.time_ns(
        red, experts * 4, (0, 4)
    )


def test_imbalance_lengthens_the_simulated_step() -> None:
    balanced = _simulate(_cfg(BIG))
    skewed = _simulate(_cfg({**BIG, "routing_imbalance": 3.0}))
    assert skewed.step_ns > balanced.step_ns


def test_the_breakdown_counts_dispatch_and_combine_as_communication() -> None:
    for dispatcher, kernel in (("alltoall", "ncclDevKernel_SendRecv"), ("deepep", "deep_ep::")):
        sim = _simulate(_cfg({**BIG, "dispatcher": dispatcher}))
        trace = predicted_config_job(sim).traces[0]
        names = [trace.strings[int(n)] for n in trace.events.name]
        # one MoE layer: dispatch and combine forward, both again in backward, per micro-batch
        a2a = [n for n in names if n.startswith(kernel)]
        assert len(a2a) == 4 * sim.composed.microbatches
        assert all(is_comm_kernel(n) for n in a2a)
    assert "deep_ep::intranode::dispatch" in names
