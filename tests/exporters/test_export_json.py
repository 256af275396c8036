"""Perfetto JSON export of the hand-made 2-rank job: layout, overlaps, flows, times, atomicity."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import exporters.perfetto_json as pj
from echo_view.errors import OutputError
from echo_view.model import EventKind, Job
from exporters.layout import STEP_CATEGORY
from exporters.perfetto_json import PerfettoJsonExporter
from tests.exporters.export_jobs import ALLGATHER, ALLREDUCE, AWKWARD, OFFSETS, T0, handmade_job
from tests.exporters.perfetto_checks import (
    inexact_times,
    json_flows,
    json_slices,
    load_json,
    metadata_names,
    partial_overlaps,
)


@pytest.fixture(scope="module")
def job() -> Job:
    return handmade_job()


@pytest.fixture(scope="module")
def exported(job: Job, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    path = tmp_path_factory.mktemp("json") / "job.json"
    PerfettoJsonExporter().write(job, path)
    return path, load_json(path)


def expected_slices(job: Job) -> Counter[tuple[str, int, int]]:
    """(name, start relative to the base, duration) of every slice of the job."""
    out: Counter[tuple[str, int, int]] = Counter()
    for trace, off in zip(job.traces, job.alignment.offsets_ns, strict=True):
        ev = trace.events
        for i in range(len(trace)):
            if trace.kind(i) not in (EventKind.INSTANT, EventKind.COUNTER):
                rel = int(ev.start_ns[i]) + off - T0
                out[(trace.name(i), rel, int(ev.dur_ns[i]))] += 1
    return out


def test_document_shape(exported: tuple[Path, dict[str, Any]]) -> None:
    path, doc = exported
    # No displayTimeUnit: older Perfetto builds read "ns" as "ts is in ns" (see the module doc).
    assert list(doc) == ["traceEvents", "baseTimeNanoseconds", "metadata"]
    assert doc["baseTimeNanoseconds"] == T0
    meta = doc["metadata"]
    assert meta["base_time_ns"] == T0
    assert meta["ranks"] == [0, 1]
    assert meta["alignment"] == {
        "method": "collective-end",
        "uncertainty_ns": 120,
        "offsets_ns": list(OFFSETS),
        "note": "hand-made",
    }
    assert meta["echo_view_version"]
    json.loads(path.read_bytes())  # strict JSON (no trailing commas)


def test_slices_keep_name_start_and_duration_exactly(
    job: Job, exported: tuple[Path, dict[str, Any]]
) -> None:
    path, doc = exported
    slices = [s for s in json_slices(doc) if s.cat != STEP_CATEGORY]
    got = Counter((s.name, s.ts, s.dur) for s in slices)
    assert got == expected_slices(job)
    assert inexact_times(path) == []
    steps = [s for s in json_slices(doc) if s.cat == STEP_CATEGORY]
    assert sorted((s.name, s.ts, s.dur) for s in steps) == [
        ("step 1", 0, 10_000),
        ("step 1", 1000 + OFFSETS[1], 10_000),
    ]


def test_no_partial_overlap_and_overlaps_moved_to_named_lanes(
    exported: tuple[Path, dict[str, Any]],
) -> None:
    _, doc = exported
    slices = json_slices(doc)
    assert partial_overlaps(slices) == []
    _, threads = metadata_names(doc)
    lane_of = {(s.name, s.ts): threads[s.thread] for s in slices}
    for rank, shift in ((0, 0), (1, 1000 + OFFSETS[1])):
        assert lane_of[("aten::addmm", 500 + shift)] == f"thread {4100 + rank} (lane 2)"
        assert lane_of[("aten::linear", 100 + shift)] == f"thread {4100 + rank}"
        assert lane_of[("relu", 1790 + shift)] == "stream 7 (lane 2)"
        assert lane_of[("gemm", 1300 + shift)] == "stream 7"
        for name in ("outer", "inner", "dupA", "dupB"):  # nesting: not moved
            assert not lane_of[
                (name, shift + (2000 if name in ("outer", "inner") else 3100))
            ].endswith(")")
    assert doc["metadata"]["layout"]["slices_moved_to_overlap_lanes"] == 4


def test_processes_threads_and_ids(exported: tuple[Path, dict[str, Any]]) -> None:
    _, doc = exported
    procs, threads = metadata_names(doc)
    assert sorted(procs.values()) == sorted(
        ["rank 0 CPU (pid 4000)", "rank 0 GPU 0", "rank 1 CPU (pid 4001)", "rank 1 GPU 0"]
    )
    sort_index = {
        e["pid"]: e["args"]["sort_index"]
        for e in doc["traceEvents"]
        if e.get("name") == "process_sort_index"
    }
    by_order = [procs[p] for p in sorted(procs, key=sort_index.__getitem__)]
    assert [name.split()[1] for name in by_order] == ["0", "0", "1", "1"]  # ranks in order
    tids = [tid for (_, tid) in threads]
    assert len(set(tids)) == len(tids)  # unique across the file
    ids = [*procs, *tids]
    assert all(0 < i < 2**32 for i in ids)
    assert set(procs).isdisjoint(tids)
    assert {"steps", "stream 13", "thread 4200"} <= set(threads.values())
    for e in doc["traceEvents"]:
        if e.get("ph") in ("X", "i", "s", "f"):
            assert (e["pid"], e["tid"]) in threads
        if e.get("ph") == "C":
            assert e["pid"] in procs


def test_flows_bind_to_their_slices(exported: tuple[Path, dict[str, Any]]) -> None:
    _, doc = exported
    flows = json_flows(doc)
    assert len({f.id for f in flows}) == len(flows)
    by_cat = Counter(f.cat for f in flows)
    # per rank: gemm (trace flow), relu + 2 collectives (correlation), forward->backward
    assert by_cat == {"ac2g": 8, "fwdbwd": 2, "collective": 2}
    assert doc["metadata"]["flows"]["skipped"] == 2  # the backward -> forward ones
    procs, _ = metadata_names(doc)
    for f in flows:
        assert f.source is not None and f.end is not None, f
        assert f.source.ts <= f.src_ts <= f.source.end
        assert f.end.ts <= f.end_ts <= f.end.end
        if f.cat == "ac2g":
            assert f.source.name == "cudaLaunchKernel"
            assert f.end.name in ("gemm", "relu", ALLREDUCE, ALLGATHER)
        elif f.cat == "fwdbwd":
            assert (f.source.name, f.end.name) == ("aten::mul", "MulBackward0")
        else:
            assert f.source.name == f.end.name
            assert f.source.name in (ALLREDUCE, ALLGATHER)
            src, dst = procs[f.source.thread[0]], procs[f.end.thread[0]]
            assert {src, dst} == {"rank 0 GPU 0", "rank 1 GPU 0"}
            assert f.source.ts <= f.end.ts  # chained in start order


def test_args_instants_counters(exported: tuple[Path, dict[str, Any]]) -> None:
    _, doc = exported
    events = doc["traceEvents"]
    linear = next(e for e in events if e.get("name") == "aten::linear")
    assert linear["args"] == {"External id": 1}
    awkward = next(e for e in events if e.get("name") == AWKWARD)
    assert awkward["args"] == {"value": [1, 2]}
    instants = [e for e in events if e.get("ph") == "i"]
    assert len(instants) == 2 and all(e["s"] == "t" for e in instants)
    counters = [e for e in events if e.get("ph") == "C"]
    assert [c["args"] for c in counters] == [{"allocated": 1024, "reserved": 2048.5}] * 2


def test_gzip_has_the_same_document(job: Job, tmp_path: Path) -> None:
    plain, packed = tmp_path / "a.json", tmp_path / "a.json.gz"
    PerfettoJsonExporter().write(job, plain)
    PerfettoJsonExporter().write(job, packed)
    assert gzip.decompress(packed.read_bytes()) == plain.read_bytes()


def test_small_chunks_give_the_same_bytes(job: Job, tmp_path: Path) -> None:
    whole, chunked = tmp_path / "whole.json", tmp_path / "chunked.json"
    PerfettoJsonExporter().write(job, whole)
    PerfettoJsonExporter(chunk_rows=3).write(job, chunked)
    assert chunked.read_bytes() == whole.read_bytes()


def test_chunks_cut_by_bytes_give_the_same_bytes(
    job: Job, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chunk of rows is cut further where its text would pass ``CHUNK_BYTES`` (long names
    or args: an Nsight export can name thousands of kernels by one 1 MB string); with a budget
    of a few rows the file is the same."""
    from exporters import jsonrows

    whole, cut = tmp_path / "whole.json", tmp_path / "cut.json"
    PerfettoJsonExporter().write(job, whole)
    pieces: list[int] = []
    slices = jsonrows.byte_slices

    def counted(sizes: np.ndarray, budget: int) -> Iterator[tuple[int, int]]:
        for i, j in slices(sizes, budget):
            pieces.append(j - i)
            yield i, j

    monkeypatch.setattr(jsonrows, "CHUNK_BYTES", 300)
    monkeypatch.setattr(jsonrows, "byte_slices", counted)
    PerfettoJsonExporter().write(job, cut)
    assert cut.read_bytes() == whole.read_bytes()
    assert max(pieces) < 5 < len(pieces)  # cut into pieces of a few rows


def test_failed_export_leaves_no_file(
    job: Job, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object) -> bytes:
        raise OSError("disk full")

    monkeypatch.setattr(pj, "_flow_rows", broken)
    out = tmp_path / "out.json"
    with pytest.raises(OutputError, match="disk full"):  # one line, not a traceback
        PerfettoJsonExporter().write(job, out)
    assert list(tmp_path.iterdir()) == []


def test_stats(job: Job, tmp_path: Path) -> None:
    exp = PerfettoJsonExporter()
    exp.write(job, tmp_path / "s.json")
    assert exp.last_stats is not None
    assert exp.last_stats.events == job.event_count()
    assert exp.last_stats.slices_moved == 4
    assert exp.last_stats.flows == 12
    assert "4 slices moved" in exp.last_stats.one_line()
