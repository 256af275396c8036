"""The timeline's numpy index and rasteriser against brute force on random and hand-made
events."""

from __future__ import annotations

import numpy as np
import pytest

from echo_view.loading import read_job
from echo_view.model import ClockAlignment, EventKind, Job, LaneKind, Trace, TraceBuilder
from echo_view.tui.index import Source, TimelineIndex, display_classes
from echo_view.tui.raster import GLYPHS, Window, cells, display_name, render_row, short_name
from echo_view.tui.ruler import format_tick, nice_step, ruler_text
from echo_view.tui.tracks import COMM, Coverage, Track
from tests.conftest import shared_path


def _random_track(seed: int, n: int = 600, nested: bool = True) -> Track:
    rng = np.random.default_rng(seed)
    starts = np.sort(rng.integers(0, 1_000_000, n)).astype(np.int64)
    durs = rng.integers(0, 5_000, n).astype(np.int64)
    if nested:
        durs[rng.integers(0, n, 5)] = 400_000  # a few long enclosing events
    order = np.lexsort((-durs, starts))
    starts, durs = starts[order], durs[order]
    classes = rng.choice([int(EventKind.KERNEL), COMM, int(EventKind.MEMCPY)], n).astype(np.uint8)
    return Track(
        0, 0, 0, "t", LaneKind.GPU_STREAM, np.arange(n), starts, starts + durs, classes
    )  # fmt: skip


def _busy_brute(starts: np.ndarray, ends: np.ndarray, a: int, b: int) -> int:
    covered = np.zeros(b - a, dtype=bool)
    for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
        lo, hi = max(s, a), min(e, b)
        if hi > lo:
            covered[lo - a : hi - a] = True
    return int(covered.sum())


def test_coverage_is_the_measure_of_the_union() -> None:
    rng = np.random.default_rng(1)
    starts = np.sort(rng.integers(0, 2_000, 300)).astype(np.int64)
    ends = starts + rng.integers(0, 60, 300)
    cov = Coverage.of(starts, ends)
    bounds = np.array([0, 137, 500, 501, 999, 1500, 2100], dtype=np.int64)
    busy = cov.busy(bounds)
    for i in range(len(bounds) - 1):
        assert busy[i] == _busy_brute(starts, ends, int(bounds[i]), int(bounds[i + 1]))
    assert cov.total == _busy_brute(starts, ends, 0, 3_000)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_visible_and_count_match_brute_force(seed: int) -> None:
    t = _random_track(seed)
    rng = np.random.default_rng(seed + 10)
    for _ in range(50):
        t0 = int(rng.integers(-10_000, 1_000_000))
        t1 = t0 + int(rng.integers(1, 300_000))
        want = np.flatnonzero((t.starts < t1) & (t.ends > t0))
        np.testing.assert_array_equal(t.visible(t0, t1), want)
        # count_visible counts instants at the window edge too; it bounds the enumeration.
        assert t.count_visible(t0, t1) >= len(want)
        min_dur = int(rng.integers(0, 10_000))
        long_enough = want[(t.ends[want] - t.starts[want]) >= min_dur]
        np.testing.assert_array_equal(t.visible(t0, t1, min_dur), long_enough)


def test_at_returns_the_innermost_covering_event() -> None:
    starts = np.array([0, 10, 20, 50], dtype=np.int64)
    ends = np.array([100, 40, 30, 60], dtype=np.int64)
    t = Track(0, 0, 0, "t", LaneKind.CPU_THREAD, np.arange(4), starts, ends, np.zeros(4, np.uint8))
    assert t.at(25) == 2  # inside 0 > 1 > 2
    assert t.at(45) == 0  # only the outer one
    assert t.at(200) is None
    assert t.at(105, slack=10) == 0  # nearest within the slack


def test_filter_hides_classes_and_next_shown_skips_them() -> None:
    t = _random_track(3, nested=False)
    t.set_filter(frozenset({COMM}))
    vis = t.visible(0, 2_000_000)
    assert len(vis) and (t.classes[vis] == COMM).all()
    first = int(np.flatnonzero(t.classes == COMM)[0])
    assert t.next_shown(0, 1) == first
    assert set(t.coverage) == {COMM}


def test_index_groups_lanes_per_rank_with_gpu_header(synth: Job) -> None:
    index = TimelineIndex.build([Source(synth, "")])
    assert [g.rank for g in index.groups] == [0, 1]
    g = index.groups[0]
    assert [t.lane_kind for t in g.lanes] == [
        LaneKind.CPU_THREAD,
        LaneKind.GPU_STREAM,
        LaneKind.GPU_STREAM,
    ]
    trace = synth.traces[0]
    gpu = trace.mask(EventKind.KERNEL, EventKind.MEMCPY, EventKind.MEMSET)
    assert g.header is not None and len(g.header) == int(gpu.sum())
    assert index.event_count() == sum(len(t) for t in synth.traces)
    # The NCCL kernel is shown as communication, the GEMMs as kernels.
    s13 = g.lanes[2]
    assert set(s13.classes.tolist()) == {COMM}
    lo, hi = index.span
    assert lo == 0 and hi == max(int(t.events.end_ns.max()) for t in synth.traces)


def test_lanes_of_processes_that_share_a_label_name_their_process() -> None:
    # Every process's thread 1 was "cpu 1": the lanes could not be told apart.
    b = TraceBuilder(0)
    for pid in (7, 9):
        b.event(EventKind.CPU_OP, "op", 0, 10, b.lane(LaneKind.CPU_THREAD, pid, 1))
    b.event(EventKind.CPU_OP, "op", 0, 10, b.lane(LaneKind.CPU_THREAD, 7, 2))
    b.event(EventKind.KERNEL, "k", 0, 10, b.gpu_stream(0, 7))
    job = Job((b.build(),), ClockAlignment("none", (0,), 0))
    index = TimelineIndex.build([Source(job, "")])
    labels = sorted(t.label for t in index.groups[0].lanes)
    assert labels == ["cpu 1 (pid 7)", "cpu 1 (pid 9)", "cpu 2", "gpu0 s7"]


def test_interleaved_two_source_index_and_views(synth: Job) -> None:
    other = Job(synth.traces, synth.alignment, 2, "b", True)
    full = TimelineIndex.build([Source(synth, "A"), Source(other, "B")])
    assert [(g.rank, g.source) for g in full.groups] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    only_b = full.view(only_source=1)
    assert [g.source for g in only_b.groups] == [1, 1]
    shifted = full.view(sources=[Source(synth, "A", 0), Source(other, "B", 1000)])
    assert shifted.span[0] == full.span[0] - 1000


def test_cells_show_full_blocks_where_covered_and_names_where_wide() -> None:
    starts = np.array([0, 500], dtype=np.int64)
    ends = np.array([300, 520], dtype=np.int64)
    kinds = np.array([int(EventKind.KERNEL)] * 2, dtype=np.uint8)
    t = Track(0, 0, 0, "t", LaneKind.GPU_STREAM, np.arange(2), starts, ends, kinds)
    w = Window(0, 100, 10)  # 10 cells of 100 ns
    glyphs, _ = cells(t, w, 0)
    assert glyphs[:3] == ["█"] * 3
    assert glyphs[5] == GLYPHS[2]  # 20 of 100 ns busy -> a low bar
    assert glyphs[4] == " "
    text = "".join(s.text for s in render_row(t, w, 0, lambda p: ["gemm", "tiny"][p]))
    assert len(text) == 10
    assert text.startswith(" ge")  # three cells: the name is cut to fit
    assert "tiny" not in text  # one cell wide: no room for a name


def test_selected_and_matched_cells_are_marked() -> None:
    starts = np.array([0, 500], dtype=np.int64)
    ends = np.array([300, 520], dtype=np.int64)
    kinds = np.array([int(EventKind.KERNEL)] * 2, dtype=np.uint8)
    t = Track(0, 0, 0, "t", LaneKind.GPU_STREAM, np.arange(2), starts, ends, kinds)
    w = Window(0, 100, 10)
    plain = render_row(t, w, 0, str)
    sel = render_row(t, w, 0, str, selected=1)
    assert [s.style for s in plain] != [s.style for s in sel]
    assert any(s.text == "▮" and s.style is not None and s.style.bold for s in sel)
    hit = render_row(t, w, 0, str, match_starts=np.array([500], dtype=np.int64))
    marks = [s for s in hit if s.style is not None and s.style.color is not None]
    assert any(s.text == "█" and s.style.color.name == "#ffd75f" for s in marks)  # type: ignore[union-attr]


def test_short_names() -> None:
    assert short_name("void at::native::k<4, float>(int, float*)") == "k"
    # Nsight's anonymous namespace is no template argument list (it read "at::native::").
    name = "void at::native::<unnamed>::vectorized_layer_norm_kernel<float, float, (bool)0>(int)"
    assert short_name(name) == "vectorized_layer_norm_kernel"
    assert display_name(name, "full") == name
    assert "\x1b" not in short_name("void bad\x1b[2Jname<int>(x)")
    assert short_name("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)") == (
        "ncclKernel_AllReduce_RING_LL_Sum_float"
    )
    assert short_name("PyTorch Profiler (0)") == "PyTorch Profiler (0)"
    assert short_name("aten::mm") == "aten::mm"


def test_ruler_steps_and_labels() -> None:
    assert nice_step(100, 12) == 2000
    assert nice_step(1000, 12) == 20000
    assert format_tick(2_000_000, 1_000_000) == "2ms"
    assert format_tick(2_500_000, 500_000) == "2.5ms"
    assert format_tick(1500, 500) == "1.5µs"
    text = ruler_text(Window(0, 100_000, 60), 12, "time").plain
    assert text.startswith("time") and "╵0ms" in text and "╵2ms" in text
    assert len(text) == 12 + 60
    # The last tick's label would run past the edge: it is written before the tick instead.
    end = ruler_text(Window(0, 300e6 / 58, 60), 12, "time").plain
    assert end.endswith("0.3s╵ ") and "╵0.2s" in end and len(end) == 72
    # A bookmark on a label clears that label ("╵0ms" read "╵0◆s"); its tick stays.
    marked = ruler_text(Window(0, 100_000, 60), 12, "time", marks=[250_000]).plain
    assert "╵ ◆ " in marked and "0◆" not in marked and "╵2ms" in marked and len(marked) == 72


def test_deepep_kernels_show_as_communication() -> None:
    """DeepSeek's DeepSeek-V3 training profile: the timeline draws its 32 DeepEP kernels
    (8 dispatch, 8 combine, 16 token-count exchanges) as communication, and nothing else."""
    path = shared_path("data", "deepseek-profile-data", "train.json.gz")
    trace = read_job([path]).traces[0]
    comm = np.flatnonzero(display_classes(trace) == COMM)
    names = [trace.name(int(r)) for r in comm]
    assert len(names) == 32
    assert all(n.startswith("void dpsk::ep::internode::") for n in names)
    assert sum("::dispatch<" in n for n in names) == sum("::combine<" in n for n in names) == 8
    # Its layout kernel is local work, drawn as a kernel.
    layout = [i for i in range(len(trace.events)) if "get_dispatch_layout" in trace.name(i)]
    assert len(layout) == 4 and (display_classes(trace)[layout] == int(EventKind.KERNEL)).all()


def test_index_of_many_ranks_reads_each_rank_span_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # The index asked the job for its origin once per rank, and the job worked it out over
    # all ranks each time: 3,000 ranks took 40 s to open.
    traces = []
    for rank in range(60):
        b = TraceBuilder(rank)
        cpu = b.lane(LaneKind.CPU_THREAD, 1, 1)
        b.event(EventKind.CPU_OP, "op", 1000 + 7 * rank, 50, cpu)
        traces.append(b.build())
    job = Job(tuple(traces), ClockAlignment("none", (0,) * 60, 0), 60, "j")
    calls = 0
    span = Trace.span_ns

    def counted(trace: Trace) -> tuple[int, int]:
        nonlocal calls
        calls += 1
        return span(trace)

    monkeypatch.setattr(Trace, "span_ns", counted)
    index = TimelineIndex.build([Source(job, "")])
    assert [g.rank for g in index.groups] == list(range(60))
    assert job.start_ns() == 1000
    assert calls <= 2 * 60
    assert job.index_of(59) == 59


@pytest.mark.parametrize("query", ["linear", "nccl|cutlass", "Memcpy", "x^"])
def test_search_finds_what_a_lane_by_lane_scan_finds(synth: Job, query: str) -> None:
    # The search walks the matching rows once, by lane (a loop over every lane took 10 µs a
    # lane); here against that loop.
    import re as _re

    from echo_view.tui.search import search

    index = TimelineIndex.build([Source(synth, "A"), Source(synth, "B", 5_000)])
    found = search(index, query)
    pattern = _re.compile(query, _re.IGNORECASE)
    expected: dict[int, list[int]] = {}
    hits = []
    for g in index.groups:
        trace = index.trace(g.source, g.trace)
        match = np.array([bool(pattern.search(trace.name(i))) for i in range(len(trace))])
        shift = index.sources[g.source].shift_ns
        for t in [*g.lanes, *([g.header] if g.header else [])]:
            p = np.flatnonzero(match[t.rows])
            if len(p):
                expected[id(t)] = sorted(t.starts[p].tolist())
            if t.lane >= 0:
                hits += [(int(t.starts[q]) - shift, id(t), int(q)) for q in p]
    assert {k: v.tolist() for k, v in found.starts.items()} == expected
    got = [
        (int(found.times[i]), id(found.tracks[int(found.track_of[i])]), int(found.pos[i]))
        for i in range(len(found))
    ]
    assert sorted(got) == sorted(hits) and [h[0] for h in got] == sorted(h[0] for h in hits)
    assert (len(found) > 0) == (query != "x^")


def test_a_search_builds_no_lane_coverages_and_honours_a_filter(synth: Job) -> None:
    # Since the hits follow the filters, the search asked every lane with a hit for its shown
    # flags through the lane's whole drawn view (coverages per class): 100,000 undrawn lanes
    # took 3 s where the search alone took 0.3 s. The flags alone need no coverage.
    from echo_view.tui.search import search

    index = TimelineIndex.build([Source(synth, "A")])
    lanes = [t for g in index.groups for t in [*g.lanes, *([g.header] if g.header else [])]]
    found = search(index, "linear|nccl")
    assert len(found) > 0
    assert all(t._shown_view is None for t in lanes)  # nothing drawn, nothing built
    # Under a filter the flags are the drawn view's: hide every event shorter than the median.
    durs = np.concatenate([t.ends - t.starts for t in lanes])
    cut = int(np.median(durs)) + 1
    for t in lanes:
        t.set_filter(None, None, cut)
    flags = [t.shown for t in lanes]
    assert all(t._shown_view is None for t in lanes)
    for t, f in zip(lanes, flags, strict=True):
        assert f is not None and f.tolist() == t._view().shown.tolist()
    hidden = search(index, "linear|nccl")
    assert 0 < len(hidden) < len(found)
