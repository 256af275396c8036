"""Links from the details pane: launch/kernel partners and collective peers."""

from __future__ import annotations

from echo_view.model import ClockAlignment, CollectiveKind, EventKind, Job, LaneKind, TraceBuilder
from echo_view.tui.details import collective_peers, describe, partners

NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def _job(counts: list[int], grouped: bool) -> Job:
    """Ranks with ``counts[r]`` all-reduces each (in a group "dp" of all ranks, with sequence
    numbers, when ``grouped``), each launched from the CPU."""
    traces = []
    for rank, n in enumerate(counts):
        b = TraceBuilder(rank)
        cpu = b.lane(LaneKind.CPU_THREAD, 1, 1)
        s = b.gpu_stream(0, 13)
        g = b.group("dp", tuple(range(len(counts)))) if grouped else -1
        for i in range(n):
            t = 1000 * i + 10 * rank
            b.event(EventKind.RUNTIME, "cudaLaunchKernel", t, 5, cpu, correlation=i + 1)
            k = b.event(EventKind.KERNEL, NCCL, t + 50, 100, s, correlation=i + 1)
            seq = i if grouped else -1
            b.collective(k, CollectiveKind.ALL_REDUCE, group=g, seq=seq)
        traces.append(b.build())
    return Job(tuple(traces), ClockAlignment("none", (0,) * len(counts), 0), len(counts), "j")


def test_partners_link_launch_and_kernel() -> None:
    job = _job([2], grouped=True)
    t = job.traces[0]
    launch, kernel = 2, 3  # second iteration
    assert [(lk.row, lk.why) for lk in partners(t, 0, launch)] == [(kernel, "gpu")]
    assert [(lk.row, lk.why) for lk in partners(t, 0, kernel)] == [(launch, "launch")]


def test_peers_by_group_and_sequence() -> None:
    job = _job([3, 3, 3], grouped=True)
    peers = collective_peers(job, 0, int(job.traces[0].collectives.event[1]))
    assert [(p.trace, p.row, p.why) for p in peers] == [
        (1, int(job.traces[1].collectives.event[1]), "r1"),
        (2, int(job.traces[2].collectives.event[1]), "r2"),
    ]
    text, links = describe(job, 0, int(job.traces[0].collectives.event[1]), 0)
    assert "group 'dp' (3 ranks) · seq 1" in text.plain
    assert "peers: r1 +10 ns, r2 +20 ns" in text.plain
    assert links[0].why == "launch" and [lk.why for lk in links[1:]] == ["r1", "r2"]


def test_peers_by_order_only_when_every_rank_has_as_many() -> None:
    same = _job([3, 3], grouped=False)
    peers = collective_peers(same, 0, int(same.traces[0].collectives.event[2]))
    assert [(p.trace, p.row) for p in peers] == [(1, int(same.traces[1].collectives.event[2]))]
    assert (
        "group unknown" in describe(same, 0, int(same.traces[0].collectives.event[2]), 0)[0].plain
    )
    uneven = _job([3, 2], grouped=False)
    assert collective_peers(uneven, 0, int(uneven.traces[0].collectives.event[0])) == []


def test_a_start_before_the_origin_reads_minus() -> None:
    # On the diff's Timelines tab the origin is the aligned step's start: an event of the step
    # before read "start +-1.000 ms".
    job = _job([2], grouped=True)
    kernel = int(job.traces[0].collectives.event[1])  # starts at 1,050 ns
    assert "start +1.050 µs" in describe(job, 0, kernel, 0)[0].plain
    assert "start -950 ns" in describe(job, 0, kernel, 2_000)[0].plain
    # Its partner's time too: "[p] launch: cudaLaunchKernel at +-1.000 µs".
    assert "[p] launch: cudaLaunchKernel at -1.000 µs" in describe(job, 0, kernel, 2_000)[0].plain
    assert "[p] launch: cudaLaunchKernel at +1.000 µs" in describe(job, 0, kernel, 0)[0].plain
