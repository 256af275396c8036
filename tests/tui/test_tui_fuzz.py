"""The terminal UI's index and rows on damaged traces that still import: indexing every rank
and drawing every row at the whole-trace zoom and at a 1 µs zoom never fails."""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path
from typing import Any

from hypothesis import given

from echo_view.errors import EchoViewError, InputNote
from echo_view.tui.index import Source, TimelineIndex
from echo_view.tui.raster import Window, render_row, short_name
from importers.kineto import KinetoImporter
from tests.fuzz_data import (
    EVENT_FIELDS,
    SETTINGS,
    Pick,
    damaged,
    field_picks,
)


@SETTINGS
@given(picks=field_picks(EVENT_FIELDS))
def test_index_and_rows_on_damaged_traces(picks: list[Pick]) -> None:
    doc = damaged(picks)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rank0.trace.json"
        path.write_bytes(doc)
        try:
            with warnings.catch_warnings():  # (the notes on what the damage skipped)
                warnings.simplefilter("ignore", InputNote)
                job = KinetoImporter().read([path])
        except EchoViewError:
            return  # the importer's one-line error (tests/importers/kineto/test_fuzz.py)
    index = TimelineIndex.build([Source(job, "A")])
    lo, hi = index.span
    for window in (Window(lo, (hi - lo) / 120, 120), Window(lo + (hi - lo) / 2, 1_000 / 80, 80)):
        for group in index.groups:
            trace = index.trace(group.source, group.trace)
            for track in [*group.lanes, *([group.header] if group.header else [])]:

                def name_of(p: int, track: Any = track, trace: Any = trace) -> str:
                    return short_name(trace.strings[int(trace.events.name[track.rows[p]])])

                render_row(track, window, 0, name_of)
