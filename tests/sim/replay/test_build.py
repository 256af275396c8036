"""Replay on a hand-built two-rank job: what becomes an op, which dependencies are found, and
that measured durations reproduce the measured timeline exactly; then what-if moves."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from echo_view.errors import SimulationError
from echo_view.model import (
    ClockAlignment,
    CollectiveKind,
    CollectiveTable,
    EventKind,
    EventTable,
    Job,
    LaneKind,
    Trace,
    TraceBuilder,
)
from echo_view.model.workload import DepKind, DepMode, Workload
from echo_view.sim import predicted_job, simulate, step_spans
from echo_view.sim.replay import build, workload_from_job

US = 1_000
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def _rank(rank: int, gemm_us: int, *, cuda_sync: bool = False) -> Trace:
    """One step: gemm on stream 7, all-reduce on stream 13 after it (event wait), an add on
    stream 7 after the all-reduce (event wait), a blocking copy to the host, two syncs.
    Times (µs) are what a GPU would show: the all-reduce ends at 88 on both ranks."""
    b = TraceBuilder(rank, source=f"rank{rank}")
    b.metadata["world_size"] = 2
    cpu = b.lane(LaneKind.CPU_THREAD, 100, 100, "main")
    s7 = b.gpu_stream(0, 7)
    s13 = b.gpu_stream(0, 13)
    g = b.group("0", (0, 1))
    b.event(EventKind.USER_ANNOTATION, "ProfilerStep#1", 0, 200 * US, cpu)
    b.event(EventKind.CPU_OP, "aten::mm", 9 * US, 7 * US, cpu)

    def call(name: str, t: int, dur: int, corr: int) -> int:
        return b.event(EventKind.RUNTIME, name, t * US, dur * US, cpu, correlation=corr)

    call("cudaLaunchKernel", 10, 5, 1)
    b.event(EventKind.KERNEL, "volta_sgemm_128x32_nt", 17 * US, gemm_us * US, s7, correlation=1)
    gemm_end = 17 + gemm_us
    if cuda_sync:
        call("cudaEventRecord", 19, 1, 20)
    call("cudaStreamWaitEvent", 20, 1, 2)
    if cuda_sync:
        wait = b.event(EventKind.SYNC, "Stream Wait Event", 20 * US, 1 * US, s13, correlation=2)
        b.sync(wait, correlation=2, stream=13, wait_on_stream=7, wait_on_record=20)
    call("cudaLaunchKernel", 25, 5, 3)
    coll_start = 68  # rank 1's gemm ends at 67: the last arrival
    row = b.event(
        EventKind.KERNEL, NCCL, (gemm_end + 1) * US, (88 - gemm_end - 1) * US, s13, correlation=3
    )
    assert gemm_end + 1 <= coll_start
    b.collective(row, CollectiveKind.ALL_REDUCE, nbytes=1 << 20, group=g, seq=0)
    call("cudaStreamWaitEvent", 35, 1, 4)
    call("cudaLaunchKernel", 40, 5, 5)
    b.event(
        EventKind.KERNEL, "vectorized_elementwise_kernel add", 89 * US, 10 * US, s7, correlation=5
    )
    # A copy to pageable host memory: the call returns 2 µs after the copy ends.
    call("cudaMemcpyAsync", 50, 57, 6)
    b.event(
        EventKind.MEMCPY, "Memcpy DtoH (Device -> Pageable)", 100 * US, 5 * US, s7, correlation=6
    )
    call("cudaStreamSynchronize", 110, 2, 7)
    call("cudaDeviceSynchronize", 150, 1, 8)
    b.step(1, 0, 200 * US)
    return b.build()


def _job(**kw: bool) -> Job:
    traces = (_rank(0, 30, **kw), _rank(1, 50, **kw))
    return Job(traces, ClockAlignment("shared-host-clock", (0, 0), 0), 2, "synthetic")


def _edges(wl: Workload, kind: DepKind) -> set[tuple[str, str, int]]:
    deps = wl.deps
    dst = deps.dst()
    names = wl.strings
    return {
        (names[int(wl.ops.name[s])], names[int(wl.ops.name[d])], int(wl.ops.rank[d]))
        for s, d, k in zip(deps.src, dst, deps.kind, strict=True)
        if k == kind
    }


@pytest.mark.parametrize("cuda_sync", [False, True])
def test_ops_and_dependencies_are_found(cuda_sync: bool) -> None:
    wl = workload_from_job(_job(cuda_sync=cuda_sync))
    # Per rank: 8 runtime calls (9 with the event record), a step marker, 4 GPU ops.
    assert len(wl) == 2 * ((9 if cuda_sync else 8) + 1 + 4)
    events = _edges(wl, DepKind.EVENT)
    for rank in (0, 1):
        assert ("volta_sgemm_128x32_nt", NCCL, rank) in events
        assert (NCCL, "vectorized_elementwise_kernel add", rank) in events
    syncs = _edges(wl, DepKind.HOST_SYNC)
    copy = "Memcpy DtoH (Device -> Pageable)"
    assert (copy, "cudaMemcpyAsync", 0) in syncs  # the blocking copy
    assert (copy, "cudaStreamSynchronize", 0) in syncs
    assert (copy, "cudaDeviceSynchronize", 0) in syncs
    assert len(_edges(wl, DepKind.LAUNCH)) == 2 * 4
    assert len(wl.collectives) == 1 and wl.groups[0].ranks == (0, 1)
    assert CollectiveKind(int(wl.collectives.kind[0])) == CollectiveKind.ALL_REDUCE
    # The measured transfer is the last arrival's kernel: 88 - 68 µs.
    assert int(wl.collectives.measured_ns[0]) == 20 * US


@pytest.mark.parametrize("cuda_sync", [False, True])
def test_measured_durations_reproduce_the_measurement(cuda_sync: bool) -> None:
    job = _job(cuda_sync=cuda_sync)
    wl = workload_from_job(job)
    res = simulate(wl).result
    assert wl.measured_start_ns is not None and wl.measured_end_ns is not None
    assert np.array_equal(res.start_ns, wl.measured_start_ns)
    assert np.array_equal(res.end_ns, wl.measured_end_ns)
    pred = predicted_job(wl, res, job, int(wl.meta["origin_ns"]))
    for m, p in zip(job.traces, pred.traces, strict=True):
        assert np.array_equal(m.events.start_ns, p.events.start_ns)
        assert np.array_equal(m.events.dur_ns, p.events.dur_ns)
        assert p.steps.start_ns.tolist() == [0] and p.steps.end_ns.tolist() == [200 * US]
    assert pred.predicted


def _marker_elsewhere(*, launches: bool) -> Job:
    """``ProfilerStep#1`` (0-100 µs) on a thread that launches nothing; the kernel (10-40 µs)
    launched from another thread at 6 µs, or with no launch record."""
    b = TraceBuilder(0, source="rank0")
    marks = b.lane(LaneKind.CPU_THREAD, 1, 1, "main")
    worker = b.lane(LaneKind.CPU_THREAD, 1, 2, "autograd")
    s7 = b.gpu_stream(0, 7)
    b.event(EventKind.USER_ANNOTATION, "ProfilerStep#1", 0, 100 * US, marks)
    corr = 1 if launches else -1
    if launches:
        b.event(EventKind.RUNTIME, "cudaLaunchKernel", 6 * US, 2 * US, worker, correlation=corr)
    b.event(EventKind.KERNEL, "volta_sgemm_128x32_nt", 10 * US, 30 * US, s7, correlation=corr)
    b.step(1, 0, 100 * US)
    return Job((b.build(),), ClockAlignment("shared-host-clock", (0,), 0), 1, "synthetic")


@pytest.mark.parametrize("launches", [True, False])
def test_a_step_marked_on_a_thread_that_launches_nothing(launches: bool) -> None:
    # The step's end was mapped through the marker's own lane, which replays no op: the
    # replayed step ended where it began, 0 ns (-100%).
    job = _marker_elsewhere(launches=launches)
    wl = workload_from_job(job)
    res = simulate(wl).result
    pred = predicted_job(wl, res, job, int(wl.meta["origin_ns"]))
    steps = pred.traces[0].steps
    assert steps.start_ns.tolist() == [0] and steps.end_ns.tolist() == [100 * US]


def test_faster_communication_moves_the_dependent_work() -> None:
    job = _job()
    wl = workload_from_job(job)
    base = simulate(wl).result
    half = simulate(wl, comm_scale=0.5).result
    names = [wl.strings[int(n)] for n in wl.ops.name]
    add = [i for i, n in enumerate(names) if n.endswith(" add")]
    # The all-reduce takes 10 µs instead of 20: the add after it starts 10 µs earlier...
    assert [int(base.start_ns[i] - half.start_ns[i]) for i in add] == [10 * US, 10 * US]
    # ...and so do the copy and the blocking call that waits for it; the CPU's later calls
    # keep their gaps (the stream sync now waits for nothing).
    copy = [i for i, n in enumerate(names) if n.startswith("Memcpy")]
    assert [int(base.end_ns[i] - half.end_ns[i]) for i in copy] == [10 * US, 10 * US]
    spans, fast = (
        step_spans(wl, base.start_ns, base.end_ns),
        step_spans(wl, half.start_ns, half.end_ns),
    )
    assert all(fast[k] <= spans[k] for k in spans)


def test_a_rank_missing_a_collective_is_named() -> None:
    """Rank 1's all-reduce kernel is gone: the collective can never complete."""
    r1 = _rank(1, 50)
    ev = r1.events
    nccl = next(i for i in range(len(ev)) if r1.name(i) == NCCL)
    kind = ev.kind.copy()
    kind[nccl] = int(EventKind.INSTANT)
    events = EventTable(
        kind=kind, start_ns=ev.start_ns, dur_ns=ev.dur_ns, name=ev.name, cat=ev.cat,
        lane=ev.lane, correlation=ev.correlation, external_id=ev.external_id,
        args_blob=ev.args_blob, args_offsets=ev.args_offsets,
    )  # fmt: skip
    broken = Trace(
        rank=1, source="rank1", strings=r1.strings, events=events, lanes=r1.lanes,
        collectives=CollectiveTable.empty(), groups=r1.groups, steps=r1.steps,
        metadata=r1.metadata,
    )  # fmt: skip
    job = Job((_rank(0, 30), broken), ClockAlignment("shared-host-clock", (0, 0), 0), 2)
    wl = workload_from_job(job)
    with pytest.raises(SimulationError) as err:
        simulate(wl)
    text = err.value.one_line()
    assert "all_reduce" in text and "'0'" in text and "seq 0" in text
    assert "rank(s) 1 never arrive" in text and "arrived: 0" in text


def test_end_to_end_waits_only_on_cpu_calls() -> None:
    wl = workload_from_job(_job())
    dst = wl.deps.dst()
    e2e = wl.deps.mode == int(DepMode.END_TO_END)
    lanes = np.array([int(lane.kind) for lane in wl.lanes])[wl.ops.lane]
    assert np.all(lanes[dst[e2e]] == int(LaneKind.CPU_THREAD))


def test_overlapping_ops_on_one_stream_get_their_own_lane() -> None:
    """A CUDA graph launch whose kernels overlap on the launch stream."""
    b = TraceBuilder(0, source="graph")
    cpu = b.lane(LaneKind.CPU_THREAD, 1, 1, "main")
    s7 = b.gpu_stream(0, 7)
    b.event(EventKind.RUNTIME, "cudaGraphLaunch", 0, 10 * US, cpu, correlation=5)
    for t0, dur in ((12, 20), (15, 4), (21, 6), (33, 2)):
        b.event(EventKind.KERNEL, f"k{t0}", t0 * US, dur * US, s7, correlation=5)
    job = Job((b.build(),), ClockAlignment("single-rank", (0,), 0), 1)
    wl = workload_from_job(job)
    names = [lane.name for lane in wl.lanes]
    assert "stream 7 (overlap 1)" in names and "stream 7 (overlap 2)" not in names
    res = simulate(wl).result
    assert np.array_equal(res.start_ns, wl.measured_start_ns)
    assert np.array_equal(res.end_ns, wl.measured_end_ns)
    pred = predicted_job(wl, res, job, int(wl.meta["origin_ns"]))
    assert np.array_equal(pred.traces[0].events.start_ns, job.traces[0].events.start_ns)


def test_cuda_sync_records_of_a_real_trace() -> None:
    """HTA's critical-path sample records cudaEventRecord and cuda_sync waits: replay finds
    the cross-stream waits from them and reproduces the measurement."""
    from importers import kineto
    from tests.conftest import shared_path

    path = shared_path("data", "hta-tests", "critical_path", "alexnet")
    job = kineto.KinetoImporter().read([path])
    wl = workload_from_job(job)
    assert len(_edges(wl, DepKind.EVENT)) > 0 and len(_edges(wl, DepKind.HOST_SYNC)) > 0
    res = simulate(wl).result
    assert np.array_equal(res.end_ns, wl.measured_end_ns)


def test_the_lane_that_opens_each_step() -> None:
    """The first annotation (row order) on a CPU thread starting at each time; a GPU
    annotation at the same time does not count. One pass for all steps."""
    from echo_view.model import EventKind, LaneKind, TraceBuilder
    from echo_view.sim.replay.build import _annotation_lanes

    b = TraceBuilder(0)
    s7 = b.gpu_stream(0, 7)
    main = b.lane(LaneKind.CPU_THREAD, 1, 1)
    other = b.lane(LaneKind.CPU_THREAD, 1, 2)
    ua = EventKind.USER_ANNOTATION
    b.event(ua, "ProfilerStep#1", 0, 10, s7)  # a GPU lane: skipped
    b.event(ua, "ProfilerStep#1", 0, 10, other)
    b.event(ua, "ProfilerStep#1", 0, 10, main)
    b.event(ua, "ProfilerStep#2", 10, 10, main)
    b.event(EventKind.CPU_OP, "aten::mm", 20, 5, other)  # not an annotation
    trace = b.build()
    lanes = _annotation_lanes(trace)
    assert set(lanes) == {0, 10}
    assert trace.lanes[lanes[0]].tid == 2 and trace.lanes[lanes[10]].tid == 1


def _first_fit_by_scan(rows: list[int], lane: list[int], start: list[int], end: list[int]) -> Any:
    """First fit by scanning every sub-lane: the definition the heaps must reproduce."""
    out: dict[int, list[list[int]]] = {}
    ends: dict[int, list[int]] = {}
    for r in rows:
        subs, last = out.setdefault(lane[r], []), ends.setdefault(lane[r], [])
        k = next((k for k, e in enumerate(last) if e <= start[r]), len(subs))
        if k == len(subs):
            subs.append([])
            last.append(0)
        subs[k].append(r)
        last[k] = end[r]
    return out


def test_overlap_split_is_first_fit() -> None:
    # One stream, by hand: a [0, 10) b [2, 5) c [5, 8) d [6, 12) e [10, 11) f [12, 12).
    # a -> 0; b -> 1 (0 busy until 10); c -> 1 (free at 5); d -> 2 (1 busy until 8); e -> 0
    # (free at 10, the lowest of 0 and 1); f -> 0 (e ended at 11, lowest of 0, 1, 2 free).
    start = np.array([0, 2, 5, 6, 10, 12])
    end = np.array([10, 5, 8, 12, 11, 12])
    got = build._split_overlaps(np.arange(6), np.zeros(6, dtype=np.int64), start, end)
    assert got == {0: [[0, 4, 5], [1, 2], [3]]}


def test_overlap_split_matches_the_scan_on_random_streams() -> None:
    rng = np.random.default_rng(7)
    for _ in range(200):
        n = int(rng.integers(1, 60))
        lane = rng.integers(0, 3, n)
        start = rng.integers(0, 40, n)
        end = start + rng.integers(0, 15, n)
        rows = np.lexsort((np.arange(n), start, lane))  # as the caller orders them
        want = _first_fit_by_scan(rows.tolist(), lane.tolist(), start.tolist(), end.tolist())
        assert build._split_overlaps(rows, lane, start, end) == want
