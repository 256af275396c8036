"""The built-in GPT's loss as Megatron-LM's vocab-parallel cross entropy runs it, byte by byte."""

from __future__ import annotations

import pytest

from tests.conftest import TORCH_MISSING

pytest.importorskip("torch", reason=TORCH_MISSING)

import torch

from echo_view.model.graph import OpTable
from echo_view.model.strings import StringTable
from echo_view.tracing.layers import VocabParallelCrossEntropy
from echo_view.tracing.recorder import Recorder

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
