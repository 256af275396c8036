"""Kineto-style args -> typed side tables: on the real samples against the file's own JSON
(decoded independently with ``json``), and on damaged values."""

from __future__ import annotations

import gzip
import json
import math
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from echo_view.loading import read_job
from echo_view.model import EventKind, EventTable
from importers.event_args import event_facts
from tests.conftest import SAMPLES

DLRM0 = SAMPLES / "dlrm_kineto" / "worker0_step_12.1694128201545.pt.trace.json.gz"
NSYS = SAMPLES / "nsys" / "h100_2gpu_1s.sqlite.gz"
K = EventKind


def _listed(value: Any) -> Any:
    return [_listed(v) for v in value] if isinstance(value, tuple) else value


def test_dlrm_tables_match_the_file() -> None:
    trace = read_job([DLRM0]).traces[0]
    doc = json.loads(gzip.decompress(DLRM0.read_bytes()))
    rows = [e for e in doc["traceEvents"] if e["ph"] in ("X", "i")]
    assert len(rows) == len(trace)
    args = [e.get("args", {}) for e in rows]
    kind = trace.events.kind
    # Launches: every kernel and copy that has the keys, with the file's values.
    la = trace.launches
    gpu = [i for i in range(len(rows)) if kind[i] in (K.KERNEL, K.MEMCPY, K.MEMSET)]
    assert la.event.tolist() == gpu and len(gpu) == 245 + 16
    for j, i in enumerate(la.event.tolist()):
        a = args[i]
        grid = [int(la.grid_x[j]), int(la.grid_y[j]), int(la.grid_z[j])]
        block = [int(la.block_x[j]), int(la.block_y[j]), int(la.block_z[j])]
        assert grid == a.get("grid", [-1] * 3) and block == a.get("block", [-1] * 3)
        assert int(la.registers[j]) == a.get("registers per thread", -1)
        assert int(la.shared_bytes[j]) == a.get("shared memory", -1)
        assert int(la.bytes[j]) == a.get("bytes", -1)
        occ = a.get("est. achieved occupancy %")
        assert math.isnan(la.occupancy[j]) if occ is None else la.occupancy[j] == occ * 0.01
        bps = a.get("blocks per SM")
        assert math.isnan(la.blocks_per_sm[j]) if bps is None else la.blocks_per_sm[j] == bps
    assert np.count_nonzero(la.grid_x >= 0) == 245 and np.count_nonzero(la.bytes >= 0) == 16
    # Operator inputs: every event that recorded Input Dims, as recorded.
    ops = trace.op_inputs
    shaped = [i for i, a in enumerate(args) if "Input Dims" in a]
    assert ops.event.tolist() == shaped and len(shaped) == 1579 + 8
    for j, i in enumerate(shaped):
        assert _listed(ops.value(int(ops.dims[j]))) == args[i]["Input Dims"]
        assert _listed(ops.value(int(ops.types[j]))) == args[i]["Input type"]
        assert ops.concrete[j] == -1  # this PyTorch version records no Concrete Inputs
    assert len(ops.values) < len(shaped) / 3  # records repeat: each is stored once
    assert len(trace.syncs) == 0


def test_nsys_tables_match_the_args_it_writes() -> None:
    trace = read_job([NSYS]).traces[0]
    ev = trace.events
    la = trace.launches
    kernels = np.flatnonzero(ev.kind == int(K.KERNEL))
    assert np.isin(kernels, la.event).all()
    for j in np.linspace(0, len(la) - 1, 40).astype(int).tolist():
        a = ev.args(int(la.event[j]))
        if "grid" in a:
            assert [int(la.grid_x[j]), int(la.grid_y[j]), int(la.grid_z[j])] == a["grid"]
            assert int(la.shared_bytes[j]) == a["shared memory"]
        else:
            assert int(la.bytes[j]) == a["bytes"]
    syncs = np.flatnonzero(ev.kind == int(K.SYNC))
    assert trace.syncs.event.tolist() == syncs.tolist() and len(syncs) == 122
    assert trace.syncs.correlation.tolist() == ev.correlation[syncs].tolist()
    assert trace.syncs.stream.tolist() == [ev.args(int(r))["stream"] for r in syncs]


def _tables(events: list[tuple[EventKind, dict[str, Any] | list[Any] | None]]) -> Any:
    raws = [b"" if a is None else json.dumps(a).encode() for _, a in events]
    offsets = np.zeros(len(raws) + 1, dtype=np.int64)
    np.cumsum([len(r) for r in raws], out=offsets[1:])
    n = len(events)
    zeros = np.zeros(n, dtype=np.int64)
    table = EventTable(
        kind=np.array([int(k) for k, _ in events], dtype=np.uint8), start_ns=zeros,
        dur_ns=zeros, name=zeros, cat=zeros, lane=zeros,
        correlation=np.arange(100, 100 + n), external_id=zeros - 1,
        args_blob=b"".join(raws), args_offsets=offsets,
    )  # fmt: skip
    facts = event_facts(table)
    return facts.launches, facts.op_inputs, facts.syncs


def test_damaged_values_are_unknown() -> None:
    la, ops, sy = _tables(
        [
            (K.KERNEL, {"grid": [2**31, 1, 1], "block": [128, "1", 1], "shared memory": -4}),
            (K.KERNEL, {"grid": [4, 2], "registers per thread": 32}),  # no grid: not kept
            (K.MEMCPY, {"bytes": -1}),
            (K.MEMCPY, {"bytes": 1e30}),
            (K.KERNEL, [1, 2]),  # args that are no object
            (K.KERNEL, {"grid": [1, 1, 1], "blocks per SM": 0.25, "bytes": True, "block": [1]}),
            (K.KERNEL, {"grid": [8, 1, 1], "est. achieved occupancy %": "50", "shared memory": 9}),
            (K.MEMSET, {"bytes": 64.0}),
            (K.CPU_OP, {"grid": [1, 1, 1]}),  # not GPU work
        ]
    )
    assert la.event.tolist() == [5, 6, 7]  # rows 0-4: no readable grid or size
    assert la.grid_x.tolist() == [1, 8, -1] and la.block_x.tolist() == [-1, -1, -1]
    assert la.blocks_per_sm[0] == 0.25 and np.isnan(la.occupancy).all()
    assert la.shared_bytes.tolist() == [-1, 9, -1] and la.bytes.tolist() == [-1, -1, 64]
    assert len(ops) == 0 and len(sy) == 0


def test_text_that_is_no_json_is_unknown_not_an_error() -> None:
    """The tables are read on first use, long after the import's checks: damage there must
    read as unknown (here text no importer lets through, built by hand)."""
    n = 3
    zeros = np.zeros(n, dtype=np.int64)
    raws = [b'{"grid": [1, 1', b'{"grid": [2, 1, 1]}', b'{"Input Dims": [[1]']
    offsets = np.concatenate([[0], np.cumsum([len(r) for r in raws])])
    kinds = [K.KERNEL, K.KERNEL, K.CPU_OP]
    table = EventTable(
        kind=np.array([int(k) for k in kinds], dtype=np.uint8), start_ns=zeros, dur_ns=zeros,
        name=zeros, cat=zeros, lane=zeros, correlation=zeros, external_id=zeros,
        args_blob=b"".join(raws), args_offsets=offsets,
    )  # fmt: skip
    facts = event_facts(table)
    assert facts.launches.event.tolist() == [1] and facts.launches.grid_x.tolist() == [2]
    assert len(facts.op_inputs) == 0


def test_operator_inputs_keep_nesting_and_unknowns() -> None:
    _, ops, _ = _tables(
        [
            (
                K.CPU_OP,
                {"Input Dims": [[2, 3], [[4], [5, 6]], [], "x"], "Input type": ["float", 7]},
            ),
            (K.CPU_OP, {"Input Dims": "[2, 3]"}),  # not a list: no record
            (K.USER_ANNOTATION, {"Input Dims": [[8]], "Concrete Inputs": ["", "True"]}),
            (K.CPU_OP, {"name": "Input Dims"}),  # the key's text as a value
            (
                K.CPU_OP,
                {"Input Dims": [[2, 3], [[4], [5, 6]], [], "x"], "Input type": ["float", 7]},
            ),
        ]
    )
    assert ops.event.tolist() == [0, 2, 4]
    assert ops.value(int(ops.dims[0])) == ((2, 3), ((4,), (5, 6)), (), None)
    assert ops.value(int(ops.types[0])) == ("float", "")
    assert ops.types[1] == -1 and ops.value(int(ops.concrete[1])) == ("", "True")
    assert ops.dims[0] == ops.dims[2] and ops.types[0] == ops.types[2]  # stored once


def test_syncs_take_the_call_correlation_when_the_args_lack_it() -> None:
    _, _, sy = _tables(
        [
            (K.SYNC, {"stream": 7, "wait_on_stream": 13, "wait_on_cuda_event_record_corr_id": 5}),
            (K.SYNC, None),
            (K.SYNC, {"correlation": 42, "stream": -3, "wait_on_stream": 2**40}),
            (K.SYNC, {"correlation": "x"}),
        ]
    )
    assert sy.event.tolist() == [0, 1, 2, 3]
    assert sy.correlation.tolist() == [100, 101, 42, -1]
    assert sy.stream.tolist() == [7, -1, -1, -1]
    assert sy.wait_on_stream.tolist() == [13, -1, -1, -1]
    assert sy.wait_on_record.tolist() == [5, -1, -1, -1]


@pytest.mark.parametrize("path", [DLRM0, NSYS], ids=["kineto", "nsys"])
def test_tables_refer_to_real_events(path: Path) -> None:
    for trace in read_job([path]).traces:
        for table in (trace.launches, trace.op_inputs, trace.syncs):
            assert len(table) == 0 or 0 <= table.event.min() <= table.event.max() < len(trace)


def test_tables_are_read_on_first_use_and_survive_pickling() -> None:
    """Traces read by worker processes are pickled to the client: the tables go as the
    function that reads them, or as the tables once read."""
    trace = read_job([DLRM0]).traces[0]
    assert trace.facts.built() == []  # importing read no args
    copy = pickle.loads(pickle.dumps(trace.facts))
    assert copy.launches.grid_x.tolist() == trace.launches.grid_x.tolist()
    assert [name for name, _ in trace.facts.built()] == ["launches"]
    again = pickle.loads(pickle.dumps(trace.facts))
    assert [name for name, _ in again.built()] == ["launches"]
    assert again.op_inputs.values == trace.op_inputs.values


def test_op_inputs_of_chosen_rows_equal_the_whole_tables_rows() -> None:
    whole = read_job([DLRM0]).traces[0].op_inputs
    fresh = read_job([DLRM0]).traces[0]
    with_inputs = whole.event.tolist()
    chosen = sorted({*with_inputs[:5], *with_inputs[-3:], 0, 1})  # rows 0, 1: no inputs
    part = fresh.facts.op_inputs_of(chosen)
    assert part.event.tolist() == [r for r in chosen if r in set(with_inputs)]
    for j, r in enumerate(part.event.tolist()):
        i = with_inputs.index(r)
        for col in ("dims", "types", "concrete"):
            assert part.value(int(getattr(part, col)[j])) == whole.value(
                int(getattr(whole, col)[i])
            )
    assert "op_inputs" not in dict(fresh.facts.built())  # the whole table was not built
    # Once the whole table is built, the same rows come from it.
    assert len(fresh.op_inputs) == len(whole)
    again = fresh.facts.op_inputs_of(chosen)
    assert again.event.tolist() == part.event.tolist()
