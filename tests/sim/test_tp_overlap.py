"""Tensor-parallel communication overlap: the pipelined times against hand-computed values."""

from __future__ import annotations

import numpy as np

from echo_view.model.gpus import gpu_preset
from echo_view.model.graph import OpClass, OpTable
from echo_view.model.kinds import CollectiveKind
from echo_view.model.strings import StringTable
from echo_view.sim.kernel_cost import ComputeParams, op_times_ns
from echo_view.sim.tp_overlap import (
    nccl_beside_gemm_ns,
    overlap_linear_backward,
    overlap_tp_comm,
    pipeline_ns,
    ring_exchange_ns,
)
from tests.sim.op_tables import tp_table

AG, RS = int(CollectiveKind.ALL_GATHER), int(CollectiveKind.REDUCE_SCATTER)
H100 = gpu_preset("H100-SXM5-80GB")
PARAMS = ComputeParams(kernel_gap_ns=0, kernel_min_ns=0, gemm_half_flops=1e-9)


def test_ring_exchange_and_pipeline_formulas() -> None:
    # 4 ring steps: 3 transfers of 9/3 = 3 against GEMM chunks of 1, then the last chunk.
    assert ring_exchange_ns(1.0, 9.0, 4) == 3 * 3.0 + 1.0
    # GEMM-bound: transfers of 1 hide behind chunks of 5.
    assert ring_exchange_ns(5.0, 3.0, 4) == 3 * 5.0 + 5.0
    # 4 splits: first chunk, three overlapped steps, last reduce-scatter chunk.
    assert pipeline_ns(2.0, 1.0, 4) == 2.0 + 3 * 2.0 + 1.0


def _table(rows: list[tuple[int, float, int]]) -> OpTable:
    """Rows of (op class, flops, collective kind or -1); collectives on the tp axis."""
    return tp_table(StringTable(), [("op", *r) for r in rows], 1 << 24)


def _run(
    table: OpTable,
    dur: list[int],
    backward: bool,
    streamed: int = 0,
    regather: list[bool] | None = None,
) -> list[int]:
    """Overlap on tp = 4; every tensor-parallel collective streams in ``streamed`` ns."""

    def chunk_ns(j: int, n: int) -> float:
        sl = slice(j, j + 1)
        peak = np.array([H100.peak_flops["bf16"]])
        return float(
            op_times_ns(
                table.op_class[sl], table.flops[sl] / n, table.bytes[sl] // n, peak, H100, PARAMS
            )[0]
        )

    colls = np.flatnonzero(table.op_class == OpClass.COLLECTIVE).tolist()
    out = overlap_tp_comm(
        table,
        np.array(dur, dtype=np.int64),
        chunk_ns,
        {i: float(streamed) for i in colls},
        tp=4,
        sm_count=132,
        backward=backward,
        output_gemm_flops=frozenset({7.0}),
        regather=None if regather is None else np.array(regather),
    )
    return [int(x) for x in out]


def _gemm_ns(flops: float) -> int:
    """One bf16 GEMM's time on H100 under :data:`PARAMS` (the FLOP roofline)."""
    times = op_times_ns(
        np.array([0]),
        np.array([flops]),
        np.array([0]),
        np.array([H100.peak_flops["bf16"]]),
        H100,
        PARAMS,
    )
    return int(times[0])


def test_all_gather_before_a_large_gemm_exposes_only_the_first_chunk_time() -> None:
    # With no kernel overheads and a flat efficiency, a GEMM's quarter takes exactly 1/4 of it.
    flops = 4e12
    g = _gemm_ns(flops)
    c = 300_000  # streamed all-gather: 0.3 ms, each of the 3 ring steps 0.1 ms
    table = _table([(OpClass.COLLECTIVE, 0.0, AG), (OpClass.GEMM, flops, -1)])
    # The NCCL time of the call (1 ms here) plays no part: userbuffers make no NCCL call.
    out = _run(table, [1_000_000, g], backward=False, streamed=c)
    chunk = g / 4
    expected = 3 * max(chunk, c / 3) + chunk - g
    assert out[0] == max(round(expected), 0)
    assert out[1] == g  # the GEMM keeps its own time
    if chunk >= c / 3:  # GEMM-bound: the all-gather hides completely
        assert out[0] == 0
    # Communication-bound: 3 steps of 1 ms against chunks of g / 4: 3 ms + g/4 - g exposed.
    slow = _run(table, [1, g], backward=False, streamed=9_000_000)
    assert slow[0] == round(3 * 3_000_000 + chunk - g)


def test_forward_reduce_scatter_pipelines_on_fewer_sms_and_backward_runs_beside_wgrad() -> None:
    flops = 4e12
    g = _gemm_ns(flops)
    c = 2 * g  # the whole reduce-scatter streamed; each of the 4 pipeline chunks c / 4
    table = _table([(OpClass.GEMM, flops, -1), (OpClass.COLLECTIVE, 0.0, RS)])
    margin = 132 / (132 - 16)
    g4 = g / 4 * margin
    forward = _run(table, [g, 5 * g], backward=False, streamed=c)
    assert forward[1] == round(g4 + 3 * max(g4, c / 4) + c / 4) - g
    backward = _run(table, [g, 5 * g], backward=True, streamed=c)
    assert backward[1] == round(max(c, g * margin)) - g == c - g


def test_output_layer_and_lone_collectives_stay_exposed() -> None:
    table = _table(
        [
            (OpClass.COLLECTIVE, 0.0, AG),
            (OpClass.GEMM, 7.0, -1),  # the output layer's flops
            (OpClass.COLLECTIVE, 0.0, AG),
            (OpClass.EMBEDDING, 1.0, -1),  # no GEMM within reach
        ]
    )
    assert _run(table, [500, 10, 600, 10], backward=False) == [500, 10, 600, 10]


def test_linear_backward_collectives_through_nccl_run_beside_a_gemm() -> None:
    # A GEMM 1.25x slower while a 0.5 ms collective lasts: 1 ms + 0.5 ms * (1 - 1/1.25).
    assert nccl_beside_gemm_ns(1_000_000, 500_000, 1.25) == 1_000_000 + 100_000
    # The slowed GEMM done before the collective ends: the collective's time.
    assert nccl_beside_gemm_ns(100_000, 1_000_000, 1.25) == 1_000_000
    # No interference: only what the GEMM does not cover.
    assert nccl_beside_gemm_ns(1_000_000, 500_000, 1.0) == 1_000_000
    table = _table(
        [
            (OpClass.COLLECTIVE, 0.0, AG),  # the weight-gradient all-gather
            (OpClass.GEMM, 4e12, -1),  # input gradient
            (OpClass.GEMM, 4e12, -1),  # weight gradient
            (OpClass.COLLECTIVE, 0.0, RS),  # the input gradient's reduce-scatter
            (OpClass.COLLECTIVE, 0.0, AG),  # another all-gather, not a re-gather
            (OpClass.GEMM, 4e12, -1),
        ]
    )
    regather = np.array([True, False, False, False, False, False])
    scatter = np.array([False, False, False, True, False, False])
    ms = 1_000_000
    dur = np.array([ms // 2, ms, 2 * ms, ms, ms // 2, ms], dtype=np.int64)
    out = overlap_linear_backward(table, dur, regather, scatter, lambda g: 1.25)
    # The all-gather beside the 1 ms GEMM after it, the reduce-scatter beside the 2 ms one
    # before it, each charged a fifth of its time; the other all-gather keeps its time.
    assert out.tolist() == [ms // 10, ms, 2 * ms, ms // 5, ms // 2, ms]
    longer = dur * np.array([4, 1, 1, 3, 1, 1])
    slow = overlap_linear_backward(table, longer, regather, scatter, lambda g: 1.25)
    assert (slow[0], slow[3]) == (2 * ms - ms, 3 * ms - 2 * ms)  # longer than their GEMMs


def test_weight_gradient_gather_through_userbuffers_is_bulk_beside_the_gemm() -> None:
    g = _gemm_ns(4e12)
    table = _table([(OpClass.COLLECTIVE, 0.0, AG), (OpClass.GEMM, 4e12, -1)])
    margin = 132 / (132 - 16)
    for c in (g // 10, 3 * g):  # GEMM-bound, then communication-bound
        out = _run(table, [1, g], backward=True, streamed=c, regather=[True, False])
        assert out[0] == round(max(c, g * margin)) - g
    # Not a re-gather: the same all-gather before a GEMM is a ring exchange.
    ring = _run(table, [1, g], backward=True, streamed=3 * g, regather=[False, False])
    assert ring[0] == round(ring_exchange_ns(g / 4, 3 * g, 4)) - g


def test_gradient_accumulation_between_an_all_reduce_and_its_gemm() -> None:
    """Without gradient-accumulation fusion the traced backward holds, between the weight
    gradient's GEMM and the input gradient's all-reduce, the bias gradient's sum and the
    additions of both gradients to their main gradients: the all-reduce still runs beside
    that GEMM (it was exposed whole: the search stopped one op short)."""
    ar = int(CollectiveKind.ALL_REDUCE)
    other = OpClass.OTHER
    table = _table(
        [(OpClass.GEMM, 4e12, -1), (other, 0.0, -1), (other, 0.0, -1), (other, 0.0, -1),
         (OpClass.COLLECTIVE, 0.0, ar)]
    )  # fmt: skip
    ms = 1_000_000
    dur = np.array([2 * ms, 10, 10, 10, ms], dtype=np.int64)
    scatter = np.array([False, False, False, False, True])
    beside = np.full(5, -1, dtype=np.int64)
    out = overlap_linear_backward(
        table, dur, np.zeros(5, bool), scatter, lambda g: 1.0, None, beside
    )
    assert out[4] == 0 and beside.tolist() == [-1, -1, -1, -1, 0]
    # One op more is out of reach: the collective stays exposed.
    longer = _table(
        [(OpClass.GEMM, 4e12, -1), *[(other, 0.0, -1)] * 4, (OpClass.COLLECTIVE, 0.0, ar)]
    )
    dur6 = np.array([2 * ms, 10, 10, 10, 10, ms], dtype=np.int64)
    scatter6 = np.array([False] * 5 + [True])
    out6 = overlap_linear_backward(longer, dur6, np.zeros(6, bool), scatter6, lambda g: 1.0)
    assert out6[5] == ms
