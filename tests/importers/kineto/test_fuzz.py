"""Damaged Kineto traces: whatever is done to a real trace's text or structure, the importer
either returns a job (which then summarises, as ``echo-view info`` does) or raises an
EchoViewError whose message is one line naming the file - never another exception (which the
CLI would show as a traceback). ``FUZZ_EXAMPLES=3000`` runs a longer, random search
(tests/fuzz_data.py)."""

from __future__ import annotations

import gzip
import json
import tempfile
import warnings
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from echo_view.analysis.summary import summarize
from echo_view.errors import EchoViewError, InputNote
from echo_view.model import EventKind
from importers.kineto import KinetoImporter
from tests.fuzz_data import (
    BASE,
    BASE_TEXT,
    EVENT_FIELDS,
    ODD_VALUES,
    SETTINGS,
    Pick,
    apply_edits,
    byte_edits,
    damaged,
    field_picks,
)


def _read(data: bytes, compress: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / ("rank0.trace.json.gz" if compress else "rank0.trace.json")
        path.write_bytes(gzip.compress(data) if compress else data)
        try:
            with warnings.catch_warnings():  # (notes on what a damaged field made it skip)
                warnings.simplefilter("ignore", InputNote)
                job = KinetoImporter().read([path])
        except EchoViewError as err:
            text = str(err)
            assert "\n" not in text, text
            assert path.name in text, text
            return
    # What imports must also summarise (``echo-view info``) without failing.
    summarize(job).to_json()


def test_the_base_trace_imports() -> None:
    """The fixture itself is a valid trace with every kind of row."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rank0.trace.json"
        path.write_bytes(BASE_TEXT)
        job = KinetoImporter().read([path])
    t = job.traces[0]
    kinds = set(t.events.kind.tolist())
    assert {int(k) for k in (EventKind.CPU_OP, EventKind.RUNTIME, EventKind.KERNEL)} <= kinds
    assert len(t.flows) > 0 and len(t.collectives) > 0 and t.rank == 0


@SETTINGS
@given(cut=st.integers(0, len(BASE_TEXT) - 1), compress=st.booleans())
def test_truncated_text(cut: int, compress: bool) -> None:
    _read(BASE_TEXT[:cut], compress)


@SETTINGS
@given(edits=byte_edits(len(BASE_TEXT)))
def test_bytes_replaced(edits: list[tuple[int, bytes]]) -> None:
    _read(apply_edits(BASE_TEXT, edits), compress=False)


GZ = gzip.compress(BASE_TEXT)


@SETTINGS
@given(
    edits=st.lists(st.tuples(st.integers(0, len(GZ) - 1), st.binary(min_size=1, max_size=2)),
                   min_size=1, max_size=3),
)  # fmt: skip
def test_gzip_bytes_replaced(edits: list[tuple[int, bytes]]) -> None:
    data = bytearray(GZ)
    for pos, new in edits:
        data[pos : pos + len(new)] = new
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rank0.trace.json.gz"
        path.write_bytes(bytes(data))
        try:
            KinetoImporter().read([path])
        except EchoViewError as err:
            assert "\n" not in str(err) and path.name in str(err), str(err)


@SETTINGS
@given(picks=field_picks(EVENT_FIELDS))
def test_fields_removed_or_retyped(picks: list[Pick]) -> None:
    _read(damaged(picks), compress=False)


@SETTINGS
@given(
    picks=st.lists(
        st.tuples(
            st.integers(0, len(BASE["traceEvents"]) - 1),
            st.sampled_from(["External id", "correlation", "device", "stream", "grid", "block",
                             "Collective name", "In msg nelems", "Group size", "dtype",
                             "Process Group Ranks", "Seq", "bytes"]),
            ODD_VALUES,
        ),
        min_size=1,
        max_size=4,
    ),
    top=st.one_of(st.none(), st.sampled_from(["distributedInfo", "deviceProperties",
                                               "baseTimeNanoseconds"])),
    top_value=ODD_VALUES,
)  # fmt: skip
def test_args_and_metadata_retyped(
    picks: list[tuple[int, str, Any]], top: str | None, top_value: Any
) -> None:
    doc = json.loads(BASE_TEXT)
    for i, key, value in picks:
        event = doc["traceEvents"][i]
        args = event.get("args")
        if isinstance(args, dict):
            args[key] = value
    if top is not None:
        doc[top] = top_value
    _read(json.dumps(doc).encode(), compress=False)
