"""``echo_view.cli.sizes``: byte sizes as the command line takes them."""

from __future__ import annotations

import pytest

from echo_view.cli.sizes import MAX_SIZES, parse_size, parse_sizes
from echo_view.errors import UsageError


def test_sizes() -> None:
    assert parse_size("64MiB") == 64 << 20
    assert parse_size("1GB") == 10**9
    assert parse_size("4K") == 4096
    assert parse_size("1e6") == 10**6
    assert parse_size("1048576") == 1 << 20
    assert parse_sizes("8:64") == [8, 16, 32, 64]
    assert parse_sizes("1MiB,2MiB") == [1 << 20, 2 << 20]
    for bad in ("3x", "1.5", "", "64:8"):
        with pytest.raises(UsageError):
            parse_sizes(bad)
    assert parse_size("1024T") == 1 << 50
    for huge in ("1e400", "1025T", "1e16"):  # 1e400 reads as an infinite float
        with pytest.raises(UsageError, match="more than 1024 TiB"):
            parse_size(huge)


def test_a_list_holds_at_most_max_sizes_and_errors_name_the_option() -> None:
    # 60,000 listed sizes at a million ranks ran past any timeout.
    assert len(parse_sizes(",".join(["1"] * MAX_SIZES))) == MAX_SIZES
    for many in (",".join(["1"] * (MAX_SIZES + 1)), "1:1024T,1:1024T"):
        with pytest.raises(UsageError, match=f"--bytes: more than {MAX_SIZES} sizes"):
            parse_sizes(many, "--bytes")
    assert len(parse_sizes("1:1T")) == 41
    with pytest.raises(UsageError, match=r"^--bytes: cannot read the size '-1'"):
        parse_sizes("-1", "--bytes")


def test_a_size_is_written_in_ascii_digits() -> None:
    # \d matched the digits of every script: "１２" was 12 bytes.
    for text in ("１２", "٣MiB"):
        with pytest.raises(UsageError, match="cannot read the size"):
            parse_size(text, "--bytes")


def test_a_long_text_is_no_size() -> None:
    # "1" + 80,000 spaces + "!" took 30 s to refuse.
    with pytest.raises(UsageError, match="cannot read the size"):
        parse_size("1" + " " * 200_000 + "!", "--bytes")
    assert parse_size("  1.5e3 MiB  ") == 1500 << 20
