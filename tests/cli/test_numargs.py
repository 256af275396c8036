"""Numeric options read ASCII decimal numbers only: Python's int() and float() also took
digits of other scripts, underscores and spaces."""

from __future__ import annotations

import pytest

from echo_view.cli import main
from echo_view.cli.numargs import put_setting
from echo_view.errors import UsageError


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


def test_a_setting_given_twice_is_refused_unless_it_is_the_same() -> None:
    # The same text passed, the same number written twice ("0.5", "0.50") was refused.
    out: dict[str, str] = {}
    put_setting(out, "comm.scale", "0.5")
    put_setting(out, "comm.scale", "0.5")
    put_setting(out, "comm.scale", "0.50")
    assert out == {"comm.scale": "0.50"}
    with pytest.raises(UsageError, match=r"--set comm.scale is given twice: '0.50' and '2'"):
        put_setting(out, "comm.scale", "2")
