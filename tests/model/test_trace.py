"""The columnar Trace: construction, immutability, integrity checks, args decoding."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from echo_view.model import (
    CollectiveKind,
    EventKind,
    EventTable,
    LaneKind,
    StringTable,
    Trace,
    TraceBuilder,
)


def _two_event_trace() -> Trace:
    b = TraceBuilder(rank=3, source="mem")
    gpu = b.gpu_stream(0, 7)
    cpu = b.lane(LaneKind.CPU_THREAD, 100, 101, "thread 101")
    k = b.event(EventKind.KERNEL, "gemm", 2_000, 500, gpu, correlation=9, args={"grid": [1, 2, 3]})
    r = b.event(EventKind.RUNTIME, "cudaLaunchKernel", 1_000, 20, cpu, correlation=9)
    b.flow(r, k, 9)
    g = b.group("0", (2, 3))
    b.collective(k, CollectiveKind.ALL_REDUCE, nbytes=4096, dtype="Float", group=g, seq=0)
    b.step(10, 900, 3_000, 2_500)
    return b.build()


def test_columns_hold_the_events_and_are_read_only() -> None:
    t = _two_event_trace()
    assert len(t) == 2
    assert t.events.start_ns.tolist() == [2_000, 1_000]
    assert t.events.end_ns.tolist() == [2_500, 1_020]
    assert t.name(0) == "gemm" and t.kind(1) is EventKind.RUNTIME
    for col in (t.events.start_ns, t.events.kind, t.flows.src, t.collectives.bytes, t.steps.number):
        assert not col.flags.writeable
        with pytest.raises(ValueError):
            col[0] = 1


def test_side_tables_and_masks() -> None:
    t = _two_event_trace()
    assert t.events.args(0) == {"grid": [1, 2, 3]}
    assert t.events.args(1) == {}
    assert t.mask(EventKind.KERNEL).tolist() == [True, False]
    assert t.lane_mask(LaneKind.GPU_STREAM).tolist() == [True, False]
    assert t.collective_kind(0) is CollectiveKind.ALL_REDUCE
    assert t.groups[t.collectives.group[0]].ranks == (2, 3)
    assert t.strings[int(t.collectives.dtype[0])] == "Float"
    assert t.span_ns() == (1_000, 2_500)
    assert t.steps.gpu_end_ns.tolist() == [2_500]


def test_dtypes_are_normalised() -> None:
    t = _two_event_trace()
    assert t.events.start_ns.dtype == np.int64
    assert t.events.name.dtype == np.int32
    assert t.events.kind.dtype == np.uint8
    assert t.collectives.kind.dtype == np.uint8


def test_bad_references_are_rejected() -> None:
    strings = StringTable(["a"])
    ev = EventTable(
        kind=[0],
        start_ns=[0],
        dur_ns=[1],
        name=[0],
        cat=[0],
        lane=[1],
        correlation=[-1],
        external_id=[-1],
    )
    with pytest.raises(ValueError, match="lane"):
        Trace(rank=0, source="x", strings=strings, events=ev, lanes=())


def test_unequal_columns_name_the_column() -> None:
    with pytest.raises(ValueError, match=r"events\.dur_ns has 2 rows, expected 1"):
        EventTable(
            kind=[0],
            start_ns=[0],
            dur_ns=[1, 2],
            name=[0],
            cat=[0],
            lane=[0],
            correlation=[-1],
            external_id=[-1],
        )


def test_metadata_is_frozen() -> None:
    b = TraceBuilder(0)
    b.metadata["world_size"] = 8
    t = b.build()
    assert t.world_size == 8
    with pytest.raises(TypeError):
        t.metadata["world_size"] = 4  # type: ignore[index]


def test_a_trace_takes_plain_pickle_and_stays_frozen() -> None:
    """Worker processes send traces to the client: plain pickle (Dask's first choice) must take
    them, and the copy keeps its columns and read-only metadata."""
    b = TraceBuilder(rank=3, source="mem")
    b.metadata["world_size"] = 8
    gpu = b.gpu_stream(0, 7)
    b.event(EventKind.KERNEL, "gemm", 2_000, 500, gpu, args={"grid": [1, 2, 3]})
    t = b.build()
    copy: Trace = pickle.loads(pickle.dumps(t, protocol=5))
    assert copy.world_size == 8 and dict(copy.metadata) == dict(t.metadata)
    assert copy.events.start_ns.tolist() == [2_000] and copy.events.args(0) == {"grid": [1, 2, 3]}
    assert copy.name(0) == "gemm" and copy.rank == 3
    with pytest.raises(TypeError):
        copy.metadata["world_size"] = 4  # type: ignore[index]
