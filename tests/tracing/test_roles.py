"""Ex-situ tracing on the meta device: op counts, FLOPs against the closed-form count, and the
collectives a Megatron layout implies."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest

from echo_view.model.config_parse import parse_workload_config
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


@pytest.mark.parametrize("kv_heads", [1, 2, 4, 8])
def test_fewer_kv_heads_than_tp_ranks_keep_one_each(kv_heads: int) -> None:
    # Multi-query and grouped-query attention with kv_heads < tp (which the config accepts
    # when tp divides by kv_heads) failed to trace: the QKV projection split the model's K and
    # V heads over tp ranks, so a rank held a fraction of one. Each rank keeps one KV head,
    # replicated on the tp / kv_heads ranks that share it.
    h, s, b, tp, heads = 1024, 512, 2, 4, 16
    g = trace_workload(_cfg(model={"kv_heads": kv_heads}, parallel={"pp": 1, "dp": 4}))
    fwd = g.role_for_stage(0).forward[0]
    gemm = fwd.flops[fwd.op_class == OpClass.GEMM]
    d = h // heads
    kv_local = max(kv_heads // tp, 1)
    qkv = 2.0 * b * s * h * (heads // tp + 2 * kv_local) * d
    assert np.isclose(gemm, qkv, rtol=2e-3).sum() == 8  # one QKV projection per layer
    attn = fwd.flops[fwd.op_class == OpClass.ATTENTION].sum()
    assert attn == pytest.approx(8 * 4.0 * b * s * s * h * 0.5 / tp, rel=1e-9)


def test_interleaved_uneven_chunks_hold_their_layers() -> None:
    """6 layers on pp 2, vp 2 with the embedding and the loss counted as layers: 8 slots, 2 per
    chunk, so stage 0 holds (1, 2) layers and stage 1 (2, 1). Each chunk's FLOPs are its
    layers' (the output layer on global chunk 3 only)."""
    counted = {
        "virtual_stages": 2,
        "account_for_embedding_in_pipeline_split": True,
        "account_for_loss_in_pipeline_split": True,
    }
    g = trace_workload(_cfg(model={"layers": 6}, parallel=counted))
    h, s, b, tp, v = 1024, 512, 2, 4, 32000
    attention = 4.0 * b * s * s * h * 0.5 / tp
    output_layer = 2.0 * s * b * h * (v // tp)
    for stage, layers in ((0, (1, 2)), (1, (2, 1))):
        role = g.role_for_stage(stage)
        for chunk, n in enumerate(layers):
            fwd = role.forward[chunk]
            attn = fwd.flops[fwd.op_class == OpClass.ATTENTION].sum()
            assert attn == pytest.approx(n * attention, rel=1e-9), (stage, chunk)
            gemm = fwd.flops[fwd.op_class == OpClass.GEMM].sum()
            per_layer = _layer_fwd_flops(h, s, b, tp, causal_attention=True) - attention
            last = stage == 1 and chunk == 1
            expected = n * per_layer + (output_layer if last else 0.0)
            assert gemm == pytest.approx(expected, rel=2e-3), (stage, chunk)
    assert g.meta["layers_per_chunk"] == {"0": [1, 2], "1": [2, 1]}


def _matmul(t: Any) -> float:
    return float(t.flops[np.isin(t.op_class, [OpClass.GEMM, OpClass.ATTENTION])].sum())


@pytest.mark.parametrize("dropout", [0.1, 0.0])
def test_backward_is_twice_forward_and_full_recompute_adds_a_forward(dropout: float) -> None:
    # Without dropout nothing saves the layer's last GEMM's output; it is recomputed anyway, as
    # Megatron-LM's reentrant checkpoint does (PyTorch's early stop would skip it).
    model = {"hidden_dropout": dropout}
    base = trace_workload(_cfg(model=model)).role_for_stage(0)
    full = trace_workload(_cfg(model=model, parallel={"recompute": "full"})).role_for_stage(0)
    fwd, bwd = _matmul(base.forward[0]), _matmul(base.backward[0])
    assert bwd / fwd == pytest.approx(2.0, rel=0.08)  # flash bwd is 2.5x its fwd
    assert _matmul(full.backward[0]) - bwd == pytest.approx(fwd, rel=0.02)


def test_selective_recompute_reruns_the_whole_core_attention() -> None:
    model = {"attention": "unfused", "attention_dropout": 0.0}
    base = trace_workload(_cfg(model=model)).role_for_stage(0)
    sel = trace_workload(_cfg(model=model, parallel={"recompute": "selective"}))
    role = sel.role_for_stage(0)
    names = [sel.strings[int(i)] for i in role.backward[0].name]
    # Per layer: QK^T and PV again (the last product too, though nothing saves its output),
    # then the backward's four batched products.
    assert names.count("aten::baddbmm") == 4 and names.count("aten::bmm") == 4 * (1 + 4)
    assert _matmul(role.backward[0]) > _matmul(base.backward[0])


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


def _names(graph: TracedGraph, table: Any) -> list[str]:
    return [graph.strings[int(n)] for n in table.name]


def _rows(graph: TracedGraph, table: Any, name: str) -> list[int]:
    return [i for i, n in enumerate(_names(graph, table)) if n == name]


def test_fp8_runs_the_layer_gemms_in_fp8_with_their_casts() -> None:
    h, s, b, tp, layers = 1024, 512, 2, 4, 8
    graph = trace_workload(
        _cfg(precision={"dtype": "fp8", "fp8_recipe": "tensorwise"}, parallel={"pp": 1, "dp": 4})
    )
    role = graph.roles[0]
    fwd, bwd, opt = role.forward[0], role.backward[0], role.optimizer
    fp8 = graph.strings.intern("fp8")
    gemm = fwd.op_class == OpClass.GEMM
    # Four linear layers per layer run in fp8; the output layer's GEMM stays bf16.
    assert int((gemm & (fwd.dtype == fp8)).sum()) == 4 * layers
    assert int((gemm & (fwd.dtype != fp8)).sum()) == 1
    # Backward: input- and weight-gradient GEMMs of the same four layers.
    assert int(((bwd.op_class == OpClass.GEMM) & (bwd.dtype == fp8)).sum()) == 8 * layers
    # One cast per GEMM input (tensorwise: after an amax pass); the QKV input is the
    # layer's [s, b, h] activation: the cast reads 2n bytes and writes the fp8 copy and its
    # transpose (2n), the amax reads 2n.
    casts = _rows(graph, fwd, "te::cast_transpose (input)")
    amaxes = _rows(graph, fwd, "te::amax (input)")
    assert len(casts) == len(amaxes) == 4 * layers
    n = s * b * h
    assert int(fwd.bytes[casts[0]]) == 4 * n
    assert int(fwd.bytes[amaxes[0]]) == 2 * n
    assert len(_rows(graph, bwd, "te::cast_transpose (grad output)")) == 4 * layers
    # Weights once per step: QKV's shard is 3h/tp x h elements.
    weights = _rows(graph, opt, "te::cast_transpose (weight)")
    assert len(weights) == 4 * layers
    assert int(opt.bytes[weights[0]]) == 4 * (3 * h // tp) * h
    # Same FLOPs as bf16: FP8 changes the rate, not the work.
    bf16 = trace_workload(_cfg(parallel={"pp": 1, "dp": 4})).roles[0].forward[0]
    assert float(fwd.flops[gemm].sum()) == float(bf16.flops[bf16.op_class == OpClass.GEMM].sum())


def test_delayed_and_blockwise_recipes() -> None:
    n = 512 * 2 * 1024
    delayed = trace_workload(
        _cfg(precision={"dtype": "fp8"}, parallel={"pp": 1, "dp": 4, "sequence_parallel": True})
    )
    fwd = delayed.roles[0].forward[0]
    assert not _rows(delayed, fwd, "te::amax (input)")
    assert len(_rows(delayed, fwd, "te::amax_and_scale_update")) == 1
    # Sequence parallel: QKV's input is cast on the local shard (s/tp tokens, 4 bytes per
    # element) and all-gathered in FP8: s * b * h bytes, one per element.
    cast = _rows(delayed, fwd, "te::cast_transpose (input)")[0]
    assert int(fwd.bytes[cast]) == 4 * n // 4
    ag = [c for c in _colls(delayed, fwd) if c[0] == "all_gather"]
    assert ag[0] == ("all_gather", n, "tp")
    block = trace_workload(
        _cfg(precision={"dtype": "fp8", "fp8_recipe": "blockwise"}, parallel={"pp": 1, "dp": 4})
    )
    bfwd = block.roles[0].forward[0]
    cast = _rows(block, bfwd, "te::cast_transpose (input)")[0]
    # fp32 scale per 1x128 tile, for the copy and its transpose
    assert int(bfwd.bytes[cast]) == 4 * n + 2 * 4 * (n // 128)


def test_llama_layers_swiglu_rmsnorm_rope_and_untied_output() -> None:
    h, s, b, tp, ffn, layers, vocab = 1024, 512, 2, 4, 2816, 8, 32000
    model = {
        "activation": "swiglu",
        "normalization": "rmsnorm",
        "position": "rope",
        "ffn_hidden": ffn,
        "tie_embeddings": False,
    }
    graph = trace_workload(_cfg(model=model, parallel={"pp": 1, "dp": 4}))
    role = graph.roles[0]
    fwd, bwd = role.forward[0], role.backward[0]
    gemm = fwd.flops[fwd.op_class == OpClass.GEMM]
    # The MLP: gate+up (2 * ffn outputs, plus the bias added in the same addmm) and down,
    # 3 * 2 * tokens * h * ffn / tp matrix FLOPs in all.
    tokens = s * b
    assert 2.0 * tokens * h * (2 * ffn // tp) + tokens * (2 * ffn // tp) in gemm.tolist()
    assert 2.0 * tokens * (ffn // tp) * h in gemm.tolist()
    names = _names(graph, fwd)
    assert names.count("echo_view::rms_norm") == 2 * layers + 1  # + the final norm
    assert names.count("echo_view::rope") == 2 * layers  # queries and keys
    assert names.count("echo_view::swiglu") == layers
    assert "aten::native_layer_norm" not in names
    assert _names(graph, bwd).count("echo_view::rope_bwd") == 2 * layers
    # No position embedding: the embedding's parameters are the word embedding alone.
    per_layer = (
        h * (3 * h) // tp
        + 3 * h // tp  # QKV weight and bias
        + h * h // tp
        + h  # projection
        + h * 2 * ffn // tp
        + 2 * ffn // tp  # gate and up
        + ffn * h // tp
        + h  # down
        + 2 * h  # two RMSNorm scales
    )
    assert role.params == layers * per_layer + 2 * (vocab // tp) * h + h


def test_tied_output_layer_shares_the_embedding_with_one_stage() -> None:
    untied = trace_workload(_cfg(model={"tie_embeddings": False}, parallel={"pp": 1, "dp": 4}))
    tied = trace_workload(_cfg(parallel={"pp": 1, "dp": 4}))
    assert untied.roles[0].params - tied.roles[0].params == (32000 // 4) * 1024
    # With pp > 1 the last stage keeps its copy: the same ops either way.
    a = trace_workload(_cfg(model={"tie_embeddings": False}))
    b = trace_workload(_cfg())
    assert [r.params for r in a.roles] == [r.params for r in b.roles]


#: A small GPT on one tensor-parallel rank for the PyTorch-native keys: h, s, b, vocab.
NATIVE = {"hidden": 256, "seq_len": 128, "micro": 2, "vocab": 1000}


def _native(**keys: dict[str, Any]) -> TracedGraph:
    """The small GPT (one layer, data parallel over 2) with ``keys`` per section set."""
    data: dict[str, Any] = {
        "model": {"kind": "gpt", "layers": 1, "hidden": 256, "heads": 4, "seq_len": 128},
        "parallel": {"tp": 1, "pp": 1, "dp": 2},
        "batch": {"global": 4, "micro": 2},
        "cluster": {"gpu": "H100", "gpus_per_node": 2, "nodes": 1},
        "precision": {"dtype": "bf16"},
    }
    data["model"]["vocab"] = NATIVE["vocab"]
    for section, values in keys.items():
        data[section] = {**data.get(section, {}), **values}
    return trace_workload(parse_workload_config(data))


def _bytes(graph: TracedGraph, table: Any, name: str, dtype: str | None = None) -> int:
    """Bytes of the rows of op ``name`` (and ``dtype``) in ``table``."""
    names = np.array([graph.strings[int(i)] for i in table.name])
    dtypes = np.array([graph.strings[int(i)] if i >= 0 else "" for i in table.dtype])
    rows = (names == name) & ((dtypes == dtype) if dtype is not None else True)
    return int(table.bytes[rows].sum())


def _linear_weights(h: int, vocab: int) -> int:
    """Elements of the linear layers' weights and biases: QKV, projection, FC1, FC2 (4h) and
    the output layer (the tied word embedding, no bias)."""
    return (3 * h * h + 3 * h) + (h * h + h) + (4 * h * h + 4 * h) + (4 * h * h + h) + vocab * h


def test_autocast_casts_every_linear_operand_in_fp32_to_bf16() -> None:
    """fp32 parameters; in forward each weight and bias of a linear layer, and the three fp32
    inputs (the LayerNorms' outputs before QKV, FC1 and the output layer), are copied to
    bf16: 4 bytes read and 2 written per element; no copy of fp32 main parameters after the
    step. Without autocast (bf16 parameters) there is no such cast."""
    h, s, b, v = NATIVE["hidden"], NATIVE["seq_len"], NATIVE["micro"], NATIVE["vocab"]
    graph = _native(precision={"autocast": True})
    role = graph.roles[0]
    casts = _bytes(graph, role.forward[0], "aten::_to_copy", "bf16")
    assert casts == 6 * (_linear_weights(h, v) + 3 * s * b * h)
    assert _bytes(graph, role.optimizer, "copy_main_params") == 0
    plain = _native()
    assert _bytes(plain, plain.roles[0].forward[0], "aten::_to_copy", "bf16") == 0
    # The gradients of the same operands are copied back to fp32 (2 read, 4 written), beside
    # the loss's own fp32 copy (its mask of targets outside the vocabulary shard) both have.
    back = _bytes(graph, role.backward[0], "aten::_to_copy", "fp32")
    mask = _bytes(plain, plain.roles[0].backward[0], "aten::_to_copy", "fp32")
    assert mask == 5 * s * b
    assert back - mask == 6 * (_linear_weights(h, v) + 3 * s * b * h)
    assert _bytes(plain, plain.roles[0].optimizer, "copy_main_params") == 6 * role.params


def test_torch_ddp_copies_each_gradient_into_its_bucket_and_zeroes_nothing() -> None:
    """PyTorch DDP: one copy of every fp32 gradient into its bucket in the backward pass (4
    bytes read, 4 written per parameter), and no zeroing kernel in the optimizer."""
    autocast = {"autocast": True}
    graph = _native(precision=autocast, parallel={"ddp": "torch"})
    megatron = _native(precision=autocast)
    role, ref = graph.roles[0], megatron.roles[0]
    copies = _bytes(graph, role.backward[0], "aten::copy_", "fp32")
    assert copies - _bytes(megatron, ref.backward[0], "aten::copy_", "fp32") == 8 * role.params
    assert _bytes(graph, role.optimizer, "zero_grad") == 0
    assert _bytes(megatron, ref.optimizer, "zero_grad") == 4 * ref.params


def test_torch_clip_grad_norm_multiplies_every_gradient() -> None:
    """``clip_grad_norm_``'s foreach path: the gradient norms read every fp32 gradient once
    (plus their one-scalar result), the multiply reads and writes every gradient (plus the
    scalar coefficient); no clipping with ``clip_grad = 0``."""
    graph = _native(training={"clip_grad_norm": "torch"})
    opt, n = graph.roles[0].optimizer, graph.roles[0].params
    assert _bytes(graph, opt, "aten::_foreach_norm") == 4 * n + 4
    assert _bytes(graph, opt, "aten::_foreach_mul_") == 8 * n + 4
    assert _bytes(graph, opt, "grad_norm") == 0
    off = _native(training={"clip_grad_norm": "torch", "clip_grad": 0.0})
    names = {off.strings[int(i)] for i in off.roles[0].optimizer.name}
    assert names == {"fused_adam", "copy_main_params", "zero_grad"}


def test_torch_cross_entropy_is_log_softmax_and_nll_loss() -> None:
    """``F.cross_entropy`` on the fp32 logits: ``log_softmax`` reads and writes them (8 bytes
    per logit), ``nll_loss`` picks the targets; none of Megatron's in-place kernels."""
    s, b, v = NATIVE["seq_len"], NATIVE["micro"], NATIVE["vocab"]
    graph = _native(model={"cross_entropy": "torch"})
    fwd = graph.roles[0].forward[0]
    assert _bytes(graph, fwd, "aten::_log_softmax") == 8 * s * b * v
    names = {graph.strings[int(i)] for i in fwd.name}
    assert "aten::nll_loss_forward" in names and "aten::exp" not in names


def test_sequence_parallel_backward_gathers_each_column_parallel_input_again() -> None:
    g = trace_workload(_cfg(parallel={"sequence_parallel": True}))
    act = 512 * 2 * 1024 * 2
    role = g.role_for_stage(0)  # 4 layers: QKV and FC1 per layer
    table = role.backward[0]
    names = [g.strings[int(table.name[i])] for i in table.collective_rows()]
    assert names.count("nccl:all_gather:wgrad_input") == 2 * 4
    # Besides: the row-parallel linears' output gradients and the embedding's.
    assert _colls(g, table).count(("all_gather", act, "tp")) == 2 * 4 + 2 * 4 + 1


def _names(graph: TracedGraph, table: Any) -> list[str]:
    return [graph.strings[int(n)] for n in table.name]


def test_linear_biases_follow_add_bias_linear() -> None:
    # Stage 0 of 2 holds 4 layers. With biases (Megatron-LM's default) and the bias-dropout-add
    # unfused, the row-parallel projection and FC2 add theirs after the reduction (one add
    # each) and every linear's bias gradient is a sum over the tokens in backward: QKV,
    # projection, FC1, FC2.
    unfused = {"bias_dropout_fusion": False}
    on = trace_workload(_cfg(model=unfused))
    off = trace_workload(_cfg(model={**unfused, "add_bias_linear": False}))
    qkv = trace_workload(_cfg(model={**unfused, "add_bias_linear": False, "add_qkv_bias": True}))
    fwd = {k: _names(g, g.role_for_stage(0).forward[0]) for k, g in (("on", on), ("off", off))}
    assert fwd["on"].count("aten::add") - fwd["off"].count("aten::add") == 2 * 4
    sums = {
        k: _names(g, g.role_for_stage(0).backward[0]).count("aten::sum")
        for k, g in (("on", on), ("off", off), ("qkv", qkv))
    }
    assert sums["on"] - sums["off"] == 4 * 4 and sums["qkv"] - sums["off"] == 1 * 4
    # The products are the same; only the column-parallel ones lose the bias in the GEMM.
    assert _matmul(off.role_for_stage(0).forward[0]) == pytest.approx(
        _matmul(on.role_for_stage(0).forward[0]), rel=1e-3
    )


def _dropouts(graph: TracedGraph, table: Any) -> int:
    return [graph.strings[int(n)] for n in table.name].count("aten::native_dropout")


def test_dropout_is_one_fused_kernel_each_way_as_on_a_gpu() -> None:
    """PyTorch runs dropout on a GPU as ``native_dropout`` (reads the input, writes the output
    and a one-byte mask) and ``native_dropout_backward`` (reads the gradient and the mask,
    writes the input's gradient), not the CPU path's ``bernoulli_``, ``div_`` and ``mul``.
    The hidden dropouts on stage 1 (after attention and after the MLP of its 4 layers; tp 4
    without sequence parallelism: 512 x 2 tokens x hidden 1,024 bf16 = 1,048,576 elements):
    2 + 2 + 1 = 5 bytes per element each way (the bias-dropout-add unfused)."""
    g = trace_workload(_cfg(model={"bias_dropout_fusion": False}))
    fwd, bwd = g.role_for_stage(1).forward[0], g.role_for_stage(1).backward[0]
    names = {t: [g.strings[int(n)] for n in tab.name] for t, tab in (("f", fwd), ("b", bwd))}
    assert "aten::bernoulli_" not in names["f"]
    elems = 512 * 2 * 1024
    drop = [int(fwd.bytes[i]) for i, n in enumerate(names["f"]) if n == "aten::native_dropout"]
    back = [
        int(bwd.bytes[i]) for i, n in enumerate(names["b"]) if n == "aten::native_dropout_backward"
    ]
    assert drop.count(5 * elems) == 2 * 4 and back.count(5 * elems) == 2 * 4


def test_dropout_probabilities_decide_the_dropout_kernels() -> None:
    unfused = {"attention": "unfused", "bias_dropout_fusion": False}
    base = trace_workload(_cfg(model=unfused))
    # Per layer: after attention, after the MLP, and on the attention probabilities; the first
    # stage also drops out the embedding's output with the hidden dropout (Megatron-LM's
    # ``LanguageModelEmbedding.embedding_dropout``).
    assert _dropouts(base, base.role_for_stage(0).forward[0]) == 3 * 4 + 1
    assert _dropouts(base, base.role_for_stage(1).forward[0]) == 3 * 4
    g = trace_workload(_cfg(model={**unfused, "hidden_dropout": 0.0}))
    assert _dropouts(g, g.role_for_stage(0).forward[0]) == 1 * 4
    g = trace_workload(_cfg(model={**unfused, "hidden_dropout": 0, "attention_dropout": 0}))
    assert _dropouts(g, g.role_for_stage(0).forward[0]) == 0


def _op_bytes(graph: TracedGraph, table: Any, name: str) -> list[int]:
    return [int(table.bytes[i]) for i, n in enumerate(_names(graph, table)) if n == name]


def test_bias_dropout_add_is_one_kernel_forward_as_megatron_fuses_it() -> None:
    """Megatron-LM's ``bias_dropout_add_fused_train`` (``bias_dropout_fusion``, its default):
    per residual branch one forward kernel reads the branch output, the bias and the residual
    and writes the sum and a one-byte mask. Stage 1 (4 layers, two branches each; tp 4, no
    sequence parallelism: 512 x 2 tokens x hidden 1,024 = 1,048,576 bf16 elements per tensor):
    2 + 2 + 2 + 1 bytes per element plus the 2,048-byte bias, where the unfused ops move
    (2 + 2) + (2 + 2 + 1) + (2 + 2 + 2) = 15 bytes per element (plus the bias) in three kernels.
    Backward: the same dropout-backward kernel and bias-gradient sum either way."""
    elems, bias = 512 * 2 * 1024, 2 * 1024
    fused = trace_workload(_cfg())
    plain = trace_workload(_cfg(model={"bias_dropout_fusion": False}))
    f_fwd, p_fwd = fused.role_for_stage(1).forward[0], plain.role_for_stage(1).forward[0]
    bda = _op_bytes(fused, f_fwd, "echo_view::bias_dropout_add")
    assert bda == [7 * elems + bias] * (2 * 4)
    assert _op_bytes(fused, f_fwd, "aten::native_dropout") == []
    assert len(_op_bytes(plain, p_fwd, "aten::native_dropout")) == 2 * 4
    # Per branch the unfused path has two kernels more: the bias and the residual additions.
    assert len(f_fwd) == len(p_fwd) - 2 * 2 * 4
    # Per branch 15 - 7 = 8 bytes per element fewer (the bias is read either way).
    saved = sum(map(int, p_fwd.bytes)) - sum(map(int, f_fwd.bytes))
    assert saved == 2 * 4 * 8 * elems
    f_bwd, p_bwd = fused.role_for_stage(1).backward[0], plain.role_for_stage(1).backward[0]
    # The same ops backward (no zero-filled gradient for the mask either).
    assert sorted(_names(fused, f_bwd)) == sorted(_names(plain, p_bwd))
    assert sorted(map(int, f_bwd.bytes)) == sorted(map(int, p_bwd.bytes))
    assert len(_op_bytes(fused, f_bwd, "aten::native_dropout_backward")) == 2 * 4


def test_bias_dropout_add_without_bias_or_dropout_is_the_residual_addition() -> None:
    # Llama-style layers (no biases) without dropout: the fused function is an addition.
    model = {"add_bias_linear": False, "hidden_dropout": 0.0, "attention_dropout": 0.0}
    fused = trace_workload(_cfg(model=model))
    plain = trace_workload(_cfg(model={**model, "bias_dropout_fusion": False}))
    for stage in (0, 1):
        a, b = fused.role_for_stage(stage).forward[0], plain.role_for_stage(stage).forward[0]
        assert _names(fused, a) == _names(plain, b)
        assert list(map(int, a.bytes)) == list(map(int, b.bytes))


def test_masked_softmax_forms_trace_their_elementwise_kernels() -> None:
    """Unfused attention on stage 1 (4 layers; tp 4 leaves 4 of 16 heads, micro-batch 2,
    sequence 512, head dim 64): E = 2 x 4 x 512 x 512 bf16 scores per layer, S = 512 x 512 mask
    elements, Q = 8 x 512 x 64 x 2 bytes of q (or k).

    ``fused`` (Megatron's fused scale-mask-softmax) scales in ``baddbmm`` (2Q + 2E, plus 2E for
    its output buffer, which the count reads) and runs one softmax; backward, ``baddbmm``'s
    gradients are multiplied by the scale (2Q each, two per layer). ``multiply`` (Megatron-LM
    2019) runs ``bmm`` (2Q + 2E), then ``div`` (4E), ``mul`` by the mask and ``sub`` of
    ``10000 * (1 - mask)`` (4E + 2S each), with ``rsub`` and ``mul`` on the mask (4S each);
    backward the ``mul`` by the mask (4E + 2S) and the ``div`` (4E). Its QKV output in thirds
    makes ``torch.matmul`` copy q, k and v (2Q each) and two of their gradients back, where
    Megatron-Core's grouped layout hands views. ``masked_fill``: one ``masked_fill_`` forward
    and one ``masked_fill`` backward, 4E + S each (a bool mask)."""
    e, sq, q = 2 * 4 * 512 * 512, 512 * 512, 8 * 512 * 64 * 2
    traced = {
        form: trace_workload(_cfg(model={"attention": "unfused", "masked_softmax": form}))
        for form in ("fused", "multiply", "masked_fill")
    }

    def ops(form: str, phase: str) -> Counter[tuple[str, int]]:
        g = traced[form]
        table = getattr(g.role_for_stage(1), phase)[0]
        return Counter(zip(_names(g, table), map(int, table.bytes), strict=True))

    def per_layer(*items: tuple[str, int]) -> Counter[tuple[str, int]]:
        return Counter({item: 4 for item in items})  # 4 layers on stage 1

    fused_f, fused_b = ops("fused", "forward"), ops("fused", "backward")
    mult_f, mult_b = ops("multiply", "forward"), ops("multiply", "backward")
    copies = Counter({("aten::clone", 2 * q): 3 * 4})
    assert mult_f - fused_f == copies + per_layer(
        ("aten::bmm", 2 * q + 2 * e),
        ("aten::div", 4 * e),
        ("aten::mul", 4 * e + 2 * sq),
        ("aten::sub", 4 * e + 2 * sq),
        ("aten::rsub", 4 * sq),
        ("aten::mul", 4 * sq),
    )
    assert fused_f - mult_f == per_layer(("aten::baddbmm", 2 * q + 4 * e))
    grad_copies = Counter({("aten::clone", 2 * q): 2 * 4})
    assert mult_b - fused_b == grad_copies + per_layer(
        ("aten::mul", 4 * e + 2 * sq), ("aten::div", 4 * e)
    )
    assert fused_b - mult_b == Counter({("aten::mul", 2 * q): 2 * 4})
    fill_f, fill_b = ops("masked_fill", "forward"), ops("masked_fill", "backward")
    assert fill_f - fused_f == per_layer(("aten::masked_fill_", 4 * e + sq))
    assert fill_b - fused_b == per_layer(("aten::masked_fill", 4 * e + sq))
    assert not fused_f - fill_f and not fused_b - fill_b


def test_fp16_optimizer_copies_and_zeroes_per_tensor() -> None:
    """``master_copies = "per_tensor"`` (Megatron-LM of 2019's FP16_Optimizer): before the
    norm each fp16 gradient is copied into an fp32 one (2 read, 4 written per parameter) and
    divided by the loss scale (4 read, 4 written); the fp32 master and the fp16 model
    gradients are both zeroed (4 + 2 bytes); the param copy back is the 6 bytes it was."""
    graph = _native(training={"master_copies": "per_tensor"})
    plain = _native()
    opt, n = graph.roles[0].optimizer, graph.roles[0].params
    names = [graph.strings[int(i)] for i in opt.name]
    assert names[:3] == ["master_grads_copy", "master_grads_unscale", "grad_norm"]
    assert _bytes(graph, opt, "master_grads_copy") == 6 * n
    assert _bytes(graph, opt, "master_grads_unscale") == 8 * n
    assert _bytes(graph, opt, "zero_grad") == 6 * n
    assert _bytes(plain, plain.roles[0].optimizer, "zero_grad") == 4 * n
    assert _bytes(graph, opt, "copy_main_params") == 6 * n
    assert _bytes(plain, plain.roles[0].optimizer, "master_grads_copy") == 0
    # fp32 parameters under autocast have no 16-bit copies to make.
    autocast = _native(training={"master_copies": "per_tensor"}, precision={"autocast": True})
    assert _bytes(autocast, autocast.roles[0].optimizer, "master_grads_copy") == 0


def test_each_role_counts_its_parameter_tensors() -> None:
    """The graph's ``param_tensors`` per role: per GPT layer 12 tensors (the two LayerNorms'
    weights and biases, the QKV, projection, FC1 and FC2 weights and biases); the first stage
    adds the word and position embeddings, the last the final LayerNorm's two (its output
    layer is the tied word embedding: one more tensor on a last stage of its own). Layers are
    counted as the chunk cache repeats them (8 layers, 4 a stage)."""
    one = trace_workload(_cfg(parallel={"pp": 1, "dp": 4}))
    assert one.meta["param_tensors"] == {"0": 8 * 12 + 2 + 2}
    two = trace_workload(_cfg())  # pp 2
    assert two.meta["param_tensors"] == {"0": 4 * 12 + 2, "1": 4 * 12 + 2 + 1}
    # Gradient rows undercount them: a LayerNorm's weight and bias complete together.
    rows = sum(int((t.grad_bytes > 0).sum()) for t in one.roles[0].backward)
    assert rows < 8 * 12 + 4


def test_flattened_gradient_allreduce_copies_the_gradients_out_and_back() -> None:
    """``grad_allreduce = "flatten"`` (Megatron-LM of 2019's ``allreduce_params``): the 16-bit
    gradients copied into one flat tensor, divided in place and copied back, each pass
    reading and writing 2 bytes per parameter (bf16 here), before the rest of the optimizer."""
    graph = _native(training={"grad_allreduce": "flatten"})
    opt, n = graph.roles[0].optimizer, graph.roles[0].params
    names = [graph.strings[int(i)] for i in opt.name]
    assert names[:4] == ["ddp_flatten", "ddp_divide", "ddp_unflatten", "grad_norm"]
    for name in ("ddp_flatten", "ddp_divide", "ddp_unflatten"):
        assert _bytes(graph, opt, name, "bf16") == 4 * n
    assert _bytes(_native(), _native().roles[0].optimizer, "ddp_flatten") == 0
