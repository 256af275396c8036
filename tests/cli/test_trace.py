"""``echo-view trace`` on inputs that are no workload config: one line saying it wants a .toml."""

from __future__ import annotations

from pathlib import Path

import pytest

from echo_view.cli import main
from tests.conftest import SAMPLES


@pytest.mark.parametrize(
    ("name", "what"),
    [("configs", "a directory"), ("dlrm_kineto", "a directory"), ("README.md", "text")],
)
def test_trace_wants_a_toml(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, what: str
) -> None:
    out = tmp_path / "graph.json.gz"
    assert main(["trace", str(SAMPLES / name), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"echo-view: error: {SAMPLES / name}: not a workload config: {what} (expected a "
        "workload config (.toml); examples in samples/configs/, the format in docs/workloads.md)\n"
    )
    assert not out.exists()
