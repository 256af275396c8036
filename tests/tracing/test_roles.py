"""Ex-situ tracing on the meta device: op counts, FLOPs against the closed-form count, and the
collectives a Megatron layout implies."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from echo_view.model.config import parse_workload_config
from echo_view.model.graph import AXES, OpClass, TracedGraph
from echo_view.model.kinds import CollectiveKind
from tests.conftest import TORCH_MISSING

pytest.importorskip("torch", reason=TORCH_MISSING)

from echo_view.tracing.roles import role_stages, trace_workload


def _cfg(**over: Any) -> Any:
    data: dict[str, Any] = {
        "model": {
            "kind": "gpt",
            "layers": 8,
            "hidden": 1024,
            "heads": 16,
            "seq_len": 512,
            "vocab": 32000,
        },
        "parallel": {"tp": 4, "pp": 2, "dp": 2},
        "batch": {"global": 8, "micro": 2},
        "cluster": {"gpu": "H100", "gpus_per_node": 8, "nodes": 2},
        "precision": {"dtype": "bf16"},
    }
    for section, values in over.items():
        data[section] = {**data[section], **values}
    return parse_workload_config(data)


def _layer_fwd_flops(h: int, s: int, b: int, tp: int, causal_attention: bool) -> float:
    # 24*b*s*h^2 for the four linear layers (QKV, proj, fc1, fc2 with ffn = 4h), plus
    # 4*b*s^2*h for QK^T and PV (halved when the causal mask skips the upper triangle).
    attn = 4.0 * b * s * s * h * (0.5 if causal_attention else 1.0)
    return (24.0 * b * s * h * h + attn) / tp


def _colls(graph: TracedGraph, table: Any) -> list[tuple[str, int, str]]:
    return [
        (
            CollectiveKind(int(table.coll_kind[i])).label,
            int(table.coll_bytes[i]),
            AXES[int(table.axis[i])],
        )
        for i in table.collective_rows()
    ]


def test_roles_follow_the_pipeline_rule() -> None:
    assert role_stages(1) == [(0,)]
    assert role_stages(2) == [(0,), (1,)]
    assert role_stages(5) == [(0,), (1, 2, 3), (4,)]


def test_gemm_flops_match_the_closed_form() -> None:
    cfg = _cfg()
    g = trace_workload(cfg)
    middle_free = g.role_for_stage(1)  # last stage: 4 layers + output layer + loss
    fwd = middle_free.forward[0]
    gemm = fwd.flops[fwd.op_class == OpClass.GEMM].sum()
    attn = fwd.flops[fwd.op_class == OpClass.ATTENTION].sum()
    h, s, b, tp, v = 1024, 512, 2, 4, 32000
    expected_layers = 4 * _layer_fwd_flops(h, s, b, tp, causal_attention=True)
    output_layer = 2.0 * s * b * h * (v // tp)
    # biases add one FLOP per output element; allow for them and nothing more.
    assert gemm + attn == pytest.approx(expected_layers + output_layer, rel=2e-3)


def test_backward_is_twice_forward_and_full_recompute_adds_a_forward() -> None:
    base = trace_workload(_cfg()).role_for_stage(0)
    full = trace_workload(_cfg(parallel={"recompute": "full"})).role_for_stage(0)

    def matmul(t: Any) -> float:
        return float(t.flops[np.isin(t.op_class, [OpClass.GEMM, OpClass.ATTENTION])].sum())

    fwd, bwd = matmul(base.forward[0]), matmul(base.backward[0])
    assert bwd / fwd == pytest.approx(2.0, rel=0.08)  # flash bwd is 2.5x its fwd
    assert matmul(full.backward[0]) - bwd == pytest.approx(fwd, rel=0.02)


def test_tensor_parallel_collectives() -> None:
    g = trace_workload(_cfg())
    s, b, h = 512, 2, 1024
    act = s * b * h * 2  # bf16 activation [s, b, h]
    first = g.role_for_stage(0)
    fwd = _colls(g, first.forward[0])
    # embedding all-reduce, then per layer: attention and MLP row-parallel all-reduces
    assert fwd == [("all_reduce", act, "tp")] * (1 + 2 * 4)
    bwd = _colls(g, first.backward[0])
    # per layer: the two column-parallel inputs' gradient all-reduces
    assert bwd == [("all_reduce", act, "tp")] * (2 * 4)
    assert first.params > 0 and int(first.backward[0].grad_bytes.sum()) == 4 * first.params


def test_sequence_parallel_swaps_all_reduce_for_rs_ag() -> None:
    g = trace_workload(_cfg(parallel={"sequence_parallel": True}))
    s, b, h = 512, 2, 1024
    act = s * b * h * 2
    fwd = _colls(g, g.role_for_stage(0).forward[0])
    assert fwd[0] == ("reduce_scatter", act, "tp")
    assert fwd[1:3] == [("all_gather", act, "tp"), ("reduce_scatter", act, "tp")]
    kinds = {k for k, _, _ in fwd}
    assert "all_reduce" not in kinds


def test_selective_recompute_reruns_only_core_attention() -> None:
    g = trace_workload(_cfg(parallel={"recompute": "selective"}))
    role = g.role_for_stage(0)
    names = [g.strings[int(i)] for i in role.backward[0].name]
    assert names.count("aten::baddbmm") == 4  # the recomputed QK^T, one per layer
    assert "echo_view::flash_attn" not in names


def test_optimizer_phase_uses_the_distributed_shard() -> None:
    plain = trace_workload(_cfg()).role_for_stage(0)
    dist = trace_workload(_cfg(parallel={"distributed_optimizer": True})).role_for_stage(0)
    assert dist.optimizer.bytes[1] * 2 == pytest.approx(plain.optimizer.bytes[1], rel=1e-6)


def test_context_parallel_halves_work_and_gathers_kv() -> None:
    """cp = 2: each rank holds half the sequence, so its linear layers do half the FLOPs and
    its attention half of the whole causal attention (its queries meet every key); per layer
    K and V are all-gathered over cp forward (both at once, the gathered size) and their
    gradients reduce-scattered backward."""
    one = trace_workload(_cfg(parallel={"dp": 2})).role_for_stage(0)
    two = trace_workload(_cfg(parallel={"dp": 1, "cp": 2})).role_for_stage(0)
    for cls in (OpClass.GEMM, OpClass.ATTENTION):
        f1 = one.forward[0].flops[one.forward[0].op_class == cls].sum()
        f2 = two.forward[0].flops[two.forward[0].op_class == cls].sum()
        assert f2 == pytest.approx(f1 / 2, rel=2e-3), cls
    g = trace_workload(_cfg(parallel={"dp": 1, "cp": 2}))
    fwd = [c for c in _colls(g, two.forward[0]) if c[2] == "cp"]
    bwd = [c for c in _colls(g, two.backward[0]) if c[2] == "cp"]
    # 4 layers; K and V of [b=2, kv_heads 16/4, s 512, d 64] in bf16, both, gathered x2.
    kv_full = 2 * (2 * 4 * 512 * 64 * 2)
    assert fwd == [("all_gather", kv_full, "cp")] * 4
    assert bwd == [("reduce_scatter", kv_full, "cp")] * 4


def test_context_parallel_needs_flash_attention() -> None:
    from echo_view.errors import ConfigError

    with pytest.raises(ConfigError, match="flash"):
        _cfg(parallel={"dp": 1, "cp": 2}, precision={"dtype": "fp32"})
