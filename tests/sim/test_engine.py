"""The engine on hand-computed cases: launches, streams, collectives, blocked calls, chains,
and the errors for collectives that never complete and dependency cycles."""

from __future__ import annotations

import numpy as np
import pytest

from echo_view.errors import SimulationError
from echo_view.model import CollectiveKind, LaneKind
from echo_view.model.workload import DepKind, DepMode, Workload
from echo_view.model.workload_builder import WorkloadBuilder
from echo_view.sim import MeasuredCompute, engine, predicted_job, simulate

S2S, E2S, E2E = DepMode.START_TO_START, DepMode.END_TO_START, DepMode.END_TO_END


def _two_ranks(kernel_ns: tuple[int, int]) -> tuple[Workload, dict[str, list[int]]]:
    """Per rank: launch (5) -> kernel, launch2 -> all-reduce, then a sync on it."""
    b = WorkloadBuilder(world_size=2)
    g = b.group([0, 1])
    c = b.collective(CollectiveKind.ALL_REDUCE, g, nbytes=100, measured_ns=50)
    ids: dict[str, list[int]] = {"launch": [], "kernel": [], "launch2": [], "coll": [], "sync": []}
    for rank, d in enumerate(kernel_ns):
        cpu = b.lane(rank, LaneKind.CPU_THREAD, "main")
        gpu = b.lane(rank, LaneKind.GPU_STREAM, "stream 7")
        launch = b.op(cpu, "cudaLaunchKernel", 5, release_ns=0)
        kernel = b.op(gpu, "gemm", d)
        b.dep(launch, kernel, mode=S2S, lag_ns=2, kind=DepKind.LAUNCH)
        launch2 = b.op(cpu, "cudaLaunchKernel", 5, gap_ns=3)
        part = b.participant(gpu, c)
        b.dep(launch2, part, mode=S2S, lag_ns=2, kind=DepKind.LAUNCH)
        sync = b.op(cpu, "cudaStreamSynchronize", 1, gap_ns=1)
        b.dep(part, sync, mode=E2E, lag_ns=4, kind=DepKind.HOST_SYNC)
        for k, v in zip(ids, (launch, kernel, launch2, part, sync), strict=True):
            ids[k].append(v)
    return b.build(), ids


def test_hand_computed_two_ranks() -> None:
    wl, ids = _two_ranks((10, 30))
    res = simulate(wl).result
    start, end = res.start_ns.tolist(), res.end_ns.tolist()
    # Rank 0: launch 0-5, kernel 2-12, launch2 8-13, ready for the all-reduce at 12.
    assert (start[ids["kernel"][0]], end[ids["kernel"][0]]) == (2, 12)
    assert (start[ids["launch2"][0]], end[ids["launch2"][0]]) == (8, 13)
    assert start[ids["coll"][0]] == 12
    # Rank 1's kernel ends at 32: the all-reduce starts then and lasts its measured 50.
    assert start[ids["coll"][1]] == 32
    assert res.coll_start_ns.tolist() == [32] and res.coll_end_ns.tolist() == [82]
    assert end[ids["coll"][0]] == end[ids["coll"][1]] == 82
    # The sync starts after launch2 and its gap (14) and returns 4 after the all-reduce.
    assert [start[i] for i in ids["sync"]] == [14, 14]
    assert [end[i] for i in ids["sync"]] == [86, 86]


@pytest.mark.parametrize("kernel_ns", [10**16, 3 * 10**15])
def test_durations_past_146_years_are_a_simulation_error(kernel_ns: int) -> None:
    """A scale factor that takes an op past int64 (10^16 ns x 1,000: the cast used to wrap
    around to a negative duration and end in a ValueError) or the ops past 2^62 ns in all
    (2 x 3 x 10^18 ns) is a one-line error, not a wrong time; unscaled they simulate."""
    wl, _ = _two_ranks((kernel_ns, kernel_ns))
    assert simulate(wl).result.end_ns.max() > kernel_ns
    with pytest.raises(SimulationError, match="146 years"):
        simulate(wl, compute=MeasuredCompute(scale={"all": 1000}))


def test_sync_that_does_not_block_takes_its_own_time() -> None:
    b = WorkloadBuilder()
    cpu = b.lane(0, LaneKind.CPU_THREAD, "main")
    gpu = b.lane(0, LaneKind.GPU_STREAM, "s")
    launch = b.op(cpu, "launch", 5, release_ns=100)
    kernel = b.op(gpu, "k", 3)
    b.dep(launch, kernel, mode=S2S, lag_ns=1)
    sync = b.op(cpu, "sync", 7, gap_ns=50)
    b.dep(kernel, sync, mode=E2E, lag_ns=2)
    res = simulate(b.build()).result
    assert (int(res.start_ns[kernel]), int(res.end_ns[kernel])) == (101, 104)
    assert (int(res.start_ns[sync]), int(res.end_ns[sync])) == (155, 162)


def test_blocking_launch_waits_for_its_own_copy() -> None:
    """A launch call that returns after its copy (cudaMemcpy to pageable memory): the copy
    starts during the call, the call ends after the copy."""
    b = WorkloadBuilder()
    cpu = b.lane(0, LaneKind.CPU_THREAD, "main")
    gpu = b.lane(0, LaneKind.GPU_STREAM, "s")
    busy = b.op(gpu, "long kernel", 100, release_ns=0)
    call = b.op(cpu, "cudaMemcpy", 3, release_ns=10)
    copy = b.op(gpu, "Memcpy DtoH", 4)
    b.dep(call, copy, mode=S2S, lag_ns=2, kind=DepKind.LAUNCH)
    b.dep(copy, call, mode=E2E, lag_ns=1, kind=DepKind.HOST_SYNC)
    after = b.op(cpu, "next", 1, gap_ns=5)
    res = simulate(b.build()).result
    assert int(res.end_ns[busy]) == 100
    assert (int(res.start_ns[copy]), int(res.end_ns[copy])) == (100, 104)
    assert (int(res.start_ns[call]), int(res.end_ns[call])) == (10, 105)
    assert int(res.start_ns[after]) == 110


def test_chain_of_kernels_is_timed_exactly() -> None:
    """Kernels with no outside dependency are coarsened into one chain (and the op that waits
    on the last one, its only successor, joins it)."""
    b = WorkloadBuilder()
    gpu = b.lane(0, LaneKind.GPU_STREAM, "s")
    other = b.lane(0, LaneKind.GPU_STREAM, "t")
    first = b.op(gpu, "k0", 10, release_ns=7)
    rest = [b.op(gpu, f"k{i}", i, gap_ns=2) for i in range(1, 6)]
    waiter = b.op(other, "w", 1, release_ns=0)
    b.dep(rest[-1], waiter)
    wl = b.build()
    # k0 -> k1 -> ... -> k5 -> w: six links, timed inline.
    assert engine._Graph(wl, wl.ops.gap_ns).chained == 6
    res = simulate(wl).result
    t, expect = 17, []
    for i in range(1, 6):
        expect.append((t + 2, t + 2 + i))
        t = t + 2 + i
    assert [(int(res.start_ns[j]), int(res.end_ns[j])) for j in rest] == expect
    assert int(res.start_ns[first]) == 7
    assert int(res.start_ns[waiter]) == t


def test_ranks_absent_from_the_workload_arrive_on_time() -> None:
    b = WorkloadBuilder(world_size=4)
    g = b.group([0, 1, 2, 3])
    c = b.collective(CollectiveKind.ALL_GATHER, g, measured_ns=10)
    for rank, t in ((0, 5), (1, 8)):
        gpu = b.lane(rank, LaneKind.GPU_STREAM, "s")
        b.participant(gpu, c, release_ns=t)
    res = simulate(b.build()).result
    assert res.coll_start_ns.tolist() == [8] and res.coll_end_ns.tolist() == [18]
    assert res.start_ns.tolist() == [5, 8]


def test_missing_participant_is_named_before_running() -> None:
    b = WorkloadBuilder(world_size=3)
    g = b.group([0, 1, 2], name="pg0")
    c = b.collective(CollectiveKind.ALL_REDUCE, g, seq=7, measured_ns=10)
    for rank in (0, 1, 2):
        gpu = b.lane(rank, LaneKind.GPU_STREAM, "s")
        if rank != 2:
            b.participant(gpu, c)
        else:
            b.op(gpu, "k", 5)
    with pytest.raises(SimulationError) as err:
        simulate(b.build())
    text = err.value.one_line()
    assert "all_reduce" in text and "'pg0'" in text and "seq 7" in text
    assert "rank(s) 2 never arrive" in text and "arrived: 0, 1" in text
    assert "\n" not in text


def test_crossed_collective_order_is_reported_not_hung() -> None:
    """Rank 0 issues A then B, rank 1 B then A, on one stream each: neither can finish."""
    b = WorkloadBuilder(world_size=2)
    g = b.group([0, 1])
    a = b.collective(CollectiveKind.ALL_REDUCE, g, seq=0, measured_ns=10)
    z = b.collective(CollectiveKind.BROADCAST, g, seq=1, measured_ns=10)
    s0 = b.lane(0, LaneKind.GPU_STREAM, "s")
    s1 = b.lane(1, LaneKind.GPU_STREAM, "s")
    b.participant(s0, a, release_ns=0)
    b.participant(s0, z)
    b.participant(s1, z, release_ns=0)
    b.participant(s1, a)
    with pytest.raises(SimulationError) as err:
        simulate(b.build())
    text = str(err.value)
    assert "never completes" in text and "never arrive" in text
    assert "all_reduce" in text or "broadcast" in text


def test_dependency_cycle_is_an_error() -> None:
    b = WorkloadBuilder()
    x = b.op(b.lane(0, LaneKind.GPU_STREAM, "s"), "x", 1)
    y = b.op(b.lane(0, LaneKind.GPU_STREAM, "t"), "y", 1)
    b.dep(x, y)
    b.dep(y, x)
    with pytest.raises(SimulationError, match="cycle"):
        simulate(b.build())


def test_same_input_same_output_and_scaling() -> None:
    wl, _ = _two_ranks((10, 30))
    first = simulate(wl).result
    assert first.identical(simulate(wl).result)
    half = simulate(wl, compute=MeasuredCompute({"all": 0.5})).result
    # Rank 1's kernel (30 -> 15) is the last arrival: the all-reduce starts at 2 + 15.
    assert half.coll_start_ns.tolist() == [17]
    assert np.all(half.end_ns <= first.end_ns)


def test_bad_lengths_are_rejected() -> None:
    wl, _ = _two_ranks((10, 30))
    with pytest.raises(ValueError, match="dur_ns"):
        engine.run(wl, np.zeros(3, dtype=np.int64), np.zeros(1, dtype=np.int64))


def test_predicted_job_of_a_workload_without_a_source() -> None:
    wl, _ = _two_ranks((10, 30))
    res = simulate(wl).result
    job = predicted_job(wl, res, origin_ns=1_000)
    assert job.predicted and job.ranks == (0, 1)
    for trace in job.traces:
        ev = trace.events
        assert len(ev) == 5 and len(trace.collectives) == 1
        mine = [i for i in range(len(wl)) if int(wl.ops.rank[i]) == trace.rank]
        assert ev.start_ns.tolist() == [int(res.start_ns[i]) + 1_000 for i in mine]
        assert (ev.start_ns + ev.dur_ns).tolist() == [int(res.end_ns[i]) + 1_000 for i in mine]
        # Launch dependencies become launch -> kernel flows.
        assert len(trace.flows) == 2
        assert trace.groups[0].ranks == (0, 1)
