"""The typed side tables of a trace: construction rules, the builder, lookups."""

from __future__ import annotations

import math

import numpy as np
import pytest

from echo_view.model import (
    EventFacts,
    EventKind,
    LaunchTable,
    OpInputTable,
    SyncTable,
    TraceBuilder,
)
from echo_view.model.event_info import OP_INPUT_COLUMNS


def _builder() -> tuple[TraceBuilder, list[int]]:
    b = TraceBuilder(0)
    s7 = b.gpu_stream(0, 7)
    rows = [b.event(EventKind.KERNEL, f"k{i}", 10 * i, 5, s7) for i in range(4)]
    return b, rows


def test_builder_fills_the_tables_in_event_order() -> None:
    b, rows = _builder()
    b.launch(rows[2], grid=(8, 2, 1), block=(128, 1, 1), occupancy=0.25, registers=40)
    b.launch(rows[0], nbytes=4096)
    b.op_inputs(rows[3], ((4, 8), (8, 2), ()), ("float", "float", "Scalar"))
    b.op_inputs(rows[1], ((4, 8), (8, 2), ()), ("float", "float", "Scalar"), ("", "", "1"))
    b.sync(rows[1], correlation=9, stream=7)
    t = b.build()
    la = t.launches
    assert la.event.tolist() == [0, 2]
    assert la.grid_x.tolist() == [-1, 8] and la.block_x.tolist() == [-1, 128]
    assert la.bytes.tolist() == [4096, -1] and la.registers.tolist() == [-1, 40]
    assert math.isnan(la.occupancy[0]) and la.occupancy[1] == 0.25
    ops = t.op_inputs
    assert ops.event.tolist() == [1, 3]
    assert ops.dims[0] == ops.dims[1] and ops.types[0] == ops.types[1]  # one record, stored once
    assert ops.value(int(ops.concrete[0])) == ("", "", "1") and ops.concrete[1] == -1
    assert ops.value(-1) is None
    assert ops.row_of(np.array([0, 1, 2, 3])).tolist() == [-1, 0, -1, 1]
    assert t.syncs.event.tolist() == [1] and t.syncs.wait_on_stream.tolist() == [-1]


def test_columns_are_read_only_and_typed() -> None:
    b, rows = _builder()
    b.launch(rows[0], grid=(1, 1, 1))
    t = b.build()
    assert t.launches.grid_x.dtype == np.int32 and t.launches.occupancy.dtype == np.float64
    with pytest.raises(ValueError):
        t.launches.grid_x[0] = 2


def test_rows_must_follow_event_order() -> None:
    z = {name: np.array([3, 1]) for name in OP_INPUT_COLUMNS}
    with pytest.raises(ValueError, match=r"op_inputs\.event must be increasing"):
        OpInputTable(**z, values=((1,), (2,), (3,), (4,)))


def test_value_ids_must_exist() -> None:
    with pytest.raises(ValueError, match=r"op_inputs\.dims refers to a value"):
        OpInputTable(np.array([0]), np.array([1]), np.array([-1]), np.array([-1]), values=((),))


def test_a_trace_rejects_rows_of_events_it_does_not_have() -> None:
    b, rows = _builder()
    t = b.build()
    bad = SyncTable(*(np.array([len(rows)]) for _ in range(5)))
    with pytest.raises(ValueError, match=r"syncs\.event refers to an event"):
        type(t)(0, "", t.strings, t.events, t.lanes, facts=EventFacts(syncs=bad))


def test_empty_tables() -> None:
    for table in (LaunchTable.empty(), OpInputTable.empty(), SyncTable.empty()):
        assert len(table) == 0
    assert OpInputTable.empty().row_of(np.array([0, 5])).tolist() == [-1, -1]
