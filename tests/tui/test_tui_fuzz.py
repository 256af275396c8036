"""The terminal UI's index and rows on damaged traces that still import: indexing every rank
and drawing every row at the whole-trace zoom and at a 1 µs zoom never fails."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from echo_view.errors import EchoViewError
from echo_view.tui.index import Source, TimelineIndex
from echo_view.tui.raster import Window, render_row, short_name
from importers.kineto import KinetoImporter
from tests.fuzz_data import BASE, BASE_TEXT, ODD_VALUES, SETTINGS

FIELDS = ["ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "bp", "s", "args"]


@SETTINGS
@given(
    picks=st.lists(
        st.tuples(
            st.integers(0, len(BASE["traceEvents"]) - 1),
            st.sampled_from(FIELDS),
            st.one_of(st.just("<delete>"), ODD_VALUES),
        ),
        min_size=1,
        max_size=4,
    ),
)
def test_index_and_rows_on_damaged_traces(picks: list[tuple[int, str, Any]]) -> None:
    doc = json.loads(BASE_TEXT)
    for i, key, value in picks:
        if value == "<delete>":
            doc["traceEvents"][i].pop(key, None)
        else:
            doc["traceEvents"][i][key] = value
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rank0.trace.json"
        path.write_text(json.dumps(doc), encoding="utf-8")
        try:
            job = KinetoImporter().read([path])
        except EchoViewError:
            return  # the importer's one-line error (tests/importers/test_kineto_fuzz.py)
    index = TimelineIndex.build([Source(job, "A")])
    lo, hi = index.span
    for window in (Window(lo, (hi - lo) / 120, 120), Window(lo + (hi - lo) / 2, 1_000 / 80, 80)):
        for group in index.groups:
            trace = index.trace(group.source, group.trace)
            for track in [*group.lanes, *([group.header] if group.header else [])]:

                def name_of(p: int, track: Any = track, trace: Any = trace) -> str:
                    return short_name(trace.strings[int(trace.events.name[track.rows[p]])])

                render_row(track, window, 0, name_of)
