"""The Kineto importer on the real samples: golden facts checked against the standard library.

``samples/dlrm_kineto`` is an 8-rank DLRM step traced on one host (V100, NCCL);
``samples/hta_nccl/nccl_data.json.gz`` carries NCCL arguments, float µs and a base time.
"""

from __future__ import annotations

import json
from collections import Counter
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

from echo_view.analysis.steps import steps_of
from echo_view.errors import InputError
from echo_view.model import CollectiveKind, EventKind, Job, LaneKind
from importers.kineto import KinetoImporter
from tests.conftest import data_path
from tests.importers.kineto.files import DLRM, NCCL_DATA, load, ns, write_trace

K = EventKind
CAT_KIND = {
    "cpu_op": K.CPU_OP,
    "cuda_runtime": K.RUNTIME,
    "kernel": K.KERNEL,
    "user_annotation": K.USER_ANNOTATION,
    "gpu_memcpy": K.MEMCPY,
    "gpu_memset": K.MEMSET,
    "gpu_user_annotation": K.GPU_ANNOTATION,
    "Trace": K.OTHER,
}


@pytest.fixture(scope="module")
def dlrm() -> Job:
    return KinetoImporter().read([DLRM])


@pytest.fixture(scope="module")
def nccl() -> Job:
    return KinetoImporter().read([NCCL_DATA])


def test_dlrm_job(dlrm: Job) -> None:
    assert dlrm.ranks == tuple(range(8))
    assert dlrm.world_size == 8
    al = dlrm.alignment
    # One host's clock: kept as is; the first common collective ends within 2 µs on all ranks.
    assert al.method == "shared-host-clock" and al.offsets_ns == (0,) * 8
    assert 0 <= al.uncertainty_ns <= 100_000
    for trace in dlrm:
        assert trace.metadata["rank_source"] == "distributedInfo"
        assert trace.metadata["world_size"] == 8
        kinds = Counter(CollectiveKind(int(k)) for k in trace.collectives.kind)
        assert kinds == {CollectiveKind.SEND_RECV: 5, CollectiveKind.ALL_REDUCE: 3}
        assert trace.steps.number.tolist() == [10]
        assert len(trace.devices) == 8 and trace.devices[0].name == "Tesla V100-SXM2-32GB"


def test_dlrm_rank0_events_match_the_file(dlrm: Job) -> None:
    doc = load(DLRM / "worker0_step_12.1694128201545.pt.trace.json.gz")
    trace = dlrm.trace(0)
    rows = [e for e in doc["traceEvents"] if e["ph"] in ("X", "i")]
    expected = Counter(CAT_KIND[e["cat"]] if e["ph"] == "X" else K.INSTANT for e in rows)
    assert Counter(trace.kind(i) for i in range(len(trace))) == expected
    assert expected[K.CPU_OP] == 1633 and expected[K.KERNEL] == 245 and len(trace) == 2462
    # File order, exact ns (integer µs here), raw args kept.
    assert trace.events.start_ns.tolist() == [ns(e["ts"]) for e in rows]
    assert trace.events.dur_ns.tolist() == [ns(e.get("dur", 0)) for e in rows]
    for i in (0, 700, 2000):
        assert trace.events.args(i) == json.loads(
            json.dumps(rows[i].get("args", {}), default=float)
        )
    corr = [e.get("args", {}).get("correlation", -1) for e in rows]
    ext = [e.get("args", {}).get("External id", -1) for e in rows]
    assert trace.events.correlation.tolist() == corr
    assert trace.events.external_id.tolist() == ext


def test_dlrm_lanes(dlrm: Job) -> None:
    doc = load(DLRM / "worker0_step_12.1694128201545.pt.trace.json.gz")
    trace = dlrm.trace(0)
    streams = {(e["pid"], e["tid"]) for e in doc["traceEvents"] if e.get("cat") == "kernel"}
    gpu = {(lane.device, lane.stream) for lane in trace.lanes if lane.kind == LaneKind.GPU_STREAM}
    assert streams <= gpu == {(0, 7), (0, 22), (0, 24), (0, 84)}
    for i in np.flatnonzero(trace.mask(K.KERNEL, K.MEMCPY)).tolist():
        assert trace.lanes[int(trace.events.lane[i])].kind == LaneKind.GPU_STREAM
    for i in np.flatnonzero(trace.mask(K.CPU_OP, K.RUNTIME)).tolist():
        lane = trace.lanes[int(trace.events.lane[i])]
        assert lane.kind == LaneKind.CPU_THREAD and lane.pid == 59811
    assert {lane.name for lane in trace.lanes} >= {"stream 84", "thread 59811 (python3)"}


def test_dlrm_launch_flows(dlrm: Job) -> None:
    doc = load(DLRM / "worker0_step_12.1694128201545.pt.trace.json.gz")
    sources = [e for e in doc["traceEvents"] if e["ph"] == "s" and e["cat"] == "ac2g"]
    trace = dlrm.trace(0)
    fl = trace.flows
    assert len(fl) == len(sources) == 261
    assert sorted(fl.flow_id.tolist()) == sorted(e["id"] for e in sources)
    ev = trace.events
    for s, d, fid in zip(fl.src.tolist(), fl.dst.tolist(), fl.flow_id.tolist(), strict=True):
        assert trace.kind(s) == K.RUNTIME and trace.kind(d) in (K.KERNEL, K.MEMCPY, K.MEMSET)
        assert ev.correlation[s] == ev.correlation[d] == fid


@pytest.mark.parametrize(
    "path", [DLRM / "worker0_step_12.1694128201545.pt.trace.json.gz", NCCL_DATA]
)
def test_flows_bind_alike_by_scan_or_by_sort(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past a few dozen threads with flow points the binder groups rows by one sort instead of
    a scan per thread (a trace with a thread per event took seconds to minutes): same flows."""
    from importers.kineto import flows

    scanned = KinetoImporter().read([path]).traces[0].flows
    monkeypatch.setattr(flows, "_SCAN_THREADS", 0)
    sorted_ = KinetoImporter().read([path]).traces[0].flows
    assert len(scanned) > 0
    for col in ("src", "dst", "flow_id", "cat"):
        assert (getattr(scanned, col) == getattr(sorted_, col)).all(), col


def test_dlrm_step_gpu_end(dlrm: Job) -> None:
    for trace in dlrm:
        ev = trace.events
        launch = {
            int(ev.correlation[i]): int(ev.start_ns[i])
            for i in np.flatnonzero(trace.mask(K.RUNTIME)).tolist()
        }
        start, end = int(trace.steps.start_ns[0]), int(trace.steps.end_ns[0])
        ends = [
            int(ev.end_ns[i])
            for i in np.flatnonzero(trace.mask(K.KERNEL, K.MEMCPY, K.MEMSET)).tolist()
            if start <= launch.get(int(ev.correlation[i]), -1) < end
        ]
        assert int(steps_of(trace).gpu_end_ns[0]) == max(ends)  # (the analysis fills it)
        step = [i for i in range(len(trace)) if trace.name(i) == "ProfilerStep#10"]
        assert start == int(ev.start_ns[step[0]]) and end == int(ev.end_ns[step[0]])


def test_dlrm_collectives_follow_the_kernels(dlrm: Job) -> None:
    for trace in dlrm:
        col = trace.collectives
        names = [trace.name(int(e)) for e in col.event]
        assert all(n.startswith("ncclKernel_") for n in names)
        # No collective args in these traces: group, size and bytes stay unknown.
        assert set(col.group.tolist()) == {-1} and set(col.bytes.tolist()) == {-1}
        assert set(col.seq.tolist()) == {-1}
        algos = {trace.strings[int(a)] for a in col.algorithm}
        assert algos == {"RING"}
        starts = trace.events.start_ns[col.event]
        assert (np.diff(starts) >= 0).all()


def test_nccl_data_collectives_from_args(nccl: Job) -> None:
    doc = load(NCCL_DATA)
    base = doc["baseTimeNanoseconds"]
    kernels = sorted(
        (e for e in doc["traceEvents"] if e.get("cat") == "kernel" and "nccl" in e["name"]),
        key=lambda e: e["ts"],
    )
    trace = nccl.traces[0]
    col = trace.collectives
    assert len(col) == len(kernels) == 21
    assert trace.groups[0].name == "0" and trace.groups[0].ranks == (0, 1)
    assert trace.groups[0].description == "default_pg"
    for i, k in enumerate(kernels):
        e = int(col.event[i])
        assert int(trace.events.start_ns[e]) == base + ns(k["ts"])
        args = k["args"]
        size = {"Float": 4, "Long": 8}[args["dtype"]]
        assert int(col.bytes[i]) == args["In msg nelems"] * size
        assert (
            trace.strings[int(col.dtype[i])] == {"Float": "float32", "Long": "int64"}[args["dtype"]]
        )
        assert int(col.group[i]) == 0 and int(col.seq[i]) == i
        kind = {"allreduce": CollectiveKind.ALL_REDUCE, "broadcast": CollectiveKind.BROADCAST}
        assert trace.collective_kind(i) == kind[args["Collective name"]]
        assert trace.strings[int(col.algorithm[i])] == "RING"
        assert trace.strings[int(col.protocol[i])] == "LL"
    # The six "wait" calls recorded as record_param_comms move no data.
    assert trace.metadata["import_notes"]["comms_ops_not_collectives"] == 6


def test_nccl_data_times_and_metadata(nccl: Job) -> None:
    doc = load(NCCL_DATA)
    trace = nccl.traces[0]
    base = doc["baseTimeNanoseconds"]
    rows = [e for e in doc["traceEvents"] if e["ph"] in ("X", "i")]
    # Float µs above 2**42 with a base time: exact to the ns, for every event.
    assert trace.events.start_ns.tolist() == [base + ns(e["ts"]) for e in rows]
    assert trace.events.dur_ns.tolist() == [ns(e.get("dur", 0)) for e in rows]
    assert nccl.alignment.method == "single-rank"
    meta = trace.metadata
    assert meta["base_time_ns"] == base and meta["nccl_version"] == "2.17.1"
    assert meta["world_size"] == 2 and meta["backend"] == "nccl"
    fwdbwd = trace.strings.id_of("fwdbwd")
    n_fwdbwd = sum(1 for e in doc["traceEvents"] if e["ph"] == "s" and e["cat"] == "fwdbwd")
    assert int((trace.flows.cat == fwdbwd).sum()) == n_fwdbwd == 543
    fl = trace.flows
    for s, d, c in zip(fl.src.tolist(), fl.dst.tolist(), fl.cat.tolist(), strict=True):
        if c == fwdbwd:
            assert trace.kind(s) == trace.kind(d) == K.CPU_OP
            assert trace.events.start_ns[s] <= trace.events.start_ns[d]


def test_absolute_epoch_float_times_are_exact(tmp_path: Path) -> None:
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1,
         "ts": Decimal("1694128201429795.123"), "dur": Decimal("1.5")},
        {"ph": "X", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1,
         "ts": 1694128201429796, "dur": 2},
        {"ph": "i", "s": "t", "name": "c", "pid": 1, "tid": 1,
         "ts": Decimal("1694128201429799.999")},
    ]  # fmt: skip
    text = (
        '{"traceEvents": ['
        '{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1,'
        ' "ts": 1694128201429795.123, "dur": 1.5},'
        '{"ph": "X", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1,'
        ' "ts": 1694128201429796, "dur": 2},'
        '{"ph": "i", "s": "t", "name": "c", "pid": 1, "tid": 1, "ts": 1694128201429799.999}]}'
    )
    path = tmp_path / "epoch.json"
    path.write_text(text)
    trace = KinetoImporter().read([path]).traces[0]
    assert trace.events.start_ns.tolist() == [ns(e["ts"]) for e in events]
    assert trace.events.start_ns.tolist() == [
        1694128201429795123,
        1694128201429796000,
        1694128201429799999,
    ]
    assert trace.events.dur_ns.tolist() == [1500, 2000, 0]
    # A double cannot hold these: float(ts) * 1000 is off.
    assert round(1694128201429795.123 * 1000) != 1694128201429795123


def test_real_fractional_epoch_times_equal_the_decimal_ones() -> None:
    """Absolute-epoch µs with three decimals (PyTorch 2.3+, 19 digits: beyond a double): every
    start and duration is the file's text converted with Decimal."""
    path = data_path("hta-tests/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")
    rows = [e for e in load(path)["traceEvents"] if e.get("ph") in ("X", "i")]
    assert any(isinstance(e["ts"], Decimal) for e in rows)
    ev = KinetoImporter().read([path]).traces[0].events
    assert ev.start_ns.tolist() == [ns(e["ts"]) for e in rows]
    assert ev.dur_ns.tolist() == [ns(e.get("dur", 0)) for e in rows]


def test_relative_float_times_with_base(tmp_path: Path) -> None:
    path = write_trace(
        tmp_path / "rel.json",
        [
            {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.0, "dur": 0.001},
            {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 2.0, "dur": 3},
        ],
        baseTimeNanoseconds=1_711_964_646_000_000_000,
    )
    text = path.read_text().replace('"ts": 1.0', '"ts": 8796093022207.999')
    path.write_text(text)  # just below 2**43 µs
    trace = KinetoImporter().read([path]).traces[0]
    assert trace.events.start_ns.tolist() == [
        1_711_964_646_000_000_000 + 8_796_093_022_207_999,
        1_711_964_646_000_000_000 + 2_000,
    ]
    assert trace.events.dur_ns.tolist() == [1, 3000]


def test_integer_chunks_then_fractional_ones_are_all_exact(tmp_path: Path) -> None:
    """Chunks are read as numbers while every time is an integer, from the first float on as
    text: each time equals its text converted with Decimal, wherever the switch falls."""
    base = 1712195495519689
    texts = [str(base + 10 * i) for i in range(300)]
    texts += [f"{base + 3000 + 10 * i}.{(i * 37) % 1000:03d}" for i in range(300)]
    texts[450] = "1712195495522689.0005"  # half a ns: to even
    events = ",".join(
        f'{{"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": {t}, "dur": 1.5}}'
        for t in texts
    )
    path = tmp_path / "mixed.json"
    path.write_text(f'{{"traceEvents": [{events}]}}')
    want = [ns(Decimal(t)) for t in texts]
    for chunk_bytes in (1 << 10, 1 << 20):
        ev = KinetoImporter(chunk_bytes=chunk_bytes).read([path]).traces[0].events
        assert ev.start_ns.tolist() == want
        assert set(ev.dur_ns.tolist()) == {1500}


def test_fractional_times_read_as_doubles_are_all_exact(tmp_path: Path) -> None:
    """After the first float, times are read as doubles where a double is exact (relative µs,
    durations) and as text where it is not (a chunk with a half-ns or a long duration; every
    chunk once a ts is absolute-epoch µs): each time equals its text converted with Decimal."""
    ts = [str(10 * i) for i in range(100)]  # integers first
    ts += [f"{1000 + 10 * i}.{(i * 37) % 1000:03d}" for i in range(400)]  # relative, fractional
    ts += [f"{1712195495519689 + 10 * i}.{(i * 7) % 1000:03d}" for i in range(300)]  # epoch
    durs = [f"{i % 50}.{(i * 13) % 1000:03d}" for i in range(800)]
    durs[250] = "0.0005"  # half a ns: to even, from the text
    durs[260] = "3.2704999"  # too near half a ns for a double
    durs[420] = "12345678901.5"  # 3.4 hours: beyond what a double holds to the ns here
    durs[650] = "1.0015"
    events = ",".join(
        f'{{"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": {t}, "dur": {d}}}'
        for t, d in zip(ts, durs, strict=True)
    )
    path = tmp_path / "frac.json"
    path.write_text(f'{{"traceEvents": [{events}]}}')
    want_ts = [ns(Decimal(t)) for t in ts]
    want_dur = [ns(Decimal(d)) for d in durs]
    assert want_dur[250] == 0 and want_dur[260] == 3270 and want_dur[650] == 1002
    for chunk_bytes in (1 << 10, 1 << 12, 1 << 20):
        ev = KinetoImporter(chunk_bytes=chunk_bytes).read([path]).traces[0].events
        assert ev.start_ns.tolist() == want_ts  # (in file order: the starts increase)
        assert ev.dur_ns.tolist() == want_dur


def test_int64_least_time_is_refused_not_read_as_zero(tmp_path: Path) -> None:
    event = {"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "dur": 1}
    path = write_trace(tmp_path / "least.json", [{**event, "ts": 5}, {**event, "ts": -(2**63)}])
    with pytest.raises(InputError) as info:
        KinetoImporter().read([path])
    assert info.value.where == "traceEvents[1].ts"


def test_a_time_that_is_no_time_is_named_after_the_switch_to_text(tmp_path: Path) -> None:
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": 1.5, "dur": 1}
    ] * 200
    path = write_trace(tmp_path / "bad.json", events)
    text = path.read_text()
    cut = text.rindex('"ts": 1.5')
    path.write_text(text[:cut] + '"ts": 4611686018427387.904' + text[cut + 9 :])
    with pytest.raises(InputError) as info:
        KinetoImporter(chunk_bytes=1 << 10).read([path])
    assert info.value.where == "traceEvents[199].ts"
    assert "has ts 4611686018427387.904, not a time in µs" in info.value.message
    path.write_text(text[:cut] + '"ts": "soon"' + text[cut + 9 :])
    with pytest.raises(InputError) as info:
        KinetoImporter(chunk_bytes=1 << 10).read([path])
    assert info.value.where == "traceEvents[199].ts"


def test_a_flow_step_continues_the_flow(tmp_path: Path) -> None:
    # A "t" step was an arrow from the source only, and bound to the next slice on its thread,
    # not the enclosing one: s -> t -> f showed as one arrow, source to end. Perfetto draws
    # s -> t and t -> f, and an "f" after a step comes from the step (the "f" closes nothing).
    def x(name: str, tid: int, ts: int) -> dict[str, object]:
        return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": 10}

    def p(ph: str, tid: int, ts: int, **more: object) -> dict[str, object]:
        return {"ph": ph, "id": 7, "cat": "c", "name": "fl", "pid": 1, "tid": tid, "ts": ts, **more}

    events = [
        x("a", 1, 0), x("b", 2, 20), x("c", 3, 40), x("d", 4, 60),
        p("s", 1, 5), p("t", 2, 25), p("f", 3, 45, bp="e"), p("f", 4, 65, bp="e"),
        {**p("s", 1, 6), "id": 8}, {**p("f", 3, 41, bp="e"), "id": 8},
    ]  # fmt: skip
    path = tmp_path / "flows.json"
    path.write_text(json.dumps({"traceEvents": events}))
    t = KinetoImporter().read([path]).traces[0]
    pairs = zip(t.flows.src.tolist(), t.flows.dst.tolist(), strict=True)
    arrows = sorted((t.name(a), t.name(b)) for a, b in pairs)
    assert arrows == [("a", "b"), ("a", "c"), ("b", "c"), ("b", "d")]


def test_the_args_of_an_end_event_join_its_begin(tmp_path: Path) -> None:
    # The format merges an "E"'s args into its "B" slice (a shared key takes the end's value);
    # they were dropped. Nested pairs each get their own end's args.
    events = [
        {"ph": "B", "name": "outer", "pid": 1, "tid": 1, "ts": 0, "args": {"a": 1, "b": 2}},
        {"ph": "B", "name": "inner", "pid": 1, "tid": 1, "ts": 1},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 2, "args": {"c": 3}},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 5, "args": {"b": 9, "d": "x"}},
        {"ph": "X", "name": "k", "pid": 1, "tid": 2, "ts": 0, "dur": 3, "args": {"z": 1}},
    ]
    path = tmp_path / "be.json"
    path.write_text(json.dumps({"traceEvents": events}))
    t = KinetoImporter().read([path]).traces[0]
    args = {t.name(i): t.events.args(i) for i in range(len(t.events))}
    assert args == {"outer": {"a": 1, "b": 9, "d": "x"}, "inner": {"c": 3}, "k": {"z": 1}}


@pytest.mark.parametrize("async_", [False, True])
def test_begins_and_ends_pair_in_time_order_not_file_order(tmp_path: Path, async_: bool) -> None:
    # Written out of time order (a writer with several threads), outer's end came before
    # inner's: paired in file order, outer took 30-35 and inner 31-40 (crossing slices, one
    # moved to an overlap lane). Perfetto sorts the events by time first: outer 30-40 holds
    # inner 31-35.
    b, e = ("b", "e") if async_ else ("B", "E")
    more = {"cat": "c", "id": "0x1"} if async_ else {}

    def ev(ph: str, name: str, ts: int) -> dict[str, object]:
        return {"ph": ph, "name": name, "pid": 1, "tid": 1, "ts": ts, **more}

    events = [ev(b, "outer", 30), ev(b, "inner", 31), ev(e, "outer", 40), ev(e, "inner", 35)]
    path = tmp_path / "be.json"
    path.write_text(json.dumps({"traceEvents": events}))
    t = KinetoImporter().read([path]).traces[0]
    spans = {t.name(i): (int(t.events.start_ns[i]), int(t.events.dur_ns[i])) for i in range(2)}
    assert spans == {"outer": (30_000, 10_000), "inner": (31_000, 4_000)}


def test_counters_of_one_name_and_two_ids_are_two_series(tmp_path: Path) -> None:
    # The id was dropped: "mem" of gpu0 (1, 2) and of gpu1 (100, 200) became one series, which
    # an export drew as one track holding 1 and 100 at one time. Perfetto names a counter's
    # track "<name> id: <id> <arg>".
    def c(ts: int, id_: object, v: int) -> dict[str, object]:
        return {"ph": "C", "name": "mem", "id": id_, "pid": 1, "tid": 1, "ts": ts, "args": {"b": v}}

    events = [c(0, "gpu0", 1), c(0, 7, 100), c(5, "gpu0", 2), c(5, 7, 200)]
    events.append({"ph": "C", "name": "util", "pid": 1, "tid": 1, "ts": 0, "args": {"p": 5}})
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"traceEvents": events}))
    t = KinetoImporter().read([path]).traces[0]
    names = [t.name(i) for i in range(len(t.events))]
    assert sorted(names) == ["mem id: 7", "mem id: 7", "mem id: gpu0", "mem id: gpu0", "util"]


def test_end_args_that_are_no_json_text_name_their_event(tmp_path: Path) -> None:
    path = tmp_path / "be.json"
    path.write_bytes(
        b'{"traceEvents":[{"ph":"B","name":"a","pid":1,"tid":1,"ts":0},'
        b'{"ph":"E","pid":1,"tid":1,"ts":1,"args":{"s":"\xff"}}]}'
    )
    with pytest.raises(InputError) as err:
        KinetoImporter().read([path])
    assert "traceEvents[1].args" in str(err.value)
