"""Chunks built by repeating a traced layer equal chunks traced whole, row for row."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest

from echo_view.model.config import WorkloadConfig
from echo_view.model.config_keys import tracing_key
from echo_view.model.config_parse import parse_workload_config
from echo_view.model.graph import OpTable
from echo_view.model.strings import StringTable
from tests.conftest import TORCH_MISSING
from tests.tracing.graph_equality import assert_same_graph

pytest.importorskip("torch", reason=TORCH_MISSING)

import echo_view.tracing.chunks as chunks
from echo_view.tracing.chunks import ChunkCache, block_start, copy_strings, repeat_index
from echo_view.tracing.roles import trace_whole, trace_workload

LLAMA = {
    "activation": "swiglu",
    "normalization": "rmsnorm",
    "position": "rope",
    "ffn_hidden": 688,
    "kv_heads": 2,
    "tie_embeddings": False,
}
#: Layouts of a 12-layer model: pipelines of 1, 2, 3 and 4 stages, interleaved, uneven first
#: and last stages (also interleaved, and with chunks of no layer), each recomputation, FP8
#: recipes, tied and untied output layers, a Llama-style layer with context parallelism, no
#: tensor parallelism.
LAYOUTS: dict[str, dict[str, dict[str, Any]]] = {
    "pp1 tied": {"parallel": {"pp": 1}},
    "pp1 untied": {"parallel": {"pp": 1}, "model": {"tie_embeddings": False}},
    "pp2 full recompute": {"parallel": {"pp": 2, "recompute": "full"}},
    "pp4 selective": {"parallel": {"pp": 4, "recompute": "selective"}},
    "pp2 vp2": {"parallel": {"pp": 2, "virtual_stages": 2}},
    "pp3 uneven": {"parallel": {"pp": 3, "first_stage_layers": 3, "last_stage_layers": 5}},
    "pp3 vp2 uneven": {
        "parallel": {"pp": 3, "virtual_stages": 2, "first_stage_layers": 2, "last_stage_layers": 4},
        "batch": {"global": 6},
    },
    # 14 slots on 2 stages of 7 chunks: the first chunk is the embedding alone, the last the
    # output layer and loss alone.
    "pp2 vp7 embedding and loss counted": {
        "parallel": {
            "pp": 2,
            "virtual_stages": 7,
            "account_for_embedding_in_pipeline_split": True,
            "account_for_loss_in_pipeline_split": True,
        }
    },
    "pp2 vp2 fp8 delayed": {
        "parallel": {"pp": 2, "virtual_stages": 2},
        "precision": {"dtype": "fp8", "fp8_recipe": "delayed"},
    },
    "pp1 fp8 tensorwise full": {
        "parallel": {"pp": 1, "recompute": "full"},
        "precision": {"dtype": "fp8", "fp8_recipe": "tensorwise"},
    },
    "pp4 fp8 blockwise": {
        "parallel": {"pp": 4},
        "precision": {"dtype": "fp8", "fp8_recipe": "blockwise"},
    },
    "llama pp2 cp2": {"parallel": {"pp": 2, "cp": 2}, "model": LLAMA},
    "tp1 pp3": {"parallel": {"tp": 1, "pp": 3, "sequence_parallel": False}},
    "pp1 autocast sequence parallel": {"parallel": {"pp": 1}, "precision": {"autocast": True}},
    # Autocast, PyTorch's DDP (a copy into its bucket per gradient), its cross entropy.
    "tp1 pytorch-native": {
        "parallel": {"tp": 1, "pp": 1, "sequence_parallel": False, "ddp": "torch"},
        "model": {"cross_entropy": "torch"},
        "precision": {"autocast": True},
    },
}


def _cfg(over: dict[str, dict[str, Any]]) -> WorkloadConfig:
    data: dict[str, Any] = {
        "model": {
            "kind": "gpt",
            "layers": 12,
            "hidden": 256,
            "heads": 8,
            "seq_len": 128,
            "vocab": 1000,
        },
        "parallel": {"tp": 2, "dp": 1, "sequence_parallel": True},
        "batch": {"global": 8, "micro": 2},
        "precision": {"dtype": "bf16"},
    }
    for section, values in over.items():
        data[section] = {**data.get(section, {}), **values}
    p = data["parallel"]
    gpus = p["tp"] * p["pp"] * p.get("cp", 1)
    data["cluster"] = {"gpu": "H100", "gpus_per_node": gpus, "nodes": 1}
    return parse_workload_config(data)


@pytest.fixture
def traced_layers(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The layer counts of the chunks the cache traces."""
    seen: list[int] = []
    real = chunks.trace_chunk

    def spy(strings: StringTable, cfg: WorkloadConfig, first: bool, last: bool, n: int) -> Any:
        seen.append(n)
        return real(strings, cfg, first, last, n)

    monkeypatch.setattr(chunks, "trace_chunk", spy)
    return seen


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_repeated_chunks_equal_whole_chunks(name: str, traced_layers: list[int]) -> None:
    cfg = _cfg(LAYOUTS[name])
    assert_same_graph(trace_workload(cfg), trace_whole(cfg))
    # Every chunk of three or more layers was built, not traced.
    assert traced_layers and max(traced_layers) <= 2


def test_one_cache_serves_every_layout_with_the_same_chunk_key(traced_layers: list[int]) -> None:
    cache = ChunkCache()
    trace_workload(_cfg({"parallel": {"pp": 2}}), cache)
    assert len(cache) == 2 and len(traced_layers) == 4  # first and last kinds, 1 and 2 layers
    # pp4 adds the middle kind; pp3 with uneven stages and pp2 with vp2 add nothing.
    for parallel in (
        {"pp": 4, "distributed_optimizer": True},
        {"pp": 3, "first_stage_layers": 3, "last_stage_layers": 5},
        {"pp": 2, "virtual_stages": 2},
    ):
        cfg = _cfg({"parallel": parallel})
        assert_same_graph(trace_workload(cfg, cache), trace_whole(cfg))
    assert len(cache) == 3 and len(traced_layers) == 6


def test_a_sequence_that_does_not_repeat_is_traced_whole(
    monkeypatch: pytest.MonkeyPatch, traced_layers: list[int]
) -> None:
    monkeypatch.setattr(chunks, "block_start", lambda one, two: None)
    cfg = _cfg({"parallel": {"pp": 2}})
    assert_same_graph(trace_workload(cfg), trace_whole(cfg))
    assert sorted(set(traced_layers)) == [1, 2, 6]


def test_block_start_finds_the_repeated_block() -> None:
    def seq(*xs: int) -> Any:
        return np.array(xs)

    # head 9, block (1, 2), tail 7
    one, two = seq(9, 1, 2, 7), seq(9, 1, 2, 1, 2, 7)
    assert block_start(one, two) == 1
    assert one[repeat_index(4, 1, 2, 3)].tolist() == [9, 1, 2, 1, 2, 1, 2, 7]
    # A block that could start at 0 or 1 (rotations): either repeats to the same sequence.
    one, two = seq(1, 2, 1), seq(1, 2, 1, 2, 1)
    p = block_start(one, two)
    assert p is not None and one[repeat_index(3, p, 2, 3)].tolist() == [1, 2, 1, 2, 1, 2, 1]
    # Rows compare whole: a two-column row differing in one column is another row.
    rows_one = np.array([[0, 0], [1, 5], [2, 0]])
    rows_two = np.array([[0, 0], [1, 5], [1, 6], [2, 0]])
    assert block_start(rows_one, rows_two) is None
    assert block_start(seq(1, 2, 3), seq(1, 2, 4, 3, 5)) is None  # no block
    assert block_start(seq(1, 2), seq(1)) is None  # shorter with more layers
    assert block_start(seq(), seq()) == 0 and block_start(seq(), seq(1)) is None


def test_copy_strings_numbers_strings_in_row_order() -> None:
    source = StringTable(["b", "a", "fp32", "", "nccl:all_reduce"])
    columns = {
        "name": [1, 4, 0],
        "op_class": [0, 9, 0],
        "flops": [1.0, 0.0, 2.0],
        "bytes": [8, 0, 8],
        "dtype": [2, -1, 2],
        "shapes": [3, -1, 3],
        "coll_kind": [-1, 0, -1],
        "coll_bytes": [0, 64, 0],
        "axis": [-1, 0, -1],
        "grad_bytes": [0, 0, 0],
    }
    table = OpTable(**{c: np.array(v) for c, v in columns.items()})
    target = StringTable(["x"])
    (out,) = copy_strings([table], source, target)
    assert target.strings == ("x", "a", "fp32", "", "nccl:all_reduce", "b")
    assert [target[i] for i in out.name] == ["a", "nccl:all_reduce", "b"]
    assert out.dtype.tolist() == [2, -1, 2] and out.shapes.tolist() == [3, -1, 3]
    assert out.coll_bytes.tolist() == [0, 64, 0]


def test_unfused_weight_gradients_are_added_to_fp32_main_grad() -> None:
    """``--no-gradient-accumulation-fusion``: per linear weight and micro-batch one
    ``main_grad.add_(grad)``: 4 bytes read + 4 written of fp32 main_grad, 2 read of the bf16
    gradient = 10 bytes per weight element. One tp2 layer of hidden 256, 8 heads, ffn 1024,
    vocab 1000 on one stage: qkv 3*256/2*256, proj 256*256/2, fc1 1024/2*256, fc2 256*1024/2,
    output layer 500*256 elements."""
    over: dict[str, dict[str, Any]] = {"parallel": {"pp": 1}}
    weights = [384 * 256, 256 * 128, 512 * 256, 256 * 512, 500 * 256]

    def adds(fusion: bool) -> list[int]:
        return _op_bytes(_cfg(over | {"training": {"gradient_accumulation_fusion": fusion}}))

    fused = adds(True)
    assert sorted(fused + [10 * w for w in weights]) == adds(False)


def _op_bytes(cfg: WorkloadConfig, op: str = "aten::add_") -> list[int]:
    """Bytes of each ``op`` of one micro-batch's backward of a first-and-last 1-layer chunk,
    sorted."""
    strings = StringTable()
    body = chunks.trace_chunk(strings, cfg, first=True, last=True, layers=1)
    names = [strings[int(i)] for i in body.backward.name]
    return sorted(int(b) for n, b in zip(names, body.backward.bytes, strict=True) if n == op)


def test_megatrons_ddp_hook_adds_every_gradient_autograd_produced() -> None:
    """With gradient-accumulation fusion the linear weights' GEMMs accumulate into
    ``main_grad``; every other gradient (norms, biases, embeddings) is added by the DDP hook,
    one ``main_grad.add_(grad)`` a tensor and micro-batch, 10 bytes per element (2 read of
    bf16, 4 read and 4 written of fp32). One untied tp2 layer of hidden 256, ffn 1024, vocab
    1000, sequence 128: word embedding 500 * 256, positions 128 * 256, two norms' weight and
    bias 256 each, QKV bias 3 * 256 / 2, projection bias 256, fc1 bias 1024 / 2, fc2 bias 256,
    the final norm's weight and bias 256 each."""
    cfg = _cfg({"parallel": {"pp": 1}, "model": {"tie_embeddings": False}})
    numels = [500 * 256, 128 * 256, 256, 256, 384, 256, 256, 256, 512, 256, 256, 256]
    assert _op_bytes(cfg) == sorted(10 * n for n in numels)


def test_no_main_grad_adds_without_megatrons_buffer() -> None:
    """PyTorch DDP copies into its buckets instead, and Megatron-LM of 2019 reduces a flat
    copy of the 16-bit gradients: neither adds to an fp32 main_grad."""
    flatten = {
        "parallel": {"pp": 1},
        "training": {"grad_allreduce": "flatten", "master_copies": "per_tensor"},
        "precision": {"dtype": "fp16"},
    }
    assert _op_bytes(_cfg(flatten)) == []


def test_fsdp_has_no_main_grad_adds_and_a_tracing_key_of_its_own() -> None:
    """FSDP accumulates into its own sharded gradients, not Megatron's fp32 main_grad: no DDP
    hook additions, so the same layout with the distributed optimizer (twelve additions,
    :func:`test_megatrons_ddp_hook_adds_every_gradient_autograd_produced`) must not share its
    graph."""
    over: dict[str, dict[str, Any]] = {
        "parallel": {"pp": 1, "distributed_optimizer": True},
        "model": {"tie_embeddings": False},
    }
    fsdp = _cfg(over | {"parallel": {**over["parallel"], "fsdp": "full_shard"}})
    distopt = _cfg(over)
    assert _op_bytes(fsdp) == [] and len(_op_bytes(distopt)) == 12
    assert tracing_key(fsdp) != tracing_key(distopt)


def test_deepspeeds_bf16_optimizer_casts_then_adds_every_gradient() -> None:
    """``grad_accumulation = "cast_add"`` (DeepSpeed's ``update_hp_grads``): per parameter
    tensor and micro-batch ``hp_grad.add_(lp.grad.to(fp32))``: a cast (2 bytes read, 4
    written) and an fp32 addition (4 + 4 read, 4 written) of every tensor, the linear weights
    included: 12 bytes per element for each add_, and 6 for each cast."""
    cfg = _cfg(
        {
            "parallel": {"pp": 1},
            "model": {"tie_embeddings": False},
            "training": {"grad_accumulation": "cast_add"},
        }
    )
    assert not cfg.training.gradient_accumulation_fusion  # (its GEMMs write 16-bit gradients)
    others = [500 * 256, 128 * 256, 256, 256, 384, 256, 256, 256, 512, 256, 256, 256]
    weights = [384 * 256, 256 * 128, 512 * 256, 256 * 512, 500 * 256]
    numels = others + weights
    assert _op_bytes(cfg) == sorted(12 * n for n in numels)
    # The casts beyond those of the same chunk without it (the loss's own).
    plain = _cfg({"parallel": {"pp": 1}, "model": {"tie_embeddings": False}})
    added = Counter(_op_bytes(cfg, "aten::_to_copy"))
    added.subtract(Counter(_op_bytes(plain, "aten::_to_copy")))
    assert sorted(added.elements()) == sorted(6 * n for n in numels)
    assert min(added.values()) >= 0
