"""PyTorch FSDP under pipeline parallelism: which gathers and reduce-scatters each stage's
chunks run in a 1F1B step, for both gradient-sync modes, against hand-counted expectations."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest

from echo_view.errors import ConfigError
from echo_view.model.config_parse import parse_workload_config
from echo_view.model.graph import OpClass, Role, TracedGraph
from echo_view.model.strings import StringTable
from echo_view.sim.cluster import cluster_from_config
from echo_view.sim.comm.defaults import default_comm_model
from echo_view.sim.config_sim import ConfigSimulation, simulate_config
from echo_view.sim.host import HostParams
from echo_view.sim.kernel_cost import ComputeParams
from echo_view.sim.memory import layer_params, stage_memory, stage_params
from tests.sim.test_fsdp import _ops, _table

LAYERS, PP, DP, M = 4, 2, 2, 2
MODEL = {"kind": "gpt", "layers": LAYERS, "hidden": 4096, "heads": 32, "seq_len": 2048}
simulate_gpu = partial(simulate_config, host=HostParams(kernel_us=0))


def _cfg(**parallel: Any) -> Any:
    return parse_workload_config(
        {
            "model": {**MODEL, "vocab": 50_000},
            "parallel": {"tp": 1, "pp": PP, "dp": DP, **parallel},
            "batch": {"global": M * DP, "micro": 1},
            "cluster": {"gpu": "H100", "gpus_per_node": PP * DP, "nodes": 1},
            "precision": {"dtype": "bf16"},
        }
    )


def _sim(cfg: Any) -> ConfigSimulation:
    """Two stages of ``LAYERS / PP`` layers (two GEMMs each way per layer), each stage's
    parameters its layers plus a root (the embedding on the first, the output on the last)."""
    strings = StringTable()
    per_layer = layer_params(cfg.model, 1)
    root = cfg.model.vocab * cfg.model.hidden
    roles = []
    for stage in range(PP):
        fwd = _table(strings, "fwd_gemm", LAYERS, 2e13)
        bwd = _table(strings, "bwd_gemm", LAYERS, 4e13)
        opt = _table(strings, "adam", 1, 0.0, OpClass.OPTIMIZER, 10**9)
        params = LAYERS // PP * per_layer + root
        roles.append(Role((stage,), (fwd,), (bwd,), opt, params=params))
    graph = TracedGraph(strings, tuple(roles))
    cluster = cluster_from_config(cfg.cluster)
    return simulate_gpu(graph, cfg, cluster, default_comm_model(), ComputeParams(), ranks="all")


def _rank_ops(sim: ConfigSimulation, rank: int) -> list[tuple[str, int, int, int, int]]:
    ranks = sim.composed.workload.ops.rank
    return [o for o, r in zip(_ops(sim), ranks, strict=True) if int(r) == rank]


def _collectives(ops: list[tuple[str, int, int, int, int]], kind: str) -> list[str]:
    return [o[0] for o in ops if o[0].startswith(f"ncclDevKernel_{kind} (fsdp")]


UNITS = LAYERS // PP + 1  # a stage's layers and its root


@pytest.mark.parametrize("rank", [0, DP])  # a rank of the first and of the last stage
def test_last_microbatch_gathers_once_and_reduces_after_the_last_backward(rank: int) -> None:
    """``torch.distributed.pipelining`` (the default with pp > 1): the chunk's units are
    gathered before its first forward and kept; its gradients accumulate over the micro-batches
    and are reduce-scattered only during the last backward, unit by unit."""
    sim = _sim(_cfg(fsdp="shard_grad_op"))
    ops = _rank_ops(sim, rank)
    gathers, reduces = _collectives(ops, "AllGather"), _collectives(ops, "ReduceScatter")
    assert len(gathers) == UNITS and all("forward chunk" in n and "mb 0" in n for n in gathers)
    last = f"backward chunk {rank // DP} mb {M - 1}"
    assert len(reduces) == UNITS and all(last in n for n in reduces)
    opt = next(o for o in ops if o[0] == "adam")  # the optimizer, once every shard is reduced
    assert opt[3] >= max(o[4] for o in ops if "ReduceScatter (fsdp" in o[0])
    first_fwd = next(o for o in ops if o[0] == "fwd_gemm")
    assert first_fwd[3] >= min(o[4] for o in ops if "AllGather (fsdp" in o[0])


@pytest.mark.parametrize(
    ("fsdp", "gathers"),
    # 1F1B with two stages and two micro-batches. First stage: F0 F1 B0 B1; last: F0 B0 F1 B1.
    # shard_grad_op gathers where a backward has freed the parameters since: first stage at F0
    # and B1, last stage at F0 and F1. full_shard frees the layers after every forward too
    # (their units gathered in all four passes), but the root (the chunk's FSDP root, not
    # resharded after forward) only after a backward: gathered in the same two passes.
    [("shard_grad_op", 2 * UNITS), ("full_shard", 2 * M * (UNITS - 1) + 2)],
)
def test_every_microbatch_reduces_and_reshards_after_each_backward(fsdp: str, gathers: int) -> None:
    sim = _sim(_cfg(fsdp=fsdp, fsdp_grad_sync="every_microbatch"))
    for rank in (0, DP):
        ops = _rank_ops(sim, rank)
        assert len(_collectives(ops, "AllGather")) == gathers
        reduces = _collectives(ops, "ReduceScatter")
        assert len(reduces) == M * UNITS
        assert {n.split("mb ")[1].split()[0].rstrip(")") for n in reduces} == {"0", "1"}


def test_the_sync_mode_is_checked() -> None:
    with pytest.raises(ConfigError, match="fsdp_grad_sync"):
        _cfg(fsdp_grad_sync="every_microbatch")  # without FSDP
    with pytest.raises(ConfigError, match="pp > 1 only"):
        parse_workload_config(
            {
                "model": MODEL | {"vocab": 50_000},
                "parallel": {"tp": 1, "pp": 1, "dp": 2, "fsdp": "full_shard"}
                | {"fsdp_grad_sync": "last_microbatch"},
                "batch": {"global": 2, "micro": 1},
                "cluster": {"gpu": "H100", "gpus_per_node": 2, "nodes": 1},
                "precision": {"dtype": "bf16"},
            }
        )
    assert _cfg(fsdp="full_shard").parallel.fsdp_sync == "last_microbatch"


@pytest.mark.parametrize("sync", ["last_microbatch", "every_microbatch"])
def test_memory_of_a_stage(sync: str) -> None:
    """fp32 shards of the parameters, gradients and Adam's moments (16 bytes a parameter over
    ``dp``) and the gathered bf16 parameters (2 bytes); gradients deferred to the last
    micro-batch also accumulate unsharded, in fp32 (4 bytes)."""
    cfg = _cfg(fsdp="shard_grad_op", fsdp_grad_sync=sync)
    n = stage_params(cfg, 0)
    mem = stage_memory(cfg, 0)
    assert mem.weights == -(-4 * n // DP) + 2 * n and mem.optimizer == -(-8 * n // DP)
    assert mem.grads == -(-4 * n // DP) + (4 * n if sync == "last_microbatch" else 0)


@pytest.mark.parametrize(
    ("rank", "passes"),
    # First stage F0 F1 B0 B1: the root gathered at F0, kept through F1 and B0 (which frees
    # it), gathered again for B1. Last stage F0 B0 F1 B1: at F0 and, after B0, at F1.
    [
        (0, ["forward chunk 0 mb 0", "backward chunk 0 mb 1"]),
        (DP, ["forward chunk 1 mb 0", "forward chunk 1 mb 1"]),
    ],
)
def test_full_shard_keeps_the_root_gathered_after_forward(rank: int, passes: list[str]) -> None:
    sim = _sim(_cfg(fsdp="full_shard", fsdp_grad_sync="every_microbatch"))
    roots = [n for n in _collectives(_rank_ops(sim, rank), "AllGather") if "params root" in n]
    assert [n.split("params root, ")[1].rstrip(")") for n in roots] == passes
