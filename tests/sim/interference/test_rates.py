"""Interference in the engine: the rate arithmetic on hand-computed cases, collectives whose end
is unknown until the last peer arrives, and chain coarsening kept exact."""

from __future__ import annotations

import numpy as np

from echo_view.model import CollectiveKind, LaneKind
from echo_view.model.workload import CLASS_COLLECTIVE, CLASS_GEMM, DepMode, Workload
from echo_view.model.workload_builder import WorkloadBuilder
from echo_view.sim import engine
from echo_view.sim.interference.rates import RateHook

US = 1_000


def _kernel_and_comm(comm_start: int, comm_dur: int) -> tuple[Workload, int, int]:
    """One GPU: kernel A (100 µs solo) on stream 7 from t=0, a communication op on stream 20."""
    b = WorkloadBuilder()
    s7 = b.lane(0, LaneKind.GPU_STREAM, "stream 7", device=0)
    s20 = b.lane(0, LaneKind.GPU_STREAM, "stream 20", device=0)
    a = b.op(s7, "gemm", 100 * US, op_class=CLASS_GEMM, release_ns=0)
    c = b.op(s20, "ncclKernel_SendRecv", comm_dur, op_class=CLASS_COLLECTIVE, release_ns=comm_start)
    return b.build(), a, c


def _run(wl: Workload, slowdown: list[float], **kw: object) -> tuple[list[int], list[int]]:
    dur = wl.ops.dur_ns
    hook = RateHook(wl, slowdown, dur)
    res = engine.run(wl, dur, np.zeros(len(wl.collectives), dtype=np.int64), rates=hook, **kw)  # type: ignore[arg-type]
    return res.start_ns.tolist(), res.end_ns.tolist()


def test_two_kernels_by_hand() -> None:
    # A runs alone 0-20 µs (20 µs of work), beside the comm 20-60 µs at 1/1.5 of its speed
    # (40 / 1.5 = 26.667 µs of work), then alone: 100 - 20 - 26.667 = 53.333 µs more.
    # End: 60 + 53.333 = 113.333 µs.
    wl, a, c = _kernel_and_comm(20 * US, 40 * US)
    start, end = _run(wl, [1.5, 1.0])
    assert (start[a], end[a]) == (0, 113_333)
    assert (start[c], end[c]) == (20 * US, 60 * US)  # communication is not slowed


def test_no_overlap_and_no_slowdown_change_nothing() -> None:
    wl, a, _ = _kernel_and_comm(150 * US, 40 * US)  # comm after A ended
    assert _run(wl, [1.5, 1.0])[1][a] == 100 * US
    wl, a, _ = _kernel_and_comm(20 * US, 40 * US)
    assert _run(wl, [1.0, 1.0])[1][a] == 100 * US  # factor 1: not slowed


def test_comm_covering_the_whole_kernel() -> None:
    # Comm 0-1000 µs: A runs at half speed throughout, 100 µs of work take 200 µs.
    wl, a, _ = _kernel_and_comm(0, 1000 * US)
    assert _run(wl, [2.0, 1.0])[1][a] == 200 * US


def test_collective_end_unknown_until_last_peer() -> None:
    """Rank 0's all-reduce kernel starts at 10 µs and spins until rank 1 arrives at 50 µs; the
    transfer takes 20 µs, so rank 0 communicates 10-70 µs. Its kernel A (100 µs solo, s = 2)
    does 10 µs alone, 60 / 2 = 30 µs beside the collective, the last 60 µs alone: ends at 130."""
    b = WorkloadBuilder(world_size=2)
    g = b.group([0, 1])
    coll = b.collective(CollectiveKind.ALL_REDUCE, g, nbytes=1 << 20, measured_ns=20 * US)
    s7 = b.lane(0, LaneKind.GPU_STREAM, "stream 7", device=0)
    s20 = b.lane(0, LaneKind.GPU_STREAM, "stream 20", device=0)
    r1 = b.lane(1, LaneKind.GPU_STREAM, "stream 20", device=0)
    a = b.op(s7, "gemm", 100 * US, op_class=CLASS_GEMM, release_ns=0)
    p0 = b.participant(s20, coll, release_ns=10 * US)
    p1 = b.participant(r1, coll, release_ns=50 * US)
    wl = b.build()
    dur = wl.ops.dur_ns
    hook = RateHook(wl, [2.0, 1.0, 1.0], dur)
    res = engine.run(wl, dur, np.array([20 * US]), rates=hook)
    assert res.end_ns[p0] == res.end_ns[p1] == 70 * US
    assert (res.start_ns[a], res.end_ns[a]) == (0, 130 * US)
    # Without interference A ends at 100 µs.
    assert engine.run(wl, dur, np.array([20 * US])).end_ns[a] == 100 * US


def test_successor_waits_for_the_slowed_end() -> None:
    """B follows A on its stream; a 4x faster network shortens the overlap and B moves up.
    Comm 40 µs: A ends 113.333 (see the two-kernel case). Comm 10 µs: A does 20 alone,
    10 / 1.5 = 6.667 beside, 73.333 alone: ends at 103.333; B (50 µs, no comm left) after."""
    b = WorkloadBuilder()
    s7 = b.lane(0, LaneKind.GPU_STREAM, "stream 7", device=0)
    s20 = b.lane(0, LaneKind.GPU_STREAM, "stream 20", device=0)
    a = b.op(s7, "gemm", 100 * US, op_class=CLASS_GEMM, release_ns=0)
    nxt = b.op(s7, "gemm2", 50 * US, op_class=CLASS_GEMM)
    c = b.op(s20, "ncclKernel_SendRecv", 40 * US, op_class=CLASS_COLLECTIVE, release_ns=20 * US)
    wl = b.build()
    slow = [1.5, 1.5, 1.0]
    for comm_ns, a_end in ((40 * US, 113_333), (10 * US, 103_333)):
        dur = wl.ops.dur_ns.copy()
        dur[c] = comm_ns
        res = engine.run(wl, dur, np.zeros(0, dtype=np.int64), rates=RateHook(wl, slow, dur))
        assert res.end_ns[a] == a_end
        assert (res.start_ns[nxt], res.end_ns[nxt]) == (a_end, a_end + 50 * US)


def test_chain_coarsening_stays_exact_with_interference() -> None:
    """A run of kernels (a chain the engine would time inline) beside communication: the
    result is the same with and without coarsening, and differs from no interference."""
    b = WorkloadBuilder()
    s7 = b.lane(0, LaneKind.GPU_STREAM, "stream 7", device=0)
    s20 = b.lane(0, LaneKind.GPU_STREAM, "stream 20", device=0)
    ks = [b.op(s7, f"k{i}", (10 + i) * US, op_class=CLASS_GEMM, release_ns=0 if i == 0 else -1)
          for i in range(20)]  # fmt: skip
    prev = -1
    for i in range(5):
        c = b.op(s20, "ncclKernel_AllReduce", 15 * US, op_class=CLASS_COLLECTIVE,
                 release_ns=40 * US * i + 5 * US)  # fmt: skip
        if prev >= 0:
            b.dep(prev, c, mode=DepMode.END_TO_START)
        prev = c
    wl = b.build()
    slow = [1.3] * len(ks) + [1.0] * 5
    on = _run(wl, slow)
    assert _run(wl, slow, coarsen=False) == on
    off = engine.run(wl, wl.ops.dur_ns, np.zeros(0, dtype=np.int64))
    assert on[1][ks[-1]] > int(off.end_ns[ks[-1]])
