"""Interference measurement on hand-built traces (every number worked out in the comments) and
on the real samples."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from echo_view.model import (
    ClockAlignment,
    CollectiveKind,
    DeviceInfo,
    EventKind,
    Job,
    LaneKind,
    TraceBuilder,
)
from echo_view.model.gpus import GENERATIONS
from echo_view.model.workload import CLASS_COPY, CLASS_GEMM, OP_CLASS_NAMES
from echo_view.sim.compute import classify_kernel
from echo_view.sim.interference.features import (
    PROTOCOLS,
    launch_config,
    launch_shapes,
)
from echo_view.sim.interference.measure import class_table, coverage, measure
from tests.conftest import SAMPLES

NCCL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
GRID: dict[str, Any] = {"grid": (216, 1, 1), "block": (256, 1, 1), "blocks_per_sm": 2.0,
                        "occupancy": 0.5}  # fmt: skip


def _kernel(b: TraceBuilder, name: str, t0: int, d: int, lane: int,
            launch: dict[str, Any] = GRID, **kw: Any) -> int:  # fmt: skip
    """A kernel with its launch configuration."""
    row = b.event(EventKind.KERNEL, name, t0, d, lane, **kw)
    b.launch(row, **launch)
    return row


def _copy(b: TraceBuilder, t0: int, d: int, lane: int, nbytes: int) -> None:
    b.launch(b.event(EventKind.MEMCPY, "Memcpy DtoD", t0, d, lane), nbytes=nbytes)


def _job() -> Job:
    """GPU 0: 'gemm_a' alone at 0-100, 200-300, 400-520 (solo median 100); overlapped by the
    all-reduce (1000-1400 on stream 20) at 1000-1150 (fully) and 1350-1500 (50 of 150 ns).
    'gemm_a' with another grid at 1100-1300 has no alone twin. A copy alone 600-700 and
    overlapped 1200-1320 (bytes match)."""
    b = TraceBuilder(0)
    b.devices.append(
        DeviceInfo(0, "NVIDIA A100-SXM4-80GB", sm_count=108, compute_capability=(8, 0))
    )
    cpu = b.lane(LaneKind.CPU_THREAD, 1, 1)
    s7 = b.gpu_stream(0, 7)
    s13 = b.gpu_stream(0, 13)
    s20 = b.gpu_stream(0, 20)
    b.event(EventKind.USER_ANNOTATION, "ProfilerStep#1", 0, 2000, cpu)
    for t0, d in ((0, 100), (200, 100), (400, 120), (1000, 150), (1350, 150)):
        _kernel(b, "gemm_a", t0, d, s7)
    _kernel(b, "gemm_a", 1160, 140, s7, {**GRID, "grid": (8, 1, 1)})
    _copy(b, 600, 100, s13, 4096)
    _copy(b, 1200, 120, s13, 4096)
    row = _kernel(b, NCCL, 1000, 400, s20, {"grid": (16, 1, 1), "block": (544, 1, 1)})
    b.collective(row, CollectiveKind.ALL_REDUCE, nbytes=1 << 20)
    t = b.build()
    return Job((t,), ClockAlignment("single-rank", (0,), 0), source="hand")


def test_measure_by_hand() -> None:
    s = measure(_job(), classify_kernel)
    c = s.cols
    gemm = c["op_class"] == CLASS_GEMM
    # The two overlapped gemm_a with an alone twin: solo = median(100, 100, 120) = 100.
    assert sorted(c["start_ns"][gemm].tolist()) == [1000, 1350]
    assert set(c["solo_ns"][gemm].tolist()) == {100}
    assert c["solo_count"][gemm].tolist() == [3, 3]
    by_start = dict(zip(c["start_ns"].tolist(), c["overlap_ns"].tolist(), strict=True))
    assert by_start[1000] == 150 and by_start[1350] == 50
    assert by_start[1200] == 120  # the copy, matched by bytes, fully overlapped
    # Slowdowns: 150/100 and 150/100; overlap fractions 1 and 1/3.
    assert np.allclose(s.slowdown[gemm], 1.5)
    assert sorted(np.round(s.fraction[gemm], 4).tolist()) == [0.3333, 1.0]
    # Collective features of the overlapping kernel: all-reduce, LL, 16 channels; the GPU is
    # an Ampere with 108 SMs; the launch configuration comes from the launch table.
    assert set(c["comm_kind"].tolist()) == {int(CollectiveKind.ALL_REDUCE)}
    assert set(c["comm_protocol"].tolist()) == {PROTOCOLS.index("LL")}
    assert set(c["comm_channels"].tolist()) == {16}
    assert set(c["generation"].tolist()) == {GENERATIONS.index("ampere")}
    assert c["grid_blocks"][gemm].tolist() == [216, 216]
    assert np.allclose(c["occupancy"][gemm], 0.5)
    # Alone counts: gemm_a x3 + the other grid (overlapped: no) -> 3 gemm, 1 copy.
    assert s.alone_count[CLASS_GEMM] == 3 and s.alone_count[CLASS_COPY] == 1
    rows = {r.op_class: r for r in class_table(s)}
    assert rows["gemm"].samples == 2 and rows["gemm"].median_slowdown == pytest.approx(1.5)
    assert rows["gemm"].comm_kinds == {"all_reduce": 2}
    assert rows["copy"].median_slowdown == pytest.approx(1.2)
    # Samples are in the step (index 0).
    assert set(c["step"].tolist()) == {0}


def test_coverage() -> None:
    us, ue = np.array([10, 50]), np.array([20, 60])
    assert coverage(us, ue, np.array([0, 10, 15, 20, 55, 100])).tolist() == [0, 0, 5, 10, 15, 20]


def test_launch_config_spreads_the_launch_table_over_events() -> None:
    t = _job().traces[0]
    cfg = launch_config(t)
    k = np.flatnonzero(t.events.kind == int(EventKind.KERNEL))
    assert cfg["grid_blocks"][k].tolist() == [216] * 5 + [8, 16]
    assert cfg["block_threads"][k].tolist() == [256] * 6 + [544]
    cp = np.flatnonzero(t.events.kind == int(EventKind.MEMCPY))
    assert cfg["bytes"][cp].tolist() == [4096, 4096]
    assert cfg["grid_blocks"][cp].tolist() == [-1, -1]


def test_launch_shapes_split_one_grid_by_operator_shapes() -> None:
    """Three 'gemm_b' launches with one grid: two from aten::mm on [[64, 128], [128, 64]] (one
    alone, 0-100; one overlapped, 1000-1200), one alone from aten::mm on [[64, 4096], [4096,
    64]] (200-900, much longer). Keyed by grid only, the overlapped one's solo time would be
    the median of 100 and 700 = 400 (it would look faster than alone); keyed by shapes it is
    100. The first launch links to its operator through its launch call's External id, the
    others through their own (both Kineto spellings); the fourth has no operator: shape -1."""
    b = TraceBuilder(0)
    cpu = b.lane(LaneKind.CPU_THREAD, 1, 1)
    s7 = b.gpu_stream(0, 7)
    s20 = b.gpu_stream(0, 20)
    b.event(EventKind.USER_ANNOTATION, "ProfilerStep#1", 0, 3000, cpu)
    small = (((64, 128), (128, 64)), ("float", "float"))
    large = (((64, 4096), (4096, 64)), ("float", "float"))
    b.op_inputs(b.event(EventKind.CPU_OP, "aten::mm", 0, 10, cpu, external_id=1), *small)
    b.event(EventKind.RUNTIME, "cudaLaunchKernel", 1, 5, cpu, correlation=11, external_id=1)
    b.op_inputs(b.event(EventKind.CPU_OP, "aten::mm", 20, 10, cpu, external_id=2), *large)
    b.op_inputs(b.event(EventKind.CPU_OP, "aten::mm", 40, 10, cpu, external_id=3), *small)
    rows = [
        _kernel(b, "gemm_b", 0, 100, s7, correlation=11),
        _kernel(b, "gemm_b", 200, 700, s7, external_id=2),
        _kernel(b, "gemm_b", 1000, 200, s7, external_id=3),
        _kernel(b, "gemm_b", 1300, 100, s7),
    ]
    row = _kernel(b, NCCL, 1000, 400, s20, {"grid": (16, 1, 1)})
    b.collective(row, CollectiveKind.ALL_REDUCE, nbytes=1 << 20)
    t = b.build()
    shapes = launch_shapes(t, np.array(rows, dtype=np.int64)).tolist()
    assert shapes[0] == shapes[2] >= 0 and shapes[1] >= 0 and shapes[1] != shapes[0]
    assert shapes[3] == -1
    job = Job((t,), ClockAlignment("single-rank", (0,), 0), source="hand")
    s = measure(job, classify_kernel)
    c = s.cols
    # The overlapped small one (1000-1200) has its same-shape twin alone: solo 100, slowdown
    # 2. The shapeless one (1300-1400) pools only with kernels of unknown shapes, and none of
    # them ran alone: no sample.
    assert c["row"].tolist() == [rows[2]]
    assert c["solo_ns"].tolist() == [100] and c["overlap_ns"].tolist() == [200]


def test_dlrm_sample() -> None:
    from echo_view.loading import build_registry

    path = SAMPLES / "dlrm_kineto"
    job = build_registry().importer_for(path).read([path])
    s = measure(job, classify_kernel, "dlrm")
    c = s.cols
    assert len(s) > 50
    assert set(c["trace"].tolist()) == set(range(8))
    # Every sample overlapped communication, has a solo time and a duration.
    assert (c["overlap_ns"] > 0).all() and (c["overlap_ns"] <= c["dur_ns"]).all()
    assert (c["solo_ns"] > 0).all() and (c["solo_count"] >= 1).all()
    assert c["op_class"].max() < OP_CLASS_NAMES.index("collective")
    assert set(c["generation"].tolist()) == {GENERATIONS.index("volta")}
    assert sum(s.comm_kernels.values()) == 64  # 8 NCCL kernels per rank
    rows = class_table(s)
    assert sum(r.samples for r in rows) == len(s)


def test_grid_products_do_not_wrap() -> None:
    from echo_view.sim.interference.features import _product

    big = np.array([2**31 - 1, 2**31 - 1, 7], dtype=np.int32)
    mid = np.array([2**31 - 1, 65_535, 1], dtype=np.int32)
    got = _product(big, big, mid)
    assert got.tolist() == [2**63 - 1, 2**63 - 1, 49]
    assert _product(mid, np.array([65_535] * 3, np.int32), np.ones(3, np.int32)).tolist() == [
        (2**31 - 1) * 65_535,
        65_535**2,
        65_535,
    ]
