"""DataFrame columns on a handmade two-rank job whose every value is known: aligned µs times,
steps by launch, HTA kernel types, collective columns from the collective table and from NCCL
kernel names."""

from __future__ import annotations

import pytest

from echo_view.api import frames
from echo_view.model import ClockAlignment, CollectiveKind, EventKind, Job, LaneKind, TraceBuilder

pytest.importorskip("pandas", reason="the API's DataFrames need the analysis extra (pandas)")

NCCL = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def job() -> Job:
    traces = []
    for rank in (0, 1):
        b = TraceBuilder(rank, source=f"rank{rank}")
        cpu = b.lane(LaneKind.CPU_THREAD, 10 + rank, 10)
        gpu = b.gpu_stream(rank, 7)
        b.event(EventKind.USER_ANNOTATION, "ProfilerStep#3", 1_000, 10_000, cpu)
        b.event(EventKind.RUNTIME, "cudaLaunchKernel", 2_000, 500, cpu, correlation=1)
        b.event(EventKind.KERNEL, "gemm", 10_500, 1_500, gpu, correlation=1)  # after the step
        b.event(EventKind.RUNTIME, "cudaLaunchKernel", 3_000, 500, cpu, correlation=2)
        row = b.event(EventKind.KERNEL, "ncclKernel_AllReduce", 4_000, 2_000, gpu, correlation=2)
        group = b.group("0", (0, 1), "default_pg")
        b.collective(row, CollectiveKind.ALL_REDUCE, nbytes=4096, dtype="Float", group=group,
                     seq=5, algorithm="RING", protocol="LL")  # fmt: skip
        b.event(EventKind.KERNEL, NCCL, 7_000, 1_000, gpu)  # NCCL kernel the table lacks
        b.event(EventKind.MEMCPY, "Memcpy DtoH", 12_000, 250, gpu)
        traces.append(b.build())
    return Job(tuple(traces), ClockAlignment("test", (0, 500), 0), world_size=2)


def test_events_are_on_the_aligned_clock_with_steps_by_launch() -> None:
    ev = frames.events_frame(job())
    assert len(ev) == 14
    r1 = ev[ev["rank"] == 1].set_index("name")
    # rank 1 is 500 ns later on the job's clock; 0 µs is the job's first event (rank 0's step)
    assert r1.loc["ProfilerStep#3", "ts"] == 0.5
    assert r1.loc["gemm", "end"] == pytest.approx((10_500 + 500 - 1_000 + 1_500) / 1e3)
    assert r1.loc["gemm", "start_ns"] == 10_500  # the trace's own clock
    # launched inside the step, run after it: still step 3; a copy with no launch: outside
    assert r1.loc["gemm", "iteration"] == 3
    assert r1.loc["Memcpy DtoH", "iteration"] == -1
    assert r1.loc["cudaLaunchKernel", "iteration"].tolist() == [3, 3]
    assert r1.loc["gemm", "stream"] == 7 and r1.loc["gemm", "device"] == 1
    assert r1.loc["ProfilerStep#3", "stream"] == -1 and r1.loc["ProfilerStep#3", "pid"] == 11


def test_kernels_carry_htas_kernel_types() -> None:
    k = frames.kernels_frame(job()).set_index("name")
    assert k.loc["gemm", "kernel_type"].tolist() == ["COMPUTATION"] * 2
    assert k.loc["ncclKernel_AllReduce", "kernel_type"].tolist() == ["COMMUNICATION"] * 2
    assert k.loc[NCCL, "kernel_type"].tolist() == ["COMMUNICATION"] * 2
    assert k.loc["Memcpy DtoH", "kernel_type"].tolist() == ["MEMORY"] * 2


def test_collectives_from_the_table_and_from_kernel_names() -> None:
    c = frames.collectives_frame(job())
    assert len(c) == 4
    listed = c[c["collective"] == "all_reduce"].iloc[0]
    assert listed["bytes"] == 4096 and listed["msg_dtype"] == "Float"
    assert listed["process_group_name"] == "0" and listed["process_group_desc"] == "default_pg"
    assert listed["group_size"] == 2 and listed["process_group_ranks"] == (0, 1)
    assert (listed["seq"], listed["algorithm"], listed["protocol"]) == (5, "RING", "LL")
    assert listed["gpu_dur_ns"] == 2_000
    named = c[c["collective"] == "all_gather"].iloc[0]
    assert named["bytes"] == -1 and named["group_size"] == -1 and named["msg_dtype"] == ""
    assert named["gpu_dur_ns"] == 1_000 and named["seq"] == -1


def test_a_summary_without_steps_has_its_columns() -> None:
    # A job with no GPU steps gave a frame of shape (0, 0): steps["step_ns"] was a KeyError.
    from dataclasses import replace

    from echo_view.analysis.summary import STEP_FIELDS, summarize

    result = summarize(job())
    empty = frames.summary_frame(replace(result, rows=[]))
    assert empty.shape == (0, 4 + len(STEP_FIELDS)) and "step_ns" in empty.columns
    assert list(frames.summary_frame(result).columns) == list(empty.columns)


def test_summary_takes_a_path_as_diff_does() -> None:
    import echo_view as ev
    from tests.conftest import SAMPLES

    by_path = ev.summary(SAMPLES / "hta_sampled_128")
    assert by_path.equals(ev.summary(ev.load(SAMPLES / "hta_sampled_128")))
