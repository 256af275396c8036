"""Native Perfetto protobuf export: parsed back with perfetto_trace_pb2 and compared to the job
and to the JSON export (same slices, lanes and flows)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from echo_view.errors import OutputError
from echo_view.model import ClockAlignment, Job
from exporters.layout import STEP_CATEGORY, build_layout
from exporters.perfetto_json import PerfettoJsonExporter
from exporters.perfetto_proto import METADATA_TRACK, PerfettoProtoExporter, rank_roots
from exporters.protowire import Rows, varint_bytes, with_suffixes
from tests.exporters.export_jobs import (
    ALLGATHER,
    ALLREDUCE,
    OFFSETS,
    T0,
    handmade_job,
    handmade_rank,
)
from tests.exporters.perfetto_checks import (
    ProtoTrace,
    json_flows,
    json_slices,
    load_json,
    metadata_names,
    proto_flow_pairs,
    read_pftrace,
)
from tests.exporters.test_export_json import expected_slices


@pytest.fixture(scope="module")
def job() -> Job:
    return handmade_job()


@pytest.fixture(scope="module")
def parsed(job: Job, tmp_path_factory: pytest.TempPathFactory) -> ProtoTrace:
    path = tmp_path_factory.mktemp("pf") / "job.pftrace"
    PerfettoProtoExporter().write(job, path)
    return read_pftrace(path)


def test_packets_are_well_formed(parsed: ProtoTrace) -> None:
    assert parsed.errors == []


def test_slices_keep_name_start_and_duration_exactly(job: Job, parsed: ProtoTrace) -> None:
    slices = [s for s in parsed.slices if s.cat != STEP_CATEGORY]
    assert Counter((s.name, s.ts, s.dur) for s in slices) == expected_slices(job)
    steps = [s for s in parsed.slices if s.cat == STEP_CATEGORY]
    assert sorted((s.name, s.ts, s.dur, s.annotations["step"]) for s in steps) == [
        ("step 1", 0, 10_000, 1),
        ("step 1", 1000 + OFFSETS[1], 10_000, 1),
    ]


def test_same_tracks_and_lanes_as_json(job: Job, parsed: ProtoTrace, tmp_path: Path) -> None:
    """Ranks are top-level tracks; under each, the JSON export's processes (same pids, names
    without the rank) and under those its threads (same tids and names), in explicit order."""
    path = tmp_path / "job.json"
    PerfettoJsonExporter().write(job, path)
    doc = load_json(path)
    procs, threads = metadata_names(doc)
    tracks = parsed.tracks
    roots = {u: t.name for u, t in tracks.items() if not t.parent_uuid and t.name != METADATA_TRACK}
    assert sorted(roots.values()) == ["rank 0", "rank 1"]
    explicit = pb.TrackDescriptor.EXPLICIT
    assert all(tracks[u].child_ordering == explicit for u in roots)
    pf_procs = {u: t for u, t in tracks.items() if t.parent_uuid in roots}
    assert {u: f"{roots[t.parent_uuid]} {t.name}" for u, t in pf_procs.items()} == procs
    assert all(t.child_ordering == explicit for t in pf_procs.values())
    pf_threads = {
        (t.parent_uuid, u): t.name for u, t in tracks.items() if t.parent_uuid in pf_procs
    }
    counters = {k for k, t in tracks.items() if t.HasField("counter")}
    assert {k: v for k, v in pf_threads.items() if k[1] not in counters} == threads
    for pid in pf_procs:
        mine = [tid for p, tid in sorted(pf_threads) if p == pid and tid not in counters]
        ranks = [tracks[tid].sibling_order_rank for tid in mine]
        assert ranks == sorted(ranks)
    json_where = Counter((threads[s.thread], s.name, s.ts, s.dur) for s in json_slices(doc))
    pf_where = Counter((tracks[s.track].name, s.name, s.ts, s.dur) for s in parsed.slices)
    assert pf_where == json_where


def test_nesting_per_track(parsed: ProtoTrace) -> None:
    by_track: dict[int, list[tuple[int, int]]] = {}
    for s in parsed.slices:
        by_track.setdefault(s.track, []).append((s.ts, s.ts + s.dur))
    for spans in by_track.values():
        for a0, a1 in spans:
            for b0, b1 in spans:
                assert not (a0 < b0 < a1 < b1), (a0, a1, b0, b1)


def test_flows_pair_like_the_json_flows(job: Job, parsed: ProtoTrace, tmp_path: Path) -> None:
    out, end = proto_flow_pairs(parsed.slices)
    assert out.keys() == end.keys()
    assert len(out) == 12
    pf = Counter((out[f].name, out[f].ts, end[f].name, end[f].ts) for f in out)
    path = tmp_path / "job.json"
    PerfettoJsonExporter().write(job, path)
    flows = json_flows(load_json(path))
    js = Counter(
        (f.source.name, f.source.ts, f.end.name, f.end.ts)
        for f in flows
        if f.source is not None and f.end is not None
    )
    assert pf == js
    for f in out:
        assert out[f].ts <= end[f].ts


def test_annotations(parsed: ProtoTrace) -> None:
    ar = [s for s in parsed.slices if s.name == ALLREDUCE]
    assert len(ar) == 2
    for s in ar:
        assert s.annotations["collective"] == "all_reduce"
        assert s.annotations["bytes"] == 4096
        assert s.annotations["group"] == "0"
        assert s.annotations["seq"] == 0
        assert s.annotations["correlation"] == 13
    ag = [s for s in parsed.slices if s.name == ALLGATHER]
    assert all("seq" not in s.annotations for s in ag)
    linear = next(s for s in parsed.slices if s.name == "aten::linear")
    assert linear.annotations["args"] == '{"External id":1}'
    assert "correlation" not in linear.annotations


def test_instants_counters_metadata(parsed: ProtoTrace) -> None:
    names = Counter(s.name for s in parsed.instants)
    assert names == {"iteration start": 2, METADATA_TRACK: 1}
    meta = next(s for s in parsed.instants if s.name == METADATA_TRACK)
    assert meta.annotations["base_time_ns"] == T0
    assert meta.annotations["alignment_method"] == "collective-end"
    tracks = {t.uuid: t.name for t in parsed.tracks.values() if t.HasField("counter")}
    got = sorted((tracks[u], ts, v) for u, ts, v in parsed.counters)
    shift = 1000 + OFFSETS[1]
    assert got == [
        ("GPU memory allocated", 60, 1024.0),
        ("GPU memory allocated", 60 + shift, 1024.0),
        ("GPU memory reserved", 60, 2048.5),
        ("GPU memory reserved", 60 + shift, 2048.5),
    ]


def test_small_chunks_give_the_same_bytes(job: Job, tmp_path: Path) -> None:
    a, b = tmp_path / "a.pftrace", tmp_path / "b.pftrace"
    PerfettoProtoExporter().write(job, a)
    PerfettoProtoExporter(chunk_packets=5).write(job, b)
    assert a.read_bytes() == b.read_bytes()


def test_failed_export_leaves_no_file(
    job: Job, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import exporters.perfetto_proto as pp

    def broken(*args: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(pp, "_write_metadata", broken)
    with pytest.raises(OutputError, match="disk full"):  # one line, not a traceback
        PerfettoProtoExporter().write(job, tmp_path / "x.pftrace")
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- column-wise wire encoding

EDGES = [0, 1, 127, 128, 300, 16_383, 16_384, 2**31 - 1, 2**35, 2**56, 2**63 - 1, -1, -(2**63)]


def test_varints_match_protobuf() -> None:
    values = np.array(EDGES, dtype=np.int64)
    rows = Rows(len(values), width=4)  # forces the matrix to grow
    rows.raw(b"\x20")  # DebugAnnotation.int_value
    rows.varint(values)
    flat = rows.flat().tobytes()
    at = 0
    for v, n in zip(EDGES, rows.len.tolist(), strict=True):
        msg = pb.DebugAnnotation.FromString(flat[at : at + n])
        assert msg.int_value == v
        assert flat[at : at + n] == pb.DebugAnnotation(int_value=v).SerializeToString()
        assert flat[at + 1 : at + n] == varint_bytes(v)
        at += n


def test_masked_fields_prepend_and_suffixes_match_protobuf() -> None:
    n = 4
    ids = np.array([5, 2**40, 7, 2**64 - 1], dtype=np.uint64).view(np.int64)
    value = np.array([0.5, -2.25, 1e300, 0.0])
    body = Rows(n, 8, start=16)
    body.raw(b"\x58")
    body.varint(np.array([1, 300, 70_000, 2]))
    has_flow = np.array([True, False, True, True])
    body.raw(b"\xf9\x02", has_flow)
    body.fixed64(ids, has_flow)
    body.raw(b"\xe1\x02", ~has_flow)
    body.fixed64(value, ~has_flow)
    names = [b"\x50\x01", b"\x50\x02"]
    body.pooled(names, np.array([0, 1, 1, 0]))
    head = Rows(n, 16)
    head.raw(b"\x48")
    head.varint(np.array([1, 2, 3, 4]))
    body.prepend(head)
    tails = [b"", b"\xb2\x01\x02ab", b"", b"\xb2\x01\x01z"]  # categories (22), a string
    data = with_suffixes(
        body.flat(),
        body.total_len(),
        b"".join(tails),
        np.array([len(t) for t in tails], dtype=np.int64),
    )
    at = 0
    for i, length in enumerate((body.total_len() + [len(t) for t in tails]).tolist()):
        te = pb.TrackEvent.FromString(data[at : at + length])
        at += length
        assert te.type == i + 1
        assert te.track_uuid == [1, 300, 70_000, 2][i]
        assert te.name_iid == [1, 2, 2, 1][i]
        if has_flow[i]:
            assert list(te.flow_ids) == [int(ids.view(np.uint64)[i])]
        else:
            assert te.double_counter_value == value[i]
        assert list(te.categories) == [[], ["ab"], [], ["z"]][i]
    assert at == len(data)


def test_rank_tracks_sort_by_name_in_rank_order() -> None:
    """Top-level tracks sort by name in Perfetto: rank numbers are padded to one width."""
    traces = tuple(replace(handmade_rank(0), rank=r) for r in (2, 10, 1))
    job = Job(traces, ClockAlignment("none", (0, 0, 0), 0, "test"), world_size=11)
    roots = rank_roots(build_layout(job), 100)
    assert list(roots.values()) == [(100, "rank 01"), (101, "rank 02"), (102, "rank 10")]
    assert sorted(name for _, name in roots.values()) == [n for _, n in roots.values()]


def test_group_names_of_any_number_and_length(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """3,000 collectives, each in a process group of its own, one group's name 200,000 bytes
    long: every group annotation comes back whole. The names are written after the
    fixed-width fields: written into them, each distinct name cost a pass over the chunk's
    rows (40,000 groups: 4.5 s) and the long one widened every row to its length (1 MB: a
    61 GiB allocation and a traceback)."""
    import json

    from echo_view.loading import read_job

    n, long_name = 3_000, "G" * 200_000
    kernel = {"ph": "X", "cat": "kernel", "pid": 0, "tid": 7, "dur": 5}
    kernel["name"] = (
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
    )
    events = []
    for i in range(n):
        args = {"device": 0, "stream": 7, "correlation": i, "Collective name": "allreduce"}
        args |= {"In msg nelems": 1024, "Out msg nelems": 1024, "dtype": "Float"}
        args |= {"Process Group Name": long_name if i == 7 else f"pg{i}"}
        args |= {"Process Group Ranks": "[0]", "Group size": 1}
        events.append({**kernel, "ts": 10 * i, "args": args})
    src = tmp_path / "t.json"
    src.write_text(json.dumps({"traceEvents": events}))
    out = tmp_path / "t.pftrace"
    widths: list[int] = []
    at = Rows._at

    def recording_at(self: Rows, rows: np.ndarray, extra: int) -> tuple[np.ndarray, np.ndarray]:
        result = at(self, rows, extra)
        widths.append(self.buf.shape[1])
        return result

    monkeypatch.setattr(Rows, "_at", recording_at)
    PerfettoProtoExporter().write(read_job([src]), out)
    assert widths and max(widths) < 200  # no row was widened to a name's length
    parsed = read_pftrace(out)
    assert not parsed.errors
    groups = sorted((s.ts, s.annotations["group"]) for s in parsed.slices)
    assert [g for _, g in groups] == [long_name if i == 7 else f"pg{i}" for i in range(n)]
    assert all(s.annotations["collective"] == "all_reduce" for s in parsed.slices)


def test_gathered_matches_a_loop() -> None:
    from exporters.protowire import gathered

    rng = np.random.default_rng(7)
    pool = [bytes(rng.integers(0, 256, int(k), dtype=np.uint8)) for k in rng.integers(0, 40, 50)]
    index = rng.integers(0, len(pool), 500)
    mask = rng.random(500) < 0.6
    data, lens = gathered(pool, index, mask)
    want = [pool[v] if m else b"" for v, m in zip(index.tolist(), mask.tolist(), strict=True)]
    assert data.tobytes() == b"".join(want)
    assert lens.tolist() == [len(w) for w in want]
    empty, zero = gathered(pool, index, np.zeros(500, dtype=bool))
    assert len(empty) == 0 and not zero.any()


def test_a_counter_given_as_a_string_of_a_number_keeps_its_sample(tmp_path: Path) -> None:
    # Perfetto reads {"bytes": "200"} of a JSON counter as 200; the .pftrace left it out, and
    # the values that are no number, without a word.
    from echo_view.model import EventKind, LaneKind, TraceBuilder

    b = TraceBuilder(0)
    cpu = b.lane(LaneKind.CPU_THREAD, 1, 1)
    b.event(EventKind.CPU_OP, "op", 0, 1000, cpu)
    args = {"num": 1.5, "text": "200", "exp": "1e3", "word": "abc", "none": None, "flag": True}
    b.event(EventKind.COUNTER, "mem", 10, 0, cpu, args=args)
    job = Job((b.build(),), ClockAlignment("none", (0,), 0), 1, "j")
    path = tmp_path / "c.pftrace"
    exporter = PerfettoProtoExporter()
    exporter.write(job, path)
    parsed = read_pftrace(path)
    tracks = {t.uuid: t.name for t in parsed.tracks.values() if t.HasField("counter")}
    assert sorted((tracks[u], v) for u, _, v in parsed.counters) == [
        ("mem exp", 1000.0),
        ("mem num", 1.5),
        ("mem text", 200.0),
    ]
    assert exporter.last_stats is not None
    assert exporter.last_stats.counter_values_dropped == 3
    assert exporter.last_stats.one_line().endswith(
        ", 3 counter value(s) that are no number left out"
    )
