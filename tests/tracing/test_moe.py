"""The traced MoE layer: its collectives per layer (number, kind, group, bytes), its GEMM rows,
and parameters that agree with the memory model."""

from __future__ import annotations

from typing import Any

import pytest

from echo_view.model.aten_ops import HOST_WAIT
from echo_view.model.config import WorkloadConfig
from echo_view.model.config_parse import parse_workload_config
from echo_view.model.graph import AXES, OpClass, OpTable, TracedGraph
from echo_view.model.kinds import CollectiveKind
from echo_view.sim.memory import stage_expert_params, stage_params
from tests.conftest import TORCH_MISSING
from tests.moe_data import moe_data
from tests.tracing.graph_equality import assert_same_graph

pytest.importorskip("torch", reason=TORCH_MISSING)

from echo_view.tracing.roles import trace_whole, trace_workload

A2A, AG, RS = CollectiveKind.ALL_TO_ALL, CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER
#: Tokens per rank: seq 64 x micro 2 = 128; top-2 = 256 routed copies of hidden 64 in bf16.
ROUTED_BYTES = 128 * 2 * 64 * 2


def _cfg(model: dict[str, Any] | None = None, **par: Any) -> WorkloadConfig:
    rope = {"layers": 3, "normalization": "rmsnorm", "position": "rope"}
    return parse_workload_config(moe_data({**rope, **(model or {})}, par, micro=2))


def _colls(graph: TracedGraph, table: OpTable) -> list[tuple[str, str, str, int]]:
    """(name, kind, axis, bytes) of each collective in ``table``."""
    out = []
    for i in range(len(table)):
        if table.op_class[i] == OpClass.COLLECTIVE:
            name = graph.strings[int(table.name[i])]
            axis = AXES[int(table.axis[i])]
            out.append((name, table.coll(i).label, axis, int(table.coll_bytes[i])))
    return out


def test_alltoall_dispatcher_one_dispatch_and_one_combine_each_way() -> None:
    cfg = _cfg({"layers": 1})
    graph = trace_workload(cfg)
    role = graph.roles[0]
    a2a = A2A.label
    assert _colls(graph, role.forward[0]) == [
        # the split sizes: 8 experts' int64 counts from each of the 4 ranks of etp 1 x ep 4
        ("nccl:all_gather", AG.label, "etp_ep", 4 * 8 * 8),
        ("moe_dispatch", a2a, "ep", ROUTED_BYTES),
        ("moe_combine", a2a, "ep", ROUTED_BYTES),
    ]
    # backward: the combine's gradient travels as a dispatch, the dispatch's as a combine
    assert _colls(graph, role.backward[0]) == [
        ("moe_dispatch", a2a, "ep", ROUTED_BYTES),
        ("moe_combine", a2a, "ep", ROUTED_BYTES),
    ]


def test_grouped_gemm_rows_are_the_busiest_ranks_tokens_per_expert() -> None:
    """EP 4, 2 local experts; balanced: 4 ranks x 256 copies / 8 experts = 128 rows each. With
    the busiest expert at 2x the mean the busiest rank (experts 0 and 1) gets 2/8 + 6/56 of all
    1,024 copies = 365.7, rounded up to 183 rows for each of its 2 experts."""
    for imbalance, rows in ((1.0, 128), (2.0, 183)):
        graph = trace_workload(_cfg({"layers": 1, "routing_imbalance": imbalance}))
        fwd = graph.roles[0].forward[0]
        bmm = [
            graph.strings[int(fwd.shapes[i])]
            for i in range(len(fwd))
            if graph.strings[int(fwd.name[i])] == "aten::bmm"
        ]
        assert bmm == [f"[2,{rows},64]x[2,64,64]", f"[2,{rows},32]x[2,32,64]"]


def _gemms(graph: TracedGraph, table: OpTable) -> list[tuple[str, str, int]]:
    """(name, shapes, FLOPs) of each GEMM in ``table``."""
    names, shapes = table.name, table.shapes
    return [
        (graph.strings[int(names[i])], graph.strings[int(shapes[i])], int(table.flops[i]))
        for i in range(len(table))
        if table.op_class[i] == OpClass.GEMM
    ]


def test_sequential_experts_run_one_gemm_per_expert_and_projection() -> None:
    """``moe_grouped_gemm = false`` (Megatron-Core's ``SequentialMLP``): EP 4, 2 local experts
    of 128 rows each, hidden 64, FFN 32 with SwiGLU. Forward: per expert FC1 [128,64]x[64,64]
    (2 x 128 x 64 x 64 = 1,048,576 FLOPs) and FC2 [128,32]x[32,64] (524,288), in expert order,
    where the grouped layer has one batched GEMM per projection; backward: per expert and
    projection a data- and a weight-gradient GEMM. Same FLOPs in every pass."""
    grouped = trace_workload(_cfg({"layers": 1}))
    seq = trace_workload(_cfg({"layers": 1, "moe_grouped_gemm": False}))
    g_fwd, s_fwd = grouped.roles[0].forward[0], seq.roles[0].forward[0]
    experts = [(n, sh, f) for n, sh, f in _gemms(seq, s_fwd) if f in (1048576, 524288)][-4:]
    fc1, fc2 = ("aten::mm", "[128,64]x[64,64]", 1048576), ("aten::mm", "[128,32]x[32,64]", 524288)
    assert experts == [fc1, fc2, fc1, fc2]
    assert not [g for g in _gemms(seq, s_fwd) if g[0] == "aten::bmm"]
    for pas in ("forward", "backward"):
        g_tab, s_tab = getattr(grouped.roles[0], pas)[0], getattr(seq.roles[0], pas)[0]
        g_gemm, s_gemm = _gemms(grouped, g_tab), _gemms(seq, s_tab)
        assert sum(f for *_, f in g_gemm) == sum(f for *_, f in s_gemm)
        bmm = sum(1 for g in g_gemm if g[0] == "aten::bmm")
        # each batched GEMM of 2 experts becomes 2 GEMMs
        assert len(s_gemm) == len(g_gemm) + bmm
    # the outputs concatenated in forward, the input gradients in backward
    cat = seq.strings.intern("aten::cat")
    assert int((s_fwd.name == cat).sum()) == int((g_fwd.name == cat).sum()) + 1
    s_bwd, g_bwd = seq.roles[0].backward[0], grouped.roles[0].backward[0]
    assert int((s_bwd.name == cat).sum()) == int((g_bwd.name == cat).sum()) + 1


def test_sequential_fp8_experts_cast_each_experts_weights() -> None:
    """FP8 with ``SequentialMLP``: each expert's linear layers are Transformer Engine linears,
    so every expert GEMM runs in FP8 and each expert's two weights are cast once per step:
    2 local experts x (FC1 64 x 64, FC2 32 x 64), 4 bytes moved per element, beside the
    projection (64 x 64) and QKV (192 x 64); grouped, one cast per projection of both experts
    (2 x 32 x 64 and 2 x 64 x 64)."""
    model = {"layers": 1, "moe_grouped_gemm": False}
    cfg = parse_workload_config({**_cfg_data(model), "precision": {"dtype": "fp8"}})
    graph = trace_workload(cfg)
    role = graph.roles[0]
    fp8 = graph.strings.intern("fp8")
    fwd = role.forward[0]
    expert = [i for i in range(len(fwd)) if int(fwd.flops[i]) in (1048576, 524288)]
    assert all(int(fwd.dtype[i]) == fp8 for i in expert[-4:])
    weights = sorted(
        int(role.optimizer.bytes[i])
        for i, name in enumerate(_names(graph, role.optimizer))
        if name == "te::cast_transpose (weight)"
    )
    assert weights == [4 * 32 * 64] * 2 + [4 * 64 * 64] * 3 + [4 * 192 * 64]
    grouped = trace_workload(
        parse_workload_config({**_cfg_data({"layers": 1}), "precision": {"dtype": "fp8"}})
    )
    opt = grouped.roles[0].optimizer
    cast = [
        int(opt.bytes[i])
        for i, name in enumerate(_names(grouped, opt))
        if name == "te::cast_transpose (weight)"
    ]
    assert sorted(cast) == [4 * 64 * 64, 4 * 2 * 32 * 64, 4 * 2 * 64 * 64, 4 * 192 * 64]


def test_allgather_dispatcher_gathers_over_the_ep_group() -> None:
    graph = trace_workload(_cfg({"layers": 1, "dispatcher": "allgather"}))
    tokens = 128 * 64 * 2  # the rank's tokens, not their copies
    probs = 128 * 2 * 2  # top-2 probabilities in bf16
    assert _colls(graph, graph.roles[0].forward[0]) == [
        ("nccl:all_gather", AG.label, "ep", 4 * tokens),
        ("nccl:all_gather", AG.label, "ep", 4 * probs),
        ("nccl:reduce_scatter", RS.label, "ep", 4 * tokens),
    ]


def test_expert_tensor_parallel_gathers_received_tokens() -> None:
    """tp = etp = 2 with sequence parallelism: each rank routes its 32-token shard of the
    sequence; received rows are all-gathered over the 2 etp ranks before the experts."""
    cfg = _cfg({"layers": 1}, tp=2, dp=4, ep=2, sequence_parallel=True)
    graph = trace_workload(cfg)
    fwd = _colls(graph, graph.roles[0].forward[0])
    assert [(n, axis, b) for n, _, axis, b in fwd if axis in ("tp_cp", "etp_ep")] == [
        ("nccl:all_reduce", "tp_cp", 8 * 8),  # the aux loss's counts of 8 experts
        ("nccl:all_gather", "etp_ep", 2 * 2 * 8 * 8),  # the split sizes of etp 2 x ep 2
    ]
    assert [(n, axis) for n, _, axis, _ in fwd if axis in ("ep", "etp")] == [
        ("moe_dispatch", "ep"),
        ("nccl:all_gather", "etp"),
        ("nccl:reduce_scatter", "etp"),
        ("moe_combine", "ep"),
    ]
    # 32 tokens x micro-batch 2 x top-2 copies of hidden 64 in bf16
    assert [b for n, _, _, b in fwd if n == "moe_dispatch"] == [32 * 2 * 2 * 64 * 2]


def _rows(graph: TracedGraph, table: OpTable, name: str) -> list[tuple[str, int]]:
    """(shapes, bytes) of each ``name`` op in ``table``."""
    return [
        (graph.strings[int(table.shapes[i])], int(table.bytes[i]))
        for i in range(len(table))
        if graph.strings[int(table.name[i])] == name
    ]


@pytest.mark.parametrize(
    ("par", "chunks", "rows"),
    [
        # EP 4: 2 local experts x 128 rows = 256 received rows from 4 source ranks, in 8 chunks
        ({}, 8, 256),
        # EP 2 x ETP 2 (tp 1, folded): 4 local experts; 2 ranks x 256 copies / 8 experts = 64
        # rows each, x 2 after the etp gather = 128: 512 rows from 2 x 2 sources in 16 chunks
        ({"ep": 2, "etp": 2, "sequence_parallel": True}, 16, 512),
    ],
)
def test_alltoall_dispatcher_regroups_received_rows_by_local_expert(
    par: dict[str, Any], chunks: int, rows: int
) -> None:
    """Megatron-LM's ``sort_chunks_by_idxs``: the received rows (source rank-major) copied into
    local-expert order before the experts and back after them, one ``cat`` of every received
    row each way in forward and again in backward; each reads and writes rows x 64 in bf16."""
    graph = trace_workload(_cfg({"layers": 1}, **par))
    role = graph.roles[0]
    size = rows // chunks
    cat = ("x".join([f"[{size},64]"] * chunks), 2 * rows * 64 * 2)
    assert _rows(graph, role.forward[0], "aten::cat") == [cat, cat]
    assert _rows(graph, role.backward[0], "aten::cat").count(cat) == 2


@pytest.mark.parametrize(
    ("model", "par"),
    [({}, {"ep": 8}), ({"dispatcher": "allgather"}, {}), ({"dispatcher": "deepep"}, {})],
)
def test_no_regrouping_with_one_local_expert_or_another_dispatcher(
    model: dict[str, Any], par: dict[str, Any]
) -> None:
    graph = trace_workload(_cfg({"layers": 1, **model}, **par))
    assert _rows(graph, graph.roles[0].forward[0], "aten::cat") == []


def test_alltoall_unpermutation_scatters_the_copies_back() -> None:
    """Forward: the permutation gathers the 128 tokens' 256 copies, the unpermutation scatters
    the 256 combined copies back into token order (Megatron-LM's ``moe_scatter``), both priced
    as row gathers: 256 rows of 64 in bf16 written, the index (256 int64) and the source read."""
    graph = trace_workload(_cfg({"layers": 1}))
    copies, index = 256 * 64 * 2, 256 * 8
    assert _rows(graph, graph.roles[0].forward[0], "aten::index_select") == [
        ("[128,64]x[256]", 128 * 64 * 2 + index + copies),
        ("[256,64]x[256]", copies + index + copies),
    ]


def test_deepep_ops_and_fp8_dispatch() -> None:
    cfg = _cfg({"layers": 1, "dispatcher": "deepep"})
    graph = trace_workload(cfg)
    assert [c[0] for c in _colls(graph, graph.roles[0].forward[0])] == [
        "deepep_dispatch",
        "deepep_combine",
    ]
    fp8 = parse_workload_config(
        {**_cfg_data({"layers": 1, "dispatcher": "deepep"}), "precision": {"dtype": "fp8"}}
    )
    graph = trace_workload(fp8)
    # FP8 dispatch moves one byte per element, the combine stays 16-bit
    assert [c[3] for c in _colls(graph, graph.roles[0].forward[0])] == [
        ROUTED_BYTES // 2,
        ROUTED_BYTES,
    ]


def _names(graph: TracedGraph, table: OpTable) -> list[str]:
    return [graph.strings[int(i)] for i in table.name]


@pytest.mark.parametrize("dispatcher", ["alltoall", "deepep"])
def test_fp8_expert_gemms_run_in_fp8_in_every_pass(dispatcher: str) -> None:
    """Transformer Engine's grouped GEMM runs forward, dgrad and wgrad in FP8, as its linear
    layers do; so do the shared experts. One MoE layer, EP 4 (2 local experts, 128 rows each):
    forward 2 grouped GEMMs, backward 4, each with its inputs cast (the tokens' cast skipped
    when DeepEP dispatches them in FP8), and the expert weights cast once per step."""
    model = {"layers": 1, "shared_experts": 1, "dispatcher": dispatcher}
    cfg = parse_workload_config({**_cfg_data(model), "precision": {"dtype": "fp8"}})
    graph = trace_workload(cfg)
    role = graph.roles[0]
    fwd, bwd, opt = role.forward[0], role.backward[0], role.optimizer
    fp8 = graph.strings.intern("fp8")
    for table, n in ((fwd, 2), (bwd, 4)):
        bmm = [i for i, name in enumerate(_names(graph, table)) if name == "aten::bmm"]
        assert len(bmm) == n
        assert all(int(table.dtype[i]) == fp8 for i in bmm)
    # FP8 GEMMs per layer: QKV, projection, shared FC1 and FC2 (the router and output stay bf16)
    gemm = fwd.op_class == OpClass.GEMM
    assert int((gemm & (fwd.dtype == fp8)).sum()) == 4 + 2
    assert int(((bwd.op_class == OpClass.GEMM) & (bwd.dtype == fp8)).sum()) == 8 + 4
    # Input casts: QKV, projection, shared FC1, shared FC2, expert FC2; expert FC1 unless DeepEP
    casts = _names(graph, fwd).count("te::cast_transpose (input)")
    assert casts == (5 if dispatcher == "deepep" else 6)
    assert _names(graph, bwd).count("te::cast_transpose (grad output)") == 6
    # Expert weights once per step: FC1 2 x 64 x 64 (gate and up), FC2 2 x 32 x 64 elements;
    # the cast reads 2 bytes and writes 2 (the FP8 copy and its transpose) per element.
    weights = [
        int(opt.bytes[i])
        for i, name in enumerate(_names(graph, opt))
        if name == "te::cast_transpose (weight)"
    ]
    assert 4 * 2 * 64 * 64 in weights and 4 * 2 * 32 * 64 in weights
    assert len(weights) == 4 + 2


def _cfg_data(model: dict[str, Any]) -> dict[str, Any]:
    from echo_view.model.config_keys import config_to_mapping

    return config_to_mapping(_cfg(model))


@pytest.mark.parametrize("grouped", [True, False])
def test_traced_parameters_match_the_memory_model(grouped: bool) -> None:
    cfg = _cfg({"first_dense_layers": 1, "shared_experts": 1, "moe_grouped_gemm": grouped})
    graph = trace_workload(cfg)
    role = graph.roles[0]
    assert role.params == stage_params(cfg, 0)
    assert graph.meta["expert_params"] == {"0": stage_expert_params(cfg, 0)}
    # 2 MoE layers x 2 local experts x (64 x 64 + 32 x 64)
    assert stage_expert_params(cfg, 0) == 2 * 2 * (64 * 64 + 32 * 64)


@pytest.mark.parametrize(
    ("par", "grouped"),
    [
        ({}, True),
        ({}, False),
        ({"pp": 3, "dp": 8, "first_stage_layers": 1, "last_stage_layers": 1}, True),
    ],
)
def test_repeated_moe_chunks_equal_whole_chunks(par: dict[str, Any], grouped: bool) -> None:
    cluster = {"nodes": 3} if "pp" in par else {}
    data = _cfg_data({"layers": 5, "first_dense_layers": 1, "moe_grouped_gemm": grouped})
    data["parallel"].update(par)
    data["cluster"].update(cluster)
    cfg = parse_workload_config(data)
    assert_same_graph(trace_workload(cfg), trace_whole(cfg))


def _routing(graph: TracedGraph, table: OpTable) -> list[str]:
    """The names of ``table``'s rows from the router's top-k to the first dispatch."""
    names = _names(graph, table)
    start = names.index("aten::topk") + 1
    return names[start : names.index("moe_dispatch") + 1]


def test_megatron_routing_work_and_the_host_wait_before_the_dispatch() -> None:
    """EP 4, 2 local experts, tp 1 (no all-reduce of the counts): the load-balancing loss
    (counts, fp32 cast and softmax of all scores, sum over tokens times counts, sum, scale,
    the tracker's division and addition), the dispatcher's split sizes (counts, per-rank sum
    and its copy to the host, the all-gather of the counts, the slice to the local experts,
    three sums each copied to the host and the per-expert counts for the regrouping), the
    permutation, then the host wait right before the all-to-all."""
    graph = trace_workload(_cfg({"layers": 1}))
    fwd, bwd = graph.roles[0].forward[0], graph.roles[0].backward[0]
    to_host = "aten::_to_copy (device to host)"
    assert _routing(graph, fwd) == [
        "aten::histc",
        "aten::_to_copy",
        "aten::_softmax",
        "aten::sum",
        "aten::mul",
        "aten::sum",
        "aten::mul",
        "aten::div",
        "aten::add_",
        "aten::histc",
        "aten::sum",
        to_host,
        "nccl:all_gather",
        "aten::clone",
        "aten::sum",
        to_host,
        "aten::sum",
        to_host,
        "aten::sum",
        to_host,
        to_host,
        "aten::index_select",
        HOST_WAIT,
        "moe_dispatch",
    ]
    # One wait a layer, in forward only: backward reuses the split sizes.
    assert _names(graph, fwd).count(HOST_WAIT) == 1
    assert HOST_WAIT not in _names(graph, bwd)
    # Backward: the loss's own gradient (ones times the scale) reaches the router's logits
    # through the fp32 softmax's backward, beside the top-k's.
    names = _names(graph, bwd)
    assert names.count("aten::ones") == 1
    assert names.count("aten::_softmax_backward_data") == 2


def test_routing_work_follows_the_load_balancing_and_the_capacity() -> None:
    plain = trace_workload(_cfg({"layers": 1, "load_balancing": "none"}))
    fwd = _routing(plain, plain.roles[0].forward[0])
    assert fwd[0] == "aten::histc" and fwd.count("aten::_softmax") == 0  # the dispatcher's
    assert "aten::ones" not in _names(plain, plain.roles[0].backward[0])
    # With a capacity factor the host waits before the permutation (Megatron-Core's
    # "before_permutation_1"), not before the all-to-all.
    capped = trace_workload(_cfg({"layers": 1, "capacity_factor": 1.5}))
    assert _routing(capped, capped.roles[0].forward[0])[-3:] == [
        HOST_WAIT,
        "aten::index_select",
        "moe_dispatch",
    ]
    # The all-gather dispatcher waits for its tokens per expert before the local permutation.
    gathered = trace_workload(_cfg({"layers": 1, "dispatcher": "allgather"}))
    names = _names(gathered, gathered.roles[0].forward[0])
    at = names.index(HOST_WAIT)
    assert names[at - 2 : at + 2] == [
        "aten::histc",
        "aten::_to_copy (device to host)",
        HOST_WAIT,
        "aten::index_select",
    ]
