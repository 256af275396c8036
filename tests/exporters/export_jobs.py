"""A hand-made 2-rank job with everything the Perfetto exporters must lay out.

Per rank: a child op that ends after its parent and a kernel that starts before the previous
kernel on its stream ends (both must move to an overlap lane); same-start nesting and an exact
duplicate (both must stay); launch -> kernel with and without a trace flow; an all-reduce with a
sequence number and an all-gather without one (matched by order); a forward -> backward flow and
one that points back in time (must be skipped); a zero-length slice, an instant, a counter, a
non-object ``args``, an awkward name; times on an absolute epoch clock, ranks offset by the
alignment.
"""

from __future__ import annotations

from echo_view.model import (
    ClockAlignment,
    CollectiveKind,
    EventKind,
    Job,
    LaneKind,
    Trace,
    TraceBuilder,
)

T0 = 1_700_000_000_123_456_789  # absolute epoch ns: far beyond a double's exact-µs range
OFFSETS = (0, -250)
AWKWARD = 'name "quoted" \\ ünï\ttab'
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
ALLGATHER = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def handmade_rank(rank: int) -> Trace:
    b = TraceBuilder(rank, source=f"rank{rank}.handmade")
    main = b.lane(LaneKind.CPU_THREAD, 4000 + rank, 4100 + rank)
    bwd = b.lane(LaneKind.CPU_THREAD, 4000 + rank, 4200 + rank)
    s7 = b.gpu_stream(0, 7)
    s13 = b.gpu_stream(0, 13)
    t = T0 + 1000 * rank  # each rank's clock reads a little differently

    def ev(kind: EventKind, name: str, start: int, dur: int, lane: int, **kw: object) -> int:
        return b.event(kind, name, t + start, dur, lane, **kw)  # type: ignore[arg-type]

    ev(EventKind.USER_ANNOTATION, "ProfilerStep#1", 0, 10_000, main)
    ev(EventKind.CPU_OP, "aten::linear", 100, 1_000, main, args={"External id": 1})
    ev(EventKind.CPU_OP, "aten::addmm", 500, 1_100, main, args={"External id": 2})  # past parent
    ev(EventKind.CPU_OP, "outer", 2_000, 1_000, main)
    ev(EventKind.CPU_OP, "inner", 2_000, 500, main)  # same start: nests
    ev(EventKind.CPU_OP, "dupA", 3_100, 100, main)
    ev(EventKind.CPU_OP, "dupB", 3_100, 100, main)  # exact duplicate: nests
    launch = ev(EventKind.RUNTIME, "cudaLaunchKernel", 1_200, 50, main, correlation=11)
    gemm = ev(EventKind.KERNEL, "gemm", 1_300, 500, s7, correlation=11, args={"stream": 7})
    b.flow(launch, gemm, 11, "ac2g")
    ev(EventKind.RUNTIME, "cudaLaunchKernel", 1_260, 30, main, correlation=12)
    ev(EventKind.KERNEL, "relu", 1_790, 310, s7, correlation=12)  # starts before gemm ends
    ev(EventKind.RUNTIME, "cudaLaunchKernel", 3_300, 50, main, correlation=13)
    ar = ev(
        EventKind.KERNEL, ALLREDUCE, 4_000 + 300 * rank, 2_000 - 300 * rank, s13, correlation=13
    )
    ev(EventKind.RUNTIME, "cudaLaunchKernel", 3_400, 50, main, correlation=14)
    ag = ev(EventKind.KERNEL, ALLGATHER, 6_500 + 10 * rank, 400, s13, correlation=14)
    group = b.group("0", (0, 1), "default_pg")
    b.collective(ar, CollectiveKind.ALL_REDUCE, nbytes=4096, dtype="Float", group=group, seq=0)
    b.collective(ag, CollectiveKind.ALL_GATHER, nbytes=1024, group=group)  # no seq: by order
    fwd = ev(EventKind.CPU_OP, "aten::mul", 7_000, 100, main)
    back = ev(EventKind.CPU_OP, "MulBackward0", 8_000, 200, bwd)
    b.flow(fwd, back, 1, "fwdbwd")
    b.flow(back, fwd, 2, "fwdbwd")  # ends before it starts: skipped
    ev(EventKind.CPU_OP, "marker", 5_000, 0, main)  # zero-length slice
    ev(EventKind.CPU_OP, AWKWARD, 8_500, 10, main, args=b"[1, 2]")  # non-object args
    ev(EventKind.INSTANT, "iteration start", 50, 0, main)
    ev(EventKind.COUNTER, "GPU memory", 60, 0, main, args={"allocated": 1024, "reserved": 2048.5})
    b.step(1, t, t + 10_000, t + 9_000)
    return b.build()


def handmade_job() -> Job:
    traces = (handmade_rank(0), handmade_rank(1))
    return Job(traces, ClockAlignment("collective-end", OFFSETS, 120, "hand-made"), world_size=2)
