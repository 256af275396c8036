"""Text mapped from a file reads as the ``bytes`` it stands for (:mod:`echo_view.model.mapped`)."""

from __future__ import annotations

import mmap
import pickle
import re
from pathlib import Path

import numpy as np
import pytest

from echo_view.model.mapped import MappedBytes


def _mapped(tmp_path: Path, text: bytes, pad: int = 0) -> MappedBytes:
    """``text`` mapped from a file in which it starts ``pad`` pages in."""
    path = tmp_path / "text"
    page = mmap.ALLOCATIONGRANULARITY
    path.write_bytes(b"\0" * (pad * page) + text + b"tail")
    with open(path, "rb") as f:
        return MappedBytes(f.fileno(), len(text), access=mmap.ACCESS_READ, offset=pad * page)


def test_mapped_text_reads_as_the_bytes_it_stands_for(tmp_path: Path) -> None:
    raw = b'{"a": 1}{"Input Dims": [[2, 3]]}' * 3
    text = _mapped(tmp_path, raw, pad=1)
    assert len(text) == len(raw) and text == raw and raw == text and text != raw[:-1]
    assert text[3] == raw[3] and type(text[2:9]) is bytes and text[2:9] == raw[2:9]
    # What a plain mapping gets wrong: `in` looks for one byte, iteration yields 1-byte bytes.
    assert b'"Input Dims"' in text and ord("a") in text and b"missing" not in text
    assert list(text) == list(raw)
    assert text.find(b"Input") == raw.find(b"Input")
    assert [m.start() for m in re.finditer(rb"Input", text)] == [10, 42, 74]
    assert np.array_equal(np.frombuffer(text, dtype=np.uint8), np.frombuffer(raw, np.uint8))
    assert b",".join([text[:8], text[8:16]]) == raw[:8] + b"," + raw[8:16]
    with pytest.raises(TypeError):
        text[0:1] = b"x"  # read-only, as bytes are
    with pytest.raises(TypeError):
        _ = "a" in text  # type: ignore[operator]  # as bytes refuses a str
    with pytest.raises(TypeError):
        hash(text)
    # Pickled (a cache, another process), it is the bytes themselves.
    back = pickle.loads(pickle.dumps(text))
    assert type(back) is bytes and back == raw
