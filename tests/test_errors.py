"""Errors print as one line naming file, place and hint."""

from __future__ import annotations

from echo_view.errors import ConfigError, InputError, known_keys_hint


def test_one_line_has_file_place_message_and_hint() -> None:
    e = InputError("bad\nvalue", path="a/b.json", where="traceEvents[3]", hint="fix it")
    assert e.one_line() == "a/b.json: traceEvents[3]: bad value (fix it)"
    assert e.exit_code == 2


def test_optional_parts_are_left_out() -> None:
    assert str(ConfigError("unknown key 'x'")) == "unknown key 'x'"


def test_known_keys_hint_suggests_the_nearest_name() -> None:
    known = ["nvlink_gbytes_per_s", "pcie_gbytes_per_s", "nodes"]
    assert known_keys_hint("nvlnk_gbytes_per_s", known).startswith(
        "did you mean 'nvlink_gbytes_per_s'? known keys: nvlink_gbytes_per_s, "
    )
    assert known_keys_hint("zzz", known) == "known keys: " + ", ".join(known)


def test_a_long_message_is_cut_in_the_middle() -> None:
    """A value an input put into a message whole (a 100,000-character name) leaves a line of
    bounded length, its start and its end kept."""
    err = InputError(f"event {'A' * 100_000!r} has no ts", path="t.json", where="traceEvents[0]")
    line = err.one_line()
    assert len(line) < 600 and line.startswith("t.json: traceEvents[0]: event 'AAA")
    assert line.endswith("AAA' has no ts") and " ... " in line
    short = InputError("x" * 500)
    assert short.one_line() == "x" * 500


def test_a_long_key_path_or_hint_is_cut_too() -> None:
    # An unknown key of 1,000,000 characters made a 1,000,084-byte error line: only the
    # message was bounded.
    key = "k" * 1_000_000
    err = ConfigError("unknown key", path="p" * 10_000, where=f"cluster.{key}", hint=key)
    line = err.one_line()
    assert len(line) < 2_500 and " ... " in line and line.startswith("ppp")
