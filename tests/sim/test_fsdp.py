"""PyTorch FSDP as a composed program: which gathers and reduce-scatters a step runs, how they
overlap compute, and the step time they give, against hand-computed expectations."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest

from echo_view.model.config_parse import parse_workload_config
from echo_view.model.graph import OpClass, OpTable, Role, TracedGraph
from echo_view.model.kinds import CollectiveKind
from echo_view.model.strings import StringTable
from echo_view.sim.cluster import cluster_from_config
from echo_view.sim.comm.defaults import default_comm_model
from echo_view.sim.compose_costs import CollectiveCache
from echo_view.sim.config_sim import ConfigSimulation, simulate_config
from echo_view.sim.fsdp import fsdp_plan, spread
from echo_view.sim.host import HostParams
from echo_view.sim.kernel_cost import ComputeParams
from echo_view.sim.memory import layer_params
from tests.sim.test_compose import _table as compose_table

LAYERS, DP = 4, 4
MODEL = {"kind": "gpt", "layers": LAYERS, "hidden": 4096, "heads": 32, "seq_len": 2048}
AG, RS = CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER


#: The GPU path alone (these expectations are computed without the host path, which
#: tests/sim/test_host.py checks).
simulate_gpu = partial(simulate_config, host=HostParams(kernel_us=0))


def _cfg(micro_batches: int, **parallel: Any) -> Any:
    return parse_workload_config(
        {
            "model": {**MODEL, "vocab": 50_000},
            "parallel": {
                "tp": 1,
                "pp": 1,
                "dp": DP,
                **{k: v for k, v in parallel.items() if v is not None},
            },
            "batch": {"global": micro_batches * DP, "micro": 1},
            "cluster": {"gpu": "H100", "gpus_per_node": DP, "nodes": 1},
            "precision": {"dtype": "bf16"},
        }
    )


def _table(
    strings: StringTable, name: str, n: int, flops: float, cls: int = OpClass.GEMM, nbytes: int = 0
) -> OpTable:
    return compose_table(strings, [(name, cls, flops, nbytes)] * n)


def _graph(cfg: Any) -> tuple[TracedGraph, int, int]:
    """Two GEMMs per layer each way (large: every gather hides behind one layer's compute),
    and the rank's parameters: ``LAYERS`` blocks plus a root of embeddings and final norm."""
    strings = StringTable()
    fwd = _table(strings, "fwd_gemm", 2 * LAYERS, 2e13)
    bwd = _table(strings, "bwd_gemm", 2 * LAYERS, 4e13)
    opt = _table(strings, "adam", 1, 0.0, OpClass.OPTIMIZER, 10**9)
    per_layer = layer_params(cfg.model, 1)
    root = cfg.model.vocab * cfg.model.hidden + cfg.model.seq_len * cfg.model.hidden
    role = Role((0,), (fwd,), (bwd,), opt, params=LAYERS * per_layer + root)
    return TracedGraph(strings, (role,)), per_layer, root


def _sim(cfg: Any, **kw: Any) -> ConfigSimulation:
    graph, _, _ = _graph(cfg)
    cluster = cluster_from_config(cfg.cluster)
    return simulate_gpu(graph, cfg, cluster, default_comm_model(), ComputeParams(), **kw)


def _ops(sim: ConfigSimulation) -> list[tuple[str, int, int, int, int]]:
    """(name, lane, duration, start, end) of every op, in program order."""
    wl, r = sim.composed.workload, sim.result
    return [
        (wl.strings[int(n)], int(lane), int(d), int(s), int(e))
        for n, lane, d, s, e in zip(
            wl.ops.name, wl.ops.lane, r.dur_ns, r.start_ns, r.end_ns, strict=True
        )
    ]


def _times(cfg: Any) -> dict[str, int]:
    _, per_layer, root = _graph(cfg)
    colls = CollectiveCache(default_comm_model(), cluster_from_config(cfg.cluster))
    group = tuple(range(DP))
    red = 2 if cfg.parallel.grad_reduce_in_fp32 is False else 4
    return {
        "ag_unit": colls.time_ns(AG, per_layer * 2, group),
        "ag_root": colls.time_ns(AG, root * 2, group),
        "rs_unit": colls.time_ns(RS, per_layer * red, group),
        "rs_root": colls.time_ns(RS, root * red, group),
    }


@pytest.mark.parametrize("reduce_fp32", [None, False])
def test_full_shard_gathers_blocks_twice_and_reduce_scatters_every_gradient_once(
    reduce_fp32: bool | None,
) -> None:
    m = 2
    cfg = _cfg(m, fsdp="full_shard", grad_reduce_in_fp32=reduce_fp32)
    t = _times(cfg)
    ops = _ops(_sim(cfg))
    ag = [o for o in ops if o[0].startswith("ncclDevKernel_AllGather (fsdp params")]
    rs = [o for o in ops if o[0].startswith("ncclDevKernel_ReduceScatter (fsdp grads")]
    unit_ag = [o for o in ag if "root" not in o[0]]
    root_ag = [o for o in ag if "root" in o[0]]
    # Per micro-batch: each block before its forward and again before its backward; the
    # root (embeddings, final norm) once: FSDP keeps the root gathered from forward to backward.
    assert len(unit_ag) == 2 * LAYERS * m and len(root_ag) == m
    assert {o[2] for o in unit_ag} == {t["ag_unit"]} and {o[2] for o in root_ag} == {t["ag_root"]}
    # Every gradient reduce-scattered once per micro-batch, in the reduction dtype (fp32 for
    # bf16 unless grad_reduce_in_fp32 = false, as llm-foundry's PURE mixed precision).
    assert len(rs) == (LAYERS + 1) * m
    assert sorted(o[2] for o in rs) == sorted([t["rs_unit"]] * LAYERS * m + [t["rs_root"]] * m)
    # All of them on the data-parallel lane, none on the compute lane.
    compute_lane = ops[0][1]
    assert all(o[1] != compute_lane for o in ag + rs)


def test_shard_grad_op_gathers_each_block_once() -> None:
    ops = _ops(_sim(_cfg(2, fsdp="shard_grad_op")))
    names = [o[0] for o in ops]
    gathers = [n for n in names if n.startswith("ncclDevKernel_AllGather (fsdp params")]
    # Blocks and root once per micro-batch, all before the forward; none for the backward.
    assert len(gathers) == 2 * (LAYERS + 1) and not any("backward" in n for n in gathers)
    assert sum(n.startswith("ncclDevKernel_ReduceScatter") for n in names) == 2 * (LAYERS + 1)


@pytest.mark.parametrize("fsdp", ["full_shard", "shard_grad_op"])
def test_only_the_first_gathers_and_last_reduce_scatters_of_a_micro_batch_are_exposed(
    fsdp: str,
) -> None:
    """Each later gather hides behind the previous block's compute and each block's
    reduce-scatter behind the next one's backward. Exposed per micro-batch: the root's and the
    first block's gathers before the forward, the last block's and the root's reduce-scatters
    after the backward (the next micro-batch's gathers queue behind them on the one NCCL
    stream); then the optimizer on the shard."""
    m = 2
    cfg = _cfg(m, fsdp=fsdp)
    sim = _sim(cfg)
    free = _sim(cfg, comm_scale=0.0)
    t = _times(cfg)
    per_mb = t["ag_root"] + t["ag_unit"] + t["rs_unit"] + t["rs_root"]
    ops = _ops(sim)
    layer_fwd = min(o[2] for o in ops if o[0].startswith("forward chunk 0 mb 0 unit"))
    assert layer_fwd > t["ag_unit"] + t["rs_unit"]  # the premise: compute hides the rest
    assert sim.step_ns == free.step_ns + m * per_mb


def test_gathers_wait_for_the_rate_limiter_and_compute_for_its_gather() -> None:
    sim = _sim(_cfg(1, fsdp="full_shard"))
    ops = _ops(sim)
    pieces = [o for o in ops if o[0].startswith(("forward chunk", "backward chunk"))]
    gathers = [o for o in ops if "AllGather (fsdp params" in o[0] and "root" not in o[0]]
    assert len(pieces) == len(gathers) == 2 * LAYERS
    for k, (piece, gather) in enumerate(zip(pieces, gathers, strict=True)):
        assert piece[3] >= gather[4]  # a block computes once its parameters are gathered
        if k >= 2:  # at most two blocks gathered: wait until the one two before is freed
            assert gather[3] >= pieces[k - 2][4]
    opt = next(o for o in ops if o[0] == "optimizer")
    assert opt[3] >= max(o[4] for o in ops if "ReduceScatter" in o[0])


def test_one_rank_and_every_rank_give_the_same_step() -> None:
    for fsdp in ("full_shard", "shard_grad_op"):
        cfg = _cfg(2, fsdp=fsdp)
        stages, every = _sim(cfg), _sim(cfg, ranks="all")
        assert len(every.composed.simulated_ranks) == DP
        assert stages.step_ns == every.step_ns


def test_plan_units_and_the_split_of_a_pass() -> None:
    cfg = _cfg(1, fsdp="full_shard", grad_reduce_in_fp32=False)
    _, per_layer, root = _graph(cfg)
    plan = fsdp_plan(cfg, LAYERS * per_layer + root, (0, 1, 2, 3))
    assert (plan.layer_params, plan.root_params) == (per_layer, root)
    assert (plan.gather_bytes, plan.reduce_bytes, plan.regather) == (2, 2, True)
    # A graph with fewer parameters than the formula's layers: no negative root.
    small = fsdp_plan(cfg, 10 * LAYERS + 3, (0, 1))
    assert (small.layer_params, small.root_params) == (10, 3)
    assert spread(7, 3) == [3, 2, 2] and spread(4, 4) == [1, 1, 1, 1]
