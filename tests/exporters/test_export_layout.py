"""Layout: process/thread numbering and names, steps placement, flows, bad input."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from echo_view.errors import InputError
from echo_view.model import (
    ClockAlignment,
    CollectiveKind,
    EventKind,
    Job,
    LaneKind,
    Trace,
    TraceBuilder,
)
from exporters.layout import STEPS_THREAD, build_layout
from exporters.links import COLLECTIVE_CATEGORY
from exporters.perfetto_json import PerfettoJsonExporter
from exporters.perfetto_proto import PerfettoProtoExporter
from importers.kineto import KinetoImporter
from tests.exporters.perfetto_checks import load_json, read_pftrace


def job_of(*traces: Trace, offsets: tuple[int, ...] | None = None) -> Job:
    offs = offsets if offsets is not None else (0,) * len(traces)
    return Job(traces, ClockAlignment("shared-host-clock", offs, 0))


def collective_rank(rank: int, start: int, *, seq: int | None, ranks: tuple[int, ...]) -> Trace:
    b = TraceBuilder(rank)
    s = b.gpu_stream(rank % 2, 20)
    k = b.event(EventKind.KERNEL, "ncclKernel_AllReduce", start, 100, s)
    g = b.group("pg", ranks)
    b.collective(k, CollectiveKind.ALL_REDUCE, group=g, seq=-1 if seq is None else seq)
    return b.build()


def test_string_pids_other_lanes_and_names() -> None:
    b = TraceBuilder(3)
    spans = b.lane(LaneKind.OTHER, "Spans", "PyTorch Profiler", "PyTorch Profiler")
    glob = b.lane(LaneKind.OTHER, "", "")
    cpu = b.lane(LaneKind.CPU_THREAD, 7, 8, "thread 8 (python)")
    b.event(EventKind.OTHER, "PyTorch Profiler (0)", 0, 100, spans)
    b.event(EventKind.INSTANT, "Record Window End", 100, 0, glob)
    b.event(EventKind.CPU_OP, "op", 10, 5, cpu)
    layout = build_layout(job_of(b.build()))
    names = [p.name for p in layout.processes]
    assert names == ["rank 3 CPU (pid 7)", "rank 3 other", "rank 3 Spans"]
    assert [t.name for t in layout.threads] == ["thread 8 (python)", "events", "PyTorch Profiler"]
    assert [p.pid for p in layout.processes] == [1, 2, 3]
    assert [t.tid for t in layout.threads] == [4, 5, 6]


def test_other_lanes_of_a_cpu_process_stay_in_it(tmp_path: Path) -> None:
    # An async lane of pid 1 was put in a process of its own, "rank 0 1", and named
    # "1 net (async)"; Perfetto shows a process's async tracks under it.
    events = [
        {"ph": "b", "name": "req", "cat": "net", "id": 5, "pid": 1, "tid": 1, "ts": 0},
        {"ph": "e", "name": "req", "cat": "net", "id": 5, "pid": 1, "tid": 1, "ts": 10},
        {"ph": "X", "name": "op", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 0, "dur": 3},
        {"ph": "i", "name": "mark", "pid": 9, "tid": "x", "ts": 1, "s": "t"},
    ]
    path = tmp_path / "async.json"
    path.write_text(json.dumps({"traceEvents": events}))
    layout = build_layout(KinetoImporter().read([path]))
    assert [p.name for p in layout.processes] == ["rank 0 CPU (pid 1)", "rank 0 9"]
    threads = [(layout.processes[t.process].name, t.name) for t in layout.threads]
    assert threads == [
        ("rank 0 CPU (pid 1)", "thread 1"),
        ("rank 0 CPU (pid 1)", "net (async)"),
        ("rank 0 9", "9 x"),
    ]


def test_steps_without_cpu_lanes_get_a_process() -> None:
    b = TraceBuilder(0)
    b.event(EventKind.KERNEL, "k", 0, 10, b.gpu_stream(1, 7))
    b.step(5, 0, 50)
    b.step(6, 40, 100)  # overlaps the previous step: goes to a second steps lane
    layout = build_layout(job_of(b.build()))
    steps = [t for t in layout.threads if t.name.startswith(STEPS_THREAD)]
    assert [t.name for t in steps] == ["steps", "steps (lane 2)"]
    assert layout.processes[steps[0].process].name == "rank 0 GPU 1"
    assert layout.ranks[0].step_thread.tolist() == [layout.threads.index(s) for s in steps]


def test_ranks_sort_in_order_and_pids_differ_per_rank() -> None:
    traces = []
    for rank in (2, 0, 1):
        b = TraceBuilder(rank)
        b.event(EventKind.KERNEL, "k", 0, 10, b.gpu_stream(0, 7))
        b.event(EventKind.CPU_OP, "op", 0, 10, b.lane(LaneKind.CPU_THREAD, 100, 100))
        traces.append(b.build())
    layout = build_layout(job_of(*traces))
    order = sorted(layout.processes, key=lambda p: p.sort_index)
    assert [p.name for p in order] == [
        f"rank {r} {w}" for r in range(3) for w in ("CPU (pid 100)", "GPU 0")
    ]
    assert len({p.pid for p in layout.processes}) == 6


def test_collective_chain_follows_start_order_and_order_fallback() -> None:
    ranks = (0, 1, 2)
    traces = [
        collective_rank(0, 300, seq=None, ranks=ranks),
        collective_rank(1, 100, seq=None, ranks=ranks),
        collective_rank(2, 200, seq=None, ranks=ranks),
    ]
    links = build_layout(job_of(*traces)).links
    assert links.collective == 2
    chain = list(zip(links.src_rank.tolist(), links.dst_rank.tolist(), strict=True))
    assert chain == [(1, 2), (2, 0)]
    assert {links.cats[c] for c in links.cat.tolist()} == {COLLECTIVE_CATEGORY}


def test_collectives_of_other_groups_or_seqs_do_not_link() -> None:
    traces = [
        collective_rank(0, 100, seq=1, ranks=(0, 1)),
        collective_rank(1, 100, seq=2, ranks=(0, 1)),
        collective_rank(2, 100, seq=1, ranks=(2, 3)),
    ]
    assert len(build_layout(job_of(*traces)).links) == 0


def test_correlation_flows_only_where_the_trace_has_none() -> None:
    b = TraceBuilder(0)
    cpu = b.lane(LaneKind.CPU_THREAD, 1, 1)
    s = b.gpu_stream(0, 7)
    launches = [
        b.event(EventKind.RUNTIME, "cudaLaunchKernel", t, 5, cpu, correlation=c)
        for c, t in ((1, 0), (2, 10), (3, 20))
    ]
    kernels = [
        b.event(EventKind.KERNEL, f"k{c}", t, 5, s, correlation=c)
        for c, t in ((1, 30), (2, 40), (3, 50), (4, 60))  # 4 has no launch
    ]
    b.event(EventKind.DRIVER, "cuLaunchKernel", 11, 2, cpu, correlation=2)  # runtime wins
    b.flow(launches[0], kernels[0], 1)
    links = build_layout(job_of(b.build())).links
    assert (links.from_trace, links.from_correlation) == (1, 2)
    pairs = sorted(zip(links.src_event.tolist(), links.dst_event.tolist(), strict=True))
    assert pairs == sorted(zip(launches, kernels[:3], strict=True))


def test_negative_duration_is_an_input_error() -> None:
    b = TraceBuilder(0, source="bad.json")
    b.event(EventKind.CPU_OP, "op", 0, 10, b.lane(LaneKind.CPU_THREAD, 1, 1))
    t = b.build()
    ev = t.events
    broken = replace(ev, dur_ns=np.array([-5]))
    bad = Trace(0, "bad.json", t.strings, broken, t.lanes)
    with pytest.raises(InputError, match="negative duration") as err:
        build_layout(job_of(bad))
    assert err.value.path == "bad.json"
    assert err.value.where == "rank 0 events[0]"


def test_empty_job_exports_valid_files(tmp_path: Path) -> None:
    job = job_of(TraceBuilder(0).build())
    PerfettoJsonExporter().write(job, tmp_path / "e.json")
    doc = load_json(tmp_path / "e.json")
    assert doc["traceEvents"] == []
    assert doc["metadata"]["base_time_ns"] == 0
    PerfettoProtoExporter().write(job, tmp_path / "e.pftrace")
    parsed = read_pftrace(tmp_path / "e.pftrace")
    assert parsed.errors == [] and parsed.slices == []
