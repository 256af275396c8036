"""HTA's temporal-breakdown rules (window, step filter, µs rounding) on a hand-built trace."""

from __future__ import annotations

from echo_view.analysis.hta_compat import hta_breakdown, hta_job_breakdown
from echo_view.model import ClockAlignment, EventKind, Job, LaneKind, Trace, TraceBuilder

NCCL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"


def _trace(steps: int = 3) -> Trace:
    b = TraceBuilder(0)
    cpu = b.lane(LaneKind.CPU_THREAD, 1, 1)
    s7 = b.gpu_stream(0, 7)
    s20 = b.gpu_stream(0, 20)
    for n in range(steps):
        b.event(EventKind.USER_ANNOTATION, f"ProfilerStep#{n + 1}", n * 1_000_000, 1_000_000, cpu)
    for corr, at, name, lane, start, end in [
        (1, 100_000, "gemm", s7, 200_300, 500_700),
        (2, 150_000, NCCL, s20, 300_000, 900_000),
        (3, 1_100_000, "gemm", s7, 1_200_000, 1_300_000),
        (4, 2_100_000, "gemm", s7, 2_200_000, 2_300_000),  # launched in the last step
    ]:
        b.event(EventKind.RUNTIME, "cudaLaunchKernel", at, 5_000, cpu, correlation=corr)
        b.event(EventKind.KERNEL, name, start, end - start, lane, correlation=corr)
    b.event(EventKind.KERNEL, "orphan", 2_400_000, 100_000, s7)  # no launch in the trace
    return b.build()


def test_filtered_and_rounded_like_hta() -> None:
    r = hta_breakdown(_trace(), filter_steps=True, round_to_us=True)
    # kept: corr 1-3. gemm rounds to [201 µs, 500 µs).
    assert r.events == 3
    # window [201_000, 1_300_000)
    assert r.window_ns == 1_099_000
    # compute [201k,500k) + [1.2M,1.3M) = 299_000 + 100_000
    assert r.compute_ns == 399_000
    # union [201k,900k) + [1.2M,1.3M) = 799_000 -> idle 300_000
    assert r.idle_ns == 300_000
    # only NCCL runs on [500k, 900k)
    assert r.non_compute_ns == 400_000
    assert (r.comm_ns, r.overlap_ns) == (600_000, 200_000)
    assert round(r.overlap_pct, 4) == round(100 * 200_000 / 600_000, 4)


def test_not_rounded_keeps_nanoseconds() -> None:
    r = hta_breakdown(_trace(), filter_steps=True, round_to_us=False)
    assert r.window_ns == 1_300_000 - 200_300
    assert r.compute_ns == (500_700 - 200_300) + 100_000


def test_one_step_name_means_no_filter() -> None:
    job = Job((_trace(steps=1),), ClockAlignment("single-rank", (0,), 0))
    (r,) = hta_job_breakdown(job)
    # all five kernels, window [201_000, 2_500_000)
    assert r.events == 5
    assert r.window_ns == 2_500_000 - 201_000
