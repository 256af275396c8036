"""Op durations of traced tables: the dtype a GEMM was traced in sets its peak."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from echo_view.model.graph import OpClass, OpTable, TracedGraph
from echo_view.model.kinds import CollectiveKind
from echo_view.model.strings import StringTable
from echo_view.sim.cluster import cluster_from_config, make_cluster
from echo_view.sim.comm.alphabeta import AlphaBetaModel, AlphaBetaParams
from echo_view.sim.comm.defaults import default_comm_model
from echo_view.sim.compose_costs import CollectiveCache, table_cost
from echo_view.sim.kernel_cost import ComputeParams
from echo_view.sim.layout import Layout
from echo_view.sim.tp_overlap import WGRAD_GATHER
from tests.sim.op_tables import tp_table
from tests.sim.test_compose import _cfg
from tests.sim.test_config_sim import _small


def test_an_fp8_gemm_takes_half_the_bf16_time_on_hopper() -> None:
    strings = StringTable()
    # Two identical large GEMMs (4096 x 8192 x 8192, ~5.5e11 FLOPs), traced as bf16 and fp8.
    flops = 2.0 * 4096 * 8192 * 8192
    table = OpTable(
        name=np.array([strings.intern("mm")] * 2),
        op_class=np.array([OpClass.GEMM] * 2),
        flops=np.array([flops, flops]),
        bytes=np.array([10**8, 10**8]),
        dtype=np.array([strings.intern("bf16"), strings.intern("fp8")]),
        shapes=np.array([strings.intern("")] * 2),
        coll_kind=np.array([-1, -1]),
        coll_bytes=np.zeros(2, dtype=np.int64),
        axis=np.array([-1, -1]),
        grad_bytes=np.zeros(2, dtype=np.int64),
    )
    graph = TracedGraph(strings, ())
    cfg = _cfg(pp=1, dp=1, micro_batches=1)
    cluster = cluster_from_config(cfg.cluster)  # H100 SXM: 989 bf16, 1,979 fp8 TFLOP/s dense
    params = ComputeParams()
    colls = CollectiveCache(default_comm_model(), cluster)
    dur = table_cost(graph, table, cfg, cluster, params, colls, Layout.of(cfg.parallel), 0).dur_ns
    bf16, fp8 = (int(d) - params.kernel_gap_ns for d in dur)
    # Same FLOPs and efficiency at the fp8 peak (1,978.9 against 989.4 TFLOP/s, the H100
    # datasheet's dense figures): half the time, to the datasheet's rounding and 1 ns.
    peaks = cluster.gpu.peak_flops
    assert abs(fp8 - bf16 * peaks["bf16"] / peaks["fp8"]) <= 1
    assert abs(fp8 / bf16 - 0.5) < 1e-4


def test_large_hopper_gemms_stop_at_the_best_measured_rate_unless_switched_off() -> None:
    """An MPT-7B MLP product (12,288 x 4,096 -> 16,384, bf16) on H100: 81.3% of the 989.4
    TFLOP/s peak with the ceiling; faster without it (the tiled form alone gives 0.85)."""
    strings = StringTable()
    flops = 2.0 * 12288 * 4096 * 16384
    table = OpTable(
        name=np.array([strings.intern("aten::mm")]),
        op_class=np.array([OpClass.GEMM]),
        flops=np.array([flops]),
        bytes=np.array([10**8]),
        dtype=np.array([strings.intern("bf16")]),
        shapes=np.array([strings.intern("[12288,4096]x[4096,16384]")]),
        coll_kind=np.array([-1]),
        coll_bytes=np.zeros(1, dtype=np.int64),
        axis=np.array([-1]),
        grad_bytes=np.zeros(1, dtype=np.int64),
    )
    cfg = _cfg(pp=1, dp=1, micro_batches=1)
    cluster = cluster_from_config(cfg.cluster)
    colls = CollectiveCache(default_comm_model(), cluster)
    layout = Layout.of(cfg.parallel)

    def ns(gemm_shape_ceiling: float = 1.0) -> int:
        p = ComputeParams(gemm_shape_ceiling=gemm_shape_ceiling)
        cost = table_cost(TracedGraph(strings, ()), table, cfg, cluster, p, colls, layout, 0)
        return int(cost.dur_ns[0]) - p.kernel_gap_ns

    assert abs(ns() - flops / (0.813 * 989.4e12) * 1e9) <= 1
    assert ns(gemm_shape_ceiling=0.0) < 0.813 / 0.85 * ns()


def _attention_table(strings: StringTable, rows: list[tuple[str, str, float]]) -> OpTable:
    """Fused attention ops ``(name, shapes text, FLOPs)`` in bf16, moving 1 MB each."""
    n = len(rows)
    return OpTable(
        name=np.array([strings.intern(r[0]) for r in rows]),
        op_class=np.array([OpClass.ATTENTION] * n),
        flops=np.array([r[2] for r in rows]),
        bytes=np.full(n, 10**6),
        dtype=np.array([strings.intern("bf16")] * n),
        shapes=np.array([strings.intern(r[1]) for r in rows]),
        coll_kind=np.full(n, -1),
        coll_bytes=np.zeros(n, dtype=np.int64),
        axis=np.full(n, -1),
        grad_bytes=np.zeros(n, dtype=np.int64),
    )


def _attention_ns(
    kernel: str,
    gpu: str,
    rows: list[tuple[str, str, float]],
    deterministic: bool = False,
    **params: float,
) -> list[int]:
    strings = StringTable()
    table = _attention_table(strings, rows)
    cfg = _cfg(pp=1, dp=1, micro_batches=1, model={"attention_kernel": kernel})
    cfg = replace(cfg, cluster=replace(cfg.cluster, gpu=gpu))
    cfg = replace(cfg, training=replace(cfg.training, deterministic=deterministic))
    cluster = cluster_from_config(cfg.cluster)
    p = ComputeParams(**params)
    colls = CollectiveCache(default_comm_model(), cluster)
    cost = table_cost(
        TracedGraph(strings, ()), table, cfg, cluster, p, colls, Layout.of(cfg.parallel), 0
    )
    return [int(d) - p.kernel_gap_ns for d in cost.dur_ns]


# One micro-batch of 2 x 8k tokens, 16 heads of 128 (q, k, v as [batch, heads, seq, head_dim]).
_QKV = "x".join(["[2,16,8192,128]"] * 3)
_FWD = 4.0 * 2 * 16 * 8192 * 8192 * 128


def test_fused_attention_runs_at_the_kernels_measured_speed_on_hopper() -> None:
    rows = [
        ("echo_view::flash_attn", _QKV, _FWD / 2),  # causal: half the FLOPs
        ("echo_view::flash_attn", _QKV, _FWD),  # no mask
        ("echo_view::flash_attn_bwd", "[2,16,8192,128]x" + _QKV, 2.5 * _FWD / 2),
    ]
    fwd_c, fwd_n, bwd_c = _attention_ns("fa3", "H100", rows)
    # FA3 paper Fig. 5/6 at head dim 128, 8k: 602 (causal) and 646 TFLOP/s forward, 559 backward
    # without mask, x 602 / 646 with it.
    assert fwd_c == round(_FWD / 2 / 602e12 * 1e9)
    assert fwd_n == round(_FWD / 646e12 * 1e9)
    assert bwd_c == round(2.5 * _FWD / 2 / (559e12 * 602 / 646) * 1e9)
    # auto on Hopper is cuDNN (529 TFLOP/s causal forward); H800 has H100's compute.
    assert _attention_ns("auto", "H800", rows[:1]) == [round(_FWD / 2 / 529e12 * 1e9)]


def test_a_deterministic_cudnn_backward_on_hopper_fills_its_dp_workspace() -> None:
    """cuDNN's deterministic attention backward on Hopper needs a b x h x s_q x s_kv x 2-byte
    workspace, which Transformer Engine allocates per call and deterministic algorithms fill:
    4 GiB here, written at 0.85 x 3,350 GB/s saturating with 2 MB half-size, plus the fill's
    kernel gap."""
    rows = [("echo_view::flash_attn_bwd", "[2,16,8192,128]x" + _QKV, 2.5 * _FWD / 2)]
    base = _attention_ns("auto", "H100", rows)[0]
    det = _attention_ns("auto", "H100", rows, deterministic=True)[0]
    ws = 2 * 16 * 8192 * 8192 * 2
    fill = ws / (3350e9 * 0.85 * ws / (ws + 2.0e6)) * 1e9 + 1500
    assert abs(det - base - fill) <= 1
    # FlashAttention's kernels (chosen, or A100's auto) allocate no such workspace.
    for kernel, gpu in (("fa3", "H100"), ("auto", "A100")):
        with_it = _attention_ns(kernel, gpu, rows, deterministic=True)
        assert with_it == _attention_ns(kernel, gpu, rows)


def test_llm_foundry_triton_attention_runs_at_flashattention_1s_speed() -> None:
    """``flash_attn_triton`` times both passes at FlashAttention 1.x's forward + backward speed
    (FA2 paper Fig. 7 / Fig. 4, causal, head dim 128, 8k): 135 TFLOP/s on H100, 80 on A100 of
    312 TFLOP/s peak (A100-40GB has the same peak)."""
    rows = [
        ("echo_view::flash_attn", _QKV, _FWD / 2),
        ("echo_view::flash_attn_bwd", "[2,16,8192,128]x" + _QKV, 2.5 * _FWD / 2),
    ]
    assert _attention_ns("flash_attn_triton", "H100", rows) == [
        round(_FWD / 2 / 135e12 * 1e9),
        round(2.5 * _FWD / 2 / 135e12 * 1e9),
    ]
    assert _attention_ns("flash_attn_triton", "A100-40GB", rows[:1]) == [
        round(_FWD / 2 / 80e12 * 1e9)
    ]


def test_without_a_measured_table_attention_keeps_the_flop_form() -> None:
    rows = [("echo_view::flash_attn", _QKV, _FWD / 2)]
    generic = _attention_ns("fa3", "A100-80GB", rows, attn_kernel_model=0.0)
    assert _attention_ns("fa3", "A100-80GB", rows) == generic
    # The switch turns the tables off on Hopper too: 0.55 of 989.4 TFLOP/s, saturating.
    f = _FWD / 2
    eff = 0.55 * f / (f + 4.0e9)
    assert _attention_ns("fa3", "H100", rows, attn_kernel_model=0.0) == [
        round(f / (989.4e12 * eff) * 1e9)
    ]


def test_streaming_time_is_the_bandwidth_term_without_the_call_latency() -> None:
    # Alpha-beta on 8 H100 of one node: beta = 450 GB/s x 0.8 (the default NVLink efficiency)
    # = 360 GB/s; a reduce-scatter's bus factor is 7/8. 50,331,648 B (4096 x 6144 bf16) stream
    # in 7/8 x 50,331,648 / 360e9 s = 122.32 µs, whatever alpha is.
    cluster = make_cluster("H100-SXM5-80GB", nodes=1)
    ranks = tuple(range(8))
    nbytes = 4096 * 6144 * 2
    for alpha in (0.0, 10.0, 500.0):
        model = AlphaBetaModel(AlphaBetaParams(alpha_us=alpha))
        colls = CollectiveCache(model, cluster)
        ns = colls.streaming_ns(CollectiveKind.REDUCE_SCATTER, nbytes, ranks)
        assert abs(ns - 7 / 8 * nbytes / 360e9 * 1e9) < 2.0  # two rounded ns times per slope
    # The NCCL model: Simple on 32 channels past 1 GiB, so the slope is its bus term alone,
    # the Hopper-delivered 370 of 450 GB/s (docs/comm-model.md): 119.03 µs, under the 198 µs
    # of one NCCL call of that size.
    colls = CollectiveCache(default_comm_model(), cluster)
    ns = colls.streaming_ns(CollectiveKind.REDUCE_SCATTER, nbytes, ranks)
    assert abs(ns - 7 / 8 * nbytes / 370e9 * 1e9) < 2.0
    assert ns < colls.time_ns(CollectiveKind.REDUCE_SCATTER, nbytes, ranks)


def _linear_backward_table(strings: StringTable, kind: CollectiveKind) -> OpTable:
    """A column-parallel linear's backward: the re-gather, input- and weight-gradient GEMMs,
    and the input gradient's ``kind`` collective (all on the tensor-parallel axis)."""
    flops = 2.0 * 8192 * 4096 * 4096
    rows = [
        (WGRAD_GATHER, OpClass.COLLECTIVE, 0.0, int(CollectiveKind.ALL_GATHER)),
        ("mm", OpClass.GEMM, flops, -1),
        ("mm", OpClass.GEMM, flops, -1),
        ("nccl:x", OpClass.COLLECTIVE, 0.0, int(kind)),
    ]
    return tp_table(strings, rows, 64 << 20)


def test_column_parallel_backward_collectives_are_charged_what_their_gemm_leaves() -> None:
    strings = StringTable()
    graph = TracedGraph(strings, ())
    params = ComputeParams()
    for kind, parallel, hidden in (
        (CollectiveKind.REDUCE_SCATTER, {"sequence_parallel": True}, True),
        (CollectiveKind.ALL_REDUCE, {}, True),
        (CollectiveKind.ALL_REDUCE, {"async_tensor_model_parallel_allreduce": False}, False),
    ):
        table = _linear_backward_table(strings, kind)
        cfg = _small(tp=8, pp=1, dp=1, **parallel)
        cluster = cluster_from_config(cfg.cluster)
        colls = CollectiveCache(default_comm_model(), cluster)
        layout = Layout.of(cfg.parallel)
        ranks = layout.group("tp", 0)
        forward = table_cost(graph, table, cfg, cluster, params, colls, layout, 0)
        g = [int(d) for d in forward.dur_ns[1:3]]
        for slowdown in (1.25, None):
            cost = table_cost(
                graph,
                table,
                cfg,
                cluster,
                params,
                colls,
                layout,
                0,
                backward=True,
                gemm_slowdown=None if slowdown is None else (lambda _: 1.25),
            )
            share = 0.0 if slowdown is None else 1 - 1 / slowdown
            for i, gemm in ((0, g[0]), (3, g[1])):
                c = colls.time_ns(table.coll(i), 64 << 20, ranks)
                if i == 3:  # a forward pass's reduce-scatter or all-reduce: exposed
                    assert int(forward.dur_ns[i]) == c
                expected = round(max(c, gemm + c * share)) - gemm
                if i == 3 and not hidden:
                    expected = c  # all-reduced after the linear's backward
                else:
                    assert expected < c  # hidden in part
                assert int(cost.dur_ns[i]) == expected, (kind, parallel, i, slowdown)
