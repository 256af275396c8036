"""The types of numeric arguments: ASCII decimal numbers only
(:func:`echo_view.units.parse_number`), where argparse's ``int`` and ``float`` types also
took ``１２``, ``1_000`` and `` 5 ``."""

from __future__ import annotations

import argparse

from echo_view.errors import UsageError
from echo_view.text import clipped, printable
from echo_view.units import parse_integer, parse_number


def int_arg(text: str) -> int:
    """``text`` as an integer; argparse's one-line usage error otherwise."""
    try:
        return parse_integer(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an integer such as 8, got {printable(clipped(repr(text)))}"
        ) from None


#: Longest limit ``--timeout`` takes, in seconds (a day).
MAX_TIMEOUT_S = 86_400


def check_timeout(seconds: float | None) -> None:
    """Refuse a ``--timeout`` outside (0, a day]; ``None`` (not given) passes."""
    if seconds is not None and not 0 < seconds <= MAX_TIMEOUT_S:
        raise UsageError(
            f"--timeout must be more than 0 and at most {MAX_TIMEOUT_S} s, got {seconds:g}"
        )


def float_arg(text: str) -> float:
    """``text`` as a number; argparse's one-line usage error otherwise."""
    try:
        return parse_number(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number such as 2.5, got {printable(clipped(repr(text)))}"
        ) from None


def put_setting(out: dict[str, str], key: str, value: str) -> None:
    """``out[key] = value`` for one ``--set KEY=VALUE``; a key given twice is a
    :class:`UsageError` (the last one won, unreported) unless both values are the same text or
    the same number (``0.5`` and ``0.50``)."""
    old = out.get(key)
    if old is not None and old != value:
        try:
            same = parse_number(old) == parse_number(value)
        except ValueError:
            same = False
        if not same:
            raise UsageError(f"--set {key} is given twice: {old!r} and {value!r}")
    out[key] = value
