"""What an unreadable input appears to be, and the one error for inputs no reader accepts."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from echo_view.formats import describe_content, describe_file, not_a_trace

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"


@pytest.mark.parametrize(
    ("head", "what"),
    [
        (b"", "an empty file"),
        (PNG, "a PNG image"),
        (b"%PDF-1.7\n", "a PDF document"),
        (b"PK\x03\x04\x14\x00", "a ZIP archive"),
        (b"SQLite format 3\x00\x10\x00", "an SQLite database"),
        (gzip.compress(b"{}"), "a gzip file"),
        (b'\xef\xbb\xbf {"traceEvents": []}', "JSON text"),
        (b"  \n\t", "a file holding only whitespace"),
        (b"# a README\n", "text"),
        (bytes(range(128, 256)), "binary data"),
    ],
)
def test_describe_content(head: bytes, what: str) -> None:
    assert describe_content(head) == what


def test_not_a_trace_says_what_the_input_is_and_what_was_expected(tmp_path: Path) -> None:
    png = tmp_path / "plot.png"
    png.write_bytes(PNG)
    err = not_a_trace(png, ["Kineto JSON (.json)", "Nsight (.sqlite)"])
    assert err.one_line() == (
        f"{png}: not a trace: a PNG image "
        "(expected Kineto JSON (.json), Nsight (.sqlite), or a directory of them)"
    )
    assert describe_file(tmp_path) == "a directory"
    assert not_a_trace(tmp_path, ["x"]).message == "no trace files in this directory"
