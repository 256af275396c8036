"""Reading TOML inputs: encoding, size and nesting limits end in one ConfigError naming the
line, fast and in little memory (tomllib alone recurses or keeps every dotted-key prefix)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from echo_view.errors import ConfigError, InputError
from echo_view.model.toml_file import MAX_TOML_DEPTH, parse_toml, read_toml

GOOD = '[model]\nkind = "gpt"\nlayers = 96\n[cluster]\nnic_gbps_per_gpu = 400.0\n'


def test_a_real_config_reads(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(GOOD)
    assert read_toml(path) == {"model": {"kind": "gpt", "layers": 96},
                               "cluster": {"nic_gbps_per_gpu": 400.0}}  # fmt: skip


@pytest.mark.parametrize(
    ("data", "where", "words"),
    [
        (GOOD.encode("utf-16"), "line 1", "not UTF-8"),
        (GOOD.encode() + b"x = 1 # \xff\n", "line 6", "byte 0xff"),
    ],
)
def test_text_that_is_not_utf8(tmp_path: Path, data: bytes, where: str, words: str) -> None:
    path = tmp_path / "c.toml"
    path.write_bytes(data)
    with pytest.raises(ConfigError) as exc:
        read_toml(path)
    assert exc.value.where == where and words in exc.value.message
    assert str(path) in exc.value.one_line()


@pytest.mark.parametrize(
    "text",
    [
        "x = " + "{a = " * 10_000 + "1" + "}" * 10_000,  # RecursionError in tomllib
        "x = " + "[" * 10_000 + "]" * 10_000,
        "a" + ".a" * 100_000 + " = 1",  # quadratic memory in tomllib
        "[" + ".".join(["t"] * 100) + "]\nx = 1",
        "x = " + "[" * (MAX_TOML_DEPTH + 1) + "]" * (MAX_TOML_DEPTH + 1),  # tomllib reads it
    ],
)
def test_nesting_beyond_the_limit(text: str) -> None:
    with pytest.raises(ConfigError, match=f"nested more than {MAX_TOML_DEPTH} levels"):
        parse_toml("y = 2\n" + text, "c.toml")


def test_a_number_past_pythons_digit_limit() -> None:
    """tomllib converts integers with ``int()``, which refuses more than 4,300 digits with a
    ValueError: a one-line error naming the line instead."""
    with pytest.raises(ConfigError, match="more than 4,300 digits") as exc:
        parse_toml("y = 2\nx = " + "9" * 5000 + "\n", "c.toml")
    assert exc.value.where == "line 2" and exc.value.path == "c.toml"


def test_long_words_read_in_one_pass() -> None:
    # The nesting guard searched from every character of a run of key characters, a cost
    # quadratic in its length: a 40,000-character comment took 34 s, a 300 KB string value
    # more than a minute, the 4 MiB a file may hold days. These hold 1 MB runs each.
    run = "x" * 1_000_000
    assert parse_toml(f"# {run}\ny = 2\n") == {"y": 2}
    assert parse_toml(f'dtype = "{run}"\n') == {"dtype": run}
    assert parse_toml(f"a = '{run}.b.c'\n") == {"a": run + ".b.c"}
    with pytest.raises(ConfigError, match="more than 4,300 digits") as exc:
        parse_toml("y = [" + "1, " * 100_000 + "9" * 5000 + "]\n", "c.toml")
    assert exc.value.where == "line 1"
    with pytest.raises(ConfigError, match=f"nested more than {MAX_TOML_DEPTH} levels"):
        parse_toml(f"# {run}\n" + ".".join([run] * (MAX_TOML_DEPTH + 1)) + " = 1\n")
    # Chains one part short of the limit, 3.8 MB of them: counted, not searched from each
    # character (4 s before); the text is no TOML.
    short = "a." * (MAX_TOML_DEPTH - 1) + "#"
    with pytest.raises(ConfigError, match="invalid TOML"):
        parse_toml(short * 60_000)
    with pytest.raises(ConfigError, match=f"nested more than {MAX_TOML_DEPTH} levels"):
        parse_toml("x = 1\n" + short * 10 + "a." * MAX_TOML_DEPTH)


def test_nesting_within_the_limit() -> None:
    depth = MAX_TOML_DEPTH - 1
    assert parse_toml("x = " + "[" * depth + "]" * depth)
    assert parse_toml(".".join(["a"] * (MAX_TOML_DEPTH - 1)) + " = 1")


def test_a_file_too_large(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("# " + "x" * (5 << 20))
    with pytest.raises(ConfigError, match="too large"):
        read_toml(path)


def test_a_fifo_or_directory_is_refused_without_blocking(tmp_path: Path) -> None:
    # The Python API reads --compute and interference files without the command line's
    # checks: a FIFO blocked the open until a writer came (forever).
    fifo = tmp_path / "calib.toml"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match=r"not a regular file \(a FIFO, device or socket\)"):
        read_toml(fifo)
    with pytest.raises(InputError, match=r"not a regular file \(a directory\)"):
        read_toml(tmp_path)


def test_dump_toml_round_trips_numpy_values_with_a_comment_header() -> None:
    import numpy as np

    from echo_view.model.toml_file import dump_toml, significant

    doc = {
        "source": 'fit on "a"\nand b',
        "coef": {"gemm": np.float64(0.125), "n": np.int64(3)},
        "gpu": {"H100-SXM5-80GB": {"eff": 0.9, "fit": {"traces": ("a", "b")}}},
    }
    text = dump_toml(doc, "first line\nsecond line")
    assert text.startswith("# first line\n# second line\n")
    assert parse_toml(text) == {
        "source": 'fit on "a"\nand b',
        "coef": {"gemm": 0.125, "n": 3},
        "gpu": {"H100-SXM5-80GB": {"eff": 0.9, "fit": {"traces": ["a", "b"]}}},
    }
    assert significant({"a": [1.23456789, 2], "b": "x"}) == {"a": [1.23457, 2], "b": "x"}


def test_dump_toml_leaves_out_unknown_values() -> None:
    from echo_view.model.toml_file import dump_toml

    text = dump_toml({"evaluation": {"job": {"fitted": {"mae": 0.1, "median": None}}}})
    assert parse_toml(text) == {"evaluation": {"job": {"fitted": {"mae": 0.1}}}}


def test_a_byte_order_mark_is_read_past_and_a_missing_file_says_what_to_do(
    tmp_path: Path,
) -> None:
    # tomllib stops at a BOM ("Invalid statement (at line 1, column 1)"); a missing file had
    # no hint.
    path = tmp_path / "c.toml"
    path.write_bytes(b"\xef\xbb\xbf" + GOOD.encode())
    assert read_toml(path)["model"]["layers"] == 96
    with pytest.raises(InputError, match="cannot read: No such file") as err:
        read_toml(tmp_path / "missing.toml")
    assert err.value.hint == "check the path"
