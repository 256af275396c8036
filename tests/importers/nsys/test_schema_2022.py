"""Schema drift: an export in Nsight Systems 2022.4's schema 3.0.0 (``EXPORT_META_DATA``, the
``ENUM_CUDA_KRENEL_LAUNCH_TYPE`` typo, no ``greenContextId``, empty enum tables) reads like the
2026.2 samples; and the rank mapping of processes and GPUs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from echo_view.analysis.steps import steps_of
from echo_view.errors import UsageError
from echo_view.model import CollectiveKind, DeviceInfo, EventKind, LaneKind
from importers.nsys import NsysImporter
from tests.importers.nsys.capture import STEP, T0, Proc, build


def test_schema_3_0_export_reads(tmp_path: Path) -> None:
    procs = [Proc(100, (0,), 1), Proc(200, (1,), 2)]
    job = NsysImporter().read([build(tmp_path / "v2022.sqlite", procs)])
    assert job.ranks == (0, 1)
    for trace, proc in zip(job, procs, strict=True):
        assert trace.metadata["nsys_version"] == "2022.4.2.1"
        assert trace.metadata["schema_version"] == "3.0.0"
        assert trace.metadata["pids"] == [proc.pid]
        kernels = np.flatnonzero(trace.mask(EventKind.KERNEL))
        assert len(kernels) == 4
        assert {trace.name(i) for i in kernels.tolist()} == {
            "void gemm_kernel<float>(float*, int)",
            "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
        }
        args = trace.events.args(int(kernels[0]))
        assert args["grid"] == [108, 1, 1] and args["block"] == [256, 1, 1]
        assert args["shared memory"] == 1024 + 2048
        # Every GPU operation is linked to its runtime or driver launch.
        assert len(trace.flows) == 6
        copies = np.flatnonzero(trace.mask(EventKind.MEMCPY))
        assert {trace.name(i) for i in copies.tolist()} == {"Memcpy HtoD (Pinned -> Device)"}
        drivers = {trace.name(i) for i in np.flatnonzero(trace.mask(EventKind.DRIVER)).tolist()}
        assert drivers == {"cuLaunchKernel"}


def test_old_nccl_kernel_names_give_collectives(tmp_path: Path) -> None:
    job = NsysImporter().read([build(tmp_path / "c.sqlite", [Proc(100, (0,), 1)])])
    trace = job.traces[0]
    coll = trace.collectives
    assert len(coll) == 2
    assert {trace.collective_kind(i) for i in range(2)} == {CollectiveKind.ALL_REDUCE}
    assert {trace.strings[int(x)] for x in coll.algorithm} == {"RING"}
    assert {trace.strings[int(x)] for x in coll.protocol} == {"LL"}
    assert {trace.strings[int(x)] for x in coll.dtype} == {"float"}
    assert (coll.bytes == -1).all()  # no NCCL NVTX payloads: unknown, not guessed


def test_profiler_steps_from_nvtx(tmp_path: Path) -> None:
    proc = Proc(100, (0,), 1)
    job = NsysImporter().read([build(tmp_path / "s.sqlite", [proc])])
    steps = job.traces[0].steps
    assert not steps.detected
    assert steps.number.tolist() == [7, 8]
    assert steps.start_ns.tolist() == [T0, T0 + STEP]
    assert (steps.end_ns - steps.start_ns).tolist() == [900_000, 900_000]
    ends = steps_of(job.traces[0]).gpu_end_ns  # (the analysis fills it)
    assert ends.tolist() == [proc.kernel_ends[(0, 0)], proc.kernel_ends[(1, 0)]]


def test_nvtx_marks_and_inline_text(tmp_path: Path) -> None:
    trace = NsysImporter().read([build(tmp_path / "m.sqlite", [Proc(100, (0,), 1)])]).traces[0]
    marks = np.flatnonzero(trace.mask(EventKind.INSTANT))
    assert [trace.name(i) for i in marks.tolist()] == ["checkpoint"]
    assert trace.events.dur_ns[marks].tolist() == [0]
    ranges = {trace.name(i) for i in np.flatnonzero(trace.mask(EventKind.USER_ANNOTATION)).tolist()}
    assert ranges == {"ProfilerStep#7", "ProfilerStep#8", "forward"}
    (lane,) = {trace.lanes[int(trace.events.lane[i])] for i in marks.tolist()}
    assert lane.kind == LaneKind.CPU_THREAD and lane.name == "python3" and lane.tid == 100


def test_gpu_info_and_sync_devices(tmp_path: Path) -> None:
    procs = [Proc(100, (0,), 1), Proc(200, (1,), 2)]
    job = NsysImporter().read([build(tmp_path / "g.sqlite", procs)])
    for trace in job:
        assert trace.devices == (
            DeviceInfo(trace.rank, "NVIDIA A100-SXM4-80GB", 108, 85899345920, (8, 0)),
        )
        syncs = np.flatnonzero(trace.mask(EventKind.SYNC))
        assert len(syncs) == 2
        lanes = {trace.lanes[int(trace.events.lane[i])] for i in syncs.tolist()}
        # Nsight wrote device 0 for both processes; the CUDA context gives the right GPU.
        assert {(lane.kind, lane.device) for lane in lanes} == {(LaneKind.OTHER, trace.rank)}
        assert trace.name(int(syncs[0])) == "Event Sync"
        args = [trace.events.args(i) for i in syncs.tolist()]
        assert {a["device"] for a in args} == {trace.rank}
        # Each wait is linked to the latest record of its CUDA event before it.
        assert [a["wait_on_stream"] for a in args] == [13, 13]
        assert [a["wait_on_cuda_event_record_corr_id"] for a in args] == procs[
            trace.rank
        ].event_records


def test_no_gpu_info_table_means_no_devices(tmp_path: Path) -> None:
    path = build(tmp_path / "n.sqlite", [Proc(100, (0,), 1)], gpu_info=False)
    assert NsysImporter().read([path]).traces[0].devices == ()


def test_one_process_driving_two_gpus(tmp_path: Path) -> None:
    path = build(tmp_path / "multi.sqlite", [Proc(100, (0, 1), 1)])
    by_device = NsysImporter().read([path])  # auto: one process, two GPUs -> ranks by GPU
    assert by_device.ranks == (0, 1)
    for trace in by_device:
        assert trace.metadata["rank_by"] == "device"
        assert trace.metadata["gpu_devices"] == [trace.rank]
        # Launches go with the kernels they launched, so every flow stays inside the rank.
        assert len(trace.flows) == 6
    # Annotations stay with the process's first GPU.
    first, second = by_device.traces
    assert first.mask(EventKind.USER_ANNOTATION).sum() == 4
    assert second.mask(EventKind.USER_ANNOTATION).sum() == 0
    assert second.mask(EventKind.RUNTIME, EventKind.DRIVER).sum() == 6

    by_process = NsysImporter().read([path], rank_by="process")
    assert by_process.ranks == (0,)
    (trace,) = by_process.traces
    assert trace.metadata["gpu_devices"] == [0, 1]
    assert trace.mask(EventKind.KERNEL).sum() == 8
    assert {lane.device for lane in trace.lanes if lane.kind == LaneKind.GPU_STREAM} == {0, 1}


def test_bad_rank_by() -> None:
    with pytest.raises(ValueError, match="rank_by"):
        NsysImporter(rank_by="node")
    with pytest.raises(UsageError, match="rank_by"):
        NsysImporter().read([Path("unused")], rank_by="node")


def test_two_processes_sharing_one_gpu(tmp_path: Path) -> None:
    path = build(tmp_path / "shared.sqlite", [Proc(100, (0,), 1), Proc(200, (0,), 2)])
    job = NsysImporter().read([path])  # auto: a GPU served by two processes -> ranks by GPU
    (trace,) = job.traces
    assert trace.metadata["rank_by"] == "device"
    assert trace.metadata["pids"] == [100, 200]
    streams = sorted(lane.name for lane in trace.lanes if lane.kind == LaneKind.GPU_STREAM)
    # Stream ids are per CUDA context: each process keeps its own lanes.
    assert streams == [
        "stream 13 (pid 100)",
        "stream 13 (pid 200)",
        "stream 7 (pid 100)",
        "stream 7 (pid 200)",
    ]
    assert trace.mask(EventKind.KERNEL).sum() == 8
    assert len(trace.flows) == 12
