"""What bounds a replayed step, measured by re-simulating with a 2x faster GPU or CPU: the real
DLRM job is bound by CPU dispatch; a job of long kernels behind one sync is bound by the GPU."""

from __future__ import annotations

import pytest

from echo_view.model import ClockAlignment, EventKind, Job, LaneKind, Trace, TraceBuilder
from echo_view.sim.bound import StepBound, step_bound
from echo_view.sim.replay import workload_from_job
from echo_view.sim.report import job_steps
from tests.conftest import SAMPLES

US = 1_000


def test_classification() -> None:
    assert StepBound(gpu_gain=0.0005, cpu_gain=0.29).bound == "cpu-dispatch"
    assert StepBound(gpu_gain=0.45, cpu_gain=0.001).bound == "gpu"
    assert StepBound(gpu_gain=0.04, cpu_gain=0.08).bound == "mixed"  # neither decisive
    assert StepBound(gpu_gain=0.2, cpu_gain=0.2).bound == "mixed"
    assert StepBound(0.25, 0.01).to_json() == {
        "bound": "gpu",
        "gpu_2x_gain": 0.25,
        "cpu_2x_gain": 0.01,
    }


def _gpu_bound_rank() -> Trace:
    """Three 1 ms GEMMs launched within 6 µs, then the CPU waits for them in a device sync."""
    b = TraceBuilder(0, source="rank0")
    b.metadata["world_size"] = 1
    cpu = b.lane(LaneKind.CPU_THREAD, 100, 100, "main")
    stream = b.gpu_stream(0, 7)
    b.event(EventKind.USER_ANNOTATION, "ProfilerStep#1", 0, 3010 * US, cpu)
    for i in range(3):
        t = 1 + 2 * i
        b.event(EventKind.RUNTIME, "cudaLaunchKernel", t * US, 1 * US, cpu, correlation=i + 1)
        b.event(
            EventKind.KERNEL,
            "sm90_gemm",
            (10 + 1000 * i) * US,
            1000 * US,
            stream,
            correlation=i + 1,
        )
    b.event(EventKind.RUNTIME, "cudaDeviceSynchronize", 8 * US, 3002 * US, cpu, correlation=9)
    b.step(1, 0, 3010 * US)
    return b.build()


def _bound_of(job: Job) -> StepBound:
    wl = workload_from_job(job)
    step_ns = job_steps(job).job_step_ns
    assert step_ns is not None
    return step_bound(wl, job, step_ns)


def test_long_kernels_behind_a_sync_are_bound_by_the_gpu() -> None:
    job = Job((_gpu_bound_rank(),), ClockAlignment("single", (0,), 0), 1, "synthetic")
    b = _bound_of(job)
    assert b.bound == "gpu"
    assert b.gpu_gain == pytest.approx(0.5, abs=0.01)  # 3 ms of kernels -> 1.5 ms
    assert b.cpu_gain < 0.01


def test_the_dlrm_replay_is_bound_by_cpu_dispatch() -> None:
    from importers import kineto

    job = kineto.KinetoImporter().read(sorted((SAMPLES / "dlrm_kineto").glob("*.json.gz")))
    b = _bound_of(job)
    assert b.bound == "cpu-dispatch"
    assert b.gpu_gain < 0.01 and b.cpu_gain > 0.2
