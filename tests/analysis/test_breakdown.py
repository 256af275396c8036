"""Breakdown on hand-built traces; every expected number is worked out in the comments."""

from __future__ import annotations

import numpy as np

from echo_view.analysis.breakdown import COMM, COMPUTE, MEMORY, breakdown, gpu_work
from echo_view.model import CollectiveKind, EventKind, LaneKind, Trace, TraceBuilder

NCCL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"


def _two_step_trace() -> Trace:
    """Two ProfilerSteps, streams 7 (compute, copies) and 20 (NCCL), GPU lagging the CPU."""
    b = TraceBuilder(3)
    cpu = b.lane(LaneKind.CPU_THREAD, 1, 1)
    s7 = b.gpu_stream(0, 7)
    s20 = b.gpu_stream(0, 20)
    b.event(EventKind.USER_ANNOTATION, "ProfilerStep#1", 0, 1000, cpu)
    b.event(EventKind.USER_ANNOTATION, "ProfilerStep#2", 1000, 1000, cpu)
    gpu = [
        # corr, launch at, kind, name, stream, start, end
        (1, 100, EventKind.KERNEL, "gemm", s7, 200, 500),
        (2, 150, EventKind.KERNEL, NCCL, s20, 300, 900),
        (3, 160, EventKind.MEMCPY, "Memcpy HtoD (Pageable -> Device)", s7, 500, 560),
        (4, 170, EventKind.KERNEL, "gemm", s7, 600, 700),
        (5, 800, EventKind.MEMSET, "Memset (Device)", s7, 950, 1000),
        (6, 900, EventKind.KERNEL, "gemm", s7, 1050, 1150),
        (7, 1010, EventKind.KERNEL, NCCL, s20, 1100, 1400),
        (8, 1020, EventKind.KERNEL, "gemm", s7, 1300, 1350),
        (9, 1030, EventKind.MEMCPY, "Memcpy DtoH (Device -> Pageable)", s7, 1500, 1600),
    ]
    for corr, at, kind, name, lane, start, end in gpu:
        b.event(EventKind.RUNTIME, "cudaLaunchKernel", at, 5, cpu, correlation=corr)
        row = b.event(kind, name, start, end - start, lane, correlation=corr)
        if name == NCCL:
            b.collective(row, CollectiveKind.ALL_REDUCE, nbytes=4096)
    return b.build()


def test_two_streams_overlap_copies_and_gaps() -> None:
    bd = breakdown(_two_step_trace())
    assert bd.rank == 3 and bd.rule == "profiler_step"
    assert bd.step.tolist() == [1, 2]
    assert bd.device.tolist() == [0, 0]
    # gpu_end: step 1's last launched work (corr 6) ends at 1150; step 2's (corr 9) at 1600.
    assert bd.gpu_end_ns.tolist() == [1150, 1600]
    # windows: [0, max(1000, 1150)) and [max(1000, 1150), max(2000, 1600)).
    assert bd.window_start_ns.tolist() == [0, 1150]
    assert bd.window_end_ns.tolist() == [1150, 2000]
    assert bd.cpu_ns.tolist() == [1000, 1000]
    # Step 1, window [0, 1150):
    #   compute  [200,500) [600,700) [1050,1150)                  = 300 + 100 + 100 = 500
    #   comm     [300,900) and step 2's NCCL clipped [1100,1150)  = 600 + 50        = 650
    #   exposed  comm minus compute: [500,600) [700,900)          = 100 + 200       = 300
    #   memory   memcpy [500,560) runs under NCCL -> not memory; memset [950,1000)  = 50
    #   idle     [0,200) [900,950) [1000,1050)                    = 200 + 50 + 50   = 300
    # Step 2, window [1150, 2000):
    #   compute  [1300,1350) = 50; comm [1150,1400) = 250; exposed 250 - 50 = 200
    #   memory   [1500,1600) = 100; idle [1400,1500) [1600,2000) = 100 + 400 = 500
    assert bd.compute_ns.tolist() == [500, 50]
    assert bd.comm_ns.tolist() == [650, 250]
    assert bd.exposed_comm_ns.tolist() == [300, 200]
    assert bd.memory_ns.tolist() == [50, 100]
    assert bd.idle_ns.tolist() == [300, 500]
    total = bd.compute_ns + bd.exposed_comm_ns + bd.memory_ns + bd.idle_ns
    assert (total == bd.window_ns).all()


def test_labels_come_from_names_and_the_collective_table() -> None:
    b = TraceBuilder(0)
    s = b.gpu_stream(0, 7)
    b.event(EventKind.KERNEL, "void at::native::vectorized_elementwise_kernel<4>", 0, 10, s)
    b.event(EventKind.KERNEL, "ncclDevKernel_AllGather_RING_LL(x)", 10, 10, s)
    custom = b.event(EventKind.KERNEL, "dpsk::ep::internode::dispatch", 20, 10, s)
    b.collective(custom, CollectiveKind.ALL_TO_ALL)
    b.event(EventKind.MEMSET, "Memset (Device)", 30, 10, s)
    b.event(EventKind.GPU_ANNOTATION, "## forward ##", 0, 50, s)
    work = gpu_work(b.build())
    assert work.rows.tolist() == [0, 1, 2, 3]
    assert work.labels.tolist() == [COMPUTE, COMM, COMM, MEMORY]


def test_devices_are_broken_down_separately() -> None:
    b = TraceBuilder(0)
    cpu = b.lane(LaneKind.CPU_THREAD, 1, 1)
    d0 = b.gpu_stream(0, 7)
    d1 = b.gpu_stream(1, 7)
    b.event(EventKind.USER_ANNOTATION, "ProfilerStep#0", 0, 100, cpu)
    b.event(EventKind.KERNEL, "gemm", 0, 60, d0)
    b.event(EventKind.KERNEL, NCCL, 20, 100, d1)
    bd = breakdown(b.build())
    # One window [0, max(100, 120)) for both devices (gpu_end over all devices = 120).
    assert bd.device.tolist() == [0, 1]
    assert bd.window_ns.tolist() == [120, 120]
    # device 0: gemm [0,60) -> compute 60, idle 60; device 1: NCCL [20,120) alone -> exposed.
    assert bd.compute_ns.tolist() == [60, 0]
    assert bd.exposed_comm_ns.tolist() == [0, 100]
    assert bd.idle_ns.tolist() == [60, 20]


def test_trace_without_gpu_work_has_no_rows() -> None:
    b = TraceBuilder(0)
    cpu = b.lane(LaneKind.CPU_THREAD, 1, 1)
    b.event(EventKind.CPU_OP, "aten::mm", 0, 100, cpu)
    bd = breakdown(b.build())
    assert len(bd) == 0
    assert bd.rule == "window"


def test_same_label_on_two_streams_counts_once() -> None:
    b = TraceBuilder(0)
    cpu = b.lane(LaneKind.CPU_THREAD, 1, 1)
    s1 = b.gpu_stream(0, 1)
    s2 = b.gpu_stream(0, 2)
    b.event(EventKind.USER_ANNOTATION, "ProfilerStep#0", 0, 100, cpu)
    b.event(EventKind.KERNEL, "a", 10, 50, s1)
    b.event(EventKind.KERNEL, "b", 30, 50, s2)
    bd = breakdown(b.build())
    # union [10, 80) = 70, not 50 + 50
    assert bd.compute_ns.tolist() == [70]
    assert bd.idle_ns.tolist() == [30]
    assert np.array_equal(bd.busy_ns, np.array([70]))


def test_deepep_all_to_all_is_communication_in_the_deepseek_profile() -> None:
    """DeepSeek-V3's published H800 profile (EP64): DeepEP's dispatch/combine kernels are
    communication, mostly hidden behind the grouped GEMMs (test data only, no licence)."""
    from echo_view.loading import read_job
    from tests.conftest import shared_path

    job = read_job([shared_path("data", "deepseek-profile-data", "train.json.gz")])
    trace = job.traces[0]
    kinds = {trace.collective_kind(i) for i in range(len(trace.collectives))}
    assert kinds == {CollectiveKind.ALL_TO_ALL} and len(trace.collectives) == 32
    b = breakdown(trace)
    comm, exposed = int(b.comm_ns.sum()), int(b.exposed_comm_ns.sum())
    # 32 DeepEP kernels, 113.03 ms of GPU time, of which 4.16 ms not overlapped by compute.
    assert 113.0e6 < comm < 113.1e6
    assert 4.1e6 < exposed < 4.2e6
