"""Round trips: export -> Kineto import keeps every slice's name, start and duration (exact ns)
and the slice count, per rank; on the hand-made job and on the real 8-rank DLRM sample. The
pftrace side is read back with the structural reader."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from echo_view.analysis.steps import steps_of
from echo_view.model import ClockAlignment, CollectiveKind, EventKind, Job, TraceBuilder
from exporters.layout import STEP_CATEGORY, build_layout
from exporters.perfetto_json import PerfettoJsonExporter
from exporters.perfetto_proto import PerfettoProtoExporter
from importers import kineto
from tests.exporters.export_jobs import handmade_job
from tests.exporters.perfetto_checks import (
    inexact_times,
    json_flows,
    json_slices,
    load_json,
    partial_overlaps,
    read_pftrace,
)

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
POINTS = (EventKind.INSTANT, EventKind.COUNTER)

Key = tuple[str, int, int]


def slices_by_rank(job: Job) -> dict[int, Counter[Key]]:
    """(name, aligned start, duration) of every slice, per rank."""
    out: dict[int, Counter[Key]] = {}
    for trace, off in zip(job.traces, job.alignment.offsets_ns, strict=True):
        ev = trace.events
        out[trace.rank] = Counter(
            (trace.name(i), int(ev.start_ns[i]) + off, int(ev.dur_ns[i]))
            for i in range(len(trace))
            if trace.kind(i) not in POINTS
        )
    return out


def steps_by_rank(job: Job) -> dict[int, list[tuple[int, int, int]]]:
    out = {}
    for trace, off in zip(job.traces, job.alignment.offsets_ns, strict=True):
        st = trace.steps
        out[trace.rank] = [
            (int(n), int(s) + off, int(e) + off)
            for n, s, e in zip(st.number, st.start_ns, st.end_ns, strict=True)
        ]
    return out


@pytest.fixture(scope="module")
def dlrm() -> Job:
    paths = sorted((SAMPLES / "dlrm_kineto").glob("*.json.gz"))
    assert len(paths) == 8
    job: Job = kineto.KinetoImporter().read(paths)
    return job


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_handmade_round_trip(suffix: str, tmp_path: Path) -> None:
    job = handmade_job()
    path = tmp_path / f"job{suffix}"
    PerfettoJsonExporter().write(job, path)
    back: Job = kineto.KinetoImporter().read([path])
    assert back.ranks == job.ranks
    assert slices_by_rank(back) == slices_by_rank(job)
    assert steps_by_rank(back) == steps_by_rank(job)
    for a, b in zip(job.traces, back.traces, strict=True):
        for kind in POINTS:
            assert int(a.mask(kind).sum()) == int(b.mask(kind).sum())


def test_dlrm_json_round_trip(dlrm: Job, tmp_path: Path) -> None:
    path = tmp_path / "dlrm.json"
    exporter = PerfettoJsonExporter()
    exporter.write(dlrm, path)
    back: Job = kineto.KinetoImporter().read([path])
    assert back.ranks == dlrm.ranks == tuple(range(8))
    expected = slices_by_rank(dlrm)
    got = slices_by_rank(back)
    assert {r: sum(c.values()) for r, c in got.items()} == {
        r: sum(c.values()) for r, c in expected.items()
    }
    assert got == expected
    assert steps_by_rank(back) == steps_by_rank(dlrm)


def test_steps_with_unlaunched_gpu_work_read_back_alike(tmp_path: Path) -> None:
    # The Kineto reader ended a step's GPU work with launched work only (1.000 ms); its export,
    # read back, placed the unlaunched all-reduce by its start, as the analysis does (1.400
    # ms): diff called the copy 40% slower. One rule now, in echo_view.analysis.steps.
    def x(name: str, cat: str, ts: int, dur: int, pid: int, tid: int, **args: int) -> dict:
        return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": pid,
                "tid": tid, "args": args}  # fmt: skip

    src = tmp_path / "unlaunched.json"
    src.write_text(json.dumps({"traceEvents": [
        x("ProfilerStep#1", "user_annotation", 1000, 1000, 100, 1),
        x("cudaLaunchKernel", "cuda_runtime", 1100, 10, 100, 1, correlation=7),
        x("gemm", "kernel", 1200, 200, 0, 7, correlation=7, device=0, stream=7),
        x("ncclKernel_AllReduce_RING_LL_Sum_float", "kernel", 1900, 500, 0, 8, device=0, stream=8),
    ]}))  # fmt: skip
    job = kineto.KinetoImporter().read([src])
    out = tmp_path / "x.json"
    PerfettoJsonExporter().write(job, out)
    back = kineto.KinetoImporter().read([out])
    for j in (job, back):
        table = steps_of(j.traces[0])
        assert (table.last_end_ns() - table.start_ns).tolist() == [1_400_000]


def test_dlrm_json_is_perfetto_clean(dlrm: Job, tmp_path: Path) -> None:
    path = tmp_path / "dlrm.json"
    PerfettoJsonExporter().write(dlrm, path)
    doc = load_json(path)
    slices = json_slices(doc)
    assert partial_overlaps(slices) == []
    assert inexact_times(path) == []
    flows = json_flows(doc)
    layout = build_layout(dlrm)
    assert len(flows) == len(layout.links) > 0
    for f in flows:
        assert f.source is not None and f.end is not None
        assert f.source.ts <= f.src_ts <= f.source.end
        assert f.end.ts <= f.end_ts <= f.end.end
        if f.cat == "ac2g":
            assert f.source.name.startswith("cuda")  # a runtime launch
            assert f.source.thread[0] != f.end.thread[0]  # CPU -> GPU process
    n_steps = sum(1 for s in slices if s.cat == STEP_CATEGORY)
    assert len(slices) - n_steps == sum(sum(c.values()) for c in slices_by_rank(dlrm).values())


def test_dlrm_pftrace_structure(dlrm: Job, tmp_path: Path) -> None:
    path = tmp_path / "dlrm.pftrace"
    PerfettoProtoExporter().write(dlrm, path)
    parsed = read_pftrace(path)
    assert parsed.errors == []
    base = build_layout(dlrm).base_ns
    got = Counter((s.name, s.ts + base, s.dur) for s in parsed.slices if s.cat != STEP_CATEGORY)
    expected: Counter[Key] = Counter()
    for c in slices_by_rank(dlrm).values():
        expected.update(c)
    assert got == expected
    out_ids = {f for s in parsed.slices for f in s.flow_out}
    end_ids = {f for s in parsed.slices for f in s.flow_end}
    assert out_ids == end_ids and len(out_ids) == len(build_layout(dlrm).links)


def _collectives(job: Job) -> dict[int, list[tuple[str, str, int, str, tuple[int, ...], int]]]:
    """(kernel, kind, bytes, dtype, group ranks, seq) of every collective, per rank."""
    out = {}
    for t in job.traces:
        c = t.collectives
        out[t.rank] = [
            (
                t.name(int(c.event[i])),
                CollectiveKind(int(c.kind[i])).label,
                int(c.bytes[i]),
                t.strings[int(c.dtype[i])] if c.dtype[i] >= 0 else "",
                t.groups[int(c.group[i])].ranks if c.group[i] >= 0 else (),
                int(c.seq[i]),
            )
            for i in range(len(c.event))
        ]
    return out


def test_collectives_without_args_keep_their_group_and_size(tmp_path: Path) -> None:
    # A predicted job's collectives have no args: their process group, sequence number and
    # size were lost on reading the export back (the cross-rank checks then compared every
    # collective of every rank as one group).
    traces = []
    for rank in (0, 1):
        b = TraceBuilder(rank)
        s = b.gpu_stream(rank, 13)
        dp, pp = b.group("g0", (0, 1), "dp"), b.group("g1", (0, 1))
        k = b.event(EventKind.KERNEL, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 0, 900, s)
        b.collective(k, CollectiveKind.ALL_REDUCE, nbytes=6 << 20, dtype="bfloat16", group=dp,
                     seq=0)  # fmt: skip
        k = b.event(EventKind.KERNEL, "ncclDevKernel_AllGather_RING_LL", 1000, 900, s)
        b.collective(k, CollectiveKind.ALL_GATHER, nbytes=8 << 20, dtype="float32", group=dp,
                     seq=1)  # fmt: skip
        k = b.event(EventKind.KERNEL, "ncclDevKernel_SendRecv", 2000, 900, s)
        b.collective(k, CollectiveKind.SEND_RECV, nbytes=1 << 20, group=pp, seq=0)
        traces.append(b.build())
    job = Job(tuple(traces), ClockAlignment("shared-host-clock", (0, 0), 0), 2, "synth", True)
    path = tmp_path / "job.json"
    PerfettoJsonExporter().write(job, path)
    back = _collectives(kineto.KinetoImporter().read([path]))
    expected = _collectives(job)
    assert expected[0][2][2] == 1 << 20 and expected[0][2][3] == ""
    # The send/receive's size is lost: without a dtype no element count says it.
    expected = {r: [c if c[3] else (*c[:2], -1, *c[3:]) for c in cs] for r, cs in expected.items()}
    assert back == expected
    assert back[0][0] == (
        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "all_reduce", 6 << 20, "bfloat16", (0, 1), 0
    )  # fmt: skip


def test_dlrm_read_back_keeps_each_lanes_process(dlrm: Job, tmp_path: Path) -> None:
    # The export numbers processes and keeps the original pid in the name ("rank 0 CPU (pid
    # 59811)", "rank 0 Spans"); read back, the lanes took the export's numbers (pid 1, 4), so a
    # second export named them "rank 0 CPU (pid 1)", "rank 0 CPU (pid 4)".
    def lanes(job: Job) -> dict[int, set[tuple[str, str, str]]]:
        return {
            t.rank: {(lane.kind.name, repr(lane.pid), lane.name) for lane in t.lanes}
            for t in job.traces
        }

    first, second = tmp_path / "first.json", tmp_path / "second.json"
    PerfettoJsonExporter().write(dlrm, first)
    back: Job = kineto.KinetoImporter().read([first])
    cpu = {(k, p, n) for k, p, n in lanes(back)[0] if k == "CPU_THREAD"}
    assert cpu and {p for _, p, _ in cpu} == {"59811"}
    other = {p for k, p, _ in lanes(back)[0] if k == "OTHER"}
    assert {"'Spans'", "'Traces'"} <= other
    original = {r: {x for x in ls if x[0] != "GPU_STREAM"} for r, ls in lanes(dlrm).items()}
    assert {r: {x for x in ls if x[0] != "GPU_STREAM"} for r, ls in lanes(back).items()} == original
    PerfettoJsonExporter().write(back, second)
    names = [
        [e["args"]["name"] for e in load_json(p)["traceEvents"] if e.get("name") == "process_name"]
        for p in (first, second)
    ]
    assert names[0] == names[1] and "rank 0 CPU (pid 59811)" in names[0]


def test_counters_read_back_on_their_own_thread(tmp_path: Path) -> None:
    # A counter was written with its pid only: read back, it went to a new thread numbered as
    # the pid, and the next export had two threads of one name.
    job = handmade_job()
    assert any(int(t.mask(EventKind.COUNTER).sum()) for t in job.traces)
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    PerfettoJsonExporter().write(job, first)
    back: Job = kineto.KinetoImporter().read([first])
    for a, b in zip(job.traces, back.traces, strict=True):
        assert Counter(lane.kind for lane in a.lanes) == Counter(lane.kind for lane in b.lanes)
    PerfettoJsonExporter().write(back, second)
    names = [
        sorted(
            (e["pid"], e["tid"], e["args"]["name"])
            for e in load_json(p)["traceEvents"]
            if e.get("name") == "thread_name"
        )
        for p in (first, second)
    ]
    assert names[0] == names[1]
