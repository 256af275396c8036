"""``echo-view check`` on damaged Kineto traces: whatever is done to a real trace's text, the
command reports findings and exits 0, 1 or 2 - it never fails with an exception of its own."""

from __future__ import annotations

import contextlib
import gzip
import io
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from echo_view.cli import main
from tests.fuzz_data import BASE_TEXT, SETTINGS, apply_edits, byte_edits


def _check(data: bytes, name: str) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
        out, err = io.TextIOWrapper(io.BytesIO()), io.StringIO()  # --json writes bytes
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["check", str(path), "--json"])
        assert code in (0, 1, 2), (code, err.getvalue())
        return code


def test_the_base_trace_passes() -> None:
    assert _check(BASE_TEXT, "rank0.trace.json") in (0, 1)


@SETTINGS
@given(cut=st.integers(0, len(BASE_TEXT) - 1), gz=st.booleans())
def test_truncated(cut: int, gz: bool) -> None:
    _check(BASE_TEXT[:cut], "rank0.trace.json.gz" if gz else "rank0.trace.json")


@SETTINGS
@given(edits=byte_edits(len(BASE_TEXT)))
def test_bytes_replaced(edits: list[tuple[int, bytes]]) -> None:
    _check(apply_edits(BASE_TEXT, edits), "rank0.trace.json")
