"""``echo-view trace`` on inputs that are no workload config: one line saying it wants a .toml."""

from __future__ import annotations

from pathlib import Path

import pytest

from echo_view.cli import main
from tests.conftest import SAMPLES

WANTS = "a workload config (.toml); examples in samples/configs/, the format in docs/workloads.md"


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("configs", f"is a directory, not a file (give {WANTS})"),
        ("dlrm_kineto", f"is a directory, not a file (give {WANTS})"),
        ("README.md", f"not a workload config: text (expected {WANTS})"),
    ],
)
def test_trace_wants_a_toml(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, error: str
) -> None:
    out = tmp_path / "graph.json.gz"
    assert main(["trace", str(SAMPLES / name), "-o", str(out)]) == 2
    assert capsys.readouterr().err == f"echo-view: error: {SAMPLES / name}: {error}\n"
    assert not out.exists()
