"""Tracing an MoE training script (samples/scripts/moe_ep.py): its token all-to-alls over the
expert-parallel group, its expert gradients over the expert-data-parallel group, against hand
counts and against the built-in MoE layer of the same shape; and the routed all-to-all model
timing the script's all-to-alls."""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from echo_view.errors import ConfigError
from echo_view.loading import load_workload, trace_config
from echo_view.model.config import WorkloadConfig
from echo_view.model.config_parse import parse_workload_config
from echo_view.model.graph import AXES, OpTable, TracedGraph
from echo_view.model.kinds import CollectiveKind
from echo_view.sim.cluster import cluster_from_config
from echo_view.sim.comm.defaults import default_comm_model
from echo_view.sim.compose_costs import CollectiveCache, table_cost
from echo_view.sim.compute_presets import compute_params_for
from echo_view.sim.layout import Layout
from tests.conftest import SAMPLES, TORCH_MISSING

SCRIPTS = SAMPLES / "scripts"
SHIPPED = SCRIPTS / "moe_ep_mixtral_16xh100.toml"
#: A tiny Mixtral-style model: 4 experts, top-2, on 4 ranks as EP 2 x EDP 2.
MODEL: dict[str, Any] = {
    "layers": 2,
    "hidden": 256,
    "heads": 4,
    "kv_heads": 2,
    "ffn_hidden": 512,
    "vocab": 1024,
    "seq_len": 128,
    "activation": "swiglu",
    "normalization": "rmsnorm",
    "position": "rope",
    "tie_embeddings": False,
    "experts": 4,
    "top_k": 2,
    "moe_ffn_hidden": 512,
}
MICRO = 2


def _config(tmp_path: Path, *, script: bool = True, **model: Any) -> WorkloadConfig:
    mod = {**MODEL, **model} | ({"script": str(SCRIPTS / "moe_ep.py")} if script else {})
    data = {
        "model": mod if script else {**mod, "kind": "gpt"},
        "parallel": {"tp": 1, "pp": 1, "dp": 4, "ep": 2},
        "batch": {"global": 4 * MICRO, "micro": MICRO},
        "cluster": {"gpu": "H100-SXM5-80GB", "gpus_per_node": 4, "nodes": 1},
        "precision": {"dtype": "bf16"},
    }
    return parse_workload_config(data, str(tmp_path / "moe.toml"))


def _collectives(graph: TracedGraph, table: OpTable) -> Counter[tuple[str, str, int, str]]:
    """(graph name, kind, bytes, axis) of each collective, counted."""
    return Counter(
        (
            graph.strings[int(table.name[i])],
            table.coll(i).label,
            int(table.coll_bytes[i]),
            AXES[int(table.axis[i])],
        )
        for i in table.collective_rows()
    )


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> tuple[TracedGraph, TracedGraph]:
    """The tiny model traced from the script and by the built-in tracer."""
    pytest.importorskip("torch", reason=TORCH_MISSING)
    tmp = tmp_path_factory.mktemp("moe")
    return trace_config(_config(tmp)), trace_config(_config(tmp, script=False))


# Hand counts: T = micro x seq = 256 tokens per rank, each sent to top_k = 2 experts; balanced
# routing puts T * top_k / experts = 128 copies in each of the 4 experts, 2 experts per EP rank:
# every all-to-all moves T * top_k rows of hidden bf16 values per rank.
A2A_BYTES = MICRO * 128 * 2 * 256 * 2  # 262,144
# Local experts' weights (2 of 4 per rank), fp32 gradients: w13 [2, 256, 2 x 512] and
# w2 [2, 512, 256].
W13_BYTES, W2_BYTES = 2 * 256 * 1024 * 4, 2 * 512 * 256 * 4
# Everything else, all-reduced by DDP over all 4 ranks in fp32: embedding and output layer,
# per layer attention (q, o 256 x 256; k, v 256 x 128), router 256 x 4 and two RMSNorm weights,
# and the final norm.
DENSE = 2 * 1024 * 256 + 2 * (2 * 256 * 256 + 2 * 256 * 128 + 256 * 4 + 2 * 256) + 256


@pytest.mark.slow
def test_script_all_to_alls_are_the_ep_dispatch_and_combine(
    traced: tuple[TracedGraph, TracedGraph],
) -> None:
    script, _ = traced
    role = script.roles[0]
    assert script.meta["layout"] == {"tp": 1, "dp": 4, "cp": 1, "pp": 1, "ep": 2, "etp": 1}
    layers = MODEL["layers"]
    dispatch = ("moe_dispatch", "all_to_all", A2A_BYTES, "ep")
    combine = ("moe_combine", "all_to_all", A2A_BYTES, "ep")
    assert _collectives(script, role.forward[0]) == Counter({dispatch: layers, combine: layers})
    bwd = role.backward[0]
    assert _collectives(script, bwd) - Counter(
        {k: n for k, n in _collectives(script, bwd).items() if k[1] != "all_to_all"}
    ) == Counter({dispatch: layers, combine: layers})
    # In program order each pass alternates dispatch, combine (the backward pass: the
    # combine's gradient travels first, the way a dispatch does).
    for table in (role.forward[0], bwd):
        names = [
            script.strings[int(table.name[i])]
            for i in table.collective_rows()
            if table.coll(i).label == "all_to_all"
        ]
        assert names == ["moe_dispatch", "moe_combine"] * layers


@pytest.mark.slow
def test_script_reduces_expert_grads_over_edp_and_the_rest_over_dp(
    traced: tuple[TracedGraph, TracedGraph],
) -> None:
    script, _ = traced
    bwd = _collectives(script, script.roles[0].backward[0])
    reductions = Counter({k: n for k, n in bwd.items() if k[1] == "all_reduce"})
    edp = Counter({k[2]: n for k, n in reductions.items() if k[3] == "edp"})
    assert edp == Counter({W13_BYTES: MODEL["layers"], W2_BYTES: MODEL["layers"]})
    dp = sum(k[2] * n for k, n in reductions.items() if k[3] == "dp")
    assert dp == 4 * DENSE
    assert {k[3] for k in reductions} == {"dp", "edp"}
    # The optimizer steps this rank's dense parameters and its 2 local experts.
    assert script.roles[0].params == DENSE + (W13_BYTES + W2_BYTES) // 4 * MODEL["layers"]


@pytest.mark.slow
def test_script_and_builtin_moe_run_the_same_all_to_alls(
    traced: tuple[TracedGraph, TracedGraph],
) -> None:
    """Same names, bytes and EP axis each pass; the built-in graph holds no gradient
    reduction (the composer adds it), the script's graph holds DDP's and its hooks'; the
    built-in layer's other collective is Megatron-Core's all-gather of the split sizes, which
    the script's layer does not run."""
    script, builtin = traced
    for phase in ("forward", "backward"):
        s_table = getattr(script.roles[0], phase)[0]
        b_table = getattr(builtin.roles[0], phase)[0]
        s = Counter({k: n for k, n in _collectives(script, s_table).items() if k[3] == "ep"})
        b = _collectives(builtin, b_table)
        assert s == Counter({k: n for k, n in b.items() if k[3] == "ep"})
        # 4 experts' int64 counts from each of the etp 1 x ep 2 ranks, once a layer forward
        split_sizes = ("nccl:all_gather", "all_gather", 2 * 4 * 8, "etp_ep")
        gathers = {k: n for k, n in b.items() if k[3] != "ep"}
        assert gathers == ({split_sizes: MODEL["layers"]} if phase == "forward" else {})


def test_routed_model_times_the_script_all_to_alls() -> None:
    """The shipped script graph's dispatch and combine are timed by the routed all-to-all
    model: with a busiest expert at twice the mean load (a config a script may not set, made
    here past validation) they take longer; the GEMMs, traced balanced, do not change."""
    cfg, graph, origin, _ = load_workload(SHIPPED)
    assert origin == "beside"
    assert cfg.model.moe is not None
    skewed = dataclasses.replace(
        cfg,
        model=dataclasses.replace(
            cfg.model, moe=dataclasses.replace(cfg.model.moe, routing_imbalance=2.0)
        ),
    )
    cluster = cluster_from_config(cfg.cluster, cfg.source)
    table = graph.roles[0].forward[0]
    times = []
    for c in (cfg, skewed):
        colls = CollectiveCache(default_comm_model(), cluster)
        params = compute_params_for(cluster.gpu)
        tc = table_cost(graph, table, c, cluster, params, colls, Layout.of(c.parallel), 0)
        times.append(tc.dur_ns)
    a2a = [i for i in table.collective_rows().tolist() if table.coll(i).label == "all_to_all"]
    assert len(a2a) == 2 * cfg.model.layers
    assert all(times[1][i] > times[0][i] for i in a2a)
    compute = [i for i in range(len(table)) if i not in set(table.collective_rows().tolist())]
    assert (times[1][compute] == times[0][compute]).all()


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("routing_imbalance", 1.5, "traced balanced"),
        ("capacity_factor", 1.25, "drops tokens as its code does"),
        ("dispatcher", "deepep", "deepep dispatch is not traced"),
        ("moe_grouped_gemm", False, "expert GEMMs are traced as its code runs them"),
        ("load_balancing", "none", "router computes whatever loss its code does"),
    ],
)
def test_script_moe_config_refuses_builtin_routing_keys(
    tmp_path: Path, key: str, value: Any, words: str
) -> None:
    with pytest.raises(ConfigError, match=words) as err:
        _config(tmp_path, **{key: value})
    assert f"model.{key}" in str(err.value)


def test_script_moe_config_is_accepted(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    assert cfg.model.script is not None and cfg.model.moe is not None
    assert cfg.parallel.ep == 2 and cfg.parallel.expert_dp == 2


@pytest.mark.parametrize(
    ("ranks", "rank", "kind", "layout", "axis"),
    [
        ((0, 1, 2, 3), 0, CollectiveKind.ALL_TO_ALL, Layout(1, 1, 8, ep=4), "ep"),
        ((4, 5, 6, 7), 5, CollectiveKind.ALL_TO_ALL, Layout(1, 1, 8, ep=4), "ep"),
        ((1, 5), 5, CollectiveKind.ALL_REDUCE, Layout(1, 1, 8, ep=4), "edp"),
        # EP over the whole stage: its all-to-all is expert parallel, a reduction over the
        # same ranks data parallel.
        (tuple(range(8)), 3, CollectiveKind.ALL_TO_ALL, Layout(1, 1, 8, ep=8), "ep"),
        (tuple(range(8)), 3, CollectiveKind.ALL_REDUCE, Layout(1, 1, 8, ep=8), "dp"),
        # Expert tensor parallel pairs, EP strided by etp = 2.
        ((2, 3), 2, CollectiveKind.ALL_GATHER, Layout(1, 1, 8, ep=2, etp=2), "etp"),
        ((0, 2), 2, CollectiveKind.ALL_TO_ALL, Layout(1, 1, 8, ep=2, etp=2), "ep"),
    ],
)
def test_axis_of_finds_the_expert_groups(
    ranks: tuple[int, ...], rank: int, kind: CollectiveKind, layout: Layout, axis: str
) -> None:
    pytest.importorskip("torch", reason=TORCH_MISSING)
    from echo_view.tracing.script import axis_of

    assert axis_of(ranks, rank, layout, kind) == axis


@pytest.mark.slow
def test_without_a_config_the_layout_takes_ep_from_the_all_to_alls() -> None:
    """``trace --script`` without a config: the all-to-alls' groups (2 consecutive ranks of
    4) make the EP axis, the expert gradients' groups (ranks strided by 2) the EDP axis."""
    pytest.importorskip("torch", reason=TORCH_MISSING)
    from echo_view.tracing.script import ScriptSpec, trace_script

    keys = ("layers", "hidden", "heads", "kv_heads", "vocab", "seq_len", "experts", "top_k")
    args = {k: MODEL[k] for k in keys} | {"moe_ffn_hidden": 512, "micro": MICRO, "ep": 2}
    graph = trace_script(ScriptSpec(SCRIPTS / "moe_ep.py"), 4, required=args).graph
    assert graph.meta["layout"] == {"tp": 1, "dp": 4, "cp": 1, "pp": 1, "ep": 2, "etp": 1}
    axes = Counter(_collectives(graph, graph.roles[0].backward[0]))
    assert {k[3] for k in axes} == {"ep", "edp", "dp"}
