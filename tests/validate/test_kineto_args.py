"""``echo_view.validate.kineto_args``: the integers the Kineto rules read from args."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from echo_view.cli import main
from echo_view.validate.kineto_args import as_int


def test_as_int_keeps_int64_only() -> None:
    assert as_int(7) == 7 and as_int(" -12 ") == -12 and as_int(2**63 - 1) == 2**63 - 1
    for value in (2**63, -(2**63) - 1, "9" * 19, "9" * 5000, True, 1.5, "²", "--5", None):
        assert as_int(value) == -1, value


def test_a_correlation_beyond_int64_is_checked_without_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by fuzzing: a correlation of 2^63 overflowed the rules' int64 column."""
    events = [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
         "ts": 0, "dur": 2, "args": {"correlation": 2**63, "External id": 1}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 3, "dur": 2,
         "args": {"correlation": 2**63, "device": 0, "stream": 7}},
    ]  # fmt: skip
    path = tmp_path / "big.json"
    path.write_text(json.dumps({"traceEvents": events}))
    assert main(["check", str(path), "--json"]) in (0, 1)
    assert "Traceback" not in capsys.readouterr().err
