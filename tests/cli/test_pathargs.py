"""Path arguments: an empty one is a usage error, not the current directory."""

from __future__ import annotations

import pytest

from echo_view.cli import main


@pytest.mark.parametrize(
    "argv",
    [["info", ""], ["export", "samples/dlrm_kineto", "-o", ""], ["simulate", ""]],
    ids=["input", "output", "simulate"],
)
def test_an_empty_path_is_a_usage_error(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert "an empty path (give a file or directory name)" in capsys.readouterr().err
