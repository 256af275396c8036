"""Exact microsecond -> nanosecond conversion and formatting."""

from __future__ import annotations

from decimal import Decimal

import pytest

from echo_view.units import format_duration, ns_to_us_text, us_to_ns


@pytest.mark.parametrize(
    ("value", "ns"),
    [
        (12, 12_000),
        (4458676524648.797, 4458676524648797),
        ("1694128201429795.123", 1694128201429795123),
        (1694128201429795.2, 1694128201429795200),
        (Decimal("0.001"), 1),
        (-2.5, -2500),
    ],
)
def test_us_to_ns_is_exact(value: int | float | str | Decimal, ns: int) -> None:
    assert us_to_ns(value) == ns


def test_absolute_epoch_float_is_exact_where_float_math_is_not() -> None:
    value = 1694128201429795.2
    assert round(value * 1000) != 1694128201429795200  # the trap this helper avoids
    assert us_to_ns(value) == 1694128201429795200


def test_booleans_are_not_times() -> None:
    with pytest.raises(TypeError):
        us_to_ns(True)


@pytest.mark.parametrize(
    ("ns", "text"), [(0, "0"), (1, "0.001"), (12_340, "12.34"), (-1_500, "-1.5"), (7_000, "7")]
)
def test_ns_to_us_text(ns: int, text: str) -> None:
    assert ns_to_us_text(ns) == text
    assert us_to_ns(text) == ns


def test_format_duration() -> None:
    assert format_duration(1_500_000) == "1.500 ms"
    assert format_duration(2_000_000_000) == "2.000 s"
    assert format_duration(999) == "999 ns"
