"""Bytes the recorder counts per aten op, computed by hand: what a memory-bound kernel reads
plus what it writes."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from echo_view.model.strings import StringTable
from tests.conftest import TORCH_MISSING

pytest.importorskip("torch", reason=TORCH_MISSING)

import torch

from echo_view.tracing.recorder import Fills, Recorder

N = 1000  # elements of the fp32 test tensors: 4,000 bytes each
T = 4_000


def _meta(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.empty(shape, device="meta", dtype=dtype)


def _recorded(program: Callable[[], object], fills: Fills | None = None) -> list[tuple[str, int]]:
    """``(op name, bytes)`` of each kernel ``program`` dispatches."""
    rec = Recorder(StringTable(), fills)
    with rec:
        rec.begin()
        program()
        table = rec.end()
    return [(rec.strings[int(n)], int(b)) for n, b in zip(table.name, table.bytes, strict=True)]


def test_out_of_place_reads_inputs_and_writes_output() -> None:
    a, b = _meta(N), _meta(N)
    assert _recorded(lambda: a + b) == [("aten::add", 3 * T)]


def test_in_place_reads_and_writes_its_tensor() -> None:
    a, b = _meta(N), _meta(N)
    # a and b read, a written back.
    assert _recorded(lambda: a.add_(b)) == [("aten::add_", 3 * T)]
    # A scalar multiply: a read and written.
    assert _recorded(lambda: a.mul_(2.0)) == [("aten::mul_", 2 * T)]


def test_overwrites_write_once() -> None:
    a, b = _meta(N), _meta(N)
    assert _recorded(lambda: a.copy_(b)) == [("aten::copy_", 2 * T)]
    assert _recorded(lambda: a.zero_()) == [("aten::zero_", T)]
    assert _recorded(lambda: a.fill_(1.0)) == [("aten::fill_", T)]
    half = _meta(N, dtype=torch.bfloat16)
    # A conversion copy: fp32 read, bf16 written.
    assert _recorded(lambda: half.copy_(a)) == [("aten::copy_", T + 2 * N)]


def test_out_argument_is_written_once() -> None:
    a, out = _meta(N, 10), _meta(N)
    assert _recorded(lambda: torch.sum(a, dim=1, out=out)) == [("aten::sum", 10 * T + T)]


def test_foreach_in_place() -> None:
    xs, ys = [_meta(N), _meta(N)], [_meta(N), _meta(N)]
    # Two tensors scaled in place: each read and written.
    assert _recorded(lambda: torch._foreach_mul_(xs, 0.5)) == [("aten::_foreach_mul_", 4 * T)]
    # x += y over lists: x and y read, x written.
    assert _recorded(lambda: torch._foreach_add_(xs, ys)) == [("aten::_foreach_add_", 6 * T)]
    assert _recorded(lambda: torch._foreach_zero_(xs)) == [("aten::_foreach_zero_", 2 * T)]


def _adam(grad_scale: torch.Tensor | None) -> list[tuple[str, int]]:
    param, grad, exp_avg, exp_avg_sq = (_meta(N) for _ in range(4))
    step = _meta()  # fp32 scalar step counter: read, 4 bytes

    def run() -> None:
        torch._fused_adam_(
            [param], [grad], [exp_avg], [exp_avg_sq], [], [step],
            lr=1e-3, beta1=0.9, beta2=0.999, weight_decay=0.0, eps=1e-8,
            amsgrad=False, maximize=False, grad_scale=grad_scale,
        )  # fmt: skip

    return _recorded(run)


def test_fused_adam_moves_28_bytes_per_fp32_parameter() -> None:
    # Reads param, grad, exp_avg, exp_avg_sq (16 B); writes param, exp_avg, exp_avg_sq (12 B):
    # the kernel writes the gradient back only when it unscales it.
    assert _adam(None) == [("aten::_fused_adam_", 28 * N + 4)]
    scale = _meta()
    assert _adam(scale) == [("aten::_fused_adam_", 32 * N + 4 + 4)]


def test_indexed_ops_move_the_selected_elements() -> None:
    rows, vocab = 64, 512
    x = _meta(rows, vocab)
    rows_i = torch.arange(rows, device="meta")
    cols_i = torch.zeros(rows, dtype=torch.long, device="meta")
    values = _meta(rows)
    idx_bytes = 2 * rows * 8
    # x[rows, cols]: the indices read, one element per row read and written out.
    assert _recorded(lambda: x[rows_i, cols_i]) == [("aten::index", idx_bytes + 2 * rows * 4)]
    # gather along the vocabulary: the index read, 64 elements read and written.
    assert _recorded(lambda: torch.gather(x, 1, cols_i[:, None])) == [
        ("aten::gather", rows * 8 + 2 * rows * 4)
    ]
    # 128 rows picked from a table of 64 (each twice): the table read once, 128 rows written.
    table, twice = _meta(rows, 16), torch.zeros(2 * rows, dtype=torch.long, device="meta")
    assert _recorded(lambda: table.index_select(0, twice)) == [
        ("aten::index_select", 2 * rows * 8 + rows * 16 * 4 + 2 * rows * 16 * 4)
    ]
    # x[rows, cols] = values writes 64 elements; accumulating reads them first.
    for accumulate, touched in ((False, rows * 4), (True, 2 * rows * 4)):

        def put(acc: bool = accumulate) -> torch.Tensor:
            return x.index_put_((rows_i, cols_i), values, accumulate=acc)

        assert _recorded(put) == [("aten::index_put_", idx_bytes + rows * 4 + touched)]


FILL = "aten::fill_ (uninitialized)"


def test_deterministic_algorithms_fill_what_an_op_allocates() -> None:
    a, half = _meta(N), _meta(N, dtype=torch.bfloat16)
    det = Fills(te=True)
    # Dropout allocates its output and its mask (empty_like): two fills, then the kernel.
    dropout = _recorded(lambda: torch.native_dropout(half, 0.1, True), det)
    assert dropout == [(FILL, 2 * N), (FILL, N), ("aten::native_dropout", 2 * N + 2 * N + N)]
    # A copy into a new tensor: its buffer filled first.
    assert _recorded(lambda: a.clone(), det) == [(FILL, T), ("aten::clone", 2 * T)]
    # Structured kernels allocate without the fill; views and in-place ops allocate nothing.
    assert _recorded(lambda: (a + a, a.view(10, 100), a.mul_(2.0)), det) == [
        ("aten::add", 3 * T),
        ("aten::mul_", 2 * T),
    ]
    # No deterministic algorithms: no fills.
    assert _recorded(lambda: a.clone()) == [("aten::clone", 2 * T)]


def test_a_librarys_allocations_fill_where_the_tracer_marks_them() -> None:
    a = _meta(N)

    def program(rec: Recorder, te: bool) -> None:
        with rec.library(te=te):
            a.new_empty((N,))  # an explicit torch.empty: no kernel but its fill
            torch.exp(a)  # a kernel whose output the library allocates

    for fills, te, filled in (
        (Fills(te=True), True, True),
        (Fills(te=False), True, False),  # Transformer Engine's allocation, local layers
        (Fills(te=False), False, True),
        (None, False, False),
    ):
        rec = Recorder(StringTable(), fills)
        with rec:
            rec.begin()
            program(rec, te)
            table = rec.end()
        rows = [(rec.strings[int(n)], int(b)) for n, b in zip(table.name, table.bytes, strict=True)]
        expected = [(FILL, T), (FILL, T)] if filled else []
        assert rows == [*expected, ("aten::exp", 2 * T)]
