"""Exact microsecond -> nanosecond conversion (one value, and texts in bulk) and formatting."""

from __future__ import annotations

from decimal import Decimal

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from echo_view.units import (
    FLOAT_NS_LIMIT,
    INT_US_LIMIT,
    NS_LIMIT,
    OUT_OF_RANGE_NS,
    TEXT_BAD,
    TEXT_EMPTY,
    TEXT_OK,
    float_ns,
    format_duration,
    int_us_in_range,
    ns_to_us_text,
    parse_integer,
    parse_number,
    text_ns,
    us_floats_to_ns,
    us_texts_to_ns,
    us_to_ns,
)


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


# -- us_texts_to_ns: the vectorised path equals the Decimal one ----------------------------

_NUMBER = st.builds(
    lambda sign, whole, frac, exp: sign + whole + (f".{frac}" if frac else "") + exp,
    st.sampled_from(["", "-"]),
    st.one_of(st.just("0"), st.from_regex(r"[1-9][0-9]{0,21}", fullmatch=True)),
    st.one_of(st.just(""), st.from_regex(r"[0-9]{1,12}", fullmatch=True)),
    st.one_of(st.just(""), st.from_regex(r"[eE][+-]?[0-9]{1,6}", fullmatch=True)),
)
# Unsigned, no exponent: what profilers write, converted by the faster of the two bulk paths.
_PLAIN = st.builds(
    lambda whole, frac: whole + (f".{frac}" if frac else ""),
    st.one_of(st.just("0"), st.from_regex(r"[1-9][0-9]{0,20}", fullmatch=True)),
    st.one_of(st.just(""), st.from_regex(r"[0-9]{1,8}", fullmatch=True)),
)
# JSON values that are not numbers (a decoder's raw text of them).
_OTHER = st.sampled_from(['"12"', "null", "true", "[1]", '{"a": 1}'])


def _check_bulk(texts: list[str]) -> None:
    ns, status = us_texts_to_ns([t.encode() for t in texts])
    assert len(ns) == len(status) == len(texts)
    for text, got, state in zip(texts, ns.tolist(), status.tolist(), strict=True):
        if not text:
            assert (state, got) == (TEXT_EMPTY, 0)
            continue
        want = text_ns(text)  # Decimal, half to even
        assert (state, got) == ((TEXT_BAD, 0) if want is None else (TEXT_OK, want)), text


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(_NUMBER, _OTHER, st.just("")), max_size=40))
def test_bulk_conversion_equals_decimal(texts: list[str]) -> None:
    _check_bulk(texts)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(_PLAIN, st.just("")), max_size=40))
def test_bulk_conversion_of_unsigned_text_equals_decimal(texts: list[str]) -> None:
    _check_bulk(texts)


# Times written with fixed decimals (a chunk's ``ts``: one width; its ``dur``: several, and
# empty texts): the matrix-product paths; leading zeros only where JSON has them ("0.5").
@st.composite
def _fixed_decimal_texts(draw: st.DrawFn) -> list[str]:
    most, decimals = draw(st.integers(1, 21)), draw(st.integers(0, 9))
    one_width, empties = draw(st.booleans()), draw(st.booleans())
    texts = []
    for _ in range(draw(st.integers(1, 30))):
        whole = most if one_width else draw(st.integers(1, most))
        if empties and draw(st.booleans()):
            texts.append("")
            continue
        w = draw(st.from_regex(rf"[1-9][0-9]{{{whole - 1}}}", fullmatch=True)) if whole > 1 else ""
        w = w or draw(st.sampled_from("0123456789"))
        f = draw(st.from_regex(rf"[0-9]{{{decimals}}}", fullmatch=True)) if decimals else ""
        texts.append(w + (f".{f}" if decimals else ""))
    return texts


@settings(max_examples=400, deadline=None)
@given(_fixed_decimal_texts())
def test_bulk_conversion_of_fixed_decimal_text_equals_decimal(texts: list[str]) -> None:
    _check_bulk(texts)


@pytest.mark.parametrize(
    "texts",
    [
        ["1.25", "12.5"],  # one width, the '.' moves
        ["125", "1.5"],
        ["12345678901234567890", "12345678901234567890"],  # 20 digits: the general path
        ["1712195495519689.047", "1712195495519690.000"],
        ["", "4.840", "12.500", "", "123.456", "7.000"],  # widths with one '.' place each
        ["1.5", "22", "3.25", "44.5"],  # the '.' moves within a width
        ["1", "12", "123", "1234", "12345", "123456", "1234567", "12345678", "123456789"],
    ],
)
def test_bulk_conversion_by_width(texts: list[str]) -> None:
    _check_bulk(texts)


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("1712195495519689.047", 1712195495519689047),  # ROCm / recent PyTorch: 19 digits
        ("0.0005", 0),  # half a ns rounds to even
        ("0.0015", 2),
        ("-0.0025", -2),
        ("1.5e3", 1_500_000),
        ("-12E-3", -12),
        ("4611686018427387.903", 4611686018427387903),  # the largest time in range
        ("0e999999", 0),
    ],
)
def test_bulk_conversion_edges(text: str, ns: int) -> None:
    got, status = us_texts_to_ns([text.encode()])
    assert (got.tolist(), status.tolist()) == ([ns], [TEXT_OK])
    assert text_ns(text) == ns


@pytest.mark.parametrize(
    "text",
    ["4611686018427387.904", "-4611686018427387904", "1e16", '"5"', "12345678901234567890123"],
)
def test_bulk_conversion_refuses_what_is_out_of_range_or_no_number(text: str) -> None:
    got, status = us_texts_to_ns([b"1", text.encode(), b""])
    assert status.tolist() == [TEXT_OK, TEXT_BAD, TEXT_EMPTY]
    assert got.tolist() == [1000, 0, 0]


def test_int64_least_is_out_of_range_not_zero() -> None:
    # abs() of int64's least value is itself: it passed the range test and its ns wrapped to 0.
    least = str(-(2**63)).encode()
    for texts in ([least], [b"1", least], [least, b"-1"]):
        got, status = us_texts_to_ns(texts)
        assert status[texts.index(least)] == TEXT_BAD and got[texts.index(least)] == 0
    assert not int_us_in_range(np.array([-(2**63), 2**63 - 1, INT_US_LIMIT + 1])).any()
    assert int_us_in_range(np.array([-INT_US_LIMIT, INT_US_LIMIT])).all()


def test_bulk_conversion_takes_raw_values() -> None:
    raws = msgspec.json.decode(b"[1.5, 2, 1712195495519689.047]", type=list[msgspec.Raw])
    assert us_texts_to_ns(raws)[0].tolist() == [1500, 2000, 1712195495519689047]


# -- us_floats_to_ns: exact where it says so ------------------------------------------------

# Short times (durations, relative timestamps) with any digits: ties, long fractions, exponents.
_SHORT = st.builds(
    lambda sign, whole, frac, exp: sign + whole + (f".{frac}" if frac else "") + exp,
    st.sampled_from(["", "-"]),
    st.one_of(st.just("0"), st.from_regex(r"[1-9][0-9]{0,11}", fullmatch=True)),
    st.one_of(st.just(""), st.from_regex(r"[0-9]{1,9}", fullmatch=True), st.just("0005")),
    st.one_of(st.just(""), st.from_regex(r"[eE][+-]?[0-9]{1,2}", fullmatch=True)),
)


def _floats(texts: list[str]) -> list[float]:
    return [msgspec.json.decode(t.encode(), type=float) for t in texts]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(_SHORT, _NUMBER), min_size=1, max_size=40))
def test_float_conversion_is_exact_where_it_says(texts: list[str]) -> None:
    texts = [t for t in texts if abs(float(t)) < 1e300]  # (msgspec refuses larger doubles)
    ns, exact = us_floats_to_ns(np.array(_floats(texts), dtype=np.float64))
    for text, got, ok in zip(texts, ns.tolist(), exact.tolist(), strict=True):
        want = text_ns(text)
        assert got == (want if ok else 0), text
        plain = "e" not in text.lower() and len(text.partition(".")[2]) <= 3
        if plain and want is not None and abs(want) < FLOAT_NS_LIMIT / 2:
            assert ok, text  # at most three decimals, well below the limit: no text needed


@pytest.mark.parametrize(
    ("text", "ns", "ok"),
    [
        ("1.5", 1500, True),
        ("3.2704", 3270, True),  # more digits than ns: rounded, as Decimal does
        ("3.2706", 3271, True),
        ("3.2704999", 0, False),  # too near half a ns to trust the double
        ("0.00049", 0, True),
        ("0.0005", 0, False),  # half a ns: only the text can say which way to round
        ("-0.0015", 0, False),
        ("8796093022.207", 8796093022207, True),  # just below 2**43 ns
        ("8796093022.209", 0, False),  # beyond
        ("1712195495519689.047", 0, False),  # absolute-epoch µs: beyond a double
        ("7", 7000, True),
        ("1.5e3", 1_500_000, True),
    ],
)
def test_float_conversion_edges(text: str, ns: int, ok: bool) -> None:
    got, exact = us_floats_to_ns(np.array(_floats([text])))
    assert (got.tolist(), exact.tolist()) == ([ns], [ok])
    if ok:
        assert text_ns(text) == ns


def test_float_conversion_of_nan_is_not_exact() -> None:
    got, exact = us_floats_to_ns(np.array([np.nan, 2.0]))
    assert (got.tolist(), exact.tolist()) == ([0, 2000], [False, True])


def test_float_ns_rounds_and_never_wraps() -> None:
    x = np.array([0.5, 1.5, 2.4, -2.6, 1e30, -1e30, np.inf, -np.inf, np.nan])
    got = float_ns(x).tolist()
    assert got[:4] == [0, 2, 2, -3]  # half to even, as np.rint
    big = OUT_OF_RANGE_NS
    assert got[4:] == [big, -big, big, -big, -big] and big > NS_LIMIT


@pytest.mark.parametrize("text", ["12", "-3", "+7", "0"])
def test_plain_integers_are_read(text: str) -> None:
    assert parse_integer(text) == int(text)
    assert parse_number(text) == float(text)


@pytest.mark.parametrize("text", ["2.5", ".5", "5.", "1e3", "-1.5E-2"])
def test_plain_numbers_are_read(text: str) -> None:
    assert parse_number(text) == float(text)


@pytest.mark.parametrize(
    "text", ["１２", "٣", "1_000", " 5", "5 ", "0x10", "", "inf", "nan", "1.5"]
)
def test_what_python_reads_leniently_or_not_as_an_integer_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not an integer"):
        parse_integer(text)
    if text != "1.5":
        with pytest.raises(ValueError, match="not a number"):
            parse_number(text)
