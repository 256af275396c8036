"""Damaged Nsight Systems exports: bytes of a real SQLite export overwritten anywhere (the
page reader decodes pages itself, so damaged pages must not escape as IndexError and the
like). The import either succeeds or raises a one-line EchoViewError naming the file."""

from __future__ import annotations

import gzip
import tempfile
import warnings
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from echo_view.errors import EchoViewError
from importers.nsys import NsysImporter
from tests.conftest import SAMPLES
from tests.fuzz_data import SETTINGS

DB = gzip.decompress((SAMPLES / "nsys" / "h100_2gpu_1s.sqlite.gz").read_bytes())
PAGE = 4096


@SETTINGS
@given(
    edits=st.lists(
        st.tuples(st.integers(0, len(DB) // PAGE - 1), st.integers(0, PAGE - 1),
                  st.binary(min_size=1, max_size=8)),
        min_size=1,
        max_size=4,
    ),
)  # fmt: skip
def test_overwritten_bytes(edits: list[tuple[int, int, bytes]]) -> None:
    data = bytearray(DB)
    for page, offset, new in edits:
        pos = page * PAGE + offset
        data[pos : pos + len(new)] = new
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "capture.sqlite"
        path.write_bytes(bytes(data))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                NsysImporter().read([path])
        except EchoViewError as err:
            assert "\n" not in str(err) and path.name in str(err), str(err)
