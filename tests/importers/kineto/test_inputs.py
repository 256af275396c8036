"""The Kineto importer on every real Kineto file, on plain Chrome JSON, and on bad input."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from echo_view.errors import InputError, InputNote
from echo_view.model import GPU_KINDS, EventKind, Job, LaneKind
from importers.chrome_json import read_container
from importers.kineto import KinetoImporter
from importers.kineto.meta import rank_from_name
from tests.conftest import data_path, shared_path
from tests.importers.kineto.files import DLRM, NCCL_DATA, SHARED_KINETO, load, write_trace

K = EventKind


def read(*paths: Path) -> Job:
    return KinetoImporter().read(list(paths))


def error_of(*paths: Path) -> InputError:
    with pytest.raises(InputError) as info:
        read(*paths)
    return info.value


@pytest.mark.parametrize("rel", SHARED_KINETO, ids=lambda r: Path(r).name[:30])
def test_every_shared_kineto_file_imports(rel: str) -> None:
    path = data_path(rel)
    job = read(path)
    trace = job.traces[0]
    with read_container(path) as c:  # Kineto writes distributedInfo before the events
        dist = c.header.get("distributedInfo") or {}
    if "rank" in dist:
        assert trace.rank == dist["rank"]
    ev = trace.events
    assert len(trace) > 0 and (ev.dur_ns >= 0).all()
    for kind in GPU_KINDS:
        lanes = {trace.lanes[int(i)].kind for i in ev.lane[trace.mask(kind)]}
        assert lanes <= {LaneKind.GPU_STREAM}
    fl = trace.flows
    assert (fl.src != fl.dst).all()
    col = trace.collectives
    assert all(trace.kind(int(e)) in (K.KERNEL, K.CPU_OP) for e in col.event)
    assert ((col.group == -1) | (col.group < len(trace.groups))).all()
    st = trace.steps
    assert (st.end_ns >= st.start_ns).all() and (np.diff(st.number) > 0).all()


def test_old_vocabulary_resnet50() -> None:
    path = shared_path(
        "data",
        "kineto-tb-plugin-samples",
        "resnet50_num_workers_0",
        "worker0.1623143089861.pt.trace.json.gz",
    )
    doc = load(path)
    trace = read(path).traces[0]
    cats = {"Operator": K.CPU_OP, "Runtime": K.RUNTIME, "Kernel": K.KERNEL, "Memset": K.MEMSET}
    for cat, kind in cats.items():
        n = sum(1 for e in doc["traceEvents"] if e.get("cat") == cat and e["ph"] == "X")
        assert int(trace.mask(kind).sum()) == n > 0
    # "async" launch flows, tid "stream 7" strings on the GPU and "25738" strings on the CPU.
    assert len(trace.flows) == 9096
    gpu = {(lane.device, lane.stream) for lane in trace.lanes if lane.kind == LaneKind.GPU_STREAM}
    assert (0, 7) in gpu
    cpu = {lane.tid for lane in trace.lanes if lane.kind == LaneKind.CPU_THREAD}
    assert 25738 in cpu and "25738" not in cpu
    assert trace.steps.number.tolist() == [5, 6, 7, 8, 9, 10]
    assert trace.metadata["rank_source"] == "file name"  # worker0...


def test_generic_chrome_json_array(tmp_path: Path) -> None:
    events = [
        {"ph": "M", "name": "thread_name", "pid": "app", "tid": 1, "args": {"name": "main"}},
        {"ph": "B", "name": "outer", "pid": "app", "tid": 1, "ts": 10},
        {"ph": "X", "name": "inner", "pid": "app", "tid": 1, "ts": 12, "dur": 3},
        {"ph": "s", "name": "f", "cat": "c", "id": "0x1f", "pid": "app", "tid": 1, "ts": 13},
        {"ph": "E", "pid": "app", "tid": 1, "ts": 20},
        {"ph": "X", "name": "other", "pid": "app", "tid": 2, "ts": 30, "dur": 5},
        {"ph": "f", "bp": "e", "name": "f", "cat": "c", "id": "0x1f", "pid": "app", "tid": 2,
         "ts": 31},
        {"ph": "C", "name": "mem", "pid": "app", "ts": 15, "args": {"bytes": 7}},
        {"ph": "i", "name": "mark", "pid": "app", "tid": 1, "ts": 16, "s": "t"},
        {"ph": "b", "name": "req", "cat": "net", "id": 5, "pid": "app", "ts": 40},
        {"ph": "e", "name": "req", "cat": "net", "id": 5, "pid": "app", "ts": 47},
        {},
    ]  # fmt: skip
    path = tmp_path / "plain.json"
    path.write_text(json.dumps(events)[:-1])  # truncated: no closing "]"
    with warnings.catch_warnings():  # the closing {} is routine: no note of a skipped event
        warnings.simplefilter("error", InputNote)
        job = read(path)
    trace = job.traces[0]
    assert job.ranks == (0,) and job.alignment.method == "single-rank"
    meta = trace.metadata
    assert meta["source_format"] == "chrome-json" and meta["truncated"] is True
    assert meta["rank_source"].startswith("default")
    names = [trace.name(i) for i in range(len(trace))]
    assert names == ["outer", "inner", "other", "mem", "mark", "req"]
    assert trace.events.dur_ns.tolist() == [10_000, 3_000, 5_000, 0, 0, 7_000]
    assert [trace.kind(i) for i in range(len(trace))] == [
        K.OTHER,
        K.OTHER,
        K.OTHER,
        K.COUNTER,
        K.INSTANT,
        K.OTHER,
    ]
    assert trace.lanes[int(trace.events.lane[0])].name == "main"
    assert trace.lanes[int(trace.events.lane[5])].tid == "net (async)"
    # The flow source binds to the deepest open slice (inner), the end to "other".
    assert trace.flows.src.tolist() == [1] and trace.flows.dst.tolist() == [2]
    assert trace.flows.flow_id.tolist() == [0x1F]


def test_ranks_from_file_names(tmp_path: Path) -> None:
    for rank in (0, 1):
        write_trace(
            tmp_path / f"job_rank-{rank}.json",
            [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 5, "dur": 1}],
        )
    job = read(tmp_path)
    assert job.ranks == (0, 1)
    assert {t.metadata["rank_source"] for t in job} == {"file name"}
    assert job.alignment.method == "none" and job.alignment.uncertainty_ns == -1


@pytest.mark.parametrize(
    ("name", "rank"),
    [
        ("rank-3.json", 3),
        ("rank3.json.gz", 3),
        ("trace_rank_12.json", 12),
        ("worker7_step_12.1694128201553.pt.trace.json.gz", 7),
        ("trainer-2.json", 2),
        ("RANK_5.json", 5),
        ("crank5.json", None),
        ("ranking.json", None),
        ("trace.json", None),
    ],
)
def test_rank_from_name(name: str, rank: int | None) -> None:
    assert rank_from_name(Path(name)) == rank


def test_collective_end_alignment(tmp_path: Path) -> None:
    """Relative clocks: ranks are shifted so that the first common collective ends together."""
    nccl = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
    skew = (0, 5_000)  # rank 1's clock reads 5 µs late
    for rank in (0, 1):
        events = []
        for seq, (ts, dur) in enumerate([(100, 50), (400, 80)]):
            args = {
                "Collective name": "allreduce",
                "In msg nelems": 256,
                "dtype": "Float",
                "Process Group Name": "0",
                "Process Group Ranks": "[0, 1]",
                "Seq": seq,
            }
            start = ts + skew[rank] / 1000 - 10 * rank  # rank 1 arrives earlier, ends together
            events.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": nccl,
                    "pid": 0,
                    "tid": 7,
                    "ts": start,
                    "dur": dur + 10 * rank,
                    "args": args,
                }
            )
        write_trace(tmp_path / f"r{rank}.json", events, distributedInfo={"rank": rank})
    job = read(tmp_path)
    al = job.alignment
    assert al.method == "collective-end"
    assert al.offsets_ns == (0, -5_000) and al.uncertainty_ns == 0
    t1 = job.trace(1)
    assert int(t1.collectives.bytes[0]) == 1024 and t1.groups[0].ranks == (0, 1)
    assert t1.collectives.seq.tolist() == [0, 1]


def test_progress_reaches_the_end() -> None:
    seen: list[float] = []
    KinetoImporter(chunk_bytes=1 << 16).read([NCCL_DATA], lambda msg, f: seen.append(f))
    assert len(seen) > 5 and seen == sorted(seen) and seen[-1] == 1.0
    assert all(0.0 <= f <= 1.0 for f in seen)


def test_sniff(tmp_path: Path) -> None:
    imp = KinetoImporter()
    assert imp.sniff(NCCL_DATA) and imp.sniff(DLRM)
    (tmp_path / "notes.json").write_text('{"a": 1}')
    (tmp_path / "x.txt").write_text("hello")
    assert not imp.sniff(tmp_path / "notes.json") and not imp.sniff(tmp_path / "x.txt")
    assert not imp.sniff(tmp_path)


# -- rejections ----------------------------------------------------------------------------


def test_truncated_gzip(tmp_path: Path) -> None:
    data = NCCL_DATA.read_bytes()
    path = tmp_path / "cut.json.gz"
    path.write_bytes(data[: len(data) // 3])
    err = error_of(path)
    assert "truncated gzip" in err.message and err.path == str(path)


def test_invalid_json(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(
        '{"traceEvents": [\n  {"ph": "X", "ts": 1, "dur": 2},\n  {"ph": "X" "ts": 3}\n]}'
    )
    err = error_of(path)
    assert "invalid JSON" in err.message and err.where == "line 3 column 14"  # the key after "X"


def test_not_a_trace(tmp_path: Path) -> None:
    path = tmp_path / "list.json"
    path.write_text("[1, 2, 3]")
    err = error_of(path)
    assert err.where == "traceEvents[0]" and "expected `object`" in err.message


def test_trace_events_missing(tmp_path: Path) -> None:
    path = tmp_path / "none.json"
    path.write_text('{"schemaVersion": 1, "deviceProperties": []}')
    assert "no traceEvents" in error_of(path).message


def test_trace_events_not_a_list(tmp_path: Path) -> None:
    path = tmp_path / "obj.json"
    path.write_text('{"schemaVersion": 1, "traceEvents": "none"}')
    assert error_of(path).message == "traceEvents is not a list (it is a string)"


@pytest.mark.parametrize(("drop", "what"), [("dur", "dur"), ("ts", "ts")])
def test_event_missing_a_required_field(tmp_path: Path, drop: str, what: str) -> None:
    events = [
        {"ph": "X", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1} for i in range(2000)
    ]
    del events[1234][drop]
    err = error_of(write_trace(tmp_path / "x.json.gz", events))
    assert err.where == "traceEvents[1234]" and f"has no {what}" in err.message
    assert "'op1234'" in err.message


def test_two_files_claim_one_rank(tmp_path: Path) -> None:
    src = DLRM / "worker0_step_12.1694128201545.pt.trace.json.gz"
    a = shutil.copy(src, tmp_path / "a.json.gz")
    b = shutil.copy(src, tmp_path / "b.json.gz")
    err = error_of(tmp_path)
    assert "two files claim rank 0" in err.message
    assert str(a) in err.message and str(b) in err.message


def test_files_without_rank(tmp_path: Path) -> None:
    for name in ("first.json", "second.json"):
        write_trace(
            tmp_path / name, [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}]
        )
    err = error_of(tmp_path)
    assert "cannot tell which rank" in err.message and "rank-3.json" in (err.hint or "")


def test_one_file_alone_in_a_directory_is_rank_0(tmp_path: Path) -> None:
    # As when the file is given itself: a directory used to make any file state its rank
    # (`info DIR` of a one-GPU profile said "cannot tell which rank this file is").
    write_trace(tmp_path / "host_123.pt.trace.json", [{"ph": "X", "name": "a", "pid": 1,
                                                       "tid": 1, "ts": 1, "dur": 1}])  # fmt: skip
    job = KinetoImporter().read([tmp_path])
    assert job.ranks == (0,) and job.source == str(tmp_path)
    assert job.traces[0].metadata["rank_source"] == "default (a single file that states no rank)"


def test_files_of_different_jobs(tmp_path: Path) -> None:
    shutil.copy(DLRM / "worker1_step_12.1694128201556.pt.trace.json.gz", tmp_path / "a.json.gz")
    doc = json.loads(gzip.decompress(NCCL_DATA.read_bytes()))
    (tmp_path / "b.json").write_text(json.dumps(doc))
    assert "different jobs" in error_of(tmp_path).message


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: os.mkfifo(p), "not a regular file"),  # reading it would block
        (lambda p: p.symlink_to(p.parent / "gone.json.gz"), "cannot read this file (No such"),
        (lambda p: p.write_bytes(b"PK\x03\x04 not gzip"), "empty or damaged gzip data"),
        (lambda p: p.write_bytes(b""), "empty or damaged gzip data"),
        (lambda p: p.write_bytes(b"\x1f\x8b\x08\x00" + b"\xff" * 64), "damaged gzip"),
    ],
    ids=["fifo", "dangling-link", "not-gzip", "empty", "bad-deflate"],
)
def test_a_rank_file_of_a_folder_that_cannot_be_read_is_named_not_skipped(
    tmp_path: Path, make: Callable[[Path], object], message: str
) -> None:
    # A folder of rank files read without one of them gives wrong numbers with exit 0.
    shutil.copy(DLRM / "worker0_step_12.1694128201545.pt.trace.json.gz", tmp_path / "rank0.json.gz")
    bad = tmp_path / "rank1.json.gz"
    make(bad)
    err = error_of(tmp_path)
    assert message in err.message and err.path == str(bad), err.one_line()
    assert "move it out of the folder" in (err.hint or "")


def test_other_files_and_folders_of_a_job_folder_are_left_alone(tmp_path: Path) -> None:
    shutil.copy(DLRM / "worker0_step_12.1694128201545.pt.trace.json.gz", tmp_path / "rank0.json.gz")
    (tmp_path / "settings.json").write_text('{"lr": 1}')  # readable, not a trace
    (tmp_path / "logs.json").mkdir()
    os.mkfifo(tmp_path / "pipe")  # no trace suffix
    (tmp_path / "extra.gz").write_bytes(gzip.compress(b"some other data"))
    assert read(tmp_path).ranks == (0,)


def test_a_trace_of_metadata_only_is_refused_like_an_empty_one(tmp_path: Path) -> None:
    # It was read as a job of 0 events, whose export (traceEvents: []) was then refused.
    meta = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}}]
    flows = [{"ph": "s", "id": 1, "name": "f", "cat": "c", "pid": 1, "tid": 1, "ts": 1}]
    path = write_trace(tmp_path / "meta.json", meta + flows)
    err = error_of(path)
    assert err.message.startswith("the trace holds no slices, instants or counters (2 events")


def test_repairs_that_change_the_counts_are_warned_once_per_file(tmp_path: Path) -> None:
    # A negative duration read as 0 long, an end without a begin dropped, an array cut inside
    # an event: each was silent (the trace's metadata only), the results counting otherwise.
    # Events without a phase or with one the format does not have were skipped silently.
    x = {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 2}
    no_ph = {k: v for k, v in x.items() if k != "ph"}
    events = [x, {**x, "ts": 5, "dur": -2}, {"ph": "E", "pid": 1, "tid": 1, "ts": 9}, no_ph]
    events += [{**x, "ph": "Q"}, {**x, "ph": "R"}]  # ("R", a mark, is routine: not read)
    text = json.dumps(events).encode()[:-1] + b', {"ph": "X", "na'
    path = tmp_path / "rank-0.json"
    path.write_bytes(text)
    with pytest.warns(InputNote) as seen:
        read(path)
    assert [str(w.message) for w in seen] == [
        f"{path}: the event array ends inside an event (a trace cut short): 15 bytes of a "
        "half-written last event dropped",
        f"{path}: 1 slice(s) of negative duration read as 0 long (Perfetto drops them)",
        f"{path}: 1 end event(s) (E, e) without a begin, dropped",
        f'{path}: 2 event(s) with no or an unknown phase ("ph") skipped ((none) ×1, Q ×1); '
        "`echo-view check` lists them",
    ]
    # Without its "]" but whole (the format allows it), and routine notes: nothing to warn.
    path.write_bytes(json.dumps([x]).encode()[:-1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        read(path)
        read(DLRM / "worker0_step_12.1694128201545.pt.trace.json.gz")


def test_missing_and_empty_inputs(tmp_path: Path) -> None:
    assert "no such file" in error_of(tmp_path / "nope.json").message
    (tmp_path / "empty").mkdir()
    assert "no trace files" in error_of(tmp_path / "empty").message


def test_link_ids_in_either_spelling(tmp_path: Path) -> None:
    """2021 traces spell the link "external id"; either spelling is read, "External id" first,
    in one chunk; a row with neither has none (-1)."""
    args: list[dict[str, int] | None] = [
        {"External id": 7},
        {"external id": 8},
        {"External id": 9, "external id": 10},
        {"Sequence number": 3},
        None,
    ]
    op = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "dur": 1}
    events = [{**op, "ts": 2 * i, **({"args": a} if a else {})} for i, a in enumerate(args)]
    trace = read(write_trace(tmp_path / "links.json", events)).traces[0]
    assert trace.events.external_id.tolist() == [7, 8, 9, -1, -1]


@pytest.mark.parametrize("digits", [20, 5000])
def test_device_and_stream_numbers_beyond_int64(tmp_path: Path, digits: int) -> None:
    """A 'GPU N' process label or 'stream N' thread name whose N does not fit int64 (or
    Python's 4,300-digit int()) names no device or stream: the pid and tid stand in."""
    big = "9" * digits
    events = [
        {"ph": "M", "name": "process_name", "pid": 5, "args": {"name": f"GPU {big}"}},
        {"ph": "M", "name": "thread_name", "pid": 5, "tid": 7, "args": {"name": f"stream {big}"}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 5, "tid": 7, "ts": 0, "dur": 2,
         "args": {"correlation": 1}},
    ]  # fmt: skip
    trace = read(write_trace(tmp_path / "big.json", events)).traces[0]
    gpu = [lane for lane in trace.lanes if lane.kind == LaneKind.GPU_STREAM]
    assert [(lane.device, lane.stream) for lane in gpu] == [(5, 7)]


def test_messages_quote_long_names_cut(tmp_path: Path) -> None:
    """An event's name is quoted in an error cut to 80 characters (a 100,000-character name
    made a 100 KB line)."""
    events = [{"ph": "X", "cat": "cpu_op", "name": "A" * 100_000, "pid": 1, "tid": 1, "dur": 3}]
    err = error_of(write_trace(tmp_path / "long.json", events))
    assert "has no ts" in err.message and len(err.message) < 120


@pytest.mark.parametrize(("nelems", "want"), [(256, 1024), (2**61 - 1, 2**63 - 4), (2**61, -1)])
def test_collective_bytes_past_int64_are_unknown(tmp_path: Path, nelems: int, want: int) -> None:
    """A payload of 2^61 floats is 2^63 bytes: once an OverflowError traceback, now unknown."""
    nccl = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
    args = {"Collective name": "allreduce", "In msg nelems": nelems, "dtype": "Float"}
    event = {"ph": "X", "cat": "kernel", "name": nccl, "pid": 0, "tid": 7, "ts": 1, "dur": 5}
    write_trace(tmp_path / "r0.json", [{**event, "args": args}])
    assert read(tmp_path).trace(0).collectives.bytes.tolist() == [want]


def test_a_long_string_tid_on_a_gpu_lane_reads_in_one_pass(tmp_path: Path) -> None:
    # The stream number is read from the end of a string tid: searched from every position,
    # a 40,000-character tid took 27 s.
    long_tid = "1" * 200_000 + "x"
    events = [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": long_tid, "ts": 1, "dur": 2},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": "stream 7 ", "ts": 5, "dur": 2},
    ]
    job = KinetoImporter().read([write_trace(tmp_path / "t.json", events)])
    streams = sorted(lane.stream for lane in job.traces[0].lanes)
    assert streams == [-1, 7]


def test_system_trace_text_is_warned_as_not_read(tmp_path: Path) -> None:
    # Chrome writes ftrace text beside the events ("systemTraceEvents"), which Perfetto shows:
    # it was dropped without a word, from `info` and from an export.
    x = {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 2}
    path = tmp_path / "chrome.json"
    text = "# tracer: nop\n  <idle>-0 [000] d..1 100.000000: cpu_idle: state=1 cpu_id=0\n"
    path.write_text(json.dumps({"traceEvents": [x], "systemTraceEvents": text}))
    with pytest.warns(InputNote) as seen:
        read(path)
    assert [str(w.message) for w in seen] == [
        f"{path}: systemTraceEvents (system trace text, {len(text)} characters) not read: "
        "echo-view reads traceEvents only, and an export leaves it out"
    ]
