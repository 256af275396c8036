"""Integer-nanosecond time helpers.

Inside echo-view every time is an ``int`` (or int64 column) in nanoseconds. Microsecond floats
exist only at the edges (Chrome/Kineto JSON). A double holds exact nanoseconds only below
2**42 microseconds, so absolute-epoch microsecond floats are converted through their decimal
text, never through ``float * 1000``; short times read as doubles are converted where the
double provably gives what the text would (:func:`us_floats_to_ns`).

Numbers a user types (options, ``--set`` values) are read by :func:`parse_number` and
:func:`parse_integer`: ASCII digits only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from decimal import Decimal, DecimalException
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

NS_PER_US = 1_000
NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000

# Python's float() and int() also read digits of any script ("１２", "٣"), underscores ("1_000")
# and surrounding whitespace: a typo or a pasted character would pass as a number.
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)
_INTEGER = re.compile(r"[+-]?\d+", re.ASCII)


def parse_number(text: str) -> float:
    """``text`` as a decimal number (``12``, ``-0.5``, ``1e3``; ASCII digits, no ``_``, no
    spaces, not ``inf`` or ``nan``), else a ``ValueError`` quoting it."""
    if not _NUMBER.fullmatch(text):
        raise ValueError(f"not a number: {text!r}")
    return float(text)


def parse_integer(text: str) -> int:
    """``text`` as a decimal integer (``12``, ``-3``; ASCII digits, no ``_``, no spaces), else
    a ``ValueError`` quoting it."""
    if not _INTEGER.fullmatch(text):
        raise ValueError(f"not an integer: {text!r}")
    return int(text)


# Below this magnitude (in µs) a double's ULP is finer than 1/1024 ns, so round(x * 1000) is exact
# for values that were printed with at most three decimals.
EXACT_FLOAT_US_LIMIT = float(2**42)


def us_to_ns(value: int | float | str | Decimal) -> int:
    """Convert a microsecond value from a trace file to integer nanoseconds, exactly.

    Integers are exact; decimal strings and :class:`~decimal.Decimal` are exact; floats are exact
    when below :data:`EXACT_FLOAT_US_LIMIT` and otherwise go through their shortest ``repr``,
    which is the text the writer printed.
    """
    if isinstance(value, bool):
        raise TypeError("a boolean is not a time")
    if isinstance(value, int):
        return value * NS_PER_US
    if isinstance(value, float):
        if abs(value) < EXACT_FLOAT_US_LIMIT:
            return round(value * NS_PER_US)
        return int((Decimal(repr(value)) * NS_PER_US).to_integral_value())
    if isinstance(value, str):
        value = Decimal(value)
    return int((value * NS_PER_US).to_integral_value())


#: Largest magnitude (exclusive) of a time in ns: ±2**62 ns is ±146 years, and int64 arithmetic
#: on two such times (an end, a difference) cannot overflow.
NS_LIMIT = 2**62


#: What :func:`float_ns` makes of a value beyond :data:`NS_LIMIT` (with its sign): 1.5 times
#: the limit, exact as a double and as an int64.
OUT_OF_RANGE_NS = 3 * 2**61


def float_ns(values: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """Float ns rounded (half to even) to int64. A value that is not finite or not within
    :data:`NS_LIMIT` becomes ``±OUT_OF_RANGE_NS`` (NaN the negative) instead of wrapping
    around in the cast, so that a check downstream can name it."""
    x = np.nan_to_num(np.asarray(values, dtype=np.float64), nan=-np.inf)
    x = np.where(np.abs(x) < NS_LIMIT, x, np.sign(x) * OUT_OF_RANGE_NS)
    out: npt.NDArray[np.int64] = np.rint(x).astype(np.int64)
    return out


#: What :func:`us_texts_to_ns` says about each text.
TEXT_OK, TEXT_EMPTY, TEXT_BAD = 0, 1, 2

_POW10 = np.array([10**k for k in range(20)], dtype=np.uint64)
# Up to 19 significant digits the value fits in a uint64 and Decimal's product by 1000 (28-digit
# context) is exact; longer texts (never written by a profiler) take the Decimal path itself.
_MAX_DIGITS = 19
_MAX_EXP_DIGITS = 4
_DIGIT, _DOT, _MINUS, _PLUS, _EXP, _OTHER = 0, 1, 2, 3, 4, 5
_CLASS = np.full(256, _OTHER, dtype=np.uint8)
_CLASS[ord("0") : ord("9") + 1] = _DIGIT
_CLASS[ord(".")] = _DOT
_CLASS[ord("-")] = _MINUS
_CLASS[ord("+")] = _PLUS
_CLASS[[ord("e"), ord("E")]] = _EXP
_INTS = msgspec.json.Decoder(list[int])
#: Largest magnitude of an integer µs time within ±:data:`NS_LIMIT`.
INT_US_LIMIT = (NS_LIMIT - 1) // NS_PER_US


def int_us_in_range(us: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
    """Whether each integer µs time lies within ±:data:`INT_US_LIMIT` (its ns fit). Both ends
    are compared: ``np.abs`` of int64's least value is that value, which passed a test of
    ``abs(us) <= limit`` and wrapped around to 0 ns."""
    out: npt.NDArray[np.bool_] = (us >= -INT_US_LIMIT) & (us <= INT_US_LIMIT)
    return out


#: Largest power of ten of a µs value's leading digit (``Decimal.adjusted()``) that is
#: converted: 10**19 µs and more lies beyond int64 ns, and is refused before any arithmetic
#: (decimal overflows past 10**999999; ``int()`` of ``1e500000`` makes 500,000 digits).
MAX_US_EXPONENT = 18


def decimal_ns(value: Decimal) -> int | None:
    """Exact ns of a Decimal µs value, rounded half to even (as ``us_to_ns``); None when it
    is not finite or its leading digit lies past :data:`MAX_US_EXPONENT` (a zero is 0, whatever
    its exponent: ``0E20``)."""
    if not value.is_finite() or (value and value.adjusted() > MAX_US_EXPONENT):
        return None
    return int((value * NS_PER_US).to_integral_value())


def text_ns(text: str | bytes) -> int | None:
    """Exact ns of one µs number text, rounded half to even (as ``us_to_ns``); None when it is
    not a finite number or lies outside ±:data:`NS_LIMIT`."""
    try:
        ns = decimal_ns(Decimal(text.decode() if isinstance(text, bytes) else text))
    except (DecimalException, ValueError):  # not a number
        return None
    return ns if ns is not None and -NS_LIMIT < ns < NS_LIMIT else None


#: Largest magnitude (exclusive) of the ns that :func:`us_floats_to_ns` converts: 2**43 ns
#: (2.4 hours) keeps the double's error in ``x * 1000`` under 0.003 ns.
FLOAT_NS_LIMIT = float(2**43)
#: How far from an integer ns a double's ``x * 1000`` may lie and still be converted.
_FLOAT_NS_SLACK = 0.49


def us_floats_to_ns(
    us: npt.NDArray[np.float64],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """ns of µs times decoded as doubles, and where each is exact: equal to what
    :func:`text_ns` gives on the text the double was read from, whatever its digits.

    A double ``x`` read from a text of value ``d`` lies within an ULP of ``d``; below
    :data:`FLOAT_NS_LIMIT` ns that puts ``x * 1000`` within 0.003 of ``d * 1000``. So where
    ``x * 1000`` lies within 0.49 of an integer ``m``, ``d * 1000`` lies within 0.493 of it and
    rounds to ``m`` (no tie is that close). Elsewhere (NaN, large times such as absolute-epoch
    µs, texts that end half-way between two ns) the result is 0 and not exact: only the text
    can say.
    """
    with np.errstate(invalid="ignore", over="ignore"):
        ns = us * NS_PER_US
        whole = np.rint(ns)
        ok = (np.abs(ns) < FLOAT_NS_LIMIT) & (np.abs(ns - whole) <= _FLOAT_NS_SLACK)
    return np.where(ok, whole, 0.0).astype(np.int64), ok


def us_texts_to_ns(
    texts: Sequence[Any],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.uint8]]:
    """Exact int64 ns of JSON number texts in µs (bytes-like: ``bytes``, ``msgspec.Raw``;
    ``b"1712195495519689.047"``, ``b"-1.5e3"``), converted with numpy over their bytes, and
    each text's status: :data:`TEXT_OK`, :data:`TEXT_EMPTY` (``b""``, a field that is absent)
    or :data:`TEXT_BAD` (not a number, or outside ±:data:`NS_LIMIT`); ns is 0 where not OK.
    Results equal :func:`text_ns` on every text (rounding half to even); only texts of more
    than 19 significant digits or a 5-digit exponent, which no profiler writes, are converted
    one by one with it.

    The texts must be JSON (as a decoder's raw values are): a text of only number characters is
    then one well-formed number.
    """
    n = len(texts)
    if not n:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint8)
    # Each text prefixed with a '1' keeps an empty text or a leading zero ("0.5" -> "105") a JSON
    # integer once the '.' is dropped. One join serves every path: the texts' lengths are read
    # from its separators, not from the texts again (each pass over n objects costs more than
    # one over the joined bytes).
    digits = b"1" + b",1".join(texts)
    lens = _lengths(digits, texts)
    status = np.where(lens == 0, TEXT_EMPTY, TEXT_OK).astype(np.uint8)
    if not digits.translate(None, b"0123456789.,"):  # unsigned, no exponent: nearly every trace
        try:
            # (_plain raises before it writes to ``status``: the general path gets it as is)
            return _plain(digits, lens, status)
        except OverflowError:  # over 19 digits
            pass
    else:
        whole = _integers(texts)  # negative integers
        if whole is not None:
            return whole, np.zeros(n, dtype=np.uint8)
    if not lens.any():
        return np.zeros(n, dtype=np.int64), status
    return _general(texts, b"".join(texts), lens, status)


def _lengths(digits: bytes, texts: Sequence[Any]) -> npt.NDArray[np.int64]:
    """Length of each of ``texts``, joined into ``digits`` (each after a '1', joined by ','),
    read from the separators: a pass over the joined bytes instead of one over n objects. A
    number holds no ','; when some text does (no number, then), each text is measured."""
    n = len(texts)
    seps = np.flatnonzero(np.frombuffer(digits, dtype=np.uint8) == ord(","))
    if len(seps) != n - 1:
        return np.fromiter(map(len, texts), dtype=np.int64, count=n)
    bounds = np.empty(n + 1, dtype=np.int64)
    bounds[0] = -1
    bounds[1:-1] = seps
    bounds[-1] = len(digits)
    return np.diff(bounds) - 2  # less the separator and the '1'


def _integers(texts: Sequence[Any]) -> npt.NDArray[np.int64] | None:
    """ns of integer µs texts, none empty (Kineto before PyTorch 2.3), parsed by msgspec in one
    call; None for any other texts."""
    joined = b",".join(texts)
    if (
        not joined
        or joined.translate(None, b"0123456789,-")
        or b",," in joined
        or joined[:1] == b","
        or joined[-1:] == b","
    ):
        return None
    try:
        us = np.array(_INTS.decode(b"[" + joined + b"]"), dtype=np.int64)
    except OverflowError:
        return None
    if not int_us_in_range(us).all():
        return None  # (the general path marks them)
    return us * NS_PER_US


def _plain(
    digits: bytes, lens: npt.NDArray[np.int64], status: npt.NDArray[np.uint8]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.uint8]]:
    """:func:`us_texts_to_ns` of texts made of digits and at most one '.' each, given as
    ``digits`` (each text after a '1', joined by ','): by matrix products over the texts of
    each width (:func:`_by_width`), else parsed as integers by msgspec."""
    if lens.max() > _MAX_DIGITS + 1:
        raise OverflowError
    n = len(lens)
    fixed = _by_width(digits, lens)
    if fixed is not None:
        mant, decimals = fixed
        if (decimals == 3).all() and not (mant >= np.uint64(NS_LIMIT)).any():
            return mant.astype(np.int64), status  # µs with three decimals: the digits are ns
        if not decimals.any():
            return _int_us(mant, status)
        return _scale(mant, 3 - decimals, np.zeros(n, dtype=np.bool_), status)
    ends = np.cumsum(lens + 2) - 1  # where each text ends in ``digits``
    dots = np.flatnonzero(np.frombuffer(digits, dtype=np.uint8) == ord("."))
    if not len(dots):  # integer µs
        mant = np.array(_INTS.decode(b"[" + digits + b"]"), dtype=np.uint64) - _POW10[lens]
        return _int_us(mant, status)
    frac = np.zeros(n, dtype=np.int64)
    has_dot = np.zeros(n, dtype=np.bool_)
    at = np.searchsorted(ends, dots, side="right")
    frac[at] = ends[at] - dots - 1
    has_dot[at] = True
    ndigits = lens - has_dot
    if ndigits.max() > _MAX_DIGITS:
        raise OverflowError
    text = b"[" + digits.replace(b".", b"") + b"]"
    mant = np.array(_INTS.decode(text), dtype=np.uint64) - _POW10[ndigits]
    return _scale(mant, 3 - frac, np.zeros(n, dtype=np.bool_), status)


#: More widths than this in one call: parsed by msgspec instead (a gather per width).
_MAX_WIDTHS = 8


def _by_width(
    digits: bytes, lens: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]] | None:
    """Mantissas and decimal counts of the texts in ``digits`` (as in :func:`_plain`), taken
    as a matrix of digits per text width: a view of ``digits`` when all have one width (a
    chunk's ``ts`` nearly always), else a gather per width (``dur``). ~3x faster than parsing
    integers; None when the '.' moves within a width, or over :data:`_MAX_WIDTHS` widths."""
    n = len(lens)
    mant = np.zeros(n, dtype=np.uint64)
    decimals = np.full(n, 3, dtype=np.int64)  # (an empty text's: its status tells)
    groups: list[tuple[Any, npt.NDArray[np.uint8]]] = []
    width = int(lens[0])
    if width and (lens == width).all():
        rows = np.frombuffer(digits + b",", dtype=np.uint8).reshape(n, width + 2)[:, 1:-1]
        groups.append((slice(None), rows))
    else:
        widths = np.flatnonzero(np.bincount(lens))
        widths = widths[widths > 0]
        if len(widths) > _MAX_WIDTHS:
            return None
        raw = np.frombuffer(digits, dtype=np.uint8)
        starts = np.cumsum(lens + 2) - 1 - lens  # each text's first character in ``digits``
        for w in widths.tolist():
            where = np.flatnonzero(lens == w)
            groups.append((where, raw[starts[where, None] + np.arange(w)]))
    for where, rows in groups:
        got = _fixed_width(rows)
        if got is None:
            return None
        mant[where], decimals[where] = got
    return mant, decimals


def _fixed_width(rows: npt.NDArray[np.uint8]) -> tuple[npt.NDArray[np.uint64], int] | None:
    """Mantissas and decimal count of texts of one width (``rows``, one text's characters
    each) whose '.' is in one same place: each row's digits times powers of ten. None when
    the '.' moves; OverflowError over 19 digits."""
    width = rows.shape[1]
    cols = np.arange(width)
    decimals = 0
    at = np.flatnonzero(rows[0] == ord("."))
    if len(at):
        dot = int(at[0])
        if not (rows[:, dot] == ord(".")).all():
            return None  # (a number holds one '.': no row has another)
        cols = np.delete(cols, dot)
        decimals = width - dot - 1
    elif (rows == ord(".")).any():
        return None
    if len(cols) > _MAX_DIGITS:
        raise OverflowError
    mant = (rows[:, cols] - np.uint8(ord("0"))).astype(np.uint64) @ _POW10[len(cols) - 1 :: -1]
    return mant, decimals


def _int_us(
    mant: npt.NDArray[np.uint64], status: npt.NDArray[np.uint8]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.uint8]]:
    """ns of unsigned integer µs ``mant``; OverflowError when one is out of range."""
    if (mant > np.uint64(INT_US_LIMIT)).any():
        raise OverflowError  # (the general path tells which)
    return (mant * np.uint64(NS_PER_US)).astype(np.int64), status


def _scale(
    mant: npt.NDArray[np.uint64],
    shift: npt.NDArray[np.int64],
    neg: npt.NDArray[np.bool_],
    status: npt.NDArray[np.uint8],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.uint8]]:
    """``±mant * 10**shift`` rounded half to even, where ``status`` is OK; TEXT_BAD where that
    lies outside ±NS_LIMIT."""
    n = len(mant)
    fast = status == TEXT_OK
    out = np.zeros(n, dtype=np.uint64)
    bad = np.zeros(n, dtype=np.bool_)
    up = fast & (shift >= 0)
    k = np.clip(shift, 0, 19)
    limit = np.uint64(NS_LIMIT - 1)
    over = up & (mant != 0) & ((shift > 18) | (mant > limit // _POW10[k]))
    bad |= over
    mul = up & ~over
    out[mul] = mant[mul] * _POW10[k[mul]]
    down = fast & (shift < 0)
    k = np.clip(-shift, 0, 19)
    div = down & (-shift <= 19)  # beyond, below half a ns: mant < 10**19 <= 10**k / 10
    p = _POW10[k[div]]
    q, r = np.divmod(mant[div], p)
    half = p // np.uint64(2)
    q += (r > half) | ((r == half) & (q & np.uint64(1)).astype(np.bool_))
    out[div] = q
    bad |= fast & (out > limit)
    signed = np.where(bad, 0, np.minimum(out, limit).astype(np.int64))
    status[bad & fast] = TEXT_BAD
    return np.where(neg, -signed, signed), status


def _general(
    texts: Sequence[Any], joined: bytes, lens: npt.NDArray[np.int64], status: npt.NDArray[np.uint8]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.uint8]]:
    """:func:`us_texts_to_ns` of any JSON texts, byte by byte: signs, exponents, and texts
    that are no number (TEXT_BAD)."""
    n = len(texts)
    raw = np.frombuffer(joined, dtype=np.uint8)
    cls = _CLASS[raw]
    ends = np.cumsum(lens)
    starts = ends - lens
    tok = np.repeat(np.arange(n), lens)  # the text each byte belongs to
    pos = np.arange(len(raw)) - starts[tok]  # the byte's place in its text
    other = np.zeros(n, dtype=np.bool_)
    other[tok[cls == _OTHER]] = True
    # Where the mantissa ends (an exponent's 'e', else the end) and where its '.' is.
    mend = lens.copy()
    at = np.flatnonzero(cls == _EXP)
    mend[tok[at]] = pos[at]
    dot = np.full(n, -1, dtype=np.int64)
    at = np.flatnonzero(cls == _DOT)
    dot[tok[at]] = pos[at]
    minus = cls == _MINUS
    neg = np.zeros(n, dtype=np.bool_)
    neg[tok[minus & (pos == 0)]] = True
    exp_neg = np.zeros(n, dtype=np.bool_)
    exp_neg[tok[minus & (pos > 0)]] = True
    has_dot = dot >= 0
    frac = np.where(has_dot, mend - dot - 1, 0)
    signed_exp = (cls[np.minimum(starts + mend + 1, len(raw) - 1)] != _DIGIT) & (mend < lens)
    exp_digits = np.maximum(lens - mend - 1 - signed_exp, 0)
    slow = ~other & ((mend - neg - has_dot > _MAX_DIGITS) | (exp_digits > _MAX_EXP_DIGITS))
    # Each digit's power of ten: the digits after it in its mantissa, or in its exponent.
    mend_b, dot_b = mend[tok], dot[tok]
    in_mant = pos < mend_b
    rank = np.where(in_mant, mend_b - pos - 1 - (dot_b > pos), lens[tok] - pos - 1)
    use = (cls == _DIGIT) & ~(slow | other)[tok]
    value = np.zeros(len(raw) + 1, dtype=np.uint64)  # +1: reduceat's index of a last empty text
    value[:-1][use] = (raw[use] - 48).astype(np.uint64) * _POW10[rank[use]]
    mant_v = np.where(np.append(in_mant, False), value, 0).astype(np.uint64)
    exp_v = np.where(np.append(in_mant, True), 0, value).astype(np.uint64)
    empty = lens == 0
    mant = np.where(empty, 0, np.add.reduceat(mant_v, starts)).astype(np.uint64)
    expo = np.where(empty, 0, np.add.reduceat(exp_v, starts)).astype(np.int64)
    shift = np.where(exp_neg, -expo, expo) - frac + 3  # ns = mant * 10**shift
    status[other] = TEXT_BAD
    status[slow] = TEXT_EMPTY  # (converted below, not by _scale)
    ns, status = _scale(mant, shift, neg, status)
    for i in np.flatnonzero(slow).tolist():
        v = text_ns(bytes(texts[i]))
        status[i] = TEXT_BAD if v is None else TEXT_OK
        ns[i] = 0 if v is None else v
    return ns, status


def ns_to_us_text(ns: int) -> str:
    """Format integer nanoseconds as exact microseconds text (``"12.345"``, ``"-0.001"``)."""
    sign = "-" if ns < 0 else ""
    whole, frac = divmod(abs(ns), NS_PER_US)
    if frac == 0:
        return f"{sign}{whole}"
    return f"{sign}{whole}.{frac:03d}".rstrip("0")


def format_duration(ns: int | float) -> str:
    """Human-readable duration with an adaptive unit (``1.23 ms``)."""
    v = float(ns)
    a = abs(v)
    if a >= NS_PER_S:
        return f"{v / NS_PER_S:.3f} s"
    if a >= NS_PER_MS:
        return f"{v / NS_PER_MS:.3f} ms"
    if a >= NS_PER_US:
        return f"{v / NS_PER_US:.3f} µs"
    return f"{v:.0f} ns"
