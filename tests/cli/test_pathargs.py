"""Path arguments and argparse's own usage errors: an empty path is refused, a long value is cut."""

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


def test_a_usage_error_quotes_a_long_value_cut(capsys: pytest.CaptureFixture[str]) -> None:
    # argparse quoted the whole value: 100,000 digits made a 100 KB line.
    with pytest.raises(SystemExit):
        main(["comm", "all_reduce", "--bytes", "1MiB", "--ranks", "9" * 100_000 + "x"])
    err = capsys.readouterr().err
    assert err.count("\n") == 1  # one line: argparse printed the usage first
    assert err.startswith("echo-view comm: error: argument --ranks: expected an integer such")
    assert len(err) < 600 and "'999" in err and "(see echo-view comm --help)" in err


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        # Path() drops a trailing slash: "-o out.json/" replaced the file out.json.
        (["export", "samples/dlrm_kineto", "-o", "out.json/"], "'out.json/' names a directory"),
        (["simulate", "samples/dlrm_kineto", "-o", "."], "'.' names a directory"),
        (["plan", "x.toml", "--gpus", "8", "--plot", "figs/."], "'figs/.' names a directory"),
        # "cannot tell the output format from '-'".
        (["export", "samples/dlrm_kineto", "-o", "-"], "'-' (standard output) is not supported"),
        (["check", "a.json", "--fix", "-o", "-"], "'-' (standard output) is not supported"),
    ],
)
def test_an_output_must_name_a_file(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1
