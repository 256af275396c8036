"""Job summary: ranks without GPU work, collectives the table does not list, top-N order."""

from __future__ import annotations

import pickle
from dataclasses import replace

import numpy as np

from echo_view.analysis.summary import rank_summary, summarize, summarize_ranks
from echo_view.model import (
    ClockAlignment,
    CollectiveKind,
    EventKind,
    Job,
    JobHead,
    LaneKind,
    Trace,
    TraceBuilder,
)


def _gpu_rank() -> Trace:
    b = TraceBuilder(0)
    cpu = b.lane(LaneKind.CPU_THREAD, 1, 1)
    s = b.gpu_stream(0, 7)
    b.event(EventKind.USER_ANNOTATION, "ProfilerStep#1", 0, 1000, cpu)
    b.event(EventKind.USER_ANNOTATION, "ProfilerStep#2", 1000, 3000, cpu)
    k = b.event(EventKind.KERNEL, "ncclDevKernel_AllGather_RING_LL(x)", 100, 200, s)
    b.collective(k, CollectiveKind.ALL_GATHER, nbytes=512)
    # an NCCL kernel the collective table does not list: kind from its name, bytes unknown
    b.event(EventKind.KERNEL, "ncclDevKernel_AllGather_RING_LL(x)", 1100, 300, s)
    b.event(EventKind.KERNEL, "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(x)", 1500, 50, s)
    b.event(EventKind.KERNEL, "gemm", 2000, 400, s)
    b.event(EventKind.KERNEL, "relu", 2500, 400, s)
    return b.build()


def _cpu_rank() -> Trace:
    b = TraceBuilder(1)
    cpu = b.lane(LaneKind.CPU_THREAD, 1, 1)
    b.event(EventKind.USER_ANNOTATION, "ProfilerStep#1", 0, 5000, cpu)
    return b.build()


def test_summary_rows_collectives_and_top() -> None:
    job = Job((_gpu_rank(), _cpu_rank()), ClockAlignment("none", (0, 0), 0), world_size=2)
    s = summarize(job, top=3)
    r0, r1 = s.rows
    assert (r0.rank, r0.device, r0.steps) == (0, 0, 2)
    assert r0.step_ns == 4000 and r0.mean_step_ns == 2000
    assert r0.categories is not None
    assert r0.categories["comm_ns"] == 200 + 300 + 50
    # the rank without GPU work: steps and times, no categories
    assert (r1.rank, r1.device, r1.steps, r1.categories) == (1, None, 1, None)
    assert r1.step_ns == r1.cpu_step_ns == 5000
    assert s.slowest is r1
    assert s.collectives_by_kind == {"all_gather": 2, "send_recv": 1}
    coll = [(c.name, c.count, c.total_ns, c.extra) for c in s.top_collectives]
    assert coll == [("all_gather", 2, 500, -1), ("send_recv", 1, 50, -1)]
    # by total time; gemm and relu tie at 400 ns and go by name; top=3 drops SendRecv
    top = [(k.name, k.count, k.total_ns) for k in s.top_kernels]
    ag = "ncclDevKernel_AllGather_RING_LL(x)"
    assert top == [(ag, 2, 500), ("gemm", 1, 400), ("relu", 1, 400)]
    doc = s.to_json()
    assert doc["slowest_rank"] == {"rank": 1, "device": None, "step_ns": 5000}
    assert doc["ranks"][1]["per_step"][0]["compute_ns"] is None


def test_ranks_summarised_apart_join_into_the_job_summary() -> None:
    """Per-rank summaries (as a worker sends them: pickled) reduce to the whole job's."""
    gpu, cpu = _gpu_rank(), _cpu_rank()
    job = Job((gpu, cpu), ClockAlignment("none", (0, 0), 0), world_size=2)
    parts = [pickle.loads(pickle.dumps(rank_summary(t))) for t in job.traces]
    assert summarize_ranks(job.head, parts, top=3).to_json() == summarize(job, top=3).to_json()
    # Only what is needed travels: the rank's rows, devices, kernel totals by name and
    # collective totals by kind.
    r0 = parts[0]
    assert r0.kernels["gemm"] == (1, 400, 1) and len(r0.kernels) == 4
    assert int(r0.coll_count.sum()) == 3 and parts[1].kernels == {}


def test_kernel_and_collective_totals_add_up_across_ranks() -> None:
    r0 = rank_summary(_gpu_rank())
    # A second rank like rank 0 whose every collective size is known, and a third whose
    # all-gathers ran twice as long.
    r1 = replace(r0, rank=1, coll_unknown=np.zeros_like(r0.coll_unknown))
    r2 = replace(r0, rank=2, coll_total=2 * r0.coll_total)
    head = JobHead((0, 1, 2), ClockAlignment("none", (0, 0, 0), -1), 3, "job", False, 30)
    s = summarize_ranks(head, [r0, r1, r2], top=10)
    ag = "ncclDevKernel_AllGather_RING_LL(x)"
    kernels = {k.name: (k.count, k.total_ns, k.extra) for k in s.top_kernels}
    assert kernels[ag] == (6, 1500, 3) and kernels["gemm"] == (3, 1200, 3)
    coll = {c.name: (c.count, c.total_ns, c.extra) for c in s.top_collectives}
    # one rank's unknown size makes the kind's byte total unknown
    assert coll["all_gather"] == (6, 500 + 500 + 1000, -1)
    assert s.collectives_by_kind == {"all_gather": 6, "send_recv": 3}
    assert len(s.rows) == 3 and len(s.devices()) == 3
    doc = s.to_json()
    assert doc["job"]["events"] == 30 and doc["job"]["ranks"] == [0, 1, 2]
    only_known = summarize_ranks(head, [r1, r1], top=10)
    known = {c.name: c.extra for c in only_known.top_collectives}
    assert known["all_gather"] == 2 * 512
