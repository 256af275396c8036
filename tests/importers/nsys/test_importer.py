"""The Nsight Systems importer on the three real 2 x H100 exports in ``samples/nsys``.

Expected values come from SQL over the same files, never from the importer itself.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from echo_view.errors import InputError
from echo_view.model import SEPARATE_RUNS, CollectiveKind, EventKind, Job, LaneKind, Trace
from echo_view.model.trace import ProcessGroup
from importers.nsys import CaptureParts, NsysImporter
from tests.importers.nsys.capture import Proc, build
from tests.importers.nsys.helpers import SAMPLE_NAMES, SAMPLES, query, sample, unpacked

K = "CUPTI_ACTIVITY_KIND_KERNEL"


@pytest.fixture(scope="module")
def jobs() -> dict[str, Job]:
    imp = NsysImporter()
    return {name: imp.read([sample(name)]) for name in SAMPLE_NAMES}


@pytest.fixture(scope="module")
def raw(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("nsys")
    return {name: unpacked(name, tmp) for name in SAMPLE_NAMES}


def _gpu_device(trace: Trace, rows: np.ndarray) -> np.ndarray:
    devices = np.array([lane.device for lane in trace.lanes], dtype=np.int64)
    found: np.ndarray = devices[trace.events.lane[rows]]
    return found


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_sample_imports_as_two_ranks_on_one_clock(jobs: dict[str, Job], name: str) -> None:
    job = jobs[name]
    assert job.ranks == (0, 1)
    assert job.alignment.method == "shared-host-clock"
    assert job.alignment.offsets_ns == (0, 0)
    for trace in job:
        assert trace.metadata["schema_version"] == "3.25.0"
        assert trace.metadata["rank_by"] == "process"
        assert trace.mask(EventKind.KERNEL).sum() > 0


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_kernels_per_device_match_sql(
    jobs: dict[str, Job], raw: dict[str, Path], name: str
) -> None:
    expected = {
        int(d): (int(n), int(total))
        for d, n, total in query(
            raw[name], f'SELECT deviceId, count(*), sum("end" - start) FROM {K} GROUP BY deviceId'
        )
    }
    got: Counter[int] = Counter()
    time: Counter[int] = Counter()
    for trace in jobs[name]:
        rows = np.flatnonzero(trace.mask(EventKind.KERNEL))
        for dev in np.unique(_gpu_device(trace, rows)).tolist():
            sel = rows[_gpu_device(trace, rows) == dev]
            got[dev] += len(sel)
            time[dev] += int(trace.events.dur_ns[sel].sum())
    assert {d: (got[d], time[d]) for d in got} == expected
    # Rank r holds exactly GPU r's kernels (one process per GPU, ranks by GPU index).
    for trace in jobs[name]:
        assert trace.metadata["gpu_devices"] == [trace.rank]


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_memory_operations_match_sql(jobs: dict[str, Job], raw: dict[str, Path], name: str) -> None:
    for kind, table in (
        (EventKind.MEMCPY, "CUPTI_ACTIVITY_KIND_MEMCPY"),
        (EventKind.MEMSET, "CUPTI_ACTIVITY_KIND_MEMSET"),
    ):
        (n, total), *_ = query(raw[name], f'SELECT count(*), sum("end" - start) FROM {table}')
        got = [t.events.dur_ns[t.mask(kind)] for t in jobs[name]]
        assert sum(len(g) for g in got) == n
        assert sum(int(g.sum()) for g in got) == total
    (copied,) = query(raw[name], "SELECT sum(bytes) FROM CUPTI_ACTIVITY_KIND_MEMCPY")[0]
    got_bytes = 0
    for trace in jobs[name]:
        for i in np.flatnonzero(trace.mask(EventKind.MEMCPY)).tolist():
            args = trace.events.args(i)
            got_bytes += args["bytes"]
            assert trace.name(i).startswith("Memcpy ")
    assert got_bytes == copied


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_nvtx_names_resolved(jobs: dict[str, Job], raw: dict[str, Path], name: str) -> None:
    rows = query(
        raw[name],
        "SELECT COALESCE(n.text, s.value), n.domainId FROM NVTX_EVENTS n "
        "LEFT JOIN StringIds s ON s.id = n.textId WHERE n.eventType IN (34, 59, 60)",
    )
    assert all(text for text, _ in rows)
    registered = {text for text, dom in rows if dom != 0}  # NCCL's domain: registered strings
    nvtx_kinds = (EventKind.CPU_OP, EventKind.USER_ANNOTATION, EventKind.INSTANT)
    names: Counter[str] = Counter()
    for trace in jobs[name]:
        for i in np.flatnonzero(trace.mask(*nvtx_kinds)).tolist():
            names[trace.name(i)] += 1
    assert sum(names.values()) == len(rows)
    assert "<missing name>" not in names
    assert registered <= set(names)
    # torch emit_nvtx ranges "aten::x, seq = N, op_id = M" become op "aten::x" with the ids.
    for text, dom in rows[:200]:
        if dom == 0 and ", op_id = " in text:
            assert text.split(", ")[0] in names
    trace = jobs[name].traces[0]
    op = int(np.flatnonzero(trace.mask(EventKind.CPU_OP))[0])
    assert trace.name(op).startswith("aten::")
    assert isinstance(trace.events.args(op)["op_id"], int)


def test_nccl_domain_is_recognised(jobs: dict[str, Job]) -> None:
    trace = jobs["mfu_2gpu_before"].traces[0]
    cats = {
        trace.name(i): trace.strings[int(trace.events.cat[i])]
        for i in np.flatnonzero(trace.mask(EventKind.USER_ANNOTATION)).tolist()
    }
    assert cats["ncclGroupEnd"] == "nvtx:NCCL"
    assert cats["ncclSend"] == "nvtx:NCCL"


@pytest.mark.parametrize("name", ["mfu_2gpu_before", "mfu_2gpu_after"])
def test_collectives_from_ncclDevKernel_SendRecv(
    jobs: dict[str, Job], raw: dict[str, Path], name: str
) -> None:
    expected = dict(
        query(
            raw[name],
            f"SELECT k.deviceId, count(*) FROM {K} k JOIN StringIds s ON s.id = k.shortName "
            "WHERE s.value = 'ncclDevKernel_SendRecv' GROUP BY k.deviceId",
        )
    )
    assert sum(expected.values()) > 0
    for trace in jobs[name]:
        coll = trace.collectives
        assert len(coll) == expected[trace.rank]
        assert {trace.collective_kind(i) for i in range(len(coll))} == {CollectiveKind.SEND_RECV}
        for i in range(len(coll)):
            assert trace.name(int(coll.event[i])).startswith("ncclDevKernel_SendRecv(")
            assert trace.kind(int(coll.event[i])) == EventKind.KERNEL
        # No NVTX payloads in these exports: sizes, groups and sequence numbers stay unknown.
        assert (coll.bytes == -1).all() and (coll.group == -1).all() and (coll.seq == -1).all()
        # The kernel is matched to the ncclSend/ncclRecv calls of the group that launched it.
        attributed = [trace.events.args(int(e)).get("nccl calls") for e in coll.event]
        assert sum(a is not None for a in attributed) >= len(coll) - 1
        assert {tuple(sorted(set(a))) for a in attributed if a} == {("ncclRecv", "ncclSend")}


def test_inference_sample_has_no_collectives(jobs: dict[str, Job]) -> None:
    assert all(len(t.collectives) == 0 for t in jobs["h100_2gpu_1s"])


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_launch_flows_join_by_correlation_within_process(
    jobs: dict[str, Job], raw: dict[str, Path], name: str
) -> None:
    (expected,) = query(
        raw[name],
        "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN ("
        f"SELECT correlationId, globalPid FROM {K} UNION ALL "
        "SELECT correlationId, globalPid FROM CUPTI_ACTIVITY_KIND_MEMCPY UNION ALL "
        "SELECT correlationId, globalPid FROM CUPTI_ACTIVITY_KIND_MEMSET) g "
        "ON g.correlationId = r.correlationId AND (g.globalPid >> 24) = (r.globalTid >> 24)",
    )[0]
    launches = (EventKind.RUNTIME, EventKind.DRIVER)
    work = (EventKind.KERNEL, EventKind.MEMCPY, EventKind.MEMSET)
    total = 0
    for trace in jobs[name]:
        ev, fl = trace.events, trace.flows
        total += len(fl)
        assert np.isin(ev.kind[fl.src], [int(k) for k in launches]).all()
        assert np.isin(ev.kind[fl.dst], [int(k) for k in work]).all()
        assert (ev.correlation[fl.src] == ev.correlation[fl.dst]).all()
        assert (fl.flow_id == ev.correlation[fl.dst]).all()
        assert (ev.start_ns[fl.src] <= ev.start_ns[fl.dst]).all()
        assert {trace.strings[int(c)] for c in fl.cat} == {"ac2g"}
    assert total == expected


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_lanes_and_ordering(jobs: dict[str, Job], name: str) -> None:
    for trace in jobs[name]:
        ev = trace.events
        assert (np.diff(ev.start_ns) >= 0).all()
        assert (ev.dur_ns >= 0).all()
        for lane_id, lane in trace.iter_lanes():
            kinds = set(ev.kind[ev.lane == lane_id].tolist())
            if lane.kind == LaneKind.GPU_STREAM:
                assert lane.device == trace.rank
                assert kinds <= {int(k) for k in (*_GPU_WORK, EventKind.SYNC)}
            elif lane.kind == LaneKind.CPU_THREAD:
                assert lane.pid in trace.metadata["pids"]
                assert int(EventKind.KERNEL) not in kinds
        # The main Python thread is named as Nsight recorded it.
        assert any(lane.name == "python3" for lane in trace.lanes)


_GPU_WORK = (EventKind.KERNEL, EventKind.MEMCPY, EventKind.MEMSET)


def test_runtime_names_lose_the_api_version(jobs: dict[str, Job]) -> None:
    trace = jobs["mfu_2gpu_before"].traces[0]
    names = {trace.name(i) for i in np.flatnonzero(trace.mask(EventKind.RUNTIME)).tolist()}
    assert "cudaLaunchKernel" in names
    assert not any(n.endswith("_v7000") for n in names)
    drivers = {trace.name(i) for i in np.flatnonzero(trace.mask(EventKind.DRIVER)).tolist()}
    assert "cuLaunchKernelEx" in drivers


def test_rank_by_options_agree_on_one_gpu_per_process() -> None:
    path = sample("h100_2gpu_1s")
    by_dev = NsysImporter().read([path], rank_by="device")
    by_proc = NsysImporter(rank_by="process").read([path])
    assert by_dev.traces[0].metadata["rank_by"] == "device"
    for a, b in zip(by_dev, by_proc, strict=True):
        assert a.mask(EventKind.KERNEL).sum() == b.mask(EventKind.KERNEL).sum()
        assert len(a.flows) == len(b.flows)


def test_several_files_make_one_job() -> None:
    job = NsysImporter().read([sample("mfu_2gpu_after"), sample("mfu_2gpu_before")])
    assert job.ranks == (0, 1, 2, 3)
    # Natural file-name order: "after" before "before".
    assert job.traces[0].metadata["file"].endswith("mfu_2gpu_after.sqlite.gz")
    assert job.traces[3].metadata["file"].endswith("mfu_2gpu_before.sqlite.gz")
    # Two runs 80 minutes apart on hosts named "modal" (other boots: the wall-clock anchors
    # differ by 80 minutes): each capture keeps its clock.
    assert job.alignment.method == SEPARATE_RUNS
    assert job.alignment.offsets_ns == (0, 0, 0, 0)


def test_captures_read_one_at_a_time_make_the_same_job() -> None:
    """What the workers do (each capture on its own, its ranks from 0, joined in file order)
    gives the job :meth:`NsysImporter.read` gives: same ranks, events, communicators, clock."""
    imp = NsysImporter()
    paths = [sample("mfu_2gpu_before"), sample("h100_2gpu_1s"), sample("mfu_2gpu_after")]
    files, many = imp.rank_files(paths)
    alone = [imp.read_rank_file(f, many) for f in files]
    assert [[t.rank for t in part.traces] for part in alone] == [[0, 1], [0, 1], [0, 1]]
    parts = imp.job_parts(paths, files, many)
    for part in alone:
        parts.add(part)
    joined, whole = parts.finish(), imp.read(paths)
    assert joined.ranks == whole.ranks == (0, 1, 2, 3, 4, 5)
    assert joined.alignment == whole.alignment and joined.source == whole.source
    for a, b in zip(joined.traces, whole.traces, strict=True):
        assert a.rank == b.rank and a.metadata == b.metadata and a.groups == b.groups
        assert np.array_equal(a.events.start_ns, b.events.start_ns)
        assert np.array_equal(a.events.name, b.events.name)
        assert np.array_equal(a.collectives.group, b.collectives.group)


def test_a_later_captures_ranks_and_communicators_follow_the_earlier_ones() -> None:
    """A capture's communicator members are capture ranks; behind a 2-rank capture they
    become job ranks 2 and 3, as the trace's own rank does."""
    imp = NsysImporter()
    first = imp.read_rank_file(sample("mfu_2gpu_before"), False)
    second = imp.read_rank_file(sample("mfu_2gpu_after"), False)
    known = ProcessGroup("nccl:00000000000000aa", (0, 1), "tp")
    second = replace(second, traces=[replace(t, groups=(known,)) for t in second.traces])
    parts = CaptureParts([sample("mfu_2gpu_before"), sample("mfu_2gpu_after")], "auto")
    parts.add(first)
    parts.add(second)
    job = parts.finish()
    assert [t.rank for t in job.traces] == [0, 1, 2, 3]
    assert [g.ranks for g in job.traces[2].groups] == [(2, 3)]
    assert job.traces[2].groups[0].name == known.name
    assert job.traces[0].groups == first.traces[0].groups  # the first capture keeps its own


def test_input_is_not_modified(tmp_path: Path) -> None:
    path = sample("h100_2gpu_1s")
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    plain = unpacked("h100_2gpu_1s", tmp_path)
    plain_before = hashlib.sha256(plain.read_bytes()).hexdigest()
    NsysImporter().read([path])
    NsysImporter().read([plain])
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    assert hashlib.sha256(plain.read_bytes()).hexdigest() == plain_before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h100_2gpu_1s.sqlite"]


def test_sniff(tmp_path: Path) -> None:
    imp = NsysImporter()
    assert imp.sniff(sample("mfu_2gpu_before"))
    assert imp.sniff(unpacked("mfu_2gpu_before", tmp_path))
    rep = tmp_path / "run.nsys-rep"
    rep.write_bytes(b"\x00" * 16)
    assert imp.sniff(rep)
    other = tmp_path / "trace.json"
    other.write_text('{"traceEvents": []}')
    assert not imp.sniff(other)
    # A directory holding a capture is read as its captures (one per node, say).
    assert imp.sniff(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "trace.json").write_text('{"traceEvents": []}')
    assert not imp.sniff(empty)


def test_a_directory_of_captures_is_the_job_of_its_files(tmp_path: Path) -> None:
    # `info samples/nsys` said "no trace files in this directory" before.
    imp = NsysImporter()
    listed = imp.read([sample(n) for n in SAMPLE_NAMES])
    folder = imp.read([SAMPLES])
    assert folder.ranks == listed.ranks == (0, 1, 2, 3, 4, 5)
    for a, b in zip(folder.traces, listed.traces, strict=True):
        assert a.metadata == b.metadata and np.array_equal(a.events.start_ns, b.events.start_ns)
    # `nsys export` writes NAME.sqlite beside NAME.nsys-rep: that capture is read once.
    unpacked("h100_2gpu_1s", tmp_path)
    (tmp_path / "h100_2gpu_1s.nsys-rep").write_bytes(b"\x00" * 16)
    (tmp_path / "other.nsys-rep").write_bytes(b"\x00" * 16)
    (tmp_path / "notes.txt").write_text("not a capture")
    files, _ = imp.rank_files([tmp_path])
    assert [f.name for f in files] == ["h100_2gpu_1s.sqlite", "other.nsys-rep"]
    with pytest.raises(InputError, match="no Nsight Systems exports in this directory"):
        imp.rank_files([tmp_path / "notes.txt", _folder(tmp_path / "none")])


def _folder(path: Path) -> Path:
    path.mkdir()
    (path / "a.json").write_text("{}")
    return path


def test_captures_from_two_hosts_are_placed_by_wall_clock(tmp_path: Path) -> None:
    # Another capture made to run on node2 while the first ran: its session start moved so
    # that its first event falls 50 ms after the first capture's.
    first, second = unpacked("mfu_2gpu_after", tmp_path), unpacked("mfu_2gpu_before", tmp_path)
    shift = _first_utc_ns(first) + 50_000_000 - _first_utc_ns(second)
    con = sqlite3.connect(second)
    con.execute("UPDATE TARGET_INFO_SYSTEM_ENV SET value = 'node2' WHERE name = 'Hostname'")
    con.execute("UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = utcEpochNs + ?", (shift,))
    con.commit()
    con.close()
    anchor = "SELECT utcEpochNs - systemClockNs FROM TARGET_INFO_SESSION_START_TIME"
    offset = query(second, anchor)[0][0] - query(first, anchor)[0][0]
    job = NsysImporter().read([first, second])
    assert job.alignment.method == "wall-clock"
    assert job.alignment.offsets_ns == (0, 0, offset, offset)
    assert job.alignment.uncertainty_ns == 1_000_000


def _first_utc_ns(path: Path) -> int:
    """UTC ns of a capture's first event, by SQL: its wall-clock anchor plus the earliest
    start of the tables the importer reads."""
    anchor = query(path, "SELECT utcEpochNs - systemClockNs FROM TARGET_INFO_SESSION_START_TIME")
    kinds = ("MEMCPY", "MEMSET", "RUNTIME", "SYNCHRONIZATION")
    tables = (K, *(f"CUPTI_ACTIVITY_KIND_{k}" for k in kinds), "NVTX_EVENTS")
    have = {r[0] for r in query(path, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    first = min(query(path, f"SELECT min(start) FROM {t}")[0][0] for t in tables if t in have)
    return int(anchor[0][0] + first)


def _first_utc(path: Path) -> str:
    """:func:`_first_utc_ns` as the second it falls in."""
    when = datetime.fromtimestamp(_first_utc_ns(path) // 10**9, tz=UTC)
    return when.strftime("%Y-%m-%d %H:%M:%S UTC")


def test_captures_of_different_runs_keep_their_clocks(tmp_path: Path) -> None:
    # The three samples ran on hosts named "modal" days apart; they were taken as one host
    # clock ("shared-host-clock"), and `check` compared their collectives (EV703, EV707).
    job = NsysImporter().read([SAMPLES])
    al = job.alignment
    assert al.method == SEPARATE_RUNS
    assert al.offsets_ns == (0,) * 6
    names = ["h100_2gpu_1s", "mfu_2gpu_before", "mfu_2gpu_after"]  # by their first event
    starts = [_first_utc(unpacked(n, tmp_path)) for n in names]
    assert starts[0].startswith("2026-05-24") and starts[2].startswith("2026-05-26")
    expected = "; ".join(f"{n}.sqlite.gz from {t}" for n, t in zip(names, starts, strict=True))
    assert al.note == f"captures of different runs (not running at the same time): {expected}"


def test_one_host_name_on_two_boots_is_not_one_clock(tmp_path: Path) -> None:
    # Same host name, wall-clock anchors 1.2 s apart: another boot (or container) of a host
    # with that name, whose clock is not this one's; its 0.3 s capture ends 0.9 s before the
    # other's begins, within the 1 s that is not taken as proof of another run.
    first = unpacked("mfu_2gpu_after", tmp_path)
    second = tmp_path / "mfu_2gpu_after_boot2.sqlite"  # after the first, by name
    second.write_bytes(first.read_bytes())
    con = sqlite3.connect(second)
    con.execute("UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = utcEpochNs + 1200000000")
    con.commit()
    con.close()
    job = NsysImporter().read([first, second])
    assert job.alignment.method == "wall-clock"
    assert job.alignment.offsets_ns == (0, 0, 1_200_000_000, 1_200_000_000)
    # A copy of the capture is on the same host clock.
    copy = tmp_path / "copy.sqlite"
    copy.write_bytes(first.read_bytes())
    assert NsysImporter().read([first, copy]).alignment.method == "shared-host-clock"


def test_captures_without_clock_anchors_are_not_aligned(tmp_path: Path) -> None:
    a = build(tmp_path / "a.sqlite", [Proc(100, (0,), 1)])
    b = build(tmp_path / "b.sqlite", [Proc(200, (0,), 1)])
    job = NsysImporter().read([a, b])
    assert job.ranks == (0, 1)
    assert job.alignment.method == "none"


def test_content_wins_over_the_report_suffix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A SQLite export saved under a report name is read directly, without the nsys CLI.
    monkeypatch.setenv("PATH", str(tmp_path / "no-nsys-here"))
    misnamed = tmp_path / "run.nsys-rep"
    misnamed.write_bytes(unpacked("h100_2gpu_1s", tmp_path).read_bytes())
    assert NsysImporter().read([misnamed]).ranks == (0, 1)


def test_long_nvtx_texts_cost_a_few_times_their_bytes(tmp_path: Path) -> None:
    """``emit_nvtx(record_shapes=True)`` texts ("..., op_id = N, sizes = [[...]]") take the
    general path. Its work (decoding, searching, reading record headers) runs a bounded
    number of bytes at a time, and those whole texts are not interned as names: the import's
    peak Python memory stays within 8x the NVTX text (it was 19x: 326 MB for 17 MB)."""
    import tracemalloc

    path = unpacked("h100_2gpu_1s", tmp_path)
    con = sqlite3.connect(path)
    sizes = "', sizes = [[' || printf('%.*c', 20000, '1') || ']]'"
    con.execute(f"UPDATE NVTX_EVENTS SET text = text || {sizes} WHERE rowid % 20 = 0")
    con.commit()
    (text_bytes,) = con.execute("SELECT sum(length(text)) FROM NVTX_EVENTS").fetchone()
    con.close()
    assert text_bytes > 15_000_000
    tracemalloc.start()
    try:
        job = NsysImporter().read([path])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * text_bytes, (peak, text_bytes)
    names = {s for t in job.traces for s in t.strings.strings}
    assert not any(len(s) > 1000 for s in names)  # the ops are named, not their whole texts


def test_record_shapes_texts_split_on_the_bytes_match_the_pattern(tmp_path: Path) -> None:
    """The plain record_shapes texts are split column-wise; the job is the one the per-row
    pattern gives (names, args and every column)."""
    import itertools
    from unittest import mock

    import importers.nsys.nvtx as nvtx
    from importers.nsys.text import SizedOps

    path = unpacked("h100_2gpu_1s", tmp_path)
    con = sqlite3.connect(path)
    con.execute(
        "UPDATE NVTX_EVENTS SET text = text || ', sizes = [[' || (rowid % 13) || ', 8], []]' "
        "WHERE rowid % 3 = 0 AND text LIKE '%op_id = %'"
    )
    con.execute("UPDATE NVTX_EVENTS SET text = text || ', sizes = [\"q\"]' WHERE rowid % 7 = 1")
    con.commit()
    con.close()
    fast = NsysImporter().read([path])
    empty = np.zeros(0, dtype=np.int64)
    with mock.patch.object(nvtx, "split_sized_ops", lambda text, rows: SizedOps(*(empty,) * 6)):
        slow = NsysImporter().read([path])
    sized = 0
    for a, b in zip(fast.traces, slow.traces, strict=True):
        for col in ("kind", "start_ns", "dur_ns", "cat", "lane", "correlation"):
            assert np.array_equal(getattr(a.events, col), getattr(b.events, col)), col
        assert [a.strings[i] for i in a.events.name.tolist()] == [
            b.strings[i] for i in b.events.name.tolist()
        ]
        assert a.events.args_offsets is not None and b.events.args_offsets is not None
        bounds_a = itertools.pairwise(a.events.args_offsets.tolist())
        bounds_b = itertools.pairwise(b.events.args_offsets.tolist())
        args_a = [a.events.args_blob[x:y] for x, y in bounds_a]
        assert args_a == [b.events.args_blob[x:y] for x, y in bounds_b]
        sized += sum(b'"sizes":"[[' in x for x in args_a)
    assert sized > 1000


def test_tiny_budgets_import_the_same_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The NVTX text and record headers are worked a bounded number of bytes or records at a
    time; with budgets of a few bytes (a row or two each) the job is the same."""
    from importers.nsys import args as nsys_args
    from importers.nsys import pages as nsys_pages
    from importers.nsys import text as nsys_text

    path = unpacked("h100_2gpu_1s", tmp_path)
    con = sqlite3.connect(path)
    for sql in (
        "UPDATE NVTX_EVENTS SET text = text || ', sizes = ' WHERE rowid % 5 = 0",
        "UPDATE NVTX_EVENTS SET text = text || ', sizes = [\"a\\b\"]' WHERE rowid % 11 = 0",
        "UPDATE NVTX_EVENTS SET text = text || ', sizes = ' || printf('%.*c', 3000, '9') "
        "WHERE rowid = 50",
    ):
        con.execute(sql)
    con.commit()
    con.close()
    whole = NsysImporter().read([path])
    for module, name, value in (
        (nsys_text, "DECODE_BYTES", 7),
        (nsys_text, "SEARCH_BYTES", 50),
        (nsys_args, "_CHUNK_BYTES", 9),
        (nsys_pages, "_HEADER_ROWS", 3),
    ):
        monkeypatch.setattr(module, name, value)
    small = NsysImporter().read([path])
    for a, b in zip(whole.traces, small.traces, strict=True):
        assert a.events.args_blob == b.events.args_blob
        assert [a.strings[i] for i in a.events.name.tolist()] == [
            b.strings[i] for i in b.events.name.tolist()
        ]
        for col in ("kind", "start_ns", "dur_ns", "cat", "lane", "correlation"):
            assert np.array_equal(getattr(a.events, col), getattr(b.events, col)), col
