"""Step detection rules, each on a hand-built trace."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from echo_view.analysis.steps import (
    _top_level,
    find_steps,
    launch_start_ns,
    step_of_gpu_work,
    steps_of,
)
from echo_view.model import EventKind, LaneKind, TraceBuilder

UA = EventKind.USER_ANNOTATION


def test_steps_from_the_trace_get_gpu_end() -> None:
    b = TraceBuilder(0)
    cpu = b.lane(LaneKind.CPU_THREAD, 1, 1)
    s7 = b.gpu_stream(0, 7)
    b.event(EventKind.RUNTIME, "cudaLaunchKernel", 10, 5, cpu, correlation=1)
    b.event(EventKind.KERNEL, "k", 50, 200, s7, correlation=1)
    b.step(5, 0, 100)
    found = find_steps(b.build())
    assert found.rule == "trace"
    assert found.table.number.tolist() == [5]
    # launched at 10 inside [0, 100): the step's GPU work ends at 250.
    assert found.table.gpu_end_ns.tolist() == [250]
    assert not found.table.detected


def test_profiler_step_events_merge_across_threads_and_ignore_gpu_copies() -> None:
    b = TraceBuilder(0)
    main = b.lane(LaneKind.CPU_THREAD, 1, 1)
    other = b.lane(LaneKind.CPU_THREAD, 1, 2)
    s7 = b.gpu_stream(0, 7)
    b.event(UA, "ProfilerStep#8", 1000, 900, main)
    b.event(UA, "ProfilerStep#7", 0, 1000, main)
    b.event(UA, "ProfilerStep#7", 5, 1010, other)
    b.event(EventKind.GPU_ANNOTATION, "ProfilerStep#7", 0, 5000, s7)
    # a kernel with no launch in the trace is placed by its own start (1500: step 8)
    b.event(EventKind.KERNEL, "k", 1500, 700, s7)
    found = find_steps(b.build())
    assert found.rule == "profiler_step"
    t = found.table
    assert t.number.tolist() == [7, 8]
    assert t.start_ns.tolist() == [0, 1000]
    assert t.end_ns.tolist() == [1015, 1900]
    assert t.gpu_end_ns.tolist() == [-1, 2200]
    assert not t.detected


def test_optimizer_step_ends_cut_the_thread() -> None:
    b = TraceBuilder(0)
    cpu = b.lane(LaneKind.CPU_THREAD, 1, 1)
    b.event(EventKind.CPU_OP, "aten::mm", 0, 100, cpu)
    b.event(UA, "Optimizer.step#SGD.step", 300, 100, cpu)
    b.event(EventKind.CPU_OP, "aten::mm", 450, 100, cpu)
    b.event(UA, "Optimizer.step#SGD.step", 800, 100, cpu)
    b.event(EventKind.CPU_OP, "aten::add", 950, 50, cpu)
    found = find_steps(b.build())
    assert found.rule == "optimizer_step"
    assert found.table.detected
    assert found.table.number.tolist() == [0, 1, 2]
    assert found.table.start_ns.tolist() == [0, 400, 900]
    assert found.table.end_ns.tolist() == [400, 900, 1000]


def test_repeated_top_level_annotation_cuts_at_its_starts() -> None:
    b = TraceBuilder(0)
    cpu = b.lane(LaneKind.CPU_THREAD, 1, 1)
    for t0 in (0, 500, 1000):
        b.event(UA, "## forward ##", t0, 200, cpu)
        b.event(UA, "## backward ##", t0 + 200, 250, cpu)
        # nested annotations repeat more often but are not top-level
        for k in range(3):
            b.event(UA, "inner", t0 + 10 + 50 * k, 20, cpu)
    b.event(EventKind.CPU_OP, "aten::copy_", 1460, 40, cpu)
    found = find_steps(b.build())
    assert found.rule == "repeated_annotation"
    assert found.table.start_ns.tolist() == [0, 500, 1000]
    assert found.table.end_ns.tolist() == [500, 1000, 1500]
    assert found.table.detected


def test_single_annotation_falls_back_to_the_window() -> None:
    b = TraceBuilder(0)
    cpu = b.lane(LaneKind.CPU_THREAD, 1, 1)
    s7 = b.gpu_stream(0, 7)
    b.event(UA, "train", 100, 400, cpu)
    b.event(EventKind.CPU_OP, "aten::mm", 600, 50, cpu)
    b.event(EventKind.KERNEL, "k", 700, 100, s7)
    found = find_steps(b.build())
    assert found.rule == "window"
    assert found.table.start_ns.tolist() == [100]
    assert found.table.end_ns.tolist() == [650]
    # the kernel starts after the CPU window: it belongs to no step
    assert found.table.gpu_end_ns.tolist() == [-1]
    assert steps_of(b.build()).number.tolist() == [0]


def test_the_window_starts_with_gpu_work_that_runs_before_the_first_cpu_event() -> None:
    # A capture that begins while kernels launched before it still run (mfu_2gpu_before's
    # rank 0: 12 kernels, 9.24 ms) left them out of every step, and of compute time.
    b = TraceBuilder(0)
    cpu = b.lane(LaneKind.CPU_THREAD, 1, 1)
    s7 = b.gpu_stream(0, 7)
    early = b.event(EventKind.KERNEL, "early", 40, 30, s7)
    b.event(EventKind.CPU_OP, "aten::mm", 100, 50, cpu)
    b.event(EventKind.RUNTIME, "cudaLaunchKernel", 120, 10, cpu, correlation=3)
    late = b.event(EventKind.KERNEL, "k", 160, 100, s7, correlation=3)
    trace = b.build()
    found = find_steps(trace)
    assert found.rule == "window"
    assert found.table.start_ns.tolist() == [40]
    assert found.table.end_ns.tolist() == [150]
    assert found.table.gpu_end_ns.tolist() == [260]
    rows, step = step_of_gpu_work(trace, found.table)
    assert rows.tolist() == [early, late] and step.tolist() == [0, 0]


def test_launch_start_uses_the_earliest_cpu_event_of_a_correlation() -> None:
    b = TraceBuilder(0)
    cpu = b.lane(LaneKind.CPU_THREAD, 1, 1)
    s7 = b.gpu_stream(0, 7)
    b.event(EventKind.DRIVER, "cuLaunchKernel", 30, 5, cpu, correlation=4)
    b.event(EventKind.RUNTIME, "cudaLaunchKernel", 20, 20, cpu, correlation=4)
    k1 = b.event(EventKind.KERNEL, "k", 100, 10, s7, correlation=4)
    k2 = b.event(EventKind.KERNEL, "k", 200, 10, s7, correlation=99)
    out = launch_start_ns(b.build())
    assert out[k1] == 20
    assert out[k2] == -1


def _top_level_per_lane(ev: SimpleNamespace, rows: np.ndarray) -> np.ndarray:
    """The rule one thread at a time: by start, longer first, an event is top-level when it
    starts at or after the furthest end reached by the events before it."""
    lane = ev.lane[rows]
    top = np.zeros(len(rows), dtype=bool)
    for lid in np.unique(lane):
        on = np.flatnonzero(lane == lid)
        start, end = ev.start_ns[rows[on]], ev.start_ns[rows[on]] + ev.dur_ns[rows[on]]
        order = np.lexsort((-end, start))
        reach = np.maximum.accumulate(end[order])
        t = np.ones(len(order), dtype=bool)
        t[1:] = start[order][1:] >= reach[:-1]
        top[on[order]] = t
    return top


@pytest.mark.parametrize("seed", range(30))
def test_top_level_for_all_threads_at_once(seed: int) -> None:
    """One sort for every thread (a trace of 200,000 one-event threads took 18 s in `info`
    with a pass per thread) gives the per-thread answer, ties and huge times included."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    scale = int(rng.choice([1, 10**15]))
    ev = SimpleNamespace(
        lane=rng.integers(0, 6, n).astype(np.int32),
        start_ns=rng.integers(-20, 20, n).astype(np.int64) * scale,
        dur_ns=rng.integers(0, 15, n).astype(np.int64) * scale,
    )
    rows = np.sort(rng.choice(n, int(rng.integers(1, n + 1)), replace=False)).astype(np.int64)
    got = _top_level(SimpleNamespace(events=ev), rows)  # type: ignore[arg-type]
    assert (got == _top_level_per_lane(ev, rows)).all()


@pytest.mark.parametrize("shift", [-10_000_000, -200, -1])
def test_steps_at_negative_times_are_those_of_the_trace_shifted(shift: int) -> None:
    # -1 (NONE, "unknown") was read as a time: a GPU end before 0 stretched the step to -1 ns.
    def steps(at: int) -> tuple[list[int], list[int], list[int], list[int]]:
        b = TraceBuilder(0)
        cpu = b.lane(LaneKind.CPU_THREAD, 1, 1)
        s7 = b.gpu_stream(0, 7)
        b.event(EventKind.CPU_OP, "aten::mm", at + 0, 50, cpu)
        b.event(EventKind.RUNTIME, "cudaLaunchKernel", at + 10, 10, cpu, correlation=3)
        b.event(EventKind.KERNEL, "k", at + 30, 100, s7, correlation=3)
        b.event(EventKind.KERNEL, "after", at + 1000, 100, s7)
        trace = b.build()
        table = find_steps(trace).table
        rows, _ = step_of_gpu_work(trace, table)
        return (
            (table.start_ns - at).tolist(),
            (table.gpu_end_ns - at).tolist(),
            (table.last_end_ns() - at).tolist(),
            rows.tolist(),
        )

    assert steps(shift) == steps(0) == ([0], [130], [130], [2])
