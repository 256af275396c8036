"""Numeric options read ASCII decimal numbers only: Python's int() and float() also took
digits of other scripts, underscores and spaces."""

from __future__ import annotations

import pytest

from echo_view.cli import main


@pytest.mark.parametrize("text", ["１２", "٣", "1_000", " 5 ", "0x10", "", "nan"])
@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["info", "samples/dlrm_kineto", "--top"], "--top"),
        (["comm", "all_reduce", "--bytes", "1MiB", "--ranks"], "--ranks"),
        (["comm", "all_reduce", "--bytes", "1MiB", "--ranks", "8", "--nic-gbytes-per-s"], None),
    ],
)
def test_a_number_that_is_not_plain_ascii_is_a_one_line_usage_error(
    argv: list[str], option: str | None, text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, text])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert f"argument {option or argv[-1]}: expected " in err and repr(text) in err
