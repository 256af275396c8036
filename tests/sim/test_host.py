"""The host path: kernels wait for their issue, syncs make host and GPU time add up."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from echo_view.errors import ConfigError
from echo_view.loading import read_job
from echo_view.model.aten_ops import HOST_WAIT
from echo_view.model.config import ParallelConfig
from echo_view.model.config_parse import parse_workload_config
from echo_view.model.graph import OpClass, OpTable, Role, TracedGraph
from echo_view.model.kinds import EventKind, LaneKind
from echo_view.model.strings import StringTable
from echo_view.sim.cluster import cluster_from_config
from echo_view.sim.comm.defaults import default_comm_model
from echo_view.sim.config_sim import ConfigSimulation, predicted_config_job, simulate_config
from echo_view.sim.host import (
    HostParams,
    IssueFold,
    PipeSyncs,
    folded_spans_ns,
    issue_span_ns,
    pipe_syncs_before,
)
from echo_view.sim.kernel_cost import ComputeParams
from echo_view.sim.schedule import Pass, schedule_arrays
from exporters.perfetto_json import PerfettoJsonExporter
from tests.sim.op_tables import op_table

C = 73_700  # the default host time per kernel, ns
SMALL = 3_500  # a kernel with no work: kernel_min_ns + kernel_gap_ns of ComputeParams()
BIG_FLOPS = 4e11  # a GEMM of about 0.5 ms at the H100 bf16 peak


def _table(strings: StringTable, name: str, flops: list[float]) -> OpTable:
    kind = OpClass.GEMM if any(flops) else OpClass.ELEMENTWISE
    return op_table(strings, [(f"{name}{i}", kind, f, 0) for i, f in enumerate(flops)])


def _sim(
    kernels: tuple[int, int, int],
    flops: float,
    training: dict[str, Any] | None = None,
    host: HostParams | None = None,
    grads: int = 0,
    tensors: int | None = None,
    rows: OpTable | None = None,
    strings: StringTable | None = None,
    dtype: str = "bf16",
) -> ConfigSimulation:
    """One rank (no pipeline, no data parallelism): forward, backward and optimizer tables of
    ``kernels`` kernels of ``flops`` each; the first ``grads`` backward kernels each complete a
    gradient tensor; ``tensors``, the parameter tensors the tracer counted (graph meta);
    ``rows``, a forward table of its own (its names in ``strings``); ``dtype``, the
    training's (bf16 copies the updated params one tensor at a time, fp16 in one kernel)."""
    strings = strings if strings is not None else StringTable()
    fwd, bwd, opt = (
        _table(strings, name, [flops] * k) for name, k in zip(("f", "b", "o"), kernels, strict=True)
    )
    fwd = rows if rows is not None else fwd
    done = np.zeros(kernels[1], dtype=np.int64)
    done[:grads] = 4096
    bwd = replace(bwd, grad_bytes=done)
    meta = {} if tensors is None else {"param_tensors": {"0": tensors}}
    graph = TracedGraph(strings, (Role((0,), (fwd,), (bwd,), opt, params=1000),), meta=meta)
    cfg = parse_workload_config(
        {
            "model": {
                "kind": "gpt",
                "layers": 2,
                "hidden": 64,
                "heads": 4,
                "seq_len": 16,
                "vocab": 100,
            },
            "parallel": {"tp": 1, "pp": 1, "dp": 1},
            "batch": {"global": 1, "micro": 1},
            "cluster": {"gpu": "H100", "gpus_per_node": 1, "nodes": 1},
            "precision": {"dtype": dtype},
            **({"training": training} if training is not None else {}),
        }
    )
    cluster = cluster_from_config(cfg.cluster)
    return simulate_config(
        graph, cfg, cluster, default_comm_model(), ComputeParams(), comm_scale=0.0, host=host
    )


def test_issue_span_by_hand() -> None:
    # GPU-bound: the first kernel's issue, then all the GPU work.
    assert issue_span_ns(np.array([10, 1, 1]), 5) == 5 + 12
    # Host-bound: every issue, then the last kernel.
    assert issue_span_ns(np.array([1, 1, 1]), 5) == 15 + 1
    assert issue_span_ns(np.array([], dtype=np.int64), 5) == 0
    # Folding runs is the span of their concatenation.
    runs = [np.array([10, 1]), np.array([1, 1, 1]), np.array([7])]
    fold = IssueFold()
    for d in runs:
        fold.add(issue_span_ns(d, 5), int(d.sum()), 5 * len(d))
    assert fold.span_ns == issue_span_ns(np.concatenate(runs), 5)
    assert fold.issued_ns == 30


def test_issue_span_with_a_host_time_per_kernel() -> None:
    # Issued at 10, 11, 21; the GPU work left from each is 15, 10, 5.
    assert issue_span_ns(np.array([5, 5, 5]), np.array([10, 1, 10])) == max(25, 21, 26)
    # A fill costs the host fill_us, every other kernel kernel_us.
    host = HostParams(kernel_us=2, fill_us=0.5)
    costs = host.issue_ns(np.array([False, True, True, False]))
    assert costs.tolist() == [2_000, 500, 500, 2_000]
    folded = IssueFold()
    folded.add(issue_span_ns(np.array([1, 1, 1, 1]), costs), 4, int(costs.sum()))
    assert (folded.span_ns, folded.issued_ns) == (5_001, 5_000)


def test_a_host_bound_step_is_every_issue_plus_the_kernels_after_each_sync() -> None:
    kf, kb, ko = 40, 80, 3
    sim = _sim((kf, kb, ko), 0.0)
    # The forward and backward kernels run as soon as they are issued (each is shorter than an
    # issue); the optimizer's gradient-norm .item() (clip_grad 1.0) waits for the last backward
    # kernel, then the optimizer is issued.
    assert sim.step_ns == (kf + kb) * C + SMALL + ko * C + SMALL
    # Without the sync the optimizer is issued right after the backward.
    no_sync = _sim((kf, kb, ko), 0.0, training={"clip_grad": 0.0})
    assert no_sync.step_ns == (kf + kb + ko) * C + SMALL
    # No host path: the kernels back to back.
    gpu = _sim((kf, kb, ko), 0.0, host=HostParams(kernel_us=0))
    assert gpu.step_ns == (kf + kb + ko) * SMALL


def test_a_gpu_bound_step_pays_one_issue_per_sync() -> None:
    sim = _sim((2, 4, 1), BIG_FLOPS)
    t = sim.composed.tables  # forward, backward, optimizer
    g_f, g_b, g_o = (tc.total_ns for tc in t)
    assert min(tc.dur_ns.min() for tc in t) > C  # each kernel outlasts an issue
    # The host runs ahead: only the first kernel waits for its issue; after the sync before
    # the optimizer the host and the GPU add up once more.
    assert sim.step_ns == C + g_f + g_b + C + g_o
    assert _sim((2, 4, 1), BIG_FLOPS, host=HostParams(kernel_us=0)).step_ns == g_f + g_b + g_o


def test_the_host_thread_and_its_syncs_are_in_the_workload() -> None:
    sim = _sim((2, 3, 1), 0.0, training={"log_num_zeros_in_grad": True})
    wl = sim.composed.workload
    host = [i for i, lane in enumerate(wl.lanes) if lane.kind == LaneKind.CPU_THREAD]
    assert len(host) == 1
    names = [wl.strings[int(n)] for n in wl.ops.name[wl.ops.lane == host[0]]]
    # count_zeros_fp32: three launches per gradient tensor; this graph completes none.
    assert names == ["dispatch", "dispatch", "cudaDeviceSynchronize", "dispatch"]


def test_the_host_ops_are_read_back_from_an_export_as_host_work(tmp_path: Path) -> None:
    # They were all written under the category "kernel", so reading an export back made the
    # host thread a second GPU whose top kernel was "dispatch".
    sim = _sim((2, 3, 1), 0.0, training={"log_num_zeros_in_grad": True})
    trace = predicted_config_job(sim).traces[0]
    cats = {trace.strings[int(c)] for c in trace.events.cat[trace.events.kind == EventKind.CPU_OP]}
    assert cats == {"cpu_op"}
    out = tmp_path / "predicted.json"
    PerfettoJsonExporter().write(predicted_config_job(sim), out)
    back = read_job([out]).traces[0]
    kinds = {back.name(i): EventKind(int(k)) for i, k in enumerate(back.events.kind)}
    assert kinds["dispatch"] == EventKind.CPU_OP
    assert kinds["cudaDeviceSynchronize"] == EventKind.RUNTIME
    kernel_lanes = {int(x) for x in back.events.lane[back.events.kind == EventKind.KERNEL]}
    assert kernel_lanes and {back.lanes[x].kind for x in kernel_lanes} == {LaneKind.GPU_STREAM}


def test_host_parameters_are_checked() -> None:
    assert HostParams().with_overrides({"kernel_us": "12.5"}).kernel_ns == 12_500
    with pytest.raises(ConfigError, match="host parameter 'kernel_us' must be"):
        HostParams().with_overrides({"kernel_us": "-1"})
    with pytest.raises(ConfigError, match="unknown host parameter"):
        HostParams().with_overrides({"launch_us": "1"})


def test_the_host_threads_busy_time_is_its_issues() -> None:
    # 40 + 80 + 3 kernels issued at C each, plus the optimizer's sync (no time of its own).
    sim = _sim((40, 80, 3), 0.0)
    assert sim.host_ns(0) == (40 + 80 + 3) * C
    assert _sim((40, 80, 3), 0.0, host=HostParams(kernel_us=0)).host_ns(0) == 0


def test_fills_of_new_buffers_cost_the_host_fill_us_each() -> None:
    # Forward: 40 kernels, every other one a fill of a new buffer (deterministic algorithms).
    strings = StringTable()
    fill = "aten::fill_ (uninitialized)"
    rows = [(fill if i % 2 else f"f{i}", OpClass.ELEMENTWISE, 0.0, 0) for i in range(40)]
    sim = _sim((40, 80, 3), 0.0, rows=op_table(strings, rows), strings=strings)
    fill_ns = HostParams().fill_ns
    assert fill_ns == 10_500
    # Host-bound: 20 fills at fill_us and 100 other kernels at kernel_us, then the optimizer.
    assert sim.host_ns(0) == 20 * fill_ns + (20 + 80 + 3) * C
    assert sim.step_ns == 20 * fill_ns + (20 + 80) * C + SMALL + 3 * C + SMALL
    assert sim.fills(0) == 20


def test_a_host_wait_in_a_pass_holds_the_rest_of_it_until_the_gpu_drains() -> None:
    """A forward of two large GEMMs, with Megatron-Core's dispatcher wait between them in one
    graph: the host issues the second GEMM only after the first has run, so the step grows by
    one issue (the first GEMM outlasts it), and the wait itself issues nothing."""
    strings = StringTable()
    gemm = ("g", OpClass.GEMM, BIG_FLOPS, 0)
    wait = (HOST_WAIT, OpClass.OTHER, 0.0, 0)
    plain = _sim((2, 4, 1), BIG_FLOPS, rows=op_table(strings, [gemm, gemm]), strings=strings)
    waited = _sim((2, 4, 1), BIG_FLOPS, rows=op_table(strings, [gemm, wait, gemm]), strings=strings)
    g = int(plain.composed.tables[0].dur_ns[0])
    assert g > C
    assert waited.step_ns == plain.step_ns + C
    assert waited.host_ns(0) == plain.host_ns(0) == (2 + 4 + 1) * C
    assert int(waited.composed.tables[0].dur_ns[1]) == 0  # no kernel
    wl = waited.composed.workload
    host = [i for i, lane in enumerate(wl.lanes) if lane.kind == LaneKind.CPU_THREAD]
    names = [wl.strings[int(n)] for n in wl.ops.name[wl.ops.lane == host[0]]]
    assert names[:3] == ["dispatch", HOST_WAIT, "dispatch"]
    # Its host cost is nothing, a fill's fill_us, any other kernel's kernel_us.
    costs = HostParams().issue_ns(np.array([False, True, False]), np.array([True, False, False]))
    assert costs.tolist() == [0, 10_500, C]


def test_folded_spans_by_hand() -> None:
    # Two stretches: [run a, run b] | [run c]. The first folds to max(10 + 20, 5 + 20) = 30:
    # b's GPU work after a's span, or b's span after a's 5 ns of host time; the second is 7.
    span = np.array([10, 20, 7])
    gpu = np.array([1, 20, 7])
    issued = np.array([5, 3, 2])
    assert folded_spans_ns(span, gpu, issued, np.array([False, False, True])) == 30 + 7
    unrolled = max(10 + 20 + 7, 5 + 20 + 7, 5 + 3 + 7)  # each run's span, then the GPU after it
    assert folded_spans_ns(span, gpu, issued, np.zeros(3, dtype=bool)) == unrolled
    assert folded_spans_ns(span[:0], gpu[:0], issued[:0], np.zeros(0, dtype=bool)) == 0


def test_folded_spans_and_pipe_syncs_are_the_pass_by_pass_walk() -> None:
    # The plan's host floor takes whole arrays; the simulator walks pass by pass.
    rng = np.random.default_rng(7)
    for _ in range(300):
        pp, v = int(rng.integers(1, 6)), int(rng.integers(1, 4))
        m, stage = pp * int(rng.integers(1, 5)), int(rng.integers(0, pp))
        p = ParallelConfig(
            tp=1, pp=pp, dp=1, virtual_stages=v, overlap_p2p_comm=bool(rng.integers(0, 2))
        )
        forward, chunk, _ = schedule_arrays(stage, pp, m, v)
        walk = PipeSyncs(p, stage)
        cuts = pipe_syncs_before(p, stage, forward, chunk)
        passes = zip(forward.tolist(), chunk.tolist(), strict=True)
        assert cuts.tolist() == [walk.before(Pass(f, c, 0)) for f, c in passes]
        cuts |= rng.random(len(cuts)) < 0.1  # and cuts anywhere
        runs = rng.integers(0, 1000, size=(len(forward), 3))
        total, fold = 0, IssueFold()
        for cut, (s, g, i) in zip(cuts, runs.tolist(), strict=True):
            if cut:
                total, fold = total + fold.span_ns, IssueFold()
            fold.add(s, g, i)
        assert folded_spans_ns(runs[:, 0], runs[:, 1], runs[:, 2], cuts) == total + fold.span_ns
