"""The built-in GPT's layers as Megatron-LM runs them: the vocab-parallel cross entropy byte by
byte, and a sequence-parallel linear's collectives."""

from __future__ import annotations

import pytest

from tests.conftest import TORCH_MISSING

pytest.importorskip("torch", reason=TORCH_MISSING)

import torch

from echo_view.model.graph import OpClass, OpTable
from echo_view.model.strings import StringTable
from echo_view.sim.tp_overlap import WGRAD_GATHER
from echo_view.tracing.layers import (
    ColumnParallelLinear,
    RowParallelLinear,
    VocabParallelCrossEntropy,
)
from echo_view.tracing.recorder import Fills, Recorder

S, B, V, TP = 16, 2, 1000, 2  # sequence, micro-batch, this rank's vocabulary slice, tp
T = S * B  # tokens
LOGITS = T * V * 4  # the fp32 logits, bytes


def _trace() -> tuple[Recorder, OpTable, OpTable]:
    rec = Recorder(StringTable())
    with rec:
        logits = torch.empty((S, B, V), device="meta", dtype=torch.bfloat16, requires_grad=True)
        target = torch.zeros((S, B), device="meta", dtype=torch.long)
        rec.begin()
        loss = VocabParallelCrossEntropy(rec, TP)(logits, target)
        forward = rec.end()
        rec.begin()
        loss.backward()
        backward = rec.end()
    return rec, forward, backward


def _rows(rec: Recorder, table: OpTable) -> list[tuple[str, int]]:
    return [(rec.strings[int(n)], int(b)) for n, b in zip(table.name, table.bytes, strict=True)]


def test_forward_runs_in_place_over_the_logits_and_keeps_the_softmax() -> None:
    rec, forward, _ = _trace()
    big = [(name, b) for name, b in _rows(rec, forward) if b >= LOGITS // 2]
    assert big == [
        ("aten::_to_copy", T * V * (2 + 4)),  # bf16 logits to fp32
        ("aten::max", LOGITS + T * (4 + 8)),  # max and its index per token
        ("aten::sub_", 2 * LOGITS + T * 4),  # minus the max, in place
        ("aten::exp", 2 * LOGITS),  # exp(out=logits)
        ("aten::sum", LOGITS + T * 4),
        ("aten::div_", 2 * LOGITS + T * 4),  # the softmax saved for backward
    ]
    # Max, target logit and sum of exponentials all-reduced over tp, in place.
    colls = [int(b) for b in forward.coll_bytes[forward.coll_kind >= 0]]
    assert colls == [T * 4] * 3


def test_backward_is_one_in_place_pass_over_the_saved_softmax() -> None:
    rec, _, backward = _trace()
    rows = _rows(rec, backward)
    assert [r for r in rows if r[1] >= LOGITS // 2] == [
        ("aten::mul_", 2 * LOGITS + T * 4),  # softmax times the loss gradient, in place
        ("aten::_to_copy", T * V * (4 + 2)),  # the fp32 gradient back to bf16 (the cast's)
    ]
    # The rest touches one element per token: the mean's gradient, the target entries less
    # one (read, subtract, write back at the indices) and their operands.
    idx = 2 * T * 8  # row and target indices
    small = {
        "aten::ones_like": 4 + 4,  # the fp32 loss's shape read, the 1 written
        "aten::div": 2 * T * 4,  # the 1 expanded over the tokens, divided by T
        "aten::arange": T * 8,
        "aten::index": idx + 2 * T * 4,
        "aten::_to_copy": T * (1 + 4),
        "aten::rsub": 2 * T * 4,
        "aten::sub_": 3 * T * 4,
        "aten::index_put_": idx + T * 4 + T * 4,
    }
    assert [r for r in rows if r[1] < LOGITS // 2] == list(small.items())
    assert int(backward.bytes.sum()) == 2 * LOGITS + T * 4 + T * V * 6 + sum(small.values())


H, OUT = 64, 96  # a column-parallel linear's input and (whole) output features


def _linear_passes(
    sp: bool,
    tp: int,
    fp8: str | None = None,
    fills: Fills | None = None,
    row: bool = False,
    te: bool = True,
) -> tuple[Recorder, OpTable, OpTable]:
    """The forward and backward passes of one column-parallel (``row``: row-parallel, no
    bias) linear on ``[S / tp, B, H]`` (sequence parallel) or ``[S, B, H]`` bf16 input."""
    rec = Recorder(StringTable(), fills)
    with rec:
        rows = S // tp if sp else S
        x = torch.empty((rows, B, H), device="meta", dtype=torch.bfloat16, requires_grad=True)
        layer: torch.nn.Module
        if row:
            layer = RowParallelLinear(rec, H * tp, OUT, tp, sp, torch.bfloat16, bias=False)
        else:
            layer = ColumnParallelLinear(rec, H, OUT, tp, sp, torch.bfloat16, fp8=fp8, te=te)
        rec.begin()
        y = layer(x)
        forward = rec.end()
        grad = torch.empty_like(y)
        rec.begin()
        y.backward(grad)
        backward = rec.end()
    return rec, forward, backward


def _linear_backward(sp: bool, tp: int, fp8: str | None = None) -> tuple[Recorder, OpTable]:
    rec, _, backward = _linear_passes(sp, tp, fp8)
    return rec, backward


def _collectives(rec: Recorder, table: OpTable) -> list[tuple[str, int]]:
    return [
        (rec.strings[int(table.name[i])], int(table.coll_bytes[i]))
        for i in range(len(table))
        if table.op_class[i] == OpClass.COLLECTIVE
    ]


def test_a_sequence_parallel_linear_gathers_its_input_again_before_its_backward_gemms() -> None:
    tp = 4
    rec, backward = _linear_backward(sp=True, tp=tp)
    gathered = S * B * H * 2  # the whole sequence's bf16 input, what each rank receives
    assert _collectives(rec, backward) == [
        (WGRAD_GATHER, gathered),  # for the weight gradient
        ("nccl:reduce_scatter", gathered),  # the input gradient, back to sequence shards
    ]
    classes = backward.op_class.tolist()
    regather = classes.index(OpClass.COLLECTIVE)
    gemms = [i for i, c in enumerate(classes) if c == OpClass.GEMM]
    assert len(gemms) == 2 and regather < gemms[0]  # launched before both GEMMs


def test_fp8_linears_gather_the_fp8_input_and_others_gather_nothing_again() -> None:
    rec, backward = _linear_backward(sp=True, tp=2, fp8="delayed")
    assert (WGRAD_GATHER, S * B * H) in _collectives(rec, backward)  # 1 byte per element
    for sp, tp in ((False, 4), (True, 1)):
        rec, backward = _linear_backward(sp=sp, tp=tp)
        assert WGRAD_GATHER not in [name for name, _ in _collectives(rec, backward)]


def _names(rec: Recorder, table: OpTable) -> list[str]:
    return [rec.strings[int(n)] for n in table.name]


def test_a_tensor_parallel_all_reduce_runs_in_place() -> None:
    # Megatron's _reduce all-reduces the tensor itself: no copy of it is a kernel.
    rec, forward, _ = _linear_passes(sp=False, tp=2, row=True)
    assert _names(rec, forward) == ["aten::mm", "nccl:all_reduce"]
    rec, _, backward = _linear_passes(sp=False, tp=2)
    names = _names(rec, backward)
    assert "nccl:all_reduce" in names and "aten::clone" not in names


FILL = "aten::fill_ (uninitialized)"


def _fills(rec: Recorder, table: OpTable) -> list[tuple[str, int]]:
    """Each fill with the op it comes before, and its bytes."""
    names = _names(rec, table)
    return [(names[i + 1], int(table.bytes[i])) for i, n in enumerate(names) if n == FILL]


def test_a_transformer_engine_linear_fills_each_buffer_it_allocates() -> None:
    t = S * B
    out, dx, dw, db = t * OUT * 2, t * H * 2, OUT * H * 2, OUT * 2  # bf16 bytes
    rec, forward, backward = _linear_passes(sp=False, tp=1, fills=Fills(te=True))
    assert _fills(rec, forward) == [("aten::addmm", out)]
    assert _fills(rec, backward) == [("aten::mm", dx), ("aten::mm", dw), ("aten::sum", db)]
    # The weight gradient accumulating into main_grad allocates nothing.
    rec, _, backward = _linear_passes(sp=False, tp=1, fills=Fills(te=True, wgrad_fused=True))
    assert _fills(rec, backward) == [("aten::mm", dx), ("aten::sum", db)]
    # Megatron's own layers run PyTorch's GEMMs, whose outputs are not filled; nor is a
    # Megatron layer's under Transformer Engine (the output layer).
    for fills, te in ((Fills(te=False), True), (Fills(te=True), False)):
        rec, forward, backward = _linear_passes(sp=False, tp=1, fills=fills, te=te)
        assert _fills(rec, forward) == _fills(rec, backward) == []
    # Without deterministic algorithms the ops are the same, none filled.
    rec, forward, backward = _linear_passes(sp=False, tp=1)
    assert FILL not in _names(rec, forward) + _names(rec, backward)


def test_a_gathered_input_is_a_filled_buffer() -> None:
    # Sequence parallel: Megatron's torch.empty for the all-gather's output, [S, B, H].
    rec, forward, _ = _linear_passes(sp=True, tp=2, fills=Fills(te=False))
    assert _fills(rec, forward) == [("nccl:all_gather", S * B * H * 2)]


def _core_attention(masking: str, batch: int) -> list[str]:
    """The ops of unfused core attention on q, k, v split from one QKV output, as the
    built-in layer hands them over (``[b, heads, s, d]`` views): Megatron-Core's layout (each
    head's q, k and v side by side), or Megatron-LM of 2019's for ``multiply`` (all queries,
    then all keys, then all values)."""
    from echo_view.tracing.attention import unfused_attention

    heads, d = 4, 16
    rec = Recorder(StringTable())
    with rec:
        if masking == "multiply":
            qkv = torch.empty((S, batch, 3 * heads * d), device="meta", dtype=torch.bfloat16)
            parts = [x.reshape(S, batch, heads, d) for x in qkv.split(heads * d, dim=-1)]
        else:
            qkv = torch.empty((S, batch, heads, 3 * d), device="meta", dtype=torch.bfloat16)
            parts = list(qkv.split(d, dim=-1))
        q, k, v = (x.permute(1, 2, 0, 3) for x in parts)
        rec.begin()
        unfused_attention(q, k, v, 0.0, masking, rec)
        table = rec.end()
    return _names(rec, table)


def test_unfused_attention_multiplies_views_of_the_qkv_output() -> None:
    # Megatron-Core's layout: q, k and v go into the batched GEMMs as strided views.
    for batch in (1, 4):
        assert _core_attention("fused", batch) == ["aten::baddbmm", "aten::_softmax", "aten::bmm"]
    # Megatron-LM of 2019's torch.matmul on the permuted tensors copies each one first.
    assert _core_attention("multiply", 4).count("aten::clone") == 3
